"""One cell's evidence, from its run directory: replay and token figure from one read.

The ledger and its blobs are verified and read once (`ledger.verify_and_read`, which
hands over the blob bytes it hashed); the records are rebuilt from those blobs with
today's parsers and go through the current detectors and the checklist grading
(`caisson.replay.replay_streams`), and the rebuilt token events, from the same walk,
through `cell_tokens`. Nothing is written: a report recomputes findings with the detector
versions it runs, whatever ``findings.json`` says.

`read_cells` reads many cells, each exactly as `read_cell` does, spread over worker
processes (forked from the caller, one per core; the evidence comes back as msgpack): a
cell's evidence depends on its own run directory only, so the cells of a study are read
independently and returned in the order asked. Nothing is shared between cells but the
detectors' per-configuration memos, which every worker builds for itself.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import msgspec

from caisson.detectors import DEFAULT_DETECTORS, VOID, Detector
from caisson.replay import BLOB_ROLES, RunReplay, replay_streams, verdict_change, verdict_of
from caisson.report._inputs import ReportCell
from caisson.report._tokens import TOKEN_EVENTS, CellTokens, cell_tokens
from ledger import LedgerError, VerifyKey, VerifyReport, verify_and_read
from ledger.events import SandboxBuilt, Verdict

__all__ = ["CellEvidence", "read_cell", "read_cells", "report_cell", "share_out"]

_EVIDENCE = ((SandboxBuilt,), TOKEN_EVENTS)
"""What a cell's evidence reads besides its replay: whether the sandbox was built, and the
events its token figure is chosen from."""


class CellEvidence(msgspec.Struct, frozen=True, kw_only=True):
    """A cell's replay (findings, status, score), its token figure, and whether its
    ledger records the sandbox built and scanned (``sandbox.built``).

    The token figure is chosen from the events replay rebuilt from the run's blobs with
    today's parsers (``replay.rederived`` says what changed), the same events the
    detectors read; the rebuilt events themselves (``replay.rederived.usage``) are left
    out, since ``tokens`` is what a report counts of them (`caisson.replay.replay_run`
    gives them whole).
    """

    replay: RunReplay
    tokens: CellTokens
    ledger: VerifyReport | None = None  # what verifying the ledger found (None: unreadable), for verify_study
    sandbox_built: bool = False


def read_cell(run_dir: Path, trusted: VerifyKey,
              detectors: Sequence[tuple[str, Detector]] = DEFAULT_DETECTORS) -> CellEvidence:
    """Verify and read a cell's ledger once, replay it and choose its token figure.

    Args:
        run_dir: the cell's run directory (``ledger`` and ``blobs/``).
        trusted: the key its seals must verify against.
        detectors: (name@version, detector) pairs; the current registry by default.

    Returns:
        The evidence; a ledger that does not verify gives an unverified replay and no
        token figure (nothing from an unverified ledger is counted).

    Raises:
        CaissonError: the run keeps a scenario that no longer parses.
    """
    kept: dict[str, bytes] = {}  # the blob bytes verification hashed, for replay to read
    try:
        report, records = verify_and_read(run_dir, trusted, kept_blobs=kept, keep_roles=BLOB_ROLES)
    except LedgerError as exc:
        replay = RunReplay(run_dir=str(run_dir), verified="unreadable", verify_detail=str(exc), status="unverified",
                           detectors=[name for name, _ in detectors])
        return CellEvidence(replay=replay, tokens=CellTokens(null_reason="ledger unreadable"))
    replay, (built, counted) = replay_streams(run_dir, report, records, detectors, _EVIDENCE, verified_blobs=kept)
    if replay.verified != "ok":
        return CellEvidence(replay=replay, tokens=CellTokens(null_reason=f"ledger {replay.verified}"), ledger=report)
    if replay.rederived is not None:  # the rebuilt events are in the figure; not carried further
        replay.rederived.usage = []
    return CellEvidence(replay=replay, tokens=cell_tokens(counted), sandbox_built=bool(built), ledger=report)


PARALLEL_FROM = 64
"""Fewer cells than this are read in the calling process: forking workers would cost more."""
_CHUNK = 16  # cells a worker reads per task at most: small enough to share the cells out evenly

_work: tuple[Sequence[tuple[Path, VerifyKey]], Sequence[tuple[str, Detector]]] | None = None
"""In a worker: the cells to read and the detectors, inherited from the parent at the fork."""


def default_jobs() -> int:
    """The cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no sched_getaffinity (macOS)
        return max(1, os.cpu_count() or 1)


def share_out(count: int, jobs: int) -> list[range]:
    """The tasks ``count`` runs are shared out in to ``jobs`` workers: consecutive ranges of
    at most `_CHUNK` runs, at least four a worker where there are enough runs.

    Returns:
        Ranges of run indexes, in order, covering ``range(count)``.
    """
    size = max(1, min(_CHUNK, count // (4 * max(jobs, 1))))
    return [range(i, min(i + size, count)) for i in range(0, count, size)]


def read_cells(runs: Sequence[tuple[Path, VerifyKey]],
               detectors: Sequence[tuple[str, Detector]] = DEFAULT_DETECTORS, *,
               jobs: int | None = None) -> list[CellEvidence]:
    """`read_cell` of every run, in parallel worker processes; results in the order given.

    Each cell is read as `read_cell` reads it, in a process forked from this one (so the
    keys and detectors are inherited, never pickled); the evidence comes back as msgpack.
    With one job, one run, or no ``fork`` start method, the runs are read here, one after
    the other. A cell whose reading raises in a worker is read again here, so the caller
    gets the error `read_cell` raises, with its own class.

    Args:
        runs: (run directory, the key its seals must verify against) per cell.
        detectors: (name@version, detector) pairs; the current registry by default.
        jobs: worker processes; None: `default_jobs` (one per core this process may use)
            from `PARALLEL_FROM` runs, else 1.

    Returns:
        One `CellEvidence` per run, in the order of ``runs``.

    Raises:
        CaissonError: a run keeps a scenario that no longer parses (the first such run).
    """
    global _work
    if jobs is None:
        jobs = default_jobs() if len(runs) >= PARALLEL_FROM else 1
    chunks = share_out(len(runs), jobs)
    if min(jobs, len(chunks)) <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        return [read_cell(run_dir, trusted, detectors) for run_dir, trusted in runs]
    _work = (runs, detectors)
    frozen = gc.get_freeze_count()
    gc.freeze()  # the workers' collections leave the inherited heap alone: no copy-on-write of it
    try:
        with ProcessPoolExecutor(max_workers=min(jobs, len(chunks)),
                                 mp_context=multiprocessing.get_context("fork")) as pool:
            out: list[CellEvidence] = []
            for chunk, read in zip(chunks, pool.map(_read_chunk, chunks)):
                for i, evidence in zip(chunk, _CHUNK_DECODER.decode(read)):
                    out.append(evidence if evidence is not None else read_cell(runs[i][0], runs[i][1], detectors))
            return out
    finally:
        _work = None
        if not frozen:  # a caller's own frozen objects stay frozen
            gc.unfreeze()


_CHUNK_DECODER = msgspec.msgpack.Decoder(list[CellEvidence | None])


def _read_chunk(chunk: range) -> bytes:
    """In a worker: the evidence of each cell of ``chunk``, None where reading raised, as
    msgpack (a tenth of pickle's cost for these Structs, decoded to equal values)."""
    assert _work is not None, "read_cells' worker runs in a process forked by read_cells"
    runs, detectors = _work
    out: list[CellEvidence | None] = []
    for i in chunk:  # each ledger replayed right after it is read, its records still in the caches
        try:
            out.append(read_cell(runs[i][0], runs[i][1], detectors))
        except Exception:  # noqa: BLE001 - read again by the parent, which raises it with its own class
            out.append(None)
    return msgspec.msgpack.encode(out)


def report_cell(evidence: CellEvidence, *, cell_id: str, arm: str, agent: str, model: str, question_id: str,
                question_kind: str, repetition: int, gating: str, elicitation: str,
                infra_attempts: int = 0, recorded: Verdict | None = None) -> ReportCell:
    """The `ReportCell` of a cell that ran, from its evidence and its place in the plan.

    Its status, void reason and score come from today's verdict of the replay
    (`caisson.replay.verdict_of`, the function the study runner recorded ``recorded`` with):
    a ledger that does not verify makes the cell void (reason ``unverified``, ``verified``
    False); a void one's reason is its first voiding finding's kind. ``verdict_change`` says
    how today's verdict differs from ``recorded`` (`caisson.replay.verdict_change`). An
    answer caught by the leak backstop adds the kind ``leak`` to the cell's findings.
    ``retries`` and ``compactions`` count the replay's ``retry`` and ``compaction`` findings
    (``agent.session``); ``infra_attempts`` is how many earlier attempts of the cell the
    study discarded as infra failures.
    """
    replay, tokens = evidence.replay, evidence.tokens
    verdict = verdict_of(replay)
    kinds = tuple(dict.fromkeys(f.kind for f in replay.findings))
    if replay.grade is not None and replay.grade.leak_cited is not None:
        kinds += ("leak",)  # the answer cites the ground truth's provenance: scored null
    if verdict.status == "unverified":
        status, reason, score = "void", "unverified", None
    elif verdict.status == "void":
        status, score = "void", None
        reason = next((f.kind for f in verdict.void), "void")
    else:
        status, reason, score = "clean", None, verdict.score
    return ReportCell(
        cell_id=cell_id, arm=arm, agent=agent, model=model, question_id=question_id, question_kind=question_kind,
        repetition=repetition, status=status, void_reason=reason, score=score, tokens=tokens.figure,
        tokens_null_reason=tokens.null_reason, sessions=tokens.sessions, token_ambiguous=tokens.token_ambiguous,
        gating=gating, elicitation=elicitation, verified=replay.verified == "ok",
        contained=evidence.sandbox_built, findings=kinds,
        run_id=replay.run_id, retries=sum(f.kind == "retry" for f in replay.findings),
        compactions=sum(f.kind == "compaction" for f in replay.findings), infra_attempts=infra_attempts,
        verdict_change=verdict_change(recorded, verdict) if recorded is not None else "")
