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
``response.incomplete``, ``response.failed``; ``error``), and the Gemini API's
``generateContent`` / ``streamGenerateContent`` (``GenerateContentResponse`` objects, streamed
as SSE with ``alt=sse`` or as one JSON array without it; google-genai 3.6.1).

Usage is never invented: a cut stream, malformed JSON, invalid UTF-8, an error status or
a stream without usage gives ``usage=None`` with ``usage_missing_reason`` saying why.
Nothing here raises on bad input; anomalies also accumulate in
`LlmCallBuilder.problems`.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final, Protocol, cast, get_args
from urllib.parse import unquote, urlsplit

import msgspec

from collectors.llm._eventstream import EventStreamDecoder, EventStreamError
from collectors.llm._jsonarray import JsonArrayEvents
from collectors.llm._streams import PROVIDER_STREAMS, STREAMS, StreamState, error_detail
from collectors.llm._usage import normalize_usage
from collectors.sse import NEED_DATA, ParserClosedError, SseEvent, SseParser
from ledger import NeedData, SansIOParser
from ledger.events import LlmCall, LlmEndpoint, Provider

__all__ = [
    "ANTHROPIC",
    "SHAPES",
    "path_model",
    "OPENAI",
    "ENDPOINTS",
    "LlmCallBuilder",
    "STREAMING",
    "classify",
    "non_generating",
]

ANTHROPIC: Final = "anthropic"
OPENAI: Final = "openai"

ENDPOINTS: Final[dict[str, tuple[Provider, LlmEndpoint]]] = {
    "/v1/messages": (ANTHROPIC, "messages"),
    "/v1/chat/completions": (OPENAI, "chat.completions"),
    "/v1/responses": (OPENAI, "responses"),
}
"""Path suffix -> (provider, endpoint). A base URL may add a prefix (``/api/v1/...``)."""

SHAPES: Final[dict[str, str]] = {
    "messages": "messages", "chat.completions": "chat.completions", "responses": "responses",
    "rawPredict": "messages", "streamRawPredict": "messages",
    "invoke": "messages", "invoke-with-response-stream": "messages",
    "generateContent": "generate_content", "streamGenerateContent": "generate_content",
}
"""Endpoint -> the API shape of its bodies. Vertex AI's Anthropic endpoints take and return
Messages bodies ("Use Claude models on Vertex AI",
https://cloud.google.com/vertex-ai/generative-ai/docs/partner-models/use-claude); Bedrock's
``invoke`` does for Anthropic models ("Anthropic Claude Messages API",
https://docs.aws.amazon.com/bedrock/latest/userguide/model-parameters-anthropic-claude-messages.html),
its stream wrapped in AWS event-stream framing (`collectors.llm.EventStreamDecoder`). The
Gemini API's methods take ``GenerateContentRequest`` and return ``GenerateContentResponse``
bodies on Google AI Studio and Vertex AI alike (wrapped in ``{"response": ...}`` by Code
Assist, `collectors.llm._streams.CodeAssistGenerateContent`)."""

STREAMING: Final = frozenset({"streamRawPredict", "invoke-with-response-stream", "streamGenerateContent"})
"""Endpoints that stream by their name: their request bodies need not say ``stream``
(Bedrock's and Gemini's have no such member)."""

_VERTEX = re.compile(r"/publishers/anthropic/models/(?P<model>[^/:]+):(?P<ep>rawPredict|streamRawPredict)$")
"""Vertex AI: ``/v1/projects/P/locations/L/publishers/anthropic/models/MODEL:rawPredict``."""
_AZURE = re.compile(r"/openai/deployments/(?P<model>[^/]+)/(?P<ep>chat/completions|responses)$")
"""Azure OpenAI: ``/openai/deployments/NAME/chat/completions?api-version=...`` ("Azure OpenAI
in Azure AI Foundry Models REST API reference",
https://learn.microsoft.com/en-us/azure/ai-foundry/openai/reference); the v1 API's
``/openai/v1/responses`` and ``/openai/v1/chat/completions`` match the OpenAI suffixes."""
_AZURE_RESPONSES = re.compile(r"/openai/responses$")
_BEDROCK = re.compile(r"^/model/(?P<model>[^/]+)/(?P<ep>invoke|invoke-with-response-stream)$")
"""Bedrock runtime: ``POST /model/MODEL_ID/invoke`` and ``.../invoke-with-response-stream``
("InvokeModel", https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_InvokeModel.html)."""
_GEMINI = re.compile(
    r"/(?P<model>(?P<vertex>projects/[^/]+/locations/[^/]+/(?:publishers/[^/]+/models|endpoints)/[^/:]+"
    r"|publishers/[^/]+/models/[^/:]+)"
    r"|(?:models|tunedModels)/[^/:]+):(?P<ep>generateContent|streamGenerateContent)$")
"""The Gemini API, model in the URL (google-genai 3.6.1 ``models.py``, ``{model}:generateContent``
and ``{model}:streamGenerateContent?alt=sse``; ``_transformers.py`` ``t_model``): Google AI
Studio's ``/v1beta/models/MODEL`` (or ``v1``, ``v1alpha``; ``tunedModels/ID``); Vertex AI's
``/v1/projects/P/locations/L/publishers/google/models/MODEL`` (or ``.../endpoints/ID``, a
tuned or deployed model), and its express mode's ``/v1/publishers/google/models/MODEL``
(no project: "Vertex AI express mode API reference",
https://cloud.google.com/vertex-ai/generative-ai/docs/start/express-mode/vertex-ai-express-mode-api-reference)."""
_CODE_ASSIST = re.compile(r"/v1internal:(?P<ep>generateContent|streamGenerateContent)$")
"""Code Assist, gemini-cli's "Login with Google" (gemini-cli 0.61.0
``packages/core/src/code_assist/server.ts``: ``https://cloudcode-pa.googleapis.com/v1internal:METHOD``,
streamed with ``alt=sse``); the model is the body's ``model``."""
_GOOGLE_OPENAI = re.compile(r"/(?:(?P<vertex>projects/[^/]+/locations/[^/]+/endpoints/[^/]+)|v1beta/openai)"
                            r"/chat/completions$")
"""Google's OpenAI-compatible Chat Completions: the Gemini API's ``/v1beta/openai/chat/completions``
("OpenAI compatibility", https://ai.google.dev/gemini-api/docs/openai) and Vertex AI's
``/v1/projects/P/locations/L/endpoints/openapi/chat/completions``
(``projects.locations.endpoints.chat.completions``,
https://cloud.google.com/vertex-ai/docs/reference/rest/v1beta1/projects.locations.endpoints.chat/completions)."""
_NON_GENERATING = (
    (re.compile(r"(?:/(?:models|tunedModels|endpoints)/[^/:]+|/v1internal):(?:countTokens|computeTokens)$"
                r"|/v1/messages/count_tokens$|/v1/responses/input_tokens$"), "token count"),
    (re.compile(r"/v1internal:(?:loadCodeAssist|onboardUser|listExperiments|retrieveUserQuota|fetchAdminControls"
                r"|setCodeAssistGlobalUserSetting|recordCodeAssistMetrics)$"), "Code Assist account method"),
)
"""Model API methods that generate nothing, so no ``llm.call``: token counting (the Gemini
API's ``:countTokens`` and Vertex AI's ``:computeTokens``, google-genai 3.6.1 ``models.py``;
Anthropic's ``/v1/messages/count_tokens``, "Token counting",
https://docs.anthropic.com/en/docs/build-with-claude/token-counting; OpenAI's
``/v1/responses/input_tokens``, "Get input token counts",
https://platform.openai.com/docs/api-reference/responses/input-tokens), whose counts describe
a prompt, not tokens consumed; and Code Assist's account, quota, experiment and telemetry
methods (gemini-cli 0.61.0 ``packages/core/src/code_assist/server.ts``)."""

DEFAULT_MAX_BODY_BYTES: Final = 64 << 20
_DETAIL_CHARS: Final = 200
MAX_PROBLEMS: Final = 64
"""Problem lines kept per call: the first 63, then one counting the dropped ones."""

Headers = Iterable[tuple[str, str]] | Mapping[str, str]


def classify(
    method: str, host: str, path: str, request_headers: Headers = ()
) -> tuple[Provider, LlmEndpoint] | None:
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
    return _path_kind(path)


@functools.lru_cache(maxsize=1024)
def _path_kind(path: str) -> tuple[Provider, LlmEndpoint] | None:
    """`classify`'s answer for a POST to ``path`` (remembered: a run posts to the same few
    paths, and replay classifies each exchange more than once)."""
    path = _bare(path)
    for suffix, kind in ENDPOINTS.items():
        if path.endswith(suffix):
            return kind
    found_kind = _matched_kind(path)
    return None if found_kind is None else _kind(*found_kind)


def _matched_kind(path: str) -> tuple[str, str] | None:
    if found := _GEMINI.search(path):
        return ("vertex" if found["vertex"] else "gemini"), found["ep"]
    if found := _CODE_ASSIST.search(path):
        return "code_assist", found["ep"]
    if found := _GOOGLE_OPENAI.search(path):
        return ("vertex" if found["vertex"] else "gemini"), "chat.completions"
    if found := _VERTEX.search(path):
        return "vertex", found["ep"]
    if found := _AZURE.search(path):
        return "azure", found["ep"].replace("/", ".")
    if _AZURE_RESPONSES.search(path):
        return "azure", "responses"
    if found := _BEDROCK.match(path):
        return "bedrock", found["ep"]
    return None


_PROVIDERS: Final = frozenset(get_args(Provider))
_LLM_ENDPOINTS: Final = frozenset(get_args(LlmEndpoint))


def _kind(provider: str, endpoint: str) -> tuple[Provider, LlmEndpoint]:
    """A (provider, endpoint) a path pattern matched, checked against the ledger's vocabulary."""
    if provider not in _PROVIDERS or endpoint not in _LLM_ENDPOINTS:
        raise AssertionError(f"a path pattern matched outside the vocabulary: {provider} {endpoint}")
    return cast(Provider, provider), cast(LlmEndpoint, endpoint)


def non_generating(path: str) -> str | None:
    """What a request to ``path`` is when it is a model API method that generates nothing
    (``"token count"``, ``"Code Assist account method"``: `_NON_GENERATING`), else None.
    Such a call gets no ``llm.call``; its exchange and bodies are in the ledger."""
    path = _bare(path)
    return next((what for pattern, what in _NON_GENERATING if pattern.search(path)), None)


def _bare(path: str) -> str:
    """The path of a request target: no scheme/host, query or fragment, one trailing slash off."""
    if not path.startswith("/"):
        path = urlsplit(path).path
    path = unquote(path.split("?", 1)[0].split("#", 1)[0])
    if path.endswith("/") and len(path) > 1:
        path = path[:-1]
    return path


@functools.lru_cache(maxsize=1024)
def path_model(path: str) -> str | None:
    """The model a request names in its URL, where the API puts it there: Vertex AI's
    ``models/MODEL:rawPredict``, Azure OpenAI's deployment name, Bedrock's model id (URL
    decoded: ``anthropic.claude-sonnet-4-5-20250929-v1%3A0``), the Gemini API's
    ``models/MODEL:generateContent`` (``MODEL``; a tuned model or Vertex AI endpoint as
    ``tunedModels/ID`` or ``endpoints/ID``, names of an operator's resource); None for the
    others (the model is then in the body). Remembered by path, as `classify`'s answer is."""
    path = _bare(path)
    if found := _GEMINI.search(path):
        resource = found["model"]
        if resource.startswith("tunedModels/"):
            return resource
        kind, _, name = resource.rpartition("/")
        return f"endpoints/{name}" if kind.endswith("/endpoints") else name
    for pattern in (_VERTEX, _AZURE, _BEDROCK):
        if found := pattern.search(path):
            return found["model"]
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


class _RequestFields(msgspec.Struct):
    """The members of a request body `LlmCallBuilder.request` reads (absent: None)."""

    model: Any = None
    stream: Any = None
    stream_options: Any = None


_REQUEST_FIELDS = msgspec.json.Decoder(_RequestFields)


def _request_fields(data: bytes) -> _RequestFields | str:
    """A request body's ``model``, ``stream`` and ``stream_options``, or the problem with it.

    The other members are parsed but not built: an agent's request carries its whole
    conversation and tool definitions, which a full decode would turn into objects only to
    read three members (docs/benchmarks.md, "Figures behind the code"). A body this decoder refuses is decoded whole, at the depth the whole decode
    always ran at, so every problem is named as it was. One difference with decoding whole:
    a member the call does not read is not converted, so a number JSON's grammar allows but
    Python will not convert there (a float out of range, ``1e999``; an integer of more than
    4,300 digits, `sys.get_int_max_str_digits`) no longer makes the body malformed (RFC 8259,
    section 6, leaves the range of numbers to the implementation).
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"invalid UTF-8 in request body at byte {exc.start}"
    try:
        return _REQUEST_FIELDS.decode(text)
    except (msgspec.DecodeError, RecursionError, UnicodeError):
        pass  # not an object, or malformed: named as a whole decode names it
    try:  # here, not through _decode_json: a frame deeper would meet the recursion limit sooner
        obj = msgspec.json.decode(text)
    except (msgspec.DecodeError, RecursionError, UnicodeError) as exc:
        return _short(f"malformed JSON in request body: {exc}")
    if not isinstance(obj, dict):
        return "request body is not a JSON object"
    return _RequestFields(obj.get("model"), obj.get("stream"), obj.get("stream_options"))


EVENTSTREAM: Final = "application/vnd.amazon.eventstream"


class BedrockEvents:
    """Bedrock's ``invoke-with-response-stream`` body as the SSE events of the model's own
    stream: each ``chunk`` message's ``{"bytes": BASE64}`` payload is one event's JSON; an
    ``exception`` message becomes an ``error`` event ("InvokeModelWithResponseStream",
    https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_InvokeModelWithResponseStream.html).
    Same interface as `collectors.sse.SseParser` for `LlmCallBuilder` (`ledger.SansIOParser`).

    Attributes:
        broken: why the framing or a payload could not be read (the first reason), or None.
    """

    invalid_utf8_lines = 0

    def __init__(self) -> None:
        self._decoder = EventStreamDecoder()
        self._index = 0
        self._closed = False
        self.broken: str | None = None

    def feed(self, data: bytes) -> None:
        """Append received bytes.

        Raises:
            ParserClosedError: after `close`.
        """
        if self._closed:
            raise ParserClosedError("BedrockEvents.feed after close")
        if self.broken is None:
            self._decoder.feed(data)

    def _fail(self, reason: str) -> NeedData:
        self.broken = self.broken or _short(reason)
        return NEED_DATA

    def next_event(self) -> SseEvent | NeedData:
        """The next model stream event, or `NEED_DATA`."""
        while self.broken is None:
            try:
                message = self._decoder.next_event()
            except EventStreamError as exc:
                return self._fail(str(exc))
            if message is NEED_DATA:
                return NEED_DATA
            kind = message.headers.get(":message-type")
            if kind == "exception":
                name = message.headers.get(":exception-type", "exception")
                detail, _ = _decode_json(message.payload, "exception payload")
                text = detail.get("message") if isinstance(detail, dict) else None
                data = msgspec.json.encode({"type": "error", "error": {"type": name, "message": text or ""}})
                return self._event("error", data)
            if kind != "event" or message.headers.get(":event-type") != "chunk":
                continue  # other event types carry no model output
            obj, problem = _decode_json(message.payload, f"event-stream message #{message.index}")
            raw = obj.get("bytes") if isinstance(obj, dict) else None
            if problem is not None or not isinstance(raw, str):
                return self._fail(problem or f"event-stream message #{message.index} has no base64 `bytes`")
            try:
                data = base64.b64decode(raw, validate=True)
            except (binascii.Error, ValueError) as exc:
                return self._fail(f"event-stream message #{message.index}: bad base64: {exc}")
            return self._event("message", data)
        return NEED_DATA

    def _event(self, name: str, data: bytes) -> SseEvent:
        self._index += 1
        return SseEvent(event=name, data=data.decode("utf-8", "replace"), index=self._index - 1)

    def close(self) -> None:
        """The stream ended (`cut` then says whether mid-message)."""
        self._closed = True
        self._decoder.close()

    @property
    def cut(self) -> bool:
        """After `close`: a message was cut (not broken, and bytes left over)."""
        return self._closed and self.broken is None and self._decoder.buffered > 0


class _EventReader(SansIOParser[SseEvent], Protocol):
    """What `LlmCallBuilder` reads a streamed body with: `SseParser`, `BedrockEvents` or
    `JsonArrayEvents`."""

    @property
    def cut(self) -> bool: ...

    @property
    def invalid_utf8_lines(self) -> int: ...


class LlmCallBuilder:
    """Build one `LlmCall` from an exchange's bytes, as they pass.

    Call `request` with the request body, then `response_start` with the status and
    headers, `response_data` with each (content-decoded) body chunk, and `finish`.
    A response is read as an event stream when its Content-Type is
    ``text/event-stream`` (or, with no Content-Type, when the request asked to stream, or
    the endpoint streams: `STREAMING`), AWS event-stream framing, or for a successful
    ``streamGenerateContent`` one JSON array (`collectors.llm._jsonarray`); otherwise as
    one JSON body, buffered up to ``max_body_bytes``.

    Args:
        provider: ``"anthropic"``, ``"openai"``, ``"vertex"``, ``"azure"``, ``"bedrock"``,
            ``"gemini"`` or ``"code_assist"`` (from `classify`).
        endpoint: an endpoint `classify` returns (`SHAPES` gives its body shape).
        url_model: the model the request's URL names (`path_model`), used when the body
            names none.
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
        provider: Provider,
        endpoint: LlmEndpoint,
        *,
        exchange_seq: int | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        url_model: str | None = None,
    ) -> None:
        if endpoint not in SHAPES:
            raise ValueError(
                f"unknown LLM endpoint {endpoint!r}; expected one of {sorted(SHAPES)}"
            )
        self.provider = provider
        self.endpoint = endpoint
        self.shape = SHAPES[endpoint]
        self._reader = PROVIDER_STREAMS.get((provider, self.shape), STREAMS[self.shape])
        self.url_model = url_model
        self.exchange_seq = exchange_seq
        self.max_body_bytes = max_body_bytes
        self.problems: list[str] = _ProblemLog()
        self.requested_model: str | None = url_model
        self.stream_requested = endpoint in STREAMING
        self.include_usage = False
        self.status: int | None = None
        self._sse: _EventReader | None = None
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
        """Read the request body: ``model`` (else the URL's), ``stream`` (or the endpoint
        streams), ``stream_options.include_usage``.

        Args:
            body: the decoded request body (JSON).
        """
        self._check_open()
        fields = _request_fields(body)
        if isinstance(fields, str):
            self.problems.append(fields)
            return
        model = fields.model
        self.requested_model = model if isinstance(model, str) else self.url_model
        self.stream_requested = fields.stream is True or self.endpoint in STREAMING
        options = fields.stream_options
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
            self._sse = SseParser(stray_json=self.shape == "generate_content")  # Google's errors outside it
        elif ctype == EVENTSTREAM:
            self._sse = BedrockEvents()
        elif ctype == "application/json" and self.endpoint == "streamGenerateContent" and 200 <= status < 300:
            self._sse = JsonArrayEvents()
        if self._sse is not None:
            self._state = self._reader(self.problems)

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
                self._state.event(event)
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
        failed = self._failed(cut, stop)
        normalized = None
        if usage is not None and (problem := _unencodable(usage)) is not None:
            usage, reason = None, f"usage not recordable: {problem}"
            self.problems.append(reason)
        if usage is not None:
            normalized, problem = normalize_usage(self.shape, usage, streamed=streamed)
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
            failed=failed,
        )

    def _failed(self, cut: bool, stop: str | None) -> str | None:
        """Why the call failed (`LlmCall.failed`), or None: the provider's word where it gave one."""
        status = self.status
        if status is None:
            return "no response"
        if status >= 400 or status < 200:
            detail = ""
            if self._sse is None and not self._body_overflow:
                detail = error_detail(_decode_json(bytes(self._body), "response body")[0])
            elif self._state is not None and self._state.error:
                detail = self._state.error
            return _status_reason(status) + (f": {detail}" if detail else "")
        state = self._state
        if self._sse is not None and state is not None:
            if state.error:
                return state.error
            if not state.terminal:
                return f"stream cut before {state.terminal_name}"
        elif cut:
            return "response body cut"
        if stop is not None and stop.startswith("failed"):  # a Responses response whose status is failed
            return f"response {stop}"
        return None

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
        sse.close()
        if sse.cut:
            self.problems.append("stream ended mid-event")
        state.finish()
        if cut and state.terminal:
            self.problems.append("connection cut after the stream's terminal event")
        served, stop = state.served_model, state.stop_reason
        if status >= 400 or status < 200:
            return served, stop, None, _status_reason(status)
        broken = sse.broken if isinstance(sse, (BedrockEvents, JsonArrayEvents)) else None
        if broken is not None:
            self.problems.append(broken + (" (after the terminal event)" if state.terminal else ""))
            if not state.terminal:
                return served, stop, None, broken
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
        state = self._state = self._reader(self.problems)
        served, stop = state.from_body(obj)
        raw = state.body_usage(obj)
        if raw is None:
            detail = error_detail(obj)
            return served, stop, None, "response has no usage" + (f" ({detail})" if detail else "")
        if not isinstance(raw, dict):
            return served, stop, None, "usage is not a JSON object"
        return served, stop, raw, None
