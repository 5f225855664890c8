"""Processes a syscall witness did not see, and the ways an agent makes it blind.

The procfs witness samples the chamber's process tree every tick (``proc.sample``: pid in
the chamber, host pid, start time, parent); a syscall witness (strace, eBPF) reports each
process it follows (``process.fork`` at birth, then its execs, opens, exit). The two see
the same processes from different sides, so neither is trusted alone: a process procfs
saw that a syscall witness never reported while it lived means that witness was blind
to it, and to whatever it did (issue 28, item 1: a child cloned with ``CLONE_UNTRACED``,
or calls passed by a seccomp user-notification listener, never reach strace).

``witness.unseen_process`` compares them; ``witness.evasion`` reports the two moves that
blind strace when they appear in a trace at all (the chamber's seccomp profile refuses
both, so they appear only where it was weakened, or to a witness that sees refused calls).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator

from caisson.detectors._base import INFO, VOID, DetectorConfig, Finding, Fold, folded, reads
from ledger import Record
from ledger.events import (FileChange, FileOpen, HostSample, NetConnect, NetSend, ProcessExec, ProcessExit,
                           ProcessFork, ProcessSyscall, ProcSample, WitnessGap, WitnessStarted)

__all__ = ["EVASION", "UNSEEN_PROCESS", "evasion", "unseen_process"]

UNSEEN_PROCESS = "witness.unseen_process@1"
EVASION = "witness.evasion@1"
SYSCALL_WITNESSES = ("strace", "ebpf")
SLACK_NS = 200_000_000
"""How far outside a process's sampled life a syscall witness's report of it still counts,
ns: the witnesses stamp with different clocks (strace the wall clock in us, eBPF the
monotonic clock plus an offset taken once, procfs the wall clock after a tick's read)."""
_WITH_PID = (ProcessFork, ProcessExec, ProcessExit, FileOpen, FileChange, NetConnect, NetSend, ProcessSyscall)


class _Life:
    """One process incarnation as procfs sampled it: (pid, start time) and when."""

    __slots__ = ("pid", "host_pid", "ppid", "start", "name", "first", "last", "seq")

    def __init__(self, record: Record, event: ProcSample):
        self.pid, self.host_pid, self.ppid, self.start = event.pid, event.host_pid, event.ppid, event.start_time_ns
        self.name, self.first, self.last, self.seq = event.name, record.wall_ns, record.wall_ns, record.seq


@reads(WitnessStarted, WitnessGap, HostSample, ProcSample, *_WITH_PID)
@folded
def unseen_process(config: DetectorConfig, found: list[Finding]) -> Fold:
    """Processes procfs sampled that a syscall witness never reported while they lived.

    A procfs incarnation (pid, start time) is seen by a syscall witness when that witness
    has a record of the same pid (or host pid) stamped between the procfs tick before the
    one that first sampled it and the tick after the one that last did, `SLACK_NS` either
    side. Not compared: the chamber's init (pid 1, caisson's ``timeout``) and the earliest
    child of it (the strace tracer, or the eBPF witness's start wrapper, which becomes
    the command); ledgers without ``proc.sample.ppid`` (schema < 14); a run where either
    witness reported a gap (``witness.gap`` voids it already).

    Yields:
        One void ``unseen_process`` finding per syscall witness and unseen incarnation,
        its evidence the first ``proc.sample`` of it.
    """
    started: set[str] = set()
    ticks: list[int] = []  # wall ns of each procfs tick (host.sample: one per tick)
    lives: dict[tuple[int, int], _Life] = {}
    reports: dict[str, dict[int, list[list[int]]]] = {w: {} for w in SYSCALL_WITNESSES}  # by pid: spans
    by_host: dict[str, dict[int, list[list[int]]]] = {w: {} for w in SYSCALL_WITNESSES}  # by host pid
    while (record := (yield)) is not None:
        event, source = record.event, record.source
        if source in reports and isinstance(event, _WITH_PID):  # the bulk of a run: first
            _report(reports[source], event.pid, record.wall_ns)
            if event.host_pid is not None:
                _report(by_host[source], event.host_pid, record.wall_ns)
        elif isinstance(event, ProcSample):
            if event.ppid is None and event.pid != 1:
                return  # written before schema 14: the tracer cannot be told from the agent's processes
            life = lives.get((event.pid, event.start_time_ns))
            if life is None:
                lives[(event.pid, event.start_time_ns)] = _Life(record, event)
            else:
                life.last = record.wall_ns
        elif isinstance(event, HostSample) and source == "procfs":
            ticks.append(record.wall_ns)
        elif isinstance(event, WitnessGap) and event.witness in ("procfs", *SYSCALL_WITNESSES):
            return
        elif isinstance(event, WitnessStarted):
            started.add(event.witness)
    if "procfs" not in started or not lives:
        return
    ticks.sort()
    scaffold = _scaffolding(lives.values())
    for witness in SYSCALL_WITNESSES:
        if witness not in started:
            continue
        for life in lives.values():
            if (life.pid, life.start) in scaffold:
                continue
            low, high = _window(life, ticks)
            if _any_within(reports[witness].get(life.pid, ()), low, high) or (
                    life.host_pid is not None and _any_within(by_host[witness].get(life.host_pid, ()), low, high)):
                continue
            found.append(Finding(detector=UNSEEN_PROCESS, kind="unseen_process", effect=VOID, evidence=[life.seq],
                                 message=f"procfs saw pid {life.pid} ({life.name}, host pid {life.host_pid}, parent"
                                 f" {life.ppid}); the {witness} witness never reported it: it was blind to that"
                                 " process and to everything it did"))


def _scaffolding(lives: Iterable[_Life]) -> set[tuple[int, int]]:
    """caisson's own processes of the tree: the init (pid 1), its earliest child, and, when
    that child is the strace tracer, the tracer's own forks (strace probes ptrace and seccomp
    in children of its own before it starts the command; an agent's process is never the
    tracer's child: only the command is, and it runs the command's program)."""
    lives = list(lives)
    out = {(life.pid, life.start) for life in lives if life.pid == 1}
    children = [life for life in lives if life.ppid == 1]
    if children:
        first = min(children, key=lambda life: (life.start, life.pid))
        out.add((first.pid, first.start))
        if first.name == "strace":
            out |= {(life.pid, life.start) for life in lives if life.ppid == first.pid and life.name == "strace"}
    return out


def _window(life: _Life, ticks: list[int]) -> tuple[float, float]:
    """When a report of ``life`` counts, ns: from the tick before the one that first
    sampled it (it was not there then) to the tick after the one that last did."""
    i = bisect.bisect_left(ticks, life.first)  # ticks[i - 1]: the host.sample of its first tick
    low = ticks[i - 2] - SLACK_NS if i >= 2 else float("-inf")
    j = bisect.bisect_right(ticks, life.last)  # ticks[j]: the tick after its last sample
    high = ticks[j + 1] + SLACK_NS if j + 1 < len(ticks) else float("inf")
    return low, high


_SPAN_GAP_NS = 1_000_000_000
"""Reports of one pid closer than this join one span (a pid is not reused that fast)."""


def _report(spans_of: dict[int, list[list[int]]], pid: int, wall_ns: int) -> None:
    """Add a report of ``pid`` at ``wall_ns`` to its spans ``[first, last]`` (one per burst: a
    run's millions of opens keep a few spans per process, not a stamp each)."""
    spans = spans_of.get(pid)
    if spans is None:
        spans_of[pid] = [[wall_ns, wall_ns]]
        return
    last = spans[-1]
    if last[0] - _SPAN_GAP_NS <= wall_ns <= last[1] + _SPAN_GAP_NS:
        if wall_ns > last[1]:
            last[1] = wall_ns
        elif wall_ns < last[0]:
            last[0] = wall_ns
    else:
        spans.append([wall_ns, wall_ns])


def _any_within(spans: Iterable[list[int]], low: float, high: float) -> bool:
    return any(first <= high and last >= low for first, last in spans)


_LISTENER = "SECCOMP_FILTER_FLAG_NEW_LISTENER"


@reads(WitnessStarted, ProcessFork, ProcessSyscall)
@folded
def evasion(config: DetectorConfig, found: list[Finding]) -> Fold:
    """The moves that blind the strace witness, wherever a trace shows them made.

    - a process cloned with ``CLONE_UNTRACED`` (strace cannot follow it);
    - a seccomp filter installed with a user-notification listener (its
      ``SECCOMP_RET_USER_NOTIF`` outranks the tracer's ``SECCOMP_RET_TRACE``: a supervisor
      can let calls run that strace never stops on).

    Void when the strace witness ran (what followed may be missing from its record),
    shown otherwise (the eBPF witness sees past both). A refused attempt is
    ``containment.denied_syscall``'s, not this detector's.
    """
    moves: list[Record] = []  # the witnesses' starts, and the forks and seccomp calls that may be moves
    while (record := (yield)) is not None:
        event = record.event
        if isinstance(event, ProcessFork) and "CLONE_UNTRACED" not in event.flags:
            continue
        if isinstance(event, ProcessSyscall) and event.syscall != "seccomp":
            continue
        moves.append(record)
    found.extend(_evasion(moves))


def _evasion(records: list[Record]) -> Iterator[Finding]:
    """`evasion`'s findings over its records."""
    traced = any(isinstance(r.event, WitnessStarted) and r.event.witness == "strace" for r in records)
    effect = VOID if traced else INFO
    for record in records:
        event = record.event
        if isinstance(event, ProcessFork) and "CLONE_UNTRACED" in event.flags:
            yield Finding(detector=EVASION, kind="untraced_clone", effect=effect, evidence=[record.seq],
                          message=f"pid {event.ppid} cloned pid {event.pid} with CLONE_UNTRACED ({record.source}):"
                          " a child no tracer follows")
        elif (isinstance(event, ProcessSyscall) and event.syscall == "seccomp" and not event.denied
              and event.result is not None and event.result >= 0 and any(_LISTENER in a for a in event.args)):
            yield Finding(detector=EVASION, kind="seccomp_listener", effect=effect, evidence=[record.seq],
                          message=f"pid {event.pid} installed a seccomp filter with a user-notification listener"
                          f" ({record.source}): calls it passes on run without a tracer's stop")
