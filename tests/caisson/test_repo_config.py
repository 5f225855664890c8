"""A repository that configures the agent (issue 15, item 5), end to end with the real
Claude Code CLI in the agent image on the scripted model.

The probe repository's `.claude/settings.json` has a `SessionStart` hook that runs a shell
command; the arm grants no shell. Withheld by default, the hook never runs and the cell is
clean of `containment.agent_config`; with that control weakened (as `caisson selftest`
does), the hook runs and the detector fires on both the file and its execution.
"""

from __future__ import annotations

import json

from caisson.home import ensure_operator_key
from caisson.probes.selftest import CASES, PROBES, run_selftest
from caisson.replay import replay_runs
from ledger import read_records
from ledger.events import ExcludedPath, ProcessExec, SandboxBuilt

HOOK = json.loads((PROBES / "claude_settings_hook.json").read_text())["hooks"]["SessionStart"][0]["hooks"][0]["command"]


def _hook_execs(run_dir) -> list[ProcessExec]:
    return [r.event for r in read_records(run_dir)
            if isinstance(r.event, ProcessExec) and r.event.argv[-1:] == [HOOK] and r.event.result == 0]


def test_a_repository_hook_is_withheld_by_default_and_caught_when_weakened(agent_image, tmp_path):
    cases = tuple(c for c in CASES if c.name in ("repo_config", "repo_config/agent_config"))
    assert len(cases) == 2
    result = run_selftest(tmp_path, cases=cases)

    intact, weakened = result.runs["repo_config"], result.runs["repo_config/agent_config"]
    [built] = [r.event for r in read_records(intact) if isinstance(r.event, SandboxBuilt)]
    assert ExcludedPath(path=".claude/settings.json", category="agent_config") in built.excluded
    assert built.agent_config == []
    assert _hook_execs(intact) == []  # withheld: Claude Code never saw the hook
    assert "containment.agent_config@1" not in result.fired["repo_config"]

    [built] = [r.event for r in read_records(weakened) if isinstance(r.event, SandboxBuilt)]
    assert [(c.path, c.agent, c.commands) for c in built.agent_config] == [
        (".claude/settings.json", "claude-code", [HOOK])]
    assert len(_hook_execs(weakened)) == 1  # the known-bad run: the hook ran a shell under a no-shell arm
    [replay] = replay_runs([weakened], ensure_operator_key().verify_key)
    kinds = sorted(f.kind for f in replay.findings if f.detector == "containment.agent_config@1")
    assert kinds == ["agent_config", "agent_config_executed"]
    assert "containment.agent_config@1" in result.fired["repo_config/agent_config"]
