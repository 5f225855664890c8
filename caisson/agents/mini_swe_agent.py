"""mini-swe-agent: invocation, gating, and a sans-IO parser of its trajectory file.

Invocation (verified against mini-swe-agent 2.4.6 in the agent image, /opt/mini-swe-agent):
``mini -y --exit-immediately -c mini.yaml -m openai/MODEL -t PROMPT -o TRAJ`` runs one task
without confirmation and writes its trajectory, one JSON document, to ``TRAJ`` after every
step. Its console output is rich text for humans, so the adapter sends it to stderr and
prints the trajectory on stdout once the agent exits: the transcript is an **answer file**
(`ELICITATION`), not a stream. A run cut off before that (the chamber's deadline) has an
empty transcript, and ``agent.usage`` says so.

The model is reached through litellm's OpenAI provider (Chat Completions at
``https://api.openai.com/v1``, which the chamber reaches through the proxy witness; the
scenario's egress maps it to an endpoint, the scripted one in tests and preflights).

Gating is **ungated**: the agent offers the model exactly one tool, ``bash``
(``minisweagent/models/utils/actions_toolcall.py`` ``BASH_TOOL``), and has no allow or deny
list; whatever the grant, every command runs. A call to any other tool name is a format
error the agent answers without executing anything: the parser reports it ``refused``.

Trajectory (``trajectory_format`` ``mini-swe-agent-1.1``): ``messages`` holds the
conversation; ``assistant`` messages carry ``tool_calls`` and, in ``extra.response``, the
provider's response as litellm returned it (its ``usage``, per call: Chat Completions
semantics, cached and reasoning counts inside prompt and completion); ``tool`` messages
carry ``extra.returncode`` and ``extra.exception_info``; a ``user`` message with
``extra.interrupt_type`` ``FormatError`` follows a response whose tool calls were refused
(that response is in its ``extra.response``); the last message, role ``exit``, has
``extra.exit_status`` (``Submitted`` when the agent finished) and ``extra.submission``
(the answer). ``info.model_stats`` reports the cost and the number of model calls.

How 2.4.6 ends (``agents/default.py``, ``environments/local.py``: /work/research/agents/REPORT.md
section 5): an exit status other than ``Submitted`` (a step, cost or time limit, repeated
format errors, or an uncaught exception, named by its class: ``AuthenticationError``, ...)
is an ``agent.error``. Under ``MSWEA_COST_TRACKING=ignore_errors`` (`ENV`) a call litellm
cannot price costs 0.0 silently, so an ``instance_cost`` of 0.0 after model calls is no
figure. Retries are logged on stderr only.
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any

from caisson.agents._lines import MESSAGE_CHARS, RAW_CHARS, Cause
from collectors.llm import normalize_usage
from ledger import NEED_DATA, NeedData, ParserClosedError
from ledger.events import (
    AgentAnswer, AgentError, AgentToolCall, AgentToolResult, AgentUsage, Event, Gating, WitnessRaw,
)

__all__ = ["NAME", "GATING", "ELICITATION", "STATIC_TOOLS", "VERSION", "ENV", "command", "TranscriptParser"]

NAME = "mini-swe-agent"
VERSION = "2.4.6"
"""The mini-swe-agent the agent image installs (images/agent/pip-packages.txt)."""
GATING: Gating = "ungated"
# The CLI's own programs (exec paths, fnmatch patterns): the adapter's command is a shell
# that runs ``mini`` (a script of /opt/mini-swe-agent's Python; /usr/local/bin/mini links to
# it in the agent image), which makes the model calls (2.4.6, through litellm).
PROGRAMS = ("/usr/local/bin/mini", "/opt/mini-swe-agent/bin/mini")
ELICITATION = "answer_file"
"""The answer is read from the trajectory file the agent writes (``info.submission``)."""
STATIC_TOOLS = ("bash",)
"""The only tool mini-swe-agent 2.4.6 offers the model (``BASH_TOOL``)."""
TRAJECTORY = "/tmp/caisson-home/mini.traj.json"
"""Where the agent writes its trajectory in the chamber (inside its fresh config home)."""
ENV = {
    "MSWEA_CONFIGURED": "true",  # skip the first-run configuration prompt
    "MSWEA_COST_TRACKING": "ignore_errors",  # a model litellm has no price for must not abort the run
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # litellm fetches its price list from GitHub otherwise
}
"""Variables mini-swe-agent needs in the chamber (no secrets)."""
SUBMIT_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
"""The first output line by which a command submits the answer (``environments/local.py``)."""
LIMITS = frozenset({"LimitsExceeded", "TimeExceeded", "RepeatedFormatError"})
"""Exit statuses of a bound the run's configuration set (step and cost limits, wall time,
``max_consecutive_format_errors``)."""
PROVIDER_EXCEPTIONS = frozenset({
    "AuthenticationError", "CallerCredentialAuthenticationError", "NotFoundError", "BadRequestError",
    "UnprocessableEntityError", "Timeout", "PermissionDeniedError", "RateLimitError", "CallerCredentialRateLimitError",
    "ContextWindowExceededError", "PaymentRequiredError", "RejectedRequestError", "ContentPolicyViolationError",
    "ServiceUnavailableError", "BadGatewayError", "InternalServerError", "APIError", "APIConnectionError",
    "APIResponseValidationError", "MidStreamFallbackError"})
"""Exception classes of litellm 1.110.2 (in the agent image beside mini-swe-agent 2.4.6:
``litellm/exceptions.py``) raised for a model API that failed or refused; an exit whose text
begins ``litellm.`` counts too (litellm's messages do)."""
TOKEN_SOURCE = "mini-swe-agent trajectory extra.response.usage (per call, summed)"
_SCRIPT = ('mini -y --exit-immediately -c mini.yaml "$@" -o "$TRAJ" >&2; status=$?;'
           ' cat "$TRAJ" 2>/dev/null; exit $status')


def command(prompt: str, *, allowed: list[str], denied: list[str], model: str | None = None,
            max_turns: int | None = None) -> list[str]:
    """The argv of one task: ``mini`` with its console on stderr, then the trajectory on stdout.

    Args:
        prompt: the question (the agent's task).
        allowed: ignored: the agent cannot gate (``ungated``).
        denied: ignored, as ``allowed``.
        model: the model; a bare name (``gpt-5``) is litellm's ``openai/gpt-5``.
        max_turns: the agent's ``step_limit`` (model calls).
    """
    args = ["-t", prompt]
    if model:
        args += ["-m", model if "/" in model else f"openai/{model}"]
    if max_turns:
        args += ["-c", f"agent.step_limit={max_turns}"]
    return ["env", f"TRAJ={TRAJECTORY}", "sh", "-c", _SCRIPT, "mini", *args]


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _zeroed(usage: dict[str, Any]) -> bool:
    """A Chat Completions usage object whose prompt and completion counts are both 0."""
    counts = [usage.get("prompt_tokens"), usage.get("completion_tokens")]
    return all(_is_count(c) and c == 0 for c in counts)


def _sum_usage(calls: list[Any]) -> dict[str, Any]:
    """The calls' Chat Completions usage objects summed per field (each call is its own
    request: per-call counts add up); a field a call did not report is null, never 0."""
    fields = {"prompt_tokens": (), "completion_tokens": (), "total_tokens": (),
              "cached_tokens": ("prompt_tokens_details",), "reasoning_tokens": ("completion_tokens_details",)}
    total: dict[str, Any] = {}
    for name, path in fields.items():
        values = []
        for usage in calls:
            node = usage
            for key in path:
                node = node.get(key) if isinstance(node, dict) else None
            values.append(node.get(name) if isinstance(node, dict) else None)
        if name in ("cached_tokens", "reasoning_tokens") and all(v is None for v in values):
            continue  # a breakdown nobody reported stays absent
        total[name] = sum(values) if all(_is_count(v) for v in values) else None
    out = {k: total.get(k) for k in ("prompt_tokens", "completion_tokens", "total_tokens")}
    if "cached_tokens" in total:
        out["prompt_tokens_details"] = {"cached_tokens": total["cached_tokens"]}
    if "reasoning_tokens" in total:
        out["completion_tokens_details"] = {"reasoning_tokens": total["reasoning_tokens"]}
    return out


def _calls(message: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(id, tool, input) of a model message's tool calls; arguments that are not a JSON
    object are kept as text under ``raw``."""
    out = []
    for call in message.get("tool_calls") or []:
        if not isinstance(call, dict):
            continue
        function = call.get("function") if isinstance(call.get("function"), dict) else {}
        raw = function.get("arguments", "")
        try:
            args = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            args = None
        out.append((str(call.get("id", "")), str(function.get("name", "")),
                    args if isinstance(args, dict) else {"raw": str(raw)[:300]}))
    return out


class TranscriptParser:
    """Sans-IO (`ledger.SansIOParser`): `feed` stdout bytes (the trajectory document),
    `close`, then `next_event` until `NEED_DATA`.

    The whole document is decoded at `close`. Text that is not one JSON object (nothing
    printed: the run was cut off; or a document cut mid-way) makes the transcript
    incomplete: ``agent.usage`` says why and its usage is null. A trajectory whose exit
    status is not ``Submitted`` (a step or cost limit, an error) is incomplete too, with
    its tool calls and usage as far as they go.

    Args:
        version: the mini-swe-agent version that wrote the trajectory (recorded in
            ``token_source``).
    """

    PARSER = "mini-swe-agent.trajectory@2"
    TERMINAL = "exit message with exit_status Submitted"

    def __init__(self, version: str | None = VERSION) -> None:
        self.version = version
        self._buf = bytearray()
        self._out: deque[Event] = deque()
        self._closed = False
        self.incomplete: str | None = None

    def feed(self, data: bytes) -> None:
        """Add stdout bytes (kept until `close`: the document is whole only at the end).

        Raises:
            ParserClosedError: after `close`.
        """
        if self._closed:
            raise ParserClosedError("mini-swe-agent TranscriptParser.feed after close")
        self._buf += data

    def next_event(self) -> Event | NeedData:
        """The next event made so far (none before `close`), or `NEED_DATA`."""
        return self._out.popleft() if self._out else NEED_DATA

    def close(self) -> None:
        """Decode the trajectory and emit its events; a second call does nothing."""
        if self._closed:
            return
        self._closed = True
        text = bytes(self._buf).decode("utf-8", "replace").strip()
        self._buf.clear()
        try:
            doc, end = json.JSONDecoder().raw_decode(text) if text else (None, 0)
        except (ValueError, RecursionError):
            doc, end = None, 0
        if not isinstance(doc, dict) or not isinstance(doc.get("messages"), list):
            if text:
                self._out.append(WitnessRaw(witness="transcript", line=text[:RAW_CHARS]))
            why = ("no trajectory was printed (the run ended before the agent exited)" if not text else
                   f"the trajectory is not one JSON object with messages (cut mid-way?): {text[:80]!r}")
            self._usage(None, [], why)
            return
        self._read(doc, text[end:].strip())

    def _read(self, doc: dict[str, Any], junk: str) -> None:
        open_calls: dict[str, tuple[str, str]] = {}  # call id -> (tool, command), awaiting its result
        unrun: list[int] = []  # indices in _out of this step's "not executed" results
        commands: dict[int, str] = {}
        usages: list[Any] = []
        exit_extra: dict[str, Any] | None = None
        exit_text: Any = None
        for message in doc["messages"]:
            if not isinstance(message, dict):
                continue
            role, extra = message.get("role"), message.get("extra")
            extra = extra if isinstance(extra, dict) else {}
            response = extra.get("response")
            if isinstance(response, dict) and role in ("assistant", "user"):
                usages.append(response.get("usage"))
            if role == "assistant":
                unrun = []
                for call_id, tool, args in _calls(message):
                    open_calls[call_id] = (tool, str(args.get("command", "")))
                    self._out.append(AgentToolCall(agent=NAME, call_id=call_id, tool=tool, input=args))
            elif role == "tool":
                call_id = str(message.get("tool_call_id", ""))
                tool, cmd = open_calls.pop(call_id, ("bash", ""))
                result = _outcome(extra)
                if result["outcome"] == "refused":
                    unrun.append(len(self._out))
                    commands[len(self._out)] = cmd
                self._out.append(AgentToolResult(agent=NAME, call_id=call_id, tool=tool, **result))
            elif role == "user" and extra.get("interrupt_type") == "FormatError" and isinstance(response, dict):
                choices = response.get("choices")
                first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
                model_message = first.get("message") if isinstance(first.get("message"), dict) else {}
                for call_id, tool, args in _calls(model_message):  # none of them ran
                    self._out.append(AgentToolCall(agent=NAME, call_id=call_id, tool=tool, input=args))
                    self._out.append(AgentToolResult(agent=NAME, call_id=call_id, tool=tool, outcome="refused",
                                                      excerpt=str(message.get("content", ""))[:300]))
            elif role == "exit":
                exit_extra, exit_text = extra, message.get("content")
        status = exit_extra.get("exit_status") if exit_extra is not None else None
        submitted = status == "Submitted"
        if submitted:
            self._submitting_step(unrun, commands)
        for call_id, (tool, _) in open_calls.items():
            self._out.append(AgentToolResult(agent=NAME, call_id=call_id, tool=tool, outcome="unknown"))
        if submitted:
            self._out.append(AgentAnswer(agent=NAME, text=str(exit_extra.get("submission", ""))))
        elif exit_extra is not None:  # a limit, repeated format errors, or an exception (then its class)
            raised = "exception_str" in exit_extra or "traceback" in exit_extra
            said = str(exit_extra.get("exception_str") if raised else exit_text or "")
            self._out.append(AgentError(agent=NAME, said="exit.exception" if raised else "exit.exit_status",
                                        code=status if isinstance(status, str) else None,
                                        message=said[:MESSAGE_CHARS], cause=_cause(status, said)))
        why = None if submitted else (f"the agent exited with {status!r}, not 'Submitted'" if status
                                      else "the trajectory has no exit message")
        if junk:  # kept raw, never dropped; the trajectory's own figures stand
            self._out.append(WitnessRaw(witness="transcript", line=junk[:RAW_CHARS]))
            why = "; ".join(filter(None, [why, f"text after the trajectory document: {junk[:80]!r}"]))
        info = doc.get("info") if isinstance(doc.get("info"), dict) else {}
        stats = info.get("model_stats") if isinstance(info.get("model_stats"), dict) else {}
        self._usage(stats.get("instance_cost"), usages, why, submitted, stats.get("api_calls"))

    def _submitting_step(self, unrun: list[int], commands: dict[int, str]) -> None:
        """Correct the last step's results. The command that submits ends the step by an
        exception, so mini-swe-agent marks every action of that step "not executed",
        although those before the submitting one (the first that prints `SUBMIT_MARKER`)
        and it ran. Those become executed; with no such command, unknown (counted as
        executed by the audit)."""
        marker = next((i for i in unrun if SUBMIT_MARKER in commands[i]), None)
        for index in unrun:
            old = self._out[index]
            if marker is None:
                outcome, excerpt = "unknown", "marked not executed in the step that submitted"
            elif index <= marker:
                outcome, excerpt = "executed", ("submitted the answer" if index == marker else "ran before the submit")
            else:
                continue
            self._out[index] = AgentToolResult(agent=NAME, call_id=old.call_id, tool=old.tool, outcome=outcome,
                                               excerpt=excerpt)

    def _usage(self, cost: Any, usages: list[Any], incomplete: str | None, submitted: bool = False,
               calls: Any = None) -> None:
        """Emit ``agent.usage``: the calls' usage summed; normalised only when the agent
        submitted (a trajectory that stopped early is null, with ``incomplete`` saying why).
        A call whose usage is all zeros measured nothing (whether litellm fills zeros for a
        provider that sent none is unconfirmed): the sum is unknown. A cost of 0.0 after
        model calls (``api_calls``, or responses in the trajectory) is unknown."""
        self.incomplete = incomplete
        usage = view = None
        missing = None if submitted else incomplete
        zeroed = [i for i, u in enumerate(usages, 1) if isinstance(u, dict) and _zeroed(u)]
        if usages:
            usage = _sum_usage(usages)
            if submitted and zeroed:
                missing = (f"model call #{', #'.join(map(str, zeroed))} reports 0 tokens: no call is measured at"
                           " 0 tokens, so its usage is unknown")
            elif submitted:
                view, problem = normalize_usage("chat.completions", usage, streamed=False)
                missing = f"usage not normalisable: {problem}" if problem else None
        elif submitted:
            missing = "the trajectory holds no model response"
        cost = float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) else None
        cost_missing = None
        called = (_is_count(calls) and calls > 0) or bool(usages)
        if cost == 0 and called:
            cost, cost_missing = None, (
                f"instance_cost 0.0 after {calls if _is_count(calls) else len(usages)} model call(s): what"
                " mini-swe-agent adds for a call litellm cannot price under MSWEA_COST_TRACKING=ignore_errors (or a"
                " call that raised), not a computed cost")
        self._out.append(AgentUsage(agent=NAME, token_source=f"{TOKEN_SOURCE}, mini-swe-agent {self.version}",
                                    usage=usage, normalized=view, usage_missing_reason=missing, cost_usd=cost,
                                    incomplete=incomplete, parser=self.PARSER, cost_missing_reason=cost_missing))


def _cause(status: Any, message: str) -> Cause:
    """Who ended the run, by its exit status (a limit, a litellm error, the agent's own exception)."""
    if status in LIMITS or message.startswith("Global cost/call limit exceeded"):
        return "limit"
    if status in PROVIDER_EXCEPTIONS or message.startswith("litellm."):
        return "provider"
    return "agent" if isinstance(status, str) and status else ""


def _outcome(extra: dict[str, Any]) -> dict[str, Any]:
    """outcome and excerpt of a ``tool`` message: executed (exit 0), errored (non-zero exit,
    a timeout or another exception), refused (never executed: an earlier action ended the
    step), unknown (no exit code)."""
    code, exception = extra.get("returncode"), extra.get("exception_info")
    excerpt = str(extra.get("raw_output", ""))[:300]
    if exception == "action was not executed":
        return {"outcome": "refused", "excerpt": "not executed: an earlier action ended the step"}
    if exception:
        return {"outcome": "errored", "excerpt": (excerpt + " " if excerpt else "") + f"[{str(exception)[:200]}]"}
    if not _is_count(code):
        return {"outcome": "unknown", "excerpt": excerpt}
    return {"outcome": "executed" if code == 0 else "errored", "excerpt": excerpt}
