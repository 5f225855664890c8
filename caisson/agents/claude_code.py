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

What the session says about itself (2.1.328's stream-json schemas, read out of its binary:
/work/research/agents/REPORT.md section 1) becomes events of its own: an API failure is an
``assistant`` line Claude Code made itself (model ``<synthetic>``, ``is_api_error_message``,
``error``) and a ``result`` with ``is_error`` (exit status 0): ``agent.error``, and the
result's text (the error's) is not an answer; ``system``/``api_retry`` is ``agent.retry``,
``compact_boundary`` ``agent.compaction``, ``model_fallback`` and the refusal and consent
fallbacks ``agent.model_switch``; ``system``/``permission_denied`` lists a refused call
as ``permission_denials`` does. Zeroed figures are placeholders, not measurements (see
`TranscriptParser`). Lines of other types are kept raw.
"""

from __future__ import annotations

from typing import Any

import msgspec

from caisson.agents._lines import ANY, Cause, JsonLinesParser, says, wordings
from collectors.llm import normalize_usage
from ledger.events import (
    AgentAnswer, AgentCompaction, AgentError, AgentModelSwitch, AgentRetry, AgentToolCall, AgentToolResult,
    AgentTools, AgentUsage, Gating, WitnessRaw,
)

__all__ = ["NAME", "GATING", "STATIC_TOOLS", "command", "TranscriptParser", "DENIAL_WORDINGS", "SYNTHETIC_MODEL"]

NAME = "claude-code"
VERSION = "2.1.328"
"""The Claude Code CLI the agent image installs (images/agent/npm-packages.txt)."""
GATING: Gating = "enforced"
# The CLI's own programs (exec paths, fnmatch patterns): the npm package's native binary and
# its bin link (/usr/local/bin/claude -> ../lib/node_modules/@anthropic-ai/claude-code/bin/claude.exe
# in the agent image). In recorded 2.1.328 sessions every model call came from the command's
# own process (`caisson.detectors.attribution`).
PROGRAMS = ("/usr/local/bin/claude", "/usr/local/lib/node_modules/@anthropic-ai/claude-code/bin/claude.exe")
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
DENIAL_WORDINGS = wordings(
    # Claude Code 2.1.328 (@anthropic-ai/claude-code-linux-x64, package/claude: strings of its JS),
    # the tool_result texts of a call it did not run. Read after a "<tool_use_error>" wrapper and
    # an "Error: " prefix (`_refusal_text`). Also listed in result.permission_denials: B, C, D.
    # A. tool not in the session (--disallowedTools, --tools); its suffixes name why
    #    (". X is disabled for this session, in subagents as well as here.", ...)
    "No such tool available: ",
    # B. a permission nobody can give in -p mode (the ask text, or a wrapper of it: Qdr, vwn, AJn, yle, qjr)
    "Claude requested permissions to ",
    "Permission for this tool use was denied",
    "This call was denied and did not run.",
    # C. deny rules: "Permission to use X[ with ...] has been denied[...]", "to read P", "to edit P"
    f"Permission to {ANY} has been denied",
    f"{ANY} targeting '{ANY}' was blocked by a deny rule",
    f"Agent type '{ANY}' has been denied by permission rule",
    # D. a path deny rule caught by Read/Write/Edit's own input check (hbr, gbr, _br)
    "File is in a directory that is denied by your permission settings.",
    "File is covered by a Read deny rule in your permission settings",
    # E. classifier, safety check, hooks, a deferred call dropped, the interactive rejection
    "Permission for this action was denied by the Claude Code auto mode classifier",
    "Permission for this action has been denied.",
    "Permission for this command was denied by a built-in Claude Code safety check",
    "Execution stopped by PreToolUse hook",
    "Permission denied by hook",
    f"{ANY} isn't available, so this deferred call was dropped without running.",
    "The user doesn't want to proceed with this tool use.",
)
"""How Claude Code words a refusal in the tool result the model receives (matched at its
start, case-insensitively). ``permission_denials`` is a second witness, never the only one."""
SYNTHETIC_MODEL = "<synthetic>"
"""The model Claude Code names on a message it wrote itself (an API error's text): not a model."""
KNOWN_TYPES = frozenset({"system", "assistant", "user", "result", "stream_event"})
"""Line types the parser reads (``stream_event``: partial messages, no accounting); others are kept raw."""
ERROR_REASONS = frozenset({
    "blocking_limit", "rapid_refill_breaker", "prompt_too_long", "image_error", "model_error", "api_error",
    "malformed_tool_use_exhausted", "budget_exhausted", "structured_output_retry_exhausted",
    "tool_deferred_unavailable", "turn_setup_failed", "aborted_streaming", "aborted_tools"})
"""``result.terminal_reason`` values 2.1.328 counts as an error or an abort (``Qnt`` and the
abort pair): a result with one ended on a failure even where ``is_error`` is false
(``turn_setup_failed`` writes ``subtype`` success, ``is_error`` false)."""
PROVIDER_ERRORS = frozenset({
    "authentication_failed", "oauth_org_not_allowed", "account_on_hold", "verification_required", "billing_error",
    "rate_limit", "overloaded", "invalid_request", "model_not_found", "server_error", "cloud_credential_error"})
"""The ``error`` values (2.1.328's ``SDKAssistantMessageError``) of a model API that failed or
refused; ``max_output_tokens`` is a limit, ``unknown`` could be either."""
CAUSE_OF_REASON: dict[str, Cause] = {"api_error": "provider", "model_error": "provider",
                                     "prompt_too_long": "provider", "max_turns": "limit", "budget_exhausted": "limit"}
"""``terminal_reason`` -> who failed; the other error reasons are the CLI's own (an abort, a
setup failure, a breaker, a retry bound of its own)."""
CAUSE_OF_SUBTYPE: dict[str, Cause] = {"error_max_turns": "limit", "error_max_budget_usd": "limit",
                                      "error_during_execution": "agent", "error_max_structured_output_retries": "agent"}
TOKEN_FIELDS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
TOKEN_SOURCE = "claude-code result.usage"
MS = 1_000_000  # ns per ms


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
        return "\n".join(part["text"] for part in content
                         if isinstance(part, dict) and isinstance(part.get("text"), str))
    return ""


def _refusal_text(text: str) -> str:
    """A tool result's text as the refusal wordings are written: without the
    ``<tool_use_error>`` wrapper and the ``Error: `` prefix Claude Code adds to some."""
    text = text.strip().removeprefix("<tool_use_error>").removesuffix("</tool_use_error>").strip()
    return text.removeprefix("Error: ")


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _model(value: Any) -> str | None:
    """A model name as reported; ``<synthetic>`` (Claude Code's own messages) is none."""
    return value if isinstance(value, str) and value != SYNTHETIC_MODEL else None


def _code(*parts: Any) -> str | None:
    """The reported codes that are set, most general first, joined by ``:``."""
    return ":".join(dict.fromkeys(p for p in parts if isinstance(p, str) and p)) or None


class TranscriptParser(JsonLinesParser):
    """Sans-IO (`ledger.SansIOParser`): `feed` stdout bytes, `next_event`, `close` at the end.

    Tool calls are emitted as they appear; their outcomes once known (a refusal is
    only certain when the final ``result`` lists the denials, so results are emitted at
    `close`, followed by the answer and the ``agent.usage``). A call with no result at all
    is ``unknown`` (counted as executed). A call is ``refused`` when its tool result is an
    error worded as a refusal (`DENIAL_WORDINGS`) or the session listed it as denied.

    A ``result`` that reports a failure (``is_error``, an error ``subtype``, an error
    ``terminal_reason``) is an ``agent.error`` and its text no answer. Figures that are
    placeholders are unknown, with the reason: a ``result.usage`` of zeros (Claude Code
    writes zeros on results that stand in for failed or never-started turns), a
    ``total_cost_usd`` of 0, or one that prices a model at ``costBasis`` ``unknown`` (a
    guess at another model's rate). Lines that are not JSON objects become ``witness.raw``
    events, never dropped.
    """

    PARSER = "claude-code.transcript@3"
    TERMINAL = "result"

    def __init__(self, version: str | None = VERSION) -> None:
        super().__init__()
        self.version = version  # the CLI version that wrote the transcript (no reading depends on it yet)
        self._calls: dict[str, str] = {}  # call_id -> tool
        self._results: dict[str, tuple[bool, str]] = {}  # call_id -> (is_error, text)
        self._denied: dict[str, str] = {}  # call_id -> where the session listed it as denied
        self._answer: str | None = None
        self._usage: AgentUsage | None = None  # from the result line, emitted at close

    def on_close(self) -> None:
        """Classify every call's outcome; then the answer (unless the session failed) and the usage."""
        for call_id, tool in self._calls.items():
            if call_id in self._denied:
                outcome, excerpt = "refused", self._denied[call_id]
            elif call_id not in self._results:
                outcome, excerpt = "unknown", ""
            else:
                is_error, text = self._results[call_id]
                refused = is_error and says(_refusal_text(text), DENIAL_WORDINGS)
                outcome = "refused" if refused else "errored" if is_error else "executed"
                excerpt = text[:300]
            self.emit(AgentToolResult(agent=NAME, call_id=call_id, tool=tool, outcome=outcome, excerpt=excerpt))
        if self._answer is not None and self.failed is None:
            self.emit(AgentAnswer(agent=NAME, text=self._answer))
        incomplete = self.incomplete
        if self._usage is None:  # no terminal result: usage unknown, and said why
            self.emit(AgentUsage(agent=NAME, token_source=TOKEN_SOURCE, parser=self.PARSER, incomplete=incomplete,
                                 usage_missing_reason=incomplete))
        else:
            self.emit(msgspec.structs.replace(self._usage, incomplete=incomplete))

    def on_object(self, obj: dict[str, Any]) -> bool:
        kind = obj.get("type")
        if not isinstance(kind, str) or kind not in KNOWN_TYPES:
            return False  # kept raw: a type not known
        if kind == "system":
            return self._system(obj)
        message = obj.get("message") if isinstance(obj.get("message"), dict) else {}
        if kind == "assistant":
            if obj.get("is_api_error_message") is True or isinstance(obj.get("error"), str):
                self._api_error(obj, message)
                return True
            if message.get("model") == SYNTHETIC_MODEL:
                return True  # a message Claude Code wrote itself: no model's work
            self.went_on()
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

    def _system(self, obj: dict[str, Any]) -> bool:
        """A ``system`` line: init, and what the session says about its model calls (2.1.328's
        ``y6`` api_retry, ``g6`` compact_boundary, ``one`` model_fallback, ``A6``
        model_refusal_fallback, ``rne`` model_consent_fallback, ``g8`` permission_denied,
        ``b6`` status with a failed compaction). Other subtypes are kept raw."""
        subtype = obj.get("subtype")
        if subtype == "init":
            listed = obj.get("tools")
            tools = [t for t in listed if isinstance(t, str)] if isinstance(listed, list) else []
            self.emit(AgentTools(agent=NAME, surface="init", tools=tools, model=_model(obj.get("model"))))
        elif subtype == "api_retry":
            delay, waited = _int(obj.get("retry_delay_ms")), obj.get("no_response")
            waited_ms = _int(waited.get("waited_ms")) if isinstance(waited, dict) else None
            self.emit(AgentRetry(agent=NAME, said="system.api_retry", attempt=_int(obj.get("attempt")),
                                 max_attempts=_int(obj.get("max_retries")), status=_int(obj.get("error_status")),
                                 delay_ns=delay * MS if delay is not None else None, code=_str(obj.get("error")),
                                 message=f"no response headers within {waited_ms} ms" if waited_ms is not None else ""))
        elif subtype == "compact_boundary":
            meta = obj.get("compact_metadata") if isinstance(obj.get("compact_metadata"), dict) else {}
            took = _int(meta.get("duration_ms"))
            self.emit(AgentCompaction(agent=NAME, trigger=_str(meta.get("trigger")),
                                      tokens_before=_int(meta.get("pre_tokens")),
                                      tokens_after=_int(meta.get("post_tokens")),
                                      duration_ns=took * MS if took is not None else None))
        elif subtype in ("model_fallback", "model_refusal_fallback", "model_consent_fallback"):
            trigger = _str(obj.get("trigger"))
            if subtype == "model_refusal_fallback" and _str(obj.get("direction")):
                # direction retry | revert | sticky; original_model and fallback_model kept as
                # reported (which way a "revert" goes is unconfirmed)
                trigger = f"{trigger or 'refusal'} ({obj['direction']})"
            elif subtype == "model_consent_fallback":
                if obj.get("choice") not in ("consent", "switch_default"):
                    return False  # cancelled (or unknown): no switch; kept raw
                trigger = f"consent ({obj['choice']})"
            self.emit(AgentModelSwitch(agent=NAME, said=f"system.{subtype}", trigger=trigger,
                                       requested=_model(obj.get("original_model")),
                                       used=_model(obj.get("fallback_model")),
                                       message=str(obj.get("content", ""))))
        elif subtype == "permission_denied":
            said = str(obj.get("message", ""))
            self._denied.setdefault(str(obj.get("tool_use_id", "")), f"system permission_denied: {said}"[:300])
        elif subtype == "status" and obj.get("compact_result") == "failed":
            self.hold_error(AgentError(agent=NAME, said="system.status.compact_result", cause="agent",
                                       message=str(obj.get("compact_error") or "compaction failed")))
        else:
            return False  # kept raw: another system notice
        return True

    def _api_error(self, obj: dict[str, Any], message: dict[str, Any]) -> None:
        """The message Claude Code writes when a model call failed (``li()``, model
        ``<synthetic>``): its text is the error, its zero usage no measurement. The session
        ended on it unless a model's message follows."""
        error = obj.get("error")
        cause: Cause = ("provider" if error in PROVIDER_ERRORS else
                 "limit" if error == "max_output_tokens" or obj.get("api_error") == "max_output_tokens" else "")
        self.hold_error(AgentError(agent=NAME, said="assistant.is_api_error_message",
                                   status=_int(obj.get("api_error_status")),
                                   code=_code(error, obj.get("api_error")),
                                   message=_text(message.get("content")), cause=cause))

    def _result(self, obj: dict[str, Any]) -> None:
        """The terminal ``result`` line: denials, the answer or the failure, the session's usage."""
        if self.terminal:
            self.emit(WitnessRaw(witness="transcript", line="a second result line: its usage is not counted"))
            return
        self.terminal = True
        self.ended()
        denials = obj.get("permission_denials")
        for denial in denials if isinstance(denials, list) else []:
            if isinstance(denial, dict):
                self._denied[str(denial.get("tool_use_id", ""))] = "listed in permission_denials"
        subtype, reason = _str(obj.get("subtype")), _str(obj.get("terminal_reason"))
        failed = obj.get("is_error") is True or subtype not in (None, "success") or reason in ERROR_REASONS
        text = obj.get("result")
        if failed:
            errors = obj.get("errors") if isinstance(obj.get("errors"), list) else []
            said = ("result.is_error" if obj.get("is_error") is True else
                    "result.subtype" if subtype not in (None, "success") else "result.terminal_reason")
            self.emit(AgentError(
                agent=NAME, said=said, status=_int(obj.get("api_error_status")),
                code=_code(subtype if subtype != "success" else None, reason, obj.get("api_error"),
                           obj.get("startup_failure_reason")),
                message=text if isinstance(text, str) and text else "; ".join(str(e) for e in errors),
                cause=self._cause(subtype, reason)))
        elif isinstance(text, str):
            self._answer = text
        self._usage = self._figures(obj, failed)

    def _cause(self, subtype: str | None, reason: str | None) -> Cause:
        """Who failed, for a result that reports a failure: its error subtype, else its
        ``terminal_reason``, else the API error message it ended on (``is_error`` is that
        message's flag in 2.1.328), else unknown."""
        if subtype in CAUSE_OF_SUBTYPE:
            return CAUSE_OF_SUBTYPE[subtype]
        if reason in ERROR_REASONS or reason in CAUSE_OF_REASON:
            return CAUSE_OF_REASON.get(reason, "agent")
        if self.failed is not None and self.failed.said == "assistant.is_api_error_message":
            return self.failed.cause
        return ""

    def _figures(self, obj: dict[str, Any], failed: bool) -> AgentUsage:
        """The ``agent.usage`` of a result line: usage and cost as reported, placeholders unknown."""
        usage = obj.get("usage") if isinstance(obj.get("usage"), dict) else None
        by_model = obj.get("modelUsage") if isinstance(obj.get("modelUsage"), dict) else {}
        by_model = {m: u for m, u in by_model.items() if m != SYNTHETIC_MODEL}
        where = (" on a result that reports a failure" if failed else "") + (
            ", num_turns 0" if obj.get("num_turns") == 0 else "")
        normalized, missing = None, "result line without usage"
        if usage is not None:
            counts = [usage[k] for k in TOKEN_FIELDS if k in usage]
            if counts and all(c == 0 and _int(c) is not None for c in counts):
                missing = (f"result.usage reports 0 tokens{where}: a placeholder (Claude Code writes zeros where"
                           " no call's usage was counted), not a measurement")
            else:
                normalized, missing = normalize_usage("messages", usage, streamed=False)
        if normalized is not None:  # the session's total, as the result line reports it
            normalized = msgspec.structs.replace(
                normalized, rules={k: "claude-code.result_usage@1+" + v for k, v in normalized.rules.items()})
        cost, cost_missing = obj.get("total_cost_usd"), None
        if not isinstance(cost, (int, float)) or isinstance(cost, bool):
            cost = None
        else:
            guessed = sorted(m for m, u in by_model.items() if isinstance(u, dict) and u.get("costBasis") == "unknown")
            if guessed:
                cost_missing = (f"modelUsage prices {', '.join(guessed)} at costBasis 'unknown' (no price matched"
                                f" the model: a guess at the default model's rate): total_cost_usd {cost} is no figure")
            elif cost == 0:
                cost_missing = (f"total_cost_usd 0{where}: a placeholder (Claude Code writes 0 where no call was"
                                " priced), not a computed cost")
            cost = None if cost_missing else float(cost)
        return AgentUsage(agent=NAME, token_source=TOKEN_SOURCE, usage=usage, normalized=normalized, cost_usd=cost,
                          by_model=by_model, usage_missing_reason=missing, parser=self.PARSER,
                          cost_missing_reason=cost_missing)
