"""Model calls on cloud providers' paths: Vertex AI (Anthropic), Azure OpenAI, Bedrock
(its AWS event-stream framing decoded sans-IO: whole, byte at a time, any split, junk, bad CRC)."""

from __future__ import annotations

import base64
import json
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.llm import EventStreamDecoder, EventStreamError, LlmCallBuilder, classify, path_model
from collectors.llm._eventstream import encode_message
from collectors.sse import NEED_DATA
from ledger.events import LlmCall, decode_event
from tests.collectors.test_llm import JSON, SSE, fx

VERTEX = "/v1/projects/p1/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:{}"
AZURE = "/openai/deployments/my-gpt5/chat/completions?api-version=2024-10-21"
BEDROCK = "/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/{}"


@pytest.mark.parametrize("path, kind, model", [
    (VERTEX.format("rawPredict"), ("vertex", "rawPredict"), "claude-sonnet-4-5@20250929"),
    (VERTEX.format("streamRawPredict"), ("vertex", "streamRawPredict"), "claude-sonnet-4-5@20250929"),
    (AZURE, ("azure", "chat.completions"), "my-gpt5"),
    ("/openai/deployments/my-gpt5/responses?api-version=2025-03-01-preview", ("azure", "responses"), "my-gpt5"),
    ("/openai/responses?api-version=2025-03-01-preview", ("azure", "responses"), None),
    ("/openai/v1/chat/completions", ("openai", "chat.completions"), None),
    (BEDROCK.format("invoke"), ("bedrock", "invoke"), "anthropic.claude-sonnet-4-5-20250929-v1:0"),
    (BEDROCK.format("invoke-with-response-stream"), ("bedrock", "invoke-with-response-stream"),
     "anthropic.claude-sonnet-4-5-20250929-v1:0"),
    ("/v1/projects/p1/locations/l/publishers/google/models/gemini:generateContent", ("vertex", "generateContent"),
     "gemini"),
    ("/v1/projects/p1/locations/l/publishers/google/models/gemini:countTokens", None, None),
    ("/model/x/converse", None, None),
])
def test_cloud_paths_are_classified_and_name_their_model(path, kind, model):
    assert classify("POST", "h", path) == kind
    assert path_model(path) == model


def build(provider, endpoint, path, request: dict, body_chunks, ctype, cut=False) -> LlmCall:
    builder = LlmCallBuilder(provider, endpoint, url_model=path_model(path))
    builder.request(json.dumps(request).encode())
    builder.response_start(200, [("Content-Type", ctype)])
    for chunk in body_chunks:
        builder.response_data(chunk)
    call = builder.finish(cut=cut)
    assert decode_event(__import__("msgspec").msgpack.encode(call)) == call  # the ledger reads it back
    return call


ANTHROPIC_BODY = json.loads(fx("anthropic_response.json"))


def test_vertex_raw_predict_reads_anthropic_usage_and_the_model_from_the_url():
    request = {"anthropic_version": "vertex-2023-10-16", "max_tokens": 100, "messages": []}
    call = build("vertex", "rawPredict", VERTEX.format("rawPredict"), request, [fx("anthropic_response.json")], JSON)
    assert (call.provider, call.endpoint, call.requested_model) == ("vertex", "rawPredict",
                                                                    "claude-sonnet-4-5@20250929")
    assert call.usage == ANTHROPIC_BODY["usage"] and call.normalized is not None
    streamed = build("vertex", "streamRawPredict", VERTEX.format("streamRawPredict"), {**request, "stream": True},
                     [fx("anthropic_stream.sse")], SSE)
    assert streamed.usage is not None and streamed.usage_missing_reason is None


def test_azure_chat_completions_on_a_deployment():
    call = build("azure", "chat.completions", AZURE, {"messages": []}, [fx("openai_chat_response.json")], JSON)
    assert (call.provider, call.requested_model) == ("azure", "my-gpt5")
    assert call.usage == json.loads(fx("openai_chat_response.json"))["usage"]


EVENTS = [block.split("data: ", 1)[1] for block in fx("anthropic_stream.sse").decode().split("\n\n") if "data: " in block]


def chunk(event_json: str) -> bytes:
    payload = json.dumps({"bytes": base64.b64encode(event_json.encode()).decode()}).encode()
    return encode_message({":event-type": "chunk", ":content-type": "application/json", ":message-type": "event"},
                          payload)


BEDROCK_STREAM = b"".join(chunk(e) for e in EVENTS)
EVENTSTREAM = "application/vnd.amazon.eventstream"
REQUEST = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 100, "messages": []}


def bedrock(chunks, cut=False) -> LlmCall:
    return build("bedrock", "invoke-with-response-stream", BEDROCK.format("invoke-with-response-stream"), REQUEST,
                 chunks, EVENTSTREAM, cut=cut)


def test_bedrock_stream_reads_the_same_usage_as_the_anthropic_stream_whole_and_byte_at_a_time():
    sse = build("anthropic", "messages", "/v1/messages", {**REQUEST, "model": "m", "stream": True},
                [fx("anthropic_stream.sse")], SSE)
    for chunks in ([BEDROCK_STREAM], [BEDROCK_STREAM[i:i + 1] for i in range(len(BEDROCK_STREAM))]):
        call = bedrock(chunks)
        assert call.requested_model == "anthropic.claude-sonnet-4-5-20250929-v1:0"
        assert call.streamed  # by the endpoint's name: Bedrock's body has no "stream"
        assert (call.usage, call.served_model, call.stop_reason) == (sse.usage, sse.served_model, sse.stop_reason)
        assert call.usage_missing_reason is None and call.normalized is not None


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(BEDROCK_STREAM)), max_size=10))
def test_bedrock_stream_at_any_split(cuts):
    points = sorted(set(cuts))
    chunks = [BEDROCK_STREAM[a:b] for a, b in zip([0, *points], [*points, len(BEDROCK_STREAM)])]
    assert bedrock(chunks).usage == bedrock([BEDROCK_STREAM]).usage is not None


def test_bedrock_stream_cut_junk_bad_crc_and_exceptions_give_no_usage_with_a_reason():
    cut = bedrock([BEDROCK_STREAM[:-7]], cut=True)
    assert cut.usage is None and cut.usage_missing_reason == "stream cut before message_stop"
    builder = LlmCallBuilder("bedrock", "invoke-with-response-stream")
    builder.response_start(200, [("Content-Type", EVENTSTREAM)])
    builder.response_data(BEDROCK_STREAM + b"\x00\x00\x00\x10junk and more junk")
    junk = builder.finish()  # junk after the terminal event: the usage stands, the junk is noted
    assert junk.usage == bedrock([BEDROCK_STREAM]).usage and any("prelude CRC mismatch" in p for p in builder.problems)
    early = bedrock([chunk(EVENTS[0]) + b"\x00\x00\x00\x10junk and more junk"])
    assert early.usage is None and "prelude CRC mismatch" in early.usage_missing_reason
    bad = bytearray(BEDROCK_STREAM)
    bad[20] ^= 0xFF  # inside the first message's headers
    broken = bedrock([bytes(bad)])
    assert broken.usage is None and "message CRC mismatch" in broken.usage_missing_reason
    throttled = encode_message({":exception-type": "throttlingException", ":message-type": "exception"},
                               b'{"message": "Too many requests"}')
    call = bedrock([chunk(EVENTS[0]), throttled])
    assert call.usage is None and "throttlingException" in call.usage_missing_reason


def test_the_event_stream_decoder_whole_byte_at_a_time_and_its_errors():
    data = chunk(EVENTS[0]) + encode_message({"a": "b"}, b"")
    whole = EventStreamDecoder()
    whole.feed(data)
    first, second = whole.next_event(), whole.next_event()
    assert whole.next_event() is NEED_DATA and whole.buffered == 0
    assert first.headers[":event-type"] == "chunk" and second.headers == {"a": "b"} and second.payload == b""
    assert (first.index, second.index) == (0, 1)
    trickle, got = EventStreamDecoder(), []
    for i in range(len(data)):
        trickle.feed(data[i:i + 1])
        while (m := trickle.next_event()) is not NEED_DATA:
            got.append(m)
    assert got == [first, second]
    short = struct.pack(">II", 10, 0)
    for mangled, message in ((short + struct.pack(">I", zlib.crc32(short)), "impossible lengths"),
                             (short + b"\x00\x00\x00\x00", "prelude CRC mismatch"),
                             (data[:-1] + bytes([data[-1] ^ 1]), "message CRC mismatch")):
        decoder = EventStreamDecoder()
        decoder.feed(mangled)
        with pytest.raises(EventStreamError, match=message):
            while decoder.next_event() is not NEED_DATA:
                pass
        with pytest.raises(EventStreamError):  # the framing stays lost
            decoder.next_event()


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200))
def test_the_event_stream_decoder_raises_only_its_own_error_on_garbage(data):
    decoder = EventStreamDecoder()
    decoder.feed(data)
    try:
        while decoder.next_event() is not NEED_DATA:
            pass
    except EventStreamError:
        pass


def test_bedrock_invoke_reads_the_anthropic_body_and_the_model_id_from_the_url():
    call = build("bedrock", "invoke", BEDROCK.format("invoke"), REQUEST, [fx("anthropic_response.json")], JSON)
    assert (call.provider, call.endpoint) == ("bedrock", "invoke")
    assert call.requested_model == "anthropic.claude-sonnet-4-5-20250929-v1:0"
    assert call.usage == ANTHROPIC_BODY["usage"] and call.normalized is not None
