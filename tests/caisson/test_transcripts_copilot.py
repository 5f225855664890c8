"""GitHub Copilot CLI's transcript parser on a golden transcript recorded from the real CLI
(1.0.102 in BYOK mode, in the agent image, through the proxy to the scripted model:
scenarios/model/copilot_grep.toml under an arm that grants bash and view and withholds
create). The other goldens (issue 29) are events in 1.0.102's shapes (its
session-events.schema.json and cli-main.js: /work/research/agents/REPORT.md section 4;
values ours). Fed whole, byte at a time, at any split, cut, and with trailing junk."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from caisson.agents import ADAPTERS, copilot
from ledger.events import AgentAnswer, AgentError, AgentRetry, AgentToolResult, WitnessRaw, decode_event
from tests.caisson.transcripts import goldens, kinds, usage_of
from tests.caisson.transcripts import parse as _parse

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
    assert use.usage is None and use.incomplete is None  # premiumRequests and durations are no token report


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
    ["result", "assistant.message", "tool.execution_start", "tool.execution_complete", "session.x", "session.error",
     "session.warning", "model.call_failure", "model.call_final_result", "assistant.turn_retry", "model.call_start",
     "model_call", "hook", "policy_blocked", "success"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(
        ["type", "data", "toolCallId", "toolName", "arguments", "toolRequests", "name", "content", "success",
         "error", "message", "result", "usage", "errorType", "errorCode", "statusCode", "warningType", "exitCode",
         "outcome", "reason", "model", "errorMessage", "failureKind"]), inner, max_size=5), max_leaves=14)


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


# --- issue 29: in-band errors, retries, refusals told in words, no token counts ------------

GOLDENS = goldens(GOLDEN)
ANSWER = "`answer` is defined in src/app.py:1"


def test_issue_kind_a_failed_model_call_at_exit_0_is_a_terminal_error_never_an_answer():
    events = parse(GOLDENS["model_call_error.jsonl"])
    assert kinds(events, AgentRetry, AgentError) == [
        AgentError(agent="copilot", said="model.call_failure", status=401, code="api",
                   message="401 Incorrect API key provided", terminal=False, cause="provider"),  # retried
        AgentRetry(agent="copilot", said="assistant.turn_retry", code="api_error", message="model gpt-5"),
        AgentError(agent="copilot", said="model.call_failure", status=401, code="api",
                   message="401 Incorrect API key provided", terminal=True, cause="provider"),
        AgentError(agent="copilot", said="model.call_final_result", code="http_4xx", message="model gpt-5: http_4xx",
                   cause="provider"),
        AgentError(agent="copilot", said="session.error", status=401, code="model_call", cause="provider",
                   message="Failed to get response from the AI model; retried 5 times (total retry wait time: 31"
                           " seconds) Last error: 401 Incorrect API key provided")]
    assert json.loads(GOLDENS["model_call_error.jsonl"].splitlines()[-1])["exitCode"] == 0
    assert not kinds(events, AgentAnswer)


def test_a_retried_call_that_then_answered_is_not_the_end():
    events = parse(GOLDENS["retry_then_answer.jsonl"])
    assert [(type(e).__name__, getattr(e, "terminal", None)) for e in kinds(events, AgentRetry, AgentError)] == [
        ("AgentError", False), ("AgentRetry", None)]
    assert kinds(events, AgentAnswer) == [AgentAnswer(agent="copilot", text=ANSWER)]


def test_an_error_the_cli_counts_as_terminal_and_a_non_zero_exit_code_are_errors():
    events = parse(GOLDENS["auth_error.jsonl"])
    assert kinds(events, AgentError) == [
        AgentError(agent="copilot", said="session.error", status=401, code="authentication",
                   message="Authentication failed: the provider rejected the API key.", cause="provider"),
        AgentError(agent="copilot", said="result.exitCode", message='{"exitCode": 1}')]  # who: not said


def test_issue_example_result_usage_is_no_token_report():
    use = usage_of(parse(REFUSED_ERRORED))
    assert use.usage is None and use.normalized is None and use.parser == "copilot.transcript@2"
    assert "premiumRequests, totalApiDurationMs, sessionDurationMs and codeChanges" in use.usage_missing_reason


def complete(message: str) -> bytes:
    line = {"type": "tool.execution_complete", "data": {"toolCallId": "c1", "success": False,
                                                        "error": {"message": message, "code": "failure"}}}
    return json.dumps(line).encode() + b"\n"


@pytest.mark.parametrize("message", [
    "Tool 'create' does not exist. Available tools that can be called are bash, view",
    "Tool 'x' has no native execution backend. Available tools that can be called are bash",
    "Permission denied and could not request permission from user",
    "Copilot needed the user's approval and no one could answer.",
    "The user rejected this tool call. User feedback: no",
    "The pending permission request was cancelled before the tool could continue.",
    "Permission to run this tool was denied by a deny rule.",
    "Permission to run this tool was denied due to the following rules: shell(rm)",
    "Permission denied by rules: shell(rm)",
    "Permission denied by hook.",
    "Permission denied by a PermissionRequest hook: blocked",
    "Denied by preToolUse hook: blocked",
    "Denied by preToolUse hook (unable to ask user for confirmation): blocked",
    "Denied by permission request hook: blocked",
    "Denied by user via preToolUse hook prompt: no",
    "Denied by content exclusion policy (repository rule)",
    'Access denied: "/work/sandbox/secret" is excluded by organization content policy. Do not attempt to access this'
    " file.",
    "Permission denied by host policy. Use an action permitted by the host policy, or ask the policy administrator to"
    " change it.",
    "Permission denied because no interactive user response was available. Retry in an interactive session",
    "Permission denied because the assisted approval check did not approve this request. Ask the user",
    "Permission denied while applying a historical authorization response. This is not an OS or sandbox error.",
])
def test_every_refusal_wording_is_refused(message):
    assert [e.outcome for e in kinds(parse(complete(message)), AgentToolResult)] == ["refused"]


@pytest.mark.parametrize("message", [
    "Path does not exist",
    "Parent directory /work/sandbox/x does not exist. You need to create it before creating the file.",
    "bash: /root/.netrc: Permission denied",
    "Operation not permitted",  # an OS error of a tool that ran (caught by the old "not permitted" marker)
    "cp: cannot create regular file: not allowed",
    "The sandbox blocked this command.",  # a command the sandbox started (whether it ran at all is unconfirmed)
])
def test_a_tools_own_failure_stays_errored(message):
    assert [e.outcome for e in kinds(parse(complete(message)), AgentToolResult)] == ["errored"]


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(sorted(GOLDENS)), cuts=st.lists(st.integers(0, 3000), max_size=8))
def test_every_golden_at_any_split_gives_the_same_events(name, cuts):
    assert parse(GOLDENS[name], cuts) == parse(GOLDENS[name]) == parse(GOLDENS[name], [1] * len(GOLDENS[name]))


@pytest.mark.parametrize(("error_type", "cause", "terminal"), [
    ("quota", "provider", True), ("policy", "agent", True), ("hook", "agent", True), ("query", "", True),
])
def test_a_session_error_says_who_failed_and_whether_it_ended_the_session(error_type, cause, terminal):
    data = b"".join(json.dumps(o).encode() + b"\n" for o in [
        {"type": "session.error", "data": {"errorType": error_type, "message": "x"}},
        {"type": "result", "exitCode": 0 if error_type == "hook" else 1}])
    [error, *_] = kinds(parse(data), AgentError)
    assert (error.code, error.cause, error.terminal) == (error_type, cause, terminal)


def test_a_hook_error_the_session_went_on_from_is_not_terminal():
    data = b"".join(json.dumps(o).encode() + b"\n" for o in [
        {"type": "session.error", "data": {"errorType": "hook", "message": "hook failed"}},
        {"type": "assistant.message", "data": {"content": "done", "toolRequests": []}},
        {"type": "result", "exitCode": 0}])
    events = parse(data)
    assert [e.terminal for e in kinds(events, AgentError)] == [False]
    assert kinds(events, AgentAnswer) == [AgentAnswer(agent="copilot", text="done")]
