"""The report: everything computed from a `StudyReportInput`, ready for any renderer.

`build_report` is pure (no I/O, no clock): the same input gives the same report, which
records the study ledger head and the detector versions it was computed from.
"""

from __future__ import annotations

import msgspec

import caisson
from caisson.report._aggregate import ArmSummary, SchemaTax, cell_cost, content_tokens, schema_tax, summarize_arms
from caisson.report._checklist import FAIL, CheckItem, checklist, limitations
from caisson.report._gate import Comparison, compare_arms
from caisson.report._inputs import Disagreement, JudgeSummary, StudyReportInput, check_input
from ledger.events import Refusal

__all__ = ["AgentSection", "CellRow", "Report", "build_report"]


class CellRow(msgspec.Struct, frozen=True, kw_only=True):
    """One cell as the report lists it (derived figures included)."""

    cell_id: str
    agent: str
    arm: str
    model: str
    question_id: str
    question_kind: str
    repetition: int
    status: str
    void_reason: str | None = None
    score: float | None = None
    tokens: int | None = None
    token_source: str | None = None
    tokens_null_reason: str = ""
    content_tokens: int | None = None
    cost_usd: float | None = None
    token_ambiguous: bool = False
    gating: str
    elicitation: str
    verdict_change: str = ""  # how today's verdict differs from the one recorded when the cell ran


class AgentSection(msgspec.Struct, frozen=True, kw_only=True):
    """One agent's table, comparisons and schema tax; never pooled with another agent."""

    agent: str
    rows: list[ArmSummary]
    comparisons: list[Comparison]
    schema_tax: list[SchemaTax]


class Report(msgspec.Struct, frozen=True, kw_only=True):
    """A study report.

    Attributes:
        trusted: no checklist item is FAIL.
        allow_untrusted: winner claims were made despite a FAIL (each labelled).
        checklist: the trust checklist, first in every rendering.
        agents: one section per agent, sorted by name.
        limitations: the known limitations that apply.
    """

    study_id: str
    study_head: str
    detector_versions: list[str]
    caisson_version: str
    seed: int
    trusted: bool
    allow_untrusted: bool
    checklist: list[CheckItem]
    agents: list[AgentSection]
    refusals: list[Refusal]
    limitations: list[str]
    judge: JudgeSummary | None = None
    disagreements: list[Disagreement] = []
    cells: list[CellRow] = []


def build_report(data: StudyReportInput, *, allow_untrusted: bool = False, jobs: int | None = None) -> Report:
    """Compute a study's report.

    Args:
        data: cells, baselines, refusals, prices, judge summary, study head.
        allow_untrusted: make winner claims despite a checklist FAIL, each labelled.
        jobs: threads for the arm comparisons (`compare_arms`); None: one a core.

    Returns:
        The report; with a FAIL and no ``allow_untrusted``, every winner is withheld
        (``verdict == "withheld"``, ``winner`` None, ``label`` naming the failed items).

    Raises:
        ReportInputError: the input is inconsistent (see `check_input`).
    """
    check_input(data)
    rows = summarize_arms(data.cells, data.baselines, data.prices)
    comparisons = compare_arms(data.cells, data.baselines, seed=data.seed, jobs=jobs)
    items = checklist(data, rows, comparisons)
    failed = [i.name for i in items if i.status == FAIL]
    for c in comparisons:
        if c.verdict != "winner" or not failed:
            continue
        if allow_untrusted:
            c.label = f"UNTRUSTED: trust checklist FAIL ({', '.join(failed)})"
        else:
            c.withheld, c.verdict, c.winner = True, "withheld", None
            c.label = f"withheld: trust checklist FAIL ({', '.join(failed)})"
    taxes = schema_tax(data.baselines)
    floors = {(b.arm, b.agent, b.model): b for b in data.baselines}
    cells = [CellRow(
        cell_id=c.cell_id, agent=c.agent, arm=c.arm, model=c.model, question_id=c.question_id,
        question_kind=c.question_kind, repetition=c.repetition, status=c.status, void_reason=c.void_reason,
        score=c.score, tokens=c.tokens.total if c.tokens else None, token_source=c.tokens.source if c.tokens else None,
        tokens_null_reason=c.tokens_null_reason, content_tokens=content_tokens(c, floors.get((c.arm, c.agent, c.model))),
        cost_usd=cell_cost(c, data.prices), token_ambiguous=c.token_ambiguous, gating=c.gating,
        elicitation=c.elicitation, verdict_change=c.verdict_change)
        for c in sorted(data.cells, key=lambda c: (c.agent, c.model, c.arm, c.question_id, c.repetition, c.cell_id))]
    sections = [AgentSection(agent=agent, rows=agent_rows,
                             comparisons=[c for c in comparisons if c.agent == agent],
                             schema_tax=[t for t in taxes if t.agent == agent])
                for agent, agent_rows in rows.items()]
    return Report(
        study_id=data.study_id, study_head=data.study_head, detector_versions=list(data.detector_versions),
        caisson_version=caisson.__version__, seed=data.seed, trusted=not failed, allow_untrusted=allow_untrusted,
        checklist=items, agents=sections, refusals=list(data.refusals), limitations=limitations(data, comparisons),
        judge=data.judge, disagreements=list(data.judge.disagreements) if data.judge else [], cells=cells)
