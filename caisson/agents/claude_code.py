"""Claude Code: invocation, gating, tool surface, and a sans-IO transcript parser.

Invocation (verified against the real CLI in the agent image): ``claude -p PROMPT
--output-format stream-json --verbose`` runs one session non-interactively and prints one
JSON object per line. Gating is **enforced**: ``--disallowedTools`` removes tools from the
session and ``--allowedTools`` pre-approves the granted ones; anything else needs a
permission nobody can give in ``-p`` mode, so it is refused and listed in the final
``result``'s ``permission_denials``.

The transcript (stdout, stream-json): a ``system``/``init`` line listing the tools the
CLI reports (its own names; the list it sends the model is another surface), ``assistant``
lines whose message content holds ``text`` and ``tool_use`` blocks, ``user`` lines holding
``tool_result`` blocks (``is_error``), and a final ``result`` line with ``usage``,
``modelUsage``, ``total_cost_usd`` and ``permission_denials``. The ``result`` line is the
terminal event: without it the transcript is incomplete, and ``agent.usage`` says so with
its usage null (the per-message usage of ``assistant`` lines is partial, never summed in).
Lines of other types are kept raw.
"""

from __future__ import annotations

from typing import Any

import msgspec

from caisson.agents._lines import JsonLinesParser
from collectors.llm import normalize_usage
from ledger.events import AgentAnswer, AgentToolCall, AgentToolResult, AgentTools, AgentUsage, Gating, WitnessRaw

__all__ = ["NAME", "GATING", "STATIC_TOOLS", "command", "TranscriptParser", "DENIAL_MARKERS"]

NAME = "claude-code"
VERSION = "2.1.328"
"""The Claude Code CLI the agent image installs (images/agent/npm-packages.txt)."""
GATING: Gating = "enforced"
STATIC_TOOLS = (
    # documented built-ins
    "Bash", "BashOutput", "Edit", "ExitPlanMode", "Glob", "Grep", "KillShell", "MultiEdit", "NotebookEdit",
    "Read", "SlashCommand", "Task", "TodoWrite", "WebFetch", "WebSearch", "Write",
    # discovered: the init event of 2.1.328 with no tool restriction (scenarios/agents/README.md)
    "CronCreate", "CronDelete", "CronList", "EnterWorktree", "ExitWorktree", "ListAgents", "Monitor",
    "ReportFindings", "ScheduleWakeup", "SendMessage", "Skill", "TaskCreate", "TaskGet", "TaskList", "TaskStop",
    "TaskUpdate", "ToolSearch", "Workflow",
    # discovered: the tool list 2.1.328 sends the model, not reported at init (request bodies on the scripted model)
    "Agent", "DeferredToolPlaceholder",
)
"""Claude Code's tools: the documented built-ins unioned with what a session reports at init
and what its model requests offer."""
DENIAL_MARKERS = ("requested permissions to use", "haven't granted it yet", "permission to use",
                  "No such tool available", "is disabled for this session")
"""Phrases of the tool_result Claude Code writes when it refused a call: no permission
(then also listed in ``permission_denials``), or a tool the deny list removed."""
KNOWN_TYPES = frozenset({"system", "assistant", "user", "result", "stream_event"})
"""Line types the parser reads (``stream_event``: partial messages, no accounting); others are kept raw."""
TOKEN_SOURCE = "claude-code result.usage"


def command(prompt: str, *, allowed: list[str], denied: list[str], model: str | None = None,
            max_turns: int | None = None) -> list[str]:
    """The argv of one non-interactive session.

    Args:
        prompt: the question.
        allowed: tools granted by the arm (pre-approved).
        denied: the arm's deny list (every discovered tool minus the grant, plus statics).
        model: the model to ask for, e.g. ``claude-sonnet-4-5``; None: the CLI's default.
        max_turns: a bound on agentic turns.
    """
    argv = ["claude", "-p", prompt, "--output-format", "stream-json", "--verbose"]
    if allowed:
        argv += ["--allowedTools", ",".join(allowed)]
    if denied:
        argv += ["--disallowedTools", ",".join(denied)]
    if model:
        argv += ["--model", model]
    if max_turns:
        argv += ["--max-turns", str(max_turns)]
    return argv


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str))
    return ""


class TranscriptParser(JsonLinesParser):
    """Sans-IO: `feed` stdout bytes, `close` at the end, then iterate `events()`.

    Tool calls are emitted as they appear; their outcomes once known (a refusal is
    only certain when the final ``result`` lists the denials, so results are emitted at
    `close`, followed by the ``agent.usage``). A call with no result at all is ``unknown`` (counted as executed).
    Lines that are not JSON objects become ``witness.raw`` events, never dropped.
    """

    PARSER = "claude-code.transcript@2"
    TERMINAL = "result"

    def __init__(self, version: str | None = VERSION) -> None:
        super().__init__()
        self.version = version  # the CLI version that wrote the transcript (no reading depends on it yet)
        self._calls: dict[str, str] = {}  # call_id -> tool
        self._results: dict[str, tuple[bool, str]] = {}  # call_id -> (is_error, text)
        self._denied: set[str] = set()
        self._usage: AgentUsage | None = None  # from the result line, emitted at close

    def on_close(self) -> None:
        """Classify every call's outcome."""
        for call_id, tool in self._calls.items():
            if call_id in self._denied:
                outcome, excerpt = "refused", "listed in permission_denials"
            elif call_id not in self._results:
                outcome, excerpt = "unknown", ""
            else:
                is_error, text = self._results[call_id]
                refused = is_error and any(m in text for m in DENIAL_MARKERS)
                outcome = "refused" if refused else "errored" if is_error else "executed"
                excerpt = text[:300]
            self.emit(AgentToolResult(agent=NAME, call_id=call_id, tool=tool, outcome=outcome, excerpt=excerpt))
        incomplete = self.incomplete
        if self._usage is None:  # no terminal result: usage unknown, and said why
            self.emit(AgentUsage(agent=NAME, token_source=TOKEN_SOURCE, parser=self.PARSER, incomplete=incomplete,
                                 usage_missing_reason=incomplete))
        else:
            self.emit(msgspec.structs.replace(self._usage, incomplete=incomplete))

    def on_object(self, obj: dict[str, Any]) -> bool:
        kind = obj.get("type")
        if not isinstance(kind, str) or kind not in KNOWN_TYPES or (kind == "system" and obj.get("subtype") != "init"):
            return False  # kept raw: a system notice (retry, compaction, ...) or a type not known
        message = obj.get("message") if isinstance(obj.get("message"), dict) else {}
        if kind == "system":
            listed = obj.get("tools")
            tools = [t for t in listed if isinstance(t, str)] if isinstance(listed, list) else []
            model = obj.get("model")
            self.emit(AgentTools(agent=NAME, surface="init", tools=tools, model=model if isinstance(model, str) else None))
        elif kind == "assistant":
            content = message.get("content")
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    call_id, tool = str(block.get("id", "")), str(block.get("name", ""))
                    self._calls[call_id] = tool
                    args = block.get("input") if isinstance(block.get("input"), dict) else {}
                    self.emit(AgentToolCall(agent=NAME, call_id=call_id, tool=tool, input=args))
        elif kind == "user":
            content = message.get("content")
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    self._results[str(block.get("tool_use_id", ""))] = (bool(block.get("is_error")),
                                                                         _text(block.get("content")))
        elif kind == "result":
            self._result(obj)
        return True

    def _result(self, obj: dict[str, Any]) -> None:
        """The terminal ``result`` line: denials, the answer and the session's usage."""
        if self.terminal:
            self.emit(WitnessRaw(witness="transcript", line="a second result line: its usage is not counted"))
            return
        self.terminal = True
        denials = obj.get("permission_denials")
        for denial in denials if isinstance(denials, list) else []:
            if isinstance(denial, dict):
                self._denied.add(str(denial.get("tool_use_id", "")))
        if isinstance(obj.get("result"), str):
            self.emit(AgentAnswer(agent=NAME, text=obj["result"]))
        usage = obj.get("usage") if isinstance(obj.get("usage"), dict) else None
        normalized, missing = None, "result line without usage"
        if usage is not None:
            normalized, missing = normalize_usage("messages", usage, streamed=False)
        if normalized is not None:  # the session's total, as the result line reports it
            normalized = msgspec.structs.replace(
                normalized, rules={k: "claude-code.result_usage@1+" + v for k, v in normalized.rules.items()})
        cost = obj.get("total_cost_usd")
        self._usage = AgentUsage(
            agent=NAME, token_source=TOKEN_SOURCE, usage=usage, normalized=normalized,
            cost_usd=float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) else None,
            by_model=obj.get("modelUsage") if isinstance(obj.get("modelUsage"), dict) else {},
            usage_missing_reason=missing, parser=self.PARSER)
