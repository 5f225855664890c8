"""Sans-IO extraction of LLM calls from HTTP exchanges, for the proxy witness.

`classify` says whether an exchange is a model call; `LlmCallBuilder` is fed the
request body and the response as it passes (streamed or not) and builds one
`ledger.events.LlmCall`. No I/O, no clock, no mitmproxy here: the addon moves bytes in.

API shapes follow the providers' references: Anthropic Messages API ("Create a
Message", "Streaming Messages": ``message_start``, ``content_block_*``, ``ping``,
``message_delta``, ``message_stop``, ``error``), OpenAI Chat Completions (``chat.
completion`` / ``chat.completion.chunk`` objects, ``data: [DONE]``, usage in a final
chunk with ``choices: []`` only when ``stream_options.include_usage`` is set) and OpenAI
Responses (``response.*`` stream events; terminal ``response.completed``,
``response.incomplete``, ``response.failed``; ``error``).

Usage is never invented: a cut stream, malformed JSON, invalid UTF-8, an error status or
a stream without usage gives ``usage=None`` with ``usage_missing_reason`` saying why.
Nothing here raises on bad input; anomalies also accumulate in
`LlmCallBuilder.problems`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final
from urllib.parse import urlsplit

import msgspec

from collectors.llm._streams import STREAMS, StreamState, error_detail
from collectors.llm._usage import normalize_usage
from collectors.sse import NEED_DATA, ParserClosedError, SseParser
from ledger.events import LlmCall

__all__ = [
    "ANTHROPIC",
    "OPENAI",
    "ENDPOINTS",
    "LlmCallBuilder",
    "classify",
]

ANTHROPIC: Final = "anthropic"
OPENAI: Final = "openai"

ENDPOINTS: Final[dict[str, tuple[str, str]]] = {
    "/v1/messages": (ANTHROPIC, "messages"),
    "/v1/chat/completions": (OPENAI, "chat.completions"),
    "/v1/responses": (OPENAI, "responses"),
}
"""Path suffix -> (provider, endpoint). A base URL may add a prefix (``/api/v1/...``)."""

DEFAULT_MAX_BODY_BYTES: Final = 64 << 20
_DETAIL_CHARS: Final = 200
MAX_PROBLEMS: Final = 64
"""Problem lines kept per call: the first 63, then one counting the dropped ones."""

Headers = Iterable[tuple[str, str]] | Mapping[str, str]


def classify(
    method: str, host: str, path: str, request_headers: Headers = ()
) -> tuple[str, str] | None:
    """Say whether a request is a model call, and of which API shape.

    Classification is by method and path only: gateways (OpenRouter, LiteLLM, the
    scripted endpoint) serve the same shapes on other hosts, so ``host`` and
    ``request_headers`` do not decide; they are accepted for the addon's convenience.

    Args:
        method: HTTP method; only POST creates a model call.
        host: the request's host (unused, see above).
        path: request target; a query string is ignored, an absolute URL is reduced to
            its path, one trailing slash is tolerated.
        request_headers: the request's headers (unused, see above).

    Returns:
        ``(provider, endpoint)``, e.g. ``("anthropic", "messages")``, or None.
    """
    del host, request_headers
    if method.upper() != "POST":
        return None
    if not path.startswith("/"):
        path = urlsplit(path).path
    path = path.split("?", 1)[0].split("#", 1)[0]
    if path.endswith("/") and len(path) > 1:
        path = path[:-1]
    for suffix, kind in ENDPOINTS.items():
        if path.endswith(suffix):
            return kind
    return None


class _ProblemLog(list):
    """A list of problem strings that stops growing at `MAX_PROBLEMS` entries."""

    dropped = 0

    def append(self, item: str) -> None:
        if len(self) < MAX_PROBLEMS - 1:
            super().append(item)
            return
        self.dropped += 1
        summary = f"... {self.dropped} more problems dropped"
        if len(self) < MAX_PROBLEMS:
            super().append(summary)
        else:
            self[-1] = summary


def _header(headers: Headers, name: str) -> str | None:
    items = headers.items() if isinstance(headers, Mapping) else headers
    for key, value in items:
        if key.lower() == name:
            return value
    return None


def _short(text: str) -> str:
    return text if len(text) <= _DETAIL_CHARS else text[:_DETAIL_CHARS] + "..."


def _status_reason(status: int) -> str:
    return f"error status {status}" if status >= 400 else f"non-2xx status {status}"


def _unencodable(obj: Any) -> str | None:
    """Why ``obj`` cannot go into the ledger's msgpack (e.g. an int past 64 bits), or None."""
    try:
        msgspec.msgpack.encode(obj)
    except (OverflowError, TypeError, ValueError, UnicodeError) as exc:
        return _short(str(exc))
    return None


def _decode_json(data: bytes, what: str) -> tuple[Any, str | None]:
    """Strict UTF-8 then JSON; returns (object, None) or (None, problem)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"invalid UTF-8 in {what} at byte {exc.start}"
    try:
        return msgspec.json.decode(text), None
    except (msgspec.DecodeError, RecursionError, UnicodeError) as exc:
        return None, _short(f"malformed JSON in {what}: {exc}")


class LlmCallBuilder:
    """Build one `LlmCall` from an exchange's bytes, as they pass.

    Call `request` with the request body, then `response_start` with the status and
    headers, `response_data` with each (content-decoded) body chunk, and `finish`.
    A response is read as an event stream when its Content-Type is
    ``text/event-stream`` (or, with no Content-Type, when the request asked to stream);
    otherwise as one JSON body, buffered up to ``max_body_bytes``.

    Args:
        provider: ``"anthropic"`` or ``"openai"`` (from `classify`).
        endpoint: ``"messages"``, ``"chat.completions"`` or ``"responses"``.
        exchange_seq: seq of the ``http.exchange`` event, copied into the call.
        max_body_bytes: cap on a buffered non-streamed body, bytes; past it the usage
            is reported missing rather than parsed from a truncated body.

    Raises:
        ValueError: ``endpoint`` is not one `classify` returns (our misuse).

    Attributes:
        problems: anomalies seen, in order (bad request JSON, malformed events, model
            changes mid-stream, ...), for the witness to record; at most
            `MAX_PROBLEMS` are kept, then one line saying how many more were dropped.
    """

    def __init__(
        self,
        provider: str,
        endpoint: str,
        *,
        exchange_seq: int | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        if endpoint not in STREAMS:
            raise ValueError(
                f"unknown LLM endpoint {endpoint!r}; expected one of {sorted(STREAMS)}"
            )
        self.provider = provider
        self.endpoint = endpoint
        self.exchange_seq = exchange_seq
        self.max_body_bytes = max_body_bytes
        self.problems: list[str] = _ProblemLog()
        self.requested_model: str | None = None
        self.stream_requested = False
        self.include_usage = False
        self.status: int | None = None
        self._sse: SseParser | None = None
        self._state: StreamState | None = None
        self._body = bytearray()
        self._body_overflow = False
        self._fed = 0  # response body bytes fed so far
        self._label_problem: str | None = None  # the content decoder's failure, when told
        self._raw_fallback = False  # the raw bytes are read as the declared type
        self._media_type = ""
        self._result: LlmCall | None = None

    # --- feeding ---------------------------------------------------------------------

    def request(self, body: bytes) -> None:
        """Read the request body: ``model``, ``stream``, ``stream_options.include_usage``.

        Args:
            body: the decoded request body (JSON).
        """
        self._check_open()
        obj, problem = _decode_json(body, "request body")
        if problem is not None:
            self.problems.append(problem)
            return
        if not isinstance(obj, dict):
            self.problems.append("request body is not a JSON object")
            return
        model = obj.get("model")
        self.requested_model = model if isinstance(model, str) else None
        self.stream_requested = obj.get("stream") is True
        options = obj.get("stream_options")
        self.include_usage = isinstance(options, dict) and options.get("include_usage") is True

    def response_start(self, status: int, headers: Headers = ()) -> None:
        """Record the response status and choose how to read the body.

        Args:
            status: HTTP status code.
            headers: response headers, (name, value) pairs or a mapping.
        """
        self._check_open()
        self.status = status
        ctype = (_header(headers, "content-type") or "").split(";", 1)[0].strip().lower()
        self._media_type = ctype
        if ctype == "text/event-stream" or (not ctype and self.stream_requested):
            self._sse = SseParser()
            self._state = STREAMS[self.endpoint](self.problems)

    def response_undecodable(self, problem: str, raw_so_far: bytes) -> None:
        """The response's ``Content-Encoding`` could not be undone (a label that lies).

        When no decoded byte was fed yet, the raw bytes are read as the declared type
        instead: ``raw_so_far`` now, and every later `response_data` chunk must then be
        raw too. If usage is read that way, the call's ``label_mismatch`` says so. When
        decoded bytes were already fed (decoding failed midway, or the encoded stream
        ended early), the rest is not read; a usage already complete stands, otherwise
        the decoder's failure is named as the reason it is missing.

        Args:
            problem: the decoder's failure (`collectors.proxy.BodyDecoder.problem`).
            raw_so_far: the raw body bytes received so far, as sent.
        """
        self._check_open()
        if self._label_problem is not None:
            return
        self._label_problem = problem
        if self._fed == 0:
            self._raw_fallback = True
            if raw_so_far:
                self.response_data(raw_so_far)

    def response_data(self, chunk: bytes) -> None:
        """Feed the next chunk of the (content-decoded) response body."""
        self._check_open()
        if self._label_problem is not None and not self._raw_fallback:
            return
        self._fed += len(chunk)
        if self._sse is not None and self._state is not None:
            self._sse.feed(chunk)
            while (event := self._sse.next_event()) is not NEED_DATA:
                self._state.event(event)  # type: ignore[arg-type]
            return
        if self._body_overflow:
            return
        if len(self._body) + len(chunk) > self.max_body_bytes:
            self._body_overflow = True
            self._body.clear()
            return
        self._body += chunk

    def _check_open(self) -> None:
        if self._result is not None:
            raise ParserClosedError("LlmCallBuilder fed after finish")

    # --- result ----------------------------------------------------------------------

    def finish(self, cut: bool = False) -> LlmCall:
        """Build the `LlmCall`; later calls return the same event.

        Args:
            cut: the connection ended before the response was complete (proxy error,
                client or server disconnect). A stream whose terminal event already
                arrived keeps its usage; a non-streamed body is then untrusted.

        Returns:
            The call, with usage None and ``usage_missing_reason`` set whenever usage
            was not sent, not trustworthy, or not normalisable (see module docstring).
        """
        if self._result is None:
            self._result = self._build(cut)
        return self._result

    def _build(self, cut: bool) -> LlmCall:
        streamed = self._sse is not None
        if self.status is None:
            served = stop = usage = None
            reason: str | None = "no response"
        elif streamed:
            served, stop, usage, reason = self._from_stream(cut)
        else:
            served, stop, usage, reason = self._from_body(cut)
        mismatch = None
        if self._label_problem is not None and self.status is not None:
            what = self._media_type or "the declared type"
            if not self._raw_fallback:  # usage read before the failure stands; otherwise the decoder is why
                if usage is None:
                    reason = f"response body: {self._label_problem} (after part of it decoded)"
            elif usage is not None:
                mismatch = f"{self._label_problem}; the raw bytes were read as {what}"
                self.problems.append(f"label mismatch: {mismatch}")
            else:
                reason = f"response body: {self._label_problem}; the raw bytes, read as {what}: {reason}"
        normalized = None
        if usage is not None and (problem := _unencodable(usage)) is not None:
            usage, reason = None, f"usage not recordable: {problem}"
            self.problems.append(reason)
        if usage is not None:
            normalized, problem = normalize_usage(self.endpoint, usage, streamed=streamed)
            if problem is not None:
                reason = f"usage not normalisable: {problem}"
                self.problems.append(reason)
            elif normalized is not None and streamed and self._state is not None:
                normalized = msgspec.structs.replace(normalized, sources=dict(self._state.sources))
        return LlmCall(
            server_tools=self._server_tools(usage),
            provider=self.provider,
            endpoint=self.endpoint,
            requested_model=self.requested_model,
            served_model=served,
            stop_reason=stop,
            streamed=self.stream_requested,
            usage=usage,
            usage_missing_reason=reason,
            normalized=normalized,
            exchange_seq=self.exchange_seq,
            label_mismatch=mismatch,
        )

    def _server_tools(self, usage: Any) -> dict[str, int]:
        """Provider-side tool executions by name: the response's blocks or items, or
        Anthropic's ``usage.server_tool_use.<name>_requests`` count when it is higher
        (Messages API reference, usage.server_tool_use,
        https://docs.anthropic.com/en/api/messages)."""
        counts = self._state.server_tool_counts() if self._state is not None else {}
        sent = usage.get("server_tool_use") if isinstance(usage, dict) else None
        for key, value in sent.items() if isinstance(sent, dict) else ():
            if key.endswith("_requests") and isinstance(value, int) and not isinstance(value, bool) and value > 0:
                name = key.removesuffix("_requests")
                counts[name] = max(counts.get(name, 0), value)
        return counts

    def _from_stream(self, cut: bool) -> tuple[Any, Any, Any, str | None]:
        """Close the event stream: (served_model, stop_reason, usage, reason)."""
        sse, state, status = self._sse, self._state, self.status
        assert sse is not None and state is not None and status is not None
        if sse.close():
            self.problems.append("stream ended mid-event")
        state.finish()
        if cut and state.terminal:
            self.problems.append("connection cut after the stream's terminal event")
        served, stop = state.served_model, state.stop_reason
        if status >= 400 or status < 200:
            return served, stop, None, _status_reason(status)
        if sse.invalid_utf8_lines:
            lines = sse.invalid_utf8_lines
            return served, stop, None, f"invalid UTF-8 in response stream ({lines} lines)"
        reason = state.malformed or state.error
        if reason is None and not state.terminal:
            reason = f"stream cut before {state.terminal_name}"
        if reason is None and state.usage is None:
            reason = state.no_usage_reason(self.include_usage)
        return served, stop, (state.usage if reason is None else None), reason

    def _from_body(self, cut: bool) -> tuple[Any, Any, Any, str | None]:
        """Read a non-streamed body: (served_model, stop_reason, usage, reason)."""
        status = self.status
        assert status is not None
        if self._body_overflow:
            return None, None, None, f"response body over {self.max_body_bytes} bytes"
        obj, problem = _decode_json(bytes(self._body), "response body")
        if status >= 400 or status < 200:
            detail = error_detail(obj)
            return None, None, None, _status_reason(status) + (f": {detail}" if detail else "")
        if cut:
            return None, None, None, "response body cut"
        if problem is not None:
            return None, None, None, problem
        if not isinstance(obj, dict):
            return None, None, None, "response body is not a JSON object"
        state = self._state = STREAMS[self.endpoint](self.problems)
        served, stop = state.from_body(obj)
        raw = obj.get("usage")
        if raw is None:
            detail = error_detail(obj)
            return served, stop, None, "response has no usage" + (f" ({detail})" if detail else "")
        if not isinstance(raw, dict):
            return served, stop, None, "usage is not a JSON object"
        return served, stop, raw, None
