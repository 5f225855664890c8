"""`caisson selftest [--out DIR]`: show every detector fires on its probe and not on the honest one.

Prints the detector x probe matrix, and keeps its verdict on the syscall witness in the
caisson home, where `caisson record` picks its default witness
(`caisson.run.witness_choice`). Exit codes: 0 every detector discriminates; 1 some
detector never fired on its probe or fired on the honest run; 2 the chamber cannot run.
"""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("selftest", help="run the known-bad probes and print the detector x probe matrix")
    p.add_argument("--out", type=Path, help="keep the runs here (default: a temporary folder, removed at the end)")
    p.add_argument("--syscall-witness", choices=["strace", "ebpf", "both"], default="strace",
                   help="the syscall witness of every run (default strace)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from caisson.detectors import DEFAULT_DETECTORS
    from caisson.probes import CASES, LEAK_BACKSTOP, run_selftest
    from caisson.run import outcome_path

    console = Console(width=160)
    result = run_selftest(args.out, progress=lambda line: console.print(line, highlight=False),
                          syscall=args.syscall_witness)
    cases = [c for c in CASES if c.name in result.cases]
    table = Table(box=None, pad_edge=False)
    table.add_column("detector", no_wrap=True)
    for case in cases:
        table.add_column(case.name.replace("/", "/\n"), justify="center")
    for name in [n for n, _ in DEFAULT_DETECTORS] + [LEAK_BACKSTOP]:
        cells = []
        for case in cases:
            hit = name in result.fired[case.name]
            expected = name in case.expect
            cells.append(("FIRES" if hit else "-") + (" (expected)" if expected and hit else
                                                      " (MISSED)" if expected else ""))
        table.add_row(name, *cells)
    console.print(table)
    for name, verdict in result.gating.items():  # each gating kind on its real agent
        console.print(f"gating {name}: {verdict.agent} {verdict.version} claims {verdict.claimed},"
                      f" measured {verdict.measured}: {verdict.reason}", highlight=False)
    for line in result.failures:
        console.print(f"FAIL {line}", highlight=False)
    console.print(f"verdict on --syscall-witness {args.syscall_witness} kept in {outcome_path()}", highlight=False)
    console.print("selftest passed" if not result.failures else f"selftest failed: {len(result.failures)} problem(s)")
    return 0 if not result.failures else 1
