"""`caisson study judge DIR` on a small signed study of synthetic cells (no chamber), with the
scripted model endpoint as the judge, reached through the real proxy witness (mitmdump):
agreement, a disagreement alarm, an unparseable reply, a judge that serves another model
than asked for; the judge ledger verifies with the study and tampering it fails verify;
the report reads it into alarms and the checklist."""

from __future__ import annotations

import shutil
from pathlib import Path

import msgspec
import pytest

from caisson.cli import main
from caisson.home import ensure_operator_key
from caisson.model import scripted_model
from tests._fixtures.cells import CellSpec, write_cell
from caisson.report import build_report, render_text
from caisson.study import sealed_state, study_status, verify_study
from caisson.study.judge import resolve_judge, run_judge
from caisson.study.report_input import load_study_report
from caisson.study.studyledger import StudyLedger, read_study, segments
from caisson.study.verify import judge_dirs
from ledger import read_records
from ledger.events import (CellEnded, CellStarted, Combo, JudgeAlarm, JudgeRecorded, JudgeStarted, JudgeVerdict,
                           LlmCall, PlannedCell, StudyEnded, StudyPlanned)

STUDY = b'''name = "judged"
scenario = "scenario.toml"
[[agents]]
adapter = "claude-code"
models = ["m1"]
endpoint = { script = "model.toml" }
[judge]
endpoint = "https://judge.example"
model = "judge-from-table"
'''
ANSWERS = {  # cell -> (answer, its deterministic score against tests._fixtures.cells.SCENARIO)
    "right": ("`Context` is defined in src/click/core.py:234.", 1.0),
    "reworded": ("The Context class lives in the core module of click.", 0.0),
    "hedged": ("`Context` is defined in src/click/core.py, I believe.", 1.0),
    "missing": ("I could not find it.", 0.0),
    "overloaded": ("It is somewhere in click.", 0.0),
}
REPLIES = {  # a unique part of each answer -> the judge's reply
    "core.py:234": "PASS\nIt names src/click/core.py.",
    "core module of click": "**PASS**\nThe core module is src/click/core.py.",  # disagrees with 0.0
    "I believe": "Looks right to me.",  # neither PASS nor FAIL: unparseable
    "could not find": "FAIL\nNo location given.",
    "somewhere in click": None,  # the endpoint answers 529: no reply, verdict error
}


def _script(path: Path, served: str | None = None) -> Path:
    lines = ['name = "judge"']
    for part, reply in REPLIES.items():
        lines += ["[[turns]]", f"match = {{ last_user_contains = {part!r} }}"] + (
            [f"text = {reply!r}", "usage = { input = 300, output = 9 }"] if reply else ["error = { status = 529 }"]
        ) + ([f"model = {served!r}"] if served else [])
    path.write_text("\n".join(lines).replace("'", '"') + "\n")
    return path


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    """A closed study of four clean cells (one per answer), signed with the operator key."""
    key = ensure_operator_key()
    out = tmp_path_factory.mktemp("judged") / "study"
    ledger = StudyLedger(out, key, run_id="study-judged")
    sha = ledger.put_blob(STUDY, "study", "application/toml")
    cells = [PlannedCell(cell_id=f"read-only--claude-code--m1--{name}", arm="read-only", agent="claude-code",
                         model="m1", question_id="q-context", repetition=1) for name in ANSWERS]
    ledger.append(StudyPlanned(study="judged", study_sha256=sha, cells=cells, combos=[Combo(
        arm="read-only", agent="claude-code", model="m1", gating="enforced", cells=len(cells))]))
    for cell, (answer, _) in zip(cells, ANSWERS.values()):
        rel = f"cells/{cell.cell_id}/1"
        write_cell(out / rel, CellSpec(run_id=f"run-{cell.cell_id}", answer=answer, strace_events=5), key)
        state = sealed_state(out / rel, key.verify_key)
        ledger.append(CellStarted(cell_id=cell.cell_id, attempt=1, run_dir=rel))
        ledger.append(CellEnded(cell_id=cell.cell_id, attempt=1, run_id=state.run_id, run_dir=rel, status="clean",
                                counting=True, ledger_records=state.records, ledger_head=state.head,
                                ledger_final=state.final, seal_signature=state.signature))
    ledger.append(StudyEnded(cells=len(cells), counted=len(cells)))
    ledger.close()
    return out


def _judge(study: Path, script: Path, model: str = "judge-1"):
    key = ensure_operator_key()
    said: list[str] = []
    with scripted_model(script) as address:
        spec = resolve_judge(study, key.verify_key, endpoint=f"http://{address}", model=model)
        result = run_judge(study, key, spec, say=said.append)
    return result, said, list(read_records(Path(result.judge_dir), key.verify_key))


def test_a_judge_agrees_alarms_and_reads_no_verdict_into_a_guess(study, tmp_path):
    result, said, records = _judge(study, _script(tmp_path / "judge.toml"))
    assert (result.judged, result.passed, result.failed, result.unparseable, result.errors,
            result.disagreements, result.served_models, result.substituted) == (5, 2, 1, 1, 1, 1, ("judge-1",), ())
    verdicts = {r.event.cell_id.rsplit("--", 1)[1]: r.event for r in records if isinstance(r.event, JudgeVerdict)}
    assert {k: (v.verdict, v.score, v.served_model) for k, v in verdicts.items()} == {
        k: (verdict, ANSWERS[k][1], "judge-1") for k, verdict in
        [("right", "pass"), ("reworded", "pass"), ("hedged", "unparseable"), ("missing", "fail")]} | {
        "overloaded": ("error", 0.0, None)}  # the witness saw the call; an error body names no model
    assert verdicts["hedged"].reply_line == "Looks right to me."
    assert verdicts["overloaded"].error.startswith("HTTP 529: ")
    [alarm] = [r for r in records if isinstance(r.event, JudgeAlarm)]
    assert (alarm.event.alarm, alarm.event.cell_id.endswith("--reworded")) == ("disagreement", True)
    assert records[alarm.event.evidence[0]].event == verdicts["reworded"]
    assert [line.split()[0] for line in said[1:]] == ["AGREE", "ALARM", "UNPARSEABLE", "AGREE", "ERROR"]
    calls = [r.event for r in records if isinstance(r.event, LlmCall)]  # witnessed by the proxy
    assert [(c.requested_model, c.served_model) for c in calls] == [("judge-1", "judge-1")] * 4 + [("judge-1", None)]
    [started] = [r.event for r in records if isinstance(r.event, JudgeStarted)]
    assert started.study_head == sealed_state(study / "study" / "000", ensure_operator_key().verify_key).head
    assert verify_study(study, ensure_operator_key().verify_key).status == "ok"

    _, data = load_study_report(study, ensure_operator_key().verify_key)
    assert data.judge is not None and (data.judge.cells_judged, data.judge.unparseable, data.judge.errors,
                                       data.judge.unknown_served) == (5, 1, 1, 0)
    [row] = data.judge.disagreements
    assert (row.cell_id.endswith("--reworded"), row.score, row.judge_verdict) == (True, 0.0, "PASS")
    report = build_report(data)
    items = {i.name: i for i in report.checklist}
    assert (items["judge_model"].status, items["disagreements"].status, items["disagreements"].count) == (
        "PASS", "WARN", 1)  # the 529 names no model, and gives no verdict: not an unknown served model
    assert "1 replies unparseable, 1 calls without a reply" in items["disagreements"].detail
    text = render_text(report)
    assert "Judge alarms" in text and "The Context class lives in the core module" in text

    copy = tmp_path / "tampered"
    shutil.copytree(study, copy)
    ledger = Path(result.judge_dir.replace(str(study), str(copy))) / "ledger"
    data_bytes = bytearray(ledger.read_bytes())
    data_bytes[len(data_bytes) // 2] ^= 0xFF
    ledger.write_bytes(bytes(data_bytes))
    tampered = verify_study(copy, ensure_operator_key().verify_key)
    assert tampered.status == "tampered" and "judge judge/000" in tampered.problems[0]
    assert main(["verify", str(copy)]) == 1


def test_a_judge_served_by_another_model_is_announced(study, tmp_path, capsys):
    with scripted_model(_script(tmp_path / "sub.toml", served="judge-2")) as address:
        code = main(["study", "judge", str(study), "--endpoint", f"http://{address}", "--model", "judge-1"])
    out = capsys.readouterr().out
    assert code == 1 and "SUBSTITUTED  the judge was asked for judge-1, served by judge-2 (4 call(s))" in out
    records = list(read_records(judge_dirs(study)[-1]))
    [alarm] = [r.event for r in records if isinstance(r.event, JudgeAlarm) and r.event.alarm == "model_substituted"]
    assert {type(records[s].event) for s in alarm.evidence} == {LlmCall} and len(alarm.evidence) == 4
    _, data = load_study_report(study, ensure_operator_key().verify_key)
    assert data.judge.served_models == ("judge-2",)  # the last closed judge run is read
    item = next(i for i in build_report(data).checklist if i.name == "judge_model")
    assert (item.status, item.cells) == ("FAIL", ["judge-2"])
    assert main(["verify", str(study)]) == 0


def test_the_last_judge_removed_is_seen_its_announcement_removed_is_a_note(study, tmp_path):
    """Each judge run is announced in a study ledger segment of its own once closed: removing
    the last judge directory (the report would silently read the one before) fails verify."""
    key = ensure_operator_key()
    result, _, _ = _judge(study, _script(tmp_path / "judge.toml"))
    last = Path(result.judge_dir)
    records = read_study(study, key.verify_key)
    assert records[-1].event == JudgeRecorded(run_dir=f"judge/{last.name}", run_id=result.run_id,
                                              ledger_records=sealed_state(last, key.verify_key).records,
                                              ledger_head=sealed_state(last, key.verify_key).head)
    assert study_status(records).segments == 1  # announcements are not resumes
    assert verify_study(study, key.verify_key).status == "ok"  # every judge names a closed head of the study
    gone = tmp_path / "judge-gone"
    shutil.copytree(study, gone)
    shutil.rmtree(gone / "judge" / last.name)
    report = verify_study(gone, key.verify_key)
    assert report.status == "tampered" and report.problems == [
        f"announced judge run judge/{last.name}: dropped (no ledger where the study ledger says it is)"]
    # A judge without its announcement (a study judged before schema 12): verifies, with a note.
    legacy = tmp_path / "legacy"
    shutil.copytree(study, legacy)
    shutil.rmtree(segments(legacy)[-1])
    report = verify_study(legacy, key.verify_key)
    assert (report.status, report.problems) == ("ok", [])
    assert report.notes == [f"judge/{last.name}: not announced by the study ledger (written before schema 12, or its"
                            " run stopped before announcing it): its removal could not have been seen"]


def test_the_judge_comes_from_the_sealed_study_file_unless_given(study):
    key = ensure_operator_key().verify_key
    spec = resolve_judge(study, key)
    assert msgspec.structs.asdict(spec) == {"endpoint": "https://judge.example", "model": "judge-from-table",
                                            "api": "anthropic", "credential": "ANTHROPIC_API_KEY"}
    from caisson.errors import UsageError

    with pytest.raises(UsageError, match="both --endpoint and --model"):
        resolve_judge(study, key, endpoint="http://127.0.0.1:1")
    assert resolve_judge(study, key, endpoint="https://api.openai.com", model="gpt-5").api == "openai"
