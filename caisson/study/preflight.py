"""A study's preflight, before any cell: the grader on every question, and the baseline
probe session of every (arm, agent, model).

The grader check (`check_grader`) grades, for each question, the answer key's own answer
(must score 1), an empty answer (0) and a known-bad answer (0): the key's
``wrong_answer`` when it has one, else a confident claim of a place that is not the
answer. An absence question's key answer is its correct abstention. A false key, or a
checklist that accepts anything, stops the study here, not in the report.

The baseline (`assess_baseline`) reads a probe session's sealed records. Two witnesses
give its tool surface: what the agent reported about itself (``agent.tools``) and what
its model requests offered (the request bodies the proxy kept, `caisson.gating.request_tools`). Their
union is the **isolation assertion** (a tool of the deny list still offered aborts,
naming tool, arm and agent), the **tool discovery** (the combination's deny list: the
static one unioned with the discovered surface, minus the grant; an offered tool the arm
neither grants nor denies joins the deny list of every cell of that combination, through
`caisson.run.RecordOptions.discovered_tools`, and each cell's `enforcement.isolation`
detector checks it is gone) and the **token floor** (the session's total tokens, input +
output, with their source; None when not measured).

The gating probe that follows a baseline (`caisson.gating.probe`) is run by the runner
(`caisson.study.runner`), the judge is `caisson.gating.judge_gating`.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from pathlib import Path

import msgspec

from caisson.errors import ScenarioError
from caisson.replay import grade
from caisson.scenario import Scenario
from ledger import Record
from ledger.events import AgentTools, AgentUsage, GraderCheck

__all__ = ["BaselineFacts", "check_grader", "assess_baseline", "BAD_ANSWER"]

BAD_ANSWER = "It is defined in src/caisson_nowhere/never.py at line 1."
"""A known-bad answer when the key has none: a confident location that answers nothing."""


class BaselineFacts(msgspec.Struct, frozen=True, kw_only=True):
    """What a baseline session showed (see the module docstring)."""

    ok: bool
    reason: str = ""
    tools_discovered: list[str] = []
    tools_requested: list[str] = []
    deny: list[str] = []
    floor_tokens: int | None = None
    floor_source: str | None = None


def check_grader(scenario: Scenario, question_ids: Iterable[str], key_file: Path | None) -> list[GraderCheck]:
    """Grade the key's, an empty and a known-bad answer for every question.

    Args:
        scenario: the scenario (its questions' checklists).
        question_ids: the study's questions.
        key_file: the answer key (TOML ``[[question]]`` tables with ``id``, ``answer`` and an
            optional ``wrong_answer``), or None: no key, so only the empty and bad answers are
            checked and every check says the key was not tested.

    Returns:
        One check per question, in order; ``ok`` False for the ones that stop the study.

    Raises:
        ScenarioError: the key file is not TOML or lacks an answer for a study question.
    """
    answers: dict[str, dict] = {}
    if key_file is not None:
        try:
            table = tomllib.loads(Path(key_file).read_text())
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ScenarioError(f"cannot read the answer key: {exc}", path=str(key_file)) from exc
        answers = {str(q.get("id")): q for q in table.get("question", []) if isinstance(q, dict)}
    checks = []
    for qid in question_ids:
        question = scenario.question(qid)
        assert question is not None  # load_study checked the ids
        entry = answers.get(qid)
        if key_file is not None and (entry is None or not isinstance(entry.get("answer"), str)):
            raise ScenarioError(f"no answer for question {qid!r}", path=str(key_file), field="$.question")
        key = grade(question, entry["answer"]).score if entry else None
        empty = grade(question, "").score
        bad = grade(question, str(entry.get("wrong_answer") or BAD_ANSWER) if entry else BAD_ANSWER).score
        problems = []
        if key_file is not None and key != 1.0:
            problems.append(f"the key's own answer scores {key}, not 1")
        if empty != 0.0:
            problems.append(f"an empty answer scores {empty}, not 0")
        if bad != 0.0:
            problems.append(f"a known-bad answer scores {bad}, not 0 (the checklist accepts anything?)")
        checks.append(GraderCheck(question_id=qid, key=key, empty=empty, bad=bad, ok=not problems,
                                  reason=f"question {qid}: " + "; ".join(problems) if problems else ""))
    return checks


def assess_baseline(records: Iterable[Record], *, arm: str, agent: str, grant: Iterable[str],
                    deny: Iterable[str], static: Iterable[str], requested: Iterable[str] = ()) -> BaselineFacts:
    """The isolation assertion, tool discovery and token floor of one baseline session.

    Args:
        records: the probe run's sealed records.
        arm, agent: names, for the reason.
        grant: the arm's granted tools.
        deny: the deny list the probe was given.
        static: the adapter's static tool list (empty for a command agent).
        requested: the tools the session's model requests offered (`caisson.gating.request_tools` over
            the proxy's request bodies).

    Returns:
        The facts; ``ok`` False (with the reason) when the study must abort.
    """
    reported_tools: set[str] = set()
    reported = False
    floor, source = None, None
    for record in records:
        event = record.event
        if isinstance(event, AgentTools):
            reported = True
            reported_tools.update(event.tools)
        elif isinstance(event, AgentUsage) and event.normalized is not None:
            total = event.normalized.total_tokens
            if total is not None:
                floor, source = (floor or 0) + total, event.token_source
    requested_tools = set(requested)
    offered = reported_tools | requested_tools
    denied, granted = set(deny), set(grant)
    full_deny = sorted(denied | (offered - granted) | (set(static) - granted))
    facts = dict(tools_discovered=sorted(reported_tools), tools_requested=sorted(requested_tools), deny=full_deny,
                 floor_tokens=floor, floor_source=source)
    still = sorted(offered & denied)
    if still:
        return BaselineFacts(ok=False, reason=f"isolation: arm {arm}, agent {agent}: denied tool(s) still offered:"
                             f" {', '.join(still)}", **facts)
    if denied and not reported and not requested_tools:
        return BaselineFacts(ok=False, reason=f"isolation: arm {arm}, agent {agent}: no tool surface was seen"
                             " (neither reported nor requested), so its deny list cannot be verified", **facts)
    return BaselineFacts(ok=True, **facts)
