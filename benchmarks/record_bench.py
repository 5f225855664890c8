"""Start-up overhead of `caisson record -- true` against `docker run --rm IMAGE true`.

Usage: python benchmarks/record_bench.py [--pairs 20]

Runs the two commands alternately (pairs), in one run, on the same chamber image.
Last line: ``startup_overhead_ratio=R median_ms=M`` where R is the median wall time of
`caisson record` over the median of `docker run`, and M the median of `caisson record`
in ms (target: R <= 3).

Run it after `make setup` (or `scripts/setup.sh`): it compiles caisson's bytecode, which
an environment with PYTHONDONTWRITEBYTECODE set would otherwise recompile on every start.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from caisson.chamber.image import build_image, image_tag  # noqa: E402


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.decode()[-500:]}")
    return elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=20)
    args = ap.parse_args()
    build_image("chamber")
    tag = image_tag("chamber")
    caisson = [sys.executable, "-m", "caisson.cli", "record"]
    work = Path(tempfile.mkdtemp(prefix="caisson-record-bench-"))
    ours, theirs = [], []
    try:
        timed(["docker", "run", "--rm", tag, "true"])  # warm the image and the engine
        for i in range(args.pairs):
            theirs.append(timed(["docker", "run", "--rm", "--network", "none", tag, "true"]))
            ours.append(timed([*caisson, "--out", str(work / f"run{i}"), "--", "true"]))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    m_ours, m_theirs = statistics.median(ours), statistics.median(theirs)
    print(f"docker run --rm: median {m_theirs * 1e3:.0f} ms (min {min(theirs) * 1e3:.0f})")
    print(f"caisson record:  median {m_ours * 1e3:.0f} ms (min {min(ours) * 1e3:.0f})")
    print(f"startup_overhead_ratio={m_ours / m_theirs:.2f} median_ms={m_ours * 1e3:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
