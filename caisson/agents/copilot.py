"""GitHub Copilot CLI: invocation, gating, and a sans-IO transcript parser.

Can it run without its vendor's service? Yes: Copilot CLI 1.0.102 (in the agent image) has a
"bring your own key" mode (``copilot help providers``): with ``COPILOT_PROVIDER_BASE_URL``
set it talks to that OpenAI-compatible endpoint, needs no GitHub sign-in, and with
``COPILOT_OFFLINE=true`` reaches for nothing else. The adapter points it at
``https://api.openai.com/v1`` (Chat Completions), which the chamber reaches through the
proxy witness (the scenario's egress maps it to an endpoint, the scripted one in tests).

Invocation: ``copilot -p PROMPT --output-format json --allow-all-tools`` runs one task and
prints one JSON event per line. Gating is claimed **enforced**, and a preflight's gating
probe decides (`caisson.gating.probe`): the deny list goes to ``--excluded-tools`` (the
tools leave the model's list; a call to one fails with "Tool 'X' does not exist", read as
refused) and to ``--deny-tool``. ``--deny-tool`` alone does not do it: measured on the
scripted model, ``--allow-all-tools --deny-tool create`` still executed ``create``.

Transcript: ``assistant.message`` (``content``, ``toolRequests``), ``tool.execution_start``
(``toolCallId``, ``toolName``, ``arguments``), ``tool.execution_complete`` (``success``,
``result.content`` or ``error.message``), many progress events (``session.*``,
``assistant.*_delta``, ``model.*``: no accounting), and a final ``result`` line (its
``usage`` holds ``premiumRequests`` and durations, **no token counts**): the terminal event.
Token usage therefore comes from the proxy witness only; ``agent.usage`` says so.

What the session says about itself (1.0.102's ``schemas/session-events.schema.json`` and
``cli-main.js``: /work/research/agents/REPORT.md section 4): ``session.error`` is an
``agent.error``, the end of the session unless its ``errorType`` is ``model_call`` or
``hook`` (the two the CLI exits 0 after; those end it only when nothing follows);
``session.warning`` of a blocked compaction or a policy block ends it too; failed model
calls (``model.call_failure``, ``model.call_final_result`` other than success) are errors
the session may go on from; ``assistant.turn_retry`` is an ``agent.retry``; a ``result``
whose ``exitCode`` is not 0 reports a failure. Compaction and model changes are not
written in JSON mode.
"""

from __future__ import annotations

import json
from typing import Any

from caisson.agents._lines import ANY, Cause, JsonLinesParser, says, wordings
from ledger.events import AgentAnswer, AgentError, AgentRetry, AgentToolCall, AgentToolResult, AgentUsage, Gating

__all__ = ["NAME", "VERSION", "GATING", "ELICITATION", "STATIC_TOOLS", "ENV", "REFUSAL_WORDINGS", "command",
           "TranscriptParser"]

NAME = "copilot"
VERSION = "1.0.102"
"""The Copilot CLI the agent image installs (images/agent/npm-packages.txt)."""
GATING: Gating = "enforced"
# The CLI's own programs (exec paths, fnmatch patterns): npm-loader.js (node) spawns the
# package's platform binary, which makes the model calls and spawns another of itself
# (1.0.102 in the agent image: .../@github/copilot-linux-x64/copilot).
PROGRAMS = ("/usr/local/bin/copilot", "/usr/local/lib/node_modules/@github/copilot/npm-loader.js",
            "/usr/local/lib/node_modules/@github/copilot/node_modules/@github/copilot-linux-*/copilot")
"""Claimed; a preflight's gating probe measures it (`caisson.gating.probe`)."""
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
REFUSAL_WORDINGS = wordings(
    # Copilot CLI 1.0.102 (@github/copilot-linux-x64: the copilot.tgz in its SEA blob;
    # literals of prebuilds/linux-x64/runtime.node and cli-main.js), a failed
    # tool.execution_complete's error.message when the call did not run. An excluded or unknown tool:
    f"Tool '{ANY}' does not exist",
    f"Tool '{ANY}' has no native execution backend",
    # a permission nobody could give, or a rejection
    "Permission denied and could not request permission from user",
    "Copilot needed the user's approval and no one could answer.",
    "The user rejected this tool call",
    "The pending permission request was cancelled before the tool could continue.",
    "Permission denied because ",  # no interactive response, no response path, the assisted approval check (6 texts)
    "Permission denied while applying a historical authorization response.",
    # rules, hooks, policies
    "Permission to run this tool was denied",  # " by a deny rule." | " due to the following rules: ..."
    "Permission denied by rules:",
    "Permission denied by hook.",
    "Permission denied by a PermissionRequest hook",
    "Denied by preToolUse hook",  # ": ..." | " (unable to ask user for confirmation): ..."
    "Denied by permission request hook",
    "Denied by user via preToolUse hook prompt",
    "Denied by content exclusion policy",
    f'Access denied: "{ANY}" is excluded by organization content policy',
    "Permission denied by host policy.",
)
"""How Copilot words a call it did not run, matched at the start of the error message,
case-insensitively. A tool that ran and failed words its own error (``Path does not
exist``, ``Parent directory ... does not exist``; a sandbox's block of a command it
started): errored. Copilot lists no denials elsewhere, so the wording is the one witness."""
PROVIDER_ERRORS = frozenset({"authentication", "authorization", "quota", "rate_limit", "context_limit", "model_call"})
"""``session.error`` types of a model API that failed or refused (the schema's examples and
``model_call``); ``policy``, ``hook``, ``execution`` and ``session`` are the CLI's own; others unknown."""
AGENT_ERRORS = frozenset({"policy", "hook", "execution", "session"})
TERMINAL_ERRORS_EXCEPT = frozenset({"model_call", "hook"})
"""``session.error`` types after which 1.0.102 still exits 0 (``Zao``): the session may go on."""
TERMINAL_WARNINGS = frozenset({"compaction_static_context_blocked", "policy_blocked"})
"""``session.warning`` types 1.0.102 counts as terminal (``Zao``)."""
NO_TOKENS = ("copilot reports no token counts (its result.usage has premiumRequests, totalApiDurationMs,"
             " sessionDurationMs and codeChanges only): the proxy's llm.call usage is the only measure")
"""Why ``agent.usage`` is null. ``assistant.message.outputTokens`` (optional) counts output
only and no input: no total can be made of it, so it is not read."""


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


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


class TranscriptParser(JsonLinesParser):
    """Sans-IO (`ledger.SansIOParser`): `feed` stdout bytes, `next_event`, `close`.

    Args:
        version: the Copilot CLI version that wrote the transcript.
    """

    PARSER = "copilot.transcript@2"
    TERMINAL = "result"
    PREFIXES = ("session.", "assistant.", "model.", "tool.", "user.", "subagent.", "skill.")

    def __init__(self, version: str | None = VERSION) -> None:
        super().__init__()
        self.version = version
        self._names: dict[str, tuple[str, dict[str, Any]]] = {}  # call id -> (tool, arguments) requested
        self._started: set[str] = set()
        self._open: dict[str, str] = {}  # call id -> tool, started and not completed
        self._answer: str | None = None

    def on_object(self, obj: dict[str, Any]) -> bool:
        kind = obj.get("type")
        if kind == "result":
            self._end(obj)
            return True
        if not isinstance(kind, str) or not kind.startswith(self.PREFIXES):
            return False
        data = obj.get("data") if isinstance(obj.get("data"), dict) else {}
        if kind in ("assistant.message", "tool.execution_start", "tool.execution_complete", "model.call_start",
                    "assistant.turn_retry"):  # more work, or another attempt: what came before did not end it
            self.went_on()
        if kind in ("session.error", "session.warning", "model.call_failure", "model.call_final_result",
                    "assistant.turn_retry"):
            self._failure(kind, data)
        elif kind == "assistant.message":
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

    def _failure(self, kind: str, data: dict[str, Any]) -> None:
        """What the session says went wrong (`ErrorData`, `WarningData`, `ModelCallFailureData`,
        `ModelCallFinalResultData`, `AssistantTurnRetryData` of the events schema)."""
        status = _int(data.get("statusCode"))
        if kind == "session.error":
            kind_of = _str(data.get("errorType"))
            cause: Cause = "provider" if kind_of in PROVIDER_ERRORS else "agent" if kind_of in AGENT_ERRORS else ""
            error = AgentError(agent=NAME, said=kind, status=status, message=str(data.get("message", "")),
                               code=":".join(filter(None, [kind_of, _str(data.get("errorCode"))])) or None,
                               cause=cause)
            if kind_of in TERMINAL_ERRORS_EXCEPT:
                self.hold_error(error)
            else:
                self.emit(error)
        elif kind == "session.warning":
            if data.get("warningType") in TERMINAL_WARNINGS:
                self.emit(AgentError(agent=NAME, said=kind, code=str(data["warningType"]),
                                     message=str(data.get("message", "")), cause="agent"))
        elif kind == "model.call_failure":
            code = _str(data.get("errorCode")) or _str(data.get("errorType")) or _str(data.get("failureKind"))
            self.hold_error(AgentError(agent=NAME, said=kind, status=status, code=code, cause="provider",
                                       message=str(data.get("errorMessage", ""))))
        elif kind == "model.call_final_result":
            result = _str(data.get("result"))
            if result is not None and result != "success":
                model = _str(data.get("model"))
                self.hold_error(AgentError(agent=NAME, said=kind, code=result, cause="provider",
                                           message=f"model {model}: {result}" if model else result))
        else:
            model = _str(data.get("model"))
            self.emit(AgentRetry(agent=NAME, said=kind, code=_str(data.get("reason")),
                                 message=f"model {model}" if model else ""))

    def _end(self, obj: dict[str, Any]) -> None:
        """The ``result`` line: the end of the session; an ``exitCode`` other than 0 reports a failure."""
        if self.terminal:
            return
        self.terminal = True
        self.ended()
        if _int(obj.get("exitCode")) not in (0, None):
            said = {k: obj[k] for k in ("exitCode", "outcome", "blocker") if k in obj}
            outcome = _str(obj.get("outcome"))  # blocked (autopilot): the CLI's own; else it does not say who
            self.emit(AgentError(agent=NAME, said="result.exitCode", code=outcome, cause="agent" if outcome else "",
                                 message=json.dumps(said, sort_keys=True, default=str)))

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
            outcome = "refused" if says(excerpt, REFUSAL_WORDINGS) else "errored"
        else:
            outcome, excerpt = "unknown", ""
        self.emit(AgentToolResult(agent=NAME, call_id=call_id, tool=tool, outcome=outcome, excerpt=excerpt[:300]))

    def on_close(self) -> None:
        for call_id, tool in self._open.items():
            self.emit(AgentToolResult(agent=NAME, call_id=call_id, tool=tool, outcome="unknown"))
        if self.terminal and self._answer is not None and self.failed is None:
            self.emit(AgentAnswer(agent=NAME, text=self._answer))
        incomplete = self.incomplete  # result.usage holds no token count: no usage (it stays in the stdout blob)
        self.emit(AgentUsage(agent=NAME, token_source=f"copilot result.usage (copilot {self.version})",
                             usage=None, normalized=None, usage_missing_reason=incomplete or NO_TOKENS,
                             incomplete=incomplete, parser=self.PARSER))
