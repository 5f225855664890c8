"""Real agent CLIs on a scripted model that fails: an API error, a stream that fails mid-way,
a provider that recovers after retries. Each run is recorded in the chamber and replayed;
the ledger must hold what the in-band detectors need (the proxy's failed calls), and the
verdict must follow: void as an infrastructure failure, or clean when the retry worked."""

from __future__ import annotations

from pathlib import Path

import pytest

from caisson.cli import main
from caisson.detectors.inband import IN_BAND, SESSION
from caisson.home import ensure_operator_key
from caisson.model._process import scripted_model
from caisson.replay import replay_runs
from ledger import read_records, verify_ledger
from ledger.events import AgentError, AgentRetry, LlmCall, RunEnded
from tests.caisson.agent_runs import KEY, OPENAI_KEY, SCRIPTS, codex_scenario, make_repo, scenario

OVERLOADED = "error status 529: overloaded_error: Overloaded"
PROMPT_TOO_LONG = "error status 400: invalid_request_error: prompt is too long: 205351 tokens > 200000 maximum"
BAD_KEY = ("error status 401: invalid_request_error: invalid_api_key: Incorrect API key provided:"
           " sk-opena*********0000. You can find your API key at https://platform.openai.com/account/api-keys.")
STREAM_FAILED = "response failed:server_error"


def record(tmp_path: Path, monkeypatch, agent: str, script: str, *extra: str):
    """Record ``agent`` on question where-answer against ``script``; check the ledger verifies.

    Returns:
        (events, the run's replay).
    """
    repo = make_repo(tmp_path)
    run_dir = tmp_path / "run"
    with scripted_model(SCRIPTS / script) as address:
        if agent == "claude-code":
            monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
            path = scenario(tmp_path, address)
        else:
            monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
            path = codex_scenario(tmp_path, address)
        main(["record", "--scenario", str(path), "--repo", str(repo), "--question", "where-answer",
              "--agent", agent, "--out", str(run_dir), *extra])
    key = ensure_operator_key().verify_key
    assert verify_ledger(run_dir, key).status == "ok"
    events = [r.event for r in read_records(run_dir)]
    [ended] = [e for e in events if isinstance(e, RunEnded)]
    assert ended.status == "completed", ended  # the agent ended the session itself: no timeout
    [result] = replay_runs([run_dir], key)
    return events, result


def retries_said(events) -> list[tuple[int | None, int | None, int | None]]:
    """The retries the agent's transcript reports (``agent.retry``): (attempt, cap, status)."""
    return [(e.attempt, e.max_attempts, e.status) for e in events if isinstance(e, AgentRetry)]


def reconnects(status: int | None, times: int = 5) -> list[tuple[int, int, int | None]]:
    """Codex 0.171.0's ``Reconnecting... N/5 (...)`` lines, as agent.retry reads them (the status
    where the line's error names one: ``unexpected status 401 Unauthorized``)."""
    return [(n, 5, status) for n in range(1, times + 1)]


@pytest.mark.parametrize(("agent", "script", "calls", "retries", "status", "message"), [
    # a 400 is not retried: one call, and the session is over
    ("claude-code", "api_error.toml", [(True, PROMPT_TOO_LONG)], [], 400,
     f"no model call succeeded (1 made); the last: {PROMPT_TOO_LONG}"),
    # an error event mid-stream; Claude Code asks again without streaming and gets the 500
    ("claude-code", "midstream_error.toml",
     [(True, "stream error event #2: api_error: Internal server error"),
      (False, "error status 500: api_error: Internal server error")], [], 500,
     "no model call succeeded (2 made); the last: error status 500: api_error: Internal server error"),
    # Codex reconnects five times on either, then the turn fails
    ("codex", "codex_api_error.toml", [(True, BAD_KEY)] * 6, reconnects(401), 401,
     f"no model call succeeded (6 made); the last: {BAD_KEY}"),
    ("codex", "codex_stream_failed.toml", [(True, STREAM_FAILED)] * 6, reconnects(None), None,
     f"no model call succeeded (6 made); the last: {STREAM_FAILED}"),
])
def test_a_provider_that_never_answers_makes_the_cell_an_infrastructure_failure(
        agent_image, tmp_path, monkeypatch, agent, script, calls, retries, status, message):
    events, result = record(tmp_path, monkeypatch, agent, script)
    assert [(c.streamed, c.failed) for c in events if isinstance(c, LlmCall)] == calls
    assert retries_said(events) == retries
    said = [e for e in events if isinstance(e, AgentError)]  # the agent's own word: a provider failure
    assert said and said[-1].terminal and said[-1].cause == "provider" and said[-1].status == status
    [found] = [f for f in result.findings if f.detector == IN_BAND]
    assert (found.kind, found.effect) == ("infra_failure", "void")
    assert found.message.startswith(message), found.message  # the proxy's record first, status first
    assert f"; {agent} said: " in found.message  # then what the agent said
    assert result.status == "void" and result.score is None


@pytest.mark.parametrize(("agent", "script", "arm", "failed", "retries"), [
    ("claude-code", "overloaded_then_answer.toml", ["--arm", "shell"], OVERLOADED, [(1, 10, 529), (2, 10, 529)]),
    ("codex", "codex_retry_then_answer.toml", [], STREAM_FAILED, reconnects(None, 2)),
])
def test_a_retry_that_worked_leaves_the_cell_clean(agent_image, tmp_path, monkeypatch, agent, script, arm, failed,
                                                   retries):
    events, result = record(tmp_path, monkeypatch, agent, script, *arm)
    calls = [c for c in events if isinstance(c, LlmCall)]
    assert [c.failed for c in calls] == [failed, failed, None, None]  # the proxy saw the failures, then the turns
    assert [c.stop_reason for c in calls][2:] == (["tool_use", "end_turn"] if agent == "claude-code"
                                                  else ["completed", "completed"])
    assert retries_said(events) == retries and not [e for e in events if isinstance(e, AgentError)]
    assert not [f for f in result.findings if f.detector == IN_BAND]
    assert [f.kind for f in result.findings if f.detector == SESSION] == ["retry", "retry"]  # shown, info
    assert (result.status, result.score) == ("clean", 1.0), result.reasons
