"""One outcome per attempt: `verdict_of` (replay -> Verdict), `verdict_change` (the report's
comparison with what the study recorded) and `counting_history` (what resume reads)."""

from __future__ import annotations

import msgspec

from caisson.detectors import Finding
from caisson.detectors.health import HOST_STALLED, should_abort_study
from caisson.replay import RunReplay, verdict_change, verdict_of
from caisson.study.runner import counting_history
from ledger import Record
from ledger.events import CellEnded, Verdict

STALL = Finding(detector=HOST_STALLED, kind="host_stalled", effect="void", message="4 s of stall")
NOTE = Finding(detector="processes@1", kind="excluded_attempt", effect="info", message="tried CLAUDE.md")


def _replay(**kw) -> RunReplay:
    return RunReplay(run_dir="r", verified="ok", detectors=[HOST_STALLED, "processes@1"], **kw)


def test_a_void_replay_gives_its_voiding_findings_only():
    v = verdict_of(_replay(status="void", findings=[NOTE, STALL], reasons=["host_stalled: 4 s of stall"]))
    assert (v.status, v.score, v.void, v.detectors) == ("void", None, [STALL], [HOST_STALLED, "processes@1"])


def test_a_clean_replay_keeps_its_score_and_no_finding():
    v = verdict_of(_replay(status="clean", findings=[NOTE], score=0.5))
    assert (v.status, v.score, v.void) == ("clean", 0.5, [])


def test_an_unverified_replay_is_unverified_and_unscored():
    v = verdict_of(RunReplay(run_dir="r", verified="tampered", status="unverified"))
    assert (v.status, v.score, v.void) == ("unverified", None, [])


def test_the_same_verdict_is_no_change_even_with_new_detector_versions():
    then = Verdict(status="void", void=[STALL], detectors=["host.stalled@1"])
    now = Verdict(status="void", void=[msgspec.structs.replace(STALL, message="5 s")], detectors=[HOST_STALLED])
    assert verdict_change(then, now) == ""


def test_a_change_of_status_score_or_void_kind_is_named_with_the_detectors():
    then = Verdict(status="void", void=[STALL], detectors=["host.stalled@1", "processes@1"])
    now = Verdict(status="clean", score=1.0, detectors=[HOST_STALLED, "processes@1"])
    assert verdict_change(then, now) == ("recorded void (host_stalled), today clean 1.00;"
                                         f" detectors then host.stalled@1, now {HOST_STALLED}")
    assert verdict_change(Verdict(status="clean", score=1.0, detectors=["a@1"]),
                          Verdict(status="clean", score=0.5, detectors=["a@1"])) == \
        "recorded clean 1.00, today clean 0.50"
    assert verdict_change(Verdict(status="clean", score=None), Verdict(status="clean", score=0.0)) == (
        "recorded clean, today clean 0.00; the recorded detector versions are unknown (schema <= 15)")
    other = msgspec.structs.replace(STALL, kind="tool_escape")
    assert "today void (tool_escape)" in verdict_change(Verdict(status="void", void=[STALL], detectors=["a@1"]),
                                                        Verdict(status="void", void=[other], detectors=["a@1"]))


def _records(*events):
    return [Record(seq=i, wall_ns=i, mono_ns=i, source="study", event=e) for i, e in enumerate(events)]


def test_resume_reads_each_counting_attempts_voiding_findings_by_host():
    stalled = Verdict(status="void", void=[STALL])
    records = _records(
        CellEnded(cell_id="a", attempt=1, status="failed", infra_failure=True, reason="no ledger", host="h"),
        CellEnded(cell_id="a", attempt=2, run_id="r", status="void", counting=True, verdict=stalled, host="h"),
        CellEnded(cell_id="b", attempt=1, run_id="r", status="clean", counting=True,
                  verdict=Verdict(status="clean", score=1.0), host="g"),
        CellEnded(cell_id="c", attempt=1, run_id="r", status="void", counting=True, verdict=stalled, host="h"))
    history = counting_history(records)
    assert history == {"h": ([[STALL], [STALL]], ["a", "c"]), "g": ([[]], ["b"])}
    assert should_abort_study(history["h"][0], 2) and not should_abort_study(history["g"][0], 1)


def test_resume_of_a_schema_15_study_still_sees_its_host_stalls():
    old = msgspec.json.decode(msgspec.json.encode(
        {"kind": "cell.ended", "cell_id": "a", "attempt": 1, "run_id": "r", "status": "void", "counting": True,
         "void_reason": "host_stalled: 4 s of stall"}), type=CellEnded)
    void, cells = counting_history(_records(old, old, old))[""]
    assert [[(f.detector, f.kind) for f in found] for found in void] == [[(HOST_STALLED, "host_stalled")]] * 3
    assert cells == ["a"] * 3 and should_abort_study(void, 3)
