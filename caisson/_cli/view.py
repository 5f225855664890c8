"""`caisson view PATH... [--host H] [--port N] [--key PUBKEY]`: a read-only web view.

Serves run and study directories on http://127.0.0.1:8765/ by default (localhost only
unless ``--host`` says otherwise; it prints where it listens and whether that is local).
Exit codes: 0 stopped with Ctrl-C; 2 a path is not a run or a study, or the port is taken.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

from caisson._signals import run_terminable

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("view", help="a read-only web view of runs and studies")
    p.add_argument("paths", nargs="+", metavar="PATH", help="run directories, study directories or folders of runs")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8765, help="TCP port (default 8765; 0 picks a free one)")
    p.add_argument("--key", metavar="PUBKEY", help="trust this public key (default: the operator key)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import trio

    from caisson.home import trusted_key
    from caisson.view import discover, serve

    key = trusted_key(args.key)
    paths = [Path(p) for p in args.paths]
    try:
        discover(paths)
    except FileNotFoundError as exc:
        print(f"caisson view: {exc}", file=sys.stderr)
        return 2

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            urls = await nursery.start(functools.partial(serve, paths, key, host=args.host, port=args.port))
            local = args.host in ("127.0.0.1", "::1", "localhost")
            scope = "localhost only" if local else f"bound to {args.host}: reachable from other machines"
            print(f"caisson view: serving {', '.join(urls)} ({scope}; read-only; Ctrl-C stops)", flush=True)

    failed: list[BaseException] = []
    try:
        run_terminable(main)
    except* KeyboardInterrupt:
        pass
    except* OSError as group:  # return is not allowed inside except*
        failed.extend(group.exceptions)
    if failed:
        print(f"caisson view: cannot listen on {args.host}:{args.port}: {failed[0]}", file=sys.stderr)
        return 2
    return 0
