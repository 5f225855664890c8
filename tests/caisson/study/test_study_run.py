"""Studies end to end on a real Docker engine: small studies of trivial cells (a probe
command, where the agent does not matter) for the study ledger, verify DIR after
tampering, SIGKILL and resume, and the stall abort; Claude Code on the scripted model for
the isolation assertion."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from caisson.cli import main
from caisson.home import ensure_operator_key
from caisson.probes import make_probe_repo
from caisson.resources import resource_dir
from caisson.study import read_study, run_study, verify_study
from ledger import read_records
from ledger.events import (BaselineMeasured, CellEnded, CellStarted, Endpoint, StudyAborted, StudyPlanned,
                           StudyResumed)

SCENARIO = """
name = "study-test"
answer_file = "ANSWER.md"
[[questions]]
id = "where-answer"
prompt = "In which file of this tree is the function `answer` defined?"
evidence = ["src/app.py"]
required = [{ subject = "answer", pattern = "src/app.py" }]
[[questions]]
id = "where-nothing"
kind = "absence"
absent = true
prompt = "In which file is the function `nothing_here` defined?"
evidence = ["src/app.py"]
[[exclusions]]
category = "answer_key"
globs = ["benchmark/**"]
[[exclusions]]
category = "agent_instructions"
globs = ["CLAUDE.md"]
[limits]
wall_seconds = 60
[[arms]]
name = "plain"
[[arms]]
name = "no-write"
grant = ["Bash"]
withhold = ["Write"]
"""


def _study(root: Path, body: str, *, repetitions: int = 1, questions: str = "") -> Path:
    (root / "scenario.toml").write_text(SCENARIO)
    path = root / "study.toml"
    path.write_text(f'name = "t"\nscenario = "scenario.toml"\nrepetitions = {repetitions}\n{questions}\n{body}')
    return path


GREP_AGENT = '[[agents]]\nname = "grep"\ncommand = ["sh", "-c", "SLEEP grep -rn \'def answer\' src > ANSWER.md"]\n'


def _events(out: Path, kind):
    return [r.event for r in read_study(out) if isinstance(r.event, kind)]


@pytest.fixture(scope="module")
def small_study(chamber_image, tmp_path_factory) -> Path:
    """A finished study: the grep probe on two questions, one repetition; arm plain runs,
    arm no-write is refused (a command is ungated and no-write withholds Write)."""
    root = tmp_path_factory.mktemp("small-study")
    repo = make_probe_repo(root)
    study = _study(root, GREP_AGENT.replace("SLEEP ", ""))
    result = run_study(study, root / "out", repo=repo)
    assert result.state == "ended", result
    return root / "out"


def test_study_ledger_binds_baseline_and_every_cell(small_study):
    key = ensure_operator_key().verify_key
    assert verify_study(small_study, key).status == "ok"
    [planned] = _events(small_study, StudyPlanned)
    assert [c.question_id for c in sorted(planned.cells, key=lambda c: c.question_id)] == [
        "where-answer", "where-nothing"]
    assert planned.order_seed is not None and len(planned.grader) == 2
    assert [(r.arm, r.agent, r.gating, r.kind, r.cells) for r in planned.refusals] == [
        ("no-write", "grep", "ungated", "cannot", 2)]
    [baseline] = _events(small_study, BaselineMeasured)
    assert baseline.status == "ok" and (small_study / baseline.run_dir / "ledger").is_file()
    ended = _events(small_study, CellEnded)
    assert len(_events(small_study, CellStarted)) == len(ended) == 2
    scores = {e.cell_id.split("--")[2]: e.verdict.score for e in ended}
    assert scores == {"where-answer": 1.0, "where-nothing": 0.0}
    for e in ended:
        assert e.counting and e.ledger_final and len(e.ledger_head) == 64 and len(e.seal_signature) == 128
        assert (small_study / e.run_dir / "findings.json").is_file()
    assert main(["verify", str(small_study)]) == 0
    assert main(["study", "status", str(small_study)]) == 0


def test_progress_plain_lines_and_status_come_from_the_study_ledger(small_study, capsys):
    import io

    from caisson.study.progress import Progress

    stream = io.StringIO()
    progress = Progress(small_study, live=False, stream=stream)
    progress.update()
    progress.update()  # unchanged: not printed twice
    progress.close()
    assert stream.getvalue() == ("study t: ended; cells 2: done 2, void 0, left 0; refused 2; attempts 2"
                                 " (infra failures 0)\n")
    capsys.readouterr()
    assert main(["study", "status", str(small_study), "--json"]) == 0
    import json

    status = json.loads(capsys.readouterr().out)
    assert (status["state"], status["done"], status["left"], status["refused"]) == ("ended", 2, 0, 2)


def _cells(out: Path) -> list[Path]:
    return sorted(p for p in (out / "cells").glob("*/*") if p.is_dir())


def _edit(out: Path) -> None:
    ledger = _cells(out)[0] / "ledger"
    data = bytearray(ledger.read_bytes())
    data[len(data) // 2] ^= 0x01
    ledger.write_bytes(bytes(data))


def _drop(out: Path) -> None:
    shutil.rmtree(_cells(out)[0].parent)


def _swap(out: Path) -> None:
    a, b = _cells(out)[:2]
    a.rename(out / "tmp-swap")
    b.rename(a)
    (out / "tmp-swap").rename(b)


def _add(out: Path) -> None:
    src = _cells(out)[0]
    shutil.copytree(src, out / "cells" / "plain--grep--where-answer--r9" / "1")


def _edit_study_ledger(out: Path) -> None:
    ledger = out / "study" / "000" / "ledger"
    data = bytearray(ledger.read_bytes())
    data[len(data) // 2] ^= 0x01
    ledger.write_bytes(bytes(data))


@pytest.mark.parametrize("tamper", [_edit, _drop, _swap, _add, _edit_study_ledger],
                         ids=["edit", "drop", "swap", "add", "edit-study-ledger"])
def test_verify_dir_fails_after_tampering(small_study, tmp_path, tamper, capsys):
    out = tmp_path / "copy"
    shutil.copytree(small_study, out)
    assert main(["verify", str(out)]) == 0
    tamper(out)
    capsys.readouterr()
    assert main(["verify", str(out)]) == 1
    assert "TAMPERED study" in capsys.readouterr().out


def _reap(out: Path) -> None:
    """Remove containers a killed recorder left behind (ours only: by run-directory label)."""
    for ledger in out.glob("cells/*/*"):
        label = f"caisson.run_dir={ledger.resolve()}"
        ids = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={label}"], capture_output=True,
                             text=True).stdout.split()
        if ids:
            subprocess.run(["docker", "rm", "-f", *ids], capture_output=True)


@pytest.mark.long
def test_sigkill_mid_cell_then_resume_runs_the_same_cells(chamber_image, tmp_path):
    repo = make_probe_repo(tmp_path)
    study = _study(tmp_path, 'arms = ["plain"]\n' + GREP_AGENT.replace("SLEEP", "sleep 3;"), repetitions=2)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "caisson.cli", "study", "run", str(study), "--out", str(out), "--repo", str(repo)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=os.environ.copy())
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:  # wait for the second cell to be dispatched
            time.sleep(0.3)
            with contextlib.suppress(Exception):
                if len(_events(out, CellEnded)) == 1 and len(_events(out, CellStarted)) == 2:
                    break
            assert proc.poll() is None, proc.stderr.read()
        else:
            pytest.fail("the second cell never started")
        time.sleep(1.5)  # mid-cell: its chamber runs
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    _reap(out)
    [planned] = _events(out, StudyPlanned)
    killed = _events(out, CellStarted)[1]
    key = ensure_operator_key().verify_key
    assert verify_study(out, key).status == "unclosed"
    assert main(["study", "status", str(out)]) == 3  # running or stopped: resumable
    resumed = subprocess.run(cmd + ["--resume"], capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr + resumed.stdout
    report = verify_study(out, key)
    assert report.status == "ok", report.problems
    assert report.segments == 2
    [link] = _events(out, StudyResumed)
    assert link.previous_records > 0 and len(link.previous_head) == 64
    ended = _events(out, CellEnded)
    counting = sorted(e.cell_id for e in ended if e.counting)
    assert counting == sorted(c.cell_id for c in planned.cells)  # every cell, once
    attempts = [e for e in ended if e.cell_id == killed.cell_id]
    assert [(e.attempt, e.status, e.counting) for e in attempts] == [(1, "unclosed", False), (2, "clean", True)]
    assert (out / attempts[0].run_dir / "ledger").is_file()  # the old attempt stays on disk
    first = next(e for e in ended if e.counting and e.cell_id != killed.cell_id)
    assert first.attempt == 1  # the cell that closed before the kill was not run again
    assert main(["verify", str(out)]) == 0


@contextlib.contextmanager
def _host_staller(run_dir: Path):
    """Stop this process (the recorder and its witnesses) for 4 s, 1.5 s after the cell's
    ledger appears (its chamber is starting, the procfs witness ticking), as a starved or
    paused host would: the selftest's host staller, keyed on a file instead of `docker ps`."""
    pid = os.getpid()
    script = (f'i=0; while [ ! -e "{run_dir}/ledger" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done;'
              f" sleep 1.5; kill -STOP {pid}; sleep 4; kill -CONT {pid}")
    staller = subprocess.Popen(["sh", "-c", script])
    try:
        yield
    finally:
        staller.wait()


@pytest.mark.long
def test_three_stalled_cells_in_a_row_abort_the_study(chamber_image, tmp_path):
    repo = make_probe_repo(tmp_path)
    study = _study(tmp_path, 'arms = ["plain"]\n[order]\nshuffle = false\n' + GREP_AGENT.replace("SLEEP", "sleep 8;"),
                   repetitions=2)
    result = run_study(study, tmp_path / "out", repo=repo, around_cell=_host_staller)
    seen = [(e.cell_id, e.status, e.explanation()) for e in _events(tmp_path / "out", CellEnded)]
    assert result.state == "aborted" and "3 host_stalled cells in a row" in result.reason, seen
    ended = _events(tmp_path / "out", CellEnded)
    assert len(ended) == 3 and all("host_stalled" in e.explanation() and e.counting for e in ended)
    [aborted] = _events(tmp_path / "out", StudyAborted)
    assert aborted.cells == [e.cell_id for e in ended]
    assert len(_events(tmp_path / "out", CellStarted)) == 3  # the fourth cell never ran


CLAUDE_NO_WRITE = ('arms = ["no-write"]\n[[agents]]\nadapter = "claude-code"\nmodels = ["claude-sonnet-4-5"]\n'
                   'endpoint = {{ script = "{script}" }}\n')


def test_gating_probe_measures_claude_code_enforced_and_records_it(agent_image, tmp_path):
    repo = make_probe_repo(tmp_path)
    script = resource_dir("scenarios") / "model" / "asks_for_write.toml"
    study = _study(tmp_path, CLAUDE_NO_WRITE.format(script=script), questions='questions = ["where-answer"]')
    result = run_study(study, tmp_path / "out", repo=repo)
    assert result.state == "ended", result
    [baseline] = _events(tmp_path / "out", BaselineMeasured)
    assert baseline.status == "ok"
    assert (baseline.gating_claimed, baseline.gating_measured, baseline.gating_tool,
            baseline.gating_outcome) == ("enforced", "enforced", "Write", "refused")
    assert baseline.gating_evidence and baseline.gating_run_dir.startswith("baselines/")
    assert baseline.gating_run_id and baseline.gating_ledger_head
    assert [e.cell_id for e in _events(tmp_path / "out", CellEnded) if e.counting] != []
    key = ensure_operator_key().verify_key
    assert verify_study(tmp_path / "out", key).status == "ok"
    (tmp_path / "out" / baseline.gating_run_dir / "ledger").unlink()  # the probe run is bound: dropping it shows
    report = verify_study(tmp_path / "out", key)
    assert report.status == "tampered"
    assert any(p.startswith(f"gating probe {baseline.gating_run_dir}: dropped") for p in report.problems)


def test_wrong_deny_list_measures_gating_not_enforced_and_refuses_the_combination(agent_image, tmp_path):
    repo = make_probe_repo(tmp_path)
    script = resource_dir("scenarios") / "model" / "asks_for_write.toml"
    study = _study(tmp_path, CLAUDE_NO_WRITE.format(script=script), questions='questions = ["where-answer"]')
    result = run_study(study, tmp_path / "out", repo=repo, weaken=["deny_list"])
    assert result.state == "ended", result  # refused, not aborted: the other combinations would run
    [baseline] = _events(tmp_path / "out", BaselineMeasured)
    assert baseline.status == "refused" and "Write" in baseline.tools_discovered
    assert baseline.reason.startswith("gating: arm no-write, agent claude-code: claimed enforced, measured"
                                      " not_enforced: denied Write was called and not refused")
    assert (baseline.gating_claimed, baseline.gating_measured, baseline.gating_tool) == (
        "enforced", "not_enforced", "Write")
    assert baseline.gating_outcome != "refused" and baseline.gating_evidence
    probe = [r.event for r in read_records(tmp_path / "out" / baseline.gating_run_dir,
                                           ensure_operator_key().verify_key)]
    assert any(getattr(e, "tool", None) == "Write" for e in probe)
    assert _events(tmp_path / "out", CellStarted) == []
    assert not (tmp_path / "out" / "cells").exists()
    assert verify_study(tmp_path / "out", ensure_operator_key().verify_key).status == "ok"
    # The report counts the combination's cells as refused, with the measured gating as the reason.
    from caisson.study.report_input import load_study_report

    _, data = load_study_report(tmp_path / "out", ensure_operator_key().verify_key)
    assert data.cells and {c.status for c in data.cells} == {"refused"}
    [refusal] = data.refusals
    assert refusal.gating == "not_enforced" and "measured not_enforced by the preflight's probe" in refusal.reason


@pytest.mark.long
def test_checked_in_study_runs_end_to_end(agent_image, tmp_path, capsys):
    repo = tmp_path / "click"
    fetch = subprocess.run(["bash", str(resource_dir("scenarios") / "click" / "fetch_repo.sh"), str(repo)],
                           capture_output=True, text=True, env={**os.environ, "PYTHON": sys.executable})
    assert fetch.returncode == 0, fetch.stderr[-500:]
    study = resource_dir("studies") / "click-arms" / "study.toml"
    out = tmp_path / "out"
    code = main(["study", "run", str(study), "--out", str(out), "--repo", str(repo)])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "REFUSE  no-search x codex x gpt-5: gating ungated (cannot)" in text
    [planned] = _events(out, StudyPlanned)
    assert [(r.arm, r.agent, r.kind) for r in planned.refusals] == [("no-search", "codex", "cannot")]
    assert len(planned.cells) == 24 and planned.prices["gpt-5"].input_usd_per_mtok == 1.25
    baselines = _events(out, BaselineMeasured)
    assert len(baselines) == 3 and all(b.status == "ok" for b in baselines)
    assert all(b.floor_tokens for b in baselines if b.agent == "claude-code")
    codex = next(b for b in baselines if b.agent == "codex")  # no self-report: the proxy's request bodies
    assert codex.tools_discovered == [] and "exec_command" in codex.tools_requested
    narrow = next(b for b in baselines if b.arm == "no-search")
    assert narrow.tools_discovered == narrow.tools_requested == ["Bash", "Read"]
    assert (narrow.gating_claimed, narrow.gating_measured, narrow.gating_outcome) == ("enforced", "enforced", "refused")
    ended = [e for e in _events(out, CellEnded) if e.counting]
    assert sorted(e.cell_id for e in ended) == sorted(c.cell_id for c in planned.cells)
    assert not any(e.cell_id.startswith("no-search--codex") for e in ended)
    assert main(["verify", str(out)]) == 0


def test_infra_failures_are_void_attempts_and_the_first_sealed_clean_one_counts(chamber_image, tmp_path):
    from caisson.errors import ChamberError

    repo = make_probe_repo(tmp_path)
    calls: list[Path] = []

    @contextlib.contextmanager
    def engine_fails_once(run_dir: Path):
        calls.append(run_dir)
        if len(calls) == 1:
            raise ChamberError("the engine went away (injected)")
        yield

    study = _study(tmp_path, 'arms = ["plain"]\n' + GREP_AGENT.replace("SLEEP ", ""),
                   questions='questions = ["where-answer"]')
    result = run_study(study, tmp_path / "out", repo=repo, around_cell=engine_fails_once)
    assert result.state == "ended" and (result.counted, result.void) == (1, 0)
    ended = _events(tmp_path / "out", CellEnded)
    assert [(e.attempt, e.status, e.infra_failure, e.counting) for e in ended] == [
        (1, "failed", True, False), (2, "clean", False, True)]
    assert "injected" in ended[0].explanation() and ended[1].verdict.score == 1.0
    assert len(_events(tmp_path / "out", CellStarted)) == 2  # each attempt written before its dispatch

    missing = _study(tmp_path, 'arms = ["plain"]\n[[agents]]\nname = "missing"\ncommand = ["/opt/agent/bin/none"]\n',
                     questions='questions = ["where-answer"]')
    result = run_study(missing, tmp_path / "out2", repo=repo, infra_retries=1)
    ended = _events(tmp_path / "out2", CellEnded)
    assert [(e.attempt, e.infra_failure, e.counting, e.verdict.score if e.verdict else None)
            for e in ended] == [(1, True, False, None), (2, True, False, None)]
    assert all("infra_failure" in e.explanation() for e in ended)
    assert result.state == "ended" and (result.counted, result.void) == (0, 1)  # void, never a 0
    assert verify_study(tmp_path / "out2", ensure_operator_key().verify_key).status == "ok"


def test_a_session_record_refuses_aborts_the_study_with_its_reason(chamber_image, tmp_path):
    repo = make_probe_repo(tmp_path)
    study = _study(tmp_path, 'arms = ["plain"]\n' + GREP_AGENT.replace("SLEEP ", ""),
                   questions='questions = ["where-answer"]')
    (tmp_path / "scenario.toml").write_text(SCENARIO.replace('answer_file = "ANSWER.md"',
                                                             'answer_file = "ANSWER.md"\nleak_terms = ["return 42"]'))
    result = run_study(study, tmp_path / "out", repo=repo)
    assert result.state == "aborted" and "record refused" in result.reason and "return 42" in result.reason
    [baseline] = _events(tmp_path / "out", BaselineMeasured)
    assert baseline.status == "abort" and baseline.reason in result.reason
    assert _events(tmp_path / "out", CellStarted) == []
    assert verify_study(tmp_path / "out", ensure_operator_key().verify_key).status == "ok"


def test_resume_concludes_a_closed_attempt_without_running_it_again(chamber_image, tmp_path):
    repo = make_probe_repo(tmp_path)
    study = _study(tmp_path, 'arms = ["plain"]\n' + GREP_AGENT.replace("SLEEP ", ""),
                   questions='questions = ["where-answer"]')

    @contextlib.contextmanager
    def runner_dies_after_the_record(run_dir: Path):
        yield
        raise KeyboardInterrupt  # the recorder closed its ledger; the runner never wrote cell.ended

    with pytest.raises(KeyboardInterrupt):
        run_study(study, tmp_path / "out", repo=repo, around_cell=runner_dies_after_the_record)
    assert _events(tmp_path / "out", CellEnded) == [] and len(_events(tmp_path / "out", CellStarted)) == 1
    result = run_study(study, tmp_path / "out", repo=repo, resume=True)
    assert result.state == "ended" and result.counted == 1
    [ended] = _events(tmp_path / "out", CellEnded)
    assert (ended.attempt, ended.status, ended.counting, ended.verdict.score) == (1, "clean", True, 1.0)
    assert len(_events(tmp_path / "out", CellStarted)) == 1  # not dispatched again
    assert verify_study(tmp_path / "out", ensure_operator_key().verify_key).status == "ok"


def test_a_study_planned_in_the_schema_14_dict_shape_resumes_and_reports(chamber_image, tmp_path):
    """A study ledger main wrote (study.planned's members as dicts, schema 14) resumes under
    today's typed study.planned: its cells run and its report reads them."""
    import hashlib

    import msgspec

    from caisson.study import load_study, plan_study
    from caisson.study.report_input import load_study_report
    from caisson.study.studyledger import StudyLedger

    repo = make_probe_repo(tmp_path)
    study = _study(tmp_path, GREP_AGENT.replace("SLEEP ", ""), questions='questions = ["where-answer"]')
    loaded, scenario, _ = load_study(study)
    plan = plan_study(loaded, scenario, seed=7)
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    key = ensure_operator_key()
    out = tmp_path / "out"
    old = StudyLedger(out, key, run_id="study-schema14")
    data = study.read_bytes()
    assert old.put_blob(data, "study", "application/toml") == hashlib.sha256(data).hexdigest()
    # main's writer: msgspec.to_builtins of each part; a command's endpoint was {}
    planned = {"kind": "study.planned", "study": "t", "study_sha256": hashlib.sha256(data).hexdigest(),
               "scenario_sha256": old.put_blob((tmp_path / "scenario.toml").read_bytes(), "scenario",
                                               "application/toml"),
               "scenario": "scenario.toml", "repo": str(repo.resolve()), "commit": commit, "order_seed": 7,
               "combos": [{**msgspec.to_builtins(c), "endpoint": {}} for c in plan.combos],
               "cells": msgspec.to_builtins(plan.cells), "refusals": msgspec.to_builtins(plan.refusals),
               "prices": {}, "abort": {"host_stalled_in_a_row": 3}, "infra_retries": 1,
               "grader": [{"question_id": "where-answer", "key": 1.0, "empty": 0.0, "bad": 0.0, "ok": True,
                           "reason": ""}], "weakened": [], "executor": "local", "host_keys": []}
    old.append(msgspec.msgpack.decode(msgspec.msgpack.encode(planned), type=StudyPlanned))
    old.close()
    [typed] = _events(out, StudyPlanned)
    assert typed.cells == plan.cells and typed.refusals == plan.refusals and len(plan.refusals) == 1
    assert typed.combos == plan.combos and typed.combos[0].endpoint == Endpoint()  # {}: no script, no provider

    result = run_study(study, out, repo=repo, resume=True)
    assert (result.state, result.cells, result.counted) == ("ended", 1, 1), result
    verified, report = load_study_report(out, key.verify_key)
    assert verified.status == "ok", verified.problems
    assert [(c.cell_id, c.status, c.score) for c in report.cells if c.status != "refused"] == [
        (plan.cells[0].cell_id, "clean", 1.0)]
    assert [(r.arm, r.agent, r.model, r.kind) for r in report.refusals] == [("no-write", "grep", "-", "cannot")]
    assert main(["study", "report", str(out)]) == 0
