"""What the model side did, on real Claude Code and the scripted model: a substituted model."""

from __future__ import annotations

import pytest

from caisson.home import ensure_operator_key
from caisson.replay import replay_runs
from ledger.events import LlmCall
from tests.caisson.agent_runs import run
from tests.caisson.test_agents import model_server, repo  # noqa: F401 (fixtures)


@pytest.mark.parametrize("model_server", ["substituted.toml"], indirect=True)
def test_a_cell_served_by_another_model_is_void_with_model_substituted(agent_image, model_server, repo, tmp_path):
    run_dir, events = run(tmp_path, repo, model_server)
    calls = [e for e in events if isinstance(e, LlmCall) and e.requested_model == "claude-sonnet-4-5"]
    assert [c.served_model for c in calls] == ["claude-haiku-4-5"]
    [result] = replay_runs([run_dir], ensure_operator_key().verify_key)
    assert result.status == "void"
    [finding] = [f for f in result.findings if f.kind == "model_substituted"]
    assert finding.message == "asked for claude-sonnet-4-5, served by claude-haiku-4-5 (1 call(s))"


@pytest.mark.parametrize("model_server", ["provider_web_search.toml"], indirect=True)
def test_a_web_search_the_provider_ran_is_recorded_and_escapes_an_arm_without_web(agent_image, model_server, repo,
                                                                                 tmp_path):
    run_dir, events = run(tmp_path, repo, model_server, "--arm", "shell")
    [searched] = [e for e in events if isinstance(e, LlmCall) and e.server_tools]
    assert searched.server_tools == {"web_search": 1}
    assert searched.usage["server_tool_use"] == {"web_search_requests": 1}
    [result] = replay_runs([run_dir], ensure_operator_key().verify_key)
    assert result.status == "void"
    [escape] = [f for f in result.findings if f.kind == "tool_escape"]
    assert escape.message == "strategy web is outside the grant and ran: web_search (run by the provider, 1x)"
