"""Studies: a matrix of cells (arm x agent x model x question x repetition), run end to end.

`load_study` validates a study file (``studies/<name>/study.toml``), `plan_study` makes its
matrix and refusals (pure), `run_study` runs the preflight and the cells into one study
directory with its own signed study ledger, `verify_study` checks that directory as one
whole, and `study_status` folds the study ledger into what `caisson study status` shows.
`make_executor` picks where sessions run (``local``, or ``ray``: Ray is imported only then).
docs/studies.md describes the directory, the study ledger's events and the executors.
"""

from caisson.study.executor import Executor, LocalExecutor, SessionJob, SessionResult, make_executor
from caisson.study.plan import Cell, Combo, Refusal, StudyPlan, cell_id, plan_study
from caisson.study.preflight import BaselineFacts, GraderCheck, assess_baseline, check_grader
from caisson.study.runner import StudyResult, run_study
from caisson.study.status import StudyStatus, status_lines, study_status
from caisson.study.studyfile import Study, StudyAgent, load_study, parse_study
from caisson.study.studyledger import SealedState, read_study, sealed_state
from caisson.study.verify import StudyVerifyReport, is_study_dir, verify_study

__all__ = [
    "BaselineFacts",
    "Cell",
    "Combo",
    "Executor",
    "GraderCheck",
    "LocalExecutor",
    "Refusal",
    "SealedState",
    "SessionJob",
    "SessionResult",
    "Study",
    "StudyAgent",
    "StudyPlan",
    "StudyResult",
    "StudyStatus",
    "StudyVerifyReport",
    "assess_baseline",
    "cell_id",
    "check_grader",
    "is_study_dir",
    "load_study",
    "make_executor",
    "parse_study",
    "plan_study",
    "read_study",
    "run_study",
    "sealed_state",
    "status_lines",
    "study_status",
    "verify_study",
]
