"""Overhead of the syscall witnesses (strace, eBPF) on agent-shaped work in the chamber.

Usage: python benchmarks/witness_bench.py [--pairs 3] [--witness strace] [--witness ebpf] [--quick]

Agents' tools are searches, git, file scans and bursts of short processes, so those are
the workloads (the sandbox is this repository's HEAD, a real source tree):

- ``search``: ``rg -n "def " .`` and ``git grep -n "class "``, repeated;
- ``git``: ``git log --stat`` and ``git status``, repeated;
- ``scan``: ``find /usr -type f -print0 | xargs -0 cat > /dev/null`` (every file opened);
- ``forkexec``: a build-like burst of ``/bin/true`` and ``sh -c 'echo x | wc -c'``.

Each cell runs with no witness and with each witness, the order alternated in every pair,
all in one run. The time is the workload's own wall time, measured inside the chamber
(``date +%s%N`` before and after, printed on stdout), so the chamber's start-up and the
witness's attach time are excluded: the ratio is what the witness costs the agent's work.
Beside it, the workload's CPU time (user + system of its processes, the shell's ``times``):
a BPF program runs in the traced task's context, so its cost is in there, and CPU time is
less shaken than wall time by other work on a shared machine. The eBPF witness runs the
backend `caisson.run.ebpf.EbpfWitness` picks (the libbpf loader when built); ``--ebpf-backend``
forces one, and the output names it.
Output: one line per workload and witness with the medians and their ratio, then one line
per witness with its worst workload, and last ``witness_overhead_ratio=R witness=W
workload=X`` for the first witness named (target: R <= 1.5).

``--quick`` shrinks every workload and runs one pair: a smoke test of the benchmark itself,
its figures are not meaningful.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from caisson.chamber.image import build_image  # noqa: E402
from caisson.run.record import RecordOptions, record  # noqa: E402
from caisson.run.witnesses import StraceWitness  # noqa: E402
from ledger import BlobStore, read_records  # noqa: E402
from ledger.events import BlobStored, RunEnded, WitnessGap  # noqa: E402

# name -> (full workload, quick workload); POSIX sh, run in the sandbox.
WORKLOADS: dict[str, tuple[str, str]] = {
    "search": ('for i in $(seq 20); do rg -n "def " . > /dev/null; git grep -n "class " > /dev/null; done',
               'for i in 1 2; do rg -n "def " . > /dev/null; git grep -n "class " > /dev/null; done'),
    "git": ("for i in $(seq 10); do git log --stat -n 100 > /dev/null; git status --short > /dev/null; done",
            "git log --stat -n 20 > /dev/null; git status --short > /dev/null"),
    "scan": ("for i in 1 2 3; do find /usr -type f -print0 | xargs -0 cat > /dev/null; done",
             "find /usr/lib/python3.11 -type f -print0 | xargs -0 cat > /dev/null"),
    "forkexec": ("for i in $(seq 300); do /bin/true; done; for i in $(seq 100); do sh -c 'echo x | wc -c' > /dev/null; done",
                 "for i in $(seq 30); do /bin/true; done; for i in $(seq 10); do sh -c 'echo x | wc -c' > /dev/null; done"),
}
_TIMED = "s=$(date +%s%N); {work}; e=$(date +%s%N); echo BENCH_NS=$((e - s)); times"
_BENCH_NS = re.compile(rb"BENCH_NS=(\d+)")
_CHILDREN_CPU = re.compile(rb"(\d+)m([\d.]+)s (\d+)m([\d.]+)s\s*$")  # times' last line: children's user, system


def make_witness(name: str, ebpf_backend: str | None = None):
    """A fresh witness object by name (a witness holds per-run state); ``ebpf_backend``:
    the eBPF witness's (None: libbpf when its loader is built)."""
    if name == "strace":
        return StraceWitness()
    if name == "ebpf":
        from caisson.run.ebpf import EbpfWitness

        return EbpfWitness(backend=ebpf_backend)
    raise SystemExit(f"unknown witness {name!r}: strace or ebpf")


def one(work: Path, name: str, script: str, witness: str | None, ebpf_backend: str | None = None
        ) -> tuple[float, float]:
    """Run ``script`` once in the chamber; its own (wall time, CPU time) in seconds.

    Raises:
        SystemExit: the run failed, the workload printed no time, or a witness had a gap
            (a figure from a witness that lost evidence would flatter it).
    """
    run_dir = work / name
    outcome = record(RecordOptions(command=["sh", "-c", _TIMED.format(work=script)], repo=ROOT, out=run_dir,
                                   timeout_s=600), witnesses=[make_witness(witness, ebpf_backend)] if witness else [])
    events = [r.event for r in read_records(run_dir)]
    end = next(e for e in reversed(events) if isinstance(e, RunEnded))
    gaps = [e for e in events if isinstance(e, WitnessGap)]
    if end.status != "completed" or end.exit_code != 0 or gaps:
        raise SystemExit(f"{name}: {end.status} exit {end.exit_code} {end.reason} gaps={gaps} ({outcome.run_dir})")
    stdout = next(e for e in events if isinstance(e, BlobStored) and e.role == "stdout")
    out = BlobStore(run_dir / "blobs").get(stdout.sha256)
    m, cpu = _BENCH_NS.search(out), _CHILDREN_CPU.search(out)
    if m is None or cpu is None:
        raise SystemExit(f"{name}: the workload printed no BENCH_NS or times ({run_dir})")
    return int(m[1]) / 1e9, int(cpu[1]) * 60 + float(cpu[2]) + int(cpu[3]) * 60 + float(cpu[4])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3, help="alternated pairs per workload (default 3)")
    ap.add_argument("--witness", action="append", choices=["strace", "ebpf"],
                    help="witness to measure (repeatable; default strace); the first one names the last line")
    ap.add_argument("--workload", action="append", choices=sorted(WORKLOADS), help="default: all")
    ap.add_argument("--quick", action="store_true", help="small workloads, one pair: a smoke test")
    ap.add_argument("--ebpf-backend", choices=["libbpf", "bpftrace"],
                    help="the eBPF witness's backend (default: libbpf when its loader is built)")
    args = ap.parse_args()
    if "ebpf" in (args.witness or []):
        from collectors.ebpf import ebpf_program

        print(f"ebpf backend: {ebpf_program(args.ebpf_backend).backend}")
    witnesses = args.witness or ["strace"]
    names = args.workload or list(WORKLOADS)
    pairs = 1 if args.quick else args.pairs
    build_image("chamber")
    work = Path(tempfile.mkdtemp(prefix="caisson-witness-bench-"))
    times: dict[tuple[str, str], list[tuple[float, float]]] = {}
    try:
        one(work, "warmup", "true", None)
        for i in range(pairs):
            for wl in names:
                script = WORKLOADS[wl][1 if args.quick else 0]
                order = [None, *witnesses]
                for w in order if i % 2 == 0 else order[::-1]:
                    label = w or "none"
                    try:
                        t = one(work, f"{wl}-{label}-{i}", script, w, args.ebpf_backend)
                    except SystemExit as exc:  # e.g. a chamber killed from outside: retried once, said
                        print(f"retrying once: {exc}", file=sys.stderr)
                        t = one(work, f"{wl}-{label}-{i}-retry", script, w, args.ebpf_backend)
                    times.setdefault((wl, label), []).append(t)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    worst: dict[str, tuple[float, str]] = {}
    for wl in names:
        base = statistics.median(t for t, _ in times[(wl, "none")])
        base_cpu = statistics.median(c for _, c in times[(wl, "none")])
        for w in witnesses:
            m = statistics.median(t for t, _ in times[(wl, w)])
            cpu = statistics.median(c for _, c in times[(wl, w)])
            ratio = m / base
            print(f"{wl:9s} {w:6s}: median {m * 1e3:8.0f} ms against {base * 1e3:8.0f} ms with no witness"
                  f" ({ratio:.2f}x, {pairs} pairs); CPU {cpu * 1e3:8.0f} ms against {base_cpu * 1e3:8.0f} ms"
                  f" ({cpu / base_cpu if base_cpu else float('nan'):.2f}x)")
            if ratio > worst.get(w, (0.0, ""))[0]:
                worst[w] = (ratio, wl)
    for w in witnesses:
        print(f"{w}: worst {worst[w][0]:.2f}x on {worst[w][1]}")
    ratio, wl = worst[witnesses[0]]
    print(f"witness_overhead_ratio={ratio:.2f} witness={witnesses[0]} workload={wl}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
