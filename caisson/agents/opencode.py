"""OpenCode: invocation, gating, and a sans-IO transcript parser.

Invocation (verified against opencode-ai 1.18.33 in the agent image): ``opencode run
--format json PROMPT`` runs one session and prints one JSON event per line. Its model is
reached through a custom provider, ``caisson``, in a pinned configuration (`CONFIG`, handed
over whole in ``OPENCODE_CONFIG_CONTENT`` and so recorded in ``run.started.command``): the
bundled ``@ai-sdk/openai-compatible`` provider at ``https://api.openai.com/v1`` (Chat
Completions), which the chamber reaches through the proxy witness. The repository's own
OpenCode configuration is not read; ``--title`` spares the side call that would name the
session (it would race the task's first model call) (``OPENCODE_DISABLE_PROJECT_CONFIG``), nor Claude
Code's files, and nothing is fetched at start (models list, updates, LSP servers).

Gating is claimed **enforced**, and a preflight's gating probe decides
(`caisson.gating.probe`): the arm's deny list becomes the configuration's ``permission``
map (`permissions`), where ``deny`` removes the tool from the session; a call to a tool not
in the session comes back as the ``invalid`` tool naming it, which the parser reports
``refused``. One permission can cover several tools (``edit`` covers write, edit and
patch): a grant of one of them with another denied is denied (over-denied, never under).

Transcript: ``step_start``; ``text`` (``part.text``); ``tool_use`` (``part.tool``,
``part.callID``, ``part.state.status`` completed or error, its ``input`` and ``output``);
``step_finish`` (``part.reason``: ``tool-calls`` or ``stop``; ``part.tokens``: that step's
model call: ``input`` without the cached tokens, ``cache.read``/``cache.write`` beside it,
``output``, ``reasoning``; ``part.cost``); ``error``. The terminal event is a ``step_finish``
whose reason is ``stop``. Steps are separate model calls: their tokens add up.

What 1.18.33 writes and what it means (its run loop and ``Session.getUsage``, read out of
its binary: /work/research/agents/REPORT.md section 3): an ``error`` line (a NamedError
``{name, data}``) is an ``agent.error``; a ``ContextOverflowError`` is not the end (the
session compacts and goes on). A step whose token counts are all 0 had no usage from its
provider (``getUsage`` fills 0): its tokens are unknown. A ``cost`` of 0 is what a
provider without a ``cost`` block gets (caisson's ``caisson`` provider has none): no
figure. Retries and compactions are not written by ``run --format json``.
"""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec

from caisson.agents._lines import ANY, Cause, JsonLinesParser, says, wordings
from collectors.llm import normalize_usage
from ledger.events import AgentAnswer, AgentError, AgentToolCall, AgentToolResult, AgentUsage, Gating

__all__ = ["NAME", "VERSION", "GATING", "ELICITATION", "STATIC_TOOLS", "ENV", "CONFIG", "REFUSAL_WORDINGS", "command",
           "permissions", "TranscriptParser"]

NAME = "opencode"
VERSION = "1.18.33"
"""The OpenCode the agent image installs (images/agent/npm-packages.txt)."""
GATING: Gating = "enforced"
# The CLI's own programs (exec paths, fnmatch patterns): the npm package's native binary and
# its bin link (/usr/local/bin/opencode -> ../lib/node_modules/opencode-ai/bin/opencode.exe in
# the agent image). In recorded 1.18.33 ``opencode run`` sessions every model call came from
# the command's own process (its server runs in it: no child of its own executable).
PROGRAMS = ("/usr/local/bin/opencode", "/usr/local/lib/node_modules/opencode-ai/bin/opencode.exe")
"""Claimed; a preflight's gating probe measures it (`caisson.gating.probe`)."""
ELICITATION = "stream"
STATIC_TOOLS = ("apply_patch", "bash", "edit", "glob", "grep", "list", "patch", "read", "skill", "task", "todoread",
                "todowrite", "webfetch", "websearch", "write")
"""OpenCode 1.18.33's built-in tools (for GPT models ``apply_patch`` replaces write and edit;
its ``invalid`` pseudo-tool, which reports a call to a tool not in the session, is not
one); the rest are found by discovery."""
PERMISSION_OF = {"write": "edit", "edit": "edit", "patch": "edit", "multiedit": "edit", "apply_patch": "edit"}
"""Tool -> the ``permission`` key that governs it, where they differ (OpenCode's config docs)."""
ENV = {
    "OPENCODE_DISABLE_PROJECT_CONFIG": "1",  # the repository's opencode.json is not the scenario's
    "OPENCODE_DISABLE_CLAUDE_CODE": "1",  # nor are CLAUDE.md and .claude/ (agent instructions)
    "OPENCODE_DISABLE_MODELS_FETCH": "1",  # no models.dev fetch at start
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_SHARE": "1",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
}
"""Variables OpenCode needs in the chamber (no secrets)."""
CONFIG: dict[str, Any] = {
    "provider": {"caisson": {"npm": "@ai-sdk/openai-compatible", "name": "caisson",
                             "options": {"baseURL": "https://api.openai.com/v1", "apiKey": "{env:OPENAI_API_KEY}"},
                             "models": {}}},
    "autoupdate": False,
    "share": "disabled",
}
"""The pinned configuration; `command` adds the model and the arm's permissions."""
TOKEN_SOURCE = "opencode step_finish tokens (per step, summed)"
OUTPUT_RULE = "opencode.output_plus_reasoning@1"
"""OpenCode's ``tokens.output`` leaves out ``tokens.reasoning`` (1.18.33 on the scripted
model: a call of 25 completion tokens, 5 of them reasoning, is reported as output 20,
reasoning 5), so the generated count is their sum, as the provider's completion count is."""


REFUSAL_WORDINGS = wordings(
    # OpenCode 1.18.33 (opencode-linux-x64, bin/opencode: strings of its JS), a tool part's
    # state.error when the call did not run: the run's auto-reject of a permission it asked
    # (PermissionRejectedError, PermissionCorrectedError with feedback) ...
    "The user rejected permission to use this specific tool call",
    # ... a rule that denies it at call time (PermissionDeniedError)
    "The user has specified a rule which prevents you from using this specific tool call",
    # ... a call to a tool the session lacks, as the `invalid` tool words it (AI SDK NoSuchToolError)
    f"The arguments provided to the tool are invalid: Model tried to call unavailable tool '{ANY}'",
)
"""How OpenCode words a call it refused, matched at the start of ``state.error`` (after an
error-class prefix such as ``PermissionRejectedError: ``, should the text carry one)."""
CAUSE_OF_ERROR: dict[str, Cause] = {
    "APIError": "provider", "ProviderAuthError": "provider", "ContextOverflowError": "provider",
    "ContentFilterError": "provider", "MessageOutputLengthError": "limit", "MessageAbortedError": "agent",
    "StructuredOutputError": "agent", "ProviderInitError": "agent", "ProviderModelNotFoundError": "agent"}
"""NamedError name -> who failed (1.18.33's definitions; ``UnknownError`` could be either; a
model the configuration does not name is the configuration's failure)."""
ERROR_PREFIX = re.compile(r"\A\s*[A-Za-z.]*Error: ")
NO_COST = ("opencode reports cost 0: what a provider without a cost block gets (caisson's provider has none),"
           " not a computed cost")


def permissions(allowed: list[str], denied: list[str]) -> dict[str, str]:
    """The ``permission`` map of an arm: each denied tool's key ``deny``, each granted one's
    ``allow`` unless a denied tool shares its key (deny wins)."""
    out = {PERMISSION_OF.get(tool, tool): "allow" for tool in allowed}
    out.update({PERMISSION_OF.get(tool, tool): "deny" for tool in denied})
    return dict(sorted(out.items()))


def command(prompt: str, *, allowed: list[str], denied: list[str], model: str | None = None,
            max_turns: int | None = None) -> list[str]:
    """The argv of one ``opencode run``, its configuration in ``OPENCODE_CONFIG_CONTENT``.

    Args:
        prompt: the question.
        allowed: tools granted by the arm (``allow``).
        denied: the arm's deny list (``deny``: removed from the session).
        model: the model the provider serves (default ``gpt-5``).
        max_turns: ignored: ``opencode run`` has no bound on steps.
    """
    name = model or "gpt-5"
    config = json.loads(json.dumps(CONFIG))
    config["provider"]["caisson"]["models"] = {name: {"name": name, "tool_call": True}}
    config["model"] = config["small_model"] = f"caisson/{name}"
    if allowed or denied:
        config["permission"] = permissions(allowed, denied)
    return ["env", "OPENCODE_CONFIG_CONTENT=" + json.dumps(config, sort_keys=True), "opencode", "run",
            "--format", "json", "--title", "caisson", prompt]


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class TranscriptParser(JsonLinesParser):
    """Sans-IO (`ledger.SansIOParser`): `feed` stdout bytes, `next_event`, `close`.

    Args:
        version: the OpenCode version that wrote the transcript (recorded in the token source).
    """

    PARSER = "opencode.transcript@2"
    TERMINAL = "step_finish (reason stop)"
    KNOWN_TYPES = frozenset({"step_start", "text", "tool_use", "step_finish", "error"})

    def __init__(self, version: str | None = VERSION) -> None:
        super().__init__()
        self.version = version
        self._steps: list[dict[str, Any]] = []  # step_finish tokens, in order
        self._costs: list[Any] = []  # step_finish costs, in order
        self._texts: list[str] = []  # texts of the current step
        self._answer: str | None = None

    def on_object(self, obj: dict[str, Any]) -> bool:
        kind = obj.get("type")
        if not isinstance(kind, str) or kind not in self.KNOWN_TYPES:
            return False
        part = obj.get("part") if isinstance(obj.get("part"), dict) else {}
        if kind != "error":
            self.went_on()
        if kind == "step_start":
            self._texts = []
            self.terminal = False
        elif kind == "text":
            self._texts.append(str(part.get("text", "")))
        elif kind == "tool_use":
            self._tool(part)
        elif kind == "step_finish":
            tokens = part.get("tokens")
            self._steps.append(tokens if isinstance(tokens, dict) else {})
            self._costs.append(part.get("cost"))
            self.terminal = part.get("reason") == "stop"
            if self.terminal:
                self._answer = "".join(self._texts)
        else:
            self._error(obj.get("error"))
            self.terminal = False
        return True

    def _error(self, error: Any) -> None:
        """An ``error`` line: a NamedError ``{name, data: {message, statusCode?, ...}}``, or
        the error body of a failed prompt (shape unconfirmed: a ``message`` read where found)."""
        error = error if isinstance(error, dict) else {"message": error} if isinstance(error, str) else {}
        data = error.get("data") if isinstance(error.get("data"), dict) else {}
        name = error.get("name") if isinstance(error.get("name"), str) else None
        message = str(data.get("message") or error.get("message") or name or "error")
        status = data.get("statusCode")
        self.hold_error(AgentError(agent=NAME, said="error", code=name, message=message,
                                   cause=CAUSE_OF_ERROR.get(name or "", ""),
                                   status=status if isinstance(status, int) and not isinstance(status, bool) else None))

    def _tool(self, part: dict[str, Any]) -> None:
        state = part.get("state") if isinstance(part.get("state"), dict) else {}
        tool, call_id = str(part.get("tool", "")), str(part.get("callID", ""))
        shown = state.get("input") if isinstance(state.get("input"), dict) else {}
        output = str(state.get("output", state.get("error", "")))[:300]
        if tool == "invalid":  # a call to a tool the session does not have: refused, under its own name
            tool = str(shown.get("tool", "invalid"))
            self.emit(AgentToolCall(agent=NAME, call_id=call_id, tool=tool, input=shown))
            self.emit(AgentToolResult(agent=NAME, call_id=call_id, tool=tool, outcome="refused", excerpt=output))
            return
        status = state.get("status")
        outcome = {"completed": "executed", "error": "errored"}.get(status, "unknown")
        if status == "error" and says(ERROR_PREFIX.sub("", str(state.get("error", "")), count=1), REFUSAL_WORDINGS):
            outcome = "refused"
        self.emit(AgentToolCall(agent=NAME, call_id=call_id, tool=tool, input=shown))
        self.emit(AgentToolResult(agent=NAME, call_id=call_id, tool=tool, outcome=outcome, excerpt=output))

    def on_close(self) -> None:
        if self._answer is not None and self.terminal and self.failed is None:
            self.emit(AgentAnswer(agent=NAME, text=self._answer))
        incomplete = self.incomplete
        if self.failed is not None:  # an error the session went on from does not make it incomplete
            incomplete = "; ".join(filter(None, [incomplete, f"error: {self.failed.message}"]))
        usage, view, missing = self._usage(incomplete)
        cost, cost_missing = self._cost()
        self.emit(AgentUsage(agent=NAME, token_source=f"{TOKEN_SOURCE}, opencode {self.version}", usage=usage,
                             normalized=view, usage_missing_reason=missing, incomplete=incomplete,
                             parser=self.PARSER, cost_usd=cost, cost_missing_reason=cost_missing))

    def _cost(self) -> tuple[float | None, str | None]:
        """(the steps' costs summed, why it is null): a step without a cost number, or with
        a cost of 0 (`NO_COST`), leaves the sum unknown."""
        if not self._costs:
            return None, None
        if any(not isinstance(c, (int, float)) or isinstance(c, bool) for c in self._costs):
            return None, "a step_finish without a cost number"
        if any(c == 0 for c in self._costs):
            zero = [i for i, c in enumerate(self._costs, 1) if c == 0]
            return None, f"step_finish #{', #'.join(map(str, zero))}: {NO_COST}"
        return float(sum(self._costs)), None

    def _usage(self, incomplete: str | None) -> tuple[dict[str, Any] | None, Any, str | None]:
        """(the steps' tokens summed per field as OpenCode names them; the normalised view;
        why it is null). Input, cache reads and writes are separate addends (Anthropic's
        rule); output is output + reasoning (`OUTPUT_RULE`). A field a step did not report
        is null, never 0; an incomplete transcript has a null view."""
        if not self._steps:
            return None, None, incomplete or "no step_finish: no usage reported"
        counts = [[_count(s.get(k)) for k in ("input", "output", "reasoning")] + [
            _count(s["cache"].get(k)) if isinstance(s.get("cache"), dict) else None for k in ("read", "write")]
            for s in self._steps]
        zeroed = [i for i, step in enumerate(counts, 1) if any(c is not None for c in step)
                  and all(c in (0, None) for c in step)]

        def total(*path: str) -> int | None:
            values = []
            for step in self._steps:
                node: Any = step
                for key in path:
                    node = node.get(key) if isinstance(node, dict) else None
                values.append(_count(node))
            return sum(values) if all(v is not None for v in values) else None  # type: ignore[arg-type]

        usage = {"input": total("input"), "output": total("output"), "reasoning": total("reasoning"),
                 "cache_read": total("cache", "read"), "cache_write": total("cache", "write")}
        if incomplete:
            return usage, None, incomplete
        if zeroed:
            return usage, None, (f"step_finish #{', #'.join(map(str, zeroed))} reports 0 tokens: what opencode writes"
                                 " when the provider sent no usage (Session.getUsage), not a measurement")
        output, reasoning = usage["output"], usage["reasoning"]
        shaped = {"input_tokens": usage["input"], "cache_read_input_tokens": usage["cache_read"],
                  "cache_creation_input_tokens": usage["cache_write"],
                  "output_tokens": output + reasoning if output is not None and reasoning is not None else None}
        view, problem = normalize_usage("messages", shaped, streamed=False)
        if view is None:
            return usage, None, f"usage not normalisable: {problem}"
        rule = OUTPUT_RULE
        rules = {**view.rules, "output_tokens": f"{rule}+{view.rules.get('output_tokens', '')}"}
        view = msgspec.structs.replace(view, reasoning_tokens=reasoning, rule=f"{view.rule}; {rule}", rules=rules)
        return usage, view, None
