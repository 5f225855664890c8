"""Model scripts: the turns a scripted model endpoint plays, one per request.

A model script is a TOML file validated by msgspec into frozen Structs; every error names
the file and the offending field as a JSON path (`$.turns[1].usage.reasoning`). The
scripted endpoint (`caisson.model.server`) plays a conversation's turns in order, one
per model request, and answers in the API shape the request used (Anthropic Messages,
OpenAI Chat Completions or Responses); the agent then executes the tool calls for real.

Example:

    name = "grep_then_answer"
    models = ["claude-sonnet-4-5"]

    [[turns]]
    match = { last_user_contains = "answer" }
    tool_calls = [{ name = "Bash", arguments = { command = "grep -rn 'def answer' ." } }]
    usage = { input = 900, cache_write = 2048, output = 40 }

    [[turns]]
    match = { tool_result_contains = "def answer" }
    text = "`answer` is defined in src/app.py:1"
    usage = { input = 60, cache_read = 2948, output = 12 }

Usage is given once per turn in a provider-neutral form (`Usage`) and rendered per API by
`render_usage`, whose docstring states the rules.

A turn's ``error`` (`ScriptedError`) answers the turn's first ``error.times`` requests
instead of its response: an HTTP error in the provider's shape, or with ``midstream`` a
stream that opens and then fails. Then the response plays, so a CLI that retries gets it;
a turn with only an ``error`` fails its requests and is done. Overloaded twice, then the
grep above:

    [[turns]]
    match = { last_user_contains = "answer" }
    error = { status = 529, type = "overloaded_error", message = "Overloaded", times = 2 }
    tool_calls = [{ name = "Bash", arguments = { command = "grep -rn 'def answer' ." } }]
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from caisson.errors import ScenarioError
from caisson.scenario import read_toml

__all__ = [
    "Conversation",
    "Match",
    "ModelScript",
    "ScriptedError",
    "ToolCall",
    "Turn",
    "Usage",
    "load_model_script",
    "parse_model_script",
    "render_usage",
]

NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]
Tokens = Annotated[int, msgspec.Meta(ge=0, le=2**53)]
StopReason = Literal["end_turn", "tool_use", "max_tokens"]
Endpoint = Literal["messages", "chat.completions", "responses"]
Midstream = Literal["error", "response.failed", "cut"]


class _Strict(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base for script Structs: immutable, keyword-only, unknown fields are errors."""


class Usage(_Strict):
    """Token counts one turn reports, provider-neutral; all counts are tokens.

    The four input-side counts are disjoint; ``reasoning`` is a part of ``output``.
    """

    input: Tokens = 0
    """Prompt tokens processed afresh: neither read from nor written to a cache."""
    cache_read: Tokens = 0
    """Prompt tokens read from the prompt cache."""
    cache_write: Tokens = 0
    """Prompt tokens written to the prompt cache (Anthropic cache creation)."""
    output: Tokens = 0
    """All generated tokens, reasoning included."""
    reasoning: Tokens = 0
    """The part of ``output`` spent on reasoning (must not exceed ``output``)."""

    @property
    def prompt_total(self) -> int:
        """Every prompt token: ``input + cache_read + cache_write``."""
        return self.input + self.cache_read + self.cache_write


class Match(_Strict):
    """What a request must show for a turn to answer it; all given conditions must hold.

    Substring tests are case-sensitive.
    """

    last_user_contains: str | None = None
    """Text of the latest user message that has text (one holding only tool results
    is skipped, so an agent's task prompt stays matchable through its tool loop)."""
    tool_result_contains: str | None = None
    """Some tool result sent since the last assistant turn (Anthropic ``tool_result``
    blocks, Chat ``role: tool`` messages, Responses ``function_call_output`` items)."""
    model_contains: str | None = None
    """The requested ``model``."""
    endpoint: Endpoint | None = None
    """The API the request used."""


class ToolCall(_Strict):
    """One tool call the model makes."""

    name: NonEmpty
    arguments: dict[str, Any] | str = {}
    """A table, or a string holding one JSON object (sent byte for byte to OpenAI)."""
    id: NonEmpty | None = None
    """The call id; default ``toolu_caisson…`` (Anthropic) / ``call_caisson…`` (OpenAI)."""

    def arguments_json(self) -> str:
        """The arguments as the JSON text OpenAI's ``arguments`` fields carry."""
        if isinstance(self.arguments, str):
            return self.arguments
        return msgspec.json.encode(self.arguments).decode()

    def arguments_obj(self) -> dict[str, Any]:
        """The arguments as the object Anthropic's ``tool_use.input`` carries."""
        if isinstance(self.arguments, str):
            return msgspec.json.decode(self.arguments)
        return self.arguments


class ScriptedError(_Strict):
    """A failure the endpoint answers instead of a turn's response, ``times`` requests in a row.

    Rendered in the request's API shape (`caisson.model._render.render_error`): an HTTP
    error status with the provider's error body, or, with ``midstream`` and a streamed
    request, a 200 stream that starts and then fails (a request that does not stream gets
    the HTTP error).
    """

    status: Annotated[int, msgspec.Meta(ge=400, le=599)] = 529
    """The HTTP status (529 ``overloaded_error``, 429, 400, 401, 500, ...)."""
    type: NonEmpty = "overloaded_error"
    """The error's ``type``: Anthropic ``error.type``, OpenAI ``error.type``."""
    message: str = "Overloaded"
    """The error's ``message``."""
    code: NonEmpty | None = None
    """OpenAI ``error.code`` (``rate_limit_exceeded``, ``invalid_api_key``, ``server_error``;
    null when not given); Anthropic errors have none."""
    param: NonEmpty | None = None
    """OpenAI ``error.param`` (null when not given)."""
    retry_after: Annotated[int, msgspec.Meta(ge=0, le=86400)] | None = None
    """Seconds, sent as a ``retry-after`` header with the HTTP error (RFC 9110 delay-seconds)."""
    should_retry: bool | None = None
    """Sent as ``x-should-retry: true|false`` with the HTTP error: the anthropic and openai
    SDKs (Node and Python) obey it before their own status rules (``shouldRetry``)."""
    midstream: Midstream | None = None
    """How a streamed request fails after the stream opened: ``error``, the API's error
    event; ``response.failed``, the Responses API's failed terminal event (needs ``code`` and
    the turn's ``match.endpoint = "responses"``); ``cut``, the connection closes before the
    stream's terminal event. None: the HTTP error, streamed request or not."""
    times: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 1
    """How many requests in a row get this failure before the turn's response plays."""


class Turn(_Strict):
    """One model response. Needs ``text``, ``tool_calls`` or ``error``.

    With ``error``, the first ``error.times`` requests the turn answers get the failure,
    then the next gets the response (a CLI that retries succeeds); a turn with only an
    ``error`` is played once the failures are.
    """

    match: Match | None = None
    text: str | None = None
    tool_calls: list[ToolCall] = []
    stop_reason: StopReason | None = None
    """Anthropic's stop reason; default ``tool_use`` with tool calls, else ``end_turn``."""
    model: NonEmpty | None = None
    """The served model; default the requested one."""
    web_searches: list[NonEmpty] = []
    """Queries of web searches the provider ran itself (Anthropic ``server_tool_use`` blocks
    with their ``web_search_tool_result``, and ``usage.server_tool_use.web_search_requests``),
    before the text: tool executions the chamber never sees."""
    usage: Usage = Usage()
    error: ScriptedError | None = None
    """Failures played before the response (see the class docstring)."""
    note: str = ""
    """For the script's reader; never sent."""

    @property
    def responds(self) -> bool:
        """The turn has a response to play (text or tool calls), not only failures."""
        return bool(self.text or self.tool_calls)

    @property
    def stop(self) -> str:
        """The effective Anthropic stop reason."""
        if self.stop_reason is not None:
            return self.stop_reason
        return "tool_use" if self.tool_calls else "end_turn"


class Conversation(_Strict):
    """Turns played to requests carrying ``x-caisson-conversation: <name>``."""

    turns: list[Turn]


class ModelScript(_Strict):
    """A whole script.

    ``turns`` is the conversation named ``default`` (requests without the header).
    ``background`` turns must have a ``match``; they are tried before the next turn and
    answer any request they match without consuming a turn (e.g. a CLI's side calls
    to a small model for titles or quota probes).
    """

    name: str = ""
    description: str = ""
    models: list[NonEmpty] = []
    """Listed by ``GET /v1/models``; default the turns' models, else ``caisson-scripted``."""
    turns: list[Turn] = []
    conversations: dict[str, Conversation] = {}
    background: list[Turn] = []

    def conversation_turns(self) -> dict[str, list[Turn]]:
        """Conversation name -> its turns (``default`` first when it has any)."""
        out: dict[str, list[Turn]] = {"default": list(self.turns)} if self.turns else {}
        out.update((name, list(c.turns)) for name, c in self.conversations.items())
        return out

    def model_ids(self) -> list[str]:
        """The model ids the endpoint lists."""
        if self.models:
            return list(self.models)
        every = [*self.turns, *self.background]
        every += [t for c in self.conversations.values() for t in c.turns]
        found = list(dict.fromkeys(t.model for t in every if t.model))
        return found or ["caisson-scripted"]


def render_usage(endpoint: str, usage: Usage) -> dict[str, Any]:
    """Render neutral usage as the API's ``usage`` object, with its semantics.

    Rules (sources: Anthropic Messages API "Create a Message" ``usage``; OpenAI Chat
    Completions ``usage``; OpenAI Responses ``usage``):

    - ``messages`` (Anthropic, separate addends): ``input_tokens = input``,
      ``cache_creation_input_tokens = cache_write``, ``cache_read_input_tokens =
      cache_read``, ``output_tokens = output`` (thinking is billed inside it; Anthropic
      has no separate reasoning count, so ``reasoning`` is not sent).
    - ``chat.completions`` (OpenAI, breakdowns included in totals): ``prompt_tokens =
      input + cache_read + cache_write`` (OpenAI has no cache-write count: tokens written
      to the cache are ordinary uncached prompt tokens), ``prompt_tokens_details.
      cached_tokens = cache_read``, ``completion_tokens = output``,
      ``completion_tokens_details.reasoning_tokens = reasoning``, ``total_tokens =
      prompt_tokens + completion_tokens``.
    - ``responses``: as Chat with ``input_tokens``, ``input_tokens_details.
      cached_tokens``, ``output_tokens``, ``output_tokens_details.reasoning_tokens``,
      ``total_tokens``.

    So on every API `collectors.llm._usage.normalize_usage` recovers input =
    ``usage.prompt_total``, output = ``usage.output`` and cache_read = ``usage.cache_read``.

    Args:
        endpoint: ``"messages"``, ``"chat.completions"`` or ``"responses"``.
        usage: the turn's counts, tokens.

    Returns:
        A fresh JSON-ready dict.
    """
    if endpoint == "messages":
        return {
            "input_tokens": usage.input,
            "cache_creation_input_tokens": usage.cache_write,
            "cache_read_input_tokens": usage.cache_read,
            "cache_creation": {
                "ephemeral_5m_input_tokens": usage.cache_write,
                "ephemeral_1h_input_tokens": 0,
            },
            "output_tokens": usage.output,
            "service_tier": "standard",
        }
    inp, out = ("prompt", "completion") if endpoint == "chat.completions" else ("input", "output")
    in_key = "prompt_tokens" if inp == "prompt" else "input_tokens"
    out_key = "completion_tokens" if out == "completion" else "output_tokens"
    return {
        in_key: usage.prompt_total,
        f"{in_key}_details": {"cached_tokens": usage.cache_read},
        out_key: usage.output,
        f"{out_key}_details": {"reasoning_tokens": usage.reasoning},
        "total_tokens": usage.prompt_total + usage.output,
    }


_AT = re.compile(r"^(?P<msg>.*?)(?: - at `(?P<at>[^`]*)`)?$", re.S)
_UNKNOWN = re.compile(r"^Object contains unknown field `(?P<name>[^`]*)`$")


def _check_turn(turn: Turn, where: str, path: str, *, background: bool) -> None:
    def fail(field: str, message: str) -> None:
        raise ScenarioError(message, path=path, field=f"{where}{field}")

    if background and turn.match is None:
        fail(".match", "a background turn needs a match (it would answer every request)")
    if turn.match is not None and not any(msgspec.structs.astuple(turn.match)):
        fail(".match", "an empty match; give last_user_contains, tool_result_contains, ...")
    if turn.error is None and not turn.responds:
        fail("", "a turn needs text, tool_calls or error")
    if (err := turn.error) is not None:
        if background and (turn.responds or err.times != 1):
            fail(".error", "a background turn answers every request it matches: an error or a response,"
                 " and no times")
        if err.midstream == "response.failed":
            if err.code is None:
                fail(".error.code", "response.failed needs a code (the Responses API's response.error.code)")
            if turn.match is None or turn.match.endpoint != "responses":
                fail(".error.midstream", 'response.failed is the Responses API\'s own event: give the turn'
                     ' match = { endpoint = "responses" }')
    if turn.stop_reason == "tool_use" and not turn.tool_calls:
        fail(".stop_reason", "tool_use needs tool_calls")
    if turn.stop_reason == "end_turn" and turn.tool_calls:
        fail(".stop_reason", "end_turn with tool_calls; use tool_use (or max_tokens)")
    if turn.usage.reasoning > turn.usage.output:
        fail(".usage.reasoning", f"{turn.usage.reasoning} exceeds output {turn.usage.output}")
    ids: set[str] = set()
    for i, call in enumerate(turn.tool_calls):
        if isinstance(call.arguments, str):
            try:
                obj = msgspec.json.decode(call.arguments)
            except msgspec.DecodeError as e:
                fail(f".tool_calls[{i}].arguments", f"not JSON: {e}")
            if not isinstance(obj, dict):
                fail(f".tool_calls[{i}].arguments", "JSON text must hold an object")
        if call.id is not None:
            if call.id in ids:
                fail(f".tool_calls[{i}].id", f"duplicate tool call id {call.id!r}")
            ids.add(call.id)


def _check(script: ModelScript, path: str) -> None:
    """Constraints msgspec cannot express."""
    convs = script.conversation_turns()
    if not convs:
        raise ScenarioError("no turns: give [[turns]] or [conversations.NAME]", path=path)
    if "default" in script.conversations and script.turns:
        raise ScenarioError(
            "both turns and conversations.default", path=path, field="$.conversations.default"
        )
    for i, turn in enumerate(script.turns):
        _check_turn(turn, f"$.turns[{i}]", path, background=False)
    for name, conv in script.conversations.items():
        if not conv.turns:
            raise ScenarioError("no turns", path=path, field=f"$.conversations.{name}.turns")
        for i, turn in enumerate(conv.turns):
            _check_turn(turn, f"$.conversations.{name}.turns[{i}]", path, background=False)
    for i, turn in enumerate(script.background):
        _check_turn(turn, f"$.background[{i}]", path, background=True)


def parse_model_script(data: bytes, name: str) -> ModelScript:
    """Validate a model script from its bytes.

    Args:
        data: the TOML file's bytes.
        name: what to call it in errors (usually its path).

    Raises:
        ScenarioError: not UTF-8 TOML (the message names line and column), or not the
            schema (``field`` is the JSON path of the offending value).
    """
    obj = read_toml(data, name)
    try:
        script = msgspec.convert(obj, ModelScript)
    except msgspec.ValidationError as e:
        raise _validation_error(e, obj, name) from e
    _check(script, name)
    return script


def _validation_error(err: msgspec.ValidationError, obj: dict[str, Any], name: str) -> ScenarioError:
    """A ScenarioError with the field as a JSON path (conversation names spelled out)."""
    m = _AT.match(str(err))
    assert m is not None  # the pattern matches any string
    msg, at = m["msg"], m["at"] or "$"
    if at.startswith("$.conversations[...]"):  # msgspec does not name dict keys
        for key, conv in (obj.get("conversations") or {}).items():
            try:
                msgspec.convert(conv, Conversation)
            except msgspec.ValidationError as inner:
                found = _AT.match(str(inner))
                assert found is not None
                msg, at = found["msg"], f"$.conversations.{key}" + (found["at"] or "$")[1:]
                break
    if unknown := _UNKNOWN.match(msg):
        at, msg = f"{at}.{unknown['name']}", f"unknown field `{unknown['name']}`"
    elif msg.startswith("Invalid enum value"):
        choices = (StopReason if at.endswith(".stop_reason") else Midstream if at.endswith(".midstream")
                   else Endpoint)
        msg += "; expected one of: " + ", ".join(choices.__args__)  # type: ignore[attr-defined]
    return ScenarioError(msg, path=name, field=at)


def load_model_script(path: str | Path) -> ModelScript:
    """Read and validate a model script file.

    Raises:
        ScenarioError: the file cannot be read, or as `parse_model_script`.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ScenarioError(f"cannot read the model script: {e.strerror or e}", path=str(path)) from e
    return parse_model_script(data, str(path))
