"""What the model side did, on real Claude Code and the scripted model: a substituted model."""

from __future__ import annotations

import pytest

from caisson.home import ensure_operator_key
from caisson.replay import replay_runs
from ledger.events import LlmCall
from tests.caisson.test_agents import model_server, repo, run  # noqa: F401 (fixtures)


@pytest.mark.parametrize("model_server", ["substituted.toml"], indirect=True)
def test_a_cell_served_by_another_model_is_void_with_model_substituted(agent_image, model_server, repo, tmp_path):
    run_dir, events = run(tmp_path, repo, model_server)
    calls = [e for e in events if isinstance(e, LlmCall) and e.requested_model == "claude-sonnet-4-5"]
    assert [c.served_model for c in calls] == ["claude-haiku-4-5"]
    [result] = replay_runs([run_dir], ensure_operator_key().verify_key)
    assert result.status == "void"
    [finding] = [f for f in result.findings if f.kind == "model_substituted"]
    assert finding.message == "asked for claude-sonnet-4-5, served by claude-haiku-4-5 (1 call(s))"
