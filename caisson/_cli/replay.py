"""`caisson replay RUN_DIR ... [--out FILE] [--json] [--key PUB]`: findings and scores, offline.

Writes ``findings.json`` beside each run (never into the ledger) and prints a table:
status ``clean`` or ``void`` with reasons, the score, and every figure the rebuild from raw
blobs changed (``rebuilt: ...``). Exit codes: 0 every run
verified; 1 some run did not verify; 2 usage.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.table import Table

    from caisson.replay import RunReplay

__all__ = ["register", "run", "table"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("replay", help="recompute findings and scores from sealed runs")
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR")
    p.add_argument("--out", type=Path, metavar="FILE", help="also write all results to FILE (JSON)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--key", metavar="PUBKEY", help="trust this public key (default: the operator key)")
    p.set_defaults(func=run)


def _score(value: float | None) -> str:
    return "null" if value is None else f"{value:.2f}"


def table(results: list[RunReplay]) -> Table:
    """A rich table: one row per run, reasons and attempts underneath."""
    from rich.table import Table

    t = Table(show_lines=False, box=None, pad_edge=False)
    for col in ("run", "question", "status", "score", "if clean", "findings"):
        t.add_column(col, overflow="fold")
    for r in results:
        status = r.status if r.verified == "ok" else f"unverified ({r.verified})"
        notes = r.reasons or [f"{f.kind}: {f.message}" for f in r.findings]
        if r.rederived is not None:  # figures today's parsers and rules read differently from the live ones
            notes = notes + [f"rebuilt: {change}" for change in r.rederived.changed]
        if r.tool_audit not in (None, "audited"):  # weaker than no violation: said first
            notes = [f"tool_audit: {r.tool_audit}", *notes]
        notes = notes or ["-"]
        if r.verified != "ok":
            notes = [r.verify_detail]
        t.add_row(Path(r.run_dir).name, r.question_id or "-", status, _score(r.score), _score(r.score_if_clean),
                  "\n".join(notes[:8]) + (f"\n... {len(notes) - 8} more" if len(notes) > 8 else ""))
    return t


def run(args: argparse.Namespace) -> int:
    import msgspec
    from rich.console import Console

    from caisson.home import trusted_key
    from caisson.replay import check_replayable, replay_runs

    for run_dir in args.runs:
        check_replayable(run_dir)
    results = replay_runs(args.runs, trusted_key(args.key))
    encoded = msgspec.json.format(msgspec.json.encode(results))
    if args.out:
        args.out.write_bytes(encoded + b"\n")
    if args.json:
        sys.stdout.write(encoded.decode() + "\n")
    else:
        Console(width=160).print(table(results))
    return 0 if all(r.verified == "ok" for r in results) else 1
