"""OpenCode's transcript parser on golden transcripts recorded from the real CLI
(opencode-ai 1.18.33 in the agent image, on the scripted model): refused_errored.jsonl is
scenarios/model/opencode_grep.toml under an arm that grants bash and read (write refused,
a read of a missing file errored); model_error.jsonl is codex_grep.toml, whose second turn
does not match, so the model call fails and the run is cut. Fed whole, byte at a time, at
any split, with trailing junk."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from caisson.agents import ADAPTERS, opencode
from ledger.events import AgentAnswer, AgentToolResult, WitnessRaw, decode_event
from tests.caisson.transcripts import parse as _parse
from tests.caisson.transcripts import usage_of

GOLDEN = Path(__file__).with_suffix("")
REFUSED_ERRORED = (GOLDEN / "refused_errored.jsonl").read_bytes()
MODEL_ERROR = (GOLDEN / "model_error.jsonl").read_bytes()


def parse(data: bytes, sizes: list[int] | None = None) -> list:
    return _parse(opencode.TranscriptParser, data, sizes)


def test_executed_refused_and_errored_calls_the_answer_and_usage_matching_the_proxy():
    events = parse(REFUSED_ERRORED)
    assert [(e.tool, e.outcome) for e in events if isinstance(e, AgentToolResult)] == [
        ("bash", "executed"), ("write", "refused"), ("read", "errored")]
    assert [e.text for e in events if isinstance(e, AgentAnswer)] == ["`answer` is defined in src/app.py:1"]
    use = usage_of(events)
    assert use.usage == {"input": 900, "output": 82, "reasoning": 5, "cache_read": 3600, "cache_write": 0}
    # the proxy's four llm.call of that run: input 1000 + 1090 + 1160 + 1250, output 25 + 30 + 20 + 12
    assert (use.normalized.input_tokens, use.normalized.output_tokens) == (4500, 87)
    assert use.normalized.rules["output_tokens"].startswith(opencode.OUTPUT_RULE)
    assert use.incomplete is None


def test_a_failed_model_call_cuts_the_run_incomplete_with_its_error_and_usage_null():
    events = parse(MODEL_ERROR)
    assert [(e.tool, e.outcome) for e in events if isinstance(e, AgentToolResult)] == [("exec_command", "refused")]
    assert not any(isinstance(e, AgentAnswer) for e in events)
    use = usage_of(events)
    assert use.normalized is None and use.usage["input"] == 500
    assert "terminal step_finish (reason stop)" in use.incomplete and "turn 1 does not match" in use.incomplete


def test_a_transcript_cut_mid_line_is_incomplete():
    cut = REFUSED_ERRORED[: REFUSED_ERRORED.rindex(b'{"type":"step_finish"') + 40]
    use = usage_of(parse(cut))
    assert use.normalized is None and "its last line was cut mid-way" in use.incomplete


def test_byte_at_a_time_gives_the_same_events():
    assert parse(REFUSED_ERRORED, [1] * len(REFUSED_ERRORED)) == parse(REFUSED_ERRORED)


@settings(max_examples=40, deadline=None)
@given(cuts=st.lists(st.integers(0, 3000), max_size=8))
def test_any_split_gives_the_same_events(cuts):
    assert parse(REFUSED_ERRORED, cuts) == parse(REFUSED_ERRORED)


def test_trailing_junk_is_kept_raw_and_marks_the_transcript_cut():
    events = parse(REFUSED_ERRORED + b"\x00\xff junk")
    assert any(isinstance(e, WitnessRaw) and "junk" in e.line for e in events)
    assert "its last line was cut mid-way" in usage_of(events).incomplete


SHAPES = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5) | st.sampled_from(
    ["step_start", "text", "tool_use", "step_finish", "error", "stop", "tool-calls", "invalid", "completed"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(
        ["type", "part", "tool", "callID", "state", "status", "input", "output", "reason", "tokens", "cache",
         "read", "write", "reasoning", "text", "error", "data", "message"]), inner, max_size=5), max_leaves=14)


@settings(max_examples=200, deadline=None)
@given(objects=st.lists(SHAPES, max_size=6))
def test_any_lines_never_raise_and_give_one_usage_that_is_null_or_flagged(objects):
    events = parse(b"".join(json.dumps(o).encode() + b"\n" for o in objects))
    for event in events:
        assert decode_event(msgspec.msgpack.encode(event)) == event
    use = usage_of(events)
    assert use.normalized is not None or use.usage_missing_reason


def test_the_arm_becomes_the_pinned_configs_permissions_deny_winning():
    argv = ADAPTERS["opencode"].command("Where?", allowed=["bash", "write"], denied=["edit", "webfetch"],
                                        model="gpt-5")
    config = json.loads(argv[1].removeprefix("OPENCODE_CONFIG_CONTENT="))
    assert config["permission"] == {"bash": "allow", "edit": "deny", "webfetch": "deny"}  # write shares edit's key
    assert config["model"] == "caisson/gpt-5" and config["provider"]["caisson"]["options"]["baseURL"] == (
        "https://api.openai.com/v1")
    assert argv[2:] == ["opencode", "run", "--format", "json", "--title", "caisson", "Where?"]
