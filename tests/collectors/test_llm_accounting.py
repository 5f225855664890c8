"""Token accounting faults of issue 19, each a kind: a later zero overriding a real count
(Anthropic streams), a placeholder usage taken as the answer (OpenAI chat streams), and a
body whose content-encoding label lies (proxy). Each first case is the issue's example,
with its right value; the others are members of the same kind."""

from __future__ import annotations

import gzip
import json

import pytest

from collectors.llm import LlmCallBuilder
from collectors.llm._usage import FIGURE_RULES, STREAM_RULES
from collectors.proxy import NEED_DATA, ExchangeAssembler
from collectors.proxy._frames import Chunk, Request, RequestBody, ResponseEnd, ResponseStart
from ledger import keyed_fingerprint
from ledger.events import BlobStored, HttpExchange, LlmCall, WitnessRaw

SSE = "text/event-stream"


def sse(*objects: dict, done: bool = False) -> bytes:
    body = b"".join(b"data: " + json.dumps(o).encode() + b"\n\n" for o in objects)
    return body + (b"data: [DONE]\n\n" if done else b"")


def call_of(endpoint: str, request: dict, body: bytes, *, ctype: str = SSE, split: int | None = None) -> tuple[LlmCall, list[str]]:
    provider = "anthropic" if endpoint == "messages" else "openai"
    builder = LlmCallBuilder(provider, endpoint)
    builder.request(json.dumps(request).encode())
    builder.response_start(200, [("content-type", ctype)])
    step = split or len(body) or 1
    for i in range(0, len(body), step):
        builder.response_data(body[i:i + step])
    return builder.finish(), list(builder.problems)


# --- 1. a later zero overrides a real count (Anthropic, streamed) -------------------------


def anthropic_stream(start_usage: dict, delta_usage: dict) -> bytes:
    return sse(
        {"type": "message_start", "message": {"model": "claude-x", "usage": start_usage}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": delta_usage},
        {"type": "message_stop"},
    )


START = {"input_tokens": 12, "cache_read_input_tokens": 1800, "output_tokens": 1}


@pytest.mark.parametrize("split", [None, 1, 7])
def test_issue_example_a_delta_zero_does_not_erase_the_uncached_input(split):
    body = anthropic_stream(START, {"input_tokens": 0, "output_tokens": 150})
    call, problems = call_of("messages", {"stream": True}, body, split=split)
    assert call.usage == {"input_tokens": 12, "cache_read_input_tokens": 1800, "output_tokens": 150}
    view = call.normalized
    assert (view.input_tokens, view.output_tokens, view.total_tokens) == (1812, 150, 1962)
    assert view.cache_read_tokens == 1800
    assert view.sources == {
        "input_tokens": "message_start (message_delta sent 0 for a count it does not repeat)",
        "cache_read_input_tokens": "message_start",
        "output_tokens": "message_delta (cumulative, last)",
    }
    assert view.rules["input_tokens"] == "anthropic.stream_fields@2+anthropic.input_sum@1"
    assert view.rules["total_tokens"] == "anthropic.stream_fields@2+total.input_plus_output@1"
    assert problems == []


@pytest.mark.parametrize(
    ("delta", "usage", "problem"),
    [
        # the server repeats the real cumulative values: the same figures
        ({"input_tokens": 12, "cache_read_input_tokens": 1800, "output_tokens": 150},
         {"input_tokens": 12, "cache_read_input_tokens": 1800, "output_tokens": 150}, None),
        # nulls for the counts it does not repeat
        ({"input_tokens": None, "cache_read_input_tokens": None, "output_tokens": 150},
         {"input_tokens": 12, "cache_read_input_tokens": 1800, "output_tokens": 150}, None),
        # a zero for a cache count only
        ({"input_tokens": 12, "cache_read_input_tokens": 0, "output_tokens": 150},
         {"input_tokens": 12, "cache_read_input_tokens": 1800, "output_tokens": 150}, None),
        # input that grew during the message (server tools): cumulative, the larger wins
        ({"input_tokens": 40, "output_tokens": 150},
         {"input_tokens": 40, "cache_read_input_tokens": 1800, "output_tokens": 150}, None),
        # a smaller non-zero cumulative count is inconsistent: the larger is kept, and said
        ({"input_tokens": 5, "output_tokens": 150},
         {"input_tokens": 12, "cache_read_input_tokens": 1800, "output_tokens": 150},
         "usage: message_delta input_tokens 5 < message_start input_tokens 12: kept 12"),
    ],
)
def test_a_later_count_never_lowers_an_earlier_one(delta, usage, problem):
    call, problems = call_of("messages", {"stream": True}, anthropic_stream(START, delta))
    assert call.usage == usage
    assert call.normalized.input_tokens == usage["input_tokens"] + 1800
    assert call.normalized.output_tokens == 150
    assert problems == ([problem] if problem else [])


# --- 2. a placeholder usage taken as the answer (OpenAI chat, streamed) --------------------

CHAT_REQUEST = {"model": "gpt-x", "stream": True, "stream_options": {"include_usage": True}}
ZEROS = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
REAL = {"prompt_tokens": 900, "completion_tokens": 40, "total_tokens": 940}


def chunk(content: str | None = "x", finish: str | None = None, usage: dict | None = None, choices=True) -> dict:
    obj: dict = {"object": "chat.completion.chunk", "model": "gpt-x", "usage": usage}
    obj["choices"] = [{"index": 0, "delta": {"content": content}, "finish_reason": finish}] if choices else []
    return obj


def test_issue_example_an_all_zero_first_chunk_is_not_the_usage():
    body = sse(chunk(usage=ZEROS), chunk(), chunk(finish="stop"), done=True)
    call, problems = call_of("chat.completions", CHAT_REQUEST, body)
    assert call.usage is None and call.normalized is None
    assert call.usage_missing_reason == (
        "no terminal usage chunk (usage only on an earlier chunk beside choices: a placeholder)")
    assert problems == ["usage on chunk #0 beside choices is not the terminal usage chunk: ignored as a placeholder"]
    assert call.stop_reason == "stop"


def test_a_placeholder_then_the_real_usage_chunk_counts_the_real_one():
    body = sse(chunk(usage=ZEROS), chunk(finish="stop"), chunk(usage=REAL, choices=False), done=True)
    call, _ = call_of("chat.completions", CHAT_REQUEST, body)
    assert call.usage == REAL and call.normalized.total_tokens == 940
    assert call.normalized.sources == {"usage": "terminal usage chunk #2 (choices empty)"}
    assert call.normalized.rules["input_tokens"] == STREAM_RULES["chat.completions"] + "+" + \
        FIGURE_RULES["chat.completions"]["input_tokens"]


def test_usage_on_the_last_chunk_beside_its_choices_counts():
    body = sse(chunk(), chunk(finish="stop", usage=REAL), done=True)
    call, problems = call_of("chat.completions", CHAT_REQUEST, body)
    assert call.usage == REAL and call.normalized.input_tokens == 900
    assert call.normalized.sources == {"usage": "last chunk #1 (usage beside choices)"}
    assert problems == []


def test_a_placeholder_in_a_cut_stream_is_still_not_usage():
    body = sse(chunk(usage=ZEROS), chunk())
    call, _ = call_of("chat.completions", CHAT_REQUEST, body)
    assert call.usage is None and call.usage_missing_reason == "stream cut before [DONE]"


# --- 6. a body whose label lies (proxy) ---------------------------------------------------

FP = keyed_fingerprint(b"k")
T = dict(ts_ns=1_000, mono_ns=10)
BODY = json.dumps({"model": "claude-x", "stop_reason": "end_turn",
                   "usage": {"input_tokens": 7, "output_tokens": 3}}).encode()


def exchange(body: bytes, *, encoding: str, ctype: str = "application/json", split: int = 5) -> list:
    frames = [
        Request(id="f", method="POST", scheme="https", host="api.anthropic.com", port=443, path="/v1/messages",
                headers=[], **T),
        RequestBody(id="f", body=b'{"model": "claude-x"}', **T),
        ResponseStart(id="f", status=200, headers=[("content-type", ctype), ("content-encoding", encoding)], **T),
    ]
    frames += [Chunk(id="f", data=body[i:i + split]) for i in range(0, len(body), split)]
    return frames + [ResponseEnd(id="f", **T)]


def assemble(frames) -> list:
    assembler = ExchangeAssembler(FP)
    for frame in frames:
        assembler.feed(frame)
    out = []
    while (item := assembler.next_event()) is not NEED_DATA:
        out.append(item)
    return out


@pytest.mark.parametrize("split", [1, 5, len(BODY)])
def test_issue_example_gzip_label_on_plain_json_reads_the_usage_and_flags_the_lie(split):
    out = assemble(exchange(BODY, encoding="gzip", split=split))
    call = next(o.event for o in out if isinstance(o.event, LlmCall))
    assert call.usage == {"input_tokens": 7, "output_tokens": 3}
    assert call.normalized.total_tokens == 10 and call.usage_missing_reason is None
    assert call.label_mismatch.startswith("content-encoding could not be decoded: ")
    assert call.label_mismatch.endswith("; the raw bytes were read as application/json")
    raws = [o.event.line for o in out if isinstance(o.event, WitnessRaw)]
    assert any("response body: content-encoding could not be decoded" in r for r in raws)
    assert any("llm: label mismatch: content-encoding could not be decoded" in r for r in raws)
    blob = next(o.event for o in out if isinstance(o.event, BlobStored) and "response" in o.event.role)
    assert blob.role == "http.response_body.encoded"


def test_a_lying_label_on_a_plain_event_stream_reads_the_stream():
    body = sse({"type": "message_start", "message": {"model": "claude-x", "usage": {"input_tokens": 9, "output_tokens": 1}}},
               {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 4}},
               {"type": "message_stop"})
    out = assemble(exchange(body, encoding="br", ctype=SSE, split=11))
    call = next(o.event for o in out if isinstance(o.event, LlmCall))
    assert (call.normalized.input_tokens, call.normalized.output_tokens) == (9, 4)
    assert call.label_mismatch is not None and call.label_mismatch.endswith("read as text/event-stream")


def test_an_unknown_coding_is_read_raw_and_flagged():
    call = next(o.event for o in assemble(exchange(BODY, encoding="x-custom")) if isinstance(o.event, LlmCall))
    assert call.usage is not None
    assert call.label_mismatch == ("unsupported content-encoding x-custom; the raw bytes were read as"
                                   " application/json")


def test_a_lying_label_on_garbage_names_the_decoder_first():
    call = next(o.event for o in assemble(exchange(b"not json at all", encoding="gzip"))
                if isinstance(o.event, LlmCall))
    assert call.usage is None and call.label_mismatch is None
    assert call.usage_missing_reason.startswith("response body: content-encoding could not be decoded: ")
    assert "; the raw bytes, read as application/json: malformed JSON in response body" in call.usage_missing_reason


def test_a_body_that_stops_decoding_midway_is_not_read_raw():
    good = gzip.compress(BODY)
    body = good[:len(good) // 2] + b"\x00garbage" * 4
    call = next(o.event for o in assemble(exchange(body, encoding="gzip", split=len(good) // 2))
                if isinstance(o.event, LlmCall))
    assert call.usage is None and call.label_mismatch is None
    assert call.usage_missing_reason == ("response body: content-encoded body ended before its encoded"
                                         " stream did (after part of it decoded)")


def test_a_truncated_body_blob_says_so_in_its_role():
    assembler = ExchangeAssembler(FP, max_body_bytes=8)
    for frame in exchange(BODY, encoding="identity"):
        assembler.feed(frame)
    outs = []
    while (item := assembler.next_event()) is not NEED_DATA:
        outs.append(item)
    blob = next(o.event for o in outs if isinstance(o.event, BlobStored) and "response" in o.event.role)
    assert blob.role == "http.response_body.truncated" and blob.size_bytes == 8
    ex = next(o.event for o in outs if isinstance(o.event, HttpExchange))
    assert ex.response_body_sha256 == blob.sha256
