"""Transcript accounting faults of issue 19, each a kind: a running total summed (Codex),
unknown filled with 0, an item shape dropped, a status trusted (Codex), a transcript cut
mid-line (every adapter). Parsers are fed whole, byte at a time, at any split, and with
trailing junk: the events must not depend on the chunking."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from caisson.agents import claude_code, codex
from ledger.events import AgentAnswer, AgentToolCall, AgentToolResult, AgentUsage, WitnessRaw, decode_event
from tests.caisson.transcripts import parse, usage_of


def lines(*objects: dict) -> bytes:
    return b"".join(json.dumps(o).encode() + b"\n" for o in objects)


def turn(input_tokens: int, output_tokens: int, **more: int) -> dict:
    return {"type": "turn.completed", "usage": {"input_tokens": input_tokens, "cached_input_tokens": 0,
                                                "output_tokens": output_tokens, **more}}


# --- 3. a running total summed (Codex exec --json) ----------------------------------------

STARTED = {"type": "thread.started", "thread_id": "t"}
TURN = {"type": "turn.started"}


def test_issue_example_codex_running_totals_are_not_summed():
    data = lines(STARTED, TURN, turn(3000, 100, reasoning_output_tokens=20),
                 TURN, turn(6500, 180, reasoning_output_tokens=50))
    use = usage_of(parse(codex.TranscriptParser, data))
    assert use.normalized.input_tokens == 6500  # not 9500
    assert (use.normalized.output_tokens, use.normalized.total_tokens) == (180, 6680)
    assert use.usage == {"input_tokens": 6500, "cached_input_tokens": 0, "output_tokens": 180,
                         "reasoning_output_tokens": 50}
    assert use.normalized.sources == {"usage": "turn.completed #2 (cumulative: the last, never summed)"}
    assert use.normalized.rules["input_tokens"] == "codex.turn_usage.cumulative@1+openai.responses.input_tokens@1"
    assert use.token_source == "codex turn.completed usage (cumulative, codex 0.171.0)"
    assert use.parser == "codex.transcript@3" and use.incomplete is None and use.usage_missing_reason is None


def test_codex_per_turn_shape_sums_turns_and_an_unreported_count_stays_unknown():
    data = lines(STARTED, TURN, turn(3000, 100, reasoning_output_tokens=20), TURN, turn(3500, 80))
    use = usage_of(parse(lambda: codex.TranscriptParser(shape=codex.PER_TURN), data))
    assert (use.normalized.input_tokens, use.normalized.output_tokens) == (6500, 180)
    assert use.normalized.reasoning_tokens is None  # the second turn did not say: unknown, never 0 + 20
    assert use.usage["reasoning_output_tokens"] is None


def test_codex_a_version_of_unknown_shape_gives_null_for_several_turns_and_the_figure_for_one():
    two = lines(STARTED, TURN, turn(3000, 100), TURN, turn(6500, 180))
    use = usage_of(parse(lambda: codex.TranscriptParser(version="0.1.0"), two))
    assert use.normalized is None
    assert use.usage_missing_reason == ("2 turns and the meaning of turn.completed.usage in codex 0.1.0 is unknown"
                                        " (per turn or running total)")
    one = usage_of(parse(lambda: codex.TranscriptParser(version="0.1.0"), lines(STARTED, TURN, turn(3000, 100))))
    assert one.normalized.input_tokens == 3000


def test_codex_a_running_total_that_decreases_is_not_a_running_total():
    data = lines(STARTED, TURN, turn(3000, 100), TURN, turn(2000, 150))
    use = usage_of(parse(codex.TranscriptParser, data))
    assert use.normalized is None
    assert use.usage_missing_reason.startswith("input_tokens decreases across turns ([3000, 2000])")


def test_every_known_codex_version_has_a_shape():
    assert codex.usage_shape(codex.VERSION) == codex.CUMULATIVE


# --- 4. unknown filled with 0, a shape dropped, a status trusted (Codex) ------------------


def test_issue_example_codex_reasoning_not_reported_is_null():
    use = usage_of(parse(codex.TranscriptParser, lines(STARTED, TURN, turn(3000, 100))))
    assert use.normalized.reasoning_tokens is None  # not 0
    assert use.normalized.cache_read_tokens == 0  # reported as 0: a measured 0
    assert "reasoning_tokens" not in use.normalized.rules


def test_issue_example_codex_item_type_spelling_is_read():
    item = {"id": "item_1", "item_type": "command_execution", "command": "ls", "status": "in_progress"}
    done = dict(item, status="completed", exit_code=0, aggregated_output="a\n")
    answer = {"id": "item_2", "item_type": "assistant_message", "text": "done"}
    data = lines(STARTED, TURN, {"type": "item.started", "item": item}, {"type": "item.completed", "item": done},
                 {"type": "item.completed", "item": answer}, turn(10, 2))
    events = parse(codex.TranscriptParser, data)
    assert [(e.call_id, e.tool, e.input) for e in events if isinstance(e, AgentToolCall)] == [
        ("item_1", "exec_command", {"command": "ls"})]
    assert [(e.call_id, e.outcome) for e in events if isinstance(e, AgentToolResult)] == [("item_1", "executed")]
    assert [e.text for e in events if isinstance(e, AgentAnswer)] == ["done"]
    assert not [e for e in events if isinstance(e, WitnessRaw)]


def test_issue_example_codex_completed_without_exit_code_is_unknown():
    item = {"id": "c", "type": "command_execution", "command": "sleep 999", "status": "completed", "exit_code": None}
    events = parse(codex.TranscriptParser, lines(STARTED, TURN, {"type": "item.completed", "item": item},
                                                 turn(10, 2)))
    [result] = [e for e in events if isinstance(e, AgentToolResult)]
    assert result.outcome == "unknown" and "without an exit code" in result.excerpt


@pytest.mark.parametrize(("status", "exit_code", "outcome"), [
    ("completed", 0, "executed"), ("completed", 2, "executed"), ("failed", 1, "errored"),
    ("declined", None, "refused"), ("in_progress", None, "unknown"), (None, None, "unknown"),
    ("completed", "0", "unknown"), ("completed", True, "unknown"),
])
def test_codex_command_outcomes(status, exit_code, outcome):
    item = {"id": "c", "type": "command_execution", "command": "x", "status": status, "exit_code": exit_code}
    events = parse(codex.TranscriptParser, lines(STARTED, TURN, {"type": "item.completed", "item": item},
                                                 turn(1, 1)))
    assert [e.outcome for e in events if isinstance(e, AgentToolResult)] == [outcome]


@pytest.mark.parametrize("line", [
    {"type": "turn.compacted", "usage": {"input_tokens": 5}},  # an event type the parser does not know
    {"type": "item.completed", "item": {"id": "x", "type": "collab_call", "text": "?"}},  # an item kind
    {"type": "item.completed", "item": {"id": "x"}},  # an item without any kind
    {"type": "item.completed", "item": "not an object"},
    {"no_type": 1},
])
def test_codex_what_the_parser_does_not_know_is_kept_raw(line):
    events = parse(codex.TranscriptParser, lines(STARTED, TURN, line, turn(1, 1)))
    assert [e.line for e in events if isinstance(e, WitnessRaw)] == [json.dumps(line)]


# --- 5. a transcript cut mid-line (every adapter) ------------------------------------------

CLAUDE = [
    {"type": "system", "subtype": "init", "tools": ["Bash"], "model": "claude-x"},
    {"type": "assistant", "message": {"content": [{"type": "tool_use", "id": "t1", "name": "Bash",
                                                   "input": {"command": "ls"}}],
                                      "usage": {"input_tokens": 5, "output_tokens": 3}}},
]
RESULT = {"type": "result", "subtype": "success", "result": "42", "total_cost_usd": 0.01,
          "usage": {"input_tokens": 12, "cache_read_input_tokens": 100, "output_tokens": 9}}


def test_issue_example_claude_code_cut_mid_line_is_incomplete_and_its_usage_null():
    data = lines(*CLAUDE) + b'{"type":"resu'
    events = parse(claude_code.TranscriptParser, data)
    assert [e.call_id for e in events if isinstance(e, AgentToolCall)] == ["t1"]
    assert [e.line for e in events if isinstance(e, WitnessRaw)] == ['{"type":"resu']
    use = usage_of(events)
    assert use.usage is None and use.normalized is None
    assert use.incomplete == ("transcript ended without its terminal result event; its last line was cut"
                              " mid-way: '{\"type\":\"resu'")
    assert use.usage_missing_reason == use.incomplete
    assert use.parser == "claude-code.transcript@3"


def test_claude_code_without_a_result_line_is_incomplete_even_when_every_line_is_whole():
    use = usage_of(parse(claude_code.TranscriptParser, lines(*CLAUDE)))
    assert use.normalized is None  # the assistant lines' per-message usage is partial: never summed in
    assert use.incomplete == "transcript ended without its terminal result event"


def test_claude_code_complete_transcript_and_a_line_of_unknown_type_kept():
    odd = {"type": "rate_limit_event", "limit": 1}
    events = parse(claude_code.TranscriptParser, lines(*CLAUDE, odd, RESULT))
    use = usage_of(events)
    assert use.incomplete is None and use.usage_missing_reason is None
    assert (use.normalized.input_tokens, use.normalized.output_tokens) == (112, 9)
    assert use.normalized.rules["input_tokens"] == "claude-code.result_usage@1+anthropic.input_sum@1"
    assert use.cost_usd == 0.01
    assert [e.line for e in events if isinstance(e, WitnessRaw)] == [json.dumps(odd)]


def test_claude_code_a_second_result_line_is_not_counted():
    events = parse(claude_code.TranscriptParser, lines(*CLAUDE, RESULT, dict(RESULT, usage={"input_tokens": 1,
                                                                                            "output_tokens": 1})))
    assert usage_of(events).normalized.input_tokens == 112
    assert any(isinstance(e, WitnessRaw) and "second result" in e.line for e in events)


def test_codex_cut_mid_turn_is_incomplete_and_its_usage_null():
    data = lines(STARTED, TURN, turn(3000, 100), TURN) + b'{"type":"turn.compl'
    use = usage_of(parse(codex.TranscriptParser, data))
    assert use.normalized is None and use.usage == turn(3000, 100)["usage"]  # as reported, partial, flagged
    assert use.incomplete == ("transcript ended without its terminal turn.completed event; its last line was cut"
                              " mid-way: '{\"type\":\"turn.compl'")
    assert use.usage_missing_reason == use.incomplete


def test_codex_without_any_turn_is_incomplete():
    use = usage_of(parse(codex.TranscriptParser, lines(STARTED)))
    assert use.usage is None and use.normalized is None
    assert use.incomplete == "transcript ended without its terminal turn.completed event"


def test_codex_a_failed_turn_leaves_usage_unknown():
    data = lines(STARTED, TURN, turn(3000, 100), TURN, {"type": "turn.failed", "error": {"message": "boom"}})
    use = usage_of(parse(codex.TranscriptParser, data))
    assert use.incomplete is None and use.normalized is None
    assert use.usage_missing_reason == "a turn failed without usage: boom"


def test_a_whole_last_line_without_a_newline_is_not_a_cut():
    data = lines(*CLAUDE) + json.dumps(RESULT).encode()
    use = usage_of(parse(claude_code.TranscriptParser, data))
    assert use.incomplete is None and use.normalized.input_tokens == 112


# --- framing: whole, byte at a time, any split, trailing junk ------------------------------

CASES = [
    (claude_code.TranscriptParser, lines(*CLAUDE, RESULT)),
    (claude_code.TranscriptParser, lines(*CLAUDE) + b'{"type":"resu'),
    (codex.TranscriptParser, lines(STARTED, TURN, turn(3000, 100), TURN, turn(6500, 180))),
]


@pytest.mark.parametrize(("factory", "data"), CASES)
def test_byte_at_a_time_gives_the_same_events(factory, data):
    assert parse(factory, data, [1] * len(data)) == parse(factory, data)


@settings(max_examples=60, deadline=None)
@given(case=st.sampled_from(range(len(CASES))), cuts=st.lists(st.integers(0, 40), max_size=12))
def test_any_split_gives_the_same_events(case, cuts):
    factory, data = CASES[case]
    assert parse(factory, data, cuts) == parse(factory, data)


@pytest.mark.parametrize(("factory", "data"), CASES[::2])
def test_trailing_junk_is_kept_raw_and_marks_the_transcript_cut(factory, data):
    events = parse(factory, data + b"\x00\xff junk")
    def rest(evs: list) -> list:
        return [e for e in evs if not isinstance(e, (WitnessRaw, AgentUsage))]

    assert rest(events) == rest(parse(factory, data))
    assert any(isinstance(e, WitnessRaw) and "junk" in e.line for e in events)
    use = usage_of(events)
    assert use.incomplete is not None and "its last line was cut mid-way" in use.incomplete
    assert use.normalized == usage_of(parse(factory, data)).normalized  # the terminal event's usage stands


JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=6),
                       lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                           st.sampled_from(["type", "item", "item_type", "usage", "status", "exit_code", "id",
                                            "input_tokens", "output_tokens", "result", "message", "subtype",
                                            "content", "tools", "model", "name", "input", "text", "is_error",
                                            "tool_use_id", "permission_denials", "modelUsage", "total_cost_usd",
                                            "error", "aggregated_output", "command", "is_api_error_message",
                                            "api_error_status", "terminal_reason", "compact_metadata", "pre_tokens",
                                            "attempt", "max_retries", "retry_delay_ms", "error_status",
                                            "original_model", "fallback_model", "costBasis", "num_turns", "errors",
                                            "direction", "choice", "compact_result", "no_response", "waited_ms"]),
                           inner, max_size=5), max_leaves=14)
TYPES = st.sampled_from(["system", "assistant", "user", "result", "item.started", "item.completed",
                         "turn.started", "turn.completed", "turn.failed", "tool_use", "tool_result", "init",
                         "command_execution", "agent_message", "completed", "error", "api_retry",
                         "compact_boundary", "model_fallback", "model_refusal_fallback", "model_consent_fallback",
                         "permission_denied", "status", "failed", "<synthetic>", "unknown",
                         "Reconnecting... 1/5 (x)", "model rerouted: a -> b (c)"])
SHAPED = st.recursive(TYPES | JSONISH, lambda inner: st.dictionaries(
    st.sampled_from(["type", "subtype", "item", "message", "content", "usage", "status", "exit_code", "id",
                     "item_type", "text", "tools", "result", "input", "name", "model", "permission_denials",
                     "modelUsage", "total_cost_usd", "is_error", "tool_use_id", "error", "is_api_error_message",
                     "terminal_reason", "compact_metadata", "costBasis", "num_turns", "attempt", "original_model",
                     "fallback_model", "compact_result", "choice", "direction"]), inner, max_size=6), max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(factory=st.sampled_from([claude_code.TranscriptParser, codex.TranscriptParser]),
       objects=st.lists(SHAPED, max_size=6), tail=st.binary(max_size=12))
def test_any_lines_never_raise_and_always_give_one_usage_that_is_null_or_flagged(factory, objects, tail):
    data = b"".join(json.dumps(o).encode() + b"\n" for o in objects) + tail
    events = parse(factory, data)
    for event in events:  # every event is well typed: the ledger's typed decoder reads it back
        assert decode_event(msgspec.msgpack.encode(event)) == event
    use = usage_of(events)
    assert use.normalized is None or use.usage is not None
    assert use.normalized is not None or use.usage_missing_reason  # null always says why
