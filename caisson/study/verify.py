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
   or ended): a cell added afterwards fails.

Which key a run must verify against: the study ledger's trusted key, unless
``study.planned`` enrolled host keys (``--executor ray``): then exactly those, the one the
run's ledger header names; a run signed by any other key fails (docs/studies.md, "Keys").

The result is ``ok``, ``tampered`` (any problem above) or ``unclosed`` (intact, but the
last segment has no final seal: the study is running or crashed, and can be resumed).
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from caisson.study.studyledger import enrolled_keys, read_study, run_key, sealed_state, segments
from ledger import LedgerChecker, LedgerError, VerifyKey, locate, verify_ledger
from ledger.events import BaselineMeasured, CellEnded, CellStarted, StudyPlanned, StudyResumed

__all__ = ["StudyVerifyReport", "verify_study", "is_study_dir", "run_trust"]


class StudyVerifyReport(msgspec.Struct, kw_only=True):
    """What `verify_study` found; ``exit_code`` follows `caisson verify`'s contract."""

    path: str
    status: str = "ok"  # ok | tampered | unclosed
    segments: int = 0
    runs_checked: int = 0  # baselines and cell attempts whose ledgers were checked
    problems: list[str] = []

    @property
    def exit_code(self) -> int:
        """0 ok, 1 tampered, 3 intact but not closed."""
        return {"ok": 0, "tampered": 1, "unclosed": 3}[self.status]


def is_study_dir(path: Path) -> bool:
    """Whether ``path`` is a study directory (it holds ``study/000/ledger``)."""
    return bool(segments(Path(path)))


def _segments_ok(study_dir: Path, trusted: VerifyKey, report: StudyVerifyReport) -> bool:
    segs = segments(study_dir)
    report.segments = len(segs)
    states = []
    for seg in segs:
        try:
            full = verify_ledger(seg, trusted)
        except LedgerError as exc:
            report.problems.append(f"{seg}: {exc}")
            return False
        if full.status == "tampered":
            report.problems.append(f"{seg}: study ledger tampered: seq {full.bad_seq}: {full.reason}")
            return False
        states.append(sealed_state(seg, trusted))
    for i, seg in enumerate(segs[1:], 1):
        first = next(iter(_segment_events(seg, trusted)), None)
        prev = states[i - 1]
        if not isinstance(first, StudyResumed):
            report.problems.append(f"{seg}: a continuation segment must start with study.resumed")
        elif (first.previous_run_id, first.previous_records, first.previous_head) != (prev.run_id, prev.records,
                                                                                      prev.head):
            report.problems.append(f"{seg}: study.resumed names {first.previous_run_id} at {first.previous_records}"
                                   f" records, but {segs[i - 1]} is {prev.run_id} sealed at {prev.records}")
    if states and not states[-1].final:
        report.status = "unclosed"
    return not report.problems


def _segment_events(seg: Path, trusted: VerifyKey):
    """The events of one segment, blob records left out."""
    ledger_path, _ = locate(seg)
    checker = LedgerChecker(trusted, decode=True)
    checker.feed(ledger_path.read_bytes())
    for record in checker.records():
        if record.event.__struct_config__.tag != "blob.stored":
            yield record.event


def run_trust(run_dir: Path, trusted: VerifyKey, enrolled: dict[bytes, VerifyKey]) -> VerifyKey | None:
    """The key a study's run verifies against: ``trusted`` when the study enrolled no host
    keys, else the enrolled key its ledger names (None: signed by a key not enrolled)."""
    return run_key(run_dir, enrolled) if enrolled else trusted


def _check_run(study_dir: Path, rel: str, run_id: str | None, records: int, head: str, final: bool,
               trusted: VerifyKey, what: str, report: StudyVerifyReport,
               enrolled: dict[bytes, VerifyKey] | None = None) -> None:
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
        full = verify_ledger(run_dir, trusted)
        state = sealed_state(run_dir, trusted)
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


def verify_study(study_dir: Path, trusted: VerifyKey) -> StudyVerifyReport:
    """Verify a study directory; see the module docstring.

    Raises:
        UsageError: ``study_dir`` holds no study ledger.
    """
    study_dir = Path(study_dir)
    report = StudyVerifyReport(path=str(study_dir))
    if not _segments_ok(study_dir, trusted, report):
        report.status = "tampered"
        return report
    named: set[str] = set()
    enrolled: dict[bytes, VerifyKey] = {}
    for record in read_study(study_dir, trusted):
        e = record.event
        if isinstance(e, StudyPlanned):
            enrolled = enrolled_keys(e.host_keys)
        elif isinstance(e, BaselineMeasured):
            named.add(e.run_dir)
            _check_run(study_dir, e.run_dir, e.run_id, e.ledger_records, e.ledger_head, True, trusted,
                       "baseline", report, enrolled)
            if e.gating_run_id is not None:  # the gating probe run, bound the same way
                named.add(e.gating_run_dir)
                _check_run(study_dir, e.gating_run_dir, e.gating_run_id, e.gating_ledger_records,
                           e.gating_ledger_head, True, trusted, "gating probe", report, enrolled)
        elif isinstance(e, CellStarted):
            named.add(e.run_dir)
        elif isinstance(e, CellEnded):
            named.add(e.run_dir)
            _check_run(study_dir, e.run_dir, e.run_id, e.ledger_records, e.ledger_head, e.ledger_final, trusted,
                       f"cell {e.cell_id} attempt {e.attempt}:", report, enrolled)
    cells = study_dir / "cells"
    if cells.is_dir():
        for ledger_file in sorted(cells.glob("*/*/ledger")):
            rel = str(ledger_file.parent.relative_to(study_dir))
            if rel not in named:
                report.problems.append(f"{rel}: a run the study ledger does not name (added afterwards)")
    if report.problems:
        report.status = "tampered"
    return report
