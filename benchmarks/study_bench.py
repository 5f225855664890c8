"""Overhead of a study against the same cells recorded one by one.

Usage: python benchmarks/study_bench.py [--cells 8] [--rounds 2]

A study of N trivial cells (a grep probe, one arm, one question, N repetitions; its
preflight baseline, study ledger, replay of every cell and verify-ready binding
included) against N sequential `caisson record` runs of the same cells (each its own
process, as a script driving the recorder would), alternately, ``rounds`` times, on the
chamber image. Last line: ``study_overhead_ratio=R study_s=S records_s=T`` where R is the
median wall time of `caisson study run` over the median of the N records (target: R <= 1.10).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from caisson.chamber.image import build_image  # noqa: E402
from caisson.probes import make_probe_repo  # noqa: E402

SCENARIO = """name = "study-bench"
[[questions]]
id = "where-answer"
prompt = "In which file of this tree is the function `answer` defined?"
required = [{ subject = "answer", pattern = "src/app.py" }]
[[exclusions]]
category = "answer_key"
globs = ["benchmark/**"]
[[arms]]
name = "plain"
"""
COMMAND = ["sh", "-c", "grep -rn 'def answer' src"]


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.decode()[-500:]}")
    return elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    build_image("chamber")
    work = Path(tempfile.mkdtemp(prefix="caisson-study-bench-"))
    cli = [sys.executable, "-m", "caisson.cli"]
    studies, records = [], []
    try:
        repo = make_probe_repo(work)
        (work / "scenario.toml").write_text(SCENARIO)
        study = work / "study.toml"
        command = ", ".join(json.dumps(part) for part in COMMAND)
        study.write_text(f'name = "bench"\nscenario = "scenario.toml"\nrepetitions = {args.cells}\n'
                         f'[[agents]]\nname = "grep"\ncommand = [{command}]\n')
        timed([*cli, "record", "--out", str(work / "warm"), "--", "true"])
        for r in range(args.rounds):
            studies.append(timed([*cli, "study", "run", str(study), "--out", str(work / f"study{r}"),
                                  "--repo", str(repo)]))
            t = 0.0
            for i in range(args.cells):
                t += timed([*cli, "record", "--scenario", str(work / "scenario.toml"), "--repo", str(repo),
                            "--question", "where-answer", "--out", str(work / f"rec{r}-{i}"), "--", *COMMAND])
            records.append(t)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    m_study, m_records = statistics.median(studies), statistics.median(records)
    print(f"study of {args.cells} cells: median {m_study:.2f} s ({', '.join(f'{s:.2f}' for s in studies)})")
    print(f"{args.cells} records:        median {m_records:.2f} s ({', '.join(f'{s:.2f}' for s in records)})")
    print(f"study_overhead_ratio={m_study / m_records:.2f} study_s={m_study:.2f} records_s={m_records:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
