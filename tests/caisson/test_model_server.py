"""The scripted model endpoint: script schema, per-API rendering, the player, the server.

Every reply is read back with `collectors.llm.LlmCallBuilder` (the proxy witness's own
parser), so the endpoint and the witness agree on the providers' shapes, and token
accounting is checked against the script's known truth.
"""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import h11
import msgspec
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from caisson.errors import ScenarioError
from caisson.model.script import load_model_script, parse_model_script
from caisson.model.server import Reply, ScriptPlayer, serve_model, server_ssl_context
from collectors.llm import LlmCallBuilder
from collectors.sse import NEED_DATA, SseParser

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "scenarios" / "model" / "grep_then_answer.toml"
ENDPOINTS = {"messages": "/v1/messages", "chat.completions": "/v1/chat/completions",
             "responses": "/v1/responses"}

ONE_TURN = b"""
[[turns]]
text = "It is in src/app.py."
tool_calls = [{ name = "Bash", arguments = { command = "grep -rn 'def answer' ." } }]
model = "served-model-1"
usage = { input = 900, cache_read = 2000, cache_write = 1000, output = 50, reasoning = 20 }
"""


def player(text: bytes = ONE_TURN, log: list[str] | None = None) -> ScriptPlayer:
    lines = log if log is not None else []
    return ScriptPlayer(parse_model_script(text, "test.toml"), log=lines.append)


def request(endpoint: str, stream: bool = False, include_usage: bool = False, *,
            user: str = "Where is answer defined?", tool_result: str | None = None,
            model: str = "asked-model") -> dict[str, Any]:
    """A minimal request in the endpoint's shape; ``tool_result`` appends one tool round."""
    req: dict[str, Any] = {"model": model}
    if stream:
        req["stream"] = True
    if include_usage:
        req["stream_options"] = {"include_usage": True}
    if endpoint == "messages":
        msgs: list[Any] = [{"role": "user", "content": user}]
        if tool_result is not None:
            msgs += [{"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash",
                                                        "input": {"command": "grep"}}]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                                   "content": tool_result}]}]
        req.update(max_tokens=1024, messages=msgs)
    elif endpoint == "chat.completions":
        msgs = [{"role": "user", "content": user}]
        if tool_result is not None:
            msgs += [{"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "Bash", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": tool_result}]
        req["messages"] = msgs
    else:
        items: list[Any] = [{"role": "user", "content": [{"type": "input_text", "text": user}]}]
        if tool_result is not None:
            items += [{"type": "function_call", "call_id": "c1", "name": "Bash", "arguments": "{}"},
                      {"type": "function_call_output", "call_id": "c1", "output": tool_result}]
        req["input"] = items
    return req


def parse_back(endpoint: str, req: dict[str, Any], reply: Reply, bytewise: bool = False):
    """The reply as the proxy witness would record it."""
    provider = "anthropic" if endpoint == "messages" else "openai"
    builder = LlmCallBuilder(provider, endpoint)
    builder.request(msgspec.json.encode(req))
    builder.response_start(reply.status, reply.headers)
    payload = reply.payload()
    for i in range(len(payload)) if bytewise else [None]:
        builder.response_data(payload if i is None else payload[i : i + 1])
    return builder.finish(), builder.problems


def sse_objects(reply: Reply) -> list[dict[str, Any]]:
    parser = SseParser()
    parser.feed(reply.payload())
    out = []
    while (ev := parser.next_event()) is not NEED_DATA:
        out.append({"[DONE]": True} if ev.data == "[DONE]" else json.loads(ev.data))
    return out


# --- usage semantics ------------------------------------------------------------------


@pytest.mark.parametrize("endpoint", list(ENDPOINTS))
@pytest.mark.parametrize("stream", [False, True])
def test_usage_parses_back_with_the_scripted_truth(endpoint: str, stream: bool) -> None:
    req = request(endpoint, stream, include_usage=True)
    reply = player().respond(endpoint, req, created=1_700_000_000)
    assert reply.status == 200
    call, problems = parse_back(endpoint, req, reply, bytewise=stream)
    assert problems == [] and call.usage_missing_reason is None
    assert call.served_model == "served-model-1" and call.requested_model == "asked-model"
    assert call.streamed is stream
    n = call.normalized
    assert (n.input_tokens, n.output_tokens, n.total_tokens) == (3900, 50, 3950)
    assert n.cache_read_tokens == 2000
    if endpoint == "messages":
        assert call.stop_reason == "tool_use"
        assert (n.cache_write_tokens, n.reasoning_tokens) == (1000, None)
        assert {k: call.usage[k] for k in ("input_tokens", "cache_creation_input_tokens",
                                           "cache_read_input_tokens", "output_tokens")} == {
            "input_tokens": 900, "cache_creation_input_tokens": 1000,
            "cache_read_input_tokens": 2000, "output_tokens": 50}
    else:
        assert (n.cache_write_tokens, n.reasoning_tokens) == (None, 20)
        key = "prompt" if endpoint == "chat.completions" else "input"
        assert call.usage[f"{key}_tokens"] == 3900  # input + cache_read + cache_write
        assert call.stop_reason == ("tool_calls" if key == "prompt" else "completed")
        assert "inconsistent" not in n.rule


def test_streamed_anthropic_output_tokens_are_cumulative_in_message_delta() -> None:
    objs = sse_objects(player().respond("messages", request("messages", True)))
    assert [o["type"] for o in objs][:2] == ["message_start", "ping"]
    assert objs[0]["message"]["usage"]["output_tokens"] == 1  # provisional, as the API sends
    deltas = [o for o in objs if o["type"] == "message_delta"]
    assert len(deltas) == 1 and deltas[0]["usage"]["output_tokens"] == 50
    assert objs[-1] == {"type": "message_stop"}


def test_chat_stream_without_include_usage_has_no_usage_chunk() -> None:
    req = request("chat.completions", True)
    reply = player().respond("chat.completions", req)
    objs = sse_objects(reply)
    assert objs[-1] == {"[DONE]": True} and all(o.get("choices") for o in objs[:-1])
    assert all("usage" not in o for o in objs[:-1])
    call, _ = parse_back("chat.completions", req, reply)
    assert call.usage is None and call.usage_missing_reason == "stream without include_usage"


# --- content and tool calls -----------------------------------------------------------


def test_anthropic_tool_use_streamed_and_not() -> None:
    body = json.loads(player().respond("messages", request("messages")).body)
    assert body["content"][0] == {"type": "text", "text": "It is in src/app.py."}
    tool = body["content"][1]
    assert tool["type"] == "tool_use" and tool["name"] == "Bash" and tool["id"].startswith("toolu_")
    assert tool["input"] == {"command": "grep -rn 'def answer' ."}
    objs = sse_objects(player().respond("messages", request("messages", True)))
    starts = [o["content_block"] for o in objs if o["type"] == "content_block_start"]
    assert starts[1] == {"type": "tool_use", "id": tool["id"], "name": "Bash", "input": {}}
    text = "".join(o["delta"]["text"] for o in objs if o.get("delta", {}).get("type") == "text_delta")
    partial = "".join(o["delta"]["partial_json"] for o in objs
                      if o.get("delta", {}).get("type") == "input_json_delta")
    assert text == "It is in src/app.py." and json.loads(partial) == tool["input"]
    assert sum(o["type"] == "content_block_stop" for o in objs) == 2


def test_chat_tool_calls_streamed_and_not() -> None:
    body = json.loads(player().respond("chat.completions", request("chat.completions")).body)
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and body["object"] == "chat.completion"
    call = choice["message"]["tool_calls"][0]
    assert call["type"] == "function" and call["function"]["name"] == "Bash"
    assert isinstance(call["function"]["arguments"], str)
    assert json.loads(call["function"]["arguments"]) == {"command": "grep -rn 'def answer' ."}
    objs = sse_objects(player().respond("chat.completions", request("chat.completions", True)))
    deltas = [o["choices"][0]["delta"] for o in objs[:-1]]
    calls = [tc for d in deltas for tc in d.get("tool_calls", [])]
    assert calls[0]["id"] == call["id"] and calls[0]["function"]["name"] == "Bash"
    assert "".join(tc["function"]["arguments"] for tc in calls) == call["function"]["arguments"]
    assert "".join(d.get("content") or "" for d in deltas) == "It is in src/app.py."
    assert objs[-2]["choices"][0]["finish_reason"] == "tool_calls"


def test_responses_function_call_streamed_and_not() -> None:
    body = json.loads(player().respond("responses", request("responses")).body)
    message, fc = body["output"]
    assert message["content"][0]["text"] == "It is in src/app.py."
    assert fc["type"] == "function_call" and fc["name"] == "Bash" and fc["call_id"].startswith("call_")
    objs = sse_objects(player().respond("responses", request("responses", True)))
    kinds = [o["type"] for o in objs]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds[-1] == "response.completed" and [o["sequence_number"] for o in objs] == list(range(len(objs)))
    args = "".join(o["delta"] for o in objs if o["type"] == "response.function_call_arguments.delta")
    assert args == fc["arguments"]
    text = "".join(o["delta"] for o in objs if o["type"] == "response.output_text.delta")
    assert text == "It is in src/app.py."
    assert objs[-1]["response"]["output"] == body["output"]


def test_max_tokens_maps_to_length_and_incomplete() -> None:
    script = b'[[turns]]\ntext = "cut"\nstop_reason = "max_tokens"\nusage = { output = 64 }\n'
    chat = json.loads(player(script).respond("chat.completions", request("chat.completions")).body)
    assert chat["choices"][0]["finish_reason"] == "length"
    req = request("responses", True)
    call, _ = parse_back("responses", req, player(script).respond("responses", req))
    assert call.stop_reason == "incomplete:max_output_tokens" and call.normalized.output_tokens == 64


# --- turns, matches and unexpected requests ---------------------------------------------


def test_example_script_plays_grep_then_answer() -> None:
    log: list[str] = []
    p = ScriptPlayer(load_model_script(EXAMPLE), log=log.append)
    first = json.loads(p.respond("messages", request("messages", user="Where is `answer` defined?")).body)
    assert first["stop_reason"] == "tool_use"
    assert first["content"][-1]["input"] == {"command": 'grep -rn "def answer" .'}
    side = p.respond("messages", request("messages", model="claude-haiku-4-5"))
    assert side.status == 200 and p.next_turn["default"] == 1  # background: no turn consumed
    second = p.respond("messages", request("messages", tool_result="./src/app.py:1:def answer():"))
    assert json.loads(second.body)["content"] == [
        {"type": "text", "text": "`answer` is defined in src/app.py:1"}]
    assert p.finished and log == [] and [s.turn for s in p.served] == [0, -1, 1]


def test_match_failure_and_exhaustion_are_refused_in_the_provider_shape() -> None:
    log: list[str] = []
    p = ScriptPlayer(load_model_script(EXAMPLE), log=log.append)
    p.respond("messages", request("messages"))
    wrong = p.respond("messages", request("messages", tool_result="no such thing"))
    assert wrong.status == 400 and p.next_turn["default"] == 1
    err = json.loads(wrong.body)
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    assert "turn 1 does not match" in err["error"]["message"]
    call, _ = parse_back("messages", request("messages"), wrong)
    assert call.usage is None and "invalid_request_error" in call.usage_missing_reason
    p.respond("chat.completions", request("chat.completions", tool_result="def answer"))
    over = p.respond("chat.completions", request("chat.completions"))
    assert over.status == 400 and "script exhausted" in json.loads(over.body)["error"]["message"]
    assert [u.turn for u in p.unexpected] == [1, 2] and len(log) == 2
    assert "unexpected POST /v1/chat/completions [default]" in log[1]


def test_handle_routes_models_count_tokens_and_unknown_paths() -> None:
    p = player()
    models = json.loads(p.handle("GET", "/v1/models", {}, b"").body)
    assert [m["id"] for m in models["data"]] == ["served-model-1"] and models["object"] == "list"
    one = p.handle("GET", "/v1/models/served-model-1", {"anthropic-version": "2023-06-01"}, b"")
    assert json.loads(one.body)["type"] == "model"
    count = p.handle("POST", "/v1/messages/count_tokens", {}, b"x" * 41)
    assert json.loads(count.body) == {"input_tokens": 11}
    missing = p.handle("POST", "/v1/embeddings", {}, b"{}")
    assert missing.status == 404 and "error" in json.loads(missing.body)
    bad = p.handle("POST", "/v1/messages?beta=true", {}, b"{not json")
    assert bad.status == 400 and json.loads(bad.body)["type"] == "error"
    ok = p.handle("POST", "/api/v1/chat/completions", {}, msgspec.json.encode(request("chat.completions")))
    assert ok.status == 200 and len(p.unexpected) == 2


def test_conversations_have_their_own_turn_pointers() -> None:
    script = b"""
[[turns]]
text = "main"
[conversations.sub]
turns = [{ text = "sub 1" }, { text = "sub 2" }]
"""
    p = player(script)
    body = msgspec.json.encode(request("messages"))
    texts = [json.loads(p.handle("POST", "/v1/messages", h, body).body)["content"][0]["text"]
             for h in ({"X-Caisson-Conversation": "sub"}, {}, {"x-caisson-conversation": "sub"})]
    assert texts == ["sub 1", "main", "sub 2"] and p.finished
    unknown = p.handle("POST", "/v1/messages", {"x-caisson-conversation": "nope"}, body)
    assert unknown.status == 400 and p.unexpected[-1].reason == "unknown conversation 'nope'"


# --- scripted failures -------------------------------------------------------------------

OVERLOADED = b'[[turns]]\nerror = { status = 529, type = "overloaded_error", message = "Overloaded" }\n'


@pytest.mark.parametrize("endpoint", list(ENDPOINTS))
@pytest.mark.parametrize("stream", [False, True])
def test_an_http_error_is_the_providers_status_and_body_streamed_or_not(endpoint: str, stream: bool) -> None:
    """The status comes before any stream, so a streamed request gets the same JSON error."""
    req = request(endpoint, stream)
    reply = player(OVERLOADED).respond(endpoint, req)
    assert reply.status == 529 and reply.events is None and not reply.cut
    if endpoint == "messages":  # Anthropic "Errors": type error, error {type, message}, request_id
        assert reply.headers == (("content-type", "application/json"), ("request-id", "req_caisson000000"))
        assert reply.body == (b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},'
                              b'"request_id":"req_caisson000000"}')
    else:  # OpenAI "Error codes": error {message, type, param, code}
        assert reply.headers == (("content-type", "application/json"), ("x-request-id", "req_caisson000000"))
        assert reply.body == b'{"error":{"message":"Overloaded","type":"overloaded_error","param":null,"code":null}}'
    call, _ = parse_back(endpoint, req, reply)
    assert call.failed == "error status 529: overloaded_error: Overloaded" and call.usage is None


def test_retry_after_should_retry_code_and_param_are_sent_as_given() -> None:
    script = b'''[[turns]]
error = { status = 429, type = "requests", code = "rate_limit_exceeded", param = "model", retry_after = 7, should_retry = true, message = "Rate limit reached for gpt-5" }
'''
    reply = player(script).respond("responses", request("responses", True))
    assert reply.status == 429
    assert reply.headers == (("content-type", "application/json"), ("x-request-id", "req_caisson000000"),
                             ("retry-after", "7"), ("x-should-retry", "true"))
    assert json.loads(reply.body) == {"error": {"message": "Rate limit reached for gpt-5", "type": "requests",
                                                "param": "model", "code": "rate_limit_exceeded"}}
    refusing = player(b'[[turns]]\nerror = { status = 401, type = "authentication_error", should_retry = false }\n')
    reply = refusing.respond("messages", request("messages"))
    assert (reply.status, reply.headers[-1]) == (401, ("x-should-retry", "false"))


def _midstream(kind: str, code: str = "") -> bytes:
    match = 'match = { endpoint = "responses" }\n' if kind == "response.failed" else ""
    code_field = f', code = "{code}"' if code else ""
    return (f'[[turns]]\n{match}error = {{ status = 500, type = "api_error", message = "Internal server error",'
            f' midstream = "{kind}"{code_field} }}\n').encode()


@pytest.mark.parametrize(("endpoint", "kind", "kinds", "failed"), [
    ("messages", "error", ["message_start", "ping", "error"], "stream error event #2: api_error: Internal server error"),
    ("messages", "cut", ["message_start", "ping"], "stream cut before message_stop"),
    ("chat.completions", "error", ["chat.completion.chunk", "error"],
     "stream error chunk #1: api_error: Internal server error"),
    ("chat.completions", "cut", ["chat.completion.chunk"], "stream cut before [DONE]"),
    ("responses", "error", ["response.created", "response.in_progress", "error"],
     "stream error event #2: server_error: Internal server error"),
    ("responses", "response.failed", ["response.created", "response.in_progress", "response.failed"],
     "response failed:server_error"),
    ("responses", "cut", ["response.created", "response.in_progress"],
     "stream cut before response.completed/incomplete/failed"),
])
def test_a_midstream_failure_opens_a_200_stream_that_then_fails(endpoint, kind, kinds, failed) -> None:
    req = request(endpoint, True)
    reply = player(_midstream(kind, "server_error" if endpoint == "responses" else "")).respond(endpoint, req)
    assert reply.status == 200 and reply.cut is (kind == "cut")
    assert reply.headers[0] == ("content-type", "text/event-stream; charset=utf-8")
    objs = sse_objects(reply)
    assert [o.get("type", o.get("object", "error" if "error" in o else None)) for o in objs] == kinds
    if endpoint == "messages" and kind == "error":  # "Streaming Messages", error events
        assert reply.events[-1] == (b'event: error\ndata: {"type":"error","error":{"type":"api_error",'
                                    b'"message":"Internal server error"}}\n\n')
    if endpoint == "chat.completions" and kind == "error":
        assert reply.events[-1] == (b'data: {"error":{"message":"Internal server error","type":"api_error",'
                                    b'"param":null,"code":null}}\n\n')
    if endpoint == "responses":
        assert [o["sequence_number"] for o in objs] == list(range(len(objs)))
        assert objs[0]["response"]["status"] == "in_progress" and objs[0]["response"]["model"] == "asked-model"
        if kind == "error":
            assert objs[-1] == {"type": "error", "sequence_number": 2, "code": "server_error",
                                "message": "Internal server error", "param": None}
        if kind == "response.failed":
            last = objs[-1]["response"]
            assert (last["status"], last["error"], last["usage"], last["output"]) == (
                "failed", {"code": "server_error", "message": "Internal server error"}, None, [])
    provider = "anthropic" if endpoint == "messages" else "openai"
    builder = LlmCallBuilder(provider, endpoint)
    builder.request(msgspec.json.encode(req))
    builder.response_start(reply.status, reply.headers)
    builder.response_data(reply.payload())
    call = builder.finish(cut=reply.cut)
    assert call.failed == failed and call.usage is None


@pytest.mark.parametrize("endpoint", list(ENDPOINTS))
def test_a_midstream_failure_of_a_request_that_does_not_stream_is_the_http_error(endpoint: str) -> None:
    reply = player(_midstream("error")).respond(endpoint, request(endpoint))
    assert reply.status == 500 and reply.events is None
    assert "Internal server error" in json.loads(reply.body)[("error")]["message"]


def test_the_first_requests_fail_then_the_turn_plays_so_a_retry_succeeds() -> None:
    script = b'''
[[turns]]
match = { last_user_contains = "answer" }
error = { status = 529, type = "overloaded_error", times = 2 }
text = "first"
[[turns]]
error = { status = 400, type = "invalid_request_error", times = 2 }
[[turns]]
text = "last"
'''
    p = player(script)
    replies = [p.respond("messages", request("messages")) for _ in range(6)]
    assert [r.status for r in replies] == [529, 529, 200, 400, 400, 200]
    assert [json.loads(r.body)["content"][0]["text"] for r in replies if r.status == 200] == ["first", "last"]
    assert [(s.turn, s.failed) for s in p.served] == [(0, True), (0, True), (0, False), (1, True), (1, True),
                                                      (2, False)]
    assert p.finished and p.unexpected == []
    again = player(script)
    wrong = again.respond("messages", request("messages", user="something else"))  # the retry must match too
    assert wrong.status == 400 and again.unexpected[0].turn == 0 and again.failures["default"] == 0
    again.respond("messages", request("messages"))
    assert again.next_turn["default"] == 0 and again.failures["default"] == 1  # one failure played, not done


def test_a_background_error_answers_every_request_it_matches() -> None:
    script = b'''
[[turns]]
text = "main"
[[background]]
match = { model_contains = "haiku" }
error = { status = 529, type = "overloaded_error" }
'''
    p = player(script)
    side = [p.respond("messages", request("messages", model="claude-haiku-4-5")).status for _ in range(3)]
    assert side == [529] * 3 and p.next_turn["default"] == 0
    assert p.respond("messages", request("messages")).status == 200 and p.finished


# --- script validation ------------------------------------------------------------------


@pytest.mark.parametrize(("text", "field", "words"), [
    (b'[[turns]]\ntext = "x"\nusage = { input = "many" }\n', "$.turns[0].usage.input", "int"),
    (b'[[turns]]\ntext = "x"\nusage = { output = 1, reasoning = 2 }\n', "$.turns[0].usage.reasoning",
     "exceeds"),
    (b'[[turns]]\ntext = "x"\nusage = { input = -1 }\n', "$.turns[0].usage.input", ">= 0"),
    (b'[[turns]]\ntxt = "x"\n', "$.turns[0].txt", "unknown field"),
    (b'[[turns]]\nstop_reason = "end_turn"\n', "$.turns[0]", "needs text"),
    (b'[[turns]]\ntext = "x"\nstop_reason = "stop"\n', "$.turns[0].stop_reason", "end_turn"),
    (b'[[turns]]\ntool_calls = [{ name = "Bash", arguments = "[1]" }]\n',
     "$.turns[0].tool_calls[0].arguments", "object"),
    (b'[[turns]]\ntext = "x"\nmatch = {}\n', "$.turns[0].match", "empty match"),
    (b'[[turns]]\ntext = "x"\n[[background]]\ntext = "y"\n', "$.background[0].match", "needs a match"),
    (b'[conversations.a]\nturns = [{ text = "x", tool_calls = [{ name = "" }] }]\n',
     "$.conversations.a.turns[0].tool_calls[0].name", "length"),
    (b'[[turns]]\nerror = { times = 0 }\n', "$.turns[0].error.times", ">= 1"),
    (b'[[turns]]\nerror = { status = 200 }\n', "$.turns[0].error.status", ">= 400"),
    (b'[[turns]]\nerror = { retry_after = 1.5 }\n', "$.turns[0].error.retry_after", "int"),
    (b'[[turns]]\nerror = { midstream = "late" }\n', "$.turns[0].error.midstream",
     "expected one of: error, response.failed, cut"),
    (b'[[turns]]\nmatch = { endpoint = "responses" }\nerror = { midstream = "response.failed" }\n',
     "$.turns[0].error.code", "needs a code"),
    (b'[[turns]]\nerror = { midstream = "response.failed", code = "server_error" }\n',
     "$.turns[0].error.midstream", 'endpoint = "responses"'),
    (b'[[turns]]\ntext = "x"\n[[background]]\nmatch = { model_contains = "haiku" }\ntext = "y"\nerror = {}\n',
     "$.background[0].error", "an error or a response"),
    (b'[[turns]]\ntext = "x"\n[[background]]\nmatch = { model_contains = "haiku" }\nerror = { times = 2 }\n',
     "$.background[0].error", "no times"),
])
def test_validation_errors_name_the_file_and_field(text: bytes, field: str, words: str) -> None:
    with pytest.raises(ScenarioError) as info:
        parse_model_script(text, "bad.toml")
    assert info.value.field == field and info.value.path == "bad.toml"
    assert str(info.value).startswith(f"bad.toml: {field}: ") and words in str(info.value)


def test_toml_syntax_and_empty_script_errors() -> None:
    with pytest.raises(ScenarioError, match=r"bad.toml: TOML syntax error: line 1"):
        parse_model_script(b"[[turns]\n", "bad.toml")
    with pytest.raises(ScenarioError, match="no turns"):
        parse_model_script(b'name = "x"\n', "bad.toml")


# --- the trio server ----------------------------------------------------------------------


async def _exchange(stream: trio.abc.Stream, conn: h11.Connection, method: str, target: str,
                    body: bytes, chunked: bool = False) -> tuple[int, dict[bytes, bytes], bytes]:
    headers = [("host", "localhost"), ("content-type", "application/json")]
    headers.append(("transfer-encoding", "chunked") if chunked else ("content-length", str(len(body))))
    await stream.send_all(conn.send(h11.Request(method=method, target=target, headers=headers)))
    for part in [body[:7], body[7:]] if chunked else [body]:
        if part:
            await stream.send_all(conn.send(h11.Data(data=part)))
    await stream.send_all(conn.send(h11.EndOfMessage()))
    status, resp_headers, data = 0, {}, bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await stream.receive_some(65536))
        elif isinstance(event, h11.Response):
            status, resp_headers = event.status_code, dict(event.headers)
        elif isinstance(event, h11.Data):
            data += event.data
        elif isinstance(event, h11.EndOfMessage):
            conn.start_next_cycle()
            return status, resp_headers, bytes(data)


def test_server_keep_alive_two_turns_streamed_and_chunked_request() -> None:
    p = ScriptPlayer(load_model_script(EXAMPLE), log=lambda line: None)

    async def main() -> list[tuple[int, dict[bytes, bytes], bytes]]:
        async with trio.open_nursery() as nursery:
            host, port = await nursery.start(serve_model, p, "127.0.0.1", 0)
            stream = await trio.open_tcp_stream(host, port)
            conn = h11.Connection(h11.CLIENT)
            first = msgspec.json.encode(request("messages"))
            second = msgspec.json.encode(request("messages", True, tool_result="1:def answer():"))
            out = [await _exchange(stream, conn, "POST", "/v1/messages", first),
                   await _exchange(stream, conn, "POST", "/v1/messages", second, chunked=True),
                   await _exchange(stream, conn, "POST", "/v1/messages", first)]
            await stream.aclose()
            nursery.cancel_scope.cancel()
        return out

    (s1, h1, b1), (s2, h2, b2), (s3, _, b3) = trio.run(main)
    assert s1 == 200 and h1[b"content-length"] == str(len(b1)).encode()
    assert json.loads(b1)["stop_reason"] == "tool_use"
    assert s2 == 200 and h2[b"transfer-encoding"] == b"chunked"
    assert h2[b"content-type"].startswith(b"text/event-stream")
    call, problems = parse_back("messages", request("messages", True),
                                Reply(status=s2, headers=tuple((k.decode(), v.decode()) for k, v in h2.items()),
                                      events=(b2,)))
    assert problems == [] and call.normalized.input_tokens == 60 + 2948
    assert s3 == 400 and "script exhausted" in json.loads(b3)["error"]["message"]
    assert p.finished and len(p.unexpected) == 1


def test_server_cuts_a_cut_stream_mid_body_and_serves_the_next_connection() -> None:
    """A cut stream ends with no last chunk: the client sees the connection close mid-body
    (as from a provider that dropped it), not a stream that ended cleanly."""
    script = b'''
[[turns]]
error = { status = 529, type = "overloaded_error", midstream = "cut", retry_after = 3 }
text = "after the cut"
'''
    p = player(script)

    async def main() -> tuple[bytes, str, tuple[int, dict[bytes, bytes], bytes]]:
        async with trio.open_nursery() as nursery:
            host, port = await nursery.start(serve_model, p, "127.0.0.1", 0)
            stream = await trio.open_tcp_stream(host, port)
            conn = h11.Connection(h11.CLIENT)
            body = msgspec.json.encode(request("messages", True))
            await stream.send_all(conn.send(h11.Request(method="POST", target="/v1/messages", headers=[
                ("host", "localhost"), ("content-length", str(len(body)))])))
            await stream.send_all(conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage()))
            raw = bytearray()
            while chunk := await stream.receive_some(65536):
                raw += chunk
            conn.receive_data(bytes(raw))
            conn.receive_data(b"")  # EOF
            try:
                while conn.next_event() is not h11.NEED_DATA:
                    pass
                problem = ""
            except h11.RemoteProtocolError as e:
                problem = str(e)
            again = await trio.open_tcp_stream(host, port)
            result = await _exchange(again, h11.Connection(h11.CLIENT), "POST", "/v1/messages",
                                     msgspec.json.encode(request("messages")))
            await again.aclose()
            nursery.cancel_scope.cancel()
        return bytes(raw), problem, result

    raw, problem, (status, _, body) = trio.run(main)
    assert raw.startswith(b"HTTP/1.1 200 ") and b"transfer-encoding: chunked" in raw.lower()
    assert b"retry-after" not in raw  # the stream opened: the HTTP error's headers are not sent
    assert b"event: ping" in raw and b"message_stop" not in raw and not raw.endswith(b"0\r\n\r\n")
    assert "peer closed connection without sending complete message body" in problem
    assert status == 200 and json.loads(body)["content"][0]["text"] == "after the cut"
    assert [s.failed for s in p.served] == [True, False]


def test_server_over_tls(tmp_path: Path) -> None:
    from tests.collectors.llm_server import make_cert

    cert, key = make_cert(tmp_path)
    p = player()
    client = ssl.create_default_context(cafile=str(cert))

    async def main() -> tuple[int, dict[bytes, bytes], bytes]:
        async with trio.open_nursery() as nursery:
            host, port = await nursery.start(partial_serve(p, server_ssl_context(str(cert), str(key))))
            raw = await trio.open_tcp_stream(host, port)
            stream = trio.SSLStream(raw, client, server_hostname="localhost", https_compatible=True)
            result = await _exchange(stream, h11.Connection(h11.CLIENT), "POST", "/v1/responses",
                                     msgspec.json.encode(request("responses")))
            await stream.aclose()
            nursery.cancel_scope.cancel()
        return result

    status, _, body = trio.run(main)
    assert status == 200 and json.loads(body)["object"] == "response"


def partial_serve(p: ScriptPlayer, context: ssl.SSLContext):
    async def run(task_status=trio.TASK_STATUS_IGNORED) -> None:
        await serve_model(p, "127.0.0.1", 0, ssl_context=context, task_status=task_status)
    return run


def test_cli_serve_prints_address_and_exits_on_sigint() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "caisson.cli", "model", "serve", "--script", str(EXAMPLE)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        line = proc.stdout.readline()
        assert line.startswith("caisson model: serving ") and "http://127.0.0.1:" in line
        url = line.split()[-1]
        import urllib.request

        with urllib.request.urlopen(url + "/v1/models", timeout=10) as resp:
            assert [m["id"] for m in json.load(resp)["data"]] == ["claude-sonnet-4-5", "gpt-5"]
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1  # the two turns were never played
    assert "played 0 turns; unplayed {'default': 2}" in err


def test_cli_check_reports_field_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[[turns]]\ntext = "x"\nusage = { output = 1, reasoning = 5 }\n')
    from caisson.cli import main

    assert main(["model", "check", "--script", str(EXAMPLE)]) == 0
    assert main(["model", "check", "--script", str(bad)]) == 2


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["role", "content", "type", "text", "model", "stream", "messages", "input",
                         "output", "stream_options", "include_usage"]), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(endpoint=st.sampled_from(list(ENDPOINTS)), body=json_values | st.binary(max_size=40))
def test_player_answers_any_body_without_raising(endpoint: str, body: Any) -> None:
    p = ScriptPlayer(load_model_script(EXAMPLE), log=lambda line: None)
    data = body if isinstance(body, bytes) else msgspec.json.encode(body)
    reply = p.handle("POST", ENDPOINTS[endpoint], {}, data)
    assert reply.status in (200, 400)
    if reply.status == 400:
        assert p.unexpected and p.next_turn["default"] == 0


@settings(max_examples=200, deadline=None)
@given(endpoint=st.sampled_from(list(ENDPOINTS)), bodies=st.lists(json_values, min_size=1, max_size=4))
def test_a_failing_script_answers_any_bodies_without_raising(endpoint: str, bodies: list[Any]) -> None:
    """Failures are played only to requests the turn matches, and never more than ``times``."""
    p = ScriptPlayer(load_model_script(ROOT / "scenarios" / "model" / "overloaded_then_answer.toml"),
                     log=lambda line: None)
    statuses = [p.handle("POST", ENDPOINTS[endpoint], {}, msgspec.json.encode(b)).status for b in bodies]
    assert set(statuses) <= {200, 400, 529}
    assert statuses.count(529) == sum(s.failed for s in p.served) <= 2
    assert p.failures["default"] <= 2 and p.next_turn["default"] <= 1
