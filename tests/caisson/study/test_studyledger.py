"""The study ledger's segments, without a chamber: a continuation must name the last seal
of the segment before it, or `verify_study` fails; an unclosed last segment is exit 3."""

from __future__ import annotations

from pathlib import Path

import pytest

from caisson.errors import UsageError
from caisson.home import ensure_operator_key
from caisson.study import read_study, sealed_state, verify_study
from caisson.study.studyledger import StudyLedger, announce
from ledger import BlobStore, LedgerWriter
from ledger.events import JudgeRecorded, JudgeStarted, StudyEnded, StudyPlanned, StudyResumed


def _crashed_segment(out: Path, key) -> None:
    """Segment 000 with a sealed study.planned and no final seal, as a kill -9 leaves it."""
    seg = out / "study" / "000"
    seg.mkdir(parents=True)
    with LedgerWriter(out / "live-ledger", run_id="study-a", key=key, blobs=BlobStore(seg / "blobs")) as writer:
        writer.append(StudyPlanned(study="s", study_sha256="0"), source="study")
        writer.flush()  # sealed; the bytes as they were before any close are what a kill leaves
        (seg / "ledger").write_bytes((out / "live-ledger").read_bytes())
    (out / "live-ledger").unlink()


def test_continuation_names_the_previous_seal_and_verifies_as_one(tmp_path):
    key = ensure_operator_key()
    _crashed_segment(tmp_path, key)
    assert verify_study(tmp_path, key.verify_key).status == "unclosed"
    with pytest.raises(UsageError, match="already ran here"):
        StudyLedger(tmp_path, key, run_id="study-b")
    ledger = StudyLedger(tmp_path, key, run_id="study-b", resume=True)
    ledger.append(StudyEnded(cells=0))
    ledger.close()
    report = verify_study(tmp_path, key.verify_key)
    assert (report.status, report.segments, report.problems) == ("ok", 2, [])
    kinds = [type(r.event).__name__ for r in read_study(tmp_path, key.verify_key)]
    assert kinds == ["StudyPlanned", "StudyResumed", "StudyEnded"]
    state = sealed_state(tmp_path / "study" / "000", key.verify_key)
    link = next(r.event for r in read_study(tmp_path) if isinstance(r.event, StudyResumed))
    assert (link.previous_run_id, link.previous_records, link.previous_head) == ("study-a", 1, state.head)


def test_a_continuation_that_names_another_seal_fails(tmp_path):
    key = ensure_operator_key()
    _crashed_segment(tmp_path, key)
    seg = tmp_path / "study" / "001"
    seg.mkdir(parents=True)
    with LedgerWriter(seg / "ledger", run_id="study-b", key=key) as writer:
        writer.append(StudyResumed(previous_run_id="study-a", previous_records=1, previous_head="00" * 32),
                      source="study")
    report = verify_study(tmp_path, key.verify_key)
    assert report.status == "tampered"
    assert "study.resumed names study-a at 1 records" in report.problems[0]


def test_a_continuation_without_study_resumed_fails(tmp_path):
    key = ensure_operator_key()
    _crashed_segment(tmp_path, key)
    seg = tmp_path / "study" / "001"
    seg.mkdir(parents=True)
    with LedgerWriter(seg / "ledger", run_id="study-b", key=key) as writer:
        writer.append(StudyEnded(cells=0), source="study")
    report = verify_study(tmp_path, key.verify_key)
    assert report.status == "tampered" and "must start with study.resumed" in report.problems[0]


def test_read_study_refuses_a_directory_without_a_study(tmp_path):
    with pytest.raises(UsageError, match="no study ledger"):
        read_study(tmp_path)


def test_announce_binds_a_closed_ledger_in_a_segment_of_its_own_and_only_on_a_closed_study(tmp_path):
    key = ensure_operator_key()
    _crashed_segment(tmp_path, key)
    judge = tmp_path / "judge" / "000"
    with pytest.raises(UsageError, match="is unclosed"):  # the study is running or crashed
        announce(tmp_path, key, judge, JudgeRecorded, run_id="study-x")
    ledger = StudyLedger(tmp_path, key, run_id="study-b", resume=True)
    ledger.append(StudyEnded(cells=0))
    ledger.close()
    judge.mkdir(parents=True)
    with LedgerWriter(judge / "ledger", run_id="judge-a", key=key) as writer:
        writer.append(JudgeStarted(study="s", study_run_id="study-b", endpoint="http://127.0.0.1:1", api="anthropic",
                                   study_head=sealed_state(tmp_path / "study" / "001", key.verify_key).head,
                                   requested_model="m", prompt="judge-prompt@1"), source="judge")
    (tmp_path / "study" / ".002.partial").mkdir()  # an announcement a crash cut short: not a segment
    seg = announce(tmp_path, key, judge, JudgeRecorded, run_id="study-c")
    assert seg == tmp_path / "study" / "002" and not (tmp_path / "study" / ".002.partial").exists()
    state = sealed_state(judge, key.verify_key)
    events = [r.event for r in read_study(tmp_path, key.verify_key)]
    assert events[-1] == JudgeRecorded(run_dir="judge/000", run_id="judge-a", ledger_records=state.records,
                                       ledger_head=state.head)
    assert isinstance(events[-2], StudyResumed) and events[-2].previous_run_id == "study-b"
    report = verify_study(tmp_path, key.verify_key)
    assert (report.status, report.segments, report.problems, report.notes) == ("ok", 3, [], [])
    assert report.head == sealed_state(seg, key.verify_key).head


def test_one_writer_at_a_time_the_second_is_refused_naming_the_directory(tmp_path):
    """A study run, a resume, a judge and a backfill each take the study's writer lock: two
    of them at once would take the same segment number (an announcement's half-written
    segment removed by the other); the second is refused before it writes anything."""
    from caisson.study.backfill import backfill_study
    from caisson.study.judge import JudgeSpec, run_judge

    key = ensure_operator_key()
    first = StudyLedger(tmp_path, key, run_id="study-a")
    first.append(StudyPlanned(study="s", study_sha256="0"))
    before = sorted(p.name for p in (tmp_path / "study").iterdir())
    with pytest.raises(UsageError, match=f"{tmp_path}: another caisson process is writing this study"):
        StudyLedger(tmp_path, key, run_id="study-b", resume=True)
    with pytest.raises(UsageError, match="backfill refused"):
        backfill_study(tmp_path, key)
    spec = JudgeSpec(endpoint="http://127.0.0.1:9", model="m", api="anthropic", credential="K")
    with pytest.raises(UsageError, match="judge refused"):
        run_judge(tmp_path, key, spec, say=lambda _: None)
    assert sorted(p.name for p in (tmp_path / "study").iterdir()) == before == [".lock", "000"]
    first.append(StudyEnded(cells=0))
    first.close()  # the lock goes with the final seal
    second = StudyLedger(tmp_path, key, run_id="study-b", resume=True)
    second.close()
    assert verify_study(tmp_path, key.verify_key).segments == 2


def test_a_writer_of_no_study_directory_creates_nothing(tmp_path):
    from caisson.study.backfill import backfill_study

    with pytest.raises(UsageError, match="is it a study directory"):
        backfill_study(tmp_path, ensure_operator_key())
    assert list(tmp_path.iterdir()) == []


def test_a_filesystem_that_refuses_the_lock_is_named(tmp_path, monkeypatch):
    """NFS without a lock daemon (ENOLCK), a FUSE filesystem without flock (EOPNOTSUPP): a
    clear error naming the lock file, never a traceback."""
    import errno
    import fcntl

    from caisson.study import studyledger

    def refuse(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", refuse)
    with pytest.raises(UsageError, match=r"study/\.lock: the filesystem refused the study's writer lock \(No locks"):
        studyledger.lock_study(tmp_path, "study run", create=True)
