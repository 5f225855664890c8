"""`caisson gc [--dry-run]`: list and remove what dead recorders left behind.

Chamber containers, run networks and scratch directories (sandbox and config home) whose
recorder is provably dead (see `caisson.chamber._reap`); anything else, things without a
recorder's labels among them, is left alone. One line per orphan on stderr: `reaped ...`,
`orphan ...` (with --dry-run) or `cannot reap ...`, and a summary line.

Exit codes: 0 every orphan removed (or listed, with --dry-run), also when there was none;
1 one could not be removed; 2 the engine is not reachable.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from caisson._signals import run_terminable

if TYPE_CHECKING:
    from caisson.chamber import Reaped

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("gc", help="list and remove chambers, networks and scratch dirs whose recorder is gone")
    p.add_argument("--dry-run", action="store_true", help="only list them")
    p.set_defaults(func=run)


async def _gc(dry_run: bool) -> list[Reaped]:
    from caisson.chamber import open_engine, reap

    async with open_engine() as engine:
        return await reap(engine, dry_run=dry_run)


def run(args: argparse.Namespace) -> int:
    found = run_terminable(_gc, args.dry_run)
    for r in found:
        print(f"caisson gc: {r.line()}", file=sys.stderr)
    failed = sum(1 for r in found if r.error)
    verb = "found" if args.dry_run else "reaped"
    print(f"caisson gc: {verb} {len(found) - failed} orphan(s)" + (f", {failed} not removed" if failed else ""),
          file=sys.stderr)
    return 1 if failed else 0
