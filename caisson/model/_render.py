"""Render one scripted turn as an HTTP reply in a provider's API shape, streamed or not.

Pure functions: a `Turn` and a few ids in, a `Reply` (status, headers, body bytes or a
list of SSE chunks) out. Shapes follow the providers' API references:

- Anthropic Messages API, "Create a Message" (``message`` object with ``text`` and
  ``tool_use`` content blocks) and "Streaming Messages" (``message_start``, ``ping``,
  ``content_block_start`` / ``_delta`` (``text_delta``, ``input_json_delta`` with
  ``partial_json``) / ``_stop``, ``message_delta`` with ``stop_reason`` and cumulative
  usage, ``message_stop``); errors ``{"type": "error", "error": {"type", "message"}}``.
- OpenAI Chat Completions (``chat.completion``; ``chat.completion.chunk`` with
  ``tool_calls`` deltas by ``index``; a final ``choices: []`` chunk with usage only when
  ``stream_options.include_usage``; ``data: [DONE]``); errors ``{"error": {...}}``.
- OpenAI Responses (``response`` object; events ``response.created``,
  ``response.in_progress``, ``response.output_item.added``, ``response.content_part.added``,
  ``response.output_text.delta`` / ``.done``, ``response.function_call_arguments.delta`` /
  ``.done``, ``response.output_item.done``, ``response.completed`` or
  ``response.incomplete``, each with ``sequence_number``).

Text and tool arguments are split into a few deltas so clients exercise reassembly. A
scripted failure (`render_error`) is an HTTP error in the provider's shape, or a stream that
opens and then fails (an error event, ``response.failed``, or a cut).
"""

from __future__ import annotations

from typing import Any

import msgspec

from caisson.model.script import ScriptedError, Turn, render_usage

__all__ = ["Reply", "error_reply", "json_reply", "render_error", "render_turn"]

_FINISH = {"end_turn": "stop", "tool_use": "tool_calls", "max_tokens": "length"}
"""Anthropic stop reason -> OpenAI Chat ``finish_reason``."""


class Reply(msgspec.Struct, frozen=True, kw_only=True):
    """One HTTP response, before any I/O.

    Attributes:
        status: HTTP status code.
        headers: (name, value) pairs, without Content-Length / Transfer-Encoding.
        body: the whole body when not streamed, bytes.
        events: the SSE chunks when streamed, each one complete event (ends ``\\n\\n``).
        cut: the server closes the connection after ``events`` without ending the body
            (a chunked body with no last chunk): a stream cut before its terminal event.
    """

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes = b""
    events: tuple[bytes, ...] | None = None
    cut: bool = False

    def payload(self) -> bytes:
        """The body as sent: ``body``, or the SSE chunks joined."""
        return self.body if self.events is None else b"".join(self.events)


def _json(obj: Any) -> bytes:
    return msgspec.json.encode(obj)


def json_reply(status: int, obj: Any, headers: tuple[tuple[str, str], ...] = ()) -> Reply:
    """A JSON reply with ``content-type: application/json``."""
    return Reply(status=status, headers=(("content-type", "application/json"), *headers),
                 body=_json(obj))


def error_reply(provider: str, status: int, kind: str, message: str, request_id: str, *,
                code: str | None = None, param: str | None = None,
                headers: tuple[tuple[str, str], ...] = ()) -> Reply:
    """An error in the provider's shape (Anthropic, else OpenAI).

    Args:
        provider: ``"anthropic"`` or ``"openai"``.
        status: HTTP status, 4xx or 5xx.
        kind: the error ``type`` (e.g. ``invalid_request_error``).
        message: the human-readable message.
        request_id: sent as ``request-id`` / ``x-request-id`` (and Anthropic's body ``request_id``).
        code, param: OpenAI's ``error.code`` and ``error.param`` (null when None).
        headers: more response headers (``retry-after``, ``x-should-retry``).
    """
    if provider == "anthropic":
        obj: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": message},
                               "request_id": request_id}
        return json_reply(status, obj, (("request-id", request_id), *headers))
    obj = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return json_reply(status, obj, (("x-request-id", request_id), *headers))


def _pieces(text: str, parts: int = 3) -> list[str]:
    """``text`` split into at most ``parts`` non-empty pieces (characters, not bytes)."""
    if not text:
        return []
    size = -(-len(text) // parts)
    return [text[i : i + size] for i in range(0, len(text), size)]


def _sse(obj: dict[str, Any], named: bool = True) -> bytes:
    head = f"event: {obj['type']}\n".encode() if named else b""
    return head + b"data: " + _json(obj) + b"\n\n"


def _stream_reply(events: list[bytes], request_id_header: tuple[str, str], cut: bool = False) -> Reply:
    headers = (("content-type", "text/event-stream; charset=utf-8"),
               ("cache-control", "no-cache"), request_id_header)
    return Reply(status=200, headers=headers, events=tuple(events), cut=cut)


def _tool_id(turn: Turn, i: int, prefix: str, seq: int) -> str:
    call = turn.tool_calls[i]
    return call.id if call.id is not None else f"{prefix}caisson{seq:06d}x{i}"


# --- Anthropic Messages --------------------------------------------------------------


def _anthropic(turn: Turn, model: str, stream: bool, seq: int) -> Reply:
    msg_id, req_id = f"msg_caisson{seq:06d}", f"req_caisson{seq:06d}"
    blocks: list[dict[str, Any]] = []
    args: list[str | None] = []  # per block: the JSON streamed as input_json_delta, or None
    for i, query in enumerate(turn.web_searches):
        search_id = f"srvtoolu_caisson{seq:06d}x{i}"
        blocks.append({"type": "server_tool_use", "id": search_id, "name": "web_search", "input": {"query": query}})
        args.append(_json({"query": query}).decode())
        blocks.append({"type": "web_search_tool_result", "tool_use_id": search_id, "content": [
            {"type": "web_search_result", "title": f"Result for {query}", "url": "https://example.invalid/",
             "encrypted_content": "c2NyaXB0ZWQ=", "page_age": None}]})
        args.append(None)
    if turn.text:
        blocks.append({"type": "text", "text": turn.text})
        args.append(None)
    for i, call in enumerate(turn.tool_calls):
        blocks.append({"type": "tool_use", "id": _tool_id(turn, i, "toolu_", seq),
                       "name": call.name, "input": call.arguments_obj()})
        args.append(call.arguments_json())
    usage = render_usage("messages", turn.usage)
    if turn.web_searches:
        usage["server_tool_use"] = {"web_search_requests": len(turn.web_searches)}
    message = {"id": msg_id, "type": "message", "role": "assistant", "model": model,
               "content": blocks, "stop_reason": turn.stop, "stop_sequence": None, "usage": usage}
    if not stream:
        return json_reply(200, message, (("request-id", req_id),))
    start_usage = {k: v for k, v in usage.items() if k != "server_tool_use"}
    start_usage["output_tokens"] = min(1, turn.usage.output)  # provisional, as sent
    start = dict(message, content=[], stop_reason=None, usage=start_usage)
    events = [_sse({"type": "message_start", "message": start}), _sse({"type": "ping"})]
    for index, (block, arg) in enumerate(zip(blocks, args)):
        if block["type"] == "text":
            opening = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in _pieces(block["text"])]
        elif arg is not None:
            opening = dict(block, input={})
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in ["", *_pieces(arg)]]
        else:  # a result block arrives whole
            opening, deltas = block, []
        events.append(_sse({"type": "content_block_start", "index": index, "content_block": opening}))
        events += [_sse({"type": "content_block_delta", "index": index, "delta": d}) for d in deltas]
        events.append(_sse({"type": "content_block_stop", "index": index}))
    final = {k: usage[k] for k in ("input_tokens", "cache_creation_input_tokens",
                                   "cache_read_input_tokens", "output_tokens")}  # cumulative
    if turn.web_searches:
        final["server_tool_use"] = usage["server_tool_use"]
    events.append(_sse({"type": "message_delta", "delta": {"stop_reason": turn.stop,
                                                           "stop_sequence": None}, "usage": final}))
    events.append(_sse({"type": "message_stop"}))
    return _stream_reply(events, ("request-id", req_id))


# --- OpenAI Chat Completions ---------------------------------------------------------


def _chat(turn: Turn, model: str, stream: bool, include_usage: bool, seq: int, created: int) -> Reply:
    cid, req_id = f"chatcmpl-caisson{seq:06d}", f"req_caisson{seq:06d}"
    finish = _FINISH[turn.stop]
    usage = render_usage("chat.completions", turn.usage)
    calls = [{"id": _tool_id(turn, i, "call_", seq), "type": "function",
              "function": {"name": c.name, "arguments": c.arguments_json()}}
             for i, c in enumerate(turn.tool_calls)]
    base = {"id": cid, "created": created, "model": model, "service_tier": "default",
            "system_fingerprint": None}
    if not stream:
        message: dict[str, Any] = {"role": "assistant", "content": turn.text or None,
                                   "refusal": None, "annotations": []}
        if calls:
            message["tool_calls"] = calls
        body = dict(base, object="chat.completion", usage=usage, choices=[
            {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}])
        return json_reply(200, body, (("x-request-id", req_id),))

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        obj = dict(base, object="chat.completion.chunk", choices=[
            {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}])
        if include_usage:
            obj["usage"] = None
        return b"data: " + _json(obj) + b"\n\n"

    events = [chunk({"role": "assistant", "content": "" if turn.text else None, "refusal": None})]
    events += [chunk({"content": p}) for p in _pieces(turn.text or "")]
    for i, call in enumerate(calls):
        head = dict(call, index=i, function={"name": call["function"]["name"], "arguments": ""})
        events.append(chunk({"tool_calls": [head]}))
        events += [chunk({"tool_calls": [{"index": i, "function": {"arguments": p}}]})
                   for p in _pieces(call["function"]["arguments"])]
    events.append(chunk({}, finish))
    if include_usage:
        events.append(b"data: " + _json(dict(base, object="chat.completion.chunk", choices=[],
                                              usage=usage)) + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    return _stream_reply(events, ("x-request-id", req_id))


# --- OpenAI Responses ----------------------------------------------------------------


def _responses(turn: Turn, model: str, stream: bool, seq: int, created: int) -> Reply:
    rid, req_id = f"resp_caisson{seq:06d}", f"req_caisson{seq:06d}"
    incomplete = turn.stop == "max_tokens"
    item_status = "incomplete" if incomplete else "completed"
    items: list[dict[str, Any]] = []
    if turn.text:
        items.append({"id": f"msg_caisson{seq:06d}", "type": "message", "status": item_status,
                      "role": "assistant", "content": [
                          {"type": "output_text", "text": turn.text, "annotations": []}]})
    for i, call in enumerate(turn.tool_calls):
        items.append({"id": f"fc_caisson{seq:06d}x{i}", "type": "function_call",
                      "status": item_status, "call_id": _tool_id(turn, i, "call_", seq),
                      "name": call.name, "arguments": call.arguments_json()})
    response = dict(_response_object(rid, model, created),
                    status="incomplete" if incomplete else "completed",
                    incomplete_details={"reason": "max_output_tokens"} if incomplete else None,
                    output=items, usage=render_usage("responses", turn.usage))
    if not stream:
        return json_reply(200, response, (("x-request-id", req_id),))
    events = _responses_opening(rid, model, created)
    for n, item in enumerate(items):
        where = {"item_id": item["id"], "output_index": n}
        if item["type"] == "message":
            text = item["content"][0]["text"]
            events.append({"type": "response.output_item.added", "output_index": n,
                           "item": dict(item, status="in_progress", content=[])})
            part = {"type": "output_text", "text": "", "annotations": []}
            events.append({"type": "response.content_part.added", **where, "content_index": 0,
                           "part": part})
            events += [{"type": "response.output_text.delta", **where, "content_index": 0,
                        "delta": p, "logprobs": []} for p in _pieces(text)]
            events.append({"type": "response.output_text.done", **where, "content_index": 0,
                           "text": text, "logprobs": []})
            events.append({"type": "response.content_part.done", **where, "content_index": 0,
                           "part": dict(part, text=text)})
        else:
            events.append({"type": "response.output_item.added", "output_index": n,
                           "item": dict(item, status="in_progress", arguments="")})
            events += [{"type": "response.function_call_arguments.delta", **where, "delta": p}
                       for p in _pieces(item["arguments"])]
            events.append({"type": "response.function_call_arguments.done", **where,
                           "name": item["name"], "arguments": item["arguments"]})
        events.append({"type": "response.output_item.done", "output_index": n, "item": item})
    terminal = "response.incomplete" if incomplete else "response.completed"
    events.append({"type": terminal, "response": response})
    return _stream_reply(_numbered(events), ("x-request-id", req_id))


def _response_object(rid: str, model: str, created: int) -> dict[str, Any]:
    """A ``response`` object in progress: no output, no usage yet."""
    return {
        "id": rid, "object": "response", "created_at": created, "status": "in_progress", "error": None,
        "incomplete_details": None, "instructions": None, "max_output_tokens": None, "model": model,
        "output": [], "parallel_tool_calls": True, "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None}, "store": False, "temperature": 1.0,
        "text": {"format": {"type": "text"}}, "tool_choice": "auto", "tools": [], "top_p": 1.0,
        "truncation": "disabled", "usage": None, "user": None, "metadata": {},
    }


def _responses_opening(rid: str, model: str, created: int) -> list[dict[str, Any]]:
    """``response.created`` and ``response.in_progress``, each with the response in progress."""
    pending = _response_object(rid, model, created)
    return [{"type": "response.created", "response": pending},
            {"type": "response.in_progress", "response": pending}]


def _numbered(events: list[dict[str, Any]]) -> list[bytes]:
    """Responses stream events as SSE, each with its ``sequence_number`` from 0."""
    return [_sse({"type": e["type"], "sequence_number": i, **e}) for i, e in enumerate(events)]


# --- scripted failures ---------------------------------------------------------------


def render_error(endpoint: str, error: ScriptedError, *, model: str, stream: bool, seq: int = 0,
                 created: int = 0) -> Reply:
    """Render a scripted failure in the request's API shape.

    An HTTP error: the status with the provider's error body (Anthropic ``{"type": "error",
    "error": {"type", "message"}, "request_id"}`` with a ``request-id`` header, "Errors",
    https://docs.anthropic.com/en/api/errors; OpenAI ``{"error": {"message", "type", "param",
    "code"}}`` with ``x-request-id``, "Error codes",
    https://platform.openai.com/docs/guides/error-codes), plus ``retry-after`` and
    ``x-should-retry`` when the script sets them (the headers @anthropic-ai/sdk 0.128.0,
    bundled in Claude Code 2.1.328, reads in ``shouldRetry`` / ``retryRequest``, as the
    openai SDKs do).

    With ``midstream`` and a streamed request, a 200 stream that opens and then fails:

    - ``messages``: ``message_start`` and ``ping``, then (``error``) the ``error`` event,
      ``{"type": "error", "error": {"type", "message"}}`` ("Streaming Messages", Error
      events: an ``overloaded_error`` mid-stream is what a 529 is elsewhere);
    - ``chat.completions``: the first chunk (the assistant role), then (``error``) a chunk
      that is an error object, ``{"error": {...}}`` (what the openai SDKs raise on in a stream);
    - ``responses``: ``response.created`` and ``response.in_progress``, then (``error``) the
      ``error`` event ``{"type": "error", "code", "message", "param", "sequence_number"}``, or
      (``response.failed``) ``response.failed`` whose response has ``status: failed`` and
      ``error: {"code", "message"}`` ("Streaming events", Responses API reference);
    - ``cut`` on any API: the opening only, then the connection closes (`Reply.cut`).

    Args:
        endpoint: ``"messages"``, ``"chat.completions"`` or ``"responses"``.
        error: the failure.
        model: the model the stream's opening names.
        stream: the request asked for a stream.
        seq: a response counter, for ids (``req_caisson000001``).
        created: Unix time for ``created`` / ``created_at``, seconds.
    """
    req_id = f"req_caisson{seq:06d}"
    if not stream or error.midstream is None:
        extra = ((("retry-after", str(error.retry_after)),) if error.retry_after is not None else ()) + (
            (("x-should-retry", "true" if error.should_retry else "false"),) if error.should_retry is not None else ())
        provider = "anthropic" if endpoint == "messages" else "openai"
        return error_reply(provider, error.status, error.type, error.message, req_id, code=error.code,
                           param=error.param, headers=extra)
    cut = error.midstream == "cut"
    openai_error = {"message": error.message, "type": error.type, "param": error.param, "code": error.code}
    if endpoint == "messages":
        start = {"id": f"msg_caisson{seq:06d}", "type": "message", "role": "assistant", "model": model,
                 "content": [], "stop_reason": None, "stop_sequence": None,
                 "usage": {"input_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                           "output_tokens": 0, "service_tier": "standard"}}
        events = [_sse({"type": "message_start", "message": start}), _sse({"type": "ping"})]
        if not cut:
            events.append(_sse({"type": "error", "error": {"type": error.type, "message": error.message}}))
        return _stream_reply(events, ("request-id", req_id), cut=cut)
    if endpoint == "chat.completions":
        first = {"id": f"chatcmpl-caisson{seq:06d}", "object": "chat.completion.chunk", "created": created,
                 "model": model, "service_tier": "default", "system_fingerprint": None, "choices": [
                     {"index": 0, "delta": {"role": "assistant", "content": "", "refusal": None},
                      "logprobs": None, "finish_reason": None}]}
        events = [b"data: " + _json(first) + b"\n\n"]
        if not cut:
            events.append(b"data: " + _json({"error": openai_error}) + b"\n\n")
        return _stream_reply(events, ("x-request-id", req_id), cut=cut)
    if endpoint == "responses":
        rid = f"resp_caisson{seq:06d}"
        opening = _responses_opening(rid, model, created)
        if error.midstream == "error":
            opening.append({"type": "error", "code": error.code, "message": error.message, "param": error.param})
        elif error.midstream == "response.failed":
            failed = dict(_response_object(rid, model, created), status="failed",
                          error={"code": error.code, "message": error.message})
            opening.append({"type": "response.failed", "response": failed})
        return _stream_reply(_numbered(opening), ("x-request-id", req_id), cut=cut)
    raise ValueError(f"unknown endpoint {endpoint!r}")


def render_turn(endpoint: str, turn: Turn, *, model: str, stream: bool,
                include_usage: bool = False, seq: int = 0, created: int = 0) -> Reply:
    """Render one turn's response (a scripted ``error`` is rendered by the caller).

    Args:
        endpoint: ``"messages"``, ``"chat.completions"`` or ``"responses"``.
        turn: the turn to play.
        model: the served model id.
        stream: answer as an SSE stream (the request's ``stream: true``).
        include_usage: Chat only: the request's ``stream_options.include_usage``.
        seq: a response counter, for deterministic ids (``msg_caisson000001``, ...).
        created: Unix time for ``created`` / ``created_at``, seconds.

    Returns:
        A 200 reply.
    """
    if endpoint == "messages":
        return _anthropic(turn, model, stream, seq)
    if endpoint == "chat.completions":
        return _chat(turn, model, stream, include_usage, seq, created)
    if endpoint == "responses":
        return _responses(turn, model, stream, seq, created)
    raise ValueError(f"unknown endpoint {endpoint!r}")
