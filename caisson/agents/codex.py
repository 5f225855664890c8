"""Codex CLI: invocation, gating, and a sans-IO transcript parser.

Invocation (verified against codex-cli 0.171.0 in the agent image): ``codex exec --json
--skip-git-repo-check PROMPT`` runs one task and prints JSON lines. It reaches a model
only through a provider configured with ``-c``; the built-in OpenAI provider ignores
``OPENAI_BASE_URL`` and the ``chat`` wire API is gone, so the adapter names a provider
``caisson`` with ``wire_api = "responses"`` at ``https://api.openai.com/v1``, which the
chamber reaches through the proxy witness (the scenario's egress maps it to an endpoint).

Gating is **ungated**: Codex has no per-tool allow or deny list, only its own sandbox
and approval policy, and its sandbox cannot engage in the chamber (bubblewrap cannot
create namespaces under Docker's default seccomp profile). It runs with
``--dangerously-bypass-approvals-and-sandbox``; the chamber is the sandbox. An arm that
withholds something cannot be run with it (`caisson.run.record` refuses the combination).

Transcript: ``item.started``/``item.completed`` lines whose ``item`` is an
``agent_message`` (text), a ``command_execution`` (command, exit code, status), a
``file_change`` and others; ``turn.completed`` carries a ``usage`` (``input_tokens``
including ``cached_input_tokens``, ``output_tokens`` including ``reasoning_output_tokens``:
OpenAI's breakdown semantics) that is the thread's running total in the versions we know
(`USAGE_SHAPES`): the last one counts, turns are never summed.

What the session says about itself (codex-cli 0.171.0's exec JSONL processor,
``codex-rs/exec/src/event_processor_with_jsonl_output.rs``; literals checked in its binary:
/work/research/agents/REPORT.md section 2): an ``error`` line reading ``Reconnecting...
N/M (cause)`` is a stream retry (``agent.retry``), any other ``error`` line and
``turn.failed`` an ``agent.error``; an ``error`` item ``model rerouted: A -> B (reason)`` a
model switch. A ``turn.completed.usage`` of zeros is Codex's ``Usage::default()`` when no
token count arrived: unknown, not a measured 0.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from caisson.agents._lines import ANY, Cause, JsonLinesParser, says, wordings
from collectors.llm import normalize_usage
from ledger.events import (
    AgentAnswer, AgentError, AgentModelSwitch, AgentRetry, AgentToolCall, AgentToolResult, AgentUsage, Gating,
)

__all__ = ["NAME", "GATING", "STATIC_TOOLS", "USAGE_SHAPES", "VERSION", "REFUSAL_WORDINGS", "command",
           "TranscriptParser", "usage_shape"]

NAME = "codex"
GATING: Gating = "ungated"
# The CLI's own programs (exec paths, fnmatch patterns): bin/codex.js (node) spawns the
# package's platform binary, which makes the model calls (0.171.0 in the agent image:
# .../@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex).
PROGRAMS = ("/usr/local/bin/codex", "/usr/local/lib/node_modules/@openai/codex/bin/codex.js",
            "/usr/local/lib/node_modules/@openai/codex/node_modules/@openai/codex-linux-*/vendor/*/bin/codex")
STATIC_TOOLS = ("exec_command", "write_stdin", "view_image", "web_search", "request_user_input",
                "get_goal", "create_goal", "update_goal", "multi_agent_v1", "apply_patch")
"""Tools codex-cli 0.171.0 sends the model (the request's tool list is its only surface), as
its Responses requests on the scripted model list them: ``multi_agent_v1`` included; and
``apply_patch``, absent from that list (file changes go through ``exec_command``), the
name its transcript's ``file_change`` items are read as: a tool an arm may name."""
PROVIDER = ('model_providers.caisson={name="caisson",base_url="https://api.openai.com/v1",'
            'env_key="OPENAI_API_KEY",wire_api="responses"}')


def command(prompt: str, *, allowed: list[str], denied: list[str], model: str | None = None,
            max_turns: int | None = None) -> list[str]:
    """The argv of one ``codex exec`` task (``allowed``/``denied`` cannot be honoured: ungated)."""
    argv = ["codex", "exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
            "-c", 'model_provider="caisson"', "-c", PROVIDER]
    if model:
        argv += ["-m", model]
    return [*argv, prompt]


VERSION = "0.171.0"
"""The Codex CLI the agent image installs (images/agent/npm-packages.txt)."""
CUMULATIVE, PER_TURN = "cumulative", "per_turn"
USAGE_SHAPES: dict[str, str] = {"0.171.0": CUMULATIVE}
"""Codex version -> what ``turn.completed.usage`` means. ``cumulative``: the thread's
running total since it started (codex-rs ``exec/src/event_processor_with_jsonl_output.rs``
fills it from ``ThreadTokenUsage.total``, not ``last``), so the last one is the total and
turns are never summed. ``per_turn``: that turn's own usage, summed over turns. A version
not listed has an unknown shape: one turn reads the same either way; several give null."""
ITEM_TOOLS = {"command_execution": "exec_command", "file_change": "apply_patch", "web_search": "web_search",
              "mcp_tool_call": "mcp"}
ANSWER_ITEMS = frozenset({"agent_message", "assistant_message"})  # assistant_message: older versions
QUIET_ITEMS = frozenset({"reasoning", "todo_list"})  # known items that carry no tool call or answer
KNOWN_TYPES = frozenset({"thread.started", "turn.started", "turn.completed", "turn.failed", "item.started",
                         "item.updated", "item.completed", "error"})
"""Line types the parser reads; others are kept raw."""
TOKEN_SOURCE = "codex turn.completed usage"
TOKEN_FIELDS = ("input_tokens", "cached_input_tokens", "cache_write_input_tokens", "output_tokens",
                "reasoning_output_tokens")
REFUSAL_WORDINGS = wordings(
    # codex-cli 0.171.0 (@openai/codex linux-x64 vendor binary, string literals), what a command
    # item that did not run holds: a human or approver's denial, normalised ...
    "exec command rejected by user",
    "patch rejected by user",
    # ... the approval policy (core), an exec policy rule, the guardian's review
    "approval required by policy",
    f"approval policy is {ANY}; reject command",
    f"`{ANY}` rejected: policy forbids commands starting with",
    "This action was rejected due to unacceptable risk.",
)
"""How Codex words a command it refused, read from a ``failed`` command item's output when
no process exit code came with it (a ``declined`` item is refused whatever it says). A
declined patch is a ``file_change`` ``failed`` with no text (0.171.0 maps ``Declined`` to
``Failed``): it stays errored."""
RECONNECTING = re.compile(r"Reconnecting\.\.\. (\d+)/(\d+)(?: \((.*)\))?\Z", re.DOTALL)
"""A stream retry (core ``responses_retry.rs``: ``Reconnecting... {retry_count}/{max_retries}``,
then the cause in parentheses)."""
STATUS = re.compile(r"\b(?:unexpected status|last status:) (\d{3})\b")
"""The HTTP status in a ``CodexErr`` text (``unexpected status 401 Unauthorized: ...``,
``exceeded retry limit, last status: 429 ...``)."""
PROVIDER_TEXTS = ("stream disconnected before completion", "unexpected status ", "exceeded retry limit",
                  "Error while reading the server response", "Connection failed", "Selected model is at capacity",
                  "Quota exceeded", "You've hit your usage limit",
                  "Codex ran out of room in the model's context window", "request timed out")
"""``CodexErr`` texts of a model API that failed or refused (protocol/src/error.rs; all but the
timeout checked in the 0.171.0 binary), as an error message begins."""
AGENT_TEXTS = ("turn aborted", "Fatal error", "sandbox error")
"""``CodexErr`` texts of the CLI's own failures."""
REROUTED = re.compile(r"model rerouted: (\S+) -> (\S+)(?: \((.*)\))?\Z", re.DOTALL)
"""An ``error`` item of a model switch (``model rerouted: <from> -> <to> (<reason:?>)``)."""


def usage_shape(version: str | None) -> str | None:
    """What ``turn.completed.usage`` means in this Codex version (`USAGE_SHAPES`), or None: unknown."""
    return USAGE_SHAPES.get(version or "")


def _outcome(item: dict[str, Any]) -> tuple[str, str]:
    """(outcome, excerpt) of a completed tool item. A command that "completed" without an
    exit code was abandoned: its outcome is unknown (counted as executed by the audit, never
    called a success)."""
    status = item.get("status")
    output = str(item.get("aggregated_output", ""))
    excerpt = output[:300]
    if status in ("declined", "rejected"):
        return "refused", excerpt
    if status == "failed":  # worded as a refusal, and no process exit (None; -1 in codex's app-server tests)
        unrun = item.get("exit_code") in (None, -1)
        return ("refused" if unrun and says(output, REFUSAL_WORDINGS) else "errored"), excerpt
    if status != "completed":
        return "unknown", excerpt
    if item.get("type", item.get("item_type")) == "command_execution":
        code = item.get("exit_code")
        if not isinstance(code, int) or isinstance(code, bool):
            return "unknown", (excerpt + " " if excerpt else "") + "[status completed without an exit code]"
    return "executed", excerpt


def _cause(message: str) -> Cause:
    """Who failed, by the ``CodexErr`` text the message begins with; "" when it is none of them."""
    if message.startswith(PROVIDER_TEXTS):
        return "provider"
    return "agent" if message.startswith(AGENT_TEXTS) else ""


def _status(message: str) -> int | None:
    found = STATUS.search(message)
    return int(found.group(1)) if found else None


def _zeroed(usage: dict[str, Any]) -> bool:
    """Every token count reported is 0 (and at least one is)."""
    counts = [usage[k] for k in TOKEN_FIELDS if k in usage]
    return bool(counts) and all(isinstance(c, int) and not isinstance(c, bool) and c == 0 for c in counts)


def _as_responses(usage: dict[str, Any]) -> dict[str, Any]:
    """Codex's usage object in the Responses API's shape (OpenAI breakdown semantics); an
    absent count stays absent, never 0."""
    return {"input_tokens": usage.get("input_tokens"),
            "input_tokens_details": {"cached_tokens": usage.get("cached_input_tokens")},
            "output_tokens": usage.get("output_tokens"),
            "output_tokens_details": {"reasoning_tokens": usage.get("reasoning_output_tokens")}}


class TranscriptParser(JsonLinesParser):
    """Sans-IO (`ledger.SansIOParser`): `feed` stdout bytes, `next_event`, `close`.

    Items are read whether their kind is spelled ``type`` or ``item_type`` (older
    versions). The terminal event is the last turn's ``turn.completed`` (or
    ``turn.failed``): a turn started and never completed, or no turn at all, makes the
    transcript incomplete and its usage null. A failure the session ended on (`failed`)
    leaves no answer. Lines and items of unknown types are kept raw.

    Args:
        version: the Codex version that wrote the transcript (`USAGE_SHAPES`).
        shape: override what ``turn.completed.usage`` means (``cumulative`` or
            ``per_turn``); default: `usage_shape` of ``version``.

    Raises:
        ValueError: ``shape`` is neither (our misuse).
    """

    PARSER = "codex.transcript@3"
    TERMINAL = "turn.completed"

    def __init__(self, version: str | None = VERSION, shape: str | None = None) -> None:
        super().__init__()
        if shape not in (None, CUMULATIVE, PER_TURN):
            raise ValueError(f"shape {shape!r}: expected {CUMULATIVE!r} or {PER_TURN!r}")
        self.version = version
        self.shape = shape or usage_shape(version)
        self._open: dict[str, str] = {}  # item id -> tool, started and not completed
        self._answer: str | None = None
        self._turns: list[dict[str, Any]] = []  # turn.completed usage objects, in order
        self._in_turn = False
        self._failed: list[str] = []  # why turns failed

    def on_close(self) -> None:
        for call_id, tool in self._open.items():
            self.emit(AgentToolResult(agent=NAME, call_id=call_id, tool=tool, outcome="unknown"))
        if self._answer is not None and self.failed is None:
            self.emit(AgentAnswer(agent=NAME, text=self._answer))
        self.terminal = bool(self._turns or self._failed) and not self._in_turn
        usage, view, sources, missing = self._usage()
        if view is not None:
            view = msgspec.structs.replace(view, sources=sources)
        shape = self.shape or "shape unknown"
        self.emit(AgentUsage(agent=NAME, token_source=f"{TOKEN_SOURCE} ({shape}, codex {self.version})",
                             usage=usage, normalized=view, usage_missing_reason=missing,
                             incomplete=self.incomplete, parser=self.PARSER))

    def _usage(self) -> tuple[dict[str, Any] | None, Any, dict[str, str], str | None]:
        """(usage as reported, normalised view, sources, why the view is null)."""
        turns = self._turns
        if not self.terminal:
            return (turns[-1] if turns else None), None, {}, self.incomplete
        if self._failed:
            return (turns[-1] if turns else None), None, {}, f"a turn failed without usage: {self._failed[0]}"
        zeroed = [i for i, t in enumerate(turns, 1) if _zeroed(t)]
        if zeroed and (self.shape != CUMULATIVE or zeroed[-1] == len(turns)):
            which = f"turn.completed #{zeroed[-1]}" if len(turns) > 1 else "turn.completed"
            return turns[-1], None, {}, (f"{which} usage is all zeros: what codex writes when no token count"
                                         " arrived (Usage::default()), not a measurement")
        if len(turns) == 1:
            usage, sources = turns[0], {"usage": "turn.completed #1 (the only turn)"}
        elif self.shape == CUMULATIVE:
            keys = {k for t in turns for k, v in t.items() if isinstance(v, int)}
            for key in sorted(keys):
                values = [t.get(key) for t in turns]
                if any(isinstance(a, int) and isinstance(b, int) and b < a for a, b in zip(values, values[1:])):
                    return turns[-1], None, {}, (f"{key} decreases across turns ({values}): not a running total,"
                                                 f" although codex {self.version} reports one")
            usage, sources = turns[-1], {"usage": f"turn.completed #{len(turns)} (cumulative: the last, never summed)"}
        elif self.shape == PER_TURN:
            keys = {k for t in turns for k in t}
            usage = {}
            for key in sorted(keys):
                values = [t.get(key) for t in turns]
                counts = all(isinstance(v, int) and not isinstance(v, bool) for v in values)
                usage[key] = sum(values) if counts else None  # a turn that did not report it: unknown
            sources = {"usage": f"turn.completed #1..#{len(turns)} (per turn: summed)"}
        else:
            return turns[-1], None, {}, (f"{len(turns)} turns and the meaning of turn.completed.usage in codex"
                                         f" {self.version} is unknown (per turn or running total)")
        view, problem = normalize_usage("responses", _as_responses(usage), streamed=False)
        if view is not None:  # each figure names the turn rule too
            turn_rule = f"codex.turn_usage.{self.shape or 'single'}@1+"
            view = msgspec.structs.replace(view, rules={k: turn_rule + v for k, v in view.rules.items()})
        return usage, view, sources, (f"usage not normalisable: {problem}" if problem else None)

    def on_object(self, obj: dict[str, Any]) -> bool:
        kind = obj.get("type")
        if not isinstance(kind, str) or kind not in KNOWN_TYPES:
            return False
        if kind == "error":
            return self._error(obj.get("message"))
        if kind in ("turn.started", "turn.completed"):
            self.went_on()
        if kind == "turn.started":
            self._in_turn = True
        elif kind == "turn.completed":
            self._in_turn = False
            usage = obj.get("usage")
            if isinstance(usage, dict):
                self._turns.append(usage)
            else:
                self._failed.append("turn.completed without a usage object")
        elif kind == "turn.failed":
            self._in_turn = False
            error = obj.get("error")
            message = str(error.get("message", "")) if isinstance(error, dict) else "turn.failed"
            self._failed.append(message)
            self.hold_error(AgentError(agent=NAME, said="turn.failed", status=_status(message), message=message,
                                       cause=_cause(message)))
        elif kind.startswith("item."):
            return self._item(kind, obj.get("item"))
        return True

    def _error(self, message: Any) -> bool:
        """An ``error`` line: a stream retry, or an error the rest of the transcript shows
        the session ended on or went on from."""
        if not isinstance(message, str):
            return False
        retry = RECONNECTING.match(message)
        if retry:
            cause = retry.group(3) or ""
            self.emit(AgentRetry(agent=NAME, said="error.reconnecting", attempt=int(retry.group(1)),
                                 max_attempts=int(retry.group(2)), status=_status(cause), message=cause))
        else:
            self.hold_error(AgentError(agent=NAME, said="error", status=_status(message), message=message,
                                       cause=_cause(message)))
        return True

    def _item(self, kind: str, item: Any) -> bool:
        if not isinstance(item, dict):
            return False
        item_kind = item.get("type", item.get("item_type"))
        if not isinstance(item_kind, str):
            return False
        if item_kind == "error":  # a notice (config warning, deprecation) or a model switch
            rerouted = REROUTED.match(str(item.get("message", "")))
            if rerouted and kind == "item.completed":
                self.emit(AgentModelSwitch(agent=NAME, said="item.error.model_rerouted", requested=rerouted.group(1),
                                           used=rerouted.group(2), trigger=rerouted.group(3),
                                           message=str(item["message"])))
            return True
        self.went_on()
        tool = ITEM_TOOLS.get(item_kind)
        if tool is None:
            if item_kind in ANSWER_ITEMS:
                if kind == "item.completed":
                    self._answer = str(item.get("text", ""))
                return True
            return item_kind in QUIET_ITEMS
        call_id = str(item.get("id", ""))
        shown = {k: v for k, v in item.items() if k in ("command", "changes", "query")}
        if kind == "item.started":
            self._open[call_id] = tool
            self.emit(AgentToolCall(agent=NAME, call_id=call_id, tool=tool, input=shown))
        elif kind == "item.completed":
            if self._open.pop(call_id, None) is None:
                self.emit(AgentToolCall(agent=NAME, call_id=call_id, tool=tool, input=shown))
            outcome, excerpt = _outcome(item)
            self.emit(AgentToolResult(agent=NAME, call_id=call_id, tool=tool, outcome=outcome, excerpt=excerpt))
        return True
