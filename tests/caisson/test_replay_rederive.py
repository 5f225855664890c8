"""Replay rebuilds LLM usage and agent events from the raw blobs a run kept, with today's
parsers and rules, instead of trusting the derived fields written live (issue 19, "Done
when"). The runs here are recorded the old way: events shaped as the faulty rules wrote
them, next to the raw bodies and stdout those rules read."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

from caisson.home import ensure_operator_key
from caisson.replay import FINDINGS_FILE, replay_runs
from collectors.proxy import rederive_llm_call
from ledger import BlobStore, LedgerWriter, verify_ledger
from ledger.events import (
    AgentToolCall, AgentUsage, BlobStored, HttpExchange, LlmCall, LlmUsage, RunAgent, RunArm, RunEnded, RunStarted,
    WitnessRaw,
)


def sse(*objects: dict) -> bytes:
    return b"".join(b"event: " + o["type"].encode() + b"\ndata: " + json.dumps(o).encode() + b"\n\n" for o in objects)


STREAM = sse(
    {"type": "message_start", "message": {"model": "claude-x", "usage": {
        "input_tokens": 12, "cache_read_input_tokens": 1800, "output_tokens": 1}}},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"input_tokens": 0, "output_tokens": 150}},
    {"type": "message_stop"},
)
REQUEST = json.dumps({"model": "claude-x", "stream": True}).encode()
# what the faulty rule (llm.usage@1) wrote live: the delta's 0 overrode the real 12
OLD_USAGE = {"input_tokens": 0, "cache_read_input_tokens": 1800, "output_tokens": 150}
OLD_VIEW = LlmUsage(input_tokens=1800, output_tokens=150, total_tokens=1950, cache_read_tokens=1800,
                    rule="anthropic.messages: ... (old rule)")
STDOUT = (json.dumps({"type": "system", "subtype": "init", "tools": ["Bash"]}).encode() + b"\n"
          + json.dumps({"type": "assistant", "message": {"content": [
              {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}]}}).encode()
          + b'\n{"type":"resu')


def record_old_run(run_dir: Path, *, response_body: bytes = STREAM, role: str = "http.response_body",
                   encoding: str | None = None) -> Path:
    """A run as the faulty live parsers recorded it (no usage event, a wrong llm.call)."""
    key = ensure_operator_key()
    run_dir.mkdir(parents=True)
    blobs = BlobStore(run_dir / "blobs")
    headers = [("content-type", "text/event-stream")] + ([("content-encoding", encoding)] if encoding else [])
    with LedgerWriter(run_dir / "ledger", run_id=run_dir.name, key=key, blobs=blobs) as w:
        w.append(RunStarted(run_id=run_dir.name, caisson_version="0", agent=RunAgent(name="claude-code",
                                                                                     gating="enforced")),
                 source="recorder")
        req = blobs.put(REQUEST)
        w.append(BlobStored(sha256=req, size_bytes=len(REQUEST), role="http.request_body"), source="proxy")
        resp = blobs.put(response_body)
        w.append(BlobStored(sha256=resp, size_bytes=len(response_body), role=role), source="proxy")
        w.append(HttpExchange(method="POST", scheme="https", host="api.anthropic.com", port=443, path="/v1/messages",
                              status=200, request_bytes=len(REQUEST), response_bytes=len(STREAM),
                              response_headers=headers, request_body_sha256=req, response_body_sha256=resp),
                 source="proxy")
        w.append(LlmCall(provider="anthropic", endpoint="messages", requested_model="claude-x", served_model="claude-x",
                         stop_reason="end_turn", streamed=True, usage=OLD_USAGE, normalized=OLD_VIEW), source="proxy")
        w.append(AgentTools_old(), source="transcript")
        w.append(AgentToolCall(agent="claude-code", call_id="t1", tool="Bash", input={"command": "ls"}),
                 source="transcript")
        w.append(WitnessRaw(witness="transcript", line='{"type":"resu'), source="transcript")
        out = blobs.put(STDOUT)
        w.append(BlobStored(sha256=out, size_bytes=len(STDOUT), role="stdout", media_type="text/plain"),
                 source="recorder")
        w.append(RunEnded(exit_code=0, duration_ns=10**9), source="recorder")
    return run_dir


def AgentTools_old():  # noqa: N802 - the live init event, as it was written
    from ledger.events import AgentTools

    return AgentTools(agent="claude-code", surface="init", tools=["Bash"])


def test_replay_rebuilds_the_faulty_figure_from_the_raw_body_and_leaves_the_ledger_unchanged(tmp_path):
    run = record_old_run(tmp_path / "old")
    ledger_bytes = (run / "ledger").read_bytes()
    key = ensure_operator_key().verify_key
    [result] = replay_runs([run], key)
    done = result.rederived
    assert done.versions == {"llm": "llm.usage@3", "claude-code": "claude-code.transcript@3",
                             "agent": "claude-code 2.1.328"}  # the run did not record it: the image's pin
    assert done.llm_calls == 1 and done.transcript == "claude-code" and done.kept_live == []
    assert done.changed == [
        "seq 4 llm.call: input_tokens 1800 -> 1812",
        "seq 4 llm.call: total_tokens 1950 -> 1962",
        "seq 8 stdout: re-read by claude-code.transcript@3 (live: unknown)",
        "seq 8 stdout agent.usage: usage missing reason null -> transcript ended without its terminal result"
        " event; its last line was cut mid-way: '{\"type\":\"resu'",
        "seq 8 stdout agent.usage: incomplete null -> transcript ended without its terminal result event;"
        " its last line was cut mid-way: '{\"type\":\"resu'",
        "seq 8 stdout agent.tool_result t1: null -> unknown",
        "seq 8 stdout transcript events: 3 live -> 5 rebuilt",
    ]
    [call, usage] = done.usage
    assert isinstance(call, LlmCall) and (call.normalized.input_tokens, call.normalized.total_tokens) == (1812, 1962)
    assert call.normalized.sources["input_tokens"].startswith("message_start (message_delta sent 0")
    assert isinstance(usage, AgentUsage) and usage.normalized is None and usage.incomplete
    [tokens] = [f for f in result.findings if f.detector.startswith("tokens.cross_check")]
    assert "input null, output null" in tokens.message and "input 1812, output 150" in tokens.message
    saved = json.loads((run / FINDINGS_FILE).read_text())
    assert saved["rederived"]["changed"] == done.changed
    assert saved["rederived"]["usage"][0]["normalized"]["input_tokens"] == 1812
    assert (run / "ledger").read_bytes() == ledger_bytes
    assert verify_ledger(run, key).status == "ok"


def test_replay_of_a_lying_gzip_label_reads_the_raw_blob(tmp_path):
    run = record_old_run(tmp_path / "lying", role="http.response_body.encoded", encoding="gzip")
    [result] = replay_runs([run], ensure_operator_key().verify_key, write=False)
    [call, _] = result.rederived.usage
    assert call.normalized.input_tokens == 1812 and call.label_mismatch.endswith("read as text/event-stream")


def test_a_truncated_body_blob_keeps_the_live_call_and_says_why(tmp_path):
    run = record_old_run(tmp_path / "cut", response_body=STREAM[:40], role="http.response_body.truncated")
    [result] = replay_runs([run], ensure_operator_key().verify_key, write=False)
    assert result.rederived.llm_calls == 0
    assert result.rederived.kept_live == [
        "seq 4 llm.call: the response body blob holds only the body's start (over the cap)"]
    assert result.rederived.usage[0].normalized == OLD_VIEW


def exchange(**kw) -> HttpExchange:
    base = dict(method="POST", scheme="https", host="h", port=443, path="/v1/messages", status=200,
                response_headers=[("content-type", "text/event-stream")])
    return HttpExchange(**{**base, **kw})


def test_rederive_llm_call_cases():
    gz = gzip.compress(STREAM)
    body = (REQUEST, "http.request_body")
    call, why = rederive_llm_call(exchange(response_headers=[("content-type", "text/event-stream"),
                                                              ("content-encoding", "gzip")]),
                                  body, (STREAM, "http.response_body"))  # kept decoded: the header is not reapplied
    assert why is None and call.normalized.total_tokens == 1962 and call.label_mismatch is None
    call, _ = rederive_llm_call(exchange(response_headers=[("content-type", "text/event-stream"),
                                                           ("content-encoding", "gzip")]),
                                body, (gz, "http.response_body.encoded"))
    assert call.normalized.total_tokens == 1962  # a raw blob is decoded again
    assert rederive_llm_call(exchange(path="/v1/models"), body, None) == (None, None)
    assert rederive_llm_call(exchange(denied="egress-allow-list", status=403), body, None) == (None, None)
    sha = hashlib.sha256(STREAM).hexdigest()
    assert rederive_llm_call(exchange(response_body_sha256=sha, response_bytes=9), body, None) == (
        None, "the response body blob is missing")
    call, _ = rederive_llm_call(exchange(error="peer closed connection"), body, (STREAM[:60], "http.response_body"))
    assert call.usage is None and call.usage_missing_reason == "stream cut before message_stop"
    call, _ = rederive_llm_call(exchange(status=None, error="upstream refused"), body, None)
    assert call.usage_missing_reason == "no response"


def test_replay_reads_a_transcript_with_the_agent_version_the_run_recorded(tmp_path):
    """Codex of an unknown version: two running totals cannot be told from two turns' own usage."""
    stdout = b"".join(json.dumps(o).encode() + b"\n" for o in [
        {"type": "turn.started"}, {"type": "turn.completed", "usage": {"input_tokens": 3000, "output_tokens": 10}},
        {"type": "turn.started"}, {"type": "turn.completed", "usage": {"input_tokens": 6500, "output_tokens": 20}}])
    key = ensure_operator_key()
    runs = {}
    for version in ("0.171.0", "0.0.1"):
        run = tmp_path / version
        run.mkdir()
        blobs = BlobStore(run / "blobs")
        with LedgerWriter(run / "ledger", run_id=version, key=key, blobs=blobs) as w:
            w.append(RunStarted(run_id=version, caisson_version="0",
                                agent=RunAgent(name="codex", gating="ungated", version=version)), source="recorder")
            w.append(AgentUsage(agent="codex", token_source="codex turn.completed usage (summed over turns)",
                                usage={"input_tokens": 9500, "output_tokens": 30},
                                normalized=LlmUsage(input_tokens=9500, output_tokens=30, total_tokens=9530)),
                     source="transcript")
            w.append(BlobStored(sha256=blobs.put(stdout), size_bytes=len(stdout), role="stdout"), source="recorder")
        [runs[version]] = replay_runs([run], key.verify_key, write=False)
    known, unknown = runs["0.171.0"].rederived, runs["0.0.1"].rederived
    assert known.versions["agent"] == "codex 0.171.0" and unknown.versions["agent"] == "codex 0.0.1"
    assert known.changed[:3] == ["seq 2 stdout: re-read by codex.transcript@3 (live: unknown)",
                                 "seq 2 stdout agent.usage: input_tokens 9500 -> 6500",
                                 "seq 2 stdout agent.usage: output_tokens 30 -> 20"]
    assert unknown.changed[1] == "seq 2 stdout agent.usage: input_tokens 9500 -> null"
    assert unknown.usage[0].usage_missing_reason.startswith("2 turns and the meaning of turn.completed.usage")


_SCAN_POOL = [
    ("recorder", RunStarted(run_id="r", caisson_version="0", agent=RunAgent(name="claude-code"))),
    ("recorder", BlobStored(sha256="a" * 64, size_bytes=1, role="scenario")),
    ("recorder", BlobStored(sha256="b" * 64, size_bytes=1, role="stdout")),
    ("recorder", BlobStored(sha256="c" * 64, size_bytes=1, role="stdout")),
    ("transcript", BlobStored(sha256="d" * 64, size_bytes=1, role="odd")),
    ("proxy", HttpExchange(method="POST", scheme="https", host="api.anthropic.com", port=443, path="/v1/messages")),
    ("transcript", HttpExchange(method="GET", scheme="https", host="x", port=443, path="/")),
    ("proxy", LlmCall(provider="anthropic", endpoint="messages")),
    ("transcript", LlmCall(provider="anthropic", endpoint="messages")),
    ("transcript", AgentToolCall(agent="claude-code", call_id="t1", tool="Bash")),
    ("transcript", AgentUsage(agent="claude-code", token_source="result.usage")),
    ("agent", AgentUsage(agent="claude-code", token_source="result.usage")),
    ("recorder", RunEnded(exit_code=0)),
]


def test_the_streamed_rebuild_equals_the_list_rebuild_it_replaced(tmp_path):
    """`Rebuild` reads a run once, in order, holding back only what a decision waits for:
    on generated runs (blobs, exchanges, calls and transcript events in any order, the stdout
    blob before, after or without them) and on written cells it gives what the rebuild over
    the whole list gave (tests/caisson/_rederive_list.py)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from tests._fixtures.cells import CellSpec, write_cell
    from tests.caisson._rederive_list import rederive as list_rederive
    from caisson.replay._rederive import rederive
    from ledger import BlobStore, Record, SigningKey, verify_and_read

    def blob(sha):
        return _CLAUDE_STDOUT if sha == "b" * 64 else None

    @settings(max_examples=500, deadline=None)
    @given(st.lists(st.integers(0, len(_SCAN_POOL) - 1), max_size=40))
    def generated(picks):
        records = [Record(seq=i, wall_ns=i, mono_ns=i, source=_SCAN_POOL[p][0], event=_SCAN_POOL[p][1])
                   for i, p in enumerate(picks)]
        assert rederive(records, blob) == list_rederive(records, blob)

    generated()
    key = SigningKey.generate()
    for n, spec in enumerate([CellSpec(run_id="a", strace_events=200), CellSpec(run_id="b", turns=0, strace_events=0),
                              CellSpec(run_id="c", streamed=True, live_input_tokens=7)]):
        run = write_cell(tmp_path / str(n), spec, key)
        _, records = verify_and_read(run, key.verify_key)
        store = BlobStore(run / "blobs")
        assert rederive(records, store.get) == list_rederive(records, store.get)


_CLAUDE_STDOUT = b"".join(json.dumps(o).encode() + b"\n" for o in [
    {"type": "system", "subtype": "init", "session_id": "s1", "tools": ["Read"], "model": "m"},
    {"type": "assistant", "session_id": "s1", "message": {"content": [
        {"type": "tool_use", "id": "t9", "name": "Read", "input": {"file_path": "x"}}]}},
    {"type": "result", "subtype": "success", "session_id": "s1", "result": "done",
     "usage": {"input_tokens": 5, "output_tokens": 2}}])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, len(_SCAN_POOL) - 1), max_size=40))
@example([0, 2, 12])  # the re-read transcript goes after the stdout blob (no live transcript record)
@example([0, 2, 9, 10, 12])  # ... in the live transcript's place
@example([0, 5, 5, 7, 12])  # an exchange with no live call: its rebuilt call is added
def test_the_kinds_rederive_gives_are_those_of_the_records_it_returns(picks):
    """`rederive_kinds` keeps the class of each record for routing (the scan's, and those of
    what it adds or replaces: rebuilt calls, orphan exchanges' calls, a re-read transcript
    in the live one's place or after the stdout blob): always the classes of its records."""
    from caisson.replay._rederive import rederive, rederive_kinds
    from ledger import Record

    records = [Record(seq=i, wall_ns=i, mono_ns=i, source=_SCAN_POOL[p][0], event=_SCAN_POOL[p][1])
               for i, p in enumerate(picks)]

    def blob(sha):
        return _CLAUDE_STDOUT if sha == "b" * 64 else None

    result, kinds, out = rederive_kinds(records, blob)
    assert kinds == [type(r.event) for r in result]
    assert (result, out) == rederive(records, blob)


def test_a_synthetic_cell_keeps_the_bodies_its_model_calls_rederive_from(tmp_path):
    """The benchmarks' and tests' synthetic cells are shaped like a proxy's: each exchange's
    bodies are blobs, so replay rebuilds the same calls and the token cross-check agrees
    (before, the rebuilt calls had no usage and every cell was token_ambiguous)."""
    from tests._fixtures.cells import CellSpec, write_cell
    from caisson.replay import replay_records
    from caisson.replay._rederive import rederive
    from ledger import verify_and_read
    from ledger.events import LlmCall

    key = ensure_operator_key()
    spec = CellSpec(run_id="r1", agent="claude-code", arm="a", answer="x", turns=3, sessions=["s1"],
                    first_party=True, tokens_in=100, tokens_out=10)
    run_dir = write_cell(tmp_path / "cell", spec, key)
    report, records = verify_and_read(run_dir, key.verify_key)
    blobs = BlobStore(run_dir / "blobs")
    rebuilt, _ = rederive(records, lambda sha: blobs.get(sha))
    live = [r.event for r in records if isinstance(r.event, LlmCall)]
    assert [r.event for r in rebuilt if isinstance(r.event, LlmCall)] == live
    assert [(c.normalized.input_tokens, c.normalized.output_tokens) for c in live] == [(100, 10)] * 3
    findings = replay_records(run_dir, report, records).findings
    assert not [f for f in findings if f.kind == "token_ambiguous"], findings


# --- the direct path (decoded bodies straight to the builder) is the assembly's ------------

LLM_FIXTURES = Path(__file__).resolve().parents[1] / "collectors" / "test_llm"
ENDPOINTS = {"/v1/messages": "anthropic", "/v1/chat/completions": "openai_chat", "/v1/responses": "openai_responses"}


def _both(exchange_: HttpExchange, request, response):
    from collectors.proxy._rederive import _assembled, _built

    from collectors.llm import classify

    kind = classify(exchange_.method, exchange_.host, exchange_.path)
    return _built(exchange_, kind, request, response), _assembled(exchange_, request, response)


def test_decoded_bodies_built_directly_give_the_assemblys_call_on_every_fixture():
    compared = 0
    for path, prefix in ENDPOINTS.items():
        requests = [f.read_bytes() for f in sorted(LLM_FIXTURES.glob(f"{prefix}_request*.json"))]
        responses = [f for f in sorted(LLM_FIXTURES.iterdir()) if f.name.startswith(prefix.split("_")[0])
                     and "request" not in f.name]
        for request in requests:
            for response_file in responses:
                data = response_file.read_bytes()
                ctype = "text/event-stream" if response_file.suffix == ".sse" else "application/json"
                for status, error, body in ((200, None, data), (200, "peer closed", data[: len(data) // 2]),
                                            (429, None, data), (200, None, b""), (None, "refused", None)):
                    ex = exchange(path=path, status=status, error=error,
                                  response_headers=[("content-type", ctype), ("content-encoding", "gzip")])
                    kept = None if body is None else (body, "http.response_body")
                    built, (assembled, why) = _both(ex, (request, "http.request_body"), kept)
                    assert why is None and built == assembled, (path, response_file.name, status, error)
                    compared += 1
    assert compared > 100


@settings(max_examples=200, deadline=None)
@given(request=st.binary(max_size=300), response=st.one_of(st.none(), st.binary(max_size=300)),
       path=st.sampled_from(sorted(ENDPOINTS)), status=st.sampled_from([200, 400, 500, None]),
       error=st.sampled_from([None, "cut"]), ctype=st.sampled_from(["application/json", "text/event-stream", "x/y"]))
def test_decoded_bodies_built_directly_give_the_assemblys_call_on_any_bytes(request, response, path, status, error,
                                                                             ctype):
    ex = exchange(path=path, status=status, error=error, response_headers=[("content-type", ctype)])
    built, (assembled, why) = _both(ex, (request, "http.request_body"),
                                    None if response is None else (response, "http.response_body"))
    assert why is None and built == assembled


# --- the Gemini API: exchanges recorded before the proxy read them -------------------------

GEMINI_FIXTURES = Path(__file__).resolve().parents[1] / "collectors" / "test_llm_gemini"
GEMINI_PATHS = {  # fixture -> (host, path, content type, request)
    "gemini_stream.sse": ("generativelanguage.googleapis.com",
                          "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", "text/event-stream", None),
    "gemini_stream_array.json": ("generativelanguage.googleapis.com",
                                 "/v1beta/models/gemini-flash-latest:streamGenerateContent", "application/json", None),
    "gemini_response.json": ("generativelanguage.googleapis.com", "/v1beta/models/gemini-2.5-pro:generateContent",
                             "application/json", None),
    "gemini_vertex_stream.sse": ("aiplatform.googleapis.com", "/v1beta1/projects/p/locations/global/publishers/google"
                                 "/models/gemini-2.5-flash:streamGenerateContent?alt=sse", "text/event-stream", None),
    "gemini_code_assist_stream.sse": ("cloudcode-pa.googleapis.com", "/v1internal:streamGenerateContent?alt=sse",
                                      "text/event-stream", b'{"model": "gemini-2.5-pro", "request": {}}'),
    "gemini_stream_midstream_error.sse": ("aiplatform.googleapis.com", "/v1/publishers/google/models/"
                                          "gemini-2.5-flash:streamGenerateContent?alt=sse", "text/event-stream", None),
}


def live_call(path: str, ctype: str, request: bytes, response: bytes) -> LlmCall:
    """The call the proxy builds as the exchange passes."""
    from collectors.llm import LlmCallBuilder, classify, path_model

    builder = LlmCallBuilder(*classify("POST", "h", path), url_model=path_model(path))
    builder.request(request)
    builder.response_start(200, [("content-type", ctype)])
    builder.response_data(response)
    return builder.finish()


def test_every_gemini_call_rebuilt_from_its_kept_bodies_is_the_live_one_both_ways():
    for name, (host, path, ctype, request) in GEMINI_PATHS.items():
        request = request or (GEMINI_FIXTURES / "gemini_request.json").read_bytes()
        response = (GEMINI_FIXTURES / name).read_bytes()
        ex = exchange(host=host, path=path, response_headers=[("content-type", ctype), ("content-encoding", "gzip")])
        built, (assembled, why) = _both(ex, (request, "http.request_body"), (response, "http.response_body"))
        assert why is None and built == assembled == live_call(path, ctype, request, response), name
        assert built.provider in ("gemini", "vertex", "code_assist") and built.served_model is not None


def test_a_gemini_exchange_recorded_without_a_call_gets_it_on_replay(tmp_path):
    """A run recorded before the proxy read Gemini kept the exchange and its bodies, and
    no llm.call: replay builds it, with its usage."""
    host, path, ctype, _ = GEMINI_PATHS["gemini_stream.sse"]
    request = (GEMINI_FIXTURES / "gemini_request.json").read_bytes()
    response = (GEMINI_FIXTURES / "gemini_stream.sse").read_bytes()
    run_dir = tmp_path / "gemini"
    key = ensure_operator_key()
    run_dir.mkdir()
    blobs = BlobStore(run_dir / "blobs")
    with LedgerWriter(run_dir / "ledger", run_id="gemini", key=key, blobs=blobs) as w:
        w.append(RunStarted(run_id="gemini", caisson_version="0"), source="recorder")
        req, resp = blobs.put(request), blobs.put(response)
        w.append(BlobStored(sha256=req, size_bytes=len(request), role="http.request_body"), source="proxy")
        w.append(BlobStored(sha256=resp, size_bytes=len(response), role="http.response_body"), source="proxy")
        w.append(HttpExchange(method="POST", scheme="https", host=host, port=443, path=path, status=200,
                              request_bytes=len(request), response_bytes=len(response),
                              response_headers=[("content-type", ctype)], request_body_sha256=req,
                              response_body_sha256=resp), source="proxy")
        w.append(RunEnded(exit_code=0, duration_ns=10**9), source="recorder")
    [result] = replay_runs([run_dir], key.verify_key, write=False)
    done = result.rederived
    assert done.llm_calls == 1 and done.changed == ["seq 3 http.exchange: llm.call rebuilt where none was written live"]
    [call] = done.usage
    assert call == live_call(path, ctype, request, response)
    assert (call.normalized.input_tokens, call.normalized.output_tokens, call.normalized.total_tokens) == (
        219, 171, 390)
    assert not [f for f in result.findings if f.detector.startswith("model.unrecognised_call")]


# --- issue 29: an old ledger whose transcript says it failed, refused, or gave placeholders --

CLAUDE_GOLDEN = Path(__file__).parent / "test_transcripts_claude"
ZEROS = LlmUsage(input_tokens=0, output_tokens=0, total_tokens=0, cache_read_tokens=0, cache_write_tokens=0,
                 rule="anthropic.messages (old rule)")


def record_run_read_by_the_old_parser(run_dir: Path, stdout: bytes, live: list, arm: RunArm | None = None) -> Path:
    """A Claude Code run as claude-code.transcript@2 recorded it: ``live`` are the events it
    wrote from ``stdout``, which the run kept as its stdout blob."""
    key = ensure_operator_key()
    run_dir.mkdir(parents=True)
    blobs = BlobStore(run_dir / "blobs")
    with LedgerWriter(run_dir / "ledger", run_id=run_dir.name, key=key, blobs=blobs) as w:
        w.append(RunStarted(run_id=run_dir.name, caisson_version="0", arm=arm,
                            env={"CODING_KNOWLEDGE_INJECTION": "0"},  # the chamber's pinned switch: env_inheritance clean
                            agent=RunAgent(name="claude-code", gating="enforced", version="2.1.328")),
                 source="recorder")
        for event in live:
            w.append(event, source="transcript")
        w.append(BlobStored(sha256=blobs.put(stdout), size_bytes=len(stdout), role="stdout", media_type="text/plain"),
                 source="recorder")
        w.append(RunEnded(exit_code=0, duration_ns=10**9), source="recorder")
    return run_dir


def test_replay_of_an_old_api_error_run_drops_its_answer_adds_the_errors_and_names_the_parsers(tmp_path):
    from caisson.replay import replay_streams
    from ledger import verify_and_read
    from ledger.events import AgentAnswer, AgentError, AgentTools

    stdout = (CLAUDE_GOLDEN / "api_error_oauth_org.jsonl").read_bytes()
    text = json.loads(stdout.splitlines()[-1])["result"]
    live = [AgentTools(agent="claude-code", surface="init", tools=["Bash", "Read", "Write"], model="claude-sonnet-4-5"),
            AgentAnswer(agent="claude-code", text=text),  # the error's text, scored as the answer
            AgentUsage(agent="claude-code", token_source="claude-code result.usage", parser="claude-code.transcript@2",
                       usage=json.loads(stdout.splitlines()[-1])["usage"], normalized=ZEROS, cost_usd=0.0)]
    run = record_run_read_by_the_old_parser(tmp_path / "api_error", stdout, live)
    key = ensure_operator_key().verify_key
    [result] = replay_runs([run], key)
    done = result.rederived
    assert done.versions["claude-code"] == "claude-code.transcript@3"
    zeros = ("result.usage reports 0 tokens on a result that reports a failure: a placeholder (Claude Code writes zeros"
             " where no call's usage was counted), not a measurement")
    assert done.changed == [
        "seq 4 stdout: re-read by claude-code.transcript@3 (live: claude-code.transcript@2)",
        "seq 4 stdout agent.usage: input_tokens 0 -> null",
        "seq 4 stdout agent.usage: output_tokens 0 -> null",
        "seq 4 stdout agent.usage: total_tokens 0 -> null",
        "seq 4 stdout agent.usage: cache_read_tokens 0 -> null",
        "seq 4 stdout agent.usage: cache_write_tokens 0 -> null",
        f"seq 4 stdout agent.usage: usage missing reason null -> {zeros}",
        "seq 4 stdout agent.usage: cost_usd 0.0 -> null",
        "seq 4 stdout agent.usage: cost missing reason null -> total_cost_usd 0 on a result that reports a failure:"
        " a placeholder (Claude Code writes 0 where no call was priced), not a computed cost",
        f"seq 4 stdout agent.answer: {text[:77]!r}"[:-1] + "...' -> null",
        "seq 4 stdout agent.error: none -> assistant.is_api_error_message oauth_org_not_allowed status 400 (terminal);"
        " result.is_error api_error status 400 (terminal)",
        "seq 4 stdout transcript events: 3 live -> 4 rebuilt",
    ]
    saved = json.loads((run / FINDINGS_FILE).read_text())["rederived"]
    assert saved["changed"] == done.changed and saved["usage"][0]["cost_missing_reason"].startswith("total_cost_usd 0")
    # the verdict: read live, an answer and no error (clean); re-read, the agent's own error voids it
    assert result.status == "void"
    assert [(f.detector, f.evidence) for f in result.findings if f.effect == "void"] == [("infra.in_band@1", [4])]
    report, records = verify_and_read(run, key)
    _, [rebuilt] = replay_streams(run, report, records, extra=[(AgentAnswer, AgentError)])
    assert [type(r.event).__name__ for r in rebuilt] == ["AgentError", "AgentError"]  # what the detectors read
    assert all(r.seq == 4 for r in rebuilt)  # the stdout blob is their evidence


def test_replay_of_an_old_run_whose_refused_read_was_read_as_errored_is_no_longer_void(tmp_path):
    """Issue 29 item 2: the arm does not grant Read; the old parser called the refused Read
    errored, so tool_escape voided the cell; today's parser reads the refusal's words."""
    from ledger.events import AgentAnswer, AgentTools, AgentToolResult

    stdout = (CLAUDE_GOLDEN / "path_deny_read.jsonl").read_bytes()
    calls = [json.loads(line) for line in stdout.splitlines() if b'"tool_use"' in line]
    live = [AgentTools(agent="claude-code", surface="init", tools=["Bash", "Read", "Write"], model="claude-sonnet-4-5")]
    live += [AgentToolCall(agent="claude-code", call_id=b["id"], tool=b["name"], input=b["input"])
             for c in calls for b in c["message"]["content"]]
    live += [AgentToolResult(agent="claude-code", call_id="toolu_01Read", tool="Read", outcome="errored"),
             AgentToolResult(agent="claude-code", call_id="toolu_01Cat", tool="Bash", outcome="errored"),
             AgentToolResult(agent="claude-code", call_id="toolu_01Echo", tool="Bash", outcome="errored"),
             AgentToolResult(agent="claude-code", call_id="toolu_01Curl", tool="Bash", outcome="refused"),
             AgentAnswer(agent="claude-code", text="I could not read secretdir/key.txt."),
             usage_of_golden(stdout)]
    arm = RunArm(name="bash-only", grant=["Bash"], deny=[])  # Read is in the session; a settings path rule denies it
    run = record_run_read_by_the_old_parser(tmp_path / "refused", stdout, live, arm=arm)
    [result] = replay_runs([run], ensure_operator_key().verify_key, write=False)
    assert result.rederived.changed == [
        "seq 12 stdout: re-read by claude-code.transcript@3 (live: claude-code.transcript@2)",
        "seq 12 stdout agent.tool_result toolu_01Read: errored -> refused"]
    assert result.status == "clean", result.reasons  # read live: void, tool_escape of Read (errored)
    assert [(f.kind, f.evidence) for f in result.findings if f.kind.startswith("tool_")] == [("tool_refused", [12])]


def usage_of_golden(stdout: bytes) -> AgentUsage:
    """The agent.usage today's parser gives, as the old one wrote it (its parser name)."""
    import msgspec

    from caisson.agents import claude_code
    from tests.caisson.transcripts import parse, usage_of

    return msgspec.structs.replace(usage_of(parse(claude_code.TranscriptParser, stdout)),
                                   parser="claude-code.transcript@2")
