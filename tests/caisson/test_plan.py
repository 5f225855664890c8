"""The plan stage: options and scenario in, a `RunPlan` (or a usage error naming the option) out.

`plan_run` is pure, so most of this runs without an engine; the last test drives
`caisson record` through the CLI with one bad option at a time and checks that nothing
that looks like a run is left behind.
"""

from __future__ import annotations


import msgspec
import pytest

from caisson.cli import build_parser, main
from caisson.errors import ScenarioError, UsageError
from caisson.run import Controls, MonitorAddress, RecordOptions, RunPlan, plan_run
from caisson.run.plan import WEAKENABLE
from caisson.scenario import Egress, parse_scenario
from ledger.events import Refusal, RunAgent, RunArm

SCENARIO_BYTES = b'''
name = "plan"
user = "agent"
[[questions]]
id = "q1"
prompt = "Where is the function `answer` defined?"
[[arms]]
name = "no-write"
grant = ["Bash"]
withhold = ["Write"]
[[arms]]
name = "everything"
grant = []
[[arms]]
name = "no-patch"
grant = ["exec_command"]
withhold = ["apply_patch"]
[limits]
wall_seconds = 42
[agent]
model = "claude-sonnet-4-5"
max_turns = 3
'''
SCENARIO = parse_scenario(SCENARIO_BYTES, "plan.toml")


class W(msgspec.Struct, frozen=True):
    """A witness as the plan sees it: a name and whether it needs the chamber network."""

    name: str
    needs_network: bool = False


WITNESSES = [W("pcap", True), W("dns", True), W("proxy", True), W("strace"), W("procfs")]


def test_a_plain_command_plan():
    plan = plan_run(RecordOptions(command=["true"], env={"A": "1"}), SCENARIO, witnesses=WITNESSES)
    assert plan.command == ("true",)
    assert (plan.question, plan.agent, plan.arm, plan.refusal, plan.transcript) == (None, None, None, None, None)
    assert (plan.image, plan.image_recipe, plan.env) == (None, "chamber", {"A": "1"})
    assert (plan.user, plan.uid, plan.gid, plan.timeout_s) == ("agent", 1000, 1000, 42)
    assert plan.network == "none" and plan.witnesses == ("strace", "procfs")
    assert (plan.monitor, plan.weakened, plan.weakened.names) == (None, Controls(), [])


def test_no_scenario_is_an_adhoc_one_with_default_limits():
    plan = plan_run(RecordOptions(command=["true"]))
    assert plan.scenario.name == "adhoc" and plan.timeout_s == 600.0 and plan.witnesses == ()


def test_question_timeout_monitor_and_egress():
    egress = Egress(allow_hosts=["api.anthropic.com"])
    plan = plan_run(RecordOptions(command=["sh"], question="q1", timeout_s=5, monitor="tcp:[::1]:9000",
                                  egress=egress), SCENARIO, witnesses=WITNESSES)
    assert plan.question.id == "q1" and plan.timeout_s == 5
    assert plan.env == {"CAISSON_QUESTION_ID": "q1", "CAISSON_PROMPT": "Where is the function `answer` defined?"}
    assert plan.monitor == MonitorAddress(kind="tcp", host="::1", port=9000)
    assert plan.scenario.egress == egress and plan.network == "witnessed"
    assert plan.witnesses == ("pcap", "dns", "proxy", "strace", "procfs")


def test_an_agent_plan_has_its_command_gating_arm_and_deny_list():
    plan = plan_run(RecordOptions(command=[], question="q1", agent="claude-code", arm="no-write",
                                  env={"X": "1"}), SCENARIO)
    # the agent and the arm as run.started records them; the agent's image is the plan's image_recipe
    assert plan.agent == RunAgent(name="claude-code", gating="enforced", version="2.1.328", elicitation="stream",
                                  model="claude-sonnet-4-5")
    assert plan.arm == RunArm(name="no-write", grant=["Bash"], withhold=["Write"], deny=plan.arm.deny)
    assert "Write" in plan.arm.deny and "Bash" not in plan.arm.deny and plan.arm.deny == sorted(plan.arm.deny)
    assert plan.refusal is None and plan.transcript == "claude-code" and plan.image_recipe == "agent"
    assert plan.command[0] == "claude" and "Where is the function `answer` defined?" in plan.command
    assert plan.env["X"] == "1" and plan.env["CAISSON_QUESTION_ID"] == "q1"


def test_an_ungated_agent_with_an_arm_that_denies_is_a_refusal_value_not_an_error():
    plan = plan_run(RecordOptions(command=[], question="q1", agent="codex", arm="no-patch"), SCENARIO)
    assert isinstance(plan.refusal, Refusal)  # the type a study's plan records
    assert (plan.refusal.agent, plan.refusal.arm, plan.refusal.gating, plan.refusal.kind, plan.refusal.cells) == (
        "codex", "no-patch", "ungated", "cannot", 1)
    assert "apply_patch" in plan.arm.deny and "apply_patch" in plan.refusal.reason
    assert plan.refusal.reason.startswith("codex is ungated (its flags cannot withhold tools), so arm no-patch")
    assert plan.agent.gating == "ungated" and plan.command  # still a whole plan: a study records it
    assert plan_run(RecordOptions(command=[], question="q1", agent="codex"), SCENARIO).refusal is None


def test_an_arm_naming_another_agents_tools_is_an_error_for_this_agent():
    # Claude Code's Bash and Write name nothing codex has: withholding them would configure nothing
    with pytest.raises(ScenarioError, match=r"'Bash' names no tool of codex.*the tools of codex: apply_patch"):
        plan_run(RecordOptions(command=[], question="q1", agent="codex", arm="no-write"), SCENARIO)
    with pytest.raises(ScenarioError, match=r"'exec_command' names no tool of claude-code"):
        plan_run(RecordOptions(command=[], question="q1", agent="claude-code", arm="no-patch"), SCENARIO)


def test_an_arm_a_study_shares_names_each_agents_tools_and_hands_each_only_its_own():
    shared = parse_scenario(SCENARIO_BYTES.replace(b'name = "no-write"\ngrant = ["Bash"]\nwithhold = ["Write"]',
                                                   b'name = "no-write"\ngrant = ["Bash", "exec_command"]\n'
                                                   b'withhold = ["Write", "apply_patch"]'), "plan.toml")
    claude = plan_run(RecordOptions(command=[], question="q1", agent="claude-code", arm="no-write",
                                    arm_shared_with=["claude-code", "codex"]), shared)
    alone = plan_run(RecordOptions(command=[], question="q1", agent="claude-code", arm="no-write"), SCENARIO)
    assert claude.command == alone.command  # codex's names reach Claude Code in no flag
    assert "exec_command" not in " ".join(claude.command) and "apply_patch" not in " ".join(claude.command)
    assert claude.arm.grant == ["Bash", "exec_command"]  # the arm as the scenario wrote it, on record
    with pytest.raises(ScenarioError, match=r"'exec_command' names no tool of claude-code"):  # not shared: an error
        plan_run(RecordOptions(command=[], question="q1", agent="claude-code", arm="no-write"), shared)
    with pytest.raises(ScenarioError, match=r"'Bsah' names no tool of claude-code and codex"):
        plan_run(RecordOptions(command=[], question="q1", agent="claude-code", arm="no-write",
                               arm_shared_with=["codex"]),
                 parse_scenario(SCENARIO_BYTES.replace(b'grant = ["Bash"]', b'grant = ["Bsah"]'), "plan.toml"))


def test_weakening_the_deny_list_hands_the_withheld_tools_as_allowed_but_records_the_real_deny_list():
    honest = plan_run(RecordOptions(command=[], question="q1", agent="claude-code", arm="no-write"), SCENARIO)
    weak = plan_run(RecordOptions(command=[], question="q1", agent="claude-code", arm="no-write",
                                  weaken=["deny_list"]), SCENARIO)
    assert weak.weakened == Controls(deny_list=True) and weak.weakened.names == ["deny_list"]
    assert weak.arm == honest.arm and weak.command != honest.command
    assert "--disallowedTools" in honest.command and "--disallowedTools" not in weak.command


def test_controls_by_name():
    assert Controls.from_names(list(WEAKENABLE)).names == sorted(WEAKENABLE)
    assert Controls.from_names(["env", "network"]) == Controls(env=True, network=True)
    with pytest.raises(UsageError, match="cannot weaken nope: known controls are agent_config, deny_list, ebpf_buffer, env,"):
        Controls.from_names(["env", "nope"])


def test_a_weakened_network_is_witnessed_even_without_egress():
    plan = plan_run(RecordOptions(command=["true"], weaken=["network"]), SCENARIO, witnesses=WITNESSES)
    assert plan.network == "witnessed" and plan.witnesses[:3] == ("pcap", "dns", "proxy")


def test_the_plan_is_a_pure_function_of_its_inputs():
    options = RecordOptions(command=[], question="q1", agent="claude-code", arm="no-write", monitor="unix:/m")
    first = plan_run(options, SCENARIO, witnesses=WITNESSES)
    assert plan_run(options, SCENARIO, witnesses=WITNESSES) == first
    assert msgspec.json.decode(msgspec.json.encode(first), type=RunPlan) == first  # a study can keep it as data


@pytest.mark.parametrize("options, message", [
    (dict(command=["true"], monitor="bogus"), r"^--monitor bogus: monitor address 'bogus': expected unix:"),
    (dict(command=["true"], timeout_s=0), r"^--timeout 0: expected a number of seconds above 0$"),
    (dict(command=["true"], timeout_s=float("nan")), r"^--timeout nan:"),
    (dict(command=["true"], question="nope"), r"^--question nope: not in the scenario; its questions: q1$"),
    (dict(command=[], question="q1", agent="nope"), r"^--agent nope: unknown agent; known: claude-code, codex, copilot, mini-swe-agent, opencode$"),
    (dict(command=[], question="q1", agent="claude-code", arm="nope"),
     r"^--arm nope: not in the scenario; its arms: no-write, everything, no-patch$"),
    (dict(command=["true"], arm="no-write"), r"^--arm no-write: an arm sets an agent's tools; give --agent"),
    (dict(command=["true"], commit="HEAD"), r"^--commit needs --repo$"),
    (dict(command=[]), r"^no command given"),
    (dict(command=["true"], question="q1", agent="claude-code"), r"^--agent builds the command itself"),
    (dict(command=[], agent="claude-code"), r"^--agent needs --question ID"),
    (dict(command=["true"], weaken=["nope"]), r"^cannot weaken nope"),
    (dict(command=["true"], transcript="nope"), r"^transcript nope: no agent adapter of that name$"),
])
def test_a_bad_option_is_a_usage_error_naming_it(options, message):
    with pytest.raises(UsageError, match=message):
        plan_run(RecordOptions(**options), SCENARIO, witnesses=WITNESSES)


def test_a_user_the_tracer_cannot_name_is_refused_only_when_strace_runs():
    numeric = msgspec.structs.replace(SCENARIO, user="1234:99")
    plan = plan_run(RecordOptions(command=["true"]), numeric)
    assert (plan.uid, plan.gid) == (1234, 99)
    with pytest.raises(UsageError, match=r"scenario user '1234:99': the strace witness needs a user name"):
        plan_run(RecordOptions(command=["true"]), numeric, witnesses=WITNESSES)
    with pytest.raises(UsageError, match=r"scenario user 'nobody': use 'agent', 'root' or a numeric uid"):
        plan_run(RecordOptions(command=["true"]), msgspec.structs.replace(SCENARIO, user="nobody"))


ENGINE = {"--repo", "--commit", "--image", "--out"}  # found bad only after git or the engine answered
BAD = {
    "--scenario": (["--scenario", "MISSING"], "cannot read the scenario"),
    "--repo": (["--repo", "MISSING"], "repository"),
    "--commit": (["--repo", "LIVE", "--commit", "deadbeefcafe"], "deadbeefcafe"),
    "--out": (["--out", "FULL"], "--out"),
    "--timeout": (["--timeout", "-1"], "--timeout"),
    "--env": (["--env", "NOT AN ASSIGNMENT"], "--env"),
    "--monitor": (["--monitor", "bogus"], "--monitor"),
    "--image": (["--image", "caisson/nope:0"], "image"),
    "--question": (["--question", "nope"], "--question"),
    "--agent": (["--question", "q1", "--agent", "nope"], "--agent"),
    "--arm": (["--arm", "nope"], "--arm"),
    "--syscall-witness": (["--syscall-witness", "dtrace"], "--syscall-witness"),
}


def test_every_record_option_has_a_bad_value_below():
    record = build_parser("record")._subparsers._group_actions[0].choices["record"]
    flags = {s for a in record._actions for s in a.option_strings if s.startswith("--") and s != "--help"}
    assert flags == set(BAD)


@pytest.mark.parametrize("option", [pytest.param(o, marks=[pytest.mark.docker] if o in ENGINE else []) for o in sorted(BAD)])
def test_record_with_one_bad_option_exits_2_names_it_and_writes_no_run(option, tmp_path, capsys, request):
    if option in ENGINE:
        request.getfixturevalue("chamber_image")
    live = tmp_path / "live"
    if option == "--commit":
        from tests.helpers import commit_all, git

        live.mkdir()
        git(live, "init", "-q", "-b", "main")
        (live / "a").write_text("a\n")
        commit_all(live, "one")
    scenario = tmp_path / "s.toml"
    scenario.write_text(SCENARIO_TEXT)
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep").write_text("mine\n")
    subst = {"MISSING": str(tmp_path / "missing"), "LIVE": str(live), "FULL": str(full)}
    args, message = BAD[option]
    args = [subst.get(a, a) for a in args]
    if option != "--scenario":
        args = ["--scenario", str(scenario), *args]
    run_dir = full if option == "--out" else tmp_path / "run"
    if option != "--out":
        args += ["--out", str(run_dir)]
    command = [] if option == "--agent" else ["--", "true"]
    assert main(["record", *args, *command]) == 2
    err = capsys.readouterr().err
    assert err.startswith("caisson record: ") and message in err, err
    if option == "--out":
        assert sorted(p.name for p in full.iterdir()) == ["keep"]
    else:
        assert not run_dir.exists()


SCENARIO_TEXT = '''
name = "plan"
[[questions]]
id = "q1"
prompt = "Where is the function `answer` defined?"
[[arms]]
name = "no-write"
grant = ["Bash"]
'''


def test_discovered_tools_are_unioned_into_the_deny_list_and_a_grant_stays_allowed():
    base = plan_run(RecordOptions(command=[], question="q1", agent="claude-code", arm="no-write"), SCENARIO)
    assert "Teleport" not in base.arm.deny and {"Agent", "DeferredToolPlaceholder"} <= set(base.arm.deny)
    plan = plan_run(RecordOptions(command=[], question="q1", agent="claude-code", arm="no-write",
                                  discovered_tools=["Teleport", "Bash"]), SCENARIO)
    assert set(plan.arm.deny) == set(base.arm.deny) | {"Teleport"}  # Bash is granted: never denied
    assert "Teleport" in plan.command[plan.command.index("--disallowedTools") + 1].split(",")


def test_a_measured_not_enforced_gating_refuses_a_withholding_arm_and_never_raises_a_claim():
    plan = plan_run(RecordOptions(command=[], question="q1", agent="claude-code", arm="no-write",
                                  measured_gating="not_enforced"), SCENARIO)
    assert plan.agent.gating == "not_enforced" and plan.refusal is not None and plan.refusal.kind == "not_yet"
    assert "its gating probe saw a denied tool run" in plan.refusal.reason
    plan = plan_run(RecordOptions(command=[], question="q1", agent="codex", measured_gating="enforced"), SCENARIO)
    assert plan.agent.gating == "ungated"


@pytest.mark.parametrize("grant, message", [
    ('["*"]', "'*' is not a tool name"),
    ('["Bsah"]', "did you mean Bash"),
])
def test_record_refuses_an_arm_whose_grant_names_nothing(grant, message):
    scenario = parse_scenario(f'''
name = "plan"
[[questions]]
id = "q1"
prompt = "Where is the function `answer` defined?"
[[arms]]
name = "full"
grant = {grant}
'''.encode(), "plan.toml")
    with pytest.raises(UsageError, match="arms\\[0\\].grant\\[0\\]"):
        plan_run(RecordOptions(command=[], agent="claude-code", arm="full", question="q1"), scenario, witnesses=WITNESSES)
    with pytest.raises(UsageError, match=message):
        plan_run(RecordOptions(command=[], agent="claude-code", arm="full", question="q1"), scenario, witnesses=WITNESSES)
    discovered = RecordOptions(command=[], agent="claude-code", arm="full", question="q1", discovered_tools=["Bsah"])
    if grant == '["Bsah"]':  # a tool a session of the agent showed is one of its names
        assert plan_run(discovered, scenario, witnesses=WITNESSES).arm.grant == ["Bsah"]


@pytest.mark.parametrize("entry", ["api.example.com:https", "api.example.com:0", "*.:443", "[::1]:99999"])
def test_an_allow_entry_the_proxy_could_not_read_is_a_usage_error(entry):
    bad = msgspec.structs.replace(SCENARIO, egress=Egress(allow_hosts=["pypi.org", entry]))
    with pytest.raises(UsageError, match=r"^\[egress\] allow_hosts: allow entry"):
        plan_run(RecordOptions(command=["true"]), bad, witnesses=WITNESSES)
    good = msgspec.structs.replace(SCENARIO, egress=Egress(allow_hosts=["pypi.org", "*.example.com:8443"]))
    assert plan_run(RecordOptions(command=["true"]), good, witnesses=WITNESSES).network == "witnessed"


def test_record_refuses_another_agents_tool_name():
    scenario = parse_scenario(b'''
name = "plan"
[[questions]]
id = "q1"
prompt = "Where is the function `answer` defined?"
[[arms]]
name = "shell"
grant = ["bash"]
''', "plan.toml")
    with pytest.raises(UsageError, match="'bash' names no tool of claude-code.*did you mean Bash"):
        plan_run(RecordOptions(command=[], agent="claude-code", arm="shell", question="q1"), scenario,
                 witnesses=WITNESSES)
    assert plan_run(RecordOptions(command=[], agent="opencode", arm="shell", question="q1"), scenario,
                    witnesses=WITNESSES).arm.grant == ["bash"]
