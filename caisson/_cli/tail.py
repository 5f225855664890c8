"""`caisson tail PATH [--follow] [--kind K ...] [--heads FILE]`: print events as JSON lines.

Each line is ``{"seq", "ts_ns", "source", "kind", ...event fields}``. ``--follow``
keeps reading a ledger that is still being written and ends at its final seal.
Tail checks frames and the chain but not signatures: use `caisson verify` for trust.
``--heads FILE`` appends each seal it reads to FILE, one JSON `ledger.HeldHead` a line
(``{"head": <seal>}``, the monitor stream's head lines), as it reads it: signed tree heads kept outside the ledger, so `caisson verify RUN --heads FILE`
can name a ledger cut below one of them truncated.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ledger import Record, Seal

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tail", help="print a ledger's events as JSON lines")
    p.add_argument("path", help="a run directory or a ledger file")
    p.add_argument("--follow", "-f", action="store_true", help="keep reading until the final seal")
    p.add_argument("--kind", action="append", default=[], metavar="K",
                   help="only events of this kind (repeatable; a prefix such as 'process.' matches a family)")
    p.add_argument("--heads", metavar="FILE", help="append each seal read (a signed tree head) to FILE as a JSON line")
    p.set_defaults(func=run)


def _matches(kind: str, wanted: list[str]) -> bool:
    return not wanted or any(kind == w or (w.endswith(".") and kind.startswith(w)) for w in wanted)


def run(args: argparse.Namespace) -> int:
    from caisson.run import record_json
    from ledger import encode_head, follow_records, read_records
    from ledger.events import EVENT_KINDS, event_kind

    for k in args.kind:
        if k not in EVENT_KINDS and not k.endswith("."):
            print(f"caisson tail: --kind {k}: unknown kind; known: {', '.join(sorted(EVENT_KINDS))}",
                  file=sys.stderr)
            return 2
    try:
        heads = open(args.heads, "ab") if args.heads else None  # noqa: SIM115 (closed below)
    except OSError as exc:
        print(f"caisson tail: --heads {args.heads}: cannot open: {exc.strerror}", file=sys.stderr)
        return 2

    def keep(seal: Seal) -> None:
        assert heads is not None
        heads.write(encode_head(seal) + b"\n")
        heads.flush()

    on_seal = keep if heads is not None else None
    records: Iterable[Record] = (follow_records(args.path, on_seal=on_seal) if args.follow
                                 else read_records(args.path, on_seal=on_seal))
    out = sys.stdout.buffer
    try:
        for record in records:
            if _matches(event_kind(record.event), args.kind):
                out.write(record_json(record) + b"\n")
                if args.follow:
                    out.flush()
    except BrokenPipeError:
        return 0
    finally:
        if heads is not None:
            heads.close()
    return 0
