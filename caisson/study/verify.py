"""`caisson verify DIR` on a study directory: the study ledger and every run it binds.

Checks, in order, stopping at nothing (every problem is listed):

1. each segment of the study ledger verifies against the trusted key (chain, seals,
   signatures, blobs); every segment but the last may be unclosed only when the next one's
   ``study.resumed`` names exactly its last seal (run id, record count, chain head);
2. every baseline, gating probe and cell attempt the ledger binds (``baseline.measured``
   and its ``gating_*`` fields, ``cell.ended``) is at its recorded place, with the recorded run id, and its ledger
   verifies with the recorded sealed record count and chain head (a closed attempt must
   still verify closed): a cell swapped, edited or dropped afterwards fails;
3. no run directory under ``DIR/cells/`` is left that the ledger does not name (started
   or ended): a cell added afterwards fails;
4. the backfill ledger, when there is one (``DIR/backfill/``,
   `caisson.study.backfillledger.verify_backfill`): every segment closed and verifying, chained,
   each backfilled figure naming a run the study ledger binds at the same head and session
   files that run collected.
5. every judge ledger under ``DIR/judge/`` (``caisson study judge``) verifies against the
   trusted key, names in ``judge.started`` a final chain head of the study ledger as it
   is (that of the last segment the study run itself wrote, or of any announcement
   segment after it: it judged this study, closed as it is), and judges only counting runs the study ledger
   bound. A judge ledger left unclosed (a crashed judge run) is not a problem: the report
   reads the last closed one.
6. every judge run and backfill segment the study ledger announces (``judge.recorded``,
   ``backfill.recorded``, each in a segment of its own written once that ledger closed,
   `caisson.study.studyledger.announce`) is where it says, with the announced run id,
   record count and chain head: a judge directory or backfill segment removed afterwards
   fails. One the study ledger does not announce (written before schema 12, or by a run
   stopped between closing it and announcing it) is a note, not a problem: its removal
   could not have been seen. Removing an announcement's study segment together with what
   it announces rolls the directory back to an earlier state that verifies; only a study
   head kept outside the directory (``head``, printed by `caisson verify`) tells them apart.

Which key a run must verify against: the study ledger's trusted key, unless
``study.planned`` enrolled host keys (``--executor ray``): then exactly those, the one the
run's ledger header names; a run signed by any other key fails (docs/studies.md, "Keys").

The result is ``ok``, ``tampered`` (any problem above) or ``unclosed`` (intact, but the
last segment has no final seal: the study is running or crashed, and can be resumed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import msgspec

from caisson.study.backfillledger import backfill_segments, verify_backfill
from caisson.study.studyledger import (StudySegment, announced, enrolled_keys, numbered_dirs, read_segments,
                                      run_trust, segments, state_of)
from ledger import LedgerError, VerifyKey, VerifyReport, read_records, verify_ledger
from ledger.events import (
    BackfillRecorded,
    BaselineMeasured,
    CellEnded,
    CellStarted,
    JudgeRecorded,
    JudgeStarted,
    JudgeVerdict,
    StudyPlanned,
    StudyResumed,
)

__all__ = ["JUDGE_DIR", "StudyVerifyReport", "judge_dirs", "verify_study", "is_study_dir", "run_trust"]

JUDGE_DIR = "judge"
"""``DIR/judge/<NNN>/``: one judge run's ledger and blobs each (`caisson.study.judge`)."""


class StudyVerifyReport(msgspec.Struct, kw_only=True):
    """What `verify_study` found; ``exit_code`` follows `caisson verify`'s contract."""

    path: str
    status: str = "ok"  # ok | tampered | unclosed
    segments: int = 0
    runs_checked: int = 0  # baselines and cell attempts whose ledgers were checked
    head: str = ""  # hex chain head of the study ledger's last seal: keep it to tell a rollback
    problems: list[str] = []
    notes: list[str] = []  # what verifies but cannot be proven (a judge or backfill segment not announced)

    @property
    def exit_code(self) -> int:
        """0 ok, 1 tampered, 3 intact but not closed."""
        return {"ok": 0, "tampered": 1, "unclosed": 3}[self.status]


def is_study_dir(path: Path) -> bool:
    """Whether ``path`` is a study directory (it holds ``study/000/ledger``)."""
    return bool(segments(Path(path)))


def _segments_ok(read: Sequence[StudySegment], report: StudyVerifyReport) -> bool:
    report.segments = len(read)
    for seg in read:
        if seg.report.status == "tampered":
            report.problems.append(f"{seg.path}: study ledger tampered: seq {seg.report.bad_seq}: {seg.report.reason}")
            return False
    states = [state_of(seg.report) for seg in read]
    for i, seg in enumerate(read[1:], 1):
        first = next((r.event for r in seg.records if r.event.__struct_config__.tag != "blob.stored"), None)
        prev = states[i - 1]
        if not isinstance(first, StudyResumed):
            report.problems.append(f"{seg.path}: a continuation segment must start with study.resumed")
        elif (first.previous_run_id, first.previous_records, first.previous_head) != (prev.run_id, prev.records,
                                                                                      prev.head):
            report.problems.append(f"{seg.path}: study.resumed names {first.previous_run_id} at"
                                   f" {first.previous_records} records, but {read[i - 1].path} is {prev.run_id}"
                                   f" sealed at {prev.records}")
    if states and not states[-1].final:
        report.status = "unclosed"
    report.head = states[-1].head if states else ""
    return not report.problems


def _check_run(study_dir: Path, rel: str, run_id: str | None, records: int, head: str, final: bool,
               trusted: VerifyKey, what: str, report: StudyVerifyReport,
               enrolled: dict[bytes, VerifyKey] | None = None,
               verified: Mapping[str, VerifyReport] | None = None) -> None:
    run_dir = study_dir / rel
    if run_id is None and not records:
        return  # no ledger was ever written for it (the chamber did not start)
    if not (run_dir / "ledger").is_file():
        report.problems.append(f"{what} {rel}: dropped (no ledger where the study ledger says it is)")
        return
    report.runs_checked += 1
    key = run_trust(run_dir, trusted, enrolled or {})
    if key is None:
        report.problems.append(f"{what} {rel}: signed by a key the study did not enroll")
        return
    trusted = key
    try:
        full = (verified or {}).get(rel) or verify_ledger(run_dir, trusted)
        state = state_of(full)
    except LedgerError as exc:
        report.problems.append(f"{what} {rel}: {exc}")
        return
    if full.status == "tampered":
        report.problems.append(f"{what} {rel}: its ledger is tampered: seq {full.bad_seq}: {full.reason}")
    elif state.run_id != run_id:
        report.problems.append(f"{what} {rel}: holds run {state.run_id}, the study ledger bound run {run_id}"
                               " (swapped or replaced)")
    elif (state.records, state.head) != (records, head) or (final and not state.final):
        report.problems.append(f"{what} {rel}: sealed at {state.records} records, head {state.head[:16]}; the study"
                               f" ledger bound {records} records, head {head[:16]}")


def judge_dirs(study_dir: Path) -> list[Path]:
    """The judge runs' directories under ``DIR/judge/``, in order."""
    return numbered_dirs(Path(study_dir) / JUDGE_DIR)


def _closed_heads(read: Sequence[StudySegment]) -> list[str]:
    """The final heads of the study as it is: the last segment that is not an announcement
    (`caisson.study.studyledger.announce`) and every announcement segment after it."""
    heads: list[str] = []
    for seg in read:
        kinds = {type(r.event) for r in seg.records}
        if not kinds & {JudgeRecorded, BackfillRecorded}:
            heads = []
        heads.append(seg.report.head)
    return heads


def _check_announced(study_dir: Path, trusted: VerifyKey, records: list, report: StudyVerifyReport) -> None:
    """Step 6 of the module docstring."""
    listed = announced(records)
    for rel, e in listed.items():
        what = "judge run" if isinstance(e, JudgeRecorded) else "backfill segment"
        _check_run(study_dir, rel, e.run_id, e.ledger_records, e.ledger_head, True, trusted, f"announced {what}",
                   report)
    for path in (*judge_dirs(study_dir), *backfill_segments(study_dir)):
        rel = str(path.relative_to(study_dir))
        if rel not in listed and (path / "ledger").is_file():
            report.notes.append(f"{rel}: not announced by the study ledger (written before schema 12, or its run"
                                " stopped before announcing it): its removal could not have been seen")


def _check_judges(study_dir: Path, trusted: VerifyKey, counting: dict[str, str], report: StudyVerifyReport,
                  heads: list[str]) -> None:
    """Step 5 of the module docstring; ``counting``: cell id -> its counting run id; ``heads``:
    the study's final heads (`_closed_heads`)."""
    for judge in judge_dirs(study_dir):
        rel = str(judge.relative_to(study_dir))
        try:
            full = verify_ledger(judge, trusted)
        except LedgerError as exc:
            report.problems.append(f"judge {rel}: {exc}")
            continue
        report.runs_checked += 1
        if full.status == "tampered":
            report.problems.append(f"judge {rel}: its ledger is tampered: seq {full.bad_seq}: {full.reason}")
            continue
        events = [r.event for r in read_records(judge)]
        started = next((e for e in events if isinstance(e, JudgeStarted)), None)
        if started is None:
            report.problems.append(f"judge {rel}: no judge.started")
        elif started.study_head not in heads:
            report.problems.append(f"judge {rel}: judged study head {started.study_head[:16]}, the study ledger's"
                                   f" final head is {heads[-1][:16] if heads else '(none)'} (another study, or"
                                   " another state of it)")
        for e in events:
            if isinstance(e, JudgeVerdict) and counting.get(e.cell_id) != e.run_id:
                report.problems.append(f"judge {rel}: judged run {e.run_id} as cell {e.cell_id}, whose counting"
                                       f" run the study ledger binds is {counting.get(e.cell_id)}")


def verify_study(study_dir: Path, trusted: VerifyKey,
                 verified: Mapping[str, VerifyReport] | None = None,
                 read: Sequence[StudySegment] | None = None) -> StudyVerifyReport:
    """Verify a study directory; see the module docstring.

    Args:
        study_dir: the study directory.
        trusted: the key the study ledger (and, for a local study, every run) verifies against.
        verified: run directory (relative to the study) -> the `ledger.verify_ledger` report
            a caller already has of it, against the key it must verify with
            (`caisson.study.studyledger.run_trust`): such a run is not read again.
        read: the study ledger's segments as `caisson.study.studyledger.read_segments` read
            them against ``trusted`` (None: read here); they are not read again.

    Raises:
        UsageError: ``study_dir`` holds no study ledger.
    """
    study_dir = Path(study_dir)
    report = StudyVerifyReport(path=str(study_dir))
    if read is None:
        try:
            read = read_segments(study_dir, trusted)
        except LedgerError as exc:
            report.segments = len(segments(study_dir))
            report.problems.append(str(exc))
            report.status = "tampered"
            return report
    if not _segments_ok(read, report):
        report.status = "tampered"
        return report
    named: set[str] = set()
    bound: dict[str, tuple[str, str]] = {}  # run dir -> (run id, head): what a backfilled figure may name
    counting: dict[str, str] = {}
    enrolled: dict[bytes, VerifyKey] = {}
    study_records = [r for seg in read for r in seg.records]
    for record in study_records:
        e = record.event
        if isinstance(e, StudyPlanned):
            enrolled = enrolled_keys(e.host_keys)
        elif isinstance(e, BaselineMeasured):
            named.add(e.run_dir)
            if e.run_id:
                bound[e.run_dir] = (e.run_id, e.ledger_head)
            _check_run(study_dir, e.run_dir, e.run_id, e.ledger_records, e.ledger_head, True, trusted,
                       "baseline", report, enrolled, verified)
            if e.gating_run_id is not None:  # the gating probe run, bound the same way
                named.add(e.gating_run_dir)
                _check_run(study_dir, e.gating_run_dir, e.gating_run_id, e.gating_ledger_records,
                           e.gating_ledger_head, True, trusted, "gating probe", report, enrolled, verified)
        elif isinstance(e, CellStarted):
            named.add(e.run_dir)
        elif isinstance(e, CellEnded):
            named.add(e.run_dir)
            if e.counting and e.run_id:
                bound[e.run_dir] = (e.run_id, e.ledger_head)
                counting[e.cell_id] = e.run_id
            _check_run(study_dir, e.run_dir, e.run_id, e.ledger_records, e.ledger_head, e.ledger_final, trusted,
                       f"cell {e.cell_id} attempt {e.attempt}:", report, enrolled, verified)
    cells = study_dir / "cells"
    if cells.is_dir():
        for ledger_file in sorted(cells.glob("*/*/ledger")):
            rel = str(ledger_file.parent.relative_to(study_dir))
            if rel not in named:
                report.problems.append(f"{rel}: a run the study ledger does not name (added afterwards)")
    if not report.problems:  # the runs are as bound: now what the backfill ledger says of them
        report.problems += verify_backfill(study_dir, trusted, bound, enrolled)
    _check_judges(study_dir, trusted, counting, report, _closed_heads(read))
    _check_announced(study_dir, trusted, study_records, report)
    if report.problems:
        report.status = "tampered"
    return report
