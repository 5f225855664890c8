"""GitHub Copilot CLI: invocation, gating, and a sans-IO transcript parser.

Can it run without its vendor's service? Yes: Copilot CLI 1.0.102 (in the agent image) has a
"bring your own key" mode (``copilot help providers``): with ``COPILOT_PROVIDER_BASE_URL``
set it talks to that OpenAI-compatible endpoint, needs no GitHub sign-in, and with
``COPILOT_OFFLINE=true`` reaches for nothing else. The adapter points it at
``https://api.openai.com/v1`` (Chat Completions), which the chamber reaches through the
proxy witness (the scenario's egress maps it to an endpoint, the scripted one in tests).

Invocation: ``copilot -p PROMPT --output-format json --allow-all-tools`` runs one task and
prints one JSON event per line. Gating is claimed **enforced**, and a preflight's gating
probe decides (`caisson.probes.gating`): the deny list goes to ``--excluded-tools`` (the
tools leave the model's list; a call to one fails with "Tool 'X' does not exist", read as
refused) and to ``--deny-tool``. ``--deny-tool`` alone does not do it: measured on the
scripted model, ``--allow-all-tools --deny-tool create`` still executed ``create``.

Transcript: ``assistant.message`` (``content``, ``toolRequests``), ``tool.execution_start``
(``toolCallId``, ``toolName``, ``arguments``), ``tool.execution_complete`` (``success``,
``result.content`` or ``error.message``), many progress events (``session.*``,
``assistant.*_delta``, ``model.*``: no accounting), and a final ``result`` line (its
``usage`` holds ``premiumRequests`` and durations, **no token counts**): the terminal event.
Token usage therefore comes from the proxy witness only; ``agent.usage`` says so.
"""

from __future__ import annotations

from typing import Any

from caisson.agents._lines import JsonLinesParser
from ledger.events import AgentAnswer, AgentToolCall, AgentToolResult, AgentUsage, Gating

__all__ = ["NAME", "VERSION", "GATING", "ELICITATION", "STATIC_TOOLS", "ENV", "command", "TranscriptParser"]

NAME = "copilot"
VERSION = "1.0.102"
"""The Copilot CLI the agent image installs (images/agent/npm-packages.txt)."""
GATING: Gating = "enforced"
"""Claimed; a preflight's gating probe measures it (`caisson.probes.gating`)."""
ELICITATION = "stream"
STATIC_TOOLS = ("bash", "create", "edit", "fetch_copilot_cli_documentation", "glob", "grep", "list_agents",
                "list_bash", "read_agent", "read_bash", "report_intent", "session_store_sql", "skill", "sql",
                "stop_bash", "task", "update_todo", "view", "web_fetch", "write_agent", "write_bash")
"""Copilot CLI's tools: those its gpt-5 requests offered in a preflight's discovery session on
the scripted model, plus ``report_intent``, ``update_todo`` and ``web_fetch`` (offered to
other models); discovery adds what a version offers beyond them."""
ENV = {
    "COPILOT_PROVIDER_BASE_URL": "https://api.openai.com/v1",
    "COPILOT_PROVIDER_TYPE": "openai",
    "COPILOT_OFFLINE": "true",  # no GitHub service, no telemetry
    "COPILOT_PROVIDER_API_KEY_COMMAND": "printenv OPENAI_API_KEY",  # the passed key, read when needed
}
"""Variables Copilot needs in the chamber (no secrets: the key is read from ``OPENAI_API_KEY``)."""
REFUSAL_MARKERS = ("' does not exist", "denied by", "not allowed", "not permitted")
"""Phrases of a failed execution that mean the CLI refused the call rather than ran it
(``Tool 'create' does not exist.``: the tool was excluded; ``Path does not exist`` is an
error of a tool that ran)."""
NO_TOKENS = ("copilot reports no token counts (its result.usage has premiumRequests and durations only):"
             " the proxy's llm.call usage is the only measure")


def command(prompt: str, *, allowed: list[str], denied: list[str], model: str | None = None,
            max_turns: int | None = None) -> list[str]:
    """The argv of one ``copilot -p`` task.

    Args:
        prompt: the question.
        allowed: tools granted by the arm (``--allow-tool``; everything else is
            pre-approved by ``--allow-all-tools``, since ``-p`` mode cannot ask).
        denied: the arm's deny list (``--excluded-tools`` and ``--deny-tool``).
        model: the model (``--model``; default ``gpt-5``).
        max_turns: ignored: Copilot CLI has no bound on turns.
    """
    argv = ["copilot", "-p", prompt, "--output-format", "json", "--allow-all-tools", "--model", model or "gpt-5"]
    if allowed:
        argv += ["--allow-tool", *allowed]
    if denied:
        argv += ["--excluded-tools", *denied, "--deny-tool", *denied]
    return argv


class TranscriptParser(JsonLinesParser):
    """Sans-IO: `feed` stdout bytes, `close`, then `events()` (same protocol as Claude Code's).

    Args:
        version: the Copilot CLI version that wrote the transcript.
    """

    PARSER = "copilot.transcript@1"
    TERMINAL = "result"
    PREFIXES = ("session.", "assistant.", "model.", "tool.", "user.", "subagent.", "skill.")

    def __init__(self, version: str | None = VERSION) -> None:
        super().__init__()
        self.version = version
        self._names: dict[str, tuple[str, dict[str, Any]]] = {}  # call id -> (tool, arguments) requested
        self._started: set[str] = set()
        self._open: dict[str, str] = {}  # call id -> tool, started and not completed
        self._answer: str | None = None
        self._result: dict[str, Any] | None = None

    def on_object(self, obj: dict[str, Any]) -> bool:
        kind = obj.get("type")
        if kind == "result":
            self.terminal = True
            self._result = obj
            return True
        if not isinstance(kind, str) or not kind.startswith(self.PREFIXES):
            return False
        data = obj.get("data") if isinstance(obj.get("data"), dict) else {}
        if kind == "assistant.message":
            requests = data.get("toolRequests") if isinstance(data.get("toolRequests"), list) else []
            for request in requests:
                if isinstance(request, dict):
                    args = request.get("arguments") if isinstance(request.get("arguments"), dict) else {}
                    self._names[str(request.get("toolCallId", ""))] = (str(request.get("name", "")), args)
            if not requests:
                self._answer = str(data.get("content", ""))
        elif kind == "tool.execution_start":
            call_id = str(data.get("toolCallId", ""))
            args = data.get("arguments") if isinstance(data.get("arguments"), dict) else {}
            tool = str(data.get("toolName", self._names.get(call_id, ("", {}))[0]))
            self._call(call_id, tool, args)
        elif kind == "tool.execution_complete":
            self._complete(data)
        return True

    def _call(self, call_id: str, tool: str, args: dict[str, Any]) -> None:
        if call_id not in self._started:
            self._started.add(call_id)
            self._open[call_id] = tool
            self.emit(AgentToolCall(agent=NAME, call_id=call_id, tool=tool, input=args))

    def _complete(self, data: dict[str, Any]) -> None:
        call_id = str(data.get("toolCallId", ""))
        tool, args = self._names.get(call_id, ("", {}))
        self._call(call_id, self._open.get(call_id, tool), args)
        tool = self._open.pop(call_id, tool)
        error = data.get("error") if isinstance(data.get("error"), dict) else {}
        result = data.get("result") if isinstance(data.get("result"), dict) else {}
        if data.get("success") is True:
            outcome, excerpt = "executed", str(result.get("content", ""))
        elif data.get("success") is False:
            excerpt = str(error.get("message", ""))
            outcome = "refused" if any(m in excerpt for m in REFUSAL_MARKERS) else "errored"
        else:
            outcome, excerpt = "unknown", ""
        self.emit(AgentToolResult(agent=NAME, call_id=call_id, tool=tool, outcome=outcome, excerpt=excerpt[:300]))

    def on_close(self) -> None:
        for call_id, tool in self._open.items():
            self.emit(AgentToolResult(agent=NAME, call_id=call_id, tool=tool, outcome="unknown"))
        if self.terminal and self._answer is not None:
            self.emit(AgentAnswer(agent=NAME, text=self._answer))
        reported = self._result.get("usage") if self._result is not None else None
        incomplete = self.incomplete
        self.emit(AgentUsage(agent=NAME, token_source=f"copilot result.usage (copilot {self.version})",
                             usage=reported if isinstance(reported, dict) else None, normalized=None,
                             usage_missing_reason=incomplete or NO_TOKENS, incomplete=incomplete,
                             parser=self.PARSER))
