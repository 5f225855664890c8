"""Overhead of a study against the same cells recorded one by one.

Usage: python benchmarks/study_bench.py [--cells 8] [--rounds 2] [--executor local|ray]

A study of N trivial cells (a grep probe, one arm, one question, N repetitions; its
preflight baseline, study ledger, replay of every cell and verify-ready binding
included) against N sequential `caisson record` runs of the same cells (each its own
process, as a script driving the recorder would), alternately, ``rounds`` times, on the
chamber image. Last line: ``study_overhead_ratio=R study_s=S records_s=T`` where R is the
median wall time of `caisson study run` over the median of the N records (target: R <= 1.10).

With ``--executor ray``: the same study run with ``--executor ray --address`` against a
one-host Ray cluster started here once (one ``caisson_slot``, token authentication),
versus the local executor, alternately. Last line:
``ray_overhead_ratio=R ray_s=S local_s=T`` (target: R <= 1.25). What outlives studies
in a fleet is not timed: the cluster's start (``ray start``) and the first (warm-up)
study, which starts the host's caisson service (a detached Ray actor that later studies
reuse, docs/studies.md, "Executors"). Every timed study pays its own costs: importing
Ray, connecting, finding the host's service and having it join (reap), each session's
round trip and arrival check, disconnecting.

What the ray figure holds, and where it is harder than a fleet: the gap is almost all a
fixed cost per study (importing Ray, about 0.4 s; connecting and disconnecting, 0.05 to
0.35 s), against cells of about 0.4 s here, where a real study's cells take minutes. Here
the host is this machine: its Ray daemons and its service share its cores with the
driver (and, on a shared machine, with everyone else's jobs). Measure it on a quiet
machine; ``--cells 24`` shows the fixed cost amortised.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray_head(work: Path) -> tuple[subprocess.Popen, str]:
    """A one-host Ray cluster with one caisson_slot, token-authenticated, bound to loopback."""
    port = _free_port()
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(16))
    ray = Path(sys.executable).with_name("ray")
    head = subprocess.Popen([str(ray), "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1",
                             "--num-cpus=1", '--resources={"caisson_slot": 1}', "--include-dashboard=false",
                             f"--temp-dir={work / 'ray'}", "--disable-usage-stats"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    address = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        probe = subprocess.run([str(ray), "status", f"--address={address}"], capture_output=True, text=True)
        if probe.returncode == 0 and "caisson_slot" in probe.stdout:
            return head, address
        time.sleep(1)
    os.killpg(head.pid, signal.SIGTERM)
    raise SystemExit(f"the Ray head at {address} did not come up")


def bench_ray(args, work: Path, cli: list[str], study: Path, repo: Path) -> int:
    head, address = _ray_head(work)
    rays, locals_ = [], []
    try:
        timed([*cli, "study", "run", str(study), "--out", str(work / "ray-warm"), "--repo", str(repo),
               "--executor", "ray", "--address", address])
        for r in range(args.rounds):
            locals_.append(timed([*cli, "study", "run", str(study), "--out", str(work / f"local{r}"),
                                  "--repo", str(repo)]))
            rays.append(timed([*cli, "study", "run", str(study), "--out", str(work / f"ray{r}"), "--repo", str(repo),
                               "--executor", "ray", "--address", address]))
    finally:
        # the head and its daemons (its own session); Ray's workers, the host's caisson service among
        # them, lead their own process groups and exit when their raylet does
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGKILL)  # what did not stop (its session is ours alone)
    m_ray, m_local = statistics.median(rays), statistics.median(locals_)
    print(f"ray executor, {args.cells} cells:   median {m_ray:.2f} s ({', '.join(f'{s:.2f}' for s in rays)})")
    print(f"local executor, {args.cells} cells: median {m_local:.2f} s ({', '.join(f'{s:.2f}' for s in locals_)})")
    print(f"ray_overhead_ratio={m_ray / m_local:.2f} ray_s={m_ray:.2f} local_s={m_local:.2f}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--executor", choices=("local", "ray"), default="local",
                    help="local: the study against the same records; ray: the ray executor against the local one")
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
        if args.executor == "ray":
            return bench_ray(args, work, cli, study, repo)
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
