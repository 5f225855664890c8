"""mini-swe-agent's trajectory parser on golden trajectories recorded from the real agent
(mini-swe-agent 2.4.6 in the agent image, on the scripted model: scenarios/model/mini_grep.toml
and mini_refused_errored.toml; step_limit.json is mini_grep with ``max_turns = 1``); the
issue 29 goldens are built from them in 2.4.6's shapes (/work/research/agents/REPORT.md
section 5): unpriced.json its cost 0.0 under ignore_errors, auth_error.json an exception exit,
zero_usage.json a call with zeroed usage. Fed whole, byte at a time, at any split, with
trailing junk, and cut mid-way."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from caisson.agents import ADAPTERS, mini_swe_agent
from ledger.events import AgentAnswer, AgentError, AgentToolCall, AgentToolResult, AgentUsage, WitnessRaw, decode_event
from tests.caisson.transcripts import goldens, kinds, usage_of
from tests.caisson.transcripts import parse as _parse

GOLDEN = Path(__file__).with_suffix("")
SUBMITTED = (GOLDEN / "submitted.json").read_bytes()
REFUSED_ERRORED = (GOLDEN / "refused_errored.json").read_bytes()
STEP_LIMIT = (GOLDEN / "step_limit.json").read_bytes()


def parse(data: bytes, sizes: list[int] | None = None) -> list:
    return _parse(mini_swe_agent.TranscriptParser, data, sizes)


def results(events: list) -> list[tuple[str, str]]:
    return [(e.tool, e.outcome) for e in events if isinstance(e, AgentToolResult)]


def test_a_submitted_run_gives_its_calls_answer_and_summed_usage():
    events = parse(SUBMITTED)
    calls = [e for e in events if isinstance(e, AgentToolCall)]
    assert [(c.tool, c.input["command"][:20]) for c in calls] == [("bash", "grep -rn 'def answer"),
                                                                 ("bash", "printf 'COMPLETE_TAS")]
    # the submitting command ran (its output is the answer) although the agent marks it "not executed"
    assert results(events) == [("bash", "executed"), ("bash", "executed")]
    assert [e.text for e in events if isinstance(e, AgentAnswer)] == ["`answer` is defined in src/app.py:1\n"]
    use = usage_of(events)
    # two calls of the scripted model: 700 fresh + 300 cached, then 90 + 1000; cached inside prompt
    assert use.usage == {"prompt_tokens": 2090, "completion_tokens": 55, "total_tokens": 2145,
                         "prompt_tokens_details": {"cached_tokens": 1300},
                         "completion_tokens_details": {"reasoning_tokens": 5}}
    assert (use.normalized.input_tokens, use.normalized.output_tokens) == (2090, 55)
    assert use.incomplete is None and use.cost_usd == 0.0017 and use.parser == "mini-swe-agent.trajectory@2"


def test_a_failing_command_is_errored_and_an_unoffered_tool_is_refused():
    events = parse(REFUSED_ERRORED)
    assert results(events) == [("bash", "errored"), ("Write", "refused"), ("bash", "executed")]
    [errored] = [e for e in events if isinstance(e, AgentToolResult) and e.outcome == "errored"]
    assert "No such file" in errored.excerpt
    [refused] = [e for e in events if isinstance(e, AgentToolResult) and e.outcome == "refused"]
    assert "Unknown tool 'Write'" in refused.excerpt
    assert [e.input for e in events if isinstance(e, AgentToolCall) and e.tool == "Write"] == [
        {"file_path": "notes.txt", "content": "escape"}]
    assert usage_of(events).normalized.input_tokens == 2340  # the refused call's response is counted too


def test_a_run_stopped_by_its_step_limit_is_incomplete_and_its_usage_null():
    events = parse(STEP_LIMIT)
    assert results(events) == [("bash", "executed")]
    assert not any(isinstance(e, AgentAnswer) for e in events)
    use = usage_of(events)
    assert use.incomplete == "the agent exited with 'LimitsExceeded', not 'Submitted'"
    assert use.normalized is None and use.usage_missing_reason == use.incomplete
    assert use.usage["prompt_tokens"] == 1000  # kept as reported, out of the arithmetic


def test_a_trajectory_cut_mid_way_is_kept_raw_and_incomplete():
    events = parse(SUBMITTED[:5000])
    assert not any(isinstance(e, (AgentToolCall, AgentAnswer)) for e in events)
    assert any(isinstance(e, WitnessRaw) for e in events)
    use = usage_of(events)
    assert use.normalized is None and use.usage is None
    assert use.incomplete.startswith("the trajectory is not one JSON object with messages (cut mid-way?)")


def test_no_trajectory_at_all_says_the_run_ended_before_the_agent_exited():
    use = usage_of(parse(b""))
    assert use.incomplete == "no trajectory was printed (the run ended before the agent exited)"
    assert use.normalized is None and use.usage_missing_reason == use.incomplete


def test_byte_at_a_time_gives_the_same_events():
    assert parse(REFUSED_ERRORED, [1] * len(REFUSED_ERRORED)) == parse(REFUSED_ERRORED)


@settings(max_examples=40, deadline=None)
@given(cuts=st.lists(st.integers(0, 4000), max_size=8))
def test_any_split_gives_the_same_events(cuts):
    assert parse(SUBMITTED, cuts) == parse(SUBMITTED)


def test_trailing_junk_is_kept_raw_and_flagged_and_the_figures_stand():
    events = parse(SUBMITTED + b"\n\x00\xff junk")
    def rest(evs: list) -> list:
        return [e for e in evs if not isinstance(e, (WitnessRaw, AgentUsage))]

    assert rest(events) == rest(parse(SUBMITTED))
    assert any(isinstance(e, WitnessRaw) and "junk" in e.line for e in events)
    use = usage_of(events)
    assert "text after the trajectory document" in use.incomplete
    assert use.normalized == usage_of(parse(SUBMITTED)).normalized


JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=6),
                       lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                           st.sampled_from(["role", "extra", "response", "usage", "tool_calls", "function", "name",
                                            "arguments", "id", "tool_call_id", "returncode", "exception_info",
                                            "exit_status", "submission", "interrupt_type", "choices", "message",
                                            "prompt_tokens", "completion_tokens", "content", "info",
                                            "model_stats", "instance_cost"]),
                           inner, max_size=5), max_leaves=16)


@settings(max_examples=200, deadline=None)
@given(messages=st.lists(JSONISH, max_size=6), info=JSONISH)
def test_any_trajectory_never_raises_and_gives_one_usage_that_is_null_or_flagged(messages, info):
    events = parse(json.dumps({"messages": messages, "info": info}).encode())
    for event in events:  # every event is well typed: the ledger's typed decoder reads it back
        assert decode_event(msgspec.msgpack.encode(event)) == event
    use = usage_of(events)
    assert use.normalized is not None or use.usage_missing_reason


def test_the_adapter_is_registered_ungated_with_an_answer_file_and_bash_only():
    spec = ADAPTERS["mini-swe-agent"]
    assert (spec.gating, spec.elicitation, spec.static_tools) == ("ungated", "answer_file", ("bash",))
    argv = spec.command("Where?", allowed=["bash"], denied=["Write"], model="gpt-5", max_turns=3)
    assert argv[-6:] == ["-t", "Where?", "-m", "openai/gpt-5", "-c", "agent.step_limit=3"]


# --- issue 29: exits that are not a submission, placeholder cost and usage -----------------

GOLDENS = goldens(GOLDEN)


def test_a_limit_is_an_error_at_the_exit():
    assert kinds(parse(STEP_LIMIT), AgentError) == [AgentError(
        agent="mini-swe-agent", said="exit.exit_status", code="LimitsExceeded", message="LimitsExceeded",
        cause="limit")]


def test_an_exception_exit_is_an_error_with_its_class_and_text_and_its_zero_cost_no_figure():
    events = parse(GOLDENS["auth_error.json"])
    [error] = kinds(events, AgentError)
    assert (error.said, error.code, error.terminal, error.cause) == ("exit.exception", "AuthenticationError", True,
                                                                     "provider")
    assert error.message.startswith("litellm.AuthenticationError: AuthenticationError: OpenAIException - Incorrect")
    assert not kinds(events, AgentAnswer)
    use = usage_of(events)
    assert use.cost_usd is None and use.cost_missing_reason.startswith("instance_cost 0.0 after 1 model call(s)")


def test_issue_example_an_unpriced_model_costs_unknown_not_zero():
    use = usage_of(parse(GOLDENS["unpriced.json"]))
    assert use.cost_usd is None and use.cost_missing_reason == (
        "instance_cost 0.0 after 2 model call(s): what mini-swe-agent adds for a call litellm cannot price under"
        " MSWEA_COST_TRACKING=ignore_errors (or a call that raised), not a computed cost")
    assert use.normalized.total_tokens == 2145 and use.parser == "mini-swe-agent.trajectory@2"


def test_a_call_with_zero_usage_leaves_the_sum_unknown():
    use = usage_of(parse(GOLDENS["zero_usage.json"]))
    assert use.normalized is None and use.usage_missing_reason == (
        "model call #2 reports 0 tokens: no call is measured at 0 tokens, so its usage is unknown")
    assert use.cost_usd == 0.0017  # priced by litellm: a figure


def test_a_cost_of_zero_with_no_call_made_stands():
    doc = json.loads(STEP_LIMIT)
    doc["messages"] = [m for m in doc["messages"] if m["role"] in ("system", "user", "exit")]
    doc["info"]["model_stats"] = {"instance_cost": 0.0, "api_calls": 0}
    use = usage_of(parse(json.dumps(doc).encode()))
    assert use.cost_usd == 0.0 and use.cost_missing_reason is None


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(sorted(GOLDENS)), cuts=st.lists(st.integers(0, 6000), max_size=8))
def test_every_golden_at_any_split_gives_the_same_events(name, cuts):
    assert parse(GOLDENS[name], cuts) == parse(GOLDENS[name])


@pytest.mark.parametrize(("status", "text", "cause"), [
    ("RuntimeError", "Global cost/call limit exceeded: $3.0100 / 12", "limit"),
    ("RuntimeError", "Error calculating cost for model openai/x: ...", "agent"),
    ("RateLimitError", "litellm.RateLimitError: RateLimitError: OpenAIException - Rate limit reached", "provider"),
    ("KeyError", "'choices'", "agent"),
    ("TimeExceeded", None, "limit"),
    ("RepeatedFormatError", None, "limit"),
])
def test_who_ended_the_run_is_read_from_the_exit(status, text, cause):
    doc = json.loads(STEP_LIMIT)
    extra = {"exit_status": status, "submission": ""}
    if text is not None:
        extra.update(exception_str=text, traceback="Traceback (most recent call last): ...")
    doc["messages"][-1] = {"role": "exit", "content": text or status, "extra": extra}
    [error] = kinds(parse(json.dumps(doc).encode()), AgentError)
    assert (error.code, error.cause, error.message) == (status, cause, text or status)
