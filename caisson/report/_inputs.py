"""The report's input: cells, baselines, refusals, prices, the judge's alarms.

These are the report's own types, independent of how a study directory is read
(`caisson.study.report_input` reads one into them; tests build them by hand).
`check_input` rejects what the report could only misread, raising `ReportInputError`
with the cell and the field. How a loader fills each type from the study ledger's events:
docs/architecture.md, "The report's input, from a study's ledgers".
"""

from __future__ import annotations

import msgspec

from caisson.errors import UsageError
from caisson.report._tokens import TokenFigure
from ledger.events import Price, Refusal

__all__ = [
    "CELL_STATUSES",
    "GATINGS",
    "Disagreement",
    "JudgeSummary",
    "Price",
    "Refusal",
    "ReportBaseline",
    "ReportCell",
    "ReportInputError",
    "StudyReportInput",
    "check_input",
]

CELL_STATUSES = ("clean", "void", "refused", "not_run")
GATINGS = ("enforced", "not_enforced", "ungated")


class ReportInputError(UsageError):
    """The report's input cannot be reported honestly.

    Attributes:
        where: the cell id, baseline or refusal at fault.
        field: the offending field.
    """

    def __init__(self, message: str, *, where: str, field: str):
        super().__init__(f"{where}: {field}: {message}")
        self.where = where
        self.field = field


class ReportCell(msgspec.Struct, frozen=True, kw_only=True):
    """One planned cell of a study, as the report needs it.

    Attributes:
        cell_id: the study's cell id.
        arm, agent, model: the combination the cell belongs to.
        question_id: the scenario question it answers.
        question_kind: ``locate``, ``absence``, ``forbidden-claim`` or another kind.
        repetition: 0-based repetition number.
        status: ``clean`` | ``void`` | ``refused`` | ``not_run``.
        void_reason: for a void cell, the finding kind that voided it (``tool_escape``,
            ``leak``, ``host_stalled``, ``witness_gap``, ``infra_failure``, ...).
        score: 0.0-1.0, or None (void, not run, or the leak backstop).
        tokens: the figure chosen by rank with its source, or None (not measured).
        tokens_null_reason: why ``tokens`` is None.
        sessions: agent session identities seen on the calls summed.
        token_ambiguous: more than one session identity among them.
        gating: ``enforced`` | ``not_enforced`` | ``ungated``.
        elicitation: how the agent was asked (e.g. ``"default prompt, max_turns=20"``).
        verified: the cell's ledger verified against the trusted key.
        contained: its ledger records the sandbox built, trimmed and scanned
            (``sandbox.built``: the containment scan passed, or the run would not have
            started).
        findings: kinds of every finding replay made on it (``excluded_read``, ...).
        run_id: the counting attempt's run id, when run.
        retries: model calls retried within the session (proxy-seen failures another call
            followed, or the agent's own reports: ``agent.session``).
        compactions: context compactions the agent reported.
        infra_attempts: earlier attempts of the cell discarded as infra failures.
        verdict_change: how today's verdict of the run differs from the one the study
            recorded when it ran ("" when it does not, or nothing was recorded).
    """

    cell_id: str
    arm: str
    agent: str
    model: str
    question_id: str
    question_kind: str = "locate"
    repetition: int = 0
    status: str
    void_reason: str | None = None
    score: float | None = None
    tokens: TokenFigure | None = None
    tokens_null_reason: str = ""
    sessions: tuple[str, ...] = ()
    token_ambiguous: bool = False
    gating: str
    elicitation: str
    verified: bool = True
    contained: bool = True
    findings: tuple[str, ...] = ()
    run_id: str | None = None
    retries: int = 0
    compactions: int = 0
    infra_attempts: int = 0
    verdict_change: str = ""


class ReportBaseline(msgspec.Struct, frozen=True, kw_only=True):
    """The token floor of one (arm, agent, model): a session on an empty question.

    Attributes:
        floor: the baseline's figure, chosen by the same rank as a cell's, or None.
        isolation: ``passed`` (no denied tool offered), ``failed`` or ``unavailable``
            (an ungated agent: no tool audit is possible).
        denied_present: denied tools still offered, when isolation failed.
        tools: the tools discovered, or None when unavailable (never an empty list for it).
    """

    arm: str
    agent: str
    model: str
    floor: TokenFigure | None = None
    isolation: str = "unavailable"
    denied_present: tuple[str, ...] = ()
    tools: tuple[str, ...] | None = None
    run_id: str | None = None


class Disagreement(msgspec.Struct, frozen=True, kw_only=True):
    """The judge and the deterministic score disagree on a cell: an alarm, never a rescore."""

    cell_id: str
    question_id: str
    score: float | None
    judge_verdict: str
    answer_excerpt: str = ""


class JudgeSummary(msgspec.Struct, frozen=True, kw_only=True):
    """What a judge run recorded: the model asked for, the models that answered, alarms.

    Attributes:
        requested_model: the model every judge call asked for.
        served_models: every model the proxy witness saw answer a judge call (its
            ``llm.call`` records), sorted.
        unknown_served: judge calls answered (HTTP 200) whose response named no model, or that the
            witness did not see.
        disagreements: verdicts that disagree with the cell's deterministic score.
        cells_judged: verdicts written.
        unparseable: replies whose first line was neither PASS nor FAIL.
        errors: calls that got no reply.
        run_id: the judge ledger's run id.
    """

    requested_model: str
    served_models: tuple[str, ...] = ()
    unknown_served: int = 0
    disagreements: tuple[Disagreement, ...] = ()
    cells_judged: int = 0
    unparseable: int = 0
    errors: int = 0
    run_id: str | None = None


class StudyReportInput(msgspec.Struct, frozen=True, kw_only=True):
    """Everything a report is computed from.

    Attributes:
        study_id: the study's name.
        study_head: the study ledger's final chain head (hex), recorded in the report.
        detector_versions: ``name@version`` of every detector replay ran.
        cells: every planned cell (refused and not run included).
        baselines: one per (arm, agent, model) measured.
        refusals: combinations the plan refused (model ``-`` for a plain command).
        prices: model -> its price; cost is computed from these only.
        judge: the judge run's summary, or None when no judge ran.
        seed: seeds the bootstrap and the Monte Carlo sign flips (the study's order seed).
        elicitation: per (arm, agent, model), how the agent was asked; cells carry it too.
    """

    study_id: str
    study_head: str
    detector_versions: tuple[str, ...] = ()
    cells: tuple[ReportCell, ...] = ()
    baselines: tuple[ReportBaseline, ...] = ()
    refusals: tuple[Refusal, ...] = ()
    prices: dict[str, Price] = {}
    judge: JudgeSummary | None = None
    seed: int = 0


def check_input(data: StudyReportInput) -> None:
    """Reject input the report could only misread.

    Raises:
        ReportInputError: an unknown status or gating, a duplicate cell id, a score
            outside [0, 1], a clean cell with a void reason, a void cell without one, a
            score on a cell that did not run clean, a negative token total, a duplicate
            baseline, a baseline whose tool list is empty or disagrees with its
            isolation (``unavailable`` exactly when no tools were audited).
    """
    seen: set[str] = set()
    for cell in data.cells:
        where = f"cell {cell.cell_id}"
        if cell.cell_id in seen:
            raise ReportInputError("duplicate cell id", where=where, field="cell_id")
        seen.add(cell.cell_id)
        if cell.status not in CELL_STATUSES:
            raise ReportInputError(f"{cell.status!r} is not one of {', '.join(CELL_STATUSES)}", where=where,
                                   field="status")
        if cell.gating not in GATINGS:
            raise ReportInputError(f"{cell.gating!r} is not one of {', '.join(GATINGS)}", where=where,
                                   field="gating")
        if cell.score is not None and not 0.0 <= cell.score <= 1.0:
            raise ReportInputError(f"{cell.score} outside [0, 1]", where=where, field="score")
        if cell.score is not None and cell.status != "clean":
            raise ReportInputError(f"a {cell.status} cell has a score", where=where, field="score")
        if cell.status == "void" and not cell.void_reason:
            raise ReportInputError("a void cell needs its reason", where=where, field="void_reason")
        if cell.status != "void" and cell.void_reason:
            raise ReportInputError(f"a {cell.status} cell has a void reason", where=where, field="void_reason")
        if cell.tokens is not None and cell.tokens.total < 0:
            raise ReportInputError(f"negative total {cell.tokens.total}", where=where, field="tokens.total")
    keys: set[tuple[str, str, str]] = set()
    for base in data.baselines:
        key = (base.arm, base.agent, base.model)
        if key in keys:
            raise ReportInputError("two baselines", where=f"baseline {'/'.join(key)}", field="arm")
        keys.add(key)
        where = f"baseline {'/'.join(key)}"
        if base.isolation not in ("passed", "failed", "unavailable"):
            raise ReportInputError(f"{base.isolation!r} is not passed, failed or unavailable", where=where,
                                   field="isolation")
        if base.tools is not None and not base.tools:
            raise ReportInputError("an empty tool list: a tool audit that saw nothing is recorded as unavailable"
                                   " (tools None), never as []", where=where, field="tools")
        if (base.isolation == "unavailable") != (base.tools is None):
            raise ReportInputError(f"isolation {base.isolation} with tools {base.tools!r}: unavailable goes with"
                                   " tools None, and only with it", where=where, field="tools")
