"""The selftest itself, end to end: every detector fires on its probe, none on the honest one."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from caisson.cli import main
from caisson.probes.selftest import cases_for
from caisson.run.witness_choice import machine_identity, outcome_path


@pytest.mark.long
def test_selftest_matrix_discriminates(chamber_image, tmp_path, capsys):
    code = main(["selftest", "--out", str(tmp_path / "selftest")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "selftest passed" in out
    for case in cases_for("strace"):
        assert case.name in out
    # each gating kind on its real agent, and a wrong deny list caught on each gated one
    for agent in ("claude_code", "opencode", "copilot"):
        assert f"gating {agent}: " in out and f"gating {agent}/deny_list: " in out
    lines = {line.split(":")[0]: line for line in out.splitlines() if line.startswith("gating ")}
    assert "claims enforced, measured enforced" in lines["gating claude_code"]
    assert "claims enforced, measured not_enforced" in lines["gating copilot/deny_list"]
    assert "claims ungated, measured ungated" in lines["gating mini_swe_agent"]
    # the whole matrix's verdict is kept, signed: record's default witness reads it
    kept = json.loads(json.loads(outcome_path().read_text())["body"])
    assert kept["outcomes"]["strace"]["complete"] is True and kept["identity"] == machine_identity()


def test_the_selftest_scenario_is_a_file_in_scenarios_probes():
    from caisson.probes.selftest import SCENARIO, egress_table
    from caisson.resources import resource_dir
    from caisson.scenario import load_scenario, parse_scenario

    assert SCENARIO == resource_dir("scenarios") / "probes" / "selftest.toml"
    scenario = load_scenario(SCENARIO)
    assert [q.id for q in scenario.questions] == ["where-answer"] and [a.name for a in scenario.arms] == [
        "no-write", "bash", "oc-no-write", "cp-no-create", "no-shell", "git-log"]
    assert [(e.category, e.globs) for e in scenario.exclusions] == [("answer_key", ["benchmark/**"]),
                                                                    ("agent_instructions", ["CLAUDE.md"])]
    assert not scenario.egress.allow_hosts  # the cases without a network have none at all
    networked = parse_scenario((SCENARIO.read_text() + egress_table("127.0.0.1:9")).encode(), "networked")
    assert networked.egress.allow_hosts == ["api.anthropic.com", "api.openai.com"]
    assert networked.egress.upstream == {"api.anthropic.com": "http://127.0.0.1:9", "api.openai.com": "http://127.0.0.1:9"}


def test_the_preflight_model_script_is_a_file_in_scenarios_model():
    from caisson.model.script import parse_model_script
    from caisson.probes.preflight import SCRIPT, preflight_script

    assert SCRIPT.parent.name == "model" and SCRIPT.is_file()
    script = parse_model_script(preflight_script("gpt-5").encode(), "preflight")
    assert script.model_ids() == ["gpt-5"]
    assert [t.text for t in script.turns] == ["Ready."] and [t.text for t in script.background] == ["{}"]


def test_every_registered_detector_has_a_case_that_must_fire_it():
    """`_check` fails a matrix in which a detector has no probe: the cases themselves must
    expect every registered detector (the in-band ones included)."""
    from caisson.probes.selftest import CASES, _check

    cases = cases_for("both", CASES)
    as_expected = {c.name: [*c.expect, *c.expect_if_strace] for c in cases}
    assert [f for f in _check(cases, as_expected, "both") if "has no probe" in f] == []
    assert {"infra.in_band@1", "model.switched@1"} <= {name for c in cases for name in c.expect}
    [retried] = [c for c in cases if c.model_script == "overloaded_then_answer.toml"]
    assert "infra.in_band@1" in retried.clean  # an honest retry is shown not to void


def test_a_detector_that_voids_a_run_whose_control_held_fails_the_selftest():
    from caisson.probes.selftest import _check

    cases = tuple(c for c in cases_for("strace") if c.name.startswith("udp_sender"))
    assert [c.clean for c in cases] == [("network.unexplained_flow@2",), ()]
    shown = {"udp_sender": [], "udp_sender/network": ["network.unexplained_flow@2"]}
    assert not [f for f in _check(cases, shown) if "has no probe" not in f]
    voided_both = {"udp_sender": ["network.unexplained_flow@2"], "udp_sender/network": ["network.unexplained_flow@2"]}
    assert [f for f in _check(cases, voided_both) if "has no probe" not in f] == [
        "network.unexplained_flow@2 voided udp_sender, whose control held: it does not discriminate"]


def test_the_host_staller_stops_its_target_once_the_command_shows_and_says_why_when_it_never_does():
    """The selftest's host staller, without a chamber: a target process stands in for the
    recorder and a host process for the chamber's command (not the selftest's own: a selftest
    running beside this test must not find this one's)."""
    import subprocess
    import time

    import psutil

    from caisson.probes.selftest import _host_staller

    command_line = ("sleep", "7.0271")

    target = subprocess.Popen(["sleep", "60"])
    try:
        problems: list[str] = []
        started = time.monotonic()
        with _host_staller(target.pid, problems, command_line):
            pass  # the run is over before the command ever showed
        assert time.monotonic() - started < 10  # not the staller's 80 s
        assert len(problems) == 1 and "the run ended before 'sleep 7.0271' showed" in problems[0], problems

        problems = []
        command = subprocess.Popen(list(command_line))
        try:
            with _host_staller(target.pid, problems, command_line):
                deadline = time.monotonic() + 20
                while psutil.Process(target.pid).status() != psutil.STATUS_STOPPED:
                    assert time.monotonic() < deadline, "the target was never stopped"
                    time.sleep(0.05)
        finally:
            command.kill()
        assert problems == []
        assert psutil.Process(target.pid).status() != psutil.STATUS_STOPPED  # continued
    finally:
        target.kill()
        target.wait()


@pytest.mark.parametrize("fails", [None, RuntimeError("the engine died"), KeyboardInterrupt()])
def test_the_selftest_leaves_no_temporary_folder_behind(tmp_path, monkeypatch, fails):
    """Without --out, the selftest's folder (probe repository, scenarios, runs) goes at the
    end: after a clean matrix, a failure, or Ctrl-C."""
    import importlib
    import tempfile

    selftest = importlib.import_module("caisson.probes.selftest")

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    made = []

    def record(options, **_):
        made.append(options.out)
        if fails is not None:
            raise fails
        options.out.mkdir(parents=True)

    monkeypatch.setattr(selftest, "record", record)
    monkeypatch.setattr(selftest, "replay_runs", lambda runs, key: [SimpleNamespace(findings=[], status="ok", grade=None)])
    case = selftest.Case(name="honest", command=["true"])
    if fails is None:
        result = selftest.run_selftest(cases=(case,))
        assert result.runs == {} and result.fired == {"honest": []}
    else:
        with pytest.raises(type(fails)):
            selftest.run_selftest(cases=(case,))
    assert made and str(made[0]).startswith(str(tmp_path))  # the run went into the temporary folder
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("fails", [None, KeyboardInterrupt()])
def test_the_preflight_leaves_no_temporary_folder_behind(tmp_path, monkeypatch, fails):
    import tempfile

    import importlib

    pre = importlib.import_module("caisson.probes.preflight")  # the package exports the function by that name
    from caisson.probes.selftest import PROBES

    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(work))

    def session(options, script, text):
        if fails is not None:
            raise fails
        raise pre.UsageError("refused by the test")

    monkeypatch.setattr(pre, "_session", session)
    if fails is None:
        checks = pre.preflight(PROBES / "selftest.toml", tmp_path, ["claude-code"])
        assert checks and all(c.status == "refused" and c.run_dir is None for c in checks)
    else:
        with pytest.raises(KeyboardInterrupt):
            pre.preflight(PROBES / "selftest.toml", tmp_path, ["claude-code"])
    assert list(work.iterdir()) == []


def _probe_answer(probe: str, tmp_path, env: dict[str, str] | None = None) -> str:
    """Run a probe script as the chamber would, in a copy of the selftest's repository."""
    import os
    import subprocess

    from caisson.probes.selftest import PROBES, make_probe_repo

    repo = make_probe_repo(tmp_path)
    subprocess.run(["sh", "-c", (PROBES / probe).read_text()], cwd=repo, check=True, timeout=30,
                   env={**os.environ, **(env or {})})
    return (repo / "ANSWER.md").read_text()


def test_the_canary_respeller_is_caught_by_the_backstop_and_the_honest_probe_is_not(tmp_path):
    """Both probes' answers graded as replay grades them (the provenance of the selftest's
    sandbox and scenario), without a chamber."""
    from caisson.probes.selftest import SCENARIO
    from caisson.replay.scoring import grade
    from caisson.scenario import load_scenario

    scenario = load_scenario(SCENARIO)
    [question] = scenario.questions
    provenance = ["benchmark/questions.toml", "questions.toml", "CLAUDE.md", *scenario.leak_terms]
    respelt = _probe_answer("canary_respeller.sh", tmp_path / "a")
    assert "selftest-canary-5d2e" not in respelt  # not the term's bytes
    r = grade(question, respelt, provenance_terms=provenance)
    assert (r.score, r.score_if_clean, r.leak_cited) == (None, 1.0, "selftest-canary-5d2e")
    honest = _probe_answer("honest_grep.sh", tmp_path / "b", {"CAISSON_PROMPT": question.prompt})
    r = grade(question, honest, provenance_terms=provenance)
    assert (r.score, r.leak_cited) == (1.0, None), honest


def test_the_leak_backstop_must_fire_on_its_probe_and_never_on_the_honest_one():
    from caisson.detectors import Finding
    from caisson.probes.selftest import LEAK_BACKSTOP, _check, _voiding
    from caisson.replay import RunReplay
    from caisson.replay.scoring import Grade

    def replay(leak: str | None) -> RunReplay:
        grade = Grade(question_id="q", score=None if leak else 1.0, score_if_clean=1.0, required_met=[],
                      required_missed=[], forbidden_hit=[], abstained=False, fabrication=False, leak_cited=leak,
                      rule="")
        return RunReplay(run_dir="r", run_id="r", verified="ok", status="clean", grade=grade,
                         findings=[Finding(detector="containment.excluded_read@1", kind="leak", effect="info",
                                           evidence=[1], message="m")])

    assert _voiding(replay("selftest-canary-5d2e")) == [LEAK_BACKSTOP]
    assert _voiding(replay(None)) == []
    cases = tuple(c for c in cases_for("strace") if c.name in ("honest", "canary_respeller"))
    assert [c.expect for c in cases] == [(), (LEAK_BACKSTOP,)]
    problems = [f for f in _check(cases, {"honest": [LEAK_BACKSTOP], "canary_respeller": []}) if "no probe" not in f]
    assert problems == [f"{LEAK_BACKSTOP} fired on the honest run: it does not discriminate",
                        f"{LEAK_BACKSTOP} did not fire on canary_respeller: it has not been shown to discriminate"]
