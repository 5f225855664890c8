"""`caisson tail PATH [--follow] [--kind K ...]`: print events as JSON lines.

Each line is ``{"seq", "ts_ns", "source", "kind", ...event fields}``. ``--follow``
keeps reading a ledger that is still being written and ends at its final seal.
Tail checks frames and the chain but not signatures: use `caisson verify` for trust.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ledger import Record

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tail", help="print a ledger's events as JSON lines")
    p.add_argument("path", help="a run directory or a ledger file")
    p.add_argument("--follow", "-f", action="store_true", help="keep reading until the final seal")
    p.add_argument("--kind", action="append", default=[], metavar="K",
                   help="only events of this kind (repeatable; a prefix such as 'process.' matches a family)")
    p.set_defaults(func=run)


def _matches(kind: str, wanted: list[str]) -> bool:
    return not wanted or any(kind == w or (w.endswith(".") and kind.startswith(w)) for w in wanted)


def run(args: argparse.Namespace) -> int:
    from caisson.run import record_json
    from ledger import follow_records, read_records
    from ledger.events import EVENT_KINDS, event_kind

    for k in args.kind:
        if k not in EVENT_KINDS and not k.endswith("."):
            print(f"caisson tail: --kind {k}: unknown kind; known: {', '.join(sorted(EVENT_KINDS))}",
                  file=sys.stderr)
            return 2
    records: Iterable[Record] = follow_records(args.path) if args.follow else read_records(args.path)
    out = sys.stdout.buffer
    try:
        for record in records:
            if _matches(event_kind(record.event), args.kind):
                out.write(record_json(record) + b"\n")
                if args.follow:
                    out.flush()
    except BrokenPipeError:
        return 0
    return 0
