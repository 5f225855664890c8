"""`caisson export`: the Inspect AI eval log read back with inspect_ai, the ATIF trajectory
validated against Harbor's schema; both name the ledger head they came from."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from caisson.export import read_run, to_trajectory
from ledger import LedgerChecker, generate_keypair, load_verify_key
from tests.caisson.view.runs import leaky_run, tamper

REPO = Path(__file__).resolve().parents[3]
SCHEMA = json.loads((Path(__file__).parent / "test_export" / "atif-v1.8.schema.json").read_text())


def atif_rules(trajectory: dict) -> list[str]:
    """Harbor's model validators (harbor.models.trajectories, 0.26.0) that JSON Schema cannot say."""
    problems = []
    for i, step in enumerate(trajectory["steps"]):
        if step["step_id"] != i + 1:
            problems.append(f"steps[{i}].step_id is {step['step_id']}, expected {i + 1}")
        if step["source"] != "agent":
            problems += [f"steps[{i}].{f} on a {step['source']} step" for f in
                         ("model_name", "reasoning_effort", "reasoning_content", "tool_calls", "metrics") if f in step]
        calls = {c["tool_call_id"] for c in step.get("tool_calls", [])}
        for result in step.get("observation", {}).get("results", []):
            if result.get("source_call_id") is not None and result["source_call_id"] not in calls:
                problems.append(f"steps[{i}] observes call {result['source_call_id']} it does not make")
    return problems


@pytest.fixture
def keys(tmp_path: Path):
    key = generate_keypair(tmp_path / "key", tmp_path / "key.pub")
    return key, load_verify_key(tmp_path / "key.pub"), tmp_path / "key.pub"


def _export(path: Path, fmt: str, out: Path, key_pub: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "caisson.cli", "export", str(path), "--format", fmt, "--out", str(out),
                           "--key", str(key_pub)], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=_pythonpath()))


def _pythonpath() -> str:
    """This checkout first, unless the caller's PYTHONPATH already names it."""
    path = os.environ.get("PYTHONPATH", "")
    return path if str(REPO) in path.split(os.pathsep) else str(REPO)


def _head(run_dir: Path, key) -> tuple[str, int]:
    """The chain head and record count of a closed ledger, read with the ledger's own checker."""
    checker = LedgerChecker(key, decode=False)
    checker.feed((run_dir / "ledger").read_bytes())
    for _ in checker.records():
        pass
    assert checker.final and checker.tampered is None
    return checker.head.hex(), checker.sealed


def test_inspect_log_reads_back_with_inspect_ai(tmp_path: Path, keys):
    from inspect_ai.log import read_eval_log

    runs = tmp_path / "study"
    first = leaky_run(runs / "runs" / "cell-1", keys[0], keys[1])
    leaky_run(runs / "runs" / "cell-2", keys[0], keys[1], filler=3)
    out = tmp_path / "study.eval"
    proc = _export(runs, "inspect", out, keys[2])
    assert proc.returncode == 0, proc.stderr
    log = read_eval_log(str(out))
    assert log.status == "success"
    assert [s.id for s in log.samples] == ["cell-1", "cell-2"]
    sample = log.samples[0]
    head, records = _head(first, keys[1])
    assert len(head) == 64
    assert sample.metadata["caisson"]["ledger_head"] == head
    assert sample.metadata["caisson"]["ledger_records"] == records == 14
    assert sample.metadata["caisson"]["verified"] == "ok"
    assert sample.metadata["caisson"]["status"] == "void"
    assert [f["kind"] for f in sample.metadata["caisson"]["findings"]][0] == "leak"
    assert (sample.metadata["caisson"]["agent"], sample.metadata["caisson"]["arm"]) == ({"name": "command"}, {})
    assert math.isnan(sample.scores["caisson"].value)  # void is never 0
    assert sample.scores["caisson"].answer == "The answer is 42."
    assert [m.role for m in sample.messages] == ["user", "assistant", "tool", "assistant"]
    assert sample.messages[1].tool_calls[0].function == "Bash"
    assert sample.messages[2].error is not None and sample.messages[2].error.type == "approval"  # refused
    usage = sample.model_usage["claude-x-1"]
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (12, 7, 19)


def test_atif_trajectory_validates_against_harbor_schema(tmp_path: Path, keys):
    run = leaky_run(tmp_path / "run-a", keys[0], keys[1])
    out = tmp_path / "run-a.json"
    proc = _export(run, "atif", out, keys[2])
    assert proc.returncode == 0, proc.stderr
    trajectory = json.loads(out.read_text())
    jsonschema.validate(trajectory, SCHEMA)
    assert atif_rules(trajectory) == []
    assert trajectory["schema_version"] == "ATIF-v1.8"
    head, records = _head(run, keys[1])
    assert trajectory["extra"]["caisson"]["ledger_head"] == head
    assert trajectory["extra"]["caisson"]["ledger_records"] == records
    steps = trajectory["steps"]
    assert [s["source"] for s in steps] == ["user", "agent", "agent"]
    assert steps[1]["tool_calls"][0]["function_name"] == "Bash"
    assert steps[1]["observation"]["results"][0]["extra"]["outcome"] == "refused"
    assert steps[2]["message"] == "The answer is 42."
    assert trajectory["final_metrics"] == {"total_prompt_tokens": 12, "total_completion_tokens": 7, "total_steps": 3}


def test_schema_and_rules_reject_bad_trajectories(tmp_path: Path, keys):
    """The checks can fail: a trajectory with a tool call on a user step, a skipped step
    id, or an unknown field does not pass."""
    run = leaky_run(tmp_path / "run-a", keys[0], keys[1])
    good = to_trajectory(read_run(run, keys[1]))
    bad = json.loads(json.dumps(good))
    bad["steps"][0]["tool_calls"] = bad["steps"][1]["tool_calls"]
    bad["steps"][2]["step_id"] = 7
    assert len(atif_rules(bad)) == 2
    unknown = json.loads(json.dumps(good))
    unknown["steps"][0]["caisson"] = 1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(unknown, SCHEMA)


def test_tampered_run_exports_as_not_verified(tmp_path: Path, keys):
    run = leaky_run(tmp_path / "run-t", keys[0], keys[1], filler=50)
    tamper(run)
    out = tmp_path / "t.json"
    proc = _export(run, "atif", out, keys[2])
    assert proc.returncode == 1
    assert "tampered" in proc.stderr
    extra = json.loads(out.read_text())["extra"]["caisson"]
    assert extra["verified"] == "tampered" and extra["verify_reason"]


def test_study_export_has_one_sample_per_cell_from_the_study_ledger(tmp_path: Path, keys):
    """A study's samples are its cells' counting attempts as the study ledger names them:
    not the preflight baseline, not a superseded attempt."""
    import ledger.events as events
    from inspect_ai.log import read_eval_log

    if not hasattr(events, "CellEnded"):
        pytest.skip("the study events (ledger/events.py: study.planned, cell.*) are not on this branch yet")
    from ledger import BlobStore, LedgerWriter

    study = tmp_path / "study-out"
    leaky_run(study / "baselines" / "grep", keys[0], keys[1])
    leaky_run(study / "cells" / "c1" / "1", keys[0], keys[1])  # infra failure, superseded
    leaky_run(study / "cells" / "c1" / "2", keys[0], keys[1])
    leaky_run(study / "cells" / "c2" / "1", keys[0], keys[1])
    seg = study / "study" / "000"
    seg.mkdir(parents=True)
    cells = [events.PlannedCell(cell_id=c, arm="grep", agent="command", question_id="q1", repetition=r)
             for r, c in ((1, "c1"), (2, "c2"))]
    with LedgerWriter(seg / "ledger", run_id="study", key=keys[0], blobs=BlobStore(seg / "blobs")) as writer:
        for i, event in enumerate([
            events.StudyPlanned(study="s", study_sha256="0" * 64, cells=cells),
            events.CellEnded(cell_id="c1", attempt=1, run_dir="cells/c1/1", status="void", infra_failure=True),
            events.CellEnded(cell_id="c1", attempt=2, run_dir="cells/c1/2", status="void", counting=True),
            events.CellEnded(cell_id="c2", attempt=1, run_dir="cells/c2/1", status="void", counting=True),
            events.StudyEnded(cells=2, counted=2, void=2),
        ]):
            writer.append(event, source="study", wall_ns=1_000 + i, mono_ns=i)
    out = tmp_path / "study.json"
    proc = _export(study, "inspect", out, keys[2])
    assert proc.returncode == 0, proc.stderr
    dirs = sorted(s.metadata["caisson"]["run_dir"] for s in read_eval_log(str(out)).samples)  # inspect orders samples its way
    assert dirs == [str(study / "cells" / "c1" / "2"), str(study / "cells" / "c2" / "1")]


def test_the_inspect_metadata_shows_an_arm_as_its_recorder_wrote_it():
    """The schema 14 golden's arm (a map then, with its empty deny list) is shown as it was written."""
    import json

    from caisson.export._inspect import _arm
    from ledger.events import RunArm

    golden = Path(__file__).parents[2] / "ledger" / "test_golden" / "schema14" / "expected.json"
    written = json.loads(golden.read_text())["run"][0]["arm"]
    assert written["deny"] == [] and _arm(RunArm(**written)) == written
    catalog = {"search": ["Grep"]}
    assert _arm(RunArm(name="s", strategies=["search"], catalog=catalog)) == {
        "name": "s", "grant": [], "withhold": [], "deny": [], "strategies": ["search"], "catalog": catalog}
