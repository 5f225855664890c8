"""OpenCode's transcript parser on golden transcripts recorded from the real CLI
(opencode-ai 1.18.33 in the agent image, on the scripted model): refused_errored.jsonl is
scenarios/model/opencode_grep.toml under an arm that grants bash and read (write refused,
a read of a missing file errored); model_error.jsonl is codex_grep.toml, whose second turn
does not match, so the model call fails and the run is cut. The other goldens (issue 29)
are lines in 1.18.33's shapes (its run loop, NamedError and StepFinishPart definitions:
/work/research/agents/REPORT.md section 3; values ours, the ProviderAuthError's wording
illustrative). Fed whole, byte at a time, at any split, with trailing junk."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from caisson.agents import ADAPTERS, opencode
from ledger.events import AgentAnswer, AgentError, AgentToolCall, AgentToolResult, AgentUsage, WitnessRaw, decode_event
from tests.caisson.transcripts import goldens, kinds, usage_of
from tests.caisson.transcripts import parse as _parse

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
    ["step_start", "text", "tool_use", "step_finish", "error", "stop", "tool-calls", "invalid", "completed",
     "ContextOverflowError", "The user rejected permission to use this specific tool call."]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(
        ["type", "part", "tool", "callID", "state", "status", "input", "output", "reason", "tokens", "cache",
         "read", "write", "reasoning", "text", "error", "data", "message", "name", "statusCode", "cost"]),
        inner, max_size=5), max_leaves=14)


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


# --- issue 29: in-band errors, refusals told in words, placeholder figures -----------------

GOLDENS = goldens(GOLDEN)
ANSWER = "`answer` is defined in src/app.py:1"


def test_issue_example_zero_tokens_with_a_cost_are_unknown_tokens_and_the_cost_kept():
    events = parse(GOLDENS["zero_tokens_cost.jsonl"])
    use = usage_of(events)
    assert use.normalized is None and use.usage == {"input": 0, "output": 0, "reasoning": 0, "cache_read": 0,
                                                    "cache_write": 0}
    assert use.usage_missing_reason == ("step_finish #1 reports 0 tokens: what opencode writes when the provider sent"
                                        " no usage (Session.getUsage), not a measurement")
    assert use.cost_usd == 0.0070147 and use.cost_missing_reason is None and use.parser == "opencode.transcript@2"
    assert kinds(events, AgentAnswer) == [AgentAnswer(agent="opencode", text=ANSWER)]


def test_a_cost_of_zero_from_a_provider_without_prices_is_no_figure():
    use = usage_of(parse(REFUSED_ERRORED))
    assert use.cost_usd is None and use.cost_missing_reason == (
        "step_finish #1, #2, #3, #4: opencode reports cost 0: what a provider without a cost block gets (caisson's"
        " provider has none), not a computed cost")
    assert use.normalized.total_tokens == 4587  # the tokens are measured


def test_a_context_overflow_the_session_went_on_from_is_not_terminal_nor_incomplete():
    events = parse(GOLDENS["context_overflow.jsonl"])
    [error] = kinds(events, AgentError)
    assert (error.said, error.code, error.terminal, error.cause) == ("error", "ContextOverflowError", False, "provider")
    assert error.message.startswith("This model's maximum context length is 128000 tokens.")
    assert kinds(events, AgentAnswer) == [AgentAnswer(agent="opencode", text=ANSWER)]
    use = usage_of(events)
    assert use.incomplete is None and (use.normalized.input_tokens, use.normalized.output_tokens) == (130000, 60)


def test_a_failed_model_call_is_a_terminal_error_with_its_status():
    assert kinds(parse(MODEL_ERROR), AgentError) == [AgentError(
        agent="opencode", said="error", status=400, code="APIError", terminal=True, cause="provider",
        message="caisson scripted model: turn 1 does not match: no tool result contains 'def answer' (1 tool results)")]


def test_a_provider_auth_error_ends_the_session():
    events = parse(GOLDENS["provider_auth.jsonl"])
    [error, use] = events
    assert (error.said, error.code, error.terminal, error.cause) == ("error", "ProviderAuthError", True, "provider")
    assert isinstance(use, AgentUsage) and use.usage is None and "error: " in use.incomplete


def test_refusals_told_in_state_error_are_refused_and_a_tools_own_failure_is_not():
    events = parse(GOLDENS["refusals.jsonl"])
    assert [(e.call_id, e.tool, e.outcome) for e in kinds(events, AgentToolResult)] == [
        ("call_rej000001", "bash", "refused"),  # the run's auto-reject
        ("call_rej000002", "webfetch", "refused"),  # a deny rule at call time
        ("call_rej000003", "write", "refused"),  # not in the session: the invalid tool
        ("call_rej000004", "bash", "executed"),  # ran; its output says "Permission denied"
        ("call_rej000005", "read", "errored")]  # ran and failed


def test_a_refusal_with_an_error_class_prefix_is_refused_too():
    line = {"type": "tool_use", "part": {"type": "tool", "tool": "bash", "callID": "c", "state": {
        "status": "error", "input": {}, "error": "PermissionRejectedError: The user rejected permission to use this"
        " specific tool call with the following feedback: no"}}}
    events = parse(json.dumps(line).encode() + b"\n")
    assert [e.outcome for e in kinds(events, AgentToolResult)] == ["refused"]
    assert kinds(events, AgentToolCall)[0].tool == "bash"


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(sorted(GOLDENS)), cuts=st.lists(st.integers(0, 1500), max_size=8))
def test_every_golden_at_any_split_gives_the_same_events(name, cuts):
    assert parse(GOLDENS[name], cuts) == parse(GOLDENS[name]) == parse(GOLDENS[name], [1] * len(GOLDENS[name]))


@pytest.mark.parametrize(("error", "cause"), [
    ({"name": "MessageOutputLengthError", "data": {}}, "limit"),
    ({"name": "MessageAbortedError", "data": {"message": "aborted"}}, "agent"),
    ({"name": "UnknownError", "data": {"message": "?"}}, ""),
    ({"message": "a prompt's error body"}, ""),  # not a NamedError (shape unconfirmed): its message is read
])
def test_who_failed_is_read_from_the_error_name(error, cause):
    [said] = kinds(parse(json.dumps({"type": "error", "error": error}).encode() + b"\n"), AgentError)
    assert said.cause == cause and said.message
