"""Tests for collectors/llm.py: LLM calls from recorded-shape exchanges, field by field."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.llm._usage import (
    RULES,
    STREAMED_ANTHROPIC_SUFFIX,
    STREAMED_CHAT_SUFFIX,
    STREAMED_RESPONSES_SUFFIX,
)
from collectors.llm import LlmCallBuilder, classify
from collectors.sse import ParserClosedError
from ledger.events import LlmCall, LlmUsage, decode_event

FIXTURES = Path(__file__).parent / "test_llm"
SSE = "text/event-stream; charset=utf-8"
JSON = "application/json"
PROVIDER = {"messages": "anthropic", "chat.completions": "openai", "responses": "openai"}


def fx(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def usage_of(name: str, *path: str) -> dict:
    obj = json.loads(fx(name))
    for key in path:
        obj = obj[key]
    return obj


def sse_usage(name: str, event: str) -> dict:
    """The ``response.usage`` of the named event in an SSE fixture."""
    for block in fx(name).decode().split("\n\n"):
        if f"event: {event}\n" in block:
            return json.loads(block.split("data: ", 1)[1])["response"]["usage"]
    raise AssertionError(event)


def run(
    endpoint: str,
    request: bytes,
    chunks: list[bytes] | bytes,
    *,
    status: int = 200,
    ctype: str | None = JSON,
    cut: bool = False,
) -> tuple[LlmCall, LlmCallBuilder]:
    builder = LlmCallBuilder(PROVIDER[endpoint], endpoint, exchange_seq=7)
    builder.request(request)
    builder.response_start(status, [("Content-Type", ctype)] if ctype else [])
    for chunk in [chunks] if isinstance(chunks, bytes) else chunks:
        builder.response_data(chunk)
    return builder.finish(cut=cut), builder


def stream(endpoint: str, request: str, body: bytes, **kw) -> LlmCall:
    return run(endpoint, fx(request), body, ctype=SSE, **kw)[0]


def bare(view: LlmUsage | None) -> LlmUsage | None:
    """The figures and rule text of a view, without its per-figure rules and sources
    (tested on their own below)."""
    return None if view is None else msgspec.structs.replace(view, rules={}, sources={})


def before(name: str, marker: str) -> bytes:
    """The fixture's bytes up to (not including) the first line containing marker."""
    data = fx(name)
    return data[: data.index(marker.encode())]


# --- classify -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        ("POST", "/v1/messages", ("anthropic", "messages")),
        ("post", "/v1/messages?beta=true", ("anthropic", "messages")),
        ("POST", "/proxy/anthropic/v1/messages", ("anthropic", "messages")),
        ("POST", "/v1/chat/completions", ("openai", "chat.completions")),
        ("POST", "/api/v1/chat/completions/", ("openai", "chat.completions")),
        ("POST", "/v1/responses", ("openai", "responses")),
        ("POST", "https://api.openai.com/v1/responses?x=1", ("openai", "responses")),
        ("GET", "/v1/messages", None),
        ("POST", "/v1/messages/count_tokens", None),
        ("POST", "/v1/messages/batches", None),
        ("POST", "/foov1/messages", None),
        ("POST", "/v1/responses/resp_123/cancel", None),
        ("POST", "/v1/completions", None),
        ("GET", "/v1/models", None),
    ],
)
def test_classify(method, path, expected):
    assert classify(method, "api.example.com", path, [("content-type", JSON)]) == expected


# --- Anthropic Messages -------------------------------------------------------------


def test_anthropic_non_streamed_sum_rule():
    call, builder = run("messages", fx("anthropic_request.json"), fx("anthropic_response.json"))
    assert call.provider == "anthropic" and call.endpoint == "messages"
    assert call.requested_model == "claude-sonnet-4-5"
    assert call.served_model == "claude-sonnet-4-5-20250929"
    assert call.stop_reason == "tool_use"
    assert call.streamed is False
    assert call.exchange_seq == 7
    assert call.usage == usage_of("anthropic_response.json", "usage")
    assert call.usage_missing_reason is None
    assert bare(call.normalized) == LlmUsage(
        input_tokens=25 + 1200 + 3400,
        output_tokens=58,
        total_tokens=25 + 1200 + 3400 + 58,
        cache_read_tokens=3400,
        cache_write_tokens=1200,
        reasoning_tokens=None,
        rule=RULES["messages"],
    )
    assert builder.problems == []


def test_anthropic_streamed_merges_start_and_last_delta():
    call = stream("messages", "anthropic_request_stream.json", fx("anthropic_stream.sse"))
    start = json.loads(fx("anthropic_stream.sse").split(b"data: ", 1)[1].split(b"\n")[0])
    expected = dict(start["message"]["usage"], output_tokens=15)
    assert call.streamed is True
    assert call.served_model == "claude-sonnet-4-5-20250929"
    assert call.stop_reason == "end_turn"
    assert call.usage == expected
    assert bare(call.normalized) == LlmUsage(
        input_tokens=4625,
        output_tokens=15,
        total_tokens=4640,
        cache_read_tokens=3400,
        cache_write_tokens=1200,
        rule=RULES["messages"] + STREAMED_ANTHROPIC_SUFFIX,
    )


def test_anthropic_cumulative_delta_last_wins_never_summed():
    call = stream(
        "messages", "anthropic_request_stream.json", fx("anthropic_stream_two_deltas.sse")
    )
    assert call.normalized is not None
    assert call.normalized.output_tokens == 17  # not 5 + 17
    assert call.normalized.input_tokens == 410 + 0 + 2048
    assert call.normalized.total_tokens == 2458 + 17
    assert call.stop_reason == "end_turn"  # the null stop_reason of delta 1 did not stick
    assert call.usage == {
        "input_tokens": 410,  # the last delta's null does not erase message_start's count
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 2048,
        "output_tokens": 17,
        "service_tier": "standard",
        "server_tool_use": {"web_search_requests": 1},
    }


def test_anthropic_stream_error_event():
    call, builder = run(
        "messages",
        fx("anthropic_request_stream.json"),
        fx("anthropic_stream_overloaded.sse"),
        ctype=SSE,
    )
    assert call.usage is None and call.normalized is None
    assert call.usage_missing_reason == "stream error event #2: overloaded_error: Overloaded"
    assert call.served_model == "claude-sonnet-4-5-20250929"


def test_anthropic_error_status():
    call = run(
        "messages", fx("anthropic_request.json"), fx("anthropic_error_429.json"), status=429
    )[0]
    assert call.usage is None and call.served_model is None and call.stop_reason is None
    assert call.usage_missing_reason == (
        "error status 429: rate_limit_error: This request would exceed the rate limit"
        " for your organization of 50,000 input tokens per minute."
    )


@pytest.mark.parametrize(
    "marker", ["event: message_stop", "event: message_delta", '"output_tokens":15}']
)
def test_anthropic_cut_stream(marker):
    call = stream(
        "messages", "anthropic_request_stream.json", before("anthropic_stream.sse", marker)
    )
    assert call.usage is None and call.normalized is None
    assert call.usage_missing_reason == "stream cut before message_stop"
    assert call.served_model == "claude-sonnet-4-5-20250929"


def test_anthropic_stream_without_delta_usage():
    body = fx("anthropic_stream.sse").replace(b',"usage":{"output_tokens":15}', b"")
    call = stream("messages", "anthropic_request_stream.json", body)
    assert call.usage is None
    assert call.usage_missing_reason == "stream without message_delta usage"


def test_connection_cut_after_terminal_keeps_usage():
    call, builder = run(
        "messages",
        fx("anthropic_request_stream.json"),
        fx("anthropic_stream.sse"),
        ctype=SSE,
        cut=True,
    )
    assert call.normalized is not None and call.normalized.output_tokens == 15
    assert builder.problems == ["connection cut after the stream's terminal event"]


# --- OpenAI Chat Completions --------------------------------------------------------

CHAT_VIEW = LlmUsage(
    input_tokens=1117,  # cached 1024 is inside, not added
    output_tokens=246,  # reasoning 192 is inside, not added
    total_tokens=1363,
    cache_read_tokens=1024,
    reasoning_tokens=192,
    rule=RULES["chat.completions"],
)


def test_chat_non_streamed_breakdown_rule():
    call, builder = run(
        "chat.completions", fx("openai_chat_request.json"), fx("openai_chat_response.json")
    )
    assert (call.provider, call.endpoint) == ("openai", "chat.completions")
    assert call.requested_model == "o4-mini"
    assert call.served_model == "o4-mini-2025-04-16"
    assert call.stop_reason == "stop"
    assert call.streamed is False
    assert call.usage == usage_of("openai_chat_response.json", "usage")
    assert bare(call.normalized) == CHAT_VIEW
    assert call.normalized.cache_write_tokens is None
    assert builder.problems == []


def test_chat_streamed_with_include_usage():
    call = stream(
        "chat.completions",
        "openai_chat_request_stream_usage.json",
        fx("openai_chat_stream_usage.sse"),
    )
    assert call.streamed is True
    assert call.served_model == "o4-mini-2025-04-16" and call.stop_reason == "stop"
    assert call.usage == usage_of("openai_chat_response.json", "usage")
    assert bare(call.normalized) == msgspec.structs.replace(
        CHAT_VIEW, rule=RULES["chat.completions"] + STREAMED_CHAT_SUFFIX
    )


def test_chat_stream_without_include_usage():
    call = stream(
        "chat.completions", "openai_chat_request_stream.json", fx("openai_chat_stream_no_usage.sse")
    )
    assert call.usage is None and call.normalized is None
    assert call.usage_missing_reason == "stream without include_usage"
    assert call.stop_reason == "stop" and call.served_model == "o4-mini-2025-04-16"


def test_chat_stream_usage_requested_but_cut():
    body = before("openai_chat_stream_usage.sse", '"choices":[],"usage"')
    body = body[: body.rindex(b"data: ")]
    call = stream("chat.completions", "openai_chat_request_stream_usage.json", body)
    assert call.usage is None and call.usage_missing_reason == "stream cut before [DONE]"


def test_chat_final_usage_chunk_counts_as_terminal_without_done():
    body = before("openai_chat_stream_usage.sse", "data: [DONE]")
    call = stream("chat.completions", "openai_chat_request_stream_usage.json", body)
    assert call.normalized is not None and call.normalized.total_tokens == 1363


def test_chat_done_without_usage_chunk_although_requested():
    body = fx("openai_chat_stream_no_usage.sse")
    call = stream("chat.completions", "openai_chat_request_stream_usage.json", body)
    assert call.usage is None
    assert (
        call.usage_missing_reason
        == "stream ended without a usage chunk although include_usage was set"
    )


@pytest.mark.parametrize(
    ("status", "body", "reason"),
    [
        (
            429,
            "openai_error_429.json",
            "error status 429: tokens: rate_limit_exceeded: Rate limit reached for o4-mini",
        ),
        (500, "openai_error_500.json", "error status 500: server_error: The server had an error"),
    ],
)
def test_chat_error_status(status, body, reason):
    call = run("chat.completions", fx("openai_chat_request.json"), fx(body), status=status)[0]
    assert call.usage is None and call.normalized is None
    assert call.usage_missing_reason.startswith(reason)


def test_chat_sent_total_disagreeing_is_noted_in_rule():
    body = fx("openai_chat_response.json").replace(b'"total_tokens":1363', b'"total_tokens":2387')
    call = run("chat.completions", fx("openai_chat_request.json"), body)[0]
    assert call.normalized.total_tokens == 1363
    assert call.normalized.rule.endswith(
        "; inconsistent: sent total_tokens 2387 != prompt_tokens + completion_tokens"
    )


# --- OpenAI Responses ---------------------------------------------------------------

RESPONSES_VIEW = LlmUsage(
    input_tokens=2048,
    output_tokens=300,
    total_tokens=2348,
    cache_read_tokens=1536,
    reasoning_tokens=256,
    rule=RULES["responses"],
)


def test_responses_non_streamed():
    call = run(
        "responses", fx("openai_responses_request.json"), fx("openai_responses_response.json")
    )[0]
    assert call.requested_model == "gpt-5" and call.served_model == "gpt-5-2025-08-07"
    assert call.stop_reason == "completed" and call.streamed is False
    assert call.usage == usage_of("openai_responses_response.json", "usage")
    assert bare(call.normalized) == RESPONSES_VIEW


def test_responses_streamed():
    call = stream(
        "responses", "openai_responses_request_stream.json", fx("openai_responses_stream.sse")
    )
    assert call.served_model == "gpt-5-2025-08-07" and call.stop_reason == "completed"
    assert call.usage == sse_usage("openai_responses_stream.sse", "response.completed")
    assert bare(call.normalized) == msgspec.structs.replace(
        RESPONSES_VIEW, rule=RULES["responses"] + STREAMED_RESPONSES_SUFFIX
    )


def test_responses_incomplete_keeps_usage():
    call = stream(
        "responses",
        "openai_responses_request_stream.json",
        fx("openai_responses_stream_incomplete.sse"),
    )
    assert call.stop_reason == "incomplete:max_output_tokens"
    assert call.usage == sse_usage("openai_responses_stream_incomplete.sse", "response.incomplete")
    assert (call.normalized.output_tokens, call.normalized.reasoning_tokens) == (64, 60)


def test_responses_cut_stream():
    body = before("openai_responses_stream.sse", "event: response.completed")
    call = stream("responses", "openai_responses_request_stream.json", body)
    assert call.usage is None
    assert call.usage_missing_reason == "stream cut before response.completed/incomplete/failed"
    assert call.served_model == "gpt-5-2025-08-07" and call.stop_reason is None


def test_responses_error_event():
    body = (
        b"event: response.created\n"
        b'data: {"type":"response.created","response":{"model":"gpt-5"}}\n\n'
        b"event: error\n"
        b'data: {"type":"error","code":"server_error","message":"boom","param":null}\n\n'
    )
    call = stream("responses", "openai_responses_request_stream.json", body)
    assert call.usage_missing_reason == "stream error event #1: server_error: boom"


# --- damaged input ------------------------------------------------------------------


def test_malformed_json_body():
    call = run("messages", fx("anthropic_request.json"), fx("anthropic_response.json")[:-40])[0]
    assert call.usage is None
    assert call.usage_missing_reason.startswith("malformed JSON in response body")


def test_malformed_json_event():
    body = fx("anthropic_stream.sse").replace(b'"output_tokens":15}}', b'"output_tokens":15}')
    call = stream("messages", "anthropic_request_stream.json", body)
    assert call.usage is None
    assert call.usage_missing_reason.startswith("malformed JSON in SSE event #6")


def test_invalid_utf8_body():
    body = fx("anthropic_response.json").replace(b"I'll", b"I\xffll")
    call = run("messages", fx("anthropic_request.json"), body)[0]
    assert call.usage is None
    at = body.index(b"\xff")
    assert call.usage_missing_reason == f"invalid UTF-8 in response body at byte {at}"


def test_invalid_utf8_stream():
    body = fx("anthropic_stream.sse").replace(b"Hello", b"Hel\xc3lo")
    call = stream("messages", "anthropic_request_stream.json", body)
    assert call.usage is None
    assert call.usage_missing_reason == "invalid UTF-8 in response stream (1 lines)"


def test_unnormalisable_usage_is_kept_raw():
    body = fx("anthropic_response.json").replace(b'"input_tokens":25', b'"input_tokens":"25"')
    call, builder = run("messages", fx("anthropic_request.json"), body)
    assert call.usage["input_tokens"] == "25" and call.normalized is None
    assert (
        call.usage_missing_reason == "usage not normalisable: input_tokens is not an integer: '25'"
    )
    assert builder.problems == [call.usage_missing_reason]


def test_body_without_usage():
    call = run("messages", fx("anthropic_request.json"), b'{"type":"message","model":"m"}')[0]
    assert call.usage is None and call.usage_missing_reason == "response has no usage"
    assert call.served_model == "m"


def test_non_streamed_cut_body():
    call = run("messages", fx("anthropic_request.json"), fx("anthropic_response.json"), cut=True)[0]
    assert call.usage is None and call.usage_missing_reason == "response body cut"


def test_body_over_cap():
    builder = LlmCallBuilder("anthropic", "messages", max_body_bytes=100)
    builder.response_start(200, {"content-type": JSON})
    builder.response_data(fx("anthropic_response.json"))
    assert builder.finish().usage_missing_reason == "response body over 100 bytes"


def test_no_response_and_bad_request_body():
    builder = LlmCallBuilder("openai", "responses")
    builder.request(b"\x00not json")
    call = builder.finish()
    assert call.requested_model is None and call.usage_missing_reason == "no response"
    assert builder.problems[0].startswith("malformed JSON in request body")


def test_stream_detected_without_content_type_when_requested():
    call = run(
        "messages", fx("anthropic_request_stream.json"), fx("anthropic_stream.sse"), ctype=None
    )[0]
    assert call.normalized.output_tokens == 15


def test_served_model_change_is_a_problem():
    head, _, tail = fx("openai_chat_stream_usage.sse").rpartition(b'"model":"o4-mini-2025-04-16"')
    body = head + b'"model":"gpt-4o"' + tail  # only the final usage chunk names another model
    call, builder = run(
        "chat.completions", fx("openai_chat_request_stream_usage.json"), body, ctype=SSE
    )
    assert call.served_model == "o4-mini-2025-04-16"
    assert builder.problems == ["served model changed from o4-mini-2025-04-16 to gpt-4o"]


def test_finish_is_idempotent_and_feeding_after_is_misuse():
    call, builder = run("messages", fx("anthropic_request.json"), fx("anthropic_response.json"))
    assert builder.finish(cut=True) is call
    with pytest.raises(ParserClosedError):
        builder.response_data(b"more")


def test_calls_round_trip_as_ledger_events():
    call = stream(
        "messages", "anthropic_request_stream.json", fx("anthropic_stream_two_deltas.sse")
    )
    assert decode_event(msgspec.msgpack.encode(call)) == call


# --- properties ---------------------------------------------------------------------

CASES = [
    ("messages", "anthropic_request.json", "anthropic_response.json", JSON),
    ("messages", "anthropic_request_stream.json", "anthropic_stream.sse", SSE),
    ("messages", "anthropic_request_stream.json", "anthropic_stream_two_deltas.sse", SSE),
    ("chat.completions", "openai_chat_request.json", "openai_chat_response.json", JSON),
    (
        "chat.completions",
        "openai_chat_request_stream_usage.json",
        "openai_chat_stream_usage.sse",
        SSE,
    ),
    ("chat.completions", "openai_chat_request_stream.json", "openai_chat_stream_no_usage.sse", SSE),
    ("responses", "openai_responses_request.json", "openai_responses_response.json", JSON),
    ("responses", "openai_responses_request_stream.json", "openai_responses_stream.sse", SSE),
    (
        "responses",
        "openai_responses_request_stream.json",
        "openai_responses_stream_incomplete.sse",
        SSE,
    ),
]


@st.composite
def split(draw, data: bytes) -> list[bytes]:
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=20)))
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(CASES), st.data())
def test_any_chunking_gives_the_same_call(case, data):
    endpoint, request, response, ctype = case
    whole, whole_builder = run(endpoint, fx(request), fx(response), ctype=ctype)
    chunks = data.draw(split(fx(response)))
    call, builder = run(endpoint, fx(request), chunks, ctype=ctype)
    assert call == whole and builder.problems == whole_builder.problems
    assert whole.usage is not None or whole.usage_missing_reason == "stream without include_usage"


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(sorted(PROVIDER)),
    st.binary(max_size=200),
    st.binary(max_size=400),
    st.sampled_from([200, 400, 429, 500, 302]),
    st.sampled_from([SSE, JSON, None]),
    st.booleans(),
    st.data(),
)
def test_arbitrary_bytes_never_raise(endpoint, request, response, status, ctype, cut, data):
    chunks = data.draw(split(response))
    call, _ = run(endpoint, request, chunks, status=status, ctype=ctype, cut=cut)
    check_invariants(call)


def check_invariants(call: LlmCall) -> None:
    """Usage is either trusted and normalised, or absent with a reason; never a 0 guess."""
    if call.normalized is not None:
        assert call.usage is not None and call.usage_missing_reason is None
        assert (
            call.normalized.total_tokens
            == call.normalized.input_tokens + call.normalized.output_tokens
        )
    else:
        assert call.usage_missing_reason
    assert decode_event(msgspec.msgpack.encode(call)) == call


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
USAGE_KEYS = [
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "prompt_tokens_details",
    "completion_tokens_details",
    "input_tokens_details",
    "output_tokens_details",
]
TEXT = st.text(max_size=8) | JSON_VALUES
COUNTS = st.one_of(st.integers(-5, 2**70), JSON_VALUES)
USAGES = st.one_of(
    JSON_VALUES,
    st.dictionaries(
        st.sampled_from(USAGE_KEYS),
        COUNTS
        | st.dictionaries(
            st.sampled_from(["cached_tokens", "reasoning_tokens"]), COUNTS, max_size=2
        ),
        max_size=6,
    ),
)
EVENT_TYPES = [
    "message_start",
    "message_delta",
    "message_stop",
    "error",
    "ping",
    "response.created",
    "response.completed",
    "response.incomplete",
    "response.failed",
    "chat.completion.chunk",
]
OBJECTS = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(EVENT_TYPES) | JSON_VALUES,
        "model": TEXT,
        "usage": USAGES,
        "message": st.fixed_dictionaries({}, optional={"model": TEXT, "usage": USAGES})
        | JSON_VALUES,
        "delta": st.fixed_dictionaries({}, optional={"stop_reason": TEXT}) | JSON_VALUES,
        "response": st.fixed_dictionaries(
            {},
            optional={
                "model": TEXT,
                "status": TEXT,
                "usage": USAGES,
                "incomplete_details": JSON_VALUES,
                "error": JSON_VALUES,
            },
        )
        | JSON_VALUES,
        "choices": st.lists(
            st.fixed_dictionaries({}, optional={"index": JSON_VALUES, "finish_reason": TEXT})
            | JSON_VALUES,
            max_size=2,
        ),
        "error": JSON_VALUES,
    },
)


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(sorted(PROVIDER)),
    st.lists(OBJECTS | JSON_VALUES, min_size=1, max_size=6),
    st.booleans(),
    st.booleans(),
)
def test_structured_garbage_never_raises(endpoint, objects, streamed, done):
    if streamed:
        body = b"".join(b"data: " + json.dumps(o).encode() + b"\n\n" for o in objects)
        body += b"data: [DONE]\n\n" if done else b""
        call, _ = run(endpoint, b'{"stream": true}', body, ctype=SSE)
    else:
        call, _ = run(endpoint, b"{}", json.dumps(objects[0]).encode())
    check_invariants(call)


def test_huge_counts_are_refused_not_recorded_wrong():
    body = fx("anthropic_response.json").replace(
        b'"output_tokens":58', b'"output_tokens":99999999999999999999999'
    )
    call = run("messages", fx("anthropic_request.json"), body)[0]
    assert call.usage is None and call.usage_missing_reason.startswith("usage not recordable")
    check_invariants(call)
    body = fx("anthropic_response.json").replace(
        b'"output_tokens":58', b'"output_tokens":9007199254740993'
    )
    call = run("messages", fx("anthropic_request.json"), body)[0]
    assert call.normalized is None
    assert call.usage_missing_reason.startswith(
        "usage not normalisable: output_tokens is implausibly large"
    )
    check_invariants(call)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(CASES), st.integers(0, 10_000), st.binary(min_size=1, max_size=8))
def test_fixture_damage_never_raises_and_never_gives_zero(case, at, junk):
    endpoint, request, response, ctype = case
    body = fx(response)
    at %= len(body)
    call = run(endpoint, fx(request), body[:at] + junk + body[at + len(junk) :], ctype=ctype)[0]
    if call.usage is None:
        assert call.usage_missing_reason and call.normalized is None


def test_problem_log_is_bounded():
    body = b"data: {not json}\n\n" * 1000
    call, builder = run("messages", b"{}", body, ctype=SSE)
    assert call.usage_missing_reason.startswith("malformed JSON in SSE event #0")
    assert len(builder.problems) == 64
    assert builder.problems[-1] == "... 937 more problems dropped"


def test_unknown_endpoint_is_misuse():
    with pytest.raises(ValueError):
        LlmCallBuilder("openai", "completions")


# --- the request body: three members read, the rest skipped -------------------------------


def _reference_request(body: bytes, url_model: str | None = None) -> tuple:
    """`LlmCallBuilder.request` as it was, decoding the whole body: (requested_model,
    stream_requested, include_usage, problems). A body it cannot read leaves the URL's model."""
    try:
        obj, problem = msgspec.json.decode(body.decode("utf-8")), None
    except UnicodeDecodeError as exc:
        obj, problem = None, f"invalid UTF-8 in request body at byte {exc.start}"
    except (msgspec.DecodeError, RecursionError, UnicodeError) as exc:
        text = f"malformed JSON in request body: {exc}"
        obj, problem = None, text if len(text) <= 200 else text[:200] + "..."
    if problem is None and not isinstance(obj, dict):
        problem = "request body is not a JSON object"
    if problem is not None:
        return url_model, False, False, [problem]
    model = obj.get("model")
    options = obj.get("stream_options")
    return (model if isinstance(model, str) else url_model, obj.get("stream") is True,
            isinstance(options, dict) and options.get("include_usage") is True, [])


def _request(body: bytes, url_model: str | None = None) -> tuple:
    builder = LlmCallBuilder("openai", "chat.completions", url_model=url_model)
    builder.request(body)
    return builder.requested_model, builder.stream_requested, builder.include_usage, list(builder.problems)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["model", "stream", "stream_options", "include_usage", "messages", "x"]) | st.text(max_size=4),
        inner, max_size=5),
    max_leaves=20)


@settings(max_examples=400, deadline=None)
@given(value=_JSON, cut=st.integers(0, 200), byte=st.integers(0, 255), dup=st.booleans())
def test_reading_three_members_of_a_request_gives_what_decoding_it_whole_gives(value, cut, byte, dup):
    """Any JSON value, the same value cut short or with one byte replaced, or with a member
    given twice: the same model, stream flags and problem text as a whole decode. The one
    documented difference: a number out of a float's range in a member not read."""
    body = json.dumps(value).encode()
    if dup and isinstance(value, dict):
        body = body[:-1] + (b', "model": "twice"}' if len(body) > 2 else b'"model": "twice"}')
    for variant in (body, body[:cut], body[:cut] + bytes([byte]) + body[cut + 1:]):
        want, got = _reference_request(variant, "url-model"), _request(variant, "url-model")
        if want != got and want[3] and ("Number out of range" in want[3][0]
                                         or "Integer value out of range" in want[3][0]):
            assert not got[3]  # read: the out-of-range number is in a member not read
            continue
        assert got == want, variant


@pytest.mark.parametrize("body", [
    b'[1, 2]', b'"text"', b'null', b'{"model": "m",}', b'{"model": "m"} x', b'{"x": [1,}', b'\xff{}',
    b'{"x": "\\ud800", "model": "m"}', b'{"x": ' + b'[' * 5000 + b']' * 5000 + b', "model": "m"}',
    b'{"model": "a", "model": "b", "stream": true, "stream_options": {"include_usage": true}}',
    b'{"model": 5, "stream": "true", "stream_options": [1]}', b'',
    b'[' * 996 + b']' * 996, b'{"x": ' + b'[' * 995 + b']' * 995 + b', 1}',  # at the recursion limit
])
def test_request_bodies_that_are_not_plain_objects_are_named_as_before(body):
    assert _request(body, "url-model") == _reference_request(body, "url-model")


@pytest.mark.parametrize("number, why", [(b"1e999", "Number out of range"),
                                         (b"1" * 5001, "Integer value out of range")])
def test_a_number_python_will_not_convert_in_a_member_not_read_no_longer_makes_the_request_malformed(number, why):
    body = b'{"model": "claude-sonnet-4-5", "temperature": ' + number + b', "stream": true}'
    assert _reference_request(body)[3][0].startswith(f"malformed JSON in request body: {why}")
    assert _request(body) == ("claude-sonnet-4-5", True, False, [])


def test_a_failed_call_says_why_in_the_providers_words_and_a_good_one_says_nothing():
    """``llm.call.failed`` (issue 29, item 1): the evidence, seen by the proxy and not by the
    agent's own account, that a model call failed; the in-band failure detector reads it."""
    ok = run("messages", fx("anthropic_request.json"), fx("anthropic_response.json"))[0]
    assert ok.failed is None and stream("messages", "anthropic_request_stream.json", fx("anthropic_stream.sse")).failed \
        is None
    refused = run("messages", fx("anthropic_request.json"), fx("anthropic_error_429.json"), status=429)[0]
    assert refused.failed == "error status 429: rate_limit_error: " + json.loads(
        fx("anthropic_error_429.json"))["error"]["message"]
    assert run("chat.completions", fx("openai_chat_request.json"), fx("openai_error_500.json"),
               status=500)[0].failed.startswith("error status 500: ")
    overloaded = stream("messages", "anthropic_request_stream.json", fx("anthropic_stream_overloaded.sse"))
    assert overloaded.failed is not None and "overloaded_error" in overloaded.failed  # mid-stream, status 200
    cut = stream("messages", "anthropic_request_stream.json", before("anthropic_stream.sse", "message_stop"), cut=True)
    assert cut.failed == "stream cut before message_stop"
    assert run("messages", fx("anthropic_request.json"), fx("anthropic_response.json")[:40], cut=True)[0].failed == \
        "response body cut"
    builder = LlmCallBuilder("anthropic", "messages", exchange_seq=1)
    builder.request(fx("anthropic_request.json"))
    assert builder.finish(cut=True).failed == "no response"
