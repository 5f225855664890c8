"""One cell's evidence, from its run directory: replay and token figure from one read.

The ledger is verified and read once (`ledger.verify_and_read`); the records go through
the current detectors and the checklist grading (`caisson.replay.replay_records`) and
through `cell_tokens`. Nothing is written: a report recomputes findings with the
detector versions it runs, whatever ``findings.json`` says.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import msgspec

from caisson.detectors import DEFAULT_DETECTORS, VOID, Detector, route
from caisson.replay import RunReplay, replay_records
from caisson.report._inputs import ReportCell
from caisson.report._tokens import TOKEN_EVENTS, CellTokens, cell_tokens
from ledger import LedgerError, VerifyKey, verify_and_read
from ledger.events import SandboxBuilt

__all__ = ["CellEvidence", "read_cell", "report_cell"]

_EVIDENCE = ((SandboxBuilt,), TOKEN_EVENTS)
"""What a cell's evidence reads besides its replay: whether the sandbox was built, and the
events its token figure is chosen from."""


class CellEvidence(msgspec.Struct, frozen=True, kw_only=True):
    """A cell's replay (findings, status, score), its token figure, and whether its
    ledger records the sandbox built and scanned (``sandbox.built``)."""

    replay: RunReplay
    tokens: CellTokens
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
    try:
        report, records = verify_and_read(run_dir, trusted)
    except LedgerError as exc:
        replay = RunReplay(run_dir=str(run_dir), verified="unreadable", verify_detail=str(exc), status="unverified",
                           detectors=[name for name, _ in detectors])
        return CellEvidence(replay=replay, tokens=CellTokens(null_reason="ledger unreadable"))
    replay = replay_records(run_dir, report, records, detectors)
    if replay.verified != "ok":
        return CellEvidence(replay=replay, tokens=CellTokens(null_reason=f"ledger {replay.verified}"))
    built, counted = route(records, _EVIDENCE)
    return CellEvidence(replay=replay, tokens=cell_tokens(counted), sandbox_built=bool(built))


def report_cell(evidence: CellEvidence, *, cell_id: str, arm: str, agent: str, model: str, question_id: str,
                question_kind: str, repetition: int, gating: str, elicitation: str) -> ReportCell:
    """The `ReportCell` of a cell that ran, from its evidence and its place in the plan.

    A ledger that does not verify makes the cell void (reason ``unverified``,
    ``verified`` False); otherwise its status, void reason (the first voiding finding's
    kind) and score are the replay's. An answer caught by the leak backstop adds the
    kind ``leak`` to the cell's findings.
    """
    replay, tokens = evidence.replay, evidence.tokens
    kinds = tuple(dict.fromkeys(f.kind for f in replay.findings))
    if replay.grade is not None and replay.grade.leak_cited is not None:
        kinds += ("leak",)  # the answer cites the ground truth's provenance: scored null
    if replay.status == "unverified":
        status, reason, score = "void", "unverified", None
    elif replay.status == "void":
        status, score = "void", None
        reason = next((f.kind for f in replay.findings if f.effect == VOID), "void")
    else:
        status, reason, score = "clean", None, replay.score
    return ReportCell(
        cell_id=cell_id, arm=arm, agent=agent, model=model, question_id=question_id, question_kind=question_kind,
        repetition=repetition, status=status, void_reason=reason, score=score, tokens=tokens.figure,
        tokens_null_reason=tokens.null_reason, sessions=tokens.sessions, token_ambiguous=tokens.token_ambiguous,
        gating=gating, elicitation=elicitation, verified=replay.verified == "ok",
        contained=evidence.sandbox_built, findings=kinds,
        run_id=replay.run_id)
