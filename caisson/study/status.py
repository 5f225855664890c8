"""A study's state, computed from its study ledger's records (pure): what `caisson study
status` prints and what the runner's live display shows.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from ledger import Record
from ledger.events import (BackfillRecorded, CellEnded, CellStarted, HostDrained, JudgeRecorded, StudyAborted,
                           StudyEnded, StudyPlanned, StudyResumed)

__all__ = ["HostCounts", "StudyStatus", "count_line", "host_lines", "study_status", "status_lines"]


class HostCounts(msgspec.Struct, kw_only=True):
    """One host's share of a study run by a distributed executor (counts are attempts)."""

    attempts: int = 0  # attempts that ended there
    counted: int = 0  # of which counting (clean or void)
    void: int = 0  # of the counting ones, void
    infra_failures: int = 0
    drained: bool = False


class StudyStatus(msgspec.Struct, kw_only=True):
    """Counts over a study's cells, and where it is (all times ns; counts are cells)."""

    study: str = ""
    cells: int = 0  # cells planned (refused ones are not cells)
    done: int = 0  # cells with a counting attempt that is clean
    void: int = 0  # cells whose counting attempt is void, or with none after all their attempts
    refused: int = 0  # cells the refusals left out
    left: int = 0  # cells not yet settled
    attempts: int = 0  # attempts ended
    infra_failures: int = 0
    current: str | None = None  # the cell being run (started, not ended; the latest started of several)
    running: int = 0  # cells started and not ended (ray: several at once)
    segments: int = 1  # 1 + how often the study was resumed (segments announcing a judge or backfill left out)
    started_ns: int | None = None  # wall clock of study.planned
    last_ns: int | None = None  # wall clock of the last event
    mean_attempt_ns: int | None = None
    eta_ns: int | None = None  # left x mean attempt time
    state: str = "running"  # running | ended | aborted
    abort_reason: str = ""
    hosts: dict[str, HostCounts] = {}  # per host (ray: "host name/node id"); {} local


def study_status(records: Iterable[Record]) -> StudyStatus:
    """Fold a study ledger's records (every segment, in order) into its status."""
    status = StudyStatus()
    settled: dict[str, str] = {}  # cell -> clean | void
    open_cells: dict[str, int] = {}
    durations: list[int] = []
    infra_attempts: dict[str, int] = {}
    retries = 1
    for record in records:
        event = record.event
        status.last_ns = record.wall_ns
        if isinstance(event, StudyPlanned):
            status.study, status.cells = event.study, len(event.cells)
            status.refused = sum(r.cells for r in event.refusals)
            status.started_ns, retries = record.wall_ns, event.infra_retries
        elif isinstance(event, StudyResumed):
            status.segments += 1
        elif isinstance(event, CellStarted):
            open_cells.pop(event.cell_id, None)  # (re)inserted last: the latest started
            open_cells[event.cell_id] = event.attempt
            status.current = event.cell_id
        elif isinstance(event, CellEnded):
            open_cells.pop(event.cell_id, None)
            status.current = next(reversed(open_cells), None)
            status.attempts += 1
            if event.duration_ns:
                durations.append(event.duration_ns)
            if event.host:
                host = status.hosts.setdefault(event.host, HostCounts())
                host.attempts += 1
                host.counted += event.counting
                host.void += event.counting and not _clean(event)
                host.infra_failures += event.infra_failure and event.status != "unclosed"
            if event.counting:
                settled[event.cell_id] = "clean" if _clean(event) else "void"
            elif event.infra_failure and event.status != "unclosed":
                status.infra_failures += 1
                infra_attempts[event.cell_id] = infra_attempts.get(event.cell_id, 0) + 1
                if infra_attempts[event.cell_id] > retries:
                    settled.setdefault(event.cell_id, "void")
        elif isinstance(event, (JudgeRecorded, BackfillRecorded)):
            status.segments -= 1  # its segment's study.resumed announced it: not a resume
        elif isinstance(event, HostDrained):
            status.hosts.setdefault(event.host, HostCounts()).drained = True
        elif isinstance(event, StudyAborted):
            status.state, status.abort_reason = "aborted", event.reason
        elif isinstance(event, StudyEnded) and status.state != "aborted":
            status.state = "ended"
    status.done = sum(v == "clean" for v in settled.values())
    status.void = sum(v == "void" for v in settled.values())
    status.left = status.cells - len(settled)
    if durations:
        status.mean_attempt_ns = sum(durations) // len(durations)
        status.eta_ns = status.mean_attempt_ns * status.left if status.state == "running" else 0
    status.running = len(open_cells) if status.state == "running" else 0
    if status.state != "running":
        status.current = None
    return status


def _clean(event: CellEnded) -> bool:
    """A counting attempt's verdict is clean (its ledger verified closed, nothing voided it)."""
    return event.verdict is not None and event.verdict.status == "clean"


def _seconds(ns: int | None) -> str:
    if ns is None:
        return "-"
    s = int(ns / 1e9)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def count_line(status: StudyStatus) -> str:
    """The status's counts in one line (cells done, void, left; refusals; attempts)."""
    return (f"study {status.study}: {status.state}; cells {status.cells}: done {status.done}, void {status.void},"
            f" left {status.left}; refused {status.refused}; attempts {status.attempts}"
            f" (infra failures {status.infra_failures})")


def host_lines(status: StudyStatus) -> list[str]:
    """One line per host that recorded an attempt (an executor with hosts: Ray), by name."""
    return [f"  host {name}: attempts {host.attempts}, counted {host.counted} (void {host.void}),"
            f" infra failures {host.infra_failures}" + (", DRAINED" if host.drained else "")
            for name, host in sorted(status.hosts.items())]


def status_lines(status: StudyStatus, *, now_ns: int | None = None, load: tuple[float, ...] | None = None) -> list[str]:
    """Human lines for a status (the plain display, and `caisson study status`).

    Args:
        status: the folded status.
        now_ns: the wall clock now, ns (elapsed is measured to it; default: the last event).
        load: the host's load averages (1, 5, 15 min), or None to leave them out.
    """
    end = now_ns if now_ns is not None and status.state == "running" else status.last_ns
    elapsed = end - status.started_ns if end is not None and status.started_ns is not None else None
    lines = [count_line(status), f"  elapsed {_seconds(elapsed)}, estimated left {_seconds(status.eta_ns)}"
             + (f", host load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}" if load else "")
             + (f", segments {status.segments}" if status.segments > 1 else "")]
    if status.current:
        lines.append(f"  current cell {status.current}"
                     + (f" (and {status.running - 1} more running)" if status.running > 1 else ""))
    lines += host_lines(status)
    if status.abort_reason:
        lines.append(f"  aborted: {status.abort_reason}")
    return lines
