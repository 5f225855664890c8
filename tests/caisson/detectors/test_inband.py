"""infra.in_band and model.switched as playbooks: records in, exact findings out (issue 29)."""

from __future__ import annotations

import msgspec
import pytest

from caisson.detectors import DetectorConfig, Finding
from caisson.detectors.inband import IN_BAND, MODEL_SWITCHED, in_band_failure, model_switched
from ledger import Record
from ledger.events import AgentAnswer, AgentError, AgentModelSwitch, LlmCall, RunAgent, RunLimits, RunStarted, WitnessStarted

CONFIG = DetectorConfig()
OK = LlmCall(provider="anthropic", endpoint="messages", requested_model="claude-sonnet-4-5",
             served_model="claude-sonnet-4-5-20250929")
OVERLOADED = LlmCall(provider="anthropic", endpoint="messages", requested_model="claude-sonnet-4-5",
                     failed="error status 529: overloaded_error: Overloaded")
DENIED = LlmCall(provider="anthropic", endpoint="messages", requested_model="claude-sonnet-4-5",
                 failed="error status 400: invalid_request_error: oauth_org_not_allowed")
API_ERROR = AgentError(agent="claude-code", said="result.is_error", status=400, code="oauth_org_not_allowed",
                       message="API Error: 400 ...", cause="provider")


def started(network: str = "witnessed", agent: str | None = "claude-code", model: str | None = "claude-sonnet-4-5"):
    facts = RunAgent(name=agent, gating="enforced", model=model) if agent else None
    return RunStarted(run_id="r", caisson_version="t", agent=facts, limits=RunLimits(network=network))


def play(*events) -> list[Record]:
    return [Record(seq=i, wall_ns=i, mono_ns=i, source="test", event=e) for i, e in enumerate(events)]


PROXY = WitnessStarted(witness="proxy")


def test_the_issue_example_an_api_error_the_proxy_saw_is_an_infra_failure_not_an_answer():
    """Claude Code, exit 0: its 400 ended the session; 'API Error: 400 ...' is no answer."""
    records = play(started(), PROXY, DENIED, API_ERROR)
    assert list(in_band_failure(records, CONFIG)) == [Finding(
        detector=IN_BAND, kind="infra_failure", effect="void", evidence=[2, 3],
        message="no model call succeeded (1 made); the last: error status 400: invalid_request_error:"
                " oauth_org_not_allowed; claude-code said: result.is_error: 400 oauth_org_not_allowed API Error: 400 ...")]


def test_codex_reconnecting_then_turn_failed_with_the_stream_cut_on_the_proxy():
    cut = LlmCall(provider="openai", endpoint="responses", requested_model="gpt-5",
                  failed="stream cut before response.completed")
    failed = AgentError(agent="codex", said="turn.failed", message="stream disconnected before completion: ...",
                        cause="provider")
    records = play(started(agent="codex", model="gpt-5"), PROXY, cut, cut, failed)
    [found] = in_band_failure(records, CONFIG)
    assert (found.kind, found.evidence) == ("infra_failure", [2, 3, 4]) and "stream cut" in found.message


def test_no_network_no_call_and_no_successful_call_are_each_an_infra_failure():
    """'Not logged in': the agent never reached a model; the recorder knows the chamber had no route."""
    login = AgentError(agent="claude-code", said="result.is_error", code="authentication_failed",
                       message="Not logged in · Please run /login", cause="provider")
    [none] = in_band_failure(play(started(network="none"), login), CONFIG)
    assert none.kind == "infra_failure" and "the chamber had no network" in none.message
    [silent] = in_band_failure(play(started(), PROXY, login), CONFIG)
    assert silent.kind == "infra_failure" and silent.message.startswith("claude-code made no model call")
    [refused] = in_band_failure(play(started(), PROXY, OVERLOADED, OVERLOADED), CONFIG)
    assert refused.message.startswith("no model call succeeded (2 made)") and refused.evidence == [2, 3]


def test_a_retry_that_worked_is_no_failure_and_a_session_that_ended_on_one_is_only_with_the_agents_word():
    assert list(in_band_failure(play(started(), PROXY, OVERLOADED, OK, AgentAnswer(agent="claude-code", text="x")),
                                CONFIG)) == []
    # a failed last call and no word from the CLI: a call a tool may have made fail before it killed its CLI
    assert list(in_band_failure(play(started(), PROXY, OK, OVERLOADED), CONFIG)) == []
    [ended] = in_band_failure(play(started(), PROXY, OK, OVERLOADED, API_ERROR), CONFIG)
    assert (ended.kind, ended.evidence) == ("infra_failure", [4, 3])
    assert ended.message.endswith("the proxy saw the session's last call fail: error status 529: overloaded_error:"
                                  " Overloaded")


def test_an_error_the_proxy_never_saw_is_claimed_void_and_not_retried():
    """The agent cannot buy another attempt with words (the red-team issue's fake message)."""
    [found] = in_band_failure(play(started(), PROXY, OK, OK, API_ERROR), CONFIG)
    assert (found.kind, found.effect, found.evidence) == ("claimed_error", "void", [4])
    assert "every model call the proxy saw end the session succeeded (2 in all)" in found.message


def test_a_failure_recovered_from_corroborates_nothing_and_a_request_too_long_is_the_agents_own():
    [found] = in_band_failure(play(started(), PROXY, OVERLOADED, OK, API_ERROR), CONFIG)
    assert found.kind == "claimed_error"
    too_long = LlmCall(provider="anthropic", endpoint="messages", requested_model="claude-sonnet-4-5",
                       failed="error status 400: invalid_request_error: prompt is too long: 210000 tokens > 200000"
                              " maximum")
    [own] = in_band_failure(play(started(), PROXY, OK, too_long, API_ERROR), CONFIG)
    assert own.kind == "claimed_error" and "the request's own reason" in own.message
    large = msgspec.structs.replace(too_long, failed="error status 413: request_too_large: Request exceeds the"
                                                     " maximum size")
    assert [f.kind for f in in_band_failure(play(started(), PROXY, OK, large, API_ERROR), CONFIG)] == [
        "claimed_error"]
    auth = msgspec.structs.replace(too_long, failed="error status 401: authentication_error: invalid x-api-key")
    assert [f.kind for f in in_band_failure(play(started(), PROXY, OK, auth, API_ERROR), CONFIG)] == [
        "infra_failure"]


@pytest.mark.parametrize("error, kind", [
    (AgentError(agent="claude-code", said="result.error_max_turns", code="error_max_turns", cause="limit"), None),
    (AgentError(agent="claude-code", said="result.error_during_execution", cause="agent"), "claimed_error"),
    (AgentError(agent="claude-code", said="error", code="ContextOverflowError", cause="provider", terminal=False),
     None),  # the session went on
])
def test_a_limit_and_a_notice_are_outcomes_and_the_clis_own_crash_alone_is_a_claim(error, kind):
    found = list(in_band_failure(play(started(), PROXY, OK, error), CONFIG))
    assert [f.kind for f in found] == ([kind] if kind else [])


def test_a_plain_command_is_not_held_to_model_calls():
    assert list(in_band_failure(play(started(agent=None), PROXY, API_ERROR), CONFIG)) == []
    assert list(in_band_failure(play(started(agent=None, network="none")), CONFIG)) == []


def test_model_switched_by_the_agents_word_or_by_the_last_call_it_made():
    fallback = AgentModelSwitch(agent="claude-code", said="system.model_fallback", requested="claude-sonnet-4-5",
                                used="claude-haiku-4-5", trigger="overloaded")
    assert [(f.kind, f.evidence) for f in model_switched(play(started(), fallback, OK), CONFIG)] == [
        ("model_switched", [1])]
    opus = LlmCall(provider="anthropic", endpoint="messages", requested_model="claude-opus-4-1")
    [found] = model_switched(play(started(), OK, opus, OK), CONFIG)
    assert found == Finding(detector=MODEL_SWITCHED, kind="model_switched", effect="void", evidence=[2],
                            message="1 model call(s) asked for claude-opus-4-1; the run asked the agent for"
                                    " claude-sonnet-4-5")
    haiku = LlmCall(provider="anthropic", endpoint="messages", requested_model="claude-haiku-4-5")
    assert list(model_switched(play(started(), haiku, OK, haiku), CONFIG)) == []  # Claude Code's side calls
    assert [f.kind for f in model_switched(play(started(agent="codex", model="gpt-5"), haiku), CONFIG)] == [
        "model_switched"]  # no side model of Codex's
    snapshot = LlmCall(provider="anthropic", endpoint="messages", requested_model="claude-sonnet-4-5-20250929")
    assert list(model_switched(play(started(), snapshot), CONFIG)) == []
    assert list(model_switched(play(started(model=None), haiku), CONFIG)) == []  # the agent's default: no claim


def test_retries_are_counted_once_whichever_witness_saw_them_and_compactions_shown():
    from caisson.detectors.inband import session_events
    from ledger.events import AgentCompaction, AgentRetry

    retry = AgentRetry(agent="claude-code", said="system.api_retry", attempt=1, max_attempts=10, status=529,
                       delay_ns=1_187_000_000, code="overloaded")
    compaction = AgentCompaction(agent="claude-code", trigger="auto", tokens_before=167204, tokens_after=9120)
    both = list(session_events(play(OVERLOADED, retry, OK, compaction), CONFIG))
    assert [(f.kind, f.effect, f.evidence) for f in both] == [("compaction", "info", [3]), ("retry", "info", [0])]
    told = list(session_events(play(retry, retry, OK), CONFIG))  # the proxy saw none: the agent's count
    assert [(f.kind, f.evidence) for f in told] == [("retry", [0]), ("retry", [1])]
    assert "attempt 1 of 10, 529 overloaded" in told[0].message
    assert list(session_events(play(OK, OVERLOADED), CONFIG)) == []  # the last call: nothing followed it


def test_only_the_providers_own_failure_of_the_sessions_last_call_corroborates():
    """A reviewer's case: a tool interrupts its CLI mid-stream (the proxy records the stream
    cut, by whichever side), the CLI says it aborted: no attempt is bought. The session's
    last call is its model's, not a side model's that finished after it."""
    cut = LlmCall(provider="anthropic", endpoint="messages", requested_model="claude-sonnet-4-5",
                  failed="stream cut before message_stop")
    aborted = AgentError(agent="claude-code", said="result.is_error", code="aborted_streaming", cause="agent")
    assert [f.kind for f in in_band_failure(play(started(), PROXY, OK, cut, aborted), CONFIG)] == ["claimed_error"]
    assert [f.kind for f in in_band_failure(play(started(), PROXY, OK, cut, API_ERROR), CONFIG)] == ["claimed_error"]
    own = AgentError(agent="claude-code", said="result.error_during_execution", cause="agent")
    assert [f.kind for f in in_band_failure(play(started(), PROXY, OK, OVERLOADED, own), CONFIG)] == [
        "claimed_error"]
    haiku = LlmCall(provider="anthropic", endpoint="messages", requested_model="claude-haiku-4-5")
    assert [f.kind for f in in_band_failure(play(started(), PROXY, OK, OVERLOADED, haiku, API_ERROR), CONFIG)] == [
        "infra_failure"]
