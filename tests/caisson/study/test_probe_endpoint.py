"""The gating probe's session always talks to a scripted endpoint, even for an agent whose
study endpoint is a real provider (no spend, no credential needed): its own script is
served and the provider host is routed to it."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from caisson.errors import UsageError
from caisson.gating import probe_script
from caisson.scenario import Scenario
from caisson.study._dispatch import BASELINE_QUESTION, SCRIPTED_KEY, StudySession, session_options
from ledger.events import Combo, Endpoint

COMBO = Combo(arm="no-write", agent="claude-code", adapter="claude-code", model="claude-sonnet-4-5",
              gating="enforced", endpoint=Endpoint(provider="api.anthropic.com"), deny=["Write"])


def _options(tmp_path: Path, script: str | None):
    session = StudySession(run_dir=tmp_path / "baselines" / "x--gating" / "1", question_id=BASELINE_QUESTION,
                           scenario=tmp_path / "scenario.toml", baseline=True, model_script=script)
    return session_options(COMBO, session, scenario=Scenario(name="s"), repo=tmp_path, commit="0" * 40,
                           command=[], timeout_s=None, study_dir=tmp_path, weaken=[])


def test_a_provider_agent_needs_its_credential_for_a_cell(tmp_path, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(UsageError, match="ANTHROPIC_API_KEY is not set"):
        with _options(tmp_path, None):
            pass


def test_the_gating_probe_of_a_provider_agent_runs_on_its_own_scripted_endpoint(tmp_path, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with _options(tmp_path, probe_script("claude-sonnet-4-5", "Write")) as options:
        assert options.env == {"ANTHROPIC_API_KEY": SCRIPTED_KEY}
        assert options.egress.allow_hosts == ["api.anthropic.com"]
        upstream = options.egress.upstream["api.anthropic.com"]
        body = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 10, "stream": False,
                           "messages": [{"role": "user", "content": "go"}]}).encode()
        request = urllib.request.Request(f"{upstream}/v1/messages", data=body,
                                         headers={"content-type": "application/json", "x-api-key": SCRIPTED_KEY})
        reply = json.loads(urllib.request.urlopen(request, timeout=30).read())
    assert [c["name"] for c in reply["content"] if c["type"] == "tool_use"] == ["Write"]
    assert (tmp_path / "baselines" / "x--gating" / "1-model.toml").read_text().startswith("# The gating probe")
