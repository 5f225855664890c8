"""Codex's transcript parser on what a session says about itself (issue 29): stream retries
and a failed turn (exit 1), a model switch, a zeroed usage, refusals told in a command item.
The goldens in test_transcripts_codex/ are ``codex exec --json`` lines in 0.171.0's shapes
(its exec JSONL processor; literals checked in its binary: /work/research/agents/REPORT.md
section 2; values are ours). Each is fed whole, byte at a time and at any split."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from caisson.agents import codex
from ledger.events import AgentAnswer, AgentError, AgentModelSwitch, AgentRetry, AgentToolResult, AgentUsage, WitnessRaw
from tests.caisson.transcripts import goldens, kinds, usage_of
from tests.caisson.transcripts import parse as _parse

GOLDEN = goldens(Path(__file__).with_suffix(""))
NAME = "codex"
DISC = "stream disconnected before completion: error sending request for url (https://api.openai.com/v1/responses)"
U401 = ("unexpected status 401 Unauthorized: Incorrect API key provided: sk-test****,"
        " url: https://api.openai.com/v1/responses, request id: req_0a1b2c3d")


def parse(data: bytes, sizes: list[int] | None = None) -> list:
    return _parse(codex.TranscriptParser, data, sizes)


def test_issue_example_reconnects_are_retries_and_the_failed_turn_the_error():
    events = parse(GOLDEN["stream_disconnected.jsonl"])
    assert events[:-1] == [
        *(AgentRetry(agent=NAME, said="error.reconnecting", attempt=n, max_attempts=5, message=DISC)
          for n in range(1, 6)),
        AgentError(agent=NAME, said="turn.failed", message=DISC, terminal=True, cause="provider")]
    use = events[-1]
    assert isinstance(use, AgentUsage) and use.normalized is None and use.parser == "codex.transcript@3"
    assert use.usage_missing_reason == f"a turn failed without usage: {DISC}"


def test_an_error_line_and_the_failed_turn_carry_the_status_and_an_agent_message_is_no_answer():
    events = parse(GOLDEN["unauthorized.jsonl"])
    assert kinds(events, AgentRetry, AgentError) == [
        AgentRetry(agent=NAME, said="error.reconnecting", attempt=1, max_attempts=5, status=401, message=U401),
        AgentError(agent=NAME, said="error", status=401, message=U401, cause="provider"),
        AgentError(agent=NAME, said="turn.failed", status=401, message=U401, cause="provider")]
    assert not kinds(events, AgentAnswer)  # "Searching." came before the failure: not the agent's answer


def test_a_model_rerouted_item_is_a_model_switch():
    events = parse(GOLDEN["rerouted.jsonl"])
    assert kinds(events, AgentModelSwitch) == [AgentModelSwitch(
        agent=NAME, said="item.error.model_rerouted", requested="gpt-5", used="gpt-5-mini",
        trigger="HighRiskCyberActivity", message="model rerouted: gpt-5 -> gpt-5-mini (HighRiskCyberActivity)")]
    assert not kinds(events, AgentError, WitnessRaw)
    assert usage_of(events).normalized.total_tokens == 1522


def test_issue_kind_a_zeroed_usage_is_unknown_not_a_measured_zero():
    use = usage_of(parse(GOLDEN["zero_usage.jsonl"]))
    assert use.normalized is None and use.usage["input_tokens"] == 0  # as reported, out of the arithmetic
    assert use.usage_missing_reason == ("turn.completed usage is all zeros: what codex writes when no token count"
                                        " arrived (Usage::default()), not a measurement")


def test_refusals_told_in_the_item_are_refused_and_a_commands_own_failure_errored():
    events = parse(GOLDEN["declined.jsonl"])
    assert [(e.call_id, e.outcome) for e in kinds(events, AgentToolResult)] == [
        ("item_1", "refused"),  # declined
        ("item_2", "refused"),  # failed, no exit code, the policy's words
        ("item_3", "errored"),  # ran: exit 1, the shell's "Permission denied"
        ("item_4", "errored"),  # ran and printed a refusal's words
        ("item_5", "errored"),  # a declined patch is "failed" with no text in 0.171.0: cannot be told apart
    ]


def lines(*objects: dict) -> bytes:
    return b"".join(json.dumps(o).encode() + b"\n" for o in objects)


START = [{"type": "thread.started", "thread_id": "t"}, {"type": "turn.started"}]


def turn(**usage: int) -> dict:
    return {"type": "turn.completed", "usage": {"input_tokens": 100, "cached_input_tokens": 0, "output_tokens": 5,
                                                **usage}}


def test_an_error_the_session_went_on_from_is_not_terminal():
    # (whether 0.171.0 writes this warning as an error line is unconfirmed: any error line it went on from)
    item = {"type": "item.completed", "item": {"id": "i", "type": "agent_message", "text": "done"}}
    events = parse(lines(*START, {"type": "error", "message": "Falling back from WebSockets to HTTPS transport."},
                         item, turn()))
    assert kinds(events, AgentError) == [AgentError(agent=NAME, said="error", terminal=False,
                                                    message="Falling back from WebSockets to HTTPS transport.")]
    assert kinds(events, AgentAnswer) == [AgentAnswer(agent=NAME, text="done")]


def test_a_failed_turn_followed_by_another_turn_was_not_the_end():
    events = parse(lines(*START, {"type": "turn.failed", "error": {"message": "exceeded retry limit, last status: 429"
                                                                               " Too Many Requests"}},
                         {"type": "turn.started"}, turn()))
    assert kinds(events, AgentError) == [AgentError(agent=NAME, said="turn.failed", status=429, terminal=False,
                                                    cause="provider",
                                                    message="exceeded retry limit, last status: 429 Too Many Requests")]


@pytest.mark.parametrize("output", [
    "patch rejected by user",
    "approval required by policy rule, but AskForApproval::Granular.rules is false",
    "approval policy is Never; reject command — you cannot request additional permissions",
    "`rm -rf /` rejected: policy forbids commands starting with `rm`",
    "This action was rejected due to unacceptable risk.\nReason: exfiltration",
    "EXEC COMMAND REJECTED BY USER",
])
def test_every_refusal_wording_of_an_unrun_command_is_refused(output):
    item = {"id": "c", "type": "command_execution", "command": "x", "aggregated_output": output, "exit_code": None,
            "status": "failed"}
    events = parse(lines(*START, {"type": "item.completed", "item": item}, turn()))
    assert [e.outcome for e in kinds(events, AgentToolResult)] == ["refused"]


def test_a_zeroed_turn_among_running_totals_counts_only_when_it_is_the_last():
    early = parse(lines(*START, turn(input_tokens=0, output_tokens=0), {"type": "turn.started"}, turn()))
    assert usage_of(early).normalized.input_tokens == 100  # the last running total is a real one
    late = parse(lines(*START, turn(), {"type": "turn.started"}, turn(input_tokens=0, output_tokens=0)))
    assert usage_of(late).normalized is None


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_byte_at_a_time_gives_the_same_events(name):
    data = GOLDEN[name]
    assert parse(data, [1] * len(data)) == parse(data)


@settings(max_examples=80, deadline=None)
@given(name=st.sampled_from(sorted(GOLDEN)), cuts=st.lists(st.integers(0, 600), max_size=10))
def test_any_split_gives_the_same_events(name, cuts):
    assert parse(GOLDEN[name], cuts) == parse(GOLDEN[name])


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_trailing_junk_is_kept_raw_and_the_rest_stands(name):
    events = parse(GOLDEN[name] + b"\x00\xff junk")
    assert [e for e in events if not isinstance(e, (WitnessRaw, AgentUsage))] == [
        e for e in parse(GOLDEN[name]) if not isinstance(e, (WitnessRaw, AgentUsage))]
    assert "its last line was cut mid-way" in usage_of(events).incomplete


@pytest.mark.parametrize(("message", "cause"), [
    ("Quota exceeded. Check your plan and billing details.", "provider"),
    ("Selected model is at capacity. Please try a different model.", "provider"),
    ("turn aborted. Something went wrong? Hit `/feedback` to report the issue.", "agent"),
    ("sandbox error: landlock", "agent"),
    ("something else", ""),
])
def test_who_failed_is_read_from_the_codex_error_text(message, cause):
    [error] = kinds(parse(lines(*START, {"type": "turn.failed", "error": {"message": message}})), AgentError)
    assert error.cause == cause
