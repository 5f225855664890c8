"""`caisson verify PATH [--key PUBKEY] [--json]`: check a ledger (or a study directory).

Exit codes: 0 intact and closed; 1 tampered (first bad record, offset, why; a fork names
the sequence number two records claim and both frames' offsets); 3 intact but not closed
(records after the last seal, torn frame cut; or a file that ends inside its header);
2 not a ledger (an empty file included), unreadable, or usage.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ledger import VerifyReport

__all__ = ["describe", "register", "run"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", help="verify a ledger against a trusted key")
    p.add_argument("path", help="a run directory, a ledger file, or a study directory")
    p.add_argument("--key", metavar="PUBKEY", help="trust this public key (default: the operator key)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)


def describe(report: VerifyReport) -> str:
    """The lines `caisson verify` prints for a report (`VerifyReport.describe`)."""
    return report.describe()


def run(args: argparse.Namespace) -> int:
    import msgspec

    from caisson.home import trusted_key
    from ledger import verify_ledger

    key = trusted_key(args.key)
    from caisson.study import is_study_dir

    if is_study_dir(args.path):
        return _run_study(args, key)
    report = verify_ledger(args.path, key)
    if args.json:
        out = msgspec.to_builtins(report)
        out["exit_code"] = report.exit_code
        sys.stdout.write(msgspec.json.encode(out).decode() + "\n")
    else:
        print(describe(report))
    return report.exit_code


def _run_study(args: argparse.Namespace, key) -> int:
    """A study directory: its study ledger and every run it binds (caisson.study.verify)."""
    import msgspec

    from caisson.study import verify_study

    report = verify_study(args.path, key)
    if args.json:
        out = msgspec.to_builtins(report)
        out["exit_code"] = report.exit_code
        sys.stdout.write(msgspec.json.encode(out).decode() + "\n")
        return report.exit_code
    word = {"ok": "OK", "tampered": "TAMPERED", "unclosed": "NOT CLOSED"}[report.status]
    print(f"{word} study {report.path}: {report.segments} study ledger segment(s), {report.runs_checked} run"
          " ledgers checked against it" + ("" if report.status != "unclosed" else
                                           "; the study is running or stopped (caisson study run --resume)"))
    for problem in report.problems:
        print(f"  {problem}")
    for note in report.notes:
        print(f"  note: {note}")
    if report.head:  # kept elsewhere, it tells this state from a rollback to an earlier one
        print(f"  study head {report.head}")
    return report.exit_code
