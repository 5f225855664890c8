"""Studies: a matrix of cells (arm x agent x model x question x repetition), run end to end.

`load_study` validates a study file (``studies/<name>/study.toml``), `plan_study` makes its
matrix and refusals (pure), `run_study` runs the preflight and the cells into one study
directory with its own signed study ledger, `verify_study` checks that directory as one
whole, and `study_status` folds the study ledger into what `caisson study status` shows.
`make_executor` picks where sessions run (``local``, or ``ray``: Ray is imported only then).
docs/studies.md describes the directory, the study ledger's events and the executors.

The names below are imported on first use (PEP 562): importing one submodule (a Ray host
importing `caisson.study._ray` for its first session) does not import them all (the
runner, replay, the report and numpy).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_WHERE = {
    "_dispatch": ("SessionJob", "SessionResult"),
    "executor": ("Executor", "LocalExecutor", "make_executor"),
    "plan": ("StudyPlan", "cell_id", "plan_study"),
    "preflight": ("BaselineFacts", "assess_baseline", "check_grader"),
    "runner": ("StudyResult", "run_study"),
    "status": ("StudyStatus", "status_lines", "study_status"),
    "studyfile": ("Study", "StudyAgent", "load_study", "parse_study"),
    "studyledger": ("SealedState", "read_study", "sealed_state"),
    "verify": ("StudyVerifyReport", "is_study_dir", "verify_study"),
}
_MODULE_OF = {name: module for module, names in _WHERE.items() for name in names}

if TYPE_CHECKING:
    from caisson.study._dispatch import SessionJob, SessionResult  # noqa: F401 (named in __all__)
    from caisson.study.executor import Executor, LocalExecutor, make_executor  # noqa: F401 (named in __all__)
    from caisson.study.plan import StudyPlan, cell_id, plan_study  # noqa: F401 (named in __all__)
    from caisson.study.preflight import BaselineFacts, assess_baseline, check_grader  # noqa: F401 (named in __all__)
    from caisson.study.runner import StudyResult, run_study  # noqa: F401 (named in __all__)
    from caisson.study.status import StudyStatus, status_lines, study_status  # noqa: F401 (named in __all__)
    from caisson.study.studyfile import Study, StudyAgent, load_study, parse_study  # noqa: F401 (named in __all__)
    from caisson.study.studyledger import SealedState, read_study, sealed_state  # noqa: F401 (named in __all__)
    from caisson.study.verify import StudyVerifyReport, is_study_dir, verify_study  # noqa: F401 (named in __all__)


def __getattr__(name: str):
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'caisson.study' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"caisson.study.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = sorted(_MODULE_OF)
