"""GitHub Copilot CLI's transcript parser on a golden transcript recorded from the real CLI
(1.0.102 in BYOK mode, in the agent image, through the proxy to the scripted model:
scenarios/model/copilot_grep.toml under an arm that grants bash and view and withholds
create). Fed whole, byte at a time, at any split, cut, and with trailing junk."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from caisson.agents import ADAPTERS, copilot
from ledger.events import AgentAnswer, AgentToolResult, WitnessRaw, decode_event
from tests.caisson.transcripts import parse as _parse
from tests.caisson.transcripts import usage_of

GOLDEN = Path(__file__).with_suffix("")
REFUSED_ERRORED = (GOLDEN / "refused_errored.jsonl").read_bytes()


def parse(data: bytes, sizes: list[int] | None = None) -> list:
    return _parse(copilot.TranscriptParser, data, sizes)


def test_executed_refused_and_errored_calls_and_the_answer():
    events = parse(REFUSED_ERRORED)
    assert [(e.tool, e.outcome, e.excerpt[:28]) for e in events if isinstance(e, AgentToolResult)] == [
        ("bash", "executed", "./src/app.py:1:def answer():"), ("create", "refused", "Tool 'create' does not exist"),
        ("view", "errored", "Path does not exist")]
    assert [e.text for e in events if isinstance(e, AgentAnswer)] == ["`answer` is defined in src/app.py:1"]


def test_usage_has_no_token_counts_and_says_so_never_zero():
    use = usage_of(parse(REFUSED_ERRORED))
    assert use.normalized is None and use.usage_missing_reason == copilot.NO_TOKENS
    assert use.usage["premiumRequests"] == 0 and use.incomplete is None


def test_a_transcript_cut_before_its_result_line_is_incomplete_and_a_started_call_unknown():
    cut = REFUSED_ERRORED[: REFUSED_ERRORED.index(b'"type":"tool.execution_complete"')]
    cut = cut[: cut.rindex(b"\n") + 1]
    events = parse(cut)
    assert [(e.tool, e.outcome) for e in events if isinstance(e, AgentToolResult)] == [("bash", "unknown")]
    assert not any(isinstance(e, AgentAnswer) for e in events)
    assert "terminal result event" in usage_of(events).incomplete


def test_byte_at_a_time_gives_the_same_events():
    assert parse(REFUSED_ERRORED, [1] * len(REFUSED_ERRORED)) == parse(REFUSED_ERRORED)


@settings(max_examples=30, deadline=None)
@given(cuts=st.lists(st.integers(0, 5000), max_size=8))
def test_any_split_gives_the_same_events(cuts):
    assert parse(REFUSED_ERRORED, cuts) == parse(REFUSED_ERRORED)


def test_trailing_junk_is_kept_raw_and_marks_the_transcript_cut():
    events = parse(REFUSED_ERRORED + b"\x00\xff junk")
    assert any(isinstance(e, WitnessRaw) and "junk" in e.line for e in events)
    assert "its last line was cut mid-way" in usage_of(events).incomplete


SHAPES = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5) | st.sampled_from(
    ["result", "assistant.message", "tool.execution_start", "tool.execution_complete", "session.x"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(
        ["type", "data", "toolCallId", "toolName", "arguments", "toolRequests", "name", "content", "success",
         "error", "message", "result", "usage"]), inner, max_size=5), max_leaves=14)


@settings(max_examples=200, deadline=None)
@given(objects=st.lists(SHAPES, max_size=6))
def test_any_lines_never_raise_and_give_one_usage_that_says_why_it_is_null(objects):
    events = parse(b"".join(json.dumps(o).encode() + b"\n" for o in objects))
    for event in events:
        assert decode_event(msgspec.msgpack.encode(event)) == event
    assert usage_of(events).usage_missing_reason


def test_the_deny_list_goes_to_excluded_tools_and_deny_tool():
    argv = ADAPTERS["copilot"].command("Where?", allowed=["bash"], denied=["create", "edit"], model="gpt-5")
    assert argv[argv.index("--excluded-tools"):] == ["--excluded-tools", "create", "edit", "--deny-tool", "create",
                                                     "edit"]
    assert ADAPTERS["copilot"].env["COPILOT_PROVIDER_BASE_URL"] == "https://api.openai.com/v1"
