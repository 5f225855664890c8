"""The Gemini API as the proxy sees it: Google AI Studio, Vertex AI and Code Assist paths,
``generateContent`` and ``streamGenerateContent`` (SSE and JSON array), ``usageMetadata``
read by its named rule, errors before and inside the stream.

The fixtures in test_llm_gemini/ are our own content in the wire format google-genai 3.6.1
and gemini-cli 0.61.0 read (one-line JSON chunks, CRLF event ends; pretty-printed bodies).
Parsers are tested whole, byte at a time and at any split (hypothesis)."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.llm import LlmCallBuilder, classify, non_generating, normalize_usage, path_model
from collectors.llm._jsonarray import JsonArrayEvents
from collectors.llm._usage import GEMINI_INCLUSIVE_OUTPUT, RULES, STREAMED_GEMINI_SUFFIX
from collectors.sse import NEED_DATA
from ledger.events import LlmCall, LlmUsage, decode_event
from tests.collectors.test_llm import check_invariants, split

FIXTURES = Path(__file__).parent / "test_llm_gemini"
SSE = "text/event-stream"
JSON = "application/json; charset=UTF-8"
STUDIO = "/v1beta/models/{model}:{method}"
VERTEX = "/v1beta1/projects/p/locations/global/publishers/google/models/{model}:{method}"
CODE_ASSIST = "/v1internal:{method}?alt=sse"
CODE_ASSIST_REQUEST = json.dumps({"model": "gemini-2.5-pro", "project": "p", "user_prompt_id": "u",
                                  "request": {"contents": []}}).encode()


def fx(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def build(path: str, chunks: list[bytes] | bytes, ctype: str | None, *, status: int = 200, request: bytes | None = None,
          cut: bool = False) -> tuple[LlmCall, list[str]]:
    kind = classify("POST", "generativelanguage.googleapis.com", path)
    assert kind is not None, path
    builder = LlmCallBuilder(*kind, exchange_seq=3, url_model=path_model(path))
    builder.request(fx("gemini_request.json") if request is None else request)
    builder.response_start(status, [("Content-Type", ctype)] if ctype else [])
    for chunk in [chunks] if isinstance(chunks, bytes) else chunks:
        builder.response_data(chunk)
    call = builder.finish(cut=cut)
    assert decode_event(msgspec.msgpack.encode(call)) == call  # the ledger reads it back
    return call, list(builder.problems)


def figures(call: LlmCall) -> tuple:
    n = call.normalized
    assert n is not None, call.usage_missing_reason
    return n.input_tokens, n.output_tokens, n.total_tokens, n.cache_read_tokens, n.reasoning_tokens


def last_data(name: str, *path: str) -> dict:
    """The JSON of a fixture's last SSE event (or array element), down ``path``."""
    data = fx(name).decode()
    obj = json.loads(data)[-1] if data.startswith("[") else json.loads(data.strip().split("data: ")[-1])
    for key in path:
        obj = obj[key]
    return obj


# --- which calls are model calls -----------------------------------------------------------


@pytest.mark.parametrize("path, kind, model", [
    ("/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", ("gemini", "streamGenerateContent"),
     "gemini-2.5-flash"),
    ("/v1/models/gemini-2.5-pro:generateContent", ("gemini", "generateContent"), "gemini-2.5-pro"),
    ("/v1alpha/models/gemini-2.5-pro:generateContent?key=REDACTED", ("gemini", "generateContent"), "gemini-2.5-pro"),
    ("https://gw.internal/google/v1beta/models/gemini-2.5-pro:streamGenerateContent",
     ("gemini", "streamGenerateContent"), "gemini-2.5-pro"),
    ("/v1beta/tunedModels/my-tune-7:generateContent", ("gemini", "generateContent"), "tunedModels/my-tune-7"),
    ("/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-flash:generateContent",
     ("vertex", "generateContent"), "gemini-2.5-flash"),
    (VERTEX.format(model="gemini-2.5-flash", method="streamGenerateContent?alt=sse"),
     ("vertex", "streamGenerateContent"), "gemini-2.5-flash"),
    ("/v1/publishers/google/models/gemini-2.5-flash:streamGenerateContent?key=REDACTED",  # express mode
     ("vertex", "streamGenerateContent"), "gemini-2.5-flash"),
    ("/v1/projects/p/locations/l/endpoints/4711:generateContent", ("vertex", "generateContent"), "endpoints/4711"),
    ("/v1internal:streamGenerateContent?alt=sse", ("code_assist", "streamGenerateContent"), None),
    ("/v1internal:generateContent", ("code_assist", "generateContent"), None),
    ("/v1beta/openai/chat/completions", ("gemini", "chat.completions"), None),
    ("/v1/projects/p/locations/l/endpoints/openapi/chat/completions", ("vertex", "chat.completions"), None),
    ("/v1beta/models/gemini-2.5-flash:countTokens", None, None),
    ("/v1beta1/projects/p/locations/l/publishers/google/models/gemini-2.5-flash:computeTokens", None, None),
    ("/v1beta/models/gemini-embedding-001:embedContent", None, None),
    ("/v1internal:loadCodeAssist", None, None),
    ("/v1beta/models/gemini-2.5-flash", None, None),
])
def test_gemini_paths_are_classified_and_name_their_model(path, kind, model):
    assert classify("POST", "h", path) == kind
    assert classify("GET", "h", path) is None
    assert path_model(path) == model


@pytest.mark.parametrize("path, what", [
    ("/v1beta/models/gemini-2.5-flash:countTokens", "token count"),
    ("/v1/publishers/google/models/gemini-2.5-flash:countTokens", "token count"),
    ("/v1beta1/projects/p/locations/l/publishers/google/models/gemini-2.5-flash:computeTokens", "token count"),
    ("/v1internal:countTokens", "token count"),
    ("/v1/messages/count_tokens?beta=true", "token count"),
    ("/v1/responses/input_tokens", "token count"),
    ("/v1internal:loadCodeAssist", "Code Assist account method"),
    ("/v1internal:recordCodeAssistMetrics", "Code Assist account method"),
    ("/v1beta/models/gemini-2.5-flash:embedContent", None),  # billed: its usage goes unread, so it is reported
    ("/v1internal:someNewMethod", None),
    ("/v1beta/models/gemini-2.5-flash:generateContent", None),
    ("/v1/messages", None),
])
def test_methods_that_generate_nothing_are_named(path, what):
    assert non_generating(path) == what


# --- each fixture, whole -------------------------------------------------------------------

CASES = [  # (path, fixture, content type, request, figures, served, stop, streamed)
    (STUDIO.format(model="gemini-2.5-pro", method="generateContent"), "gemini_response.json", JSON, None,
     (5821, 507, 6328, 4096, 446), "gemini-2.5-pro", "STOP", False),
    (STUDIO.format(model="gemini-2.5-flash", method="streamGenerateContent?alt=sse"), "gemini_stream.sse", SSE, None,
     (219, 171, 390, None, 167), "gemini-2.5-flash", "STOP", True),
    (STUDIO.format(model="gemini-flash-latest", method="streamGenerateContent"), "gemini_stream_array.json", JSON,
     None, (1187, 343, 1530, 1024, 291), "gemini-2.5-flash-preview-09-2025", "STOP", True),
    (VERTEX.format(model="gemini-2.5-flash", method="streamGenerateContent?alt=sse"), "gemini_vertex_stream.sse", SSE,
     None, (1532, 248, 1780, None, 210), "gemini-2.5-flash", "STOP", True),
    (CODE_ASSIST.format(method="streamGenerateContent"), "gemini_code_assist_stream.sse", SSE, CODE_ASSIST_REQUEST,
     (8042, 311, 8353, 7168, 299), "gemini-2.5-pro", "STOP", True),
    (STUDIO.format(model="gemini-2.5-flash", method="generateContent"), "gemini_response_grounded.json",
     "application/json", None, (110, 302, 412, None, 283), "gemini-2.5-flash", "STOP", False),
    (STUDIO.format(model="gemini-2.5-flash", method="generateContent"), "gemini_prompt_blocked.json",
     "application/json", None, (37, 0, 37, None, None), "gemini-2.5-flash", "blocked:PROHIBITED_CONTENT", False),
]


@pytest.mark.parametrize("case", CASES, ids=[c[1] for c in CASES])
def test_each_fixture_gives_its_figures_served_model_and_stop_reason(case):
    path, name, ctype, request, expected, served, stop, streamed = case
    call, problems = build(path, fx(name), ctype, request=request)
    assert figures(call) == expected and problems == []
    assert (call.served_model, call.stop_reason, call.streamed, call.usage_missing_reason) == (
        served, stop, streamed, None)
    assert call.requested_model == (path_model(path) or "gemini-2.5-pro")
    envelope = ("response",) if name.startswith("gemini_code_assist") else ()
    assert call.usage == last_data(name, *envelope, "usageMetadata")  # as sent, the last chunk's
    assert call.normalized.rule == RULES["generate_content"] + (STREAMED_GEMINI_SUFFIX if streamed else "")
    prefix = "gemini.last_usage_metadata@1+" if streamed else ""
    assert call.normalized.rules == {figure: prefix + rule for figure, rule in {
        "input_tokens": "gemini.prompt_plus_tool_use@1", "output_tokens": "gemini.candidates_plus_thoughts@1",
        "total_tokens": "total.input_plus_output@1", "cache_read_tokens": "gemini.cached_breakdown@1",
        "reasoning_tokens": "gemini.thoughts_breakdown@1"}.items() if getattr(call.normalized, figure) is not None}


def test_the_issue_example_takes_the_last_cumulative_usage_never_a_sum():
    """#29: ``{"promptTokenCount":219,"candidatesTokenCount":4,"thoughtsTokenCount":167,
    "totalTokenCount":390}`` on the last chunk: input 219, output 4 + 167 = 171."""
    call, _ = build(STUDIO.format(model="gemini-2.5-flash", method="streamGenerateContent?alt=sse"),
                    fx("gemini_stream.sse"), SSE)
    assert call.usage == {"promptTokenCount": 219, "candidatesTokenCount": 4, "totalTokenCount": 390,
                          "thoughtsTokenCount": 167}
    chunks = [json.loads(line[6:])["usageMetadata"] for line in fx("gemini_stream.sse").decode().splitlines()
              if line.startswith("data: ")]
    assert sum(u["promptTokenCount"] for u in chunks) == 5 * 219  # what summing the running totals would give
    assert (call.normalized.input_tokens, call.normalized.output_tokens, call.normalized.total_tokens) == (
        219, 171, 390)
    assert call.normalized.sources == {"usage": "chunk #4 usageMetadata (running totals: the last wins, never summed)"}


STREAMED = [c for c in CASES if c[7]] + [
    (VERTEX.format(model="gemini-2.5-flash", method="streamGenerateContent?alt=sse"),
     "gemini_stream_midstream_error.sse", SSE, None, None, "gemini-2.5-flash", None, True)]


@pytest.mark.parametrize("case", STREAMED, ids=[c[1] for c in STREAMED])
def test_streams_byte_at_a_time_give_the_whole_call(case):
    path, name, ctype, request, *_ = case
    data = fx(name)
    whole = build(path, data, ctype, request=request)
    assert build(path, [data[i:i + 1] for i in range(len(data))], ctype, request=request) == whole


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(STREAMED), st.data())
def test_streams_at_any_split_give_the_whole_call(case, data):
    path, name, ctype, request, *_ = case
    whole = build(path, fx(name), ctype, request=request)
    assert build(path, data.draw(split(fx(name))), ctype, request=request) == whole


# --- streams that end early, or carry usage too soon ----------------------------------------


def sse(*objects: dict) -> bytes:
    return b"".join(b"data: " + json.dumps(o).encode() + b"\r\n\r\n" for o in objects)


def chunk(text: str = "x", finish: str | None = None, **usage: int) -> dict:
    cand: dict = {"content": {"role": "model", "parts": [{"text": text}]}, "index": 0}
    if finish:
        cand["finishReason"] = finish
    obj: dict = {"candidates": [cand], "modelVersion": "gemini-2.5-flash"}
    if usage:
        obj["usageMetadata"] = usage
    return obj


PATH = STUDIO.format(model="gemini-2.5-flash", method="streamGenerateContent?alt=sse")


@pytest.mark.parametrize("events", [1, 2, 3, 4])
def test_a_stream_cut_before_its_finish_reason_has_no_usage_though_every_chunk_had_running_totals(events):
    body = b"".join(fx("gemini_stream.sse").split(b"\r\n\r\n")[i] + b"\r\n\r\n" for i in range(events))
    call, _ = build(PATH, body, SSE, cut=True)
    assert call.usage is None and call.normalized is None
    assert call.usage_missing_reason == "stream cut before finishReason"


def test_a_connection_cut_or_junk_after_the_finish_reason_keeps_the_usage():
    call, problems = build(PATH, fx("gemini_stream.sse"), SSE, cut=True)
    assert figures(call)[:3] == (219, 171, 390)
    assert problems == ["connection cut after the stream's terminal event"]
    call, problems = build(PATH, fx("gemini_stream.sse") + b"data: {\"cand", SSE)
    assert figures(call)[:3] == (219, 171, 390) and problems == ["stream ended mid-event"]


def test_vertex_placeholders_are_not_usage_and_a_cut_before_the_last_chunk_reports_none():
    data = fx("gemini_vertex_stream.sse")
    call, _ = build(VERTEX.format(model="gemini-2.5-flash", method="streamGenerateContent"),
                    data[:data.rindex(b"data: ")], SSE, cut=True)
    assert call.usage is None and call.usage_missing_reason == "stream cut before finishReason"


def test_usage_only_before_the_finish_reason_is_not_final():
    body = sse(chunk("a", promptTokenCount=10, totalTokenCount=12, candidatesTokenCount=2),
               chunk("b", finish="STOP"))
    call, _ = build(PATH, body, SSE)
    assert call.usage is None and call.stop_reason == "STOP"
    assert call.usage_missing_reason == ("no usageMetadata with token counts on or after the finishReason chunk #1"
                                         " (the running totals of chunk #0 are not final)")
    placeholders = sse(chunk("a", finish="STOP"))
    call, _ = build(PATH, placeholders, SSE)
    assert call.usage_missing_reason == "no usageMetadata with token counts in the stream"


def test_usage_after_the_first_finish_reason_counts_the_last_one():
    two = sse({"candidates": [{"index": 1, "finishReason": "STOP"}, {"index": 0}],
               "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 3, "totalTokenCount": 13}},
              {"candidates": [{"index": 0, "finishReason": "MAX_TOKENS"}],
               "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 9, "totalTokenCount": 19}})
    call, _ = build(PATH, two, SSE)
    assert figures(call)[:3] == (10, 9, 19) and call.stop_reason == "MAX_TOKENS"  # candidate 0's reason


def test_a_blocked_prompt_streamed_is_terminal():
    call, _ = build(PATH, sse({"promptFeedback": {"blockReason": "SAFETY"},
                               "usageMetadata": {"promptTokenCount": 8, "totalTokenCount": 8}}), SSE)
    assert call.stop_reason == "blocked:SAFETY" and figures(call) == (8, 0, 8, None, None)


# --- the JSON array form (no alt=sse) ------------------------------------------------------

ARRAY_PATH = STUDIO.format(model="gemini-flash-latest", method="streamGenerateContent")
ARRAY = fx("gemini_stream_array.json")


def elements(chunks: list[bytes]) -> tuple[list, bool, str | None]:
    reader = JsonArrayEvents()
    out = []
    for piece in chunks:
        reader.feed(piece)
        while (event := reader.next_event()) is not NEED_DATA:
            out.append(event)
    reader.close()
    return out, reader.cut, reader.broken


def test_the_array_reader_gives_each_element_whole_and_byte_at_a_time():
    events, cut, broken = elements([ARRAY])
    assert [json.loads(e.data) for e in events] == json.loads(ARRAY) and (cut, broken) == (False, None)
    assert [e.index for e in events] == [0, 1, 2, 3]
    assert elements([ARRAY[i:i + 1] for i in range(len(ARRAY))]) == (events, cut, broken)
    tricky = b' [ {"a": "]}\\\\\\"[{", "b": [1, {}]} ,\n[2] ] \n'
    assert [e.data for e in elements([tricky])[0]] == ['{"a": "]}\\\\\\"[{", "b": [1, {}]}', "[2]"]
    assert elements([tricky[i:i + 1] for i in range(len(tricky))]) == elements([tricky])


@pytest.mark.parametrize("body, broken", [
    (b'{"candidates": []}', "response body is not a JSON array of objects: '[' expected at byte 0"),
    (b"[1]", "response body is not a JSON array of objects: an object, an array or ']' expected at byte 1"),
    (b"[{},,{}]", "response body is not a JSON array of objects: an object or an array expected at byte 4"),
    (b"[{} {}]", "response body is not a JSON array of objects: ',' or ']' expected at byte 4"),
    (b"[{}] junk", "response body is not a JSON array of objects: nothing after the array's ']' expected at byte 5"),
    (b'[{"a": "\xff"}]', "invalid UTF-8 in array element #0 at byte 8"),
])
def test_the_array_reader_names_what_is_not_an_array(body, broken):
    assert elements([body])[2] == broken
    assert elements([body[i:i + 1] for i in range(len(body))])[2] == broken


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200) | st.sampled_from([ARRAY[:n] for n in range(0, len(ARRAY), 97)]), st.data())
def test_the_array_reader_at_any_split_never_raises_and_agrees_with_itself(data, draw):
    assert elements(draw.draw(split(data))) == elements([data])


def test_a_cut_array_has_no_usage_and_junk_after_it_is_noted():
    call, problems = build(ARRAY_PATH, ARRAY[:-300], JSON, cut=True)
    assert call.usage is None and call.usage_missing_reason == "stream cut before finishReason"
    assert problems == ["stream ended mid-event"]
    call, problems = build(ARRAY_PATH, ARRAY[:ARRAY.rindex(b"]")], JSON, cut=True)  # all but its "]"
    assert figures(call)[:3] == (1187, 343, 1530)
    assert problems == ["stream ended mid-event", "connection cut after the stream's terminal event"]
    call, problems = build(ARRAY_PATH, ARRAY + b"{junk", JSON)
    assert figures(call)[:3] == (1187, 343, 1530)
    assert problems == ["response body is not a JSON array of objects: nothing after the array's ']' expected"
                        f" at byte {len(ARRAY)} (after the terminal event)"]
    call, _ = build(ARRAY_PATH, b'{"candidates": []}', JSON)
    assert call.usage is None and call.usage_missing_reason.startswith("response body is not a JSON array")


# --- errors --------------------------------------------------------------------------------

QUOTA = ("error status 429: RESOURCE_EXHAUSTED: 429: You exceeded your current quota, please check your plan and"
         " billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-"
         "limits.\n* ...")


@pytest.mark.parametrize("name, path", [
    ("gemini_error_429.json", STUDIO.format(model="gemini-2.5-pro", method="generateContent")),
    ("gemini_error_429_array.json", STUDIO.format(model="gemini-2.5-pro", method="streamGenerateContent?alt=sse")),
    ("gemini_error_429_array.json", STUDIO.format(model="gemini-2.5-pro", method="streamGenerateContent")),
])
def test_an_error_status_gives_no_usage_and_google_s_status_and_message(name, path):
    call, _ = build(path, fx(name), JSON, status=429)
    assert call.usage is None and call.normalized is None and call.usage_missing_reason == QUOTA
    assert call.requested_model == "gemini-2.5-pro"


MIDSTREAM = ("stream error outside the SSE framing (#1): RESOURCE_EXHAUSTED: 429: Resource exhausted."
             " Please try again later.")


def test_an_error_google_writes_outside_the_sse_framing_is_the_stream_s_error():
    call, problems = build(VERTEX.format(model="gemini-2.5-flash", method="streamGenerateContent?alt=sse"),
                           fx("gemini_stream_midstream_error.sse"), SSE)
    assert call.usage is None and call.usage_missing_reason == MIDSTREAM and problems == [MIDSTREAM]
    assert call.served_model == "gemini-2.5-flash"


def test_an_error_after_the_finish_reason_still_voids_the_usage():
    body = fx("gemini_stream.sse") + b'{"error": {"code": 503, "message": "x", "status": "UNAVAILABLE"}}\r\n'
    call, _ = build(PATH, body, SSE)
    assert call.usage is None
    assert call.usage_missing_reason == "stream error outside the SSE framing (#5): UNAVAILABLE: 503: x"


def test_an_error_framed_as_a_chunk_or_an_array_element_is_the_stream_s_error():
    error = {"error": {"code": 500, "message": "Internal error encountered.", "status": "INTERNAL"}}
    call, _ = build(PATH, sse(chunk("a", promptTokenCount=5, totalTokenCount=5), error), SSE)
    assert call.usage is None
    assert call.usage_missing_reason == "stream error chunk #1: INTERNAL: 500: Internal error encountered."
    body = json.dumps([chunk("a", promptTokenCount=5, totalTokenCount=5), error]).encode()
    call, _ = build(ARRAY_PATH, body, JSON)
    assert call.usage_missing_reason == "stream error chunk #1: INTERNAL: 500: Internal error encountered."


def test_json_outside_the_framing_that_is_no_error_is_malformed():
    call, _ = build(PATH, sse(chunk("a")) + b'{"candidates": []}\r\n' + sse(chunk("b", "STOP", promptTokenCount=1)),
                    SSE)
    assert call.usage is None
    assert call.usage_missing_reason == "JSON outside the SSE framing (#1) is not an error object"


# --- the rule's edges ----------------------------------------------------------------------


def view(usage: dict) -> tuple[LlmUsage | None, str | None]:
    return normalize_usage("generate_content", usage, streamed=False)


def test_tool_use_prompt_tokens_are_input_and_cached_is_a_breakdown_never_added():
    got, _ = view({"promptTokenCount": 100, "cachedContentTokenCount": 60, "toolUsePromptTokenCount": 7,
                   "candidatesTokenCount": 5, "totalTokenCount": 112})
    assert (got.input_tokens, got.output_tokens, got.total_tokens, got.cache_read_tokens) == (107, 5, 112, 60)
    assert got.reasoning_tokens is None and "inconsistent" not in got.rule


def test_candidates_that_already_hold_the_thoughts_are_read_by_the_sent_total_and_named():
    got, _ = view({"promptTokenCount": 100, "candidatesTokenCount": 50, "thoughtsTokenCount": 30,
                   "totalTokenCount": 150})
    assert (got.input_tokens, got.output_tokens, got.total_tokens, got.reasoning_tokens) == (100, 50, 150, 30)
    assert got.rules["output_tokens"] == GEMINI_INCLUSIVE_OUTPUT
    assert "candidatesTokenCount includes thoughtsTokenCount" in got.rule
    streamed, _ = normalize_usage("generate_content", {"promptTokenCount": 100, "candidatesTokenCount": 50,
                                                       "thoughtsTokenCount": 30, "totalTokenCount": 150}, streamed=True)
    assert streamed.rules["output_tokens"] == "gemini.last_usage_metadata@1+" + GEMINI_INCLUSIVE_OUTPUT


@pytest.mark.parametrize("usage, note", [
    ({"promptTokenCount": 100, "candidatesTokenCount": 5, "thoughtsTokenCount": 10, "totalTokenCount": 999},
     "sent totalTokenCount 999 != promptTokenCount + toolUsePromptTokenCount + candidatesTokenCount"
     " + thoughtsTokenCount"),
    ({"promptTokenCount": 10, "candidatesTokenCount": 5, "thoughtsTokenCount": 8, "totalTokenCount": 15},
     "sent totalTokenCount 15 != promptTokenCount"),  # candidates < thoughts: they cannot hold them
    ({"promptTokenCount": 10, "cachedContentTokenCount": 20, "candidatesTokenCount": 1, "totalTokenCount": 11},
     "cachedContentTokenCount 20 > promptTokenCount 10"),
])
def test_inconsistent_counts_are_noted_in_the_rule_and_the_documented_reading_kept(usage, note):
    got, _ = view(usage)
    assert "; inconsistent: " + note in got.rule
    assert got.output_tokens == usage["candidatesTokenCount"] + usage.get("thoughtsTokenCount", 0)


@pytest.mark.parametrize("usage, problem", [
    ({"trafficType": "ON_DEMAND"}, "usageMetadata has no token counts"),
    ({"promptTokenCount": None}, "usageMetadata has no token counts"),
    ({"promptTokenCount": "12"}, "promptTokenCount is not an integer: '12'"),
    ({"promptTokenCount": 1, "thoughtsTokenCount": -1}, "thoughtsTokenCount is negative: -1"),
    ({"promptTokenCount": True}, "promptTokenCount is not an integer: True"),
])
def test_usage_that_cannot_be_read_is_refused_never_zero(usage, problem):
    assert view(usage) == (None, problem)
    body = json.dumps({"candidates": [{"finishReason": "STOP"}], "usageMetadata": usage}).encode()
    call, _ = build(STUDIO.format(model="m", method="generateContent"), body, JSON)
    assert call.usage == usage and call.normalized is None
    assert call.usage_missing_reason == f"usage not normalisable: {problem}"


def test_a_body_without_usage_metadata_says_so():
    call, _ = build(STUDIO.format(model="m", method="generateContent"),
                    json.dumps({"candidates": [{"finishReason": "STOP"}]}).encode(), JSON)
    assert call.usage is None and call.usage_missing_reason == "response has no usage"


# --- Code Assist, tools the provider ran, the OpenAI-compatible path -----------------------


def test_code_assist_takes_the_model_from_the_body_and_unwraps_each_response():
    path = CODE_ASSIST.format(method="generateContent")
    body = json.dumps({"response": json.loads(fx("gemini_response.json")), "traceId": "t1"}).encode()
    call, _ = build(path, body, JSON, request=CODE_ASSIST_REQUEST)
    assert (call.provider, call.requested_model, call.served_model) == ("code_assist", "gemini-2.5-pro",
                                                                        "gemini-2.5-pro")
    assert figures(call) == (5821, 507, 6328, 4096, 446)
    call, _ = build(path, fx("gemini_error_429.json"), JSON, status=429, request=CODE_ASSIST_REQUEST)
    assert call.usage_missing_reason == QUOTA
    unwrapped, _ = build(path, fx("gemini_response.json"), JSON, request=CODE_ASSIST_REQUEST)
    assert unwrapped.usage is None and unwrapped.usage_missing_reason == "response has no usage"


def test_tools_the_provider_ran_are_counted_once_each():
    call, _ = build(STUDIO.format(model="gemini-2.5-flash", method="generateContent"),
                    fx("gemini_response_grounded.json"), "application/json")
    assert call.server_tools == {"google_search": 1}
    grounding = {"webSearchQueries": ["a", "b"]}
    urls = {"urlMetadata": [{"retrievedUrl": "https://example.org/",
                             "urlRetrievalStatus": "URL_RETRIEVAL_STATUS_SUCCESS"}]}
    code = {"executableCode": {"language": "PYTHON", "code": "print(1)"}}
    body = sse({"candidates": [{"content": {"parts": [code, {"codeExecutionResult": {"outcome": "OUTCOME_OK"}}]},
                                "groundingMetadata": grounding, "urlContextMetadata": urls}]},
               {"candidates": [{"content": {"parts": [code]}, "groundingMetadata": grounding,
                                "urlContextMetadata": urls, "finishReason": "STOP"}],
                "usageMetadata": {"promptTokenCount": 3, "totalTokenCount": 3}})
    call, _ = build(PATH, body, SSE)
    assert call.server_tools == {"code_execution": 2, "google_search": 2, "url_context": 1}


def test_the_openai_compatible_path_reads_chat_completions():
    from tests.collectors.test_llm import fx as openai_fx

    call, _ = build("/v1beta/openai/chat/completions", openai_fx("openai_chat_response.json"), "application/json",
                    request=openai_fx("openai_chat_request.json"))
    assert (call.provider, call.endpoint) == ("gemini", "chat.completions")
    assert call.usage == json.loads(openai_fx("openai_chat_response.json"))["usage"] and call.normalized is not None


# --- any bytes, any objects ----------------------------------------------------------------

_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-3, 2**60) | st.text(max_size=6),
                       lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                                    max_size=3), max_leaves=6)
_COUNT = st.integers(-2, 2**54) | _VALUES
_USAGE = st.fixed_dictionaries({}, optional={
    "promptTokenCount": _COUNT, "candidatesTokenCount": _COUNT, "thoughtsTokenCount": _COUNT,
    "cachedContentTokenCount": _COUNT, "toolUsePromptTokenCount": _COUNT, "totalTokenCount": _COUNT,
    "trafficType": _VALUES}) | _VALUES
_CANDIDATE = st.fixed_dictionaries({}, optional={
    "finishReason": st.sampled_from(["STOP", "MAX_TOKENS", ""]) | _VALUES, "index": _VALUES,
    "content": st.fixed_dictionaries({}, optional={"parts": st.lists(
        st.fixed_dictionaries({}, optional={"text": _VALUES, "executableCode": _VALUES}) | _VALUES, max_size=2)})
    | _VALUES,
    "groundingMetadata": st.fixed_dictionaries({}, optional={"webSearchQueries": _VALUES}) | _VALUES}) | _VALUES
_CHUNK = st.fixed_dictionaries({}, optional={
    "candidates": st.lists(_CANDIDATE, max_size=2) | _VALUES, "usageMetadata": _USAGE, "modelVersion": _VALUES,
    "promptFeedback": st.fixed_dictionaries({}, optional={"blockReason": _VALUES}) | _VALUES,
    "error": _VALUES, "response": _VALUES})


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([STUDIO.format(model="m", method="streamGenerateContent"), CODE_ASSIST.format(
    method="streamGenerateContent")]), st.lists(_CHUNK | _VALUES, min_size=1, max_size=5),
    st.sampled_from(["sse", "array", "body"]))
def test_structured_garbage_never_raises_and_never_gives_zero(path, objects, form):
    if form == "sse":
        call, _ = build(path, sse(*objects), SSE)
    elif form == "array":
        call, _ = build(path, json.dumps(objects).encode(), JSON)
    else:
        call, _ = build(path.replace("streamGenerateContent", "generateContent"), json.dumps(objects[0]).encode(),
                        JSON)
    check_invariants(call)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([STUDIO.format(model="m", method="generateContent"), PATH, ARRAY_PATH,
                        CODE_ASSIST.format(method="streamGenerateContent")]),
       st.binary(max_size=300), st.sampled_from([SSE, JSON, None]), st.sampled_from([200, 400, 503]), st.booleans(),
       st.data())
def test_arbitrary_bytes_never_raise(path, response, ctype, status, cut, data):
    call, _ = build(path, data.draw(split(response)), ctype, status=status, cut=cut)
    check_invariants(call)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(CASES + STREAMED), st.integers(0, 10_000), st.binary(min_size=1, max_size=8),
       st.sampled_from([200, 429, 500]), st.booleans())
def test_fixture_damage_never_raises_and_never_gives_zero(case, at, junk, status, cut):
    path, name, ctype, request, *_ = case
    body = fx(name)
    at %= len(body)
    call, _ = build(path, body[:at] + junk + body[at + len(junk):], ctype, status=status, request=request, cut=cut)
    check_invariants(call)
