"""The gating probe: an adapter's claim of ``enforced`` holds only once a live session shows it.

A probe session runs the agent with an arm's deny list against the scripted model, which
asks for one denied tool (`probe_script`) that a discovery session showed the agent has (a
tool the session never had is refused whatever the deny list says: it proves nothing). The
claim holds when the transcript shows that call refused; any other outcome (executed,
errored, unknown), or no sign of the call at all, measures the agent as ``not_enforced``
for its version, with the records as evidence. An ``ungated`` agent stays ``ungated``:
there is nothing to probe.

Tool discovery reads the same sessions: the tools an agent reports about itself
(``agent.tools``) and the tools its model requests offer (the ``tools`` of each LLM
request body the proxy kept) are unioned with the adapter's static list into the deny list
(`caisson.run.plan.RecordOptions.discovered_tools`), so a tool that appears upstream is
denied without an adapter change.

`judge_gating`, `request_tools` and `discovered_tools` are pure; `probe_script` renders a
script; `caisson.probes.preflight` and a study's preflight run the sessions.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import msgspec

from ledger import Record
from ledger.events import AgentToolCall, AgentToolResult, AgentTools, BlobStored, Gating

__all__ = ["GatingVerdict", "PROBE_ARGUMENTS", "discovered_tools", "judge_gating", "pick_probe_tool",
           "probe_script", "request_tools"]

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


def request_tools(body: bytes) -> list[str]:
    """The tool names an LLM request body offers the model (sans-IO, never raises).

    Anthropic Messages (``tools[].name``), OpenAI Chat Completions
    (``tools[].function.name``) and Responses (``tools[].name``, or ``type`` for a built-in
    tool such as ``web_search``). A body that is not JSON, or has no tools, gives [].
    """
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError, UnicodeDecodeError):
        return []
    tools = doc.get("tools") if isinstance(doc, dict) else None
    names = []
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict):
            continue
        function = tool.get("function")
        name = tool.get("name") or (function.get("name") if isinstance(function, dict) else None) or tool.get("type")
        if isinstance(name, str) and name:
            names.append(name)
    return names


def discovered_tools(records: Sequence[Record], blob: Callable[[str], bytes | None]) -> list[str]:
    """Every tool a session showed: the agent's own reports (``agent.tools``) and the tools
    offered by each request whose body the proxy kept (``http.request_body`` blobs: the
    chamber reaches only the allowed model hosts). Sorted, no duplicates.

    Args:
        records: one run's records.
        blob: reads a blob by sha256 (None when missing).
    """
    found: set[str] = set()
    for record in records:
        event = record.event
        if isinstance(event, AgentTools):
            found.update(event.tools)
        elif isinstance(event, BlobStored) and event.role == "http.request_body":
            data = blob(event.sha256)
            if data is not None:
                found.update(request_tools(data))
    return sorted(found)
