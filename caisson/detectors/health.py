"""Run health: a stalled host, a silent witness, or a chamber that never really ran."""

from __future__ import annotations

from collections.abc import Iterable

from caisson.detectors._base import DetectorConfig, Finding, Fold, VOID, folded, reads
from ledger.events import HostSample, ProcessExec, RunEnded, RunStarted, WitnessGap, WitnessStarted, WitnessStopped

__all__ = [
    "HOST_STALLED", "INFRA_FAILURE", "STALL_ABORT_AFTER", "WITNESS_GAP", "host_stalled", "infra_failure",
    "should_abort_study", "witness_gap",
]

HOST_STALLED = "host.stalled@2"
WITNESS_GAP = "witness.gap@1"
INFRA_FAILURE = "infra.failure@1"


@reads(HostSample, RunEnded)
@folded
def host_stalled(config: DetectorConfig, found: list[Finding]) -> Fold:
    """A procfs tick fired far past its deadline, or the procfs witness's stall clock woke
    that late (``host.sample.stall_ns``), or the run's wall time went far past its deadline:
    the host starved the run. Void, not a timeout (the agent was not slow).

    @2 reads ``stall_ns`` (schema 13): a stop that landed while a tick was being sampled or
    sent, which @1 missed; on ledgers written before it, @2 finds what @1 found."""
    late: list[tuple[int, int]] = []
    while (record := (yield)) is not None:
        event = record.event
        if isinstance(event, HostSample):
            lateness = max(event.timer_lateness_ns, event.stall_ns)
            if lateness >= config.stall_lateness_ns:
                late.append((record.seq, lateness))
        elif isinstance(event, RunEnded) and config.deadline_s is not None:
            limit_ns = int((config.deadline_s * config.deadline_slack + 5) * 1e9)
            if event.duration_ns > limit_ns:
                found.append(Finding(detector=HOST_STALLED, kind="host_stalled", effect=VOID, evidence=[record.seq],
                                     message=f"wall time {event.duration_ns / 1e9:.1f} s is far past the"
                                     f" {config.deadline_s:g} s deadline"))
    if late:
        worst = max(ns for _, ns in late)
        found.append(Finding(detector=HOST_STALLED, kind="host_stalled", effect=VOID, evidence=[s for s, _ in late],
                             message=f"{len(late)} procfs tick(s) fired late or saw the recorder stalled,"
                             f" worst by {worst / 1e9:.2f} s"
                             f" (threshold {config.stall_lateness_ns / 1e9:g} s)"))


@reads(RunStarted, WitnessStarted, WitnessStopped, WitnessGap)
@folded
def witness_gap(config: DetectorConfig, found: list[Finding]) -> Fold:
    """Any witness gap voids the cell, as does a witness that was expected but never
    started, or started and never stopped: a silent witness is not a clean one."""
    expected: list[str] = []
    started: dict[str, int] = {}
    stopped: set[str] = set()
    while (record := (yield)) is not None:
        event = record.event
        if isinstance(event, RunStarted):
            expected = list(event.witnesses)
        elif isinstance(event, WitnessStarted):
            started[event.witness] = record.seq
        elif isinstance(event, WitnessStopped):
            stopped.add(event.witness)
        elif isinstance(event, WitnessGap):
            found.append(Finding(detector=WITNESS_GAP, kind="witness_gap", effect=VOID, evidence=[record.seq],
                                 message=f"{event.witness}: {event.reason}" + (f"; missing {event.missing}"
                                                                              if event.missing else "")))
    for name in expected:
        if name not in started:
            found.append(Finding(detector=WITNESS_GAP, kind="witness_gap", effect=VOID,
                                 message=f"{name}: expected but never started"))
    for name, seq in started.items():
        if name not in stopped:
            found.append(Finding(detector=WITNESS_GAP, kind="witness_gap", effect=VOID, evidence=[seq],
                                 message=f"{name}: started but never reported stopping"))


@reads(RunEnded, ProcessExec, WitnessStarted)
@folded
def infra_failure(config: DetectorConfig, found: list[Finding]) -> Fold:
    """The chamber or the agent failed to start, the run was interrupted, or it never
    ended (a crash): void, not a score of zero."""
    ended = None
    first_exec = None
    traced = False  # a syscall witness started: then no exec at all means no agent ran
    while (record := (yield)) is not None:
        event = record.event
        if isinstance(event, RunEnded):
            ended = record
        elif isinstance(event, ProcessExec) and first_exec is None:
            first_exec = record
        elif isinstance(event, WitnessStarted) and event.witness in ("strace", "ebpf"):
            traced = True
    if ended is None:
        found.append(Finding(detector=INFRA_FAILURE, kind="infra_failure", effect=VOID,
                             message="the run never ended (no run.ended: the recorder crashed or was killed)"))
    elif ended.event.status in ("infra_failure", "interrupted"):
        found.append(Finding(detector=INFRA_FAILURE, kind="infra_failure", effect=VOID, evidence=[ended.seq],
                             message=f"{ended.event.status}: {ended.event.reason}"))
    if traced and first_exec is None and ended is not None and ended.event.status == "completed":
        found.append(Finding(detector=INFRA_FAILURE, kind="infra_failure", effect=VOID, evidence=[ended.seq],
                             message="the agent did not start: the tracer saw no exec (see the stderr blob)"))
    if first_exec is not None and first_exec.event.result != 0:
        found.append(Finding(detector=INFRA_FAILURE, kind="infra_failure", effect=VOID, evidence=[first_exec.seq],
                             message=f"the agent did not start: execve {first_exec.event.path} failed"
                             f" ({first_exec.event.errno})"))


STALL_ABORT_AFTER = 3
"""Consecutive cells voided by a stalled host after which a study must stop: the host, not
the agents, is being measured."""


def should_abort_study(cell_findings: Iterable[Iterable[Finding]], limit: int = STALL_ABORT_AFTER) -> bool:
    """True when the last ``limit`` cells, in run order, were each voided by ``host.stalled``.

    Args:
        cell_findings: each cell's findings, oldest first (e.g. from `caisson.replay`).
        limit: how many stalled cells in a row make an abort signal (default 3).
    """
    run = 0
    for findings in cell_findings:
        stalled = any(f.detector == HOST_STALLED and f.effect == VOID for f in findings)
        run = run + 1 if stalled else 0
    return run >= limit
