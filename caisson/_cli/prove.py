"""`caisson prove RUN_DIR --seq N [--seq M ...] --out PROOF [--blobs] [--study DIR]`: a proof file.

The file holds the records themselves, each with its RFC 9162 inclusion proof against the
ledger's last signed tree head (with ``--study``, the seal the study ledger bound for that
cell, and the study ledger's ``cell.ended`` binding it, proven the same way), the seal and
its signature, the run id and the key's fingerprint; ``--blobs`` adds the blobs the records
name. `caisson verify PROOF --key PUB` checks it with nothing else. Fields of a record cannot
be withheld: a leaf is the record's whole bytes (README, "Proofs").

Exit codes: 0 written; 2 usage, I/O, a ledger that does not verify or cannot prove them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("prove", help="prove records of a ledger to a third party, without the rest of it")
    p.add_argument("path", help="a run directory or a ledger file (format version 3)")
    p.add_argument("--seq", type=int, action="append", required=True, metavar="N", help="a record to prove (repeatable)")
    p.add_argument("--out", type=Path, required=True, metavar="PROOF", help="the proof file to write")
    p.add_argument("--blobs", action="store_true", help="include the blobs the proven records name")
    p.add_argument("--study", type=Path, metavar="DIR",
                   help="the study the run is a cell of: add the study ledger record binding its seal")
    p.add_argument("--key", metavar="PUBKEY", help="the key the ledger must verify with (default: the operator key)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from caisson.errors import UsageError
    from caisson.home import trusted_key
    from ledger import PROOF_VERSION, Proof, encode_proof, prove

    key = trusted_key(args.key)
    if args.study is not None:
        from caisson.study import prove_cell

        proof = prove_cell(args.study, Path(args.path), args.seq, key, blobs=args.blobs)
    else:
        proof = Proof(proof_version=PROOF_VERSION, run=prove(Path(args.path), args.seq, key, blobs=args.blobs))
    try:
        args.out.write_bytes(encode_proof(proof))
    except OSError as exc:
        raise UsageError(f"{args.out}: cannot write: {exc.strerror}") from None
    study = f", bound by study ledger {proof.study.run_id}" if proof.study else ""
    print(f"wrote {args.out}: run {proof.run.run_id}, records {', '.join(map(str, args.seq))} of a signed tree head"
          f" of {proof.run.seal.upto} records{study} ({args.out.stat().st_size} bytes)")
    return 0
