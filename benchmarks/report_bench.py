"""`caisson study report DIR`, the whole command, over a synthetic study, against a process that
verifies and reads the same ledgers.

Usage: python benchmarks/report_bench.py [--cells N] [--events E] [--request-bytes B] [--json-responses]
                                        [--recorded DIR] [--repeat R] [--jobs J] [--html]

Writes a study directory as ``caisson study run`` leaves one, without a chamber: its study
ledger (``study.planned`` with the matrix, the scenario blob, one ``baseline.measured`` per
(arm, agent) and a ``cell.started``/``cell.ended`` binding per cell, ``study.ended``), signed
with the operator key of ``$CAISSON_HOME``, and N synthetic cell ledgers
(`tests._fixtures.cells`: 2 agents x 2 arms x questions x 10 repetitions, E strace-like events
each, 2-5 model calls through the proxy with request bodies of B bytes and streamed
responses, first-party usage, a graded answer) plus one baseline run per (arm, agent).

The default cell is shaped like the agent cells `make demo` records (Claude Code, Copilot
CLI, opencode and mini-SWE-agent on the scripted model, 2026-12-01): 1,508 to 4,083 records,
of which 1,211 to 3,854 file opens, with request bodies of 3,600 to 44,000 bytes. It takes
the fewest records and the largest bodies of the four (1,500 events, 44,000 bytes): the
per-cell costs of the report weigh most against reading where a cell has few records, and
its body decoding where the bodies are large. Its responses are the scripted model's event
streams, as Claude Code's calls there get (``--json-responses``: one JSON body each). It
leaves out the blobs a real cell keeps that only verification reads (a packet capture, the
seccomp filter, the agent's session file: about 160 KB in Claude Code's cell) and the stdout
transcript replay parses again (7 KB there). Its opens are kinder to the containment
detectors than a real cell's: none carries a real path (256 of Claude Code's 1,301 do) and
they name about 110 distinct paths (525 there); on that cell the two detectors take about
1.6 times as long, warm, as on this one. ``--events 300 --request-bytes 0
--json-responses`` is the earlier, smaller cell, where the report's fixed per-cell costs
weigh most.

Then, in alternated back-to-back pairs, two fresh processes of this interpreter:

- baseline: a process that imports `ledger`, verifies and reads the study ledger
  (`ledger.verify_and_read`), then verifies and reads every run ledger the study binds, in
  ``--jobs`` forked workers with the parent's heap frozen first (`gc.freeze`, as
  `read_cells` does) and the runs shared out in `read_cells`' chunks: what any report must
  at least do, start and read every sealed byte it counts;
- report: ``python -m caisson.cli study report DIR --jobs J`` as a user runs it (text to a
  pipe; ``--html``: ``--format html --out FILE``, with its plots): start and imports,
  reading and verifying the study ledger and every run's seals, the rebuild of the model
  calls from their kept bodies, every detector and the checklist grading, the token
  figures, the statistics (aggregates, the gate with its bootstrap and sign-flip tests, the
  checklist) and the rendering. Its exit status must be 0.

Then, outside the timed pairs, one pass stage by stage: the interpreter's start and the
command's imports (a process that imports what ``study report`` imports, less one that
imports nothing), and in this process `read_study` (the study ledger), `read_cells` of every
run, `verify_study` given those runs' verification (the study ledger and every binding),
`build_report` and `render_text`. The stages are for where the time goes; only the pairs
give the ratio.

``--recorded DIR`` measures the same on ledgers recorded for real (every ledger under DIR,
for example the ``.demo`` of ``make demo``, signed with the operator key of
``$CAISSON_HOME``): `read_cells` against verifying and reading, in this process's workers,
with no statistics or rendering (recorded runs have no plan): not the whole command; last
line ``recorded_ratio=``.

Last line: ``report_ratio=R`` = median over pairs of the command's wall time / the
baseline process's wall time (target <= 1.5), then the best times, then ``cpu_ratio``: the
same median over CPU time (the processes' and their workers', from `resource.RUSAGE_CHILDREN`;
a host shared with other jobs disturbs it less than wall time), then ``jobs``.
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ledger import verify_and_read  # noqa: E402  (the rest is imported where used: the baseline process imports ledger only)

AGENTS = ("claude-code", "codex")
ARMS = ("read-only", "shell")
REPS = 10
WRONG = "I could not find it."
RIGHT = "`Context` is defined in src/click/core.py:234."
IMPORTS = "import caisson.cli, caisson._cli.study, caisson.home, caisson.report, caisson.study.report_input"
"""What ``caisson study report`` imports before it reads anything (the stage ``start+imports``)."""


def _scenario(questions: int) -> bytes:
    """The study's scenario: ``questions`` locate questions (the cells grade against their own
    kept scenario, `tests._fixtures.cells.SCENARIO`)."""
    return b'name = "bench"\n' + "".join(f'''
[[questions]]
id = "q{q}"
kind = "locate"
prompt = "In which file is the `Context` class of this toolkit defined?"
required = [{{ subject = "Context", pattern = "src/click/core.py" }}]
''' for q in range(questions)).encode()


def synthesise(study_dir: Path, cells: int, events: int, key, request_bytes: int = 0,
               streamed: bool = False) -> list[Path]:
    """Write the study directory: its study ledger, cell and baseline runs; returns the run
    directories the study binds (baselines first)."""
    from tests._fixtures.cells import CellSpec, write_cell
    from caisson.study.studyledger import StudyLedger, sealed_state
    from ledger.events import BaselineMeasured, CellEnded, CellStarted, Combo, PlannedCell, StudyEnded, StudyPlanned

    questions = max(1, cells // (len(AGENTS) * len(ARMS) * REPS))
    planned: list[tuple[PlannedCell, CellSpec]] = []
    bases: list[tuple[str, str, CellSpec]] = []
    n = 0
    for agent in AGENTS:
        for a, arm in enumerate(ARMS):
            bases.append((agent, arm, CellSpec(run_id=f"base-{agent}-{arm}", agent=agent, arm=arm, turns=1,
                                               tokens_in=900 + 300 * a, tokens_out=20, answer="",
                                               strace_events=events, request_bytes=request_bytes,
                                               streamed=streamed)))
            for q in range(questions):
                for r in range(REPS):
                    wrong = (q * 7 + r * 3 + a * 5) % (4 + 2 * a) == 0
                    spec = CellSpec(run_id=f"{agent}-{arm}-q{q}-r{r}", agent=agent, arm=arm,
                                    turns=2 + (q + r) % 3 + a, tokens_in=1000 + 37 * q, tokens_out=100 + r,
                                    sessions=("s1", "s2") if (q, r) == (0, 0) else ("s1",),
                                    answer=WRONG if wrong else RIGHT, strace_events=events, seed=n,
                                    request_bytes=request_bytes, streamed=streamed)
                    planned.append((PlannedCell(cell_id=spec.run_id, arm=arm, agent=agent, model="m1",
                                                question_id=f"q{q}", repetition=r), spec))
                    n += 1
    study = StudyLedger(study_dir, key, run_id="study-bench")
    sha = study.put_blob(b'name = "bench"\nscenario = "scenario.toml"\n', "study", "application/toml")
    scenario = study.put_blob(_scenario(questions), "scenario", "application/toml")
    combos = [Combo(arm=arm, agent=agent, model="m1", gating="enforced", cells=questions * REPS)
              for agent in AGENTS for arm in ARMS]
    study.append(StudyPlanned(study="bench", study_sha256=sha, scenario_sha256=scenario, scenario="scenario.toml",
                              cells=[c for c, _ in planned], combos=combos))
    runs = []
    for agent, arm, spec in bases:
        rel = f"baselines/{spec.run_id}"
        runs.append(write_cell(study_dir / rel, spec, key))
        state = sealed_state(study_dir / rel, key.verify_key)
        study.append(BaselineMeasured(arm=arm, agent=agent, model="m1", run_id=state.run_id, run_dir=rel,
                                      ledger_records=state.records, ledger_head=state.head, status="ok",
                                      tools_discovered=["Read"], tools_requested=["Read"]))
    for cell, spec in planned:
        rel = f"cells/{cell.cell_id}/1"
        runs.append(write_cell(study_dir / rel, spec, key))
        state = sealed_state(study_dir / rel, key.verify_key)
        study.append(CellStarted(cell_id=cell.cell_id, attempt=1, run_dir=rel))
        study.append(CellEnded(cell_id=cell.cell_id, attempt=1, run_id=state.run_id, run_dir=rel, status="clean",
                               counting=True, ledger_records=state.records, ledger_head=state.head,
                               ledger_final=state.final, seal_signature=state.signature))
    study.append(StudyEnded(cells=len(planned), counted=len(planned)))
    study.close()
    return runs


def _runs_of(study_dir: Path) -> list[Path]:
    """The run directories of the synthetic study, in the order `synthesise` returns them."""
    return sorted((study_dir / "baselines").iterdir()) + sorted(p / "1" for p in (study_dir / "cells").iterdir())


def verify_only(study_dir: Path, jobs: int, chunk: int) -> int:
    """The baseline process (``--verify-only``): verify and read the study ledger and every
    run ledger of ``study_dir``, the runs in ``jobs`` forked workers, ``chunk`` runs a task;
    exit 0 when every ledger verifies."""
    global _work
    from caisson.home import trusted_key

    trusted = trusted_key(None)
    report, _ = verify_and_read(study_dir / "study" / "000", trusted)
    assert report.status == "ok", report
    runs = _runs_of(study_dir)
    chunks = [range(i, min(i + chunk, len(runs))) for i in range(0, len(runs), chunk)]
    if jobs <= 1:
        _verify_chunk((runs, trusted, range(len(runs))))
        return 0
    _work = (runs, trusted)
    gc.freeze()  # as read_cells forks its workers: their collections leave the inherited heap alone
    with ProcessPoolExecutor(max_workers=min(jobs, len(chunks)),
                             mp_context=multiprocessing.get_context("fork")) as pool:
        sum(pool.map(_verify_chunk, chunks))
    return 0


def baseline(planned, bases, trusted, jobs: int = 1) -> int:
    """In this process (``--recorded``): verify and read every ledger, in ``jobs`` processes
    as `read_cells` shares them out; returns the number of records read."""
    from caisson.report import share_out

    runs = [run_dir for run_dir, _ in (*bases, *planned)]
    if jobs <= 1:
        return _verify_chunk((runs, trusted, range(len(runs))))
    global _work
    chunks = share_out(len(runs), jobs)  # the tasks read_cells makes
    _work = (runs, trusted)
    frozen = gc.get_freeze_count()
    gc.freeze()
    try:
        with ProcessPoolExecutor(max_workers=min(jobs, len(chunks)),
                                 mp_context=multiprocessing.get_context("fork")) as pool:
            return sum(pool.map(_verify_chunk, chunks))
    finally:
        _work = None
        if not frozen:
            gc.unfreeze()


_work = None  # in a worker: (run directories, trusted key), inherited at the fork


def _verify_chunk(chunk) -> int:
    """Records read from the ledgers of ``chunk`` (a range; or (runs, key, range) in-process)."""
    runs, trusted, chunk = chunk if isinstance(chunk, tuple) else (*_work, chunk)
    records = 0
    for i in chunk:
        report, recs = verify_and_read(runs[i], trusted)
        assert report.status == "ok", report
        records += len(recs)
    return records


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def commands(study_dir: Path, jobs: int, html: Path | None) -> dict[str, list[str]]:
    """The two processes a pair runs: the baseline's and the command's."""
    from caisson.report import share_out

    chunk = len(share_out(len(_runs_of(study_dir)), jobs)[0])
    report = [sys.executable, "-m", "caisson.cli", "study", "report", str(study_dir), "--jobs", str(jobs)]
    if html is not None:
        report += ["--format", "html", "--out", str(html)]
    return {"baseline": [sys.executable, str(Path(__file__).resolve()), "--verify-only", str(study_dir),
                         "--jobs", str(jobs), "--chunk", str(chunk)],
            "report": report}


def run(cmd: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one process (and its workers); it must exit 0."""
    gc.collect()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_env())
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {proc.returncode}: {proc.stderr.decode()[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def stages(study_dir: Path, jobs: int) -> dict[str, float]:
    """One pass stage by stage, outside the timed pairs (seconds)."""
    spent: dict[str, float] = {}
    bare = min(run([sys.executable, "-c", "pass"])[0] for _ in range(3))
    spent["start+imports"] = min(run([sys.executable, "-c", IMPORTS])[0] for _ in range(3))
    spent["of which start"] = bare
    from caisson.home import trusted_key
    from caisson.report import build_report, read_cells, render_text
    from caisson.study import load_study_report
    from caisson.study.studyledger import read_study
    from caisson.study.verify import verify_study

    trusted = trusted_key(None)
    t0 = time.perf_counter()
    read_study(study_dir, trusted)
    t1 = time.perf_counter()
    runs = _runs_of(study_dir)
    evidences = read_cells([(r, trusted) for r in runs], jobs=jobs)
    t2 = time.perf_counter()
    verify_study(study_dir, trusted, {str(r.relative_to(study_dir)): e.ledger for r, e in zip(runs, evidences)
                                      if e.ledger is not None})
    t3 = time.perf_counter()
    _, data = load_study_report(study_dir, trusted, jobs=jobs)
    t4 = time.perf_counter()
    assert data is not None
    report = build_report(data, jobs=jobs)
    t5 = time.perf_counter()
    render_text(report)
    t6 = time.perf_counter()
    spent.update({"read_study": t1 - t0, "read_cells": t2 - t1, "verify_study": t3 - t2,
                  "load_study_report (all three, and the mapping)": t4 - t3, "build_report": t5 - t4,
                  "render_text": t6 - t5})
    return spent


def alternate(sides, repeat: int) -> tuple[list[float], list[float], list[float], list[float]]:
    """Run the (name, fn) ``sides`` (baseline, then report; each fn returns wall and CPU
    seconds) in alternated back-to-back pairs, printing each; returns the wall ratios, CPU
    ratios, baseline and report wall times."""
    ratios, cpu_ratios, base_s, report_s = [], [], [], []
    for i in range(repeat):
        times, cpu = {}, {}
        for name, fn in sides[:: 1 if i % 2 == 0 else -1]:
            times[name], cpu[name] = fn()
        ratios.append(times["report"] / times["baseline"])
        cpu_ratios.append(cpu["report"] / cpu["baseline"])
        base_s.append(times["baseline"])
        report_s.append(times["report"])
        print(f"pair {i + 1}: verify+read {times['baseline']:.2f} s, report {times['report']:.2f} s"
              f" (cpu {cpu['baseline']:.2f} s, {cpu['report']:.2f} s; wall ratio {ratios[-1]:.2f},"
              f" cpu ratio {cpu_ratios[-1]:.2f}; load {os.getloadavg()[0]:.2f})", flush=True)
    return ratios, cpu_ratios, base_s, report_s


def _timed(fn):
    """``fn`` as an `alternate` side, in this process: (wall, CPU of this process and its
    waited-for workers)."""
    def side() -> tuple[float, float]:
        gc.collect()
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        c0 = time.process_time() + children.ru_utime + children.ru_stime
        t = time.perf_counter()
        fn()
        wall = time.perf_counter() - t
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        return wall, time.process_time() + children.ru_utime + children.ru_stime - c0
    return side


def recorded(root: Path, key, repeat: int, jobs: int) -> int:
    """``--recorded``: every ledger under ``root`` read as the report reads a cell (`read_cells`)
    against verifying and reading it, in this process's workers; no statistics or rendering
    (the runs have no plan). Last line: ``recorded_ratio=`` (median over pairs, wall time)."""
    from caisson.report import read_cells

    runs = sorted({ledger.parent for ledger in root.rglob("ledger") if ledger.is_file()})
    if not runs:
        print(f"{root}: no ledger under it", file=sys.stderr)
        return 2
    for run_dir in runs:
        report, _ = verify_and_read(run_dir, key.verify_key)
        if report.status != "ok":
            print(f"{run_dir}: {report.status} against the operator key of $CAISSON_HOME ({report.reason})",
                  file=sys.stderr)
            return 2
    planned = [(run_dir, {}) for run_dir in runs]
    sides = (("baseline", _timed(lambda: baseline(planned, [], key.verify_key, jobs))),
             ("report", _timed(lambda: read_cells([(r, key.verify_key) for r in runs], jobs=jobs))))
    print(f"{len(runs)} recorded ledgers, {baseline(planned, [], key.verify_key):,} records in all")
    ratios, cpu_ratios, base_s, report_s = alternate(sides, repeat)
    print(f"recorded_ratio={statistics.median(ratios):.2f} baseline_s={min(base_s):.2f}"
          f" report_s={min(report_s):.2f} ledgers={len(runs)} cpu_ratio={statistics.median(cpu_ratios):.2f}"
          f" jobs={jobs}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=2000,
                    help="cells (default 2000; rounded down to whole questions, 40 cells each, at least 40)")
    ap.add_argument("--events", type=int, default=1500,
                    help="strace-like events per cell (default 1500: the fewest records of the agent cells"
                         " `make demo` records)")
    ap.add_argument("--request-bytes", type=int, default=44_000,
                    help="each model request body's size (default 44000: Claude Code's in `make demo`;"
                         " 0: the bare question)")
    ap.add_argument("--json-responses", action="store_true",
                    help="answer each call with one JSON body instead of the scripted model's event stream")
    ap.add_argument("--recorded", type=Path, default=None,
                    help="instead of a synthetic study: every ledger under this directory (a `make demo`'s"
                         " .demo), read as the report reads cells against verify+read; no statistics")
    ap.add_argument("--study", type=Path, default=None,
                    help="keep the synthetic study here (written when the directory does not exist, reused"
                         " as it is when it does: for comparing trees on the same study)")
    ap.add_argument("--repeat", type=int, default=5,
                    help="alternated pairs (default 5: single pairs vary by 0.1-0.2 on a shared host)")
    ap.add_argument("--jobs", type=int, default=None,
                    help="processes that read the ledgers, on both sides (default: one per core, as"
                         " `caisson study report`)")
    ap.add_argument("--html", action="store_true", help="render the HTML file with its plots (--format html)")
    ap.add_argument("--no-stages", action="store_true", help="skip the stage-by-stage pass")
    ap.add_argument("--verify-only", type=Path, default=None, help=argparse.SUPPRESS)  # the baseline process
    ap.add_argument("--chunk", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    jobs = args.jobs or len(os.sched_getaffinity(0))
    if args.verify_only is not None:
        return verify_only(args.verify_only, jobs, args.chunk)
    from caisson.home import ensure_operator_key

    key = ensure_operator_key()
    if args.recorded is not None:
        return recorded(args.recorded, key, args.repeat, jobs)
    work = Path(tempfile.mkdtemp(prefix="caisson-report-bench-"))
    study_dir = args.study or work / "study"
    try:
        if not study_dir.exists():
            t0 = time.perf_counter()
            runs = synthesise(study_dir, args.cells, args.events, key, args.request_bytes, not args.json_responses)
            print(f"wrote a study of {len(runs) - len(AGENTS) * len(ARMS)} cells and {len(AGENTS) * len(ARMS)}"
                  f" baselines in {time.perf_counter() - t0:.1f} s")
        runs = _runs_of(study_dir)
        print(f"{study_dir}: {len(runs)} runs, {baseline([(r, {}) for r in runs], [], key.verify_key):,} records")
        cmds = commands(study_dir, jobs, work / "report.html" if args.html else None)
        sides = tuple((name, lambda cmd=cmd: run(cmd)) for name, cmd in cmds.items())
        ratios, cpu_ratios, base_s, report_s = alternate(sides, args.repeat)
        if not args.no_stages:
            spent = stages(study_dir, jobs)
            print("one pass stage by stage: " + ", ".join(f"{k} {v:.2f} s" for k, v in spent.items()))
        print(f"report_ratio={statistics.median(ratios):.2f} baseline_s={min(base_s):.2f}"
              f" report_s={min(report_s):.2f} cells={len(runs) - len(AGENTS) * len(ARMS)}"
              f" cpu_ratio={statistics.median(cpu_ratios):.2f} jobs={jobs} events={args.events}"
              f" request_bytes={args.request_bytes} responses={'json' if args.json_responses else 'streamed'}"
              f" pairs={min(ratios):.2f}-{max(ratios):.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
