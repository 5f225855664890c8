"""Real agent CLIs in the chamber on the scripted model: Claude Code (and its gating)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from caisson.agents.sessionfiles import session_usage
from caisson.cli import main
from caisson.home import ensure_operator_key
from caisson.model._process import scripted_model
from caisson.replay import replay_runs
from ledger import BlobStore, read_records
from ledger.events import (
    AgentAnswer, AgentSessionFile, AgentToolCall, AgentToolResult, AgentTools, AgentUsage, FileOpen, LlmCall, ProcessExec,
    RunAgent,
)
from tests.caisson.agent_runs import KEY, SCRIPTS, make_repo, record_codex, run, scenario, where_answer_scenario


@pytest.fixture
def model_server(request):
    """``caisson model serve`` on 127.0.0.1 (a free port) playing the script named by the test."""
    with scripted_model(SCRIPTS / request.param) as address:
        yield address


@pytest.fixture
def repo(tmp_path) -> Path:
    return make_repo(tmp_path)


def test_claude_code_greps_and_three_witnesses_agree(claude_grep_run):
    run_dir, events = claude_grep_run  # grep_then_answer.toml, arm shell
    # the transcript: one Bash call, executed, and the answer
    [call] = [e for e in events if isinstance(e, AgentToolCall)]
    assert (call.tool, call.input) == ("Bash", {"command": 'grep -rn "def answer" .'})
    assert [e.outcome for e in events if isinstance(e, AgentToolResult)] == ["executed"]
    assert [e.text for e in events if isinstance(e, AgentAnswer)] == ["`answer` is defined in src/app.py:1"]
    # strace: the Bash tool's shell ran the command, and the search it started opened the file
    # (Claude Code shadows grep with the ugrep embedded in its own binary: argv[0] "ugrep")
    execs = [e for e in events if isinstance(e, ProcessExec)]
    shell = next(e for e in execs if e.path == "/bin/bash" and any('grep -rn "def answer" .' in a for a in e.argv))
    [search] = [e for e in execs if e.ppid == shell.pid and e.argv[0] in ("grep", "ugrep")]
    assert "def answer" in search.argv and "-rn" in search.argv
    assert any(isinstance(e, FileOpen) and e.path == "/work/sandbox/src/app.py" and e.result is not None
               and e.pid == search.pid for e in events)
    # the proxy: the two model calls, first-hand
    calls = [e for e in events if isinstance(e, LlmCall)]
    assert [(c.served_model, c.stop_reason) for c in calls] == [("claude-sonnet-4-5", "tool_use"),
                                                                 ("claude-sonnet-4-5", "end_turn")]
    # usage truth: Anthropic's input, cache-write and cache-read are separate addends
    assert [(c.usage["input_tokens"], c.usage["cache_creation_input_tokens"], c.usage["cache_read_input_tokens"],
             c.usage["output_tokens"]) for c in calls] == [(900, 2048, 0, 40), (60, 0, 2948, 12)]
    assert [(c.normalized.input_tokens, c.normalized.output_tokens, c.normalized.total_tokens) for c in calls] == [
        (2948, 40, 2988), (3008, 12, 3020)]
    [usage] = [e for e in events if isinstance(e, AgentUsage)]
    assert (usage.usage["input_tokens"], usage.usage["cache_creation_input_tokens"],
            usage.usage["cache_read_input_tokens"], usage.usage["output_tokens"]) == (960, 2048, 2948, 52)
    assert (usage.normalized.input_tokens, usage.normalized.output_tokens) == (5956, 52)  # no double counting
    # the session file the recorder collected from the config home tells the same (what backfill reads)
    [session] = [e for e in events if isinstance(e, AgentSessionFile)]
    assert session.agent == "claude-code" and session.path.startswith(".claude/projects/-work-sandbox/")
    late = session_usage([(session.path, BlobStore(run_dir / "blobs").get(session.blob_sha256))])
    assert (late.normalized.input_tokens, late.normalized.output_tokens) == (5956, 52)
    [tools] = [e for e in events if isinstance(e, AgentTools)]
    assert "Bash" in tools.tools and "Write" not in tools.tools
    [result] = replay_runs([run_dir], ensure_operator_key().verify_key)
    assert (result.status, result.score) == ("clean", 1.0), result.reasons
    assert not [f for f in result.findings if f.detector.startswith(("tokens.", "enforcement."))]


@pytest.mark.parametrize("model_server", ["asks_for_write.toml"], indirect=True)
def test_a_withheld_tool_is_refused_and_the_cell_is_clean(agent_image, model_server, repo, tmp_path):
    run_dir, events = run(tmp_path, repo, model_server, "--arm", "no-write")
    assert [(e.tool, e.outcome) for e in events if isinstance(e, AgentToolResult)] == [("Write", "refused")]
    assert not any(isinstance(e, FileOpen) and e.path.endswith("notes.txt") for e in events)
    [result] = replay_runs([run_dir], ensure_operator_key().verify_key)
    assert result.status == "clean", result.reasons
    assert [f.kind for f in result.findings if f.detector.startswith("enforcement.tool_escape")] == ["tool_refused"]


@pytest.mark.parametrize("model_server", ["asks_for_write.toml"], indirect=True)
def test_without_a_grant_the_permission_denial_shows_in_the_transcript(agent_image, model_server, repo, tmp_path):
    run_dir, events = run(tmp_path, repo, model_server)
    [refused] = [e for e in events if isinstance(e, AgentToolResult)]
    assert (refused.tool, refused.outcome, refused.excerpt) == ("Write", "refused", "listed in permission_denials")


@pytest.mark.parametrize("model_server", ["asks_for_write.toml"], indirect=True)
def test_a_wrong_deny_list_lets_the_tool_run_and_tool_escape_fires(agent_image, model_server, repo, tmp_path):
    from caisson.run.record import RecordOptions, record
    from caisson.run.witnesses import default_witnesses

    os.environ["ANTHROPIC_API_KEY"] = KEY
    try:
        record(RecordOptions(command=[], scenario=scenario(tmp_path, model_server), repo=repo, out=tmp_path / "run",
                             question="where-answer", agent="claude-code", arm="no-write", weaken=["deny_list"]),
               witnesses=default_witnesses())
    finally:
        os.environ.pop("ANTHROPIC_API_KEY")
    events = [r.event for r in read_records(tmp_path / "run")]
    assert [(e.tool, e.outcome) for e in events if isinstance(e, AgentToolResult)] == [("Write", "executed")]
    # strace agrees: the file was written (atomically: a temp file through the directory's
    # fd, /proc/self/fd/N/..., then a rename; the parser maps the fd back to its path)
    assert any(isinstance(e, FileOpen) and e.path.startswith("/work/sandbox/notes.txt.tmp") and e.access == "w"
               and e.result is not None for e in events)
    assert any(getattr(e, "syscall", "") in ("rename", "renameat", "renameat2")
               and e.target == "/work/sandbox/notes.txt" for e in events)
    [result] = replay_runs([tmp_path / "run"], ensure_operator_key().verify_key)
    assert result.status == "void"
    assert any(r.startswith("tool_escape: strategy write") for r in result.reasons), result.reasons


def test_codex_runs_a_scripted_task_ungated_and_its_usage_is_kept_as_reported(codex_grep_run, tmp_path):
    path, repo, run_dir = codex_grep_run  # codex_grep.toml, recorded with no arm
    assert record_codex(path, repo, tmp_path / "refused", "--arm", "no-shell") == 2
    assert not (tmp_path / "refused").exists()  # an ungated agent cannot run an arm that withholds
    events = [r.event for r in read_records(run_dir)]
    started = events[0]
    assert started.agent == RunAgent(name="codex", gating="ungated", version="0.171.0", elicitation="stream",
                                     model="gpt-5")
    assert [(e.tool, e.outcome) for e in events if isinstance(e, AgentToolResult)] == [("exec_command", "executed")]
    assert any(isinstance(e, ProcessExec) and "grep -rn 'def answer' ." in " ".join(e.argv) for e in events)
    calls = [e for e in events if isinstance(e, LlmCall)]
    assert [(c.endpoint, c.stop_reason) for c in calls] == [("responses", "completed")] * 2
    [usage] = [e for e in events if isinstance(e, AgentUsage)]
    # OpenAI breakdowns: cached tokens are inside input, reasoning inside output, never added
    assert usage.usage == {"input_tokens": 1480, "cached_input_tokens": 900, "cache_write_input_tokens": 0,
                           "output_tokens": 42, "reasoning_output_tokens": 10}
    assert (usage.normalized.input_tokens, usage.normalized.output_tokens) == (1480, 42)
    assert sum(c.normalized.input_tokens for c in calls) == 1480
    [session] = [e for e in events if isinstance(e, AgentSessionFile)]  # its rollout file, collected
    assert session.agent == "codex" and session.path.startswith(".codex/sessions/")
    late = session_usage([(session.path, BlobStore(run_dir / "blobs").get(session.blob_sha256))])
    assert (late.normalized.input_tokens, late.normalized.output_tokens) == (1480, 42)
    [result] = replay_runs([run_dir], ensure_operator_key().verify_key)
    assert result.status == "clean" and result.score == 1.0, result.reasons


@pytest.mark.parametrize("model_server", ["mini_grep.toml"], indirect=True)
def test_mini_swe_agent_runs_a_scripted_task_ungated_from_its_trajectory_file(agent_image, model_server, repo,
                                                                               tmp_path):
    path = where_answer_scenario(tmp_path / "mini.toml", name="mini", credential="OPENAI_API_KEY",
                                 provider_host="api.openai.com", address=model_server, model="gpt-5",
                                 arms={"no-write": (["bash"], ["Write"])})
    os.environ["OPENAI_API_KEY"] = "sk-openai-scripted-test-0000"
    try:
        assert main(["record", "--scenario", str(path), "--repo", str(repo), "--question", "where-answer",
                     "--agent", "mini-swe-agent", "--arm", "no-write", "--out", str(tmp_path / "refused")]) == 2
        assert main(["record", "--scenario", str(path), "--repo", str(repo), "--question", "where-answer",
                     "--agent", "mini-swe-agent", "--out", str(tmp_path / "run")]) == 0
    finally:
        os.environ.pop("OPENAI_API_KEY")
    events = [r.event for r in read_records(tmp_path / "run")]
    assert events[0].agent == RunAgent(name="mini-swe-agent", gating="ungated", version="2.4.6",
                                       elicitation="answer_file", model="gpt-5")
    assert [(e.tool, e.outcome) for e in events if isinstance(e, AgentToolResult)] == [("bash", "executed")] * 2
    assert any(isinstance(e, ProcessExec) and "grep -rn 'def answer' ." in " ".join(e.argv) for e in events)
    calls = [e for e in events if isinstance(e, LlmCall)]
    assert [c.endpoint for c in calls] == ["chat.completions"] * 2
    [usage] = [e for e in events if isinstance(e, AgentUsage)]
    assert usage.normalized.input_tokens == sum(c.normalized.input_tokens for c in calls) == 2090
    [result] = replay_runs([tmp_path / "run"], ensure_operator_key().verify_key)
    assert result.status == "clean" and result.score == 1.0, result.reasons


def test_preflight_passes_a_gated_arm_refuses_an_ungated_combination_and_aborts_on_a_wrong_deny_list(
        agent_image, repo, tmp_path):
    from caisson.probes.preflight import preflight

    path = tmp_path / "pre.toml"
    path.write_text('''
name = "pre"
pass_credentials = ["ANTHROPIC_API_KEY", "OPENAI_API_KEY"]
[[questions]]
id = "q"
prompt = "Where is the function `answer` defined?"
[[arms]]
name = "no-write"
grant = ["Bash"]
withhold = ["Write"]
[agent]
model = "claude-sonnet-4-5"
''')
    checks = preflight(path, repo, ["claude-code", "codex"], out=tmp_path / "ok")
    assert [(c.agent, c.arm, c.status) for c in checks] == [("claude-code", "no-write", "ok"),
                                                             ("codex", "no-write", "refused")]
    assert "Write" not in checks[0].offered and "Bash" in checks[0].offered
    [bad] = preflight(path, repo, ["claude-code"], out=tmp_path / "bad", weaken=("deny_list",))
    assert bad.status == "abort" and "Write" in bad.still_denied
    assert "arm no-write, agent claude-code: denied tools still present" in bad.reason


FAKE_CLI = r'''denied=,
while [ $# -gt 0 ]; do
  case "$1" in --disallowedTools) denied=",$2,"; shift;; esac; shift
done
tools=
for t in Bash Read Write Teleport; do
  case "$denied" in *",$t,"*) ;; *) tools="$tools\"$t\",";; esac
done
printf '{"type":"system","subtype":"init","model":"fake","tools":[%s]}\n' "${tools%,}"
printf '{"type":"result","subtype":"success","result":"src/app.py:1","usage":{"input_tokens":1,"output_tokens":1}}\n'
'''
"""A Claude-Code-like build that reports one tool its adapter does not list (Teleport) and
drops what --disallowedTools names; it never calls a model."""


def test_preflight_discovers_a_tool_an_agent_build_adds_and_denies_it(agent_image, repo, tmp_path, monkeypatch):
    from caisson import agents
    from caisson.agents import claude_code
    from caisson.probes.preflight import preflight

    def command(prompt, *, allowed, denied, model=None, max_turns=None):
        return ["sh", "-c", FAKE_CLI, "fake", *claude_code.command(prompt, allowed=allowed, denied=denied)[1:]]

    fake = agents.Adapter(name="fake-cli", version="0", gating="enforced", image="agent",
                          static_tools=("Bash", "Read", "Write"), env={}, command=command,
                          transcript=claude_code.TranscriptParser)
    monkeypatch.setitem(agents.ADAPTERS, "fake-cli", fake)
    path = tmp_path / "pre.toml"
    path.write_text('''
name = "pre"
[[questions]]
id = "q"
prompt = "Where is the function `answer` defined?"
[[arms]]
name = "no-write"
grant = ["Bash"]
withhold = ["Write"]
[agent]
model = "claude-sonnet-4-5"
''')
    [check] = preflight(path, repo, ["fake-cli"], out=tmp_path / "pre")
    assert check.discovered == ["Bash", "Read", "Teleport", "Write"]  # the discovery session, no arm
    started = next(r.event for r in read_records(tmp_path / "pre" / "fake-cli--no-write"))
    assert started.arm.deny == ["Read", "Teleport", "Write"]  # upstream's new tool, denied without an adapter change
    assert check.offered == ["Bash"] and check.still_denied == []
    # the build never shows the probe's Write call refused: its claim of enforced does not hold
    assert (check.status, check.gating.claimed, check.gating.measured) == ("abort", "enforced", "not_enforced")
    assert "shows no such call" in check.gating.reason


@pytest.mark.long
def test_opencodes_claim_of_enforced_is_measured_by_the_gating_probe_and_a_wrong_deny_list_is_caught(
        agent_image, repo, tmp_path):
    from caisson.probes.preflight import preflight

    path = tmp_path / "pre.toml"
    path.write_text('''
name = "pre"
pass_credentials = ["OPENAI_API_KEY"]
[[questions]]
id = "q"
prompt = "Where is the function `answer` defined?"
[[arms]]
name = "no-write"
grant = ["bash", "read"]
withhold = ["write"]
[agent]
model = "gpt-5"
''')
    [ok] = preflight(path, repo, ["opencode"], out=tmp_path / "ok")
    assert (ok.status, ok.gating.measured, ok.gating.tool, ok.gating.outcome) == ("ok", "enforced", "glob", "refused")
    # gpt-5 sessions have apply_patch, not write: the probe calls a denied tool the agent showed it has
    assert "apply_patch" in ok.discovered and "write" not in ok.discovered and ok.offered == ["bash", "read"]
    started = next(r.event for r in read_records(tmp_path / "ok" / "opencode--no-write"))
    assert started.agent.elicitation == "stream" and "write" in started.arm.deny
    [bad] = preflight(path, repo, ["opencode"], out=tmp_path / "bad", weaken=("deny_list",))
    assert (bad.status, bad.gating.measured, bad.gating.outcome) == ("abort", "not_enforced", "executed")
