"""Overhead of the strace witness on a syscall-heavy workload in the chamber.

Usage: python benchmarks/witness_bench.py [--pairs 5]

The workload (``git grep`` over a real source tree, this repository's HEAD as the
sandbox, and ``python3 -c 'import email, json, asyncio'`` repeated) runs in the chamber
with and without the strace witness, pairs alternated, in one run. For comparison, the
same with strace but without ``--seccomp-bpf``. Each timing is the command's own wall
time as the chamber reports it (run.ended), so start-up of caisson itself is excluded.
Last line: ``strace_overhead_ratio=R events=N events_per_s=E`` (target R <= 1.5).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from caisson.chamber.image import build_image  # noqa: E402
from caisson.run.record import RecordOptions, record  # noqa: E402
from caisson.run.witnesses import ProcfsWitness, StraceWitness  # noqa: E402
from ledger import read_records  # noqa: E402
from ledger.events import RunEnded  # noqa: E402

WORKLOAD = ("for i in 1 2 3 4 5; do git grep -n -e def -e import > /dev/null; "
            "python3 -c 'import email, json, asyncio'; done")


def one(work: Path, name: str, witnesses: list) -> tuple[float, int]:
    run_dir = work / name
    record(RecordOptions(command=["sh", "-c", WORKLOAD], repo=ROOT, out=run_dir, timeout_s=300), witnesses=witnesses)
    records = list(read_records(run_dir))
    end = next(r.event for r in reversed(records) if isinstance(r.event, RunEnded))
    traced = sum(1 for r in records if r.source == "strace")
    return end.duration_ns / 1e9, traced


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=5)
    args = ap.parse_args()
    build_image("chamber")
    work = Path(tempfile.mkdtemp(prefix="caisson-witness-bench-"))
    plain, traced, unfiltered, events = [], [], [], []
    try:
        one(work, "warmup", [])
        for i in range(args.pairs):
            plain.append(one(work, f"plain{i}", [ProcfsWitness()])[0])
            t, n = one(work, f"strace{i}", [StraceWitness(), ProcfsWitness()])
            traced.append(t)
            events.append(n)
            unfiltered.append(one(work, f"noseccomp{i}", [StraceWitness(seccomp=False), ProcfsWitness()])[0])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    m_plain, m_traced, m_unf = (statistics.median(x) for x in (plain, traced, unfiltered))
    n = int(statistics.median(events))
    print(f"workload without strace: median {m_plain * 1e3:.0f} ms over {args.pairs} runs")
    print(f"with strace --seccomp-bpf: median {m_traced * 1e3:.0f} ms ({m_traced / m_plain:.2f}x), {n} events")
    print(f"with strace, no seccomp filter: median {m_unf * 1e3:.0f} ms ({m_unf / m_plain:.2f}x)")
    print(f"strace_overhead_ratio={m_traced / m_plain:.2f} events={n} events_per_s={n / m_traced:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
