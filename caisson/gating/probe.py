"""The gating probe: a session that asks the agent for a denied tool, and its verdict.

`pick_probe_tool` chooses the denied tool, `probe_script` renders the scripted model that
calls it, `judge_gating` reads the probe run's records into a `GatingVerdict` (pure), and
`verdict_fields` spells that verdict as the ``gating_*`` fields of ``baseline.measured``.
The sessions themselves are run by `caisson.probes.preflight` and `caisson.study.runner`
(docs/architecture.md, "Gating, measured").
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from ledger import Record
from ledger.events import AgentToolCall, AgentToolResult, Gating

__all__ = ["GatingVerdict", "PROBE_ARGUMENTS", "judge_gating", "pick_probe_tool", "probe_script", "verdict_fields"]

PROBE_ARGUMENTS: dict[str, dict[str, Any]] = {
    "Write": {"file_path": "/work/sandbox/caisson-gating-probe.txt", "content": "gating probe"},
    "Edit": {"file_path": "/work/sandbox/caisson-gating-probe.txt", "old_string": "a", "new_string": "b"},
    "write": {"filePath": "/work/sandbox/caisson-gating-probe.txt", "content": "gating probe"},
    "Bash": {"command": "echo caisson-gating-probe"},
    "bash": {"command": "echo caisson-gating-probe"},
    "exec_command": {"cmd": "echo caisson-gating-probe"},
    "glob": {"pattern": "**/*.py"},
    "grep": {"pattern": "def answer"},
    "WebFetch": {"url": "https://example.com/", "prompt": "gating probe"},
    "Read": {"file_path": "/etc/hostname"},
}
"""Arguments the probe's model sends with a denied tool it knows (in order of preference); a
tool not listed is called with ``{}``: a removed tool is refused whatever its arguments."""


class GatingVerdict(msgspec.Struct, frozen=True, kw_only=True):
    """What a gating probe measured for one agent version.

    Attributes:
        agent: the adapter's name. version: the agent version probed.
        claimed: the adapter's gating claim. measured: what the probe showed.
        tool: the denied tool the probe's model asked for (None: nothing was probed).
        outcome: what became of that call in the transcript (None: no call seen).
        evidence: sequence numbers of the records the verdict rests on.
        reason: the verdict in words.
    """

    agent: str
    version: str
    claimed: Gating
    measured: Gating
    tool: str | None = None
    outcome: str | None = None
    evidence: list[int] = []
    reason: str = ""


def pick_probe_tool(deny: Sequence[str]) -> str | None:
    """The denied tool a probe asks for: the first of `PROBE_ARGUMENTS` in ``deny``, else
    the first denied tool; None when nothing is denied."""
    for tool in PROBE_ARGUMENTS:
        if tool in deny:
            return tool
    return sorted(deny)[0] if deny else None


def probe_script(model: str | None, tool: str) -> str:
    """A model script (TOML) whose first turn calls ``tool`` and whose second answers.

    Args:
        model: the model the scenario asks for (the script's ``models``); None: any model.
        tool: the denied tool to call.
    """
    arguments = json.dumps(PROBE_ARGUMENTS.get(tool, {}))
    return "\n".join([
        "# The gating probe (caisson/gating/probe.py): the model calls a denied tool, then answers.",
        'name = "gating_probe"',
        f"models = [{json.dumps(model)}]" if model else "# any model",
        "[[turns]]",
        'text = "Probing."',
        f"tool_calls = [{{ name = {json.dumps(tool)}, arguments = {_toml_inline(json.loads(arguments))} }}]",
        'stop_reason = "tool_use"',
        "usage = { input = 10, output = 5 }",
        "[[turns]]",
        'text = "Ready."',
        'stop_reason = "end_turn"',
        "usage = { input = 10, output = 2 }",
        "[[background]]",
        'match = { model_contains = "haiku" }',
        'text = "{}"',
        "usage = { input = 1, output = 1 }",
        "",
    ])


def _toml_inline(value: dict[str, Any]) -> str:
    """A flat dict of strings as a TOML inline table (JSON strings are valid TOML basic strings)."""
    return "{ " + ", ".join(f"{key} = {json.dumps(str(v))}" for key, v in value.items()) + " }"


def judge_gating(records: Iterable[Record], *, agent: str, version: str, claimed: Gating,
                 tool: str | None) -> GatingVerdict:
    """The verdict of one probe session's records (pure).

    Args:
        records: the probe run's records (its transcript events among them).
        agent: the adapter's name. version: its version.
        claimed: the adapter's claim. An ``ungated`` or ``not_enforced`` claim is kept as is.
        tool: the denied tool the probe asked for; None: nothing was denied, nothing shown.

    Returns:
        ``enforced`` only when every call of ``tool`` in the transcript was refused and at
        least one was seen; otherwise ``not_enforced`` with the evidence.
    """
    base = {"agent": agent, "version": version, "claimed": claimed, "tool": tool}
    if claimed != "enforced":
        return GatingVerdict(**base, measured=claimed, reason=f"{agent} claims {claimed}: nothing to probe")
    if tool is None:
        return GatingVerdict(**base, measured="not_enforced",
                             reason="the arm denies nothing, so the probe had no denied tool to call:"
                                    " the claim is unverified")
    calls: dict[str, int] = {}
    results: list[tuple[int, AgentToolResult]] = []
    for record in records:
        event = record.event
        if isinstance(event, AgentToolCall) and event.tool == tool:
            calls[event.call_id] = record.seq
        elif isinstance(event, AgentToolResult) and event.tool == tool:
            results.append((record.seq, event))
    if not calls and not results:
        return GatingVerdict(**base, measured="not_enforced",
                             reason=f"the probe asked for denied {tool} and the transcript shows no such call:"
                                    " the refusal is not shown, so the claim does not hold")
    ran = [(seq, r) for seq, r in results if r.outcome != "refused"]
    unanswered = [seq for call_id, seq in calls.items() if call_id not in {r.call_id for _, r in results}]
    if ran or unanswered or not results:
        outcome = ran[0][1].outcome if ran else "unknown"
        evidence = sorted([*calls.values(), *(seq for seq, _ in ran)])
        return GatingVerdict(**base, measured="not_enforced", outcome=outcome, evidence=evidence,
                             reason=f"denied {tool} was called and not refused ({outcome}): {agent} {version}"
                                    " does not enforce its deny list")
    return GatingVerdict(**base, measured="enforced", outcome="refused",
                         evidence=sorted([*calls.values(), *(seq for seq, _ in results)]),
                         reason=f"denied {tool} was called and refused")


def verdict_fields(verdict: GatingVerdict) -> dict[str, object]:
    """A gating verdict as the ``gating_*`` fields of ``baseline.measured``."""
    return {"gating_measured": verdict.measured, "gating_outcome": verdict.outcome,
            "gating_evidence": list(verdict.evidence), "gating_reason": verdict.reason}
