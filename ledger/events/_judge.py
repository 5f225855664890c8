"""The LLM judge's ledger, and the study ledger's announcements of judge and backfill segments and drained hosts."""

from __future__ import annotations

from typing import Literal

from ledger.events._base import _Event

__all__ = [
    "BackfillRecorded", "HostDrained", "JudgeAlarm", "JudgeEnded", "JudgeRecorded", "JudgeStarted",
    "JudgeVerdict", "JudgeVerdictKind",
]



JudgeVerdictKind = Literal["pass", "fail", "unparseable", "error"]
"""What the judge said of one answer (``judge.verdict.verdict``): its first line read as
``PASS`` or ``FAIL``; ``unparseable`` when it is neither (never guessed); ``error`` when no
reply came (HTTP error, refused, timed out)."""


class JudgeStarted(_Event, tag="judge.started", frozen=True, kw_only=True):
    """First event of a judge ledger: which study state is judged, by which model, how."""

    study: str  # the study's name
    study_run_id: str  # run id of the study ledger's last segment
    study_head: str  # hex chain head of that segment's final seal: the closed study judged
    endpoint: str  # the judge's base URL, as given
    api: str  # anthropic (Messages) | openai (Chat Completions)
    requested_model: str  # the model the judge asks for on every call
    prompt: str  # name@version of the prompt and verdict format (caisson/study/judging.py)
    cells: int = 0  # scored cells to judge


class JudgeVerdict(_Event, tag="judge.verdict", frozen=True, kw_only=True):
    """The judge's reading of one scored cell's stored answer (never a change of its score)."""

    cell_id: str
    question_id: str
    run_id: str  # the cell's counting run, whose answer blob was judged
    request_id: str  # the x-caisson-judge-request header of the judge's call (pairs it with its http.exchange)
    score: float | None = None  # the deterministic checklist score, replayed when judged (0.0-1.0)
    verdict: JudgeVerdictKind
    reply_line: str = ""  # the reply's first non-empty line, at most 200 characters
    answer_sha256: str = ""  # sha256 hex of the answer bytes judged (the cell's answer or stdout blob)
    answer_excerpt: str = ""  # the answer's first 300 characters
    requested_model: str = ""
    served_model: str | None = None  # as the proxy witness's llm.call read it from the response; None: unknown
    error: str | None = None  # why there is no reply (verdict error)


class JudgeAlarm(_Event, tag="judge.alarm", frozen=True, kw_only=True):
    """Something the judge run must announce: an alarm, never a change of score.

    ``disagreement``: the judge's verdict and the deterministic score differ (about the key
    or the matcher); ``model_substituted``: a call was served by another model than requested.
    """

    alarm: str  # disagreement | model_substituted
    cell_id: str | None = None
    question_id: str | None = None
    message: str = ""
    evidence: list[int] = []  # seqs in the judge ledger it rests on (verdicts, llm.call records)


class JudgeEnded(_Event, tag="judge.ended", frozen=True, kw_only=True):
    """The judge run's last event: counts over its verdicts."""

    judged: int = 0  # verdicts written
    passed: int = 0
    failed: int = 0
    unparseable: int = 0
    errors: int = 0
    disagreements: int = 0
    served_models: list[str] = []  # every model the witness saw answer, sorted


class JudgeRecorded(_Event, tag="judge.recorded", frozen=True, kw_only=True):
    """A judge run's ledger (``DIR/judge/NNN/``), announced once closed in a study ledger
    segment of its own: the study ledger, closed before any judge, binds it this way, so
    a judge directory removed afterwards is seen (`caisson verify DIR`)."""

    run_dir: str  # the judge directory, relative to the study directory ("judge/003")
    run_id: str  # its ledger's run id
    ledger_records: int  # records covered by its final seal
    ledger_head: str  # hex chain head at that seal


class BackfillRecorded(_Event, tag="backfill.recorded", frozen=True, kw_only=True):
    """A backfill ledger segment (``DIR/backfill/NNN/``), announced once closed in a study
    ledger segment of its own, as `JudgeRecorded` announces a judge run."""

    run_dir: str  # the backfill segment, relative to the study directory ("backfill/001")
    run_id: str  # its ledger's run id
    ledger_records: int  # records covered by its final seal
    ledger_head: str  # hex chain head at that seal


class HostDrained(_Event, tag="host.drained", frozen=True, kw_only=True):
    """A host of a ray study gets no further sessions (its own ``host_stalled`` cells in a row)."""

    host: str  # "host name/node id"
    reason: str
    cells: list[str] = []  # the cells behind the reason
