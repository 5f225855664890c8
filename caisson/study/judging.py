"""The LLM judge's rules, pure: its prompt, its calls' shapes, how a reply becomes a verdict,
when a verdict disagrees with the deterministic score, and a judge ledger read back.

The judge is an alarm, never a grader (docs/architecture.md, "Detectors and scoring"): it
re-reads a scored cell's stored answer against the question and its key (the checklist of
the scenario the cell recorded with), and where it disagrees with the deterministic score
the report raises an alarm about the key or the matcher. The score is never changed.

**The prompt** (`PROMPT`, ``judge-prompt@1``): one user message holding the question, the
key as the checklist states it (each required fact as subject and pattern, each forbidden
claim, or that the right answer is that the thing does not exist) and the answer between
``<<<ANSWER`` and ``ANSWER>>>`` markers, cut at `MAX_ANSWER_CHARS` characters (the prompt
then says so). The judge is told to reply ``PASS`` or ``FAIL`` alone on its first line,
then one sentence of reason.

**The verdict** (`parse_verdict`): the reply's first non-empty line, with markdown emphasis,
heading marks, backticks, quotes and trailing punctuation taken off and case ignored, must
be exactly ``PASS`` or ``FAIL``; anything else (``Pass, mostly``, an empty reply, a refusal)
is ``unparseable``, never guessed. No reply at all (an HTTP error, a body that is not the
API's shape) is ``error``.

**Disagreement** (`disagrees`): the deterministic side passes a cell when its score is 1.0
(every required fact met, no forbidden claim). ``PASS`` on a cell that scored below 1.0, or
``FAIL`` on one that scored 1.0, is a disagreement; ``unparseable`` and ``error`` never are.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Literal

import msgspec

from caisson.detectors import same_model
from caisson.scenario import Question
from ledger import Record
from ledger.events import HttpExchange, JudgeAlarm, JudgeEnded, JudgeStarted, JudgeVerdict, LlmCall

__all__ = ["API_PATHS", "MAX_ANSWER_CHARS", "PROMPT", "REQUEST_HEADER", "Api", "JudgeRead", "disagrees",
           "judge_prompt", "parse_verdict", "read_judge_records", "reply_text", "request_body"]

PROMPT = "judge-prompt@1"
"""Name and version of the prompt and verdict format; a change to either bumps it."""
REQUEST_HEADER = "x-caisson-judge-request"
"""Request header naming each judge call (``<n>:<cell id>``), so the ledger pairs a verdict
with the ``http.exchange`` and ``llm.call`` the proxy witness recorded for it."""
MAX_ANSWER_CHARS = 32_000
"""Answer characters put in the prompt; a longer answer is cut, and the prompt says so."""
MAX_TOKENS = 200
"""``max_tokens`` of each judge call: a verdict line and one sentence."""
Api = Literal["anthropic", "openai"]
API_PATHS: dict[str, str] = {"anthropic": "/v1/messages", "openai": "/v1/chat/completions"}
"""The path each API's call is posted to, below the endpoint's base URL (Anthropic
Messages API; OpenAI Chat Completions API)."""

_INSTRUCTIONS = """You are checking one answer of a benchmark about a code repository.
Decide whether the answer below answers the question correctly, judging it against the key.
Reply with PASS or FAIL alone on the first line, then one short sentence saying why.
PASS: the answer states what the key requires and makes none of the claims the key forbids.
FAIL: otherwise."""


def _key_lines(question: Question) -> list[str]:
    lines = []
    if question.absent or question.kind == "absence":
        lines.append("- The correct answer is that this does not exist in the repository.")
    for fact in question.required:
        subject = f"about {fact.subject!r}: " if fact.subject else ""
        how = "matching the regular expression" if fact.regex else "containing"
        lines.append(f"- Required: a statement {subject}{how} {fact.pattern!r}.")
    for claim in question.forbidden:
        subject = f"about {claim.subject!r} " if claim.subject else ""
        lines.append(f"- Forbidden: asserting {subject}{claim.claim!r}.")
    return lines or ["- (the key states no required fact and no forbidden claim)"]


def judge_prompt(question: Question, answer: str) -> str:
    """The one user message of a judge call (see the module docstring).

    Args:
        question: the scenario question the cell answered, as the cell recorded it.
        answer: the answer text the cell stored.

    Returns:
        The prompt text.
    """
    cut = len(answer) > MAX_ANSWER_CHARS
    shown = answer[:MAX_ANSWER_CHARS]
    return "\n".join([
        _INSTRUCTIONS, "", f"Question: {question.prompt}", "", "Key:", *_key_lines(question), "",
        "Answer" + (f" (its first {MAX_ANSWER_CHARS} characters of {len(answer)})" if cut else "") + ":",
        "<<<ANSWER", shown, "ANSWER>>>",
    ])


def request_body(api: Api, model: str, prompt: str) -> bytes:
    """The JSON body of a judge call: not streamed, temperature 0, `MAX_TOKENS`."""
    body = {"model": model, "max_tokens": MAX_TOKENS, "temperature": 0,
            "messages": [{"role": "user", "content": prompt}]}
    return msgspec.json.encode(body)


def reply_text(api: Api, body: bytes) -> str | None:
    """The text of a judge call's (non-streamed) response body, or None when the body is
    not the API's shape (Anthropic: ``content`` text blocks joined; OpenAI:
    ``choices[0].message.content``)."""
    try:
        data = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return None
    if not isinstance(data, dict):
        return None
    if api == "anthropic":
        blocks = data.get("content")
        if not isinstance(blocks, list):
            return None
        return "".join(b["text"] for b in blocks if isinstance(b, dict) and isinstance(b.get("text"), str))
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    message = choices[0].get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, str) else None


_DECOR = re.compile(r"^[\s*_#`>\"'“”-]+|[\s*_`\"'“”.:!;,-]+$")


def parse_verdict(text: str | None) -> tuple[str, str]:
    """Read a reply as a verdict.

    Args:
        text: the reply's text (None: no reply).

    Returns:
        ``(verdict, first_line)``: verdict ``pass`` / ``fail`` / ``unparseable`` (``error``
        when ``text`` is None); the reply's first non-empty line, at most 200 characters.
    """
    if text is None:
        return "error", ""
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    word = _DECOR.sub("", first).upper()
    verdict = {"PASS": "pass", "FAIL": "fail"}.get(word, "unparseable")
    return verdict, first[:200]


def disagrees(verdict: str, score: float | None) -> bool:
    """Whether a verdict disagrees with a deterministic score (None: not scored, never)."""
    if score is None or verdict not in ("pass", "fail"):
        return False
    return (verdict == "pass") != (score >= 1.0)


class JudgeRead(msgspec.Struct, frozen=True, kw_only=True):
    """A judge ledger read back (`read_judge_records`).

    Attributes:
        started: its ``judge.started``, or None when it has none.
        verdicts: every ``judge.verdict``, in order.
        alarms: every ``judge.alarm``, in order.
        ended: its ``judge.ended``, or None (a run that did not finish).
        served_models: every model the proxy witness's ``llm.call`` records name as served, sorted.
        substituted: served models that are not the requested one (`same_model`), sorted.
        unknown_served: judge calls answered (HTTP 200) whose ``llm.call`` names no served
            model, or that have none (an error reply names no model, and gives no verdict).
    """

    started: JudgeStarted | None = None
    verdicts: tuple[JudgeVerdict, ...] = ()
    alarms: tuple[JudgeAlarm, ...] = ()
    ended: JudgeEnded | None = None
    served_models: tuple[str, ...] = ()
    substituted: tuple[str, ...] = ()
    unknown_served: int = 0


def read_judge_records(records: Iterable[Record]) -> JudgeRead:
    """Read a judge ledger's records: its events, and the served models from the witness.

    The served models come from the proxy witness's ``llm.call`` records (what the
    responses said), not from the judge's own verdict events.
    """
    started = ended = None
    verdicts: list[JudgeVerdict] = []
    alarms: list[JudgeAlarm] = []
    served: set[str] = set()
    answered = named = 0
    last_was_judge = False
    for record in records:
        e = record.event
        if isinstance(e, JudgeStarted):
            started = e
        elif isinstance(e, JudgeVerdict):
            verdicts.append(e)
        elif isinstance(e, JudgeAlarm):
            alarms.append(e)
        elif isinstance(e, JudgeEnded):
            ended = e
        elif isinstance(e, HttpExchange):
            last_was_judge = any(k.lower() == REQUEST_HEADER for k, _ in e.request_headers)
            answered += last_was_judge and e.status == 200
        elif isinstance(e, LlmCall) and last_was_judge:
            if e.served_model:
                served.add(e.served_model)
                named += 1
            last_was_judge = False
    requested = started.requested_model if started else ""
    other = tuple(sorted(m for m in served if not same_model(requested, m)))
    return JudgeRead(started=started, verdicts=tuple(verdicts), alarms=tuple(alarms), ended=ended,
                     served_models=tuple(sorted(served)), substituted=other,
                     unknown_served=max(0, answered - named))
