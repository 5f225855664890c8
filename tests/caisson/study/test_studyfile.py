"""Study files: every kind of bad file is exit 2 and names its file, line and field; the
plan's matrix and refusals; the grader check; the baseline assessment; the status fold."""

from __future__ import annotations

from pathlib import Path

import pytest

from caisson.cli import main
from caisson.errors import ScenarioError
from caisson.resources import resource_dir
from caisson.scenario import parse_scenario
from caisson.study import assess_baseline, check_grader, load_study, plan_study, study_status
from ledger import Record
from ledger.events import (AgentTools, AgentUsage, CellEnded, CellStarted, Combo, Endpoint, Finding, HostDrained,
                           LlmUsage, PlannedCell, Refusal, StudyAborted, StudyPlanned, Verdict)

SCENARIO = """
name = "t"
[[questions]]
id = "q1"
prompt = "Where is the function `answer` defined in this tree?"
required = [{ subject = "answer", pattern = "src/app.py" }]
[[questions]]
id = "q2"
kind = "absence"
absent = true
prompt = "Where is the function `nothing` defined in this tree?"
[[arms]]
name = "plain"
[[arms]]
name = "no-write"
grant = ["Bash"]
withhold = ["Write"]
"""

GOOD = """name = "s"
scenario = "scenario.toml"
repetitions = 2
[[agents]]
adapter = "claude-code"
models = ["claude-sonnet-4-5"]
endpoint = { script = "model.toml" }
[[agents]]
adapter = "codex"
models = ["gpt-5"]
endpoint = { provider = "api.openai.com" }
[[agents]]
name = "probe"
command = ["true"]
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "scenario.toml").write_text(SCENARIO)
    (tmp_path / "model.toml").write_text('[[turns]]\ntext = "ok"\n')
    return tmp_path


def _write(folder: Path, text: str) -> Path:
    path = folder / "study.toml"
    path.write_text(text)
    return path


BAD = [
    ("not toml", 'name = "s\n', None, "line 1"),
    ("missing agents", 'name = "s"\nscenario = "scenario.toml"\n', "$", "agents"),
    ("unknown field", "colour = 1\n" + GOOD, "$.colour", "line 1, column 1"),
    ("zero repetitions", GOOD.replace("repetitions = 2", "repetitions = 0"), "$.repetitions", "line 3"),
    ("unknown adapter", GOOD.replace('"codex"', '"kodex"'), "$.agents[1].adapter", "line 9"),
    ("adapter without model", GOOD.replace('models = ["gpt-5"]\n', ""), "$.agents[1].models", "need"),
    ("adapter without endpoint", GOOD.replace('endpoint = { provider = "api.openai.com" }\n', ""),
     "$.agents[1].endpoint", "endpoint"),
    ("both endpoints", GOOD.replace('{ provider = "api.openai.com" }', '{ provider = "x", script = "model.toml" }'),
     "$.agents[1].endpoint", "exactly one"),
    ("unknown elicitation", GOOD.replace('models = ["gpt-5"]', 'models = ["gpt-5"]\nelicitation = { tone = "x" }'),
     "$.agents[1].elicitation.tone", "max_turns"),
    ("bad max_turns", GOOD.replace('models = ["gpt-5"]', 'models = ["gpt-5"]\nelicitation = { max_turns = 0 }'),
     "$.agents[1].elicitation.max_turns", ">= 1"),
    ("command without name", GOOD.replace('name = "probe"\n', ""), "$.agents[2].name", "name"),
    ("duplicate agent", GOOD + '[[agents]]\nname = "probe"\ncommand = ["true"]\n', "$.agents[3].name", "duplicate"),
    ("unknown question", GOOD.replace("repetitions = 2", 'repetitions = 2\nquestions = ["q9"]'),
     "$.questions[0]", "q9"),
    ("unknown arm", GOOD.replace("repetitions = 2", 'repetitions = 2\narms = ["fast"]'), "$.arms[0]", "fast"),
    ("missing scenario", GOOD.replace('"scenario.toml"', '"nope.toml"'), "$.scenario", "line 2"),
    ("missing script", GOOD.replace('"model.toml"', '"gone.toml"'), "$.agents[0].endpoint.script", "gone.toml"),
    ("negative price", GOOD + '[prices.gpt-5]\ninput_usd_per_mtok = -1\noutput_usd_per_mtok = 1\n',
     "$.prices[...].input_usd_per_mtok", "line 16, column 1"),
    ("abort zero", GOOD + "[abort]\nhost_stalled_in_a_row = 0\n", "$.abort.host_stalled_in_a_row", ">= 1"),
    # The study file is sealed whole in the study ledger: a credential on a command line
    # would reach it verbatim (run.started.command keeps only its fingerprint).
    ("key on a command line", GOOD.replace('command = ["true"]', 'command = ["probe", "--api-key=abc123"]'),
     "$.agents[2].command", "credential"),
    ("key-shaped token in a command", GOOD.replace('command = ["true"]',
                                                   'command = ["sh", "-c", "x sk-ant-0123456789abcdefghij"]'),
     "$.agents[2].command", "environment"),
]


@pytest.mark.parametrize("label, text, field, words", BAD, ids=[b[0] for b in BAD])
def test_every_bad_study_file_names_its_field_and_exits_2(folder, capsys, label, text, field, words):
    path = _write(folder, text)
    with pytest.raises(ScenarioError) as info:
        load_study(path)
    assert info.value.path == str(path)
    assert info.value.field == field
    assert words in str(info.value)
    assert main(["study", "plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and (field is None or field in err)


def test_a_scenario_without_arms_or_with_agent_settings_is_refused(folder):
    (folder / "scenario.toml").write_text(SCENARIO.split("[[arms]]")[0])
    with pytest.raises(ScenarioError, match="defines no"):
        load_study(_write(folder, GOOD))
    (folder / "scenario.toml").write_text(SCENARIO + '[agent]\nmodel = "m"\n')
    with pytest.raises(ScenarioError, match="sets \\[agent\\]"):
        load_study(_write(folder, GOOD))


def test_plan_refuses_withholding_arms_on_ungated_agents_and_keeps_the_rest(folder):
    study, scenario, _ = load_study(_write(folder, GOOD))
    plan = plan_study(study, scenario, seed=5)
    runs = {(c.arm, c.agent): c.gating for c in plan.combos}
    assert runs == {("plain", "claude-code"): "enforced", ("no-write", "claude-code"): "enforced",
                    ("plain", "probe"): "ungated"}
    refused = {(r.arm, r.agent): (r.gating, r.kind, r.cells) for r in plan.refusals}
    # codex: every arm denies its tools (plain grants nothing); the probe: no-write withholds Write
    assert refused == {("plain", "codex"): ("ungated", "cannot", 4), ("no-write", "codex"): ("ungated", "cannot", 4),
                       ("no-write", "probe"): ("ungated", "cannot", 4)}
    assert len(plan.cells) == 3 * 2 * 2 and len({c.cell_id for c in plan.cells}) == 12
    assert plan.seed == 5
    again = plan_study(study, scenario, seed=5)
    assert [c.cell_id for c in again.cells] == [c.cell_id for c in plan.cells]
    other = plan_study(study, scenario, seed=6)
    assert [c.cell_id for c in other.cells] != [c.cell_id for c in plan.cells]
    with pytest.raises(ValueError):
        plan_study(study, scenario, seed=None)


def test_not_enforced_is_not_yet_apart_from_ungated(folder, monkeypatch):
    import caisson.agents as agents

    spec = agents.ADAPTERS["codex"]
    monkeypatch.setitem(agents.ADAPTERS, "codex", type(spec)(**{**{f: getattr(spec, f) for f in spec.__struct_fields__},
                                                             "gating": "not_enforced"}))
    study, scenario, _ = load_study(_write(folder, GOOD))
    kinds = {r.kind for r in plan_study(study, scenario, seed=1).refusals if r.agent == "codex"}
    assert kinds == {"not_yet"}


def test_plan_json_and_refuse_lines(folder, capsys):
    path = _write(folder, GOOD)
    assert main(["study", "plan", str(path)]) == 0
    out = capsys.readouterr().out
    assert "REFUSE  no-write x codex x gpt-5: gating ungated (cannot)" in out
    assert "RUN     plain x claude-code x claude-sonnet-4-5: gating enforced" in out
    assert main(["study", "plan", str(path), "--json"]) == 0
    import json

    data = json.loads(capsys.readouterr().out)
    assert len(data["refusals"]) == 3 and len(data["cells"]) == 12


def test_checked_in_study_plans_24_cells_and_refuses_codex_without_search():
    study, scenario, _ = load_study(resource_dir("studies") / "click-arms" / "study.toml")
    plan = plan_study(study, scenario, seed=0)
    assert len(plan.cells) == 24
    assert [(r.arm, r.agent, r.kind) for r in plan.refusals] == [("no-search", "codex", "cannot")]


def test_grader_check_accepts_a_true_key_and_stops_a_false_one_or_a_lax_checklist(tmp_path):
    scenario = parse_scenario(SCENARIO.encode(), "s")
    key = tmp_path / "key.toml"
    key.write_text('[[question]]\nid = "q1"\nanswer = "`answer` is in src/app.py"\n'
                   '[[question]]\nid = "q2"\nanswer = "There is no `nothing` in this tree."\n'
                   'wrong_answer = "`nothing` is defined in src/app.py:3"\n')
    assert all(c.ok for c in check_grader(scenario, ["q1", "q2"], key))
    key.write_text('[[question]]\nid = "q1"\nanswer = "src/other.py"\n[[question]]\nid = "q2"\nanswer = "no"\n')
    bad = {c.question_id: c for c in check_grader(scenario, ["q1", "q2"], key)}
    assert not bad["q1"].ok and "key's own answer scores 0.0" in bad["q1"].reason
    lax = parse_scenario(SCENARIO.replace('required = [{ subject = "answer", pattern = "src/app.py" }]', "").encode(), "s")
    [check] = check_grader(lax, ["q1"], None)
    assert not check.ok and "known-bad answer scores 1.0" in check.reason
    with pytest.raises(ScenarioError, match="no answer for question 'q2'"):
        key.write_text('[[question]]\nid = "q1"\nanswer = "x"\n')
        check_grader(scenario, ["q1", "q2"], key)


def _records(*events) -> list[Record]:
    return [Record(seq=i, wall_ns=1_000_000_000 * (i + 1), mono_ns=i, source="t", event=e) for i, e in enumerate(events)]


def test_baseline_isolation_discovery_and_floor_playbook():
    usage = AgentUsage(agent="claude-code", token_source="claude-code result.usage",
                       normalized=LlmUsage(input_tokens=10, output_tokens=2, total_tokens=12))
    ok = assess_baseline(_records(AgentTools(agent="claude-code", surface="init", tools=["Bash", "Read"]), usage),
                         arm="a", agent="claude-code", grant=["Bash", "Read"], deny=["Write"], static=["Bash", "Write"])
    assert ok.ok and ok.tools_discovered == ["Bash", "Read"] and ok.deny == ["Write"]
    assert (ok.floor_tokens, ok.floor_source) == (12, "claude-code result.usage")
    leak = assess_baseline(_records(AgentTools(agent="claude-code", surface="init", tools=["Bash", "Write"])),
                           arm="a", agent="claude-code", grant=["Bash"], deny=["Write"], static=[])
    assert not leak.ok and leak.reason == "isolation: arm a, agent claude-code: denied tool(s) still offered: Write"
    assert leak.floor_tokens is None and leak.floor_source is None
    new = assess_baseline(_records(AgentTools(agent="claude-code", surface="init", tools=["Bash", "Teleport"])),
                          arm="a", agent="claude-code", grant=["Bash"], deny=["Write"], static=[])
    assert new.ok and new.deny == ["Teleport", "Write"]  # discovered: denied in every cell of the combination
    silent = assess_baseline(_records(), arm="a", agent="x", grant=[], deny=["Write"], static=[])
    assert not silent.ok and "no tool surface" in silent.reason
    requested = assess_baseline(_records(AgentTools(agent="claude-code", surface="init", tools=["Bash"])),
                                arm="a", agent="claude-code", grant=["Bash"], deny=["Write"], static=[],
                                requested=["Bash", "Write"])
    assert not requested.ok and requested.reason.endswith("denied tool(s) still offered: Write")
    assert (requested.tools_discovered, requested.tools_requested) == (["Bash"], ["Bash", "Write"])
    codex = assess_baseline(_records(), arm="a", agent="codex", grant=["exec_command"], deny=["web_search"],
                            static=[], requested=["exec_command"])
    assert codex.ok and codex.tools_requested == ["exec_command"]
    assert assess_baseline(_records(), arm="a", agent="probe", grant=[], deny=[], static=[]).ok


CLEAN = Verdict(status="clean", score=1.0)


def _cell(cell_id: str) -> PlannedCell:
    return PlannedCell(cell_id=cell_id, arm="a", agent="x", question_id="q1", repetition=1)


def test_status_folds_attempts_infra_retries_and_abort():
    planned = StudyPlanned(study="s", study_sha256="0", cells=[_cell(c) for c in "abc"],
                           refusals=[Refusal(arm="a", agent="x", kind="cannot", cells=4)], infra_retries=1)
    records = _records(
        planned,
        CellStarted(cell_id="a", attempt=1), CellEnded(cell_id="a", attempt=1, status="clean", counting=True,
                                                       verdict=CLEAN, duration_ns=2_000_000_000),
        CellStarted(cell_id="b", attempt=1), CellEnded(cell_id="b", attempt=1, status="failed", infra_failure=True),
        CellStarted(cell_id="b", attempt=2), CellEnded(cell_id="b", attempt=2, status="failed", infra_failure=True),
        CellStarted(cell_id="c", attempt=1),
    )
    status = study_status(records)
    assert (status.cells, status.done, status.void, status.left, status.refused) == (3, 1, 1, 1, 4)
    assert (status.attempts, status.infra_failures, status.current, status.state) == (3, 2, "c", "running")
    assert status.eta_ns == status.mean_attempt_ns * 1
    aborted = study_status(records + _records(StudyAborted(reason="stall", cells=["a"])))
    assert aborted.state == "aborted" and aborted.current is None and aborted.abort_reason == "stall"


def test_status_counts_per_host_and_cells_running_at_once():
    from caisson.study import status_lines

    planned = StudyPlanned(study="s", study_sha256="0", cells=[_cell(c) for c in "abcd"], executor="ray")
    records = _records(
        planned,
        CellStarted(cell_id="a", attempt=1), CellStarted(cell_id="b", attempt=1),
        CellEnded(cell_id="a", attempt=1, status="failed", infra_failure=True, host="h1/1"),
        CellStarted(cell_id="a", attempt=2), CellStarted(cell_id="c", attempt=1),
        CellEnded(cell_id="b", attempt=1, status="void", counting=True, host="h1/1",
                  verdict=Verdict(status="void", void=[Finding(detector="host.stalled@2", kind="host_stalled",
                                                               effect="void", message="late")])),
        HostDrained(host="h1/1", reason="3 in a row", cells=["b"]),
        CellEnded(cell_id="a", attempt=2, status="clean", counting=True, verdict=CLEAN, host="h2/2"),
        CellStarted(cell_id="d", attempt=1),
    )
    status = study_status(records)
    assert (status.done, status.void, status.left, status.attempts, status.infra_failures) == (1, 1, 2, 3, 1)
    assert (status.current, status.running) == ("d", 2)
    assert {h: (c.attempts, c.counted, c.void, c.infra_failures, c.drained) for h, c in status.hosts.items()} == {
        "h1/1": (2, 1, 1, 1, True), "h2/2": (1, 1, 0, 0, False)}
    lines = status_lines(status)
    assert lines[2:] == ["  current cell d (and 1 more running)",
                         "  host h1/1: attempts 2, counted 1 (void 1), infra failures 1, DRAINED",
                         "  host h2/2: attempts 1, counted 1 (void 0), infra failures 0"]
    assert study_status(records[:1]).hosts == {}  # local: no host lines


def test_study_run_with_a_bad_file_exits_2_and_writes_nothing(folder, tmp_path):
    path = _write(folder, GOOD.replace("repetitions = 2", "repetitions = -1"))
    out = tmp_path / "never"
    assert main(["study", "run", str(path), "--out", str(out), "--repo", str(tmp_path)]) == 2
    assert not out.exists()


def test_public_surface_is_pinned():
    import caisson.study

    assert sorted(caisson.study.__all__) == [
        "BaselineFacts", "Executor", "LocalExecutor", "Progress", "SealedState",
        "SessionJob", "SessionResult", "Study", "StudyAgent",
        "StudyPlan", "StudyResult", "StudyStatus", "StudyVerifyReport", "assess_baseline", "backfill_study", "cell_id",
        "check_grader", "is_study_dir", "load_study", "load_study_report", "make_executor", "parse_study", "plan_study", "prove_cell",
        "read_study", "resolve_judge", "run_judge", "run_study", "sealed_state", "status_lines", "study_status",
        "verify_study"]
    for name in caisson.study.__all__:
        assert getattr(caisson.study, name).__module__.startswith("caisson.study.")


ANTHROPIC_BODY = b'{"model":"m","tools":[{"name":"Bash","input_schema":{}},{"name":"Read"}],"messages":[]}'
CHAT_BODY = b'{"model":"m","tools":[{"type":"function","function":{"name":"exec_command"}}]}'
RESPONSES_BODY = b'{"model":"m","tools":[{"type":"function","name":"exec_command"},{"type":"web_search"}]}'


@pytest.mark.parametrize("body, names", [
    (ANTHROPIC_BODY, ["Bash", "Read"]),
    (CHAT_BODY, ["exec_command"]),
    (RESPONSES_BODY, ["exec_command", "web_search"]),
    (b'{"model":"m"}', []),
    (b'{"tools":[1,{"x":2},{"name":""}]}', []),
    (b"[1,2]", []),
    (ANTHROPIC_BODY + b"junk", []),
    (b"\xff\xfe", []),
], ids=["anthropic", "chat", "responses", "no-tools", "odd-items", "not-object", "trailing-junk", "not-utf8"])
def test_request_tools_reads_every_provider_shape_and_refuses_junk(body, names):
    from caisson.gating import request_tools  # the one reader, shared with the gating probe

    assert request_tools(body) == names


def test_discovered_tools_reach_the_record_options_of_cells_not_of_baselines(tmp_path, monkeypatch):
    """The baseline's discovered surface feeds the cells' deny list (through
    RecordOptions.discovered_tools, which plan_run unions with the adapter's static list)."""
    from caisson.run.plan import plan_run
    from caisson.scenario import parse_scenario
    from caisson.study._dispatch import StudySession, session_options

    scenario = parse_scenario(b'name = "s"\n[[questions]]\nid = "q1"\nprompt = "Where is it?"\n'
                              b'[[arms]]\nname = "a"\ngrant = ["Bash"]\nwithhold = ["Write"]\n', "s.toml")
    combo = Combo(arm="a", agent="claude", adapter="claude-code", model="m", gating="enforced",
                  endpoint=Endpoint(provider="api.anthropic.com"), grant=["Bash"], withhold=["Write"])
    session = StudySession(run_dir=tmp_path / "run", question_id="q1", scenario=tmp_path / "s.toml")
    kwargs = dict(scenario=scenario, repo=tmp_path, commit="HEAD", command=[], timeout_s=10, study_dir=tmp_path,
                  weaken=[])
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-not-a-key")
    with session_options(combo, session, discovered=["Teleport"], **kwargs) as options:
        assert options.discovered_tools == ["Teleport"]
        assert "Teleport" in plan_run(options, scenario).arm.deny
    with session_options(combo, session, **kwargs) as options:
        assert options.discovered_tools == [] and "Teleport" not in plan_run(options, scenario).arm.deny


@pytest.mark.parametrize("grant, withhold, words", [
    ('["*"]', "[]", ["'*' is not a tool name", "$.arms[1].grant[0]"]),  # taken for a literal tool name before
    ('["Bsah", "Read"]', "[]", ["'Bsah' names no tool", "did you mean Bash", "$.arms[1].grant[0]"]),
    ('["Bash(git log:*)", "Raed"]', "[]", ["'Raed' names no tool", "did you mean Read", "$.arms[1].grant[1]"]),
    ('["Bash"]', '["Wirte"]', ["'Wirte' names no tool", "did you mean Write", "$.arms[1].withhold[0]"]),
    ('["mcp__search"]', "[]", ["'mcp__search' names no tool", "$.arms[1].grant[0]"]),  # no such server
])
def test_a_grant_that_names_nothing_is_refused_with_its_field_and_what_is_valid(folder, grant, withhold, words):
    """Issue 29, item 6: a setting that configures nothing is an error, never a plan that
    prints like the intended one (``*`` denied every tool; ``Bsah`` denied Bash)."""
    (folder / "scenario.toml").write_text(SCENARIO.replace('grant = ["Bash"]\nwithhold = ["Write"]',
                                                           f"grant = {grant}\nwithhold = {withhold}"))
    with pytest.raises(ScenarioError) as caught:
        load_study(_write(folder, GOOD))
    message = str(caught.value)
    assert str(folder / "scenario.toml") in message and all(w in message for w in words), message
    assert "the tools of claude-code and codex: Agent, Bash," in message  # what is valid, listed


def test_a_shared_arm_a_strategy_and_a_server_it_lists_are_valid(folder):
    """An arm a study's agents share names each agent's tools (Codex's beside Claude Code's);
    a strategy's tools and an MCP server it lists as a backend are names too."""
    text = SCENARIO.replace('grant = ["Bash"]\nwithhold = ["Write"]',
                            'grant = ["Bash", "exec_command", "mcp__search", "Lookup"]\nwithhold = ["Write"]')
    (folder / "scenario.toml").write_text(text + '[[strategies]]\nname = "search"\ntools = ["Lookup"]\n'
                                                 'backends = ["search"]\n')
    study, scenario, _ = load_study(_write(folder, GOOD))
    plan = plan_study(study, scenario, seed=1)
    combo = next(c for c in plan.combos if (c.arm, c.agent) == ("no-write", "claude-code"))
    assert "Bash" not in combo.deny and "Write" in combo.deny


def test_the_text_plan_shows_each_combinations_grant_and_deny_list(folder, capsys):
    assert main(["study", "plan", str(_write(folder, GOOD))]) == 0
    out = capsys.readouterr().out.splitlines()
    at = out.index(next(line for line in out if line.startswith("RUN     no-write x claude-code")))
    assert out[at + 1].split() == ["grant", "Bash"]
    assert out[at + 2].startswith("          deny  Agent, BashOutput,") and "Write" in out[at + 2]


def test_another_agents_spelling_is_no_name_for_the_agents_that_play_the_arm(folder):
    """A reviewer's case: Claude Code's study arm granting ["bash", "read"] (OpenCode's and
    Copilot's names) would deny Claude Code's Bash and Read: refused, as a misspelling is."""
    (folder / "scenario.toml").write_text(SCENARIO.replace('grant = ["Bash"]\nwithhold = ["Write"]',
                                                           'grant = ["bash", "read"]\nwithhold = ["Write"]'))
    claude_only = GOOD.split("[[agents]]\nadapter = \"codex\"")[0]
    with pytest.raises(ScenarioError, match="'bash' names no tool of claude-code.*did you mean Bash"):
        load_study(_write(folder, claude_only))


def test_a_shared_arm_gives_each_agent_the_deny_list_its_cells_record(folder):
    """The study's plan and the cell's record derive one deny list: an arm that grants
    every codex tool and withholds only Claude Code's WebFetch and WebSearch runs codex
    (its withheld names configure nothing for it), never refused for denying them."""
    from caisson.agents import adapter
    from caisson.run.plan import RecordOptions, plan_run

    codex_tools = ", ".join(f'"{t}"' for t in adapter("codex").static_tools)
    (folder / "scenario.toml").write_text(SCENARIO.replace(
        'grant = ["Bash"]\nwithhold = ["Write"]', f'grant = [{codex_tools}, "Bash"]\nwithhold = ["WebFetch", "WebSearch"]'))
    study, scenario, _ = load_study(_write(folder, GOOD))
    plan = plan_study(study, scenario, seed=1)
    combos = {(c.arm, c.agent): c for c in plan.combos}
    assert ("no-write", "codex") in combos and combos[("no-write", "codex")].deny == []
    assert not [r for r in plan.refusals if (r.arm, r.agent) == ("no-write", "codex")]
    for agent in ("claude-code", "codex"):
        cell = plan_run(RecordOptions(command=[], question="q1", agent=agent, arm="no-write",
                                      arm_shared_with=["claude-code", "codex"]), scenario)
        assert list(cell.arm.deny) == list(combos[("no-write", agent)].deny), agent
    assert {"WebFetch", "WebSearch"} <= set(combos[("no-write", "claude-code")].deny)
