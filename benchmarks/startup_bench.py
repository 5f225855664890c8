"""How fast `caisson` starts when it only prints help or a usage error, against ``python -c pass``.

Usage: python benchmarks/startup_bench.py [--runs N] [--only TEXT] [--tree DIR]

The cases are tests/_fixtures/startup.py's: ``caisson --help``, and for each command and
verb ``--help``, an unknown option and the bare command where it needs an argument. Each
runs as ``python -m caisson.cli ARGS`` in a fresh interpreter, N times, each run followed
by a baseline ``python -c pass``; per case it prints the median wall time, the ratio to the
median baseline of the whole sitting, and its import time (``-X importtime``: the sum of
every module's own time, one more run; the baseline's own, the interpreter's site, is printed
beside it). Last line: ``help_ratio=R baseline_ms=B worst=CASE``,
R the largest ratio (issue #34's target: R <= 6). ``--tree``: time the caisson of another
checkout (the same command lines), for a before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests._fixtures.startup import ROOT, startup_cases  # noqa: E402


def _in(tree: Path) -> dict:
    """subprocess.run's arguments that run python on ``tree``'s caisson (``-m`` puts the working
    directory first on the path, PYTHONPATH the rest)."""
    return {"env": {**os.environ, "PYTHONPATH": str(tree)}, "cwd": tree}


def wall(cmd: list[str], tree: Path) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **_in(tree))
    return time.perf_counter() - t


def import_us(args: list[str], tree: Path) -> int:
    """The sum of every module's own import time (us) of one ``python ARGS``."""
    err = subprocess.run([sys.executable, "-X", "importtime", *args], capture_output=True, **_in(tree)).stderr.decode()
    return sum(int(line.split("|")[0].split(":")[1]) for line in err.splitlines()
               if line.startswith("import time:") and line.split("|")[0].split(":")[1].strip().isdigit())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=9, help="runs per case (median), default 9")
    ap.add_argument("--only", default="", help="only the cases whose command line contains TEXT")
    ap.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose caisson is timed (default: this one)")
    args = ap.parse_args()
    tree = args.tree.resolve()
    cases = [argv for argv, _ in startup_cases() if args.only in " ".join(argv)]
    base_cmd = [sys.executable, "-c", "pass"]
    baseline: list[float] = []
    rows = []
    for argv in cases:
        ours = []
        for _ in range(args.runs):
            ours.append(wall([sys.executable, "-m", "caisson.cli", *argv], tree))
            baseline.append(wall(base_cmd, tree))
        imports = import_us(["-m", "caisson.cli", *argv], tree)
        rows.append((" ".join(argv) or "(no arguments)", statistics.median(ours), imports))
    base = statistics.median(baseline)
    print(f"python -c pass: median {base * 1e3:.1f} ms over {len(baseline)} runs,"
          f" imports {import_us(['-c', 'pass'], tree) / 1e3:.1f} ms")
    print(f"{'command line':44s} {'median ms':>9s} {'ratio':>6s} {'imports ms':>10s}")
    for name, median, imports in rows:
        print(f"{name:44s} {median * 1e3:9.1f} {median / base:6.2f} {imports / 1e3:10.1f}")
    worst = max(rows, key=lambda r: r[1])
    print(f"help_ratio={worst[1] / base:.2f} baseline_ms={base * 1e3:.1f} worst={worst[0].replace(' ', '_')}")


if __name__ == "__main__":
    main()
