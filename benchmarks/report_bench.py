"""Study report over a synthetic study against verifying and reading the same ledgers.

Usage: python benchmarks/report_bench.py [--cells N] [--events E] [--request-bytes B] [--json-responses]
                                        [--recorded DIR] [--repeat R] [--jobs J] [--html]

Writes N synthetic cell ledgers (`tests._fixtures.cells`: 2 agents x 2 arms x questions x
10 repetitions, E strace-like events each, 2-5 model calls through the proxy with request
bodies of B bytes and streamed responses, first-party usage, a graded answer) plus one
baseline per (arm, agent), signed with the operator key of ``$CAISSON_HOME``.

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
weigh most (see README's ``report_ratio``).

Then, in alternated back-to-back pairs:

- baseline: `ledger.verify_and_read` of every ledger (what any report must at least do);
- report: the same reads, plus the rebuild of the model calls from their kept bodies,
  every detector and the checklist grading (`caisson.replay.replay_streams`), the token
  figure from the rebuilt calls (`cell_tokens`), all through `caisson.report.read_cells`
  as ``caisson study report`` reads a study, then
  `build_report` (aggregates, the gate with its bootstrap and sign-flip tests, the
  checklist) and the text and JSON renderings (``--html`` adds the HTML file with its plots).

Like with like: both sides read the ledgers in the same number of processes, ``--jobs``
(default one per core, as ``caisson study report``): with more than one, each side forks
that many workers, with the parent's heap frozen first (`gc.freeze`, as `read_cells` does:
without it, the collections of a worker that reads 1,500-record ledgers walk the inherited
heap too, which about doubled the baseline's time), and shares the ledgers out to
them in the same chunks (`read_cells`' chunking); with ``--jobs 1`` both read in this
process, one ledger after the other.

``--recorded DIR`` measures the same on ledgers recorded for real (every ledger under DIR,
for example the ``.demo`` of ``make demo``, signed with the operator key of
``$CAISSON_HOME``): `read_cells` against verifying and reading, in the same processes, with
no statistics or rendering (recorded runs have no plan); last line ``recorded_ratio=``.

Last line: ``report_ratio=R`` = median over pairs of report wall time / baseline wall time
(target <= 1.5), then the best times, then ``cpu_ratio``: the same median over CPU time
(`time.process_time` plus the CPU time of the worker processes, which are waited for
before it is read; a host shared with other jobs disturbs it less than wall time), then
``jobs``.
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from caisson.home import ensure_operator_key  # noqa: E402
from tests._fixtures.cells import CellSpec, write_cell  # noqa: E402
from caisson.detectors import config_from_records, run_detectors  # noqa: E402
from caisson.replay import BLOB_ROLES, rebuilt_records, replay_streams  # noqa: E402
from caisson.report import (  # noqa: E402
    TOKEN_EVENTS,
    CellEvidence,
    ReportBaseline,
    StudyReportInput,
    build_report,
    cell_tokens,
    read_cells,
    share_out,
    render_html,
    render_json,
    render_text,
    report_cell,
)
from ledger import verify_and_read  # noqa: E402

AGENTS = ("claude-code", "codex")
ARMS = ("read-only", "shell")
REPS = 10
WRONG = "I could not find it."
RIGHT = "`Context` is defined in src/click/core.py:234."


def synthesise(work: Path, cells: int, events: int, key, request_bytes: int = 0, streamed: bool = False
               ) -> tuple[list[tuple[Path, dict]], list[tuple[Path, dict]]]:
    """Write the study's cell and baseline ledgers; return (run dir, place in the plan) pairs."""
    questions = max(1, cells // (len(AGENTS) * len(ARMS) * REPS))
    planned, bases, n = [], [], 0
    for agent in AGENTS:
        for a, arm in enumerate(ARMS):
            spec = CellSpec(run_id=f"base-{agent}-{arm}", agent=agent, arm=arm, turns=1, tokens_in=900 + 300 * a,
                            tokens_out=20, answer="", strace_events=events, request_bytes=request_bytes,
                            streamed=streamed)
            bases.append((write_cell(work / "baselines" / spec.run_id, spec, key),
                          dict(arm=arm, agent=agent, model="m1")))
            for q in range(questions):
                for r in range(REPS):
                    wrong = (q * 7 + r * 3 + a * 5) % (4 + 2 * a) == 0
                    spec = CellSpec(run_id=f"{agent}-{arm}-q{q}-r{r}", agent=agent, arm=arm,
                                    turns=2 + (q + r) % 3 + a, tokens_in=1000 + 37 * q, tokens_out=100 + r,
                                    sessions=("s1", "s2") if (q, r) == (0, 0) else ("s1",),
                                    answer=WRONG if wrong else RIGHT, strace_events=events, seed=n,
                                    request_bytes=request_bytes, streamed=streamed)
                    planned.append((write_cell(work / "cells" / spec.run_id, spec, key),
                                    dict(cell_id=spec.run_id, arm=arm, agent=agent, model="m1",
                                         question_id=f"q{q}", question_kind="locate", repetition=r,
                                         gating="enforced", elicitation="default prompt")))
                    n += 1
    return planned, bases


def baseline(planned, bases, trusted, jobs: int = 1) -> int:
    """Verify and read every ledger, in ``jobs`` processes as `read_cells` shares them out;
    returns the number of records read."""
    runs = [run_dir for run_dir, _ in (*bases, *planned)]
    if jobs <= 1:
        return _verify_chunk((runs, trusted, range(len(runs))))
    global _work
    chunks = share_out(len(runs), jobs)  # the tasks read_cells makes
    _work = (runs, trusted)
    frozen = gc.get_freeze_count()
    gc.freeze()  # as read_cells forks its workers: their collections leave the inherited heap alone
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


def full_report(planned, bases, trusted, html: bool, jobs: int | None) -> int:
    """Read every ledger once, replay it, choose its tokens, build and render the report."""
    read = read_cells([(run_dir, trusted) for run_dir, _ in (*bases, *planned)], jobs=jobs)
    baselines = [ReportBaseline(floor=evidence.tokens.figure, isolation="passed", tools=("Read",), **place)
                 for evidence, (_, place) in zip(read, bases)]
    cells = [report_cell(evidence, **place) for evidence, (_, place) in zip(read[len(bases):], planned)]
    data = StudyReportInput(study_id="bench", study_head="0" * 64, cells=tuple(cells), baselines=tuple(baselines))
    report = build_report(data)
    size = len(render_text(report)) + len(render_json(report))
    if html:
        size += len(render_html(report))
    return size


def breakdown(planned, trusted) -> dict[str, float]:
    """One instrumented pass, outside the timed pairs: seconds in each stage of the report.

    ``replay - detectors`` is the rest of `replay_streams` (the rebuild of model calls from
    their bodies, config, scenario parse, grading); the detectors are timed in a run of
    their own over the rebuilt records.
    """
    spent = dict.fromkeys(("verify+read", "replay", "detectors", "tokens", "build+render"), 0.0)
    cells = []
    for run_dir, place in planned:
        t0 = time.perf_counter()
        kept: dict[str, bytes] = {}  # as read_cell reads a cell: the blob bytes verification hashed
        report, records = verify_and_read(run_dir, trusted, kept_blobs=kept, keep_roles=BLOB_ROLES)
        t1 = time.perf_counter()
        replay, [counted] = replay_streams(run_dir, report, records, extra=[TOKEN_EVENTS], verified_blobs=kept)
        t2 = time.perf_counter()
        tokens = cell_tokens(counted)  # the token events replay rebuilt, from the same walk
        t3 = time.perf_counter()
        rebuilt = rebuilt_records(report, records, kept)
        t4 = time.perf_counter()
        run_detectors(rebuilt, config_from_records(rebuilt))
        t5 = time.perf_counter()
        spent["verify+read"] += t1 - t0
        spent["replay"] += t2 - t1
        spent["tokens"] += t3 - t2
        spent["detectors"] += t5 - t4
        cells.append(report_cell(CellEvidence(replay=replay, tokens=tokens), **place))
    t0 = time.perf_counter()
    report = build_report(StudyReportInput(study_id="bench", study_head="0" * 64, cells=tuple(cells)))
    render_text(report)
    render_json(report)
    spent["build+render"] = time.perf_counter() - t0
    return spent


def cpu_s() -> float:
    """CPU seconds of this process and of its children that have been waited for."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def alternate(sides, repeat: int) -> tuple[list[float], list[float], list[float], list[float]]:
    """Run the (name, fn) ``sides`` (baseline, then report) in alternated back-to-back pairs,
    printing each; returns the wall ratios, CPU ratios, baseline and report wall times."""
    ratios, cpu_ratios, base_s, report_s = [], [], [], []
    for i in range(repeat):
        times, cpu = {}, {}
        for name, fn in sides[:: 1 if i % 2 == 0 else -1]:
            gc.collect()
            t, c = time.perf_counter(), cpu_s()
            fn()
            times[name], cpu[name] = time.perf_counter() - t, cpu_s() - c
        ratios.append(times["report"] / times["baseline"])
        cpu_ratios.append(cpu["report"] / cpu["baseline"])
        base_s.append(times["baseline"])
        report_s.append(times["report"])
        print(f"pair {i + 1}: verify+read {times['baseline']:.2f} s, report {times['report']:.2f} s"
              f" (cpu {cpu['baseline']:.2f} s, {cpu['report']:.2f} s; wall ratio {ratios[-1]:.2f},"
              f" cpu ratio {cpu_ratios[-1]:.2f}; load {os.getloadavg()[0]:.2f})")
    return ratios, cpu_ratios, base_s, report_s


def recorded(root: Path, key, repeat: int, jobs: int) -> int:
    """``--recorded``: every ledger under ``root`` read as the report reads a cell (`read_cells`)
    against verifying and reading it, in the same processes; no statistics or rendering (the
    runs have no plan). Last line: ``recorded_ratio=`` (median over pairs, wall time)."""
    runs = sorted({ledger.parent for ledger in root.rglob("ledger") if ledger.is_file()})
    if not runs:
        print(f"{root}: no ledger under it", file=sys.stderr)
        return 2
    for run in runs:
        report, _ = verify_and_read(run, key.verify_key)
        if report.status != "ok":
            print(f"{run}: {report.status} against the operator key of $CAISSON_HOME ({report.reason})",
                  file=sys.stderr)
            return 2
    planned = [(run, {}) for run in runs]
    sides = (("baseline", lambda: baseline(planned, [], key.verify_key, jobs)),
             ("report", lambda: read_cells([(run, key.verify_key) for run in runs], jobs=jobs)))
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
    ap.add_argument("--repeat", type=int, default=5, help="alternated pairs (default 5: single pairs vary by 0.1-0.2 on a shared host)")
    ap.add_argument("--jobs", type=int, default=None,
                    help="processes that read the ledgers, on both sides (default: one per core, as"
                         " `caisson study report`)")
    ap.add_argument("--html", action="store_true", help="also render the HTML file with its plots")
    args = ap.parse_args()
    jobs = args.jobs or len(os.sched_getaffinity(0))
    key = ensure_operator_key()
    if args.recorded is not None:
        return recorded(args.recorded, key, args.repeat, jobs)
    work = Path(tempfile.mkdtemp(prefix="caisson-report-bench-"))
    try:
        t0 = time.perf_counter()
        planned, bases = synthesise(work, args.cells, args.events, key, args.request_bytes,
                                    not args.json_responses)
        print(f"wrote {len(planned)} cells and {len(bases)} baselines in {time.perf_counter() - t0:.1f} s")
        records = baseline(planned, bases, key.verify_key)
        print(f"{records:,} records in all")
        sides = (("baseline", lambda: baseline(planned, bases, key.verify_key, jobs)),
                 ("report", lambda: full_report(planned, bases, key.verify_key, args.html, jobs)))
        ratios, cpu_ratios, base_s, report_s = alternate(sides, args.repeat)
        spent = breakdown(planned, key.verify_key)
        print("one instrumented pass: " + ", ".join(f"{k} {v:.2f} s" for k, v in spent.items())
              + " (replay includes the detectors)")
        print(f"report_ratio={statistics.median(ratios):.2f} baseline_s={min(base_s):.2f}"
              f" report_s={min(report_s):.2f} cells={len(planned)} cpu_ratio={statistics.median(cpu_ratios):.2f}"
              f" jobs={jobs} events={args.events} request_bytes={args.request_bytes}"
              f" responses={'json' if args.json_responses else 'streamed'}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
