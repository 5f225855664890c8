"""`caisson verify PATH [--key PUBKEY] [--json]`: check a ledger (or a study directory).

Exit codes: 0 intact and closed; 1 tampered (first bad record, offset, why; a fork names
the sequence number two records claim and both frames' offsets); 3 intact but not closed
(records after the last seal, torn frame cut; or a file that ends inside its header);
2 not a ledger (an empty file included), unreadable, or usage.
"""

from __future__ import annotations

import argparse
import sys

import msgspec

from caisson.home import trusted_key
from ledger import VerifyReport, verify_ledger


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", help="verify a ledger against a trusted key")
    p.add_argument("path", help="a run directory, a ledger file, or a study directory")
    p.add_argument("--key", metavar="PUBKEY", help="trust this public key (default: the operator key)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)


def describe(report: VerifyReport) -> str:
    """Human-readable lines for a verify report: one, and one per detail that applies
    (records verified before a failure, the two frames of a fork, a format version's note)."""
    lines = []
    if report.status == "ok":
        lines.append(
            f"OK {report.path}: run {report.run_id}, {report.records} records sealed and closed,"
            f" signed by {report.key_fingerprint}, {report.blobs_checked} blobs checked"
        )
    elif report.status == "tampered":
        where = f" at byte {report.bad_offset}" if report.bad_offset is not None else ""
        lines.append(f"TAMPERED {report.path}: first bad record seq {report.bad_seq}{where}: {report.reason}")
        if report.fork_seq is not None and report.fork_offsets is not None:
            first, second = report.fork_offsets
            lines.append(f"  fork: two records claim seq {report.fork_seq}, in the frames at byte {first}"
                         f" and byte {second}")
        if report.sealed:
            lines.append(f"  records 0..{report.sealed - 1} verified before it")
    elif report.run_id is None:
        lines.append(
            f"NOT CLOSED {report.path}: the file ends inside its header ({report.torn_bytes} bytes):"
            " no records; a crash as the ledger was created"
        )
    else:
        torn = f"a torn frame of {report.torn_bytes} bytes was cut" if report.torn_bytes else "no torn frame"
        lines.append(
            f"NOT CLOSED {report.path}: run {report.run_id}, {report.sealed} records sealed and intact;"
            f" {report.unsealed} records follow the last seal; {torn}; no final seal (crash or still running)"
        )
    if report.note:
        lines.append(f"  note: {report.note}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
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
    return report.exit_code
