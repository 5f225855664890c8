"""witness.unseen_process and witness.evasion as playbooks: records in, exact findings out."""

from __future__ import annotations

import pytest

from caisson.detectors import DEFAULT_DETECTORS, DetectorConfig, Finding, run_detectors
from caisson.detectors.processes import EVASION, SLACK_NS, UNSEEN_PROCESS, evasion, unseen_process
from ledger import Record
from ledger.events import (FileOpen, HostSample, ProcessExec, ProcessExit, ProcessFork, ProcessSyscall, ProcSample,
                           WitnessGap, WitnessStarted)

CONFIG = DetectorConfig()
MS = 1_000_000
TICK = 250 * MS
T0 = 1_796_000_000_000_000_000


class Run:
    """A run's records in time order: (wall ns, source, event)."""

    def __init__(self, *witnesses: str):
        self.items: list[tuple[int, str, object]] = [(T0, w, WitnessStarted(witness=w)) for w in witnesses]

    def add(self, at_ms: float, source: str, event) -> Run:
        self.items.append((T0 + int(at_ms * MS), source, event))
        return self

    def tick(self, k: int, *procs: ProcSample) -> Run:
        """procfs tick k: its host.sample at k * 250 ms, the tree read 5 ms later."""
        self.add(k * 250, "procfs", HostSample(interval_ns=TICK))
        for proc in procs:
            self.add(k * 250 + 5, "procfs", proc)
        return self

    def records(self) -> list[Record]:
        ordered = sorted(self.items, key=lambda item: item[0])
        return [Record(seq=i, wall_ns=t, mono_ns=t, source=s, event=e) for i, (t, s, e) in enumerate(ordered)]


def proc(pid: int, ppid: int | None, start: int, name: str = "sh", host: int | None = None) -> ProcSample:
    return ProcSample(pid=pid, host_pid=host if host is not None else 9000 + pid, ppid=ppid, start_time_ns=start,
                      name=name)


INIT = proc(1, None, 100, "timeout")
TRACER = proc(6, 1, 200, "strace")
AGENT = proc(10, 6, 210, "sh")


def traced_run() -> Run:
    """strace traces sh (pid 10), which forks pid 11; procfs samples all of them."""
    run = Run("procfs", "strace")
    run.tick(0, INIT, TRACER)
    run.add(10, "strace", ProcessExec(pid=10, host_pid=9010, path="/bin/sh"))
    run.tick(1, INIT, TRACER, AGENT)
    run.add(300, "strace", ProcessFork(pid=11, host_pid=9011, ppid=10, syscall="clone"))
    for k in (2, 3, 4):
        run.tick(k, INIT, TRACER, AGENT, proc(11, 10, 300))
    run.add(1100, "strace", ProcessExit(pid=11, host_pid=9011, code=0))
    return run


def test_every_traced_process_is_seen_and_the_chambers_own_are_not_compared():
    assert list(unseen_process(traced_run().records(), CONFIG)) == []


def test_a_process_procfs_sampled_and_strace_never_reported_voids_the_run():
    """Issue 28, item 1: a child cloned with CLONE_UNTRACED (its clone hidden by a seccomp
    listener) reads the key and runs sh, cat and id; strace records nothing of it."""
    run = traced_run()
    hidden = proc(12, 10, 320, "cat")
    for k in (5, 6):
        run.tick(k, INIT, TRACER, AGENT, hidden)
    records = run.records()
    first = next(r.seq for r in records if r.event == hidden)
    assert list(unseen_process(records, CONFIG)) == [
        Finding(detector=UNSEEN_PROCESS, kind="unseen_process", effect="void", evidence=[first],
                message="procfs saw pid 12 (cat, host pid 9012, parent 10); the strace witness never reported"
                        " it: it was blind to that process and to everything it did")]


def test_a_report_of_the_same_pid_outside_the_processs_life_does_not_count():
    """A pid is matched with its start: a report from long before this incarnation (an
    earlier process of that pid) or long after it is gone does not make it seen."""
    run = traced_run()
    run.add(1200, "strace", FileOpen(pid=13, host_pid=None, path="/etc/hosts", result=3))  # an earlier pid 13
    for k in range(5, 12):
        run.tick(k, INIT, TRACER, AGENT)
    run.tick(12, INIT, TRACER, AGENT, proc(13, 10, 3000))  # born after tick 11
    run.tick(13, INIT, TRACER, AGENT, proc(13, 10, 3000))
    run.tick(14, INIT, TRACER, AGENT)
    run.tick(15, INIT, TRACER, AGENT)
    run.add(15 * 250 + SLACK_NS / MS + 10, "strace", ProcessExit(pid=13, code=0))  # past its window
    found = list(unseen_process(run.records(), CONFIG))
    assert [f.kind for f in found] == ["unseen_process"] and "pid 13" in found[0].message


def test_a_host_pid_match_is_enough_when_the_pids_differ():
    """A process in a nested pid namespace: the witness's pid and procfs's agree on the host pid."""
    run = traced_run()
    run.add(1300, "strace", ProcessFork(pid=77, host_pid=9020, ppid=10))
    run.tick(6, INIT, TRACER, AGENT, proc(20, 10, 1300, host=9020))
    assert list(unseen_process(run.records(), CONFIG)) == []


def test_each_syscall_witness_is_held_to_it_alone():
    """With both witnesses, a process eBPF reported and strace did not is strace's blindness."""
    run = traced_run()
    run.items.append((T0, "ebpf", WitnessStarted(witness="ebpf")))
    for pid in (10, 11):
        run.add(1150, "ebpf", ProcessExit(pid=pid, host_pid=9000 + pid, code=0))
    run.add(1200, "ebpf", ProcessFork(pid=12, host_pid=9012, ppid=10, flags=["CLONE_UNTRACED"]))
    run.tick(5, INIT, TRACER, AGENT, proc(12, 10, 1200, "cat"))
    found = list(unseen_process(run.records(), CONFIG))
    assert [(f.kind, "the strace witness" in f.message, "pid 12" in f.message) for f in found] == [
        ("unseen_process", True, True)]


@pytest.mark.parametrize("spoil", ["gap", "old_ledger", "no_procfs"])
def test_nothing_is_compared_without_both_witnesses_whole_or_on_an_old_ledger(spoil):
    run = traced_run()
    run.tick(5, INIT, TRACER, AGENT, proc(12, 10, 1200, "cat"))
    if spoil == "gap":
        run.add(1400, "strace", WitnessGap(witness="strace", reason="killed"))
    elif spoil == "old_ledger":  # schema < 14: no ppid, the tracer cannot be told apart
        run.items = [(t, s, ProcSample(pid=e.pid, host_pid=e.host_pid, start_time_ns=e.start_time_ns)
                      if isinstance(e, ProcSample) else e) for t, s, e in run.items]
    else:
        run.items = [item for item in run.items if item[2] != WitnessStarted(witness="procfs")]
    assert list(unseen_process(run.records(), CONFIG)) == []


def test_the_evasions_void_under_strace_and_show_under_ebpf():
    clone = ProcessFork(pid=12, ppid=10, syscall="clone", flags=["CLONE_UNTRACED"])
    listener = ProcessSyscall(pid=10, syscall="seccomp", args=[
        "SECCOMP_SET_MODE_FILTER", "SECCOMP_FILTER_FLAG_NEW_LISTENER", "{len=6, filter=0x55d0}"], result=3)
    refused = ProcessSyscall(pid=10, syscall="seccomp", args=[
        "SECCOMP_SET_MODE_FILTER", "SECCOMP_FILTER_FLAG_NEW_LISTENER", "0x7ffd"], result=-1, errno="EPERM",
        denied=True)
    plain = ProcessSyscall(pid=10, syscall="seccomp", args=["SECCOMP_SET_MODE_FILTER", "0", "{len=4}"], result=0)
    for witness, effect in (("strace", "void"), ("ebpf", "info")):
        run = Run(witness).add(1, witness, clone).add(2, witness, listener).add(3, witness, refused)
        run.add(4, witness, plain).add(5, witness, ProcessFork(pid=13, ppid=10, flags=["CLONE_VM"]))
        assert [(f.kind, f.effect, f.evidence) for f in evasion(run.records(), CONFIG)] == [
            ("untraced_clone", effect, [1]), ("seccomp_listener", effect, [2])]


def test_both_are_registered_and_quiet_on_a_clean_run():
    names = [name for name, _ in DEFAULT_DETECTORS]
    assert UNSEEN_PROCESS in names and EVASION in names
    found = run_detectors(traced_run().records(), CONFIG)
    assert [f for f in found if f.detector in (UNSEEN_PROCESS, EVASION)] == []


def test_the_tracers_own_startup_forks_are_caissons_and_its_other_children_are_not():
    """strace forks children of its own to probe ptrace and seccomp before it starts the
    command (seen in a selftest run: pid 9, "strace", sampled once); the command is its
    only other child, and is reported."""
    run = traced_run()
    run.tick(5, INIT, TRACER, AGENT, proc(9, 6, 205, "strace"))
    assert list(unseen_process(run.records(), CONFIG)) == []
    run.tick(6, INIT, TRACER, AGENT, proc(13, 6, 1500, "sh"))  # another child of the tracer, not its own
    assert [f.kind for f in unseen_process(run.records(), CONFIG)] == ["unseen_process"]
