"""`caisson image build [--name chamber] [--force]`: build a chamber image offline.

Exit codes: 0 the image exists (built now or cached), 2 usage or IO error (engine down,
debootstrap missing, build failed); the cause and fix are printed on stderr.
"""

from __future__ import annotations

import argparse
import sys

from caisson.errors import ChamberError

__all__ = ["EXIT_OK", "EXIT_USAGE", "register", "run"]

EXIT_OK = 0
EXIT_USAGE = 2


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `image` command and its `build` subcommand to the caisson parser.

    Args:
        subparsers: the top-level parser's subparsers; each leaf sets `func=run`.
    """
    parser = subparsers.add_parser("image", help="build chamber images from images/<name>/")
    sub = parser.add_subparsers(dest="image_command", metavar="{build}")
    sub.required = True
    build = sub.add_parser(
        "build",
        help="build an image unless its recipe tag exists (debootstrap; needs root)",
    )
    build.add_argument(
        "--name", default="chamber", help="recipe folder under images/ (default: chamber)"
    )
    build.add_argument("--force", action="store_true", help="rebuild even if the tag exists")
    build.add_argument("--quiet", "-q", action="store_true", help="do not echo the build log")
    build.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Build (or find cached) the image named by `args.name`; print its tag and id.

    Args:
        args: parsed arguments with `name`, `force` and `quiet`.

    Returns:
        0 when the image exists, 2 on any error (message on stderr).
    """
    from caisson.chamber import build_image, image_tag

    log = (
        (lambda line: None)
        if getattr(args, "quiet", False)
        else (lambda line: print(line, file=sys.stderr, flush=True))
    )
    try:
        tag = image_tag(args.name)
        image_id = build_image(args.name, force=args.force, log=log)
    except ChamberError as exc:
        print(f"caisson image build: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(f"caisson image build: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"{tag} {image_id}")
    return EXIT_OK
