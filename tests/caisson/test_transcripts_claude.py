"""Claude Code's transcript parser on what a session says about itself (issue 29): an API
failure reported in-band with exit 0, a refusal told only in the tool result's words,
zeroed figures, retries, compaction and model fallback. The goldens in
test_transcripts_claude/ are stream-json lines in 2.1.328's shapes (keys and order per its
zod schemas and builders, /work/research/agents/REPORT.md section 1; values are ours, the
start-up failure's error text illustrative). Each is fed whole, byte at a time and at any
split."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from caisson.agents import claude_code
from ledger.events import (
    AgentAnswer, AgentCompaction, AgentError, AgentModelSwitch, AgentRetry, AgentToolResult, AgentTools, AgentUsage,
    WitnessRaw,
)
from tests.caisson.transcripts import goldens, kinds, usage_of
from tests.caisson.transcripts import parse as _parse

GOLDEN = goldens(Path(__file__).with_suffix(""))
NAME = "claude-code"


def parse(data: bytes, sizes: list[int] | None = None) -> list:
    return _parse(claude_code.TranscriptParser, data, sizes)


def last_line(name: str) -> dict:
    return json.loads(GOLDEN[name].splitlines()[-1])


def test_issue_example_an_api_error_result_is_an_error_never_an_answer_and_its_zeros_no_figure():
    events = parse(GOLDEN["api_error_oauth_org.jsonl"])
    text = last_line("api_error_oauth_org.jsonl")["result"]
    assert text.startswith("API Error: 400 ")
    assert events[:3] == [
        AgentTools(agent=NAME, surface="init", tools=["Bash", "Read", "Write"], model="claude-sonnet-4-5"),
        AgentError(agent=NAME, said="assistant.is_api_error_message", status=400, code="oauth_org_not_allowed",
                   message=text, terminal=True, cause="provider"),
        AgentError(agent=NAME, said="result.is_error", status=400, code="api_error", message=text, terminal=True,
                   cause="provider")]
    assert not kinds(events, AgentAnswer)  # the text is kept (stdout blob, the error's message), never scored
    use = usage_of(events)
    assert events[3:] == [use] and use.usage == last_line("api_error_oauth_org.jsonl")["usage"]
    assert use.normalized is None and use.usage_missing_reason == (
        "result.usage reports 0 tokens on a result that reports a failure: a placeholder (Claude Code writes zeros"
        " where no call's usage was counted), not a measurement")
    assert use.cost_usd is None and use.cost_missing_reason == (
        "total_cost_usd 0 on a result that reports a failure: a placeholder (Claude Code writes 0 where no call was"
        " priced), not a computed cost")
    assert use.by_model == {} and use.incomplete is None and use.parser == "claude-code.transcript@3"


def test_an_invalid_key_is_the_same_kind_with_its_status_from_the_result():
    events = parse(GOLDEN["api_error_401.jsonl"])
    assert kinds(events, AgentError) == [
        AgentError(agent=NAME, said="assistant.is_api_error_message", code="authentication_failed",
                   message="Invalid API key · Fix external API key", cause="provider"),
        AgentError(agent=NAME, said="result.is_error", status=401, code="api_error",
                   message="Invalid API key · Fix external API key", cause="provider")]
    assert not kinds(events, AgentAnswer) and usage_of(events).normalized is None


def test_retries_that_gave_up_are_retries_then_the_error():
    events = parse(GOLDEN["repeated_529.jsonl"])
    ms = 1_000_000
    assert kinds(events, AgentRetry, AgentError) == [
        AgentRetry(agent=NAME, said="system.api_retry", attempt=1, max_attempts=10, status=529, delay_ns=498 * ms,
                   code="overloaded"),
        AgentRetry(agent=NAME, said="system.api_retry", attempt=2, max_attempts=10, status=529, delay_ns=1020 * ms,
                   code="overloaded"),
        AgentRetry(agent=NAME, said="system.api_retry", attempt=3, max_attempts=10, status=None, delay_ns=2210 * ms,
                   code="server_error", message="no response headers within 60000 ms"),
        AgentError(agent=NAME, said="assistant.is_api_error_message", status=529, code="server_error",
                   message=last_line("repeated_529.jsonl")["result"], cause="provider"),
        AgentError(agent=NAME, said="result.is_error", status=529, code="api_error",
                   message=last_line("repeated_529.jsonl")["result"], cause="provider")]


def test_retries_that_succeeded_leave_the_answer_and_the_figures():
    events = parse(GOLDEN["retry_then_answer.jsonl"])
    assert [(e.attempt, e.status, e.delay_ns) for e in kinds(events, AgentRetry)] == [
        (1, 529, 512_000_000), (2, 529, 1_187_000_000)]
    assert not kinds(events, AgentError)
    assert kinds(events, AgentAnswer) == [AgentAnswer(agent=NAME, text="`answer` is defined in src/app.py:1")]
    use = usage_of(events)
    assert (use.normalized.input_tokens, use.normalized.output_tokens, use.cost_usd) == (24364, 412, 0.01873)
    assert use.cost_missing_reason is None and use.usage_missing_reason is None


def test_a_compaction_and_a_model_fallback_are_events_and_an_unpriced_model_leaves_the_cost_unknown():
    events = parse(GOLDEN["compact_fallback_unpriced.jsonl"])
    assert kinds(events, AgentCompaction, AgentModelSwitch) == [
        AgentCompaction(agent=NAME, trigger="auto", tokens_before=167204, tokens_after=9120,
                        duration_ns=38_411_000_000),
        AgentModelSwitch(agent=NAME, said="system.model_fallback", requested="claude-opus-4-1",
                         used="claude-sonnet-4-5", trigger="overloaded",
                         message="Switched to claude-sonnet-4-5 due to high demand for claude-opus-4-1")]
    assert [json.loads(e.line)["status"] for e in kinds(events, WitnessRaw)] == ["compacting"]  # kept raw
    use = usage_of(events)
    assert use.normalized.total_tokens == 24776  # tokens are counted; only the price was guessed
    assert use.cost_usd is None and use.cost_missing_reason == (
        "modelUsage prices claude-sonnet-4-5 at costBasis 'unknown' (no price matched the model: a guess at the"
        " default model's rate): total_cost_usd 0.01873 is no figure")
    assert sorted(use.by_model) == ["claude-opus-4-1", "claude-sonnet-4-5"]


def test_issue_example_a_read_refused_by_a_path_rule_in_words_only_is_refused_and_a_commands_own_failure_is_not():
    events = parse(GOLDEN["path_deny_read.jsonl"])
    assert [(e.call_id, e.tool, e.outcome) for e in kinds(events, AgentToolResult)] == [
        ("toolu_01Read", "Read", "refused"),  # not in permission_denials: its words are the witness
        ("toolu_01Cat", "Bash", "errored"),  # the shell's own "Permission denied"
        ("toolu_01Echo", "Bash", "errored"),  # a command that printed a refusal's words ran
        ("toolu_01Curl", "Bash", "refused")]  # both witnesses
    assert last_line("path_deny_read.jsonl")["permission_denials"][0]["tool_use_id"] == "toolu_01Curl"


def test_a_turn_limit_is_an_error_result_whose_measured_figures_stand():
    events = parse(GOLDEN["max_turns.jsonl"])
    assert kinds(events, AgentError) == [AgentError(agent=NAME, said="result.is_error", cause="limit",
                                                    code="error_max_turns:max_turns",
                                                    message="Reached maximum number of turns (3)")]
    use = usage_of(events)
    assert (use.normalized.total_tokens, use.cost_usd) == (24776, 0.01873) and not kinds(events, AgentAnswer)


def test_a_start_up_failure_is_an_error_and_its_zeroed_result_no_measurement():
    events = parse(GOLDEN["startup_failure.jsonl"])
    [error, use] = events
    assert error == AgentError(agent=NAME, said="result.is_error", code="error_during_execution:cwd_unavailable",
                               message="Current working directory is unavailable: /work/sandbox", cause="agent")
    assert isinstance(use, AgentUsage) and use.normalized is None and use.cost_usd is None
    assert use.usage_missing_reason.startswith("result.usage reports 0 tokens on a result that reports a failure,"
                                               " num_turns 0: a placeholder")


# --- other members of the kinds ------------------------------------------------------------

INIT = {"type": "system", "subtype": "init", "tools": ["Bash", "Read"], "model": "claude-sonnet-4-5"}


def call(call_id: str, tool: str = "Bash") -> dict:
    return {"type": "assistant", "message": {"model": "claude-sonnet-4-5", "content": [
        {"type": "tool_use", "id": call_id, "name": tool, "input": {}}]}}


def answered(call_id: str, text: str, is_error: bool = True) -> dict:
    return {"type": "user", "message": {"content": [
        {"type": "tool_result", "tool_use_id": call_id, "content": text, "is_error": is_error}]}}


def result(**kw) -> dict:
    return {"type": "result", "subtype": "success", "is_error": False, "num_turns": 2, "result": "done",
            "total_cost_usd": 0.01, "usage": {"input_tokens": 10, "output_tokens": 2}, "permission_denials": [], **kw}


def lines(*objects: dict) -> bytes:
    return b"".join(json.dumps(o).encode() + b"\n" for o in objects)


@pytest.mark.parametrize("text", [
    "<tool_use_error>Error: No such tool available: Write. Write is disabled for this session, in subagents as well"
    " as here.</tool_use_error>",
    "<tool_use_error>Error: No such tool available: Glob. Glob is not available in this session — find files with"
    " `find` via the Bash tool instead.</tool_use_error>",
    "Claude requested permissions to write to /work/sandbox/x, but you haven't granted it yet.",
    "Claude requested permissions to edit /work/sandbox/.bashrc which is a sensitive file.",
    "Permission for this tool use was denied. It requires approval, and this session has no approval surface",
    "Permission for this tool use was denied: it requires interactive approval, and permission prompts are not"
    " available in this session.",
    "Permission to use Bash has been denied because Claude Code is running in don't ask mode. IMPORTANT: ...",
    "Permission to use Bash with command rm -rf build has been denied.",
    "Permission to read /work/sandbox/secretdir/key has been denied (it resolves, through a symbolic link, to a path"
    " a Read rule denies).",
    "permission to edit /work/sandbox/a.py has been denied.",  # case-insensitive
    "<tool_use_error>File is covered by a Read deny rule in your permission settings and cannot be"
    " edited.</tool_use_error>",
    "This call was denied and did not run. It needs the user's answer, and the user has not written since",
    "Agent type 'general-purpose' has been denied by permission rule 'Agent(general-purpose)' from settings.",
    "Permission for this action was denied by the Claude Code auto mode classifier. Reason: exfiltration",
    "Permission for this command was denied by a built-in Claude Code safety check",
    "Execution stopped by PreToolUse hook: blocked",
    "Permission denied by hook",
    "WebFetch isn't available, so this deferred call was dropped without running.",
    "The user doesn't want to proceed with this tool use. The tool use was rejected",
])
def test_every_refusal_wording_is_refused(text):
    events = parse(lines(INIT, call("t1"), answered("t1", text), result()))
    assert [e.outcome for e in kinds(events, AgentToolResult)] == ["refused"]


@pytest.mark.parametrize("text", [
    "Exit code 1\ncat: secret: Permission denied",
    "Exit code 1\nPermission to use Bash has been denied.",  # the command printed it: it ran
    "File does not exist.",
    "Exit code 2\nNo such tool available: x",
    "bash: ./run.sh: Permission denied",
])
def test_a_tools_own_failure_stays_errored(text):
    events = parse(lines(INIT, call("t1"), answered("t1", text), result()))
    assert [e.outcome for e in kinds(events, AgentToolResult)] == ["errored"]


def test_a_refusal_text_on_a_result_that_is_not_an_error_is_the_tools_output():
    events = parse(lines(INIT, call("t1", "Read"), answered("t1", "Permission to use Bash has been denied.", False),
                         result()))
    assert [e.outcome for e in kinds(events, AgentToolResult)] == ["executed"]


def test_a_permission_denied_system_line_is_a_second_witness():
    denied = {"type": "system", "subtype": "permission_denied", "tool_name": "Bash", "tool_use_id": "t1",
              "message": "denied by the auto mode classifier", "decision_reason_type": "classifier"}
    events = parse(lines(INIT, call("t1"), denied, answered("t1", "a custom hook message"), result()))
    assert [(e.outcome, e.excerpt) for e in kinds(events, AgentToolResult)] == [
        ("refused", "system permission_denied: denied by the auto mode classifier")]


def test_a_synthetic_error_the_session_went_on_from_is_not_terminal_and_the_answer_stands():
    text = "API Error: output cut Try again."
    cut = {"type": "assistant", "error": "max_output_tokens", "is_api_error_message": True,
           "api_error": "max_output_tokens",
           "message": {"model": "<synthetic>", "content": [{"type": "text", "text": text}]}}
    events = parse(lines(INIT, cut, call("t1"), answered("t1", "ok", False), result()))
    assert kinds(events, AgentError) == [AgentError(agent=NAME, said="assistant.is_api_error_message",
                                                    code="max_output_tokens", message=text,
                                                    terminal=False, cause="limit")]
    assert kinds(events, AgentAnswer) == [AgentAnswer(agent=NAME, text="done")]


def test_a_turn_setup_failure_is_an_error_although_is_error_is_false():
    events = parse(lines(INIT, result(terminal_reason="turn_setup_failed", num_turns=0, total_cost_usd=0,
                                      usage={"input_tokens": 0, "output_tokens": 0}, result="")))
    assert kinds(events, AgentError) == [AgentError(agent=NAME, said="result.terminal_reason",
                                                    code="turn_setup_failed", message="", cause="agent")]
    use = usage_of(events)
    assert not kinds(events, AgentAnswer) and use.normalized is None and use.cost_usd is None


def test_a_zero_cost_with_measured_tokens_is_no_figure_and_a_real_one_is():
    assert usage_of(parse(lines(INIT, result(total_cost_usd=0)))).cost_missing_reason.startswith("total_cost_usd 0:")
    assert usage_of(parse(lines(INIT, result()))).cost_usd == 0.01


def test_a_synthetic_model_is_never_reported_as_a_model():
    usage = {"<synthetic>": {"inputTokens": 0, "outputTokens": 0, "costUSD": 0}, "claude-x": {"inputTokens": 10}}
    switch = {"type": "system", "subtype": "model_refusal_fallback", "trigger": "refusal", "direction": "retry",
              "original_model": "claude-opus-4-1", "fallback_model": "<synthetic>", "content": "retried"}
    events = parse(lines(dict(INIT, model="<synthetic>"), switch, result(modelUsage=usage)))
    assert kinds(events, AgentTools)[0].model is None
    assert kinds(events, AgentModelSwitch) == [AgentModelSwitch(
        agent=NAME, said="system.model_refusal_fallback", requested="claude-opus-4-1", used=None,
        trigger="refusal (retry)", message="retried")]
    assert list(usage_of(events).by_model) == ["claude-x"]


def test_a_consent_fallback_switches_and_a_cancelled_one_is_kept_raw():
    consent = {"type": "system", "subtype": "model_consent_fallback", "choice": "consent", "original_model": "a",
               "fallback_model": "b", "persisted_as_default": False, "content": "Using b"}
    events = parse(lines(INIT, consent, dict(consent, choice="cancelled"), result()))
    assert kinds(events, AgentModelSwitch) == [AgentModelSwitch(
        agent=NAME, said="system.model_consent_fallback", requested="a", used="b", trigger="consent (consent)",
        message="Using b")]
    assert len(kinds(events, WitnessRaw)) == 1


def test_a_failed_compaction_is_an_error_the_session_may_go_on_from():
    failed = {"type": "system", "subtype": "status", "status": None, "compact_result": "failed",
              "compact_error": "Conversation too long"}
    events = parse(lines(INIT, failed, call("t1"), answered("t1", "ok", False), result()))
    assert kinds(events, AgentError) == [AgentError(agent=NAME, said="system.status.compact_result",
                                                    message="Conversation too long", terminal=False, cause="agent")]


# --- framing: every golden whole, byte at a time, any split, trailing junk -----------------


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_byte_at_a_time_gives_the_same_events(name):
    data = GOLDEN[name]
    assert parse(data, [1] * len(data)) == parse(data)


@settings(max_examples=80, deadline=None)
@given(name=st.sampled_from(sorted(GOLDEN)), cuts=st.lists(st.integers(0, 900), max_size=10))
def test_any_split_gives_the_same_events(name, cuts):
    assert parse(GOLDEN[name], cuts) == parse(GOLDEN[name])


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_trailing_junk_is_kept_raw_and_the_rest_stands(name):
    events = parse(GOLDEN[name] + b"\x00\xff junk")
    assert [e for e in events if not isinstance(e, (WitnessRaw, AgentUsage))] == [
        e for e in parse(GOLDEN[name]) if not isinstance(e, (WitnessRaw, AgentUsage))]
    assert "its last line was cut mid-way" in usage_of(events).incomplete


@pytest.mark.parametrize(("line", "cause"), [
    (result(is_error=True, subtype="error_max_budget_usd", terminal_reason="budget_exhausted", result=None), "limit"),
    (result(is_error=True, terminal_reason="prompt_too_long", result="Prompt is too long"), "provider"),
    (result(is_error=True, terminal_reason="aborted_streaming", result=""), "agent"),
    (result(is_error=True, subtype="error_max_structured_output_retries", result=None), "agent"),
    (result(is_error=True, result="?"), ""),  # no subtype, reason, or API error message to tell who
])
def test_who_failed_is_read_from_the_result(line, cause):
    [error] = kinds(parse(lines(INIT, line)), AgentError)
    assert error.cause == cause
