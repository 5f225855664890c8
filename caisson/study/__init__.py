"""Studies: a matrix of cells (arm x agent x model x question x repetition), run end to end.

`load_study` validates a study file (``studies/<name>/study.toml``), `plan_study` makes its
matrix and refusals (pure), `run_study` runs the preflight and the cells into one study
directory with its own signed study ledger, `verify_study` checks that directory as one
whole, and `study_status` folds the study ledger into what `caisson study status` shows.
`make_executor` picks where sessions run (``local``, or ``ray``: Ray is imported only then).
docs/studies.md describes the directory, the study ledger's events and the executors.

The names below are imported on first use (PEP 562): importing one submodule (a Ray host
importing `caisson.study._ray` for its first session) does not import them all (the
runner, replay, the report and numpy); see `ledger.lazy`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ledger.lazy import lazy_face

if TYPE_CHECKING:
    from caisson.study._dispatch import SessionJob, SessionResult
    from caisson.study.backfill import backfill_study
    from caisson.study.executor import Executor, LocalExecutor, make_executor
    from caisson.study.judge import resolve_judge, run_judge
    from caisson.study.plan import StudyPlan, cell_id, plan_study
    from caisson.study.preflight import BaselineFacts, assess_baseline, check_grader
    from caisson.study.progress import Progress
    from caisson.study.proof import prove_cell
    from caisson.study.report_input import load_study_report
    from caisson.study.runner import StudyResult, run_study
    from caisson.study.status import StudyStatus, status_lines, study_status
    from caisson.study.studyfile import Study, StudyAgent, load_study, parse_study
    from caisson.study.studyledger import SealedState, read_study, sealed_state
    from caisson.study.verify import StudyVerifyReport, is_study_dir, verify_study

__all__ = [
    "BaselineFacts", "Executor", "LocalExecutor", "Progress", "SealedState", "SessionJob", "SessionResult",
    "Study", "StudyAgent", "StudyPlan", "StudyResult", "StudyStatus", "StudyVerifyReport", "assess_baseline",
    "backfill_study", "cell_id", "check_grader", "is_study_dir", "load_study", "load_study_report",
    "make_executor", "parse_study", "plan_study", "prove_cell", "read_study", "resolve_judge", "run_judge", "run_study",
    "sealed_state", "status_lines", "study_status", "verify_study",
]

__getattr__, __dir__ = lazy_face(__name__, {
    "_dispatch": ("SessionJob", "SessionResult"),
    "backfill": ("backfill_study",),
    "executor": ("Executor", "LocalExecutor", "make_executor"),
    "judge": ("resolve_judge", "run_judge"),
    "plan": ("StudyPlan", "cell_id", "plan_study"),
    "preflight": ("BaselineFacts", "assess_baseline", "check_grader"),
    "progress": ("Progress",),
    "proof": ("prove_cell",),
    "report_input": ("load_study_report",),
    "runner": ("StudyResult", "run_study"),
    "status": ("StudyStatus", "status_lines", "study_status"),
    "studyfile": ("Study", "StudyAgent", "load_study", "parse_study"),
    "studyledger": ("SealedState", "read_study", "sealed_state"),
    "verify": ("StudyVerifyReport", "is_study_dir", "verify_study"),
}, globals())
