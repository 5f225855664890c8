"""`caisson study report DIR` end to end on a small real study (the grep probe, two
questions, one repetition, arm no-write refused): the report is recomputed from the sealed
ledgers; a tampered study is exit 1; a changed detector version changes the report and
leaves every ledger byte unchanged."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys

import msgspec
import pytest
from pathlib import Path

from caisson.detectors import DEFAULT_DETECTORS, VOID, Finding
from caisson.home import trusted_key
from caisson.report import build_report, render_json
from caisson.study.report_input import load_study_report
from tests.caisson.study.test_study_run import small_study  # noqa: F401  (the fixture)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "caisson.cli", "study", "report", *args], capture_output=True,
                          text=True, timeout=600)


def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_report_json_counts_every_planned_cell(small_study, tmp_path):  # noqa: F811
    out = tmp_path / "report.json"
    proc = _cli(str(small_study), "--format", "json", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    _, data = load_study_report(small_study, trusted_key(None))
    statuses = sorted(c.status for c in data.cells)
    assert statuses.count("clean") + statuses.count("void") == 2  # plain x grep: two questions, one rep
    assert "refused" in statuses  # no-write x grep
    assert report["study_head"] == data.study_head and len(data.study_head) == 64
    html = _cli(str(small_study), "--format", "html", "--out", str(tmp_path / "r.html"))
    assert html.returncode == 0 and (tmp_path / "r.html").read_text().startswith("<!")


def test_tampered_study_is_exit_1_and_reports_nothing(small_study, tmp_path):  # noqa: F811
    copy = tmp_path / "copy"
    shutil.copytree(small_study, copy)
    ledger = next(copy.glob("cells/*/*/ledger"))
    data = bytearray(ledger.read_bytes())
    data[len(data) // 2] ^= 0xFF
    ledger.write_bytes(bytes(data))
    proc = _cli(str(copy))
    assert proc.returncode == 1 and "TAMPERED" in proc.stderr and proc.stdout == ""


def test_changed_detector_version_changes_report_not_ledger(small_study):  # noqa: F811
    before = _digest(small_study)
    _, data = load_study_report(small_study, trusted_key(None))
    assert all(c.status != "void" for c in data.cells)

    def stricter(records, config):  # host.stalled@99: every run is void (a changed detector)
        yield Finding(detector="host.stalled@99", kind="host_stalled", effect=VOID, message="stricter")

    bumped = [(("host.stalled@99", stricter) if name.startswith("host.stalled@") else (name, det))
              for name, det in DEFAULT_DETECTORS]
    _, data2 = load_study_report(small_study, trusted_key(None), detectors=bumped)
    assert "host.stalled@99" in data2.detector_versions
    ran = [c for c in data2.cells if c.status not in ("refused", "not_run")]
    assert ran and all(c.status == "void" and c.void_reason == "host_stalled" for c in ran)
    assert render_json(build_report(data)) != render_json(build_report(data2))
    assert _digest(small_study) == before  # the ledgers, blobs and derived files untouched


def test_the_runs_read_in_parallel_give_the_serial_report(small_study):  # noqa: F811
    _, serial = load_study_report(small_study, trusted_key(None), jobs=1)
    _, parallel = load_study_report(small_study, trusted_key(None), jobs=2)
    assert parallel == serial and render_json(build_report(parallel)) == render_json(build_report(serial))

    def stricter(records, config):  # a changed detector reaches the workers
        yield Finding(detector="host.stalled@99", kind="host_stalled", effect=VOID, message="stricter")

    bumped = [(("host.stalled@99", stricter) if name.startswith("host.stalled@") else (name, det))
              for name, det in DEFAULT_DETECTORS]
    _, data = load_study_report(small_study, trusted_key(None), detectors=bumped, jobs=2)
    ran = [c for c in data.cells if c.status not in ("refused", "not_run")]
    assert ran and all(c.status == "void" and c.void_reason == "host_stalled" for c in ran)


def test_cli_jobs_reads_the_same_report_and_refuses_zero(small_study, tmp_path):  # noqa: F811
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    assert _cli(str(small_study), "--format", "json", "--jobs", "1", "--out", str(one)).returncode == 0
    assert _cli(str(small_study), "--format", "json", "--jobs", "2", "--out", str(two)).returncode == 0
    assert one.read_bytes() == two.read_bytes()
    bad = _cli(str(small_study), "--jobs", "0")
    assert bad.returncode == 2 and "--jobs: at least 1" in bad.stderr


def test_the_report_reads_each_ledger_once(small_study, monkeypatch):  # noqa: F811
    """Verifying the study and reading its cells share one read of each run's ledger and of
    each study ledger segment (its bytes read, its chain, seals and blobs checked once)."""
    from collections import Counter

    reads: Counter[str] = Counter()
    real_bytes = Path.read_bytes

    def counted_bytes(path):  # every reader of a whole ledger file (the verifier, a checker fed the bytes)
        if path.name == "ledger":
            reads[str(path)] += 1
        return real_bytes(path)

    monkeypatch.setattr(Path, "read_bytes", counted_bytes)
    verified, data = load_study_report(small_study, trusted_key(None), jobs=1)
    assert verified.status == "ok" and data is not None
    runs = {p: n for p, n in reads.items() if "/cells/" in p or "/baselines/" in p}
    assert runs and set(runs.values()) == {1}, reads
    assert verified.runs_checked == len(runs)
    study = {p: n for p, n in reads.items() if "/study/" in p.removeprefix(str(small_study))}
    assert study and set(study.values()) == {1}, reads


def _synthetic_study(out: Path, recorded=None):
    """A closed study of two clean cells written without a chamber (`tests._fixtures.cells`);
    ``recorded``: the verdict its ``cell.ended`` events say the runner saw (None: none)."""
    from caisson.home import ensure_operator_key
    from tests._fixtures.cells import SCENARIO, CellSpec, write_cell
    from caisson.study.studyledger import StudyLedger, sealed_state
    from ledger.events import CellEnded, CellStarted, Combo, PlannedCell, StudyEnded, StudyPlanned

    key = ensure_operator_key()
    study = StudyLedger(out, key, run_id="study-synthetic")
    sha = study.put_blob(b'name = "x"\nscenario = "scenario.toml"\n', "study", "application/toml")
    scenario = study.put_blob(SCENARIO, "scenario", "application/toml")
    cells = [PlannedCell(cell_id=f"a--cc--m1--c{i}", arm="a", agent="cc", model="m1", question_id="q-context",
                         repetition=1) for i in range(2)]
    study.append(StudyPlanned(study="x", study_sha256=sha, scenario_sha256=scenario, scenario="scenario.toml",
                              cells=cells, combos=[Combo(arm="a", agent="cc", model="m1", gating="enforced", cells=2)]))
    for c in cells:
        rel = f"cells/{c.cell_id}/1"
        write_cell(out / rel, CellSpec(run_id=f"run-{c.cell_id}", answer="`Context` is in src/click/core.py:234.",
                                       strace_events=5), key)
        state = sealed_state(out / rel, key.verify_key)
        study.append(CellStarted(cell_id=c.cell_id, attempt=1, run_dir=rel))
        study.append(CellEnded(cell_id=c.cell_id, attempt=1, run_id=state.run_id, run_dir=rel, status="clean",
                               counting=True, ledger_records=state.records, ledger_head=state.head,
                               ledger_final=state.final, seal_signature=state.signature, verdict=recorded))
    study.append(StudyEnded(cells=2, counted=2))
    study.close()
    return key, scenario


def _overwrite(path: Path, data: bytes) -> None:
    path.chmod(0o644)
    path.write_bytes(data)


TAMPERS = {
    "scenario blob": lambda out, scenario: _overwrite(next(out.glob(f"study/000/blobs/**/{scenario}")),
                                                      b"garbage = [\n"),
    "run ledger byte": lambda out, _: _overwrite(p := next(out.glob("cells/*/1/ledger")),
                                                 p.read_bytes()[:200] + b"\xff" + p.read_bytes()[201:]),
    "run ledger dropped": lambda out, _: next(out.glob("cells/*/1/ledger")).unlink(),
    "run blob": lambda out, _: _overwrite(next(p for p in sorted(out.glob("cells/*/1/blobs/**/*")) if p.is_file()),
                                          b"x"),
}


@pytest.mark.parametrize("tamper", sorted(TAMPERS))
def test_a_tampered_study_is_reported_tampered_and_nothing_is_counted(tmp_path, tamper):
    """The report reads the cells before it verifies the study (to read each ledger once):
    whatever was altered, the answer is still "tampered" and no input, never an error."""
    out = tmp_path / "study"
    key, scenario = _synthetic_study(out)
    verified, data = load_study_report(out, key.verify_key, jobs=1)
    assert verified.status == "ok" and data is not None and {c.status for c in data.cells} == {"clean"}
    TAMPERS[tamper](out, scenario)
    verified, data = load_study_report(out, key.verify_key, jobs=1)
    assert (verified.status, data) == ("tampered", None), verified.problems


def test_the_report_says_where_todays_verdict_differs_from_the_recorded_one(tmp_path):
    """The runner recorded each attempt's verdict; the report judges again with today's
    detectors (the same `verdict_of`) and names every cell where the two differ."""
    from caisson.report import build_report
    from caisson.replay import verdict_of
    from caisson.report import read_cell
    from ledger.events import Finding, Verdict

    out = tmp_path / "agree"
    key, _ = _synthetic_study(out)
    today = verdict_of(read_cell(next(out.glob("cells/*/1")), key.verify_key).replay)
    assert today.status == "clean" and today.detectors
    for name, recorded, changed in [("same", today, False),
                                    ("stalled", Verdict(status="void", detectors=today.detectors, void=[Finding(
                                        detector="host.stalled@2", kind="host_stalled", effect="void",
                                        message="4 s")]), True),
                                    ("scored", msgspec.structs.replace(today, score=0.0), True)]:
        out = tmp_path / name
        key, _ = _synthetic_study(out, recorded)
        verified, data = load_study_report(out, key.verify_key, jobs=1)
        assert verified.status == "ok" and data is not None
        [item] = [i for i in build_report(data).checklist if i.name == "recorded_verdicts"]
        if not changed:
            assert (item.status, item.count) == ("PASS", 0) and not any(c.verdict_change for c in data.cells)
            continue
        assert (item.status, item.count) == ("WARN", 2), item
        assert all(c.verdict_change.startswith("recorded void (host_stalled)" if name == "stalled"
                                               else "recorded clean 0.00") for c in data.cells)
        assert {c.status for c in data.cells} == {"clean"}  # the figures are today's


def test_the_report_command_imports_no_recorder(tmp_path):
    """`caisson study report` reads and recomputes; it starts no chamber, witness or writer, so it
    imports none of the recorder's libraries (trio alone costs about 180 ms of its start)."""
    from tests._fixtures.startup import imported_modules

    _synthetic_study(tmp_path / "study")
    code, modules = imported_modules(["study", "report", str(tmp_path / "study")], tmp_path)
    assert code == 0
    recorder = ("trio", "aiodocker", "aiohttp", "mitmproxy", "ledger._writer", "collectors.procfs")
    assert sorted(m for m in modules if any(m == r or m.startswith(r + ".") for r in recorder)) == []
