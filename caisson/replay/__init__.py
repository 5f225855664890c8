"""Replay: a sealed run's ledger through the detectors and the checklist grading, offline.

Findings and scores are derived data: written beside the run (``findings.json``), never into
its ledger, so a detector fix changes them without touching the evidence.
"""

from caisson.replay._replay import (
    BLOB_ROLES,
    FINDINGS_FILE,
    WEAKENED,
    RunReplay,
    check_replayable,
    rebuilt_records,
    replay_records,
    replay_run,
    replay_runs,
    replay_streams,
    verdict_change,
    verdict_of,
    write_findings,
)
from caisson.replay.scoring import Grade, Summary, grade, summarize

__all__ = [
    "BLOB_ROLES",
    "FINDINGS_FILE",
    "WEAKENED",
    "Grade",
    "RunReplay",
    "Summary",
    "check_replayable",
    "grade",
    "rebuilt_records",
    "replay_records",
    "replay_run",
    "replay_runs",
    "replay_streams",
    "summarize",
    "verdict_change",
    "verdict_of",
    "write_findings",
]
