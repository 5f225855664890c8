"""Load a study directory into the report's input (`caisson.report.StudyReportInput`).

`load_study_report` verifies the study directory first (`verify_study`; a tampered study
gives no input), then maps the study ledger's events onto the report's types, every cell
recomputed from its sealed ledger with the current detectors (no derived file is read),
counting runs read in parallel processes (`read_cells`). Errors: `UsageError` for a
directory with no study ledger, `CaissonError` for a sealed scenario that no longer
parses. The mapping, the judge's summary and the backfilled token figures:
docs/architecture.md, "The report's input, from a study's ledgers".
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from caisson.detectors import DEFAULT_DETECTORS, Detector
from caisson.report import (
    CellEvidence,
    Disagreement,
    JudgeSummary,
    ReportBaseline,
    ReportCell,
    StudyReportInput,
    backfill_figure,
    read_cells,
    report_cell,
    with_backfill,
)
from caisson.scenario import parse_scenario
from caisson.study.backfill import read_backfill
from caisson.study.judging import disagrees, read_judge_records
from caisson.study.studyledger import enrolled_keys, read_segments, run_trust, segments
from caisson.study.verify import StudyVerifyReport, judge_dirs, verify_study
from ledger import BlobStore, LedgerError, VerifyKey, read_records, verify_ledger
from ledger.events import (BaselineMeasured, CellEnded, Combo, Gating, PlannedCell, Refusal, StudyPlanned,
                           TokenBackfilled)

__all__ = ["NO_MODEL", "load_study_report"]

NO_MODEL = "-"  # a plain command has no model


def _model(model: str | None) -> str:
    return model or NO_MODEL


def _elicitation(combo: Combo) -> str:
    return combo.elicitation.text() or "default"


def _measured_refusal(e: BaselineMeasured, combo: Combo | None) -> Refusal:
    """The refusal of a combination whose enforced claim the preflight's probe did not bear out."""
    gating: Gating = "ungated" if e.gating_measured == "ungated" else "not_enforced"
    return Refusal(arm=e.arm, agent=e.agent, model=_model(e.model), gating=gating,
                   kind="cannot" if gating == "ungated" else "not_yet", cells=combo.cells if combo else 0,
                   reason=f"gating measured {gating} by the preflight's probe: {e.gating_reason or e.reason}")


def _question_kinds(study_dir: Path, planned: StudyPlanned) -> dict[str, str]:
    """question id -> kind, from the scenario bytes the study ledger sealed as a blob."""
    if not planned.scenario_sha256:
        return {}
    for seg in segments(study_dir):
        store = BlobStore(seg / "blobs")
        if store.path_for(planned.scenario_sha256).is_file():
            scenario = parse_scenario(store.get(planned.scenario_sha256), planned.scenario or "scenario")
            return {q.id: q.kind for q in scenario.questions}
    return {}


def _backfilled(evidence: CellEvidence, run_id: str | None, head: str,
                backfill: dict[str, TokenBackfilled]) -> CellEvidence:
    """The evidence with the backfill ledger's figure for its run taken into the rank."""
    event = backfill.get(run_id or "")
    if event is None or event.ledger_head != head:
        return evidence
    return msgspec.structs.replace(evidence, tokens=with_backfill(evidence.tokens, backfill_figure(event)))


def _judge(study_dir: Path, trusted: VerifyKey, cells: Sequence[ReportCell]) -> JudgeSummary | None:
    """The last closed judge run's summary, its disagreements against today's scores."""
    by_id = {c.cell_id: c for c in cells}
    for judge in reversed(judge_dirs(study_dir)):
        verified = verify_ledger(judge, trusted)
        if verified.status != "ok":
            continue  # a judge run that did not finish: the one before it speaks
        read = read_judge_records(read_records(judge, trusted))
        if read.started is None or read.ended is None:
            continue
        found = []
        for v in read.verdicts:
            cell = by_id.get(v.cell_id)
            if cell is not None and cell.status == "clean" and cell.run_id == v.run_id and disagrees(v.verdict,
                                                                                                      cell.score):
                found.append(Disagreement(cell_id=v.cell_id, question_id=v.question_id, score=cell.score,
                                          judge_verdict=v.verdict.upper(), answer_excerpt=v.answer_excerpt))
        return JudgeSummary(requested_model=read.started.requested_model, served_models=read.served_models,
                            unknown_served=read.unknown_served, disagreements=tuple(found),
                            cells_judged=len(read.verdicts),
                            unparseable=sum(v.verdict == "unparseable" for v in read.verdicts),
                            errors=sum(v.verdict == "error" for v in read.verdicts), run_id=verified.run_id)
    return None


def load_study_report(study_dir: Path, trusted: VerifyKey, *,
                      detectors: Sequence[tuple[str, Detector]] = DEFAULT_DETECTORS,
                      jobs: int | None = None) -> tuple[StudyVerifyReport, StudyReportInput | None]:
    """Verify a study directory and read it into a `StudyReportInput`.

    Args:
        study_dir: the study directory (``DIR`` of ``caisson study run --out DIR``).
        trusted: the key the study ledger and every run's seals must verify against.
        detectors: (name@version, detector) pairs replay runs; the current registry by default.
        jobs: processes that read the runs (`caisson.report.read_cells`); None: one per
            core this process may use; 1: read here, one after the other.

    Returns:
        The verification report and the input; the input is None when the study is
        ``tampered`` (nothing from it is counted). An ``unclosed`` study (running or
        crashed) is read up to its last seal: its unfinished cells are ``not_run``.

    Raises:
        UsageError: ``study_dir`` holds no study ledger, or its first event is not
            ``study.planned``.
        CaissonError: the sealed scenario no longer parses.
    """
    from caisson.errors import UsageError

    study_dir = Path(study_dir)
    try:  # the plan first, to read every run once: its verification (below) uses what that read found
        read = read_segments(study_dir, trusted)
    except LedgerError:
        read = None  # verify_study says what is wrong
    records = [r for seg in read or () for r in seg.records]
    events = [r.event for r in records if r.event.__struct_config__.tag != "blob.stored"]
    planned = next((e for e in events if isinstance(e, StudyPlanned)), None)
    if planned is None:
        verified = verify_study(study_dir, trusted, read=read)
        if verified.status == "tampered":
            return verified, None
        raise UsageError(f"{study_dir}: the study ledger has no study.planned event")
    enrolled = enrolled_keys(planned.host_keys)  # verify_study, below, checks every run is signed by one of them
    combos = {(c.arm, c.agent, _model(c.model)): c for c in planned.combos}
    refused = {(r.arm, r.agent, _model(r.model)): r for r in planned.refusals}
    counting = {e.cell_id: e for e in events if isinstance(e, CellEnded) and e.counting}
    infra_attempts: dict[str, int] = {}  # attempts of a cell discarded as infra failures (and run again)
    for e in events:
        if isinstance(e, CellEnded) and e.infra_failure and not e.counting:
            infra_attempts[e.cell_id] = infra_attempts.get(e.cell_id, 0) + 1
    # A combination whose enforced claim the preflight's gating probe measured not_enforced
    # is refused there, with its evidence: its cells never ran, and are refused, not "not run".
    measured_refused = {(e.arm, e.agent, _model(e.model)): e for e in events
                        if isinstance(e, BaselineMeasured) and e.status == "refused"}
    # what each planned cell is (refused, not run, or a run to read); every run's evidence
    # is read first, in parallel (`read_cells`), then mapped in plan order
    plan: list[tuple[PlannedCell, tuple[str, str, str], CellEnded | None]] = []
    runs: list[tuple[Path, VerifyKey]] = []
    for c in planned.cells:
        key = (c.arm, c.agent, _model(c.model))
        ended = counting.get(c.cell_id)
        if (key in refused and key not in combos) or key in measured_refused:
            ended = None  # refused: its cells are not read
        elif ended is not None and ended.run_id is not None:
            runs.append((study_dir / ended.run_dir, run_trust(study_dir / ended.run_dir, trusted, enrolled)))
        plan.append((c, key, ended))
    baseline_events = [e for e in events if isinstance(e, BaselineMeasured) and e.run_dir and e.run_id is not None]
    runs += [(study_dir / e.run_dir, run_trust(study_dir / e.run_dir, trusted, enrolled)) for e in baseline_events]
    evidences = read_cells(runs, detectors, jobs=jobs)
    verified = verify_study(study_dir, trusted, {str(run_dir.relative_to(study_dir)): e.ledger
                                                 for (run_dir, _), e in zip(runs, evidences) if e.ledger is not None},
                            read=read)
    if verified.status == "tampered":  # nothing read above is counted
        return verified, None
    backfill = read_backfill(study_dir, trusted)  # verified with the study, as the scenario blob is
    kinds = _question_kinds(study_dir, planned)
    read = iter(evidences)
    cells: list[ReportCell] = []
    for c, key, ended in plan:
        combo, refusal = combos.get(key), refused.get(key)
        place: dict[str, Any] = dict(
            cell_id=c.cell_id, arm=key[0], agent=key[1], model=key[2], question_id=c.question_id,
            question_kind=kinds.get(c.question_id, "locate"), repetition=c.repetition,
            gating=combo.gating if combo else refusal.gating if refusal else "ungated",
            elicitation=_elicitation(combo) if combo else "default")
        if (key in refused and key not in combos) or key in measured_refused:
            cells.append(ReportCell(status="refused", **place))
        elif ended is None or ended.run_id is None:
            cells.append(ReportCell(status="not_run", **place))
        else:
            evidence = _backfilled(next(read), ended.run_id, ended.ledger_head, backfill)
            cells.append(report_cell(evidence, **place, infra_attempts=infra_attempts.get(c.cell_id, 0),
                                     recorded=ended.verdict))
    for r in planned.refusals:  # a refusal's cells are not in the run order: still planned
        key = (r.arm, r.agent, _model(r.model))
        if not any((x.arm, x.agent, x.model) == key for x in cells):
            for i in range(r.cells):
                cells.append(ReportCell(cell_id=f"{'--'.join(key)}--refused-{i + 1}", arm=key[0], agent=key[1],
                                        model=key[2], question_id="-", status="refused",
                                        gating=r.gating, elicitation="-"))
    baselines: list[ReportBaseline] = []
    for e in baseline_events:
        evidence = _backfilled(next(read), e.run_id, e.ledger_head, backfill)
        tools = tuple(e.tools_discovered) or None
        denied = tuple(t for t in e.tools_requested if t in set(e.deny))
        isolation = "unavailable" if tools is None else ("failed" if denied or e.status == "abort" else "passed")
        baselines.append(ReportBaseline(arm=e.arm, agent=e.agent, model=_model(e.model), floor=evidence.tokens.figure,
                                        isolation=isolation, denied_present=denied, tools=tools, run_id=e.run_id))
    data = StudyReportInput(
        study_id=planned.study, study_head=verified.head, detector_versions=tuple(name for name, _ in detectors),
        cells=tuple(cells), baselines=tuple(baselines),
        refusals=tuple(msgspec.structs.replace(r, model=_model(r.model)) for r in planned.refusals)
        + tuple(_measured_refusal(e, combos.get(key)) for key, e in measured_refused.items()),
        prices=dict(planned.prices),
        judge=_judge(study_dir, trusted, cells), seed=planned.order_seed or 0)
    return verified, data


