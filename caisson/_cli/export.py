"""`caisson export RUN_DIR|STUDY_DIR --format inspect|atif --out PATH [--key PUBKEY]`.

``inspect``: one Inspect AI eval log (samples = runs; ``.eval`` or ``.json`` by the
suffix of PATH). ``atif``: one Harbor ATIF trajectory JSON per run (PATH itself for one
run ending in ``.json``, else PATH/<run_id>.json). Each names the ledger head it came from.
Exit codes: 0 written, every ledger verified; 1 written, some ledger did not verify (its
export says so); 2 no run at the path, or unreadable.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="export runs to Inspect AI eval logs or Harbor ATIF trajectories")
    p.add_argument("path", help="a run directory, or a study directory (its cells)")
    p.add_argument("--format", required=True, choices=["inspect", "atif"])
    p.add_argument("--out", required=True, help="the file (inspect; atif for one run) or directory (atif) to write")
    p.add_argument("--key", metavar="PUBKEY", help="trust this public key (default: the operator key)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from caisson.export import read_run, run_dirs, write_atif, write_inspect
    from caisson.home import trusted_key

    key = trusted_key(args.key)
    try:
        dirs = run_dirs(Path(args.path), key)
    except FileNotFoundError as exc:
        print(f"caisson export: {exc}", file=sys.stderr)
        return 2
    runs = [read_run(d, key) for d in dirs]
    out = Path(args.out)
    if args.format == "inspect":
        try:
            written = [write_inspect(runs, out, task=Path(args.path).resolve().name)]
        except ModuleNotFoundError as exc:
            print(f"caisson export: --format inspect needs inspect-ai ({exc}): pip install inspect-ai", file=sys.stderr)
            return 2
    else:
        written = write_atif(runs, out)
    for path in written:
        print(f"wrote {path}")
    bad = [r for r in runs if r.verified != "ok"]
    for r in bad:
        print(f"caisson export: {r.run_dir}: ledger {r.verified}: {r.verify_reason or ''} (the export says so)",
              file=sys.stderr)
    return 1 if bad else 0
