"""The agents' session files: sans-IO parsers on golden files recorded from the real CLIs
(whole, byte at a time, at hypothesis splits, with trailing junk, cut), their combination,
and the recorder's bounded collection from a config home."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from caisson.agents.sessionfiles import ClaudeSessionParser, CodexRolloutParser, session_usage
from caisson.run.sessionfiles import ROLE, collect_session_files
from ledger import BlobStore, drain
from ledger.events import AgentSessionFile, BlobStored

GOLDEN = Path(__file__).parent / "test_sessionfiles"
CLAUDE = (GOLDEN / "claude_session.jsonl").read_bytes()  # Claude Code 2.1.328, grep_then_answer.toml
CODEX = (GOLDEN / "codex_rollout.jsonl").read_bytes()  # codex-cli 0.171.0, codex_grep.toml
CLAUDE_PATH = ".claude/projects/-work-sandbox/244fe163-0a7d-4920-88a9-ac12d821ddcd.jsonl"
CODEX_PATH = ".codex/sessions/2026/11/30/rollout-2026-11-30T20-05-15-01a22e0f-c53b-7be0-bf5f-765d48087d45.jsonl"


def _figure(usage):
    n = usage.normalized
    return None if n is None else (n.input_tokens, n.output_tokens, n.total_tokens)


def test_claude_session_whole_gives_the_transcripts_own_figure():
    usage = session_usage([(CLAUDE_PATH, CLAUDE)])
    # the same as the live result.usage of that run (tests/caisson/test_agents.py): 5956 in, 52 out
    assert _figure(usage) == (5956, 52, 6008)
    assert usage.usage == {"cache_creation_input_tokens": 2048, "cache_read_input_tokens": 2948,
                           "input_tokens": 960, "output_tokens": 52}
    assert usage.cost_usd == 0.0122244 and "claude-sonnet-4-5" in usage.by_model
    assert (usage.agent, usage.parser) == ("claude-code", "claude-code.session@1")
    assert usage.token_source == "claude-code session files (messages[].usage)"


def test_codex_rollout_whole_takes_the_last_running_total():
    usage = session_usage([(CODEX_PATH, CODEX)])
    assert _figure(usage) == (1480, 42, 1522)  # the last token_count, never the two summed (2252)
    assert usage.normalized.cache_read_tokens == 900 and usage.parser == "codex.rollout@1"


def _parse(cls, chunks):
    parser = cls()
    for chunk in chunks:
        parser.feed(chunk)
    parser.close()
    return parser


def _state(parser):
    if isinstance(parser, ClaudeSessionParser):
        return parser.messages, parser.cost_usd, parser.incomplete
    return parser.thread, parser.totals, parser.incomplete


def test_byte_at_a_time_equals_whole():
    for cls, data in ((ClaudeSessionParser, CLAUDE), (CodexRolloutParser, CODEX)):
        whole = _state(_parse(cls, [data]))
        assert whole[2] is None
        assert _state(_parse(cls, [data[i:i + 1] for i in range(len(data))])) == whole


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(CODEX)), max_size=8),
       st.lists(st.integers(min_value=0, max_value=len(CLAUDE)), max_size=8))
def test_any_split_equals_whole(codex_cuts, claude_cuts):
    for cls, data, cuts in ((CodexRolloutParser, CODEX, codex_cuts), (ClaudeSessionParser, CLAUDE, claude_cuts)):
        points = [0, *sorted(cuts), len(data)]
        chunks = [data[a:b] for a, b in zip(points, points[1:])]
        assert _state(_parse(cls, chunks)) == _state(_parse(cls, [data]))


def test_trailing_junk_line_is_kept_raw_and_a_cut_last_line_makes_the_file_incomplete():
    junk = session_usage([(CLAUDE_PATH, CLAUDE + b"this is not json\n")])
    assert _figure(junk) == (5956, 52, 6008)  # a whole junk line after the terminal event: kept raw
    parser = _parse(ClaudeSessionParser, [CLAUDE + b"this is not json\n"])
    assert [e.line for e in drain(parser)] == ["this is not json"]
    cut = session_usage([(CODEX_PATH, CODEX + b'{"type":"event_msg","payl')])
    assert cut.normalized is None and "last line was cut" in cut.usage_missing_reason


def test_a_file_without_its_terminal_event_gives_no_figure():
    lines = CLAUDE.splitlines(keepends=True)
    cut = session_usage([(CLAUDE_PATH, b"".join(lines[:-3]))])  # before cost-state: the session did not end
    assert cut.normalized is None
    assert cut.usage_missing_reason == (f"{CLAUDE_PATH}: transcript ended without its terminal cost-state event")
    codex = session_usage([(CODEX_PATH, b"".join(l for l in CODEX.splitlines(keepends=True)
                                                   if b'"task_complete"' not in l))])
    assert codex.normalized is None and "task_complete" in codex.usage_missing_reason


def test_files_combine_once_per_response_and_thread():
    copy = CLAUDE_PATH.replace("244fe163", "resumed0")
    assert _figure(session_usage([(CLAUDE_PATH, CLAUDE), (copy, CLAUDE)])) == (5956, 52, 6008)  # same message ids
    twice = session_usage([(CODEX_PATH, CODEX), (CODEX_PATH.replace("rollout-", "rollout-x"), CODEX)])
    assert twice.normalized is None and "in two rollout files" in twice.usage_missing_reason
    mixed = session_usage([(CLAUDE_PATH, CLAUDE), (CODEX_PATH, CODEX)])
    assert mixed.normalized is None and mixed.usage_missing_reason.startswith("session files of 2 agents")
    assert session_usage([(".claude/settings.json", b"{}"), ("notes.jsonl", CLAUDE)]) is None


def test_collection_stores_matching_files_bounded_and_never_follows_links(tmp_path):
    home = tmp_path / "home"
    (home / ".claude/projects/-work-sandbox").mkdir(parents=True)
    (home / ".codex/sessions/2026/11/30").mkdir(parents=True)
    (home / ".claude/projects/-work-sandbox/a.jsonl").write_bytes(CLAUDE)
    (home / ".claude/projects/-work-sandbox/big.jsonl").write_bytes(b"x" * 2000)
    (home / ".claude/telemetry.json").write_bytes(b"{}")  # not a session file: not collected
    secret = tmp_path / "host-secret"
    secret.write_text("host only")
    os.symlink(secret, home / ".claude/projects/-work-sandbox/link.jsonl")
    os.symlink(tmp_path, home / ".codex/sessions/2026/11/30/dir")  # a linked directory is not walked
    (home / ".codex/sessions/2026/11/30/rollout-1.jsonl").write_bytes(CODEX[:100])
    store = BlobStore(tmp_path / "blobs")
    events = collect_session_files(home, store, file_cap=len(CLAUDE), total_cap=len(CLAUDE) + 50)
    files = [e for e in events if isinstance(e, AgentSessionFile)]
    assert [(f.path, f.size_bytes, f.skipped) for f in files] == [
        (".claude/projects/-work-sandbox/a.jsonl", len(CLAUDE), None),
        (".claude/projects/-work-sandbox/big.jsonl", 2000,
         f"2000 bytes: the total cap of {len(CLAUDE) + 50} bytes is reached"),
        (".claude/projects/-work-sandbox/link.jsonl", 0, "cannot open: Too many levels of symbolic links"),
        (".codex/sessions/2026/11/30/rollout-1.jsonl", 100, "100 bytes: the total cap of"
         f" {len(CLAUDE) + 50} bytes is reached"),
    ]
    [blob] = [e for e in events if isinstance(e, BlobStored)]
    assert (blob.role, blob.sha256) == (ROLE, files[0].blob_sha256) and store.get(blob.sha256) == CLAUDE
    over = collect_session_files(home, BlobStore(tmp_path / "b2"), file_cap=1000)
    assert [f.skipped for f in over if isinstance(f, AgentSessionFile)][:2] == [
        f"{len(CLAUDE)} bytes, over the cap of 1000", "2000 bytes, over the cap of 1000"]


_JSON = st.recursive(st.none() | st.booleans() | st.integers(-5, 10**12) | st.text(max_size=5),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                     max_leaves=12)
_USAGE = st.dictionaries(st.sampled_from(["input_tokens", "output_tokens", "cache_read_input_tokens",
                                          "cached_input_tokens", "total_tokens"]), _JSON, max_size=4)
_LINE = st.one_of(
    st.fixed_dictionaries({"type": st.just("assistant"), "message": st.fixed_dictionaries(
        {"id": st.one_of(st.text(max_size=3), _JSON), "usage": st.one_of(_USAGE, _JSON)})}),
    st.fixed_dictionaries({"type": st.just("cost-state"), "totalCostUSD": _JSON, "modelUsage": _JSON}),
    st.fixed_dictionaries({"type": st.just("event_msg"), "payload": st.fixed_dictionaries(
        {"type": st.sampled_from(["token_count", "task_complete"]),
         "info": st.one_of(_JSON, st.fixed_dictionaries({"total_token_usage": st.one_of(_USAGE, _JSON)}))})}),
    st.fixed_dictionaries({"type": st.just("session_meta"), "payload": st.dictionaries(st.just("id"), _JSON)}),
    _JSON)


@settings(max_examples=150, deadline=None)
@given(st.lists(_LINE, max_size=6), st.binary(max_size=40))
def test_garbage_and_odd_shapes_give_a_figure_or_a_reason_never_an_exception(lines, junk):
    import json

    data = b"".join(json.dumps(line).encode() + b"\n" for line in lines) + junk
    for path in (CLAUDE_PATH, CODEX_PATH):
        usage = session_usage([(path, data)])
        assert usage is not None
        assert (usage.normalized is None) == (usage.usage_missing_reason is not None)
        if usage.normalized is not None:
            assert usage.normalized.total_tokens == usage.normalized.input_tokens + usage.normalized.output_tokens


def test_the_last_task_or_response_decides_completeness_and_a_subagent_file_needs_no_end():
    started = b'{"type":"event_msg","payload":{"type":"task_started"}}\n'
    again = session_usage([(CODEX_PATH, CODEX + started)])  # a second task that never completed
    assert again.normalized is None and "task_complete" in again.usage_missing_reason
    reply = (b'{"type":"assistant","message":{"id":"msg_late","usage":{"input_tokens":5,"output_tokens":1}}}\n')
    assert session_usage([(CLAUDE_PATH, CLAUDE + reply)]).normalized is None  # a response after cost-state
    sub = CLAUDE_PATH.replace(".jsonl", "/subagents/agent-1.jsonl")
    both = session_usage([(CLAUDE_PATH, CLAUDE), (sub, reply)])
    assert _figure(both) == (5956 + 5, 52 + 1, 6008 + 6)
    cut = session_usage([(CLAUDE_PATH, CLAUDE), (sub, reply[:-10])])
    assert cut.normalized is None and "cut" in cut.usage_missing_reason
