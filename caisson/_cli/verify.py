"""`caisson verify PATH [--key PUBKEY] [--heads FILE] [--json]`: check a ledger, a study
directory, or a proof file (`caisson prove`).

Exit codes: 0 intact and closed (a proof: every check holds); 1 tampered (first bad record,
offset, why; a fork names the sequence number two records claim and both frames' offsets),
truncated (cut below a signed head held in ``--heads FILE``, naming its size; an emptied
file, or one cut inside its header, too), or a proof
that fails (naming each failing field); 3 intact but not closed (records after the last
seal, torn frame cut; or a file that ends inside its header); 2 not a ledger (an empty file
included, when no head is held), unreadable, a bad heads file, a proof file not in canonical
form, or usage.
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
    p.add_argument("path", help="a run directory, a ledger file, a study directory, or a proof file")
    p.add_argument("--key", metavar="PUBKEY", action="append",
                   help="trust this public key (default: the operator key); a proof may name several")
    p.add_argument("--study-key", metavar="PUBKEY",
                   help="a study proof: the key its study ledger must be signed with (default: --key, when given once)")
    p.add_argument("--heads", metavar="FILE",
                   help="signed heads a monitor kept (caisson tail --heads): the ledger must be consistent with each")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)


def describe(report: VerifyReport) -> str:
    """The lines `caisson verify` prints for a report (`VerifyReport.describe`)."""
    return report.describe()


def run(args: argparse.Namespace) -> int:
    from caisson.errors import UsageError
    from caisson.home import trusted_key
    from ledger import is_proof, load_heads, verify_ledger

    keys = [trusted_key(path) for path in args.key] if args.key else [trusted_key(None)]
    if is_proof(args.path):
        return _run_proof(args, keys)
    if args.study_key:
        raise UsageError("--study-key applies to a study proof, not a ledger or a study directory")
    if len(keys) > 1:
        raise UsageError("--key once, except for a proof file")
    key = keys[0]
    from caisson.study import is_study_dir

    if is_study_dir(args.path):
        if args.heads:
            raise UsageError("--heads applies to a run's ledger, not a study directory")
        return _run_study(args, key)
    heads = load_heads(args.heads) if args.heads else None
    report = verify_ledger(args.path, key, heads=heads, heads_path=args.heads or "<heads>")
    if args.json:
        import msgspec

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


def _run_proof(args: argparse.Namespace, keys) -> int:
    """A proof file: `ledger.verify_proof` with nothing but the trusted keys."""
    import msgspec

    from caisson.errors import UsageError
    from ledger import read_proof, verify_proof

    if args.heads:
        raise UsageError("--heads applies to a run's ledger, not a proof")
    from caisson.home import trusted_key

    proof = read_proof(args.path)
    if args.study_key and proof.study is None:
        raise UsageError(f"--study-key: {args.path} is a proof of a run alone (no study part)")
    study_keys = [trusted_key(args.study_key)] if args.study_key else None
    report = verify_proof(proof, keys, path=args.path, study_trusted=study_keys)
    if args.json:
        out = msgspec.to_builtins(report)
        out["exit_code"] = report.exit_code
        sys.stdout.write(msgspec.json.encode(out).decode() + "\n")
    else:
        print(report.describe())
    return report.exit_code
