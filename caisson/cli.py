"""The `caisson` command line: a thin dispatcher over one module per command.

Exit codes (all commands): 0 ok; 1 a finding (tampered ledger, failed check);
2 usage or I/O error; 3 `verify`: intact but not closed; 124 `record`: timeout.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from caisson import __version__
from caisson.errors import CaissonError

EXIT_OK = 0
EXIT_FINDING = 1
EXIT_USAGE = 2

_COMMANDS = ("keygen", "verify", "tail", "record", "replay", "selftest", "image", "demo")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every available command registered."""
    parser = argparse.ArgumentParser(prog="caisson", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"caisson {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMANDS:
        try:
            module = importlib.import_module(f"caisson._cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"caisson._cli.{name}":
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code (also used as the console script)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(args.func(args))
    except CaissonError as exc:
        print(f"caisson {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
