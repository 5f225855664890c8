"""Provider-side tools in model responses: executions the chamber never sees, counted on
``llm.call.server_tools`` (whole, byte at a time, at any split, and cut)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.llm import LlmCallBuilder
from tests.collectors.test_llm import FIXTURES, JSON, SSE, fx

STREAM = fx("anthropic_web_search_stream.sse")
REQUEST = json.dumps({"model": "claude-sonnet-4-5", "stream": True, "max_tokens": 100,
                      "tools": [{"type": "web_search_20250305", "name": "web_search"}]}).encode()


def call(endpoint, request, chunks, ctype, cut=False):
    builder = LlmCallBuilder("anthropic" if endpoint == "messages" else "openai", endpoint)
    builder.request(request)
    builder.response_start(200, [("Content-Type", ctype)])
    for chunk in chunks:
        builder.response_data(chunk)
    return builder.finish(cut=cut)


def test_anthropic_web_search_streamed_whole_and_byte_at_a_time():
    for chunks in ([STREAM], [STREAM[i:i + 1] for i in range(len(STREAM))], [STREAM + b"event: junk\ndata: {}\n\n"]):
        result = call("messages", REQUEST, chunks, SSE)
        assert result.server_tools == {"web_search": 1}
        assert result.usage["server_tool_use"] == {"web_search_requests": 1}  # usage kept as sent


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=8))
def test_anthropic_web_search_at_any_split(cuts):
    points = sorted(set(cuts))
    chunks = [STREAM[a:b] for a, b in zip([0, *points], [*points, len(STREAM)])]
    assert call("messages", REQUEST, chunks, SSE).server_tools == {"web_search": 1}


def test_a_cut_stream_still_counts_the_search_it_saw_and_usage_counts_stand_alone():
    cut = STREAM[:STREAM.index(b"event: content_block_stop")]
    result = call("messages", REQUEST, [cut], SSE, cut=True)
    assert result.server_tools == {"web_search": 1} and result.usage is None
    # a non-streamed body whose usage counts more requests than blocks shown: the higher count
    body = json.dumps({"model": "claude-sonnet-4-5", "type": "message", "stop_reason": "end_turn",
                       "content": [{"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
                                   {"type": "text", "text": "x"}],
                       "usage": {"input_tokens": 10, "output_tokens": 5,
                                 "server_tool_use": {"web_search_requests": 3, "web_fetch_requests": 0}}}).encode()
    assert call("messages", REQUEST.replace(b'"stream": true', b'"stream": false'), [body], JSON).server_tools == {
        "web_search": 3}


def test_openai_responses_web_search_call_items_body_and_stream():
    request = json.dumps({"model": "gpt-5", "tools": [{"type": "web_search"}], "input": "weather?"}).encode()
    body = (FIXTURES / "openai_responses_web_search.json").read_bytes()
    assert call("responses", request, [body], JSON).server_tools == {"web_search": 1}
    response = json.loads(body)
    item = response["output"][0]
    events = [("response.output_item.added", {"type": "response.output_item.added", "output_index": 0,
                                              "item": {**item, "status": "in_progress"}}),
              ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}),
              ("response.completed", {"type": "response.completed", "response": response})]
    sse = b"".join(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events)
    streamed = request.replace(b'"input"', b'"stream": true, "input"')
    assert call("responses", streamed, [sse[i:i + 1] for i in range(len(sse))], SSE).server_tools == {"web_search": 1}
    assert call("responses", streamed, [sse[:sse.index(b"event: response.completed")]], SSE,
                cut=True).server_tools == {"web_search": 1}
    plain = json.dumps({**response, "output": response["output"][1:]}).encode()
    assert call("responses", request, [plain], JSON).server_tools == {}
