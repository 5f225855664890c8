"""Per-API readers of LLM responses: one `StreamState` subclass per endpoint.

Each reader consumes the JSON objects of a response, either the whole body
(`StreamState.from_body`) or one SSE event at a time (`StreamState.event`), and keeps
what the call event needs: served model, stop reason, the raw usage object, whether the
stream's terminal event arrived, and what went wrong. Shapes follow the provider API
references named in each class docstring. Unknown event types are ignored (providers add
them); nothing here raises on bad input.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from collectors.llm._usage import gemini_counted
from collectors.sse import SseEvent

__all__ = ["PROVIDER_STREAMS", "STREAMS", "StreamState", "error_detail", "merge_anthropic_usage"]

_DETAIL_CHARS = 200


def _short(text: str) -> str:
    return text if len(text) <= _DETAIL_CHARS else text[:_DETAIL_CHARS] + "..."


def error_detail(obj: Any) -> str:
    """``kind: message`` from an error object, or "".

    Handles Anthropic (``{"type": "error", "error": {"type", "message"}}``), OpenAI
    (``{"error": {"type", "code", "message"}}``), the flat Responses ``error`` event
    (``{"type": "error", "code", "message"}``) and Google's ``{"error": {"code",
    "message", "status"}}`` (``google.rpc.Status`` as JSON), also as the one-element array
    Google's streaming methods answer with (google-genai 3.6.1 ``errors.py`` unwraps it).
    """
    if isinstance(obj, list) and len(obj) == 1:
        obj = obj[0]
    if not isinstance(obj, dict):
        return ""
    err = obj.get("error")
    src = err if isinstance(err, dict) else obj
    nested = src is err
    parts = [src.get("type") if nested else None, src.get("status") if nested else None, src.get("code"),
             src.get("message")]
    kept: list[str] = []
    for part in parts:
        if part and str(part) not in kept:
            kept.append(str(part))
    return _short(": ".join(kept))


class StreamState:
    """What one response has told us so far.

    Attributes:
        served_model: the model the response names (first one seen).
        stop_reason: why generation stopped, as the API names it.
        usage: the raw usage object (only trusted when ``terminal``).
        terminal: the stream's terminal event arrived.
        malformed: the first malformed event (data not JSON, not an object), or None.
        error: the first error event/chunk the stream carried, or None.
    """

    terminal_name: ClassVar[str] = "terminal event"

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        self.served_model: str | None = None
        self.stop_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.terminal = False
        self.malformed: str | None = None
        self.error: str | None = None
        self.sources: dict[str, str] = {}  # raw usage field (or "usage") -> where it was taken from
        self.server_tools: dict[str, str] = {}  # provider-side tool call id (or "#n") -> tool name
        self._no_usage = "terminal event carried no usage"

    def event(self, ev: SseEvent) -> None:
        """Consume one dispatched SSE event."""
        if ev.data.strip() == "[DONE]":
            self.done(ev)
            return
        try:
            obj = msgspec.json.decode(ev.data)
        except (msgspec.DecodeError, RecursionError, UnicodeError) as exc:
            self._malformed(ev, f"malformed JSON in SSE event #{ev.index}: {exc}")
            return
        if not isinstance(obj, dict):
            self._malformed(ev, f"SSE event #{ev.index} data is not a JSON object")
            return
        kind = obj.get("type")
        self.on(kind if isinstance(kind, str) else ev.event, obj, ev)

    def _malformed(self, ev: SseEvent, problem: str) -> None:
        problem = _short(problem)
        self.problems.append(problem)
        if self.malformed is None:
            self.malformed = problem

    def _error(self, what: str, obj: dict[str, Any]) -> None:
        detail = error_detail(obj)
        problem = f"{what}" + (f": {detail}" if detail else "")
        self.problems.append(problem)
        if self.error is None:
            self.error = problem

    def _model(self, model: Any) -> None:
        if not isinstance(model, str) or not model:
            return
        if self.served_model is None:
            self.served_model = model
        elif model != self.served_model:
            self.problems.append(f"served model changed from {self.served_model} to {model}")

    def done(self, ev: SseEvent) -> None:
        """A ``data: [DONE]`` sentinel (meaningful only to Chat Completions)."""
        self.problems.append(f"unexpected [DONE] in SSE event #{ev.index}")

    def on(self, kind: str, obj: dict[str, Any], ev: SseEvent) -> None:
        """Consume one event's JSON object; ``kind`` is its ``type`` or SSE event name."""

    def from_body(self, obj: dict[str, Any]) -> tuple[str | None, str | None]:
        """Read a non-streamed response body; returns (served_model, stop_reason)."""
        raise NotImplementedError

    def body_usage(self, obj: dict[str, Any]) -> Any:
        """The usage object of a non-streamed response body, as sent (None: absent)."""
        return obj.get("usage")

    def no_usage_reason(self, include_usage: bool) -> str:
        """Why a stream that reached its terminal event has no usage."""
        return self._no_usage

    def finish(self) -> None:
        """The stream ended: settle what only its end decides (default: nothing)."""

    def _server_tool(self, key: Any, name: Any) -> None:
        """Count one provider-side tool execution, once per id."""
        if isinstance(name, str) and name:
            self.server_tools[key if isinstance(key, str) and key else f"#{len(self.server_tools)}"] = name

    def server_tool_counts(self) -> dict[str, int]:
        """Provider-side tool executions seen, by tool name."""
        counts: dict[str, int] = {}
        for name in self.server_tools.values():
            counts[name] = counts.get(name, 0) + 1
        return counts


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def merge_anthropic_usage(start: dict[str, Any], delta: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """Merge ``message_start.message.usage`` with the last ``message_delta.usage``, field by field.

    Rule ``anthropic.stream_fields@2``. Anthropic's "Streaming Messages" reference says the
    counts in ``message_delta.usage`` are cumulative; servers differ in what they send for
    a count they do not repeat: some repeat the real value, some send 0, some send null or
    leave it out. A cumulative count never decreases, so for each count the larger of the
    two wins (a later 0 never overrides a real count; output grows from message_start's
    provisional value); a non-zero delta count below message_start's is inconsistent, the
    larger is kept and the disagreement noted. A non-count value (``service_tier``,
    ``server_tool_use``) in the delta replaces the start's unless it is null.

    Returns:
        ``(merged, sources, notes)``: the merged usage object, per field where its value
        came from, and inconsistencies (empty when none).
    """
    merged = dict(start)
    sources = {key: "message_start" for key in start}
    notes: list[str] = []
    for key, d in delta.items():
        s = start.get(key)
        if d is None:
            if key in start:
                sources[key] = "message_start (message_delta sent null)"
            continue
        if not (_is_count(d) and _is_count(s)):
            merged[key], sources[key] = d, "message_delta"
        elif d >= s:
            merged[key] = d
            sources[key] = "message_delta (cumulative, last)" if d > s else "message_start = message_delta"
        elif d == 0:
            sources[key] = "message_start (message_delta sent 0 for a count it does not repeat)"
        else:
            sources[key] = "message_start (message_delta sent a smaller cumulative count)"
            notes.append(f"message_delta {key} {d} < message_start {key} {s}: kept {s}")
    return merged, sources, notes


class AnthropicMessages(StreamState):
    """Anthropic Messages API ("Streaming Messages").

    ``message_start.message`` carries ``model`` and the input-side usage (input and
    cache counts; ``output_tokens`` there is provisional). ``message_delta`` carries
    ``delta.stop_reason`` and a CUMULATIVE ``usage``: the last one is used, never summed.
    The usage reported is ``message_start.message.usage`` merged field by field with the
    last ``message_delta.usage`` (`merge_anthropic_usage`: a later 0 or null never
    overrides a real count). ``message_stop`` ends the stream; ``error`` events (e.g.
    ``overloaded_error``) may arrive mid-stream. A ``server_tool_use`` content block
    (``content_block_start`` when streamed) is a tool the provider ran itself, e.g.
    ``web_search`` ("Web search tool", https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/web-search-tool).
    """

    terminal_name = "message_stop"

    def __init__(self, problems: list[str]) -> None:
        super().__init__(problems)
        self._start_usage: dict[str, Any] | None = None
        self._delta_usage: dict[str, Any] | None = None

    def on(self, kind: str, obj: dict[str, Any], ev: SseEvent) -> None:
        if kind == "message_start":
            msg = obj.get("message")
            if isinstance(msg, dict):
                self._model(msg.get("model"))
                usage = msg.get("usage")
                if isinstance(usage, dict):
                    self._start_usage = usage
        elif kind == "message_delta":
            delta = obj.get("delta")
            if isinstance(delta, dict) and isinstance(delta.get("stop_reason"), str):
                self.stop_reason = delta["stop_reason"]
            usage = obj.get("usage")
            if isinstance(usage, dict):
                self._delta_usage = usage
        elif kind == "content_block_start":
            block = obj.get("content_block")
            if isinstance(block, dict) and block.get("type") == "server_tool_use":
                self._server_tool(block.get("id"), block.get("name"))
        elif kind == "message_stop":
            self.terminal = True
            if self._start_usage is None:
                self._no_usage = "stream without message_start usage"
            elif self._delta_usage is None:
                self._no_usage = "stream without message_delta usage"
            else:
                self.usage, self.sources, notes = merge_anthropic_usage(self._start_usage, self._delta_usage)
                self.problems.extend(f"usage: {note}" for note in notes)
        elif kind == "error":
            self._error(f"stream error event #{ev.index}", obj)

    def from_body(self, obj: dict[str, Any]) -> tuple[str | None, str | None]:
        self._model(obj.get("model"))
        content = obj.get("content")
        for block in content if isinstance(content, list) else ():
            if isinstance(block, dict) and block.get("type") == "server_tool_use":
                self._server_tool(block.get("id"), block.get("name"))
        stop = obj.get("stop_reason")
        return self.served_model, stop if isinstance(stop, str) else None


class OpenAIChat(StreamState):
    """OpenAI Chat Completions API (``chat.completion`` / ``chat.completion.chunk``).

    Each chunk names ``model``; ``choices[i].finish_reason`` gives the stop reason
    (choice index 0 is reported). Usage arrives only in a final chunk with
    ``choices: []`` when the request set ``stream_options.include_usage``; the stream
    ends with ``data: [DONE]``. That usage chunk also counts as terminal.

    Rule ``openai.chat.terminal_usage_chunk@2``: only the terminal usage chunk counts,
    that is a chunk with ``choices: []``, or else the last chunk of the stream. Some
    servers put an all-zero ``usage`` on the first chunk (choices present) and null
    afterwards: that placeholder is noted and ignored, never taken as the answer.
    """

    terminal_name = "[DONE]"

    def __init__(self, problems: list[str]) -> None:
        super().__init__(problems)
        self._finish: dict[int, str] = {}
        self._chunks = 0  # data chunks seen (JSON objects, [DONE] excluded)
        self._candidate: tuple[dict[str, Any], int, int] | None = None  # usage beside choices, chunk number, SSE index

    def _choices(self, obj: dict[str, Any]) -> None:
        choices = obj.get("choices")
        if not isinstance(choices, list):
            return
        for choice in choices:
            if isinstance(choice, dict) and isinstance(choice.get("finish_reason"), str):
                index = choice.get("index")
                self._finish[index if isinstance(index, int) else 0] = choice["finish_reason"]
        if self._finish:
            self.stop_reason = self._finish.get(0, next(iter(self._finish.values())))

    def done(self, ev: SseEvent) -> None:
        self.terminal = True

    def on(self, kind: str, obj: dict[str, Any], ev: SseEvent) -> None:
        if isinstance(obj.get("error"), dict):
            self._error(f"stream error chunk #{ev.index}", obj)
            return
        self._model(obj.get("model"))
        self._choices(obj)
        self._chunks += 1
        usage = obj.get("usage")
        if not isinstance(usage, dict):
            return
        if obj.get("choices") == [] or "choices" not in obj:
            self.usage, self._candidate = usage, None
            self.sources = {"usage": f"terminal usage chunk #{ev.index} (choices empty)"}
            self.terminal = True
        else:
            self._candidate = (usage, self._chunks, ev.index)

    def finish(self) -> None:
        if self._candidate is None:
            return
        usage, number, index = self._candidate
        if self.usage is None and number == self._chunks:  # the last chunk carried it
            self.usage = usage
            self.sources = {"usage": f"last chunk #{index} (usage beside choices)"}
        else:
            self.problems.append(f"usage on chunk #{index} beside choices is not the terminal"
                                 " usage chunk: ignored as a placeholder")
            self._no_usage = "no terminal usage chunk (usage only on an earlier chunk beside choices: a placeholder)"
        self._candidate = None

    def from_body(self, obj: dict[str, Any]) -> tuple[str | None, str | None]:
        self._model(obj.get("model"))
        self._choices(obj)
        return self.served_model, self.stop_reason

    def no_usage_reason(self, include_usage: bool) -> str:
        if self._no_usage.startswith("no terminal usage chunk"):
            return self._no_usage
        if include_usage:
            return "stream ended without a usage chunk although include_usage was set"
        return "stream without include_usage"


def _responses_stop(resp: dict[str, Any]) -> str | None:
    """``status``, refined as ``incomplete:<reason>`` or ``failed:<code>``."""
    status = resp.get("status")
    if not isinstance(status, str):
        return None
    details = resp.get("incomplete_details")
    if status == "incomplete" and isinstance(details, dict) and details.get("reason"):
        return f"incomplete:{details['reason']}"
    error = resp.get("error")
    if status == "failed" and isinstance(error, dict) and error.get("code"):
        return f"failed:{error['code']}"
    return status


class OpenAIResponses(StreamState):
    """OpenAI Responses API (``response`` object; ``response.*`` stream events).

    ``response.created`` / ``response.in_progress`` name the model; the terminal event
    (``response.completed``, ``response.incomplete`` or ``response.failed``) carries the
    final ``response`` with ``status``, ``incomplete_details`` and ``usage``. An
    ``error`` event may arrive instead. Output items of the hosted tools the provider runs
    itself (``web_search_call``, ``file_search_call``, ``code_interpreter_call``, ...,
    "Responses API reference", https://platform.openai.com/docs/api-reference/responses)
    are counted by id, from ``response.output_item.added/done`` and the final ``output``.
    """

    terminal_name = "response.completed/incomplete/failed"
    TERMINALS: ClassVar[frozenset[str]] = frozenset(
        {"response.completed", "response.incomplete", "response.failed"}
    )

    def _items(self, items: Any) -> None:
        for item in items if isinstance(items, list) else ():
            kind = item.get("type") if isinstance(item, dict) else None
            if isinstance(kind, str) and kind in SERVER_ITEMS:
                self._server_tool(item.get("id"), SERVER_ITEMS[kind])

    def on(self, kind: str, obj: dict[str, Any], ev: SseEvent) -> None:
        resp = obj.get("response")
        if kind.startswith("response.") and isinstance(resp, dict):
            self._model(resp.get("model"))
            self._items(resp.get("output"))
        if kind in ("response.output_item.added", "response.output_item.done"):
            self._items([obj.get("item")])
        if kind in self.TERMINALS:
            self.terminal = True
            if not isinstance(resp, dict):
                self._no_usage = f"{kind} event without a response object"
                return
            self.stop_reason = _responses_stop(resp)
            usage = resp.get("usage")
            if isinstance(usage, dict):
                self.usage = usage
                self.sources = {"usage": f"{kind} event #{ev.index} response.usage"}
            else:
                self._no_usage = f"{kind} event without usage"
        elif kind == "error":
            self._error(f"stream error event #{ev.index}", obj)

    def from_body(self, obj: dict[str, Any]) -> tuple[str | None, str | None]:
        self._model(obj.get("model"))
        self._items(obj.get("output"))
        return self.served_model, _responses_stop(obj)


SERVER_ITEMS: dict[str, str] = {
    "web_search_call": "web_search", "file_search_call": "file_search", "code_interpreter_call": "code_interpreter",
    "image_generation_call": "image_generation", "mcp_call": "mcp",
}
"""OpenAI Responses output item types of hosted tools -> the tool's name."""


class GeminiGenerateContent(StreamState):
    """The Gemini API's ``GenerateContentResponse`` (google-genai 3.6.1 ``types.py``), from
    ``generateContent`` or each chunk of ``streamGenerateContent``; Google AI Studio and
    Vertex AI send the same shape.

    ``modelVersion`` is the served model (the model asked for is in the URL).
    ``candidates[i].finishReason`` is the stop reason (index 0 reported; Vertex AI leaves
    ``index`` out) and marks the last chunk: a candidate without one "has not stopped
    generating", and the stream has no end event of its own. A blocked prompt has no
    candidates and ``promptFeedback.blockReason``, reported as ``blocked:<reason>``.

    Rule ``gemini.last_usage_metadata@1``: every chunk's ``usageMetadata`` is a running
    total ("each chunk's usage_metadata is the server's running total for the hop, so it
    replaces the previous value (it is not summed)", google-genai 3.6.1
    ``_extra_utils.py``), so the usage is the last one carrying token counts
    (`collectors.llm._usage.gemini_counted`), taken only if it came on or after the first chunk with a
    finishReason (or blockReason): AI Studio's earlier chunks carry partial totals that
    look complete, and a stream cut before its finishReason reports none. An ``error``
    object (a chunk, or JSON Google writes outside the SSE framing) is the stream's error.

    Tools the provider runs itself (Gemini API, "Grounding with Google Search", "URL
    context", "Code execution"): each of ``groundingMetadata.webSearchQueries`` is one
    ``google_search``, each ``urlContextMetadata.urlMetadata[].retrievedUrl`` one
    ``url_context``, each ``executableCode`` part one ``code_execution``.
    """

    terminal_name = "finishReason"
    envelope: ClassVar[str | None] = None  # the member each body is wrapped in, if any

    def __init__(self, problems: list[str]) -> None:
        super().__init__(problems)
        self._finish: dict[int, str] = {}
        self._first_final: int | None = None  # the first chunk with a finishReason or blockReason
        self._last_usage: tuple[dict[str, Any], int] | None = None  # usage with counts, its chunk
        self._code = 0  # executableCode parts seen

    def event(self, ev: SseEvent) -> None:
        if ev.framed:
            super().event(ev)
            return
        try:
            obj = msgspec.json.decode(ev.data)
        except (msgspec.DecodeError, RecursionError, UnicodeError) as exc:
            self._malformed(ev, f"malformed JSON outside the SSE framing (#{ev.index}): {exc}")
            return
        if isinstance(obj, list) and len(obj) == 1:
            obj = obj[0]
        if isinstance(obj, dict) and isinstance(obj.get("error"), dict):
            self._error(f"stream error outside the SSE framing (#{ev.index})", obj)
        else:
            self._malformed(ev, f"JSON outside the SSE framing (#{ev.index}) is not an error object")

    def on(self, kind: str, obj: dict[str, Any], ev: SseEvent) -> None:
        if isinstance(obj.get("error"), dict):
            self._error(f"stream error chunk #{ev.index}", obj)
            return
        self._chunk(obj, ev.index)

    def _unwrap(self, obj: dict[str, Any]) -> dict[str, Any]:
        inner = obj.get(self.envelope) if self.envelope else obj
        return inner if isinstance(inner, dict) else {}

    def _chunk(self, obj: dict[str, Any], index: int) -> None:
        resp = self._unwrap(obj)
        self._model(resp.get("modelVersion"))
        final = False
        candidates = resp.get("candidates")
        for cand in candidates if isinstance(candidates, list) else ():
            if isinstance(cand, dict):
                final = self._candidate(cand) or final
        if self._finish:
            self.stop_reason = self._finish.get(0, next(iter(self._finish.values())))
        feedback = resp.get("promptFeedback")
        block = feedback.get("blockReason") if isinstance(feedback, dict) else None
        if isinstance(block, str) and block:
            self.stop_reason, final = f"blocked:{block}", True
        usage = resp.get("usageMetadata")
        if isinstance(usage, dict) and gemini_counted(usage):
            self._last_usage = (usage, index)
        if final:
            self.terminal = True
            if self._first_final is None:
                self._first_final = index

    def _candidate(self, cand: dict[str, Any]) -> bool:
        """Read one candidate; True when it has a finishReason."""
        content = cand.get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        for part in parts if isinstance(parts, list) else ():
            if isinstance(part, dict) and isinstance(part.get("executableCode"), dict):
                self._code += 1
                self._server_tool(f"code_execution#{self._code}", "code_execution")
        grounding = cand.get("groundingMetadata")
        queries = grounding.get("webSearchQueries") if isinstance(grounding, dict) else None
        for query in queries if isinstance(queries, list) else ():
            if isinstance(query, str):  # a query repeated on a later chunk is the same search
                self._server_tool(f"google_search:{query}", "google_search")
        urls = cand.get("urlContextMetadata")
        fetched = urls.get("urlMetadata") if isinstance(urls, dict) else None
        for item in fetched if isinstance(fetched, list) else ():
            if isinstance(item, dict) and isinstance(item.get("retrievedUrl"), str):
                self._server_tool(f"url_context:{item['retrievedUrl']}", "url_context")
        reason = cand.get("finishReason")
        if not isinstance(reason, str) or not reason:
            return False
        index = cand.get("index")
        self._finish[index if isinstance(index, int) and not isinstance(index, bool) else 0] = reason
        return True

    def finish(self) -> None:
        if not self.terminal:
            return
        if self._last_usage is None:
            self._no_usage = "no usageMetadata with token counts in the stream"
            return
        usage, index = self._last_usage
        assert self._first_final is not None
        if index < self._first_final:
            self._no_usage = (f"no usageMetadata with token counts on or after the finishReason chunk"
                              f" #{self._first_final} (the running totals of chunk #{index} are not final)")
            return
        self.usage = usage
        self.sources = {"usage": f"chunk #{index} usageMetadata (running totals: the last wins, never summed)"}

    def from_body(self, obj: dict[str, Any]) -> tuple[str | None, str | None]:
        self._chunk(obj, 0)
        return self.served_model, self.stop_reason

    def body_usage(self, obj: dict[str, Any]) -> Any:
        return self._unwrap(obj).get("usageMetadata")


class CodeAssistGenerateContent(GeminiGenerateContent):
    """Google's Code Assist back end (gemini-cli's "Login with Google", ``cloudcode-pa.
    googleapis.com/v1internal``): each body is ``{"response": <GenerateContentResponse>,
    "traceId": ...}`` (gemini-cli 0.61.0 ``packages/core/src/code_assist/converter.ts``
    ``fromGenerateContentResponse``), read as `GeminiGenerateContent` reads the inner one;
    errors come unwrapped."""

    envelope = "response"


STREAMS: dict[str, type[StreamState]] = {
    "messages": AnthropicMessages,
    "chat.completions": OpenAIChat,
    "responses": OpenAIResponses,
    "generate_content": GeminiGenerateContent,
}
"""API shape (`collectors.llm.SHAPES`) -> reader class."""

PROVIDER_STREAMS: dict[tuple[str, str], type[StreamState]] = {
    ("code_assist", "generate_content"): CodeAssistGenerateContent,
}
"""(provider, shape) -> reader class, where a provider wraps a shape's bodies."""
