"""The eBPF witness's quick qualification: its known answers checked (pure), and run for real."""

from __future__ import annotations

import pytest

from caisson.run import qualify as qualify_module
from tests.caisson.conftest import require
from caisson.run.qualify import _ARG, _LONG, check_qualification
from ledger import Record
from ledger.events import (FileChange, FileOpen, NetConnect, ProcessExec, ProcessExit, ProcessFork, ProcessSyscall,
                           RunEnded, WitnessGap, WitnessStarted, WitnessStopped)

HONEST = [
    WitnessStarted(witness="ebpf"),
    ProcessExec(pid=2, host_pid=902, path="/usr/bin/cat", argv=["cat", "/etc/hostname"]),
    FileOpen(pid=2, host_pid=902, path="/etc/hostname", result=3),
    FileOpen(pid=3, host_pid=903, path="/caisson-qualify/absent", result=None, errno="ENOENT"),
    FileOpen(pid=4, host_pid=904, path=_LONG, result=None, errno="ENOENT"),
    FileChange(pid=5, host_pid=905, syscall="mkdir", path="/tmp/caisson-qualify"),
    ProcessExec(pid=6, host_pid=906, path="/usr/bin/sh", argv=["sh", "-c", "exit 3", _ARG]),
    FileChange(pid=7, host_pid=907, syscall="mkdir", path="/tmp/caisson-qualify-link"),
    ProcessFork(pid=6, host_pid=906, ppid=1, syscall="clone"),
    ProcessExit(pid=6, host_pid=906, code=3),
    ProcessSyscall(pid=7, host_pid=907, syscall="io_uring_setup", result=-1, errno="EPERM", denied=True),
    NetConnect(pid=7, host_pid=907, family="AF_INET", address="127.0.0.1", port=9, result=-1, errno="ECONNREFUSED"),
    FileOpen(pid=7, host_pid=907, path="/etc/passwd", result=5),
    WitnessStopped(witness="ebpf"),
]


def _records(events, ended=RunEnded(exit_code=0, status="completed")) -> list[Record]:
    out = [Record(seq=i, wall_ns=i, mono_ns=i, source="ebpf", event=e) for i, e in enumerate(events)]
    return out + [Record(seq=len(out), wall_ns=len(out), mono_ns=len(out), source="recorder", event=ended)]


def test_a_witness_that_recorded_what_the_probe_did_qualifies():
    assert check_qualification(_records(HONEST)) == []


@pytest.mark.parametrize("drop", range(1, len(HONEST)))
def test_each_missing_fact_is_named(drop):
    failures = check_qualification(_records(HONEST[:drop] + HONEST[drop + 1:]))
    assert failures and failures[0].startswith("ebpf did not record"), failures  # (a detector may void it too)


@pytest.mark.parametrize("wrong, says", [
    (FileOpen(pid=4, path=_LONG[:199] + "...", result=None, errno="ENOENT"), "-byte path whole"),  # a cut path
    (FileOpen(pid=7, path="/tmp/passwd", result=5), "moved by dup2"),  # the fd's old directory
    (ProcessSyscall(pid=7, syscall="io_uring_setup", result=3), "io_uring_setup refused"),  # it ran
    (FileChange(pid=7, syscall="mkdir", path="/proc/self/fd/4/caisson-qualify-link", unresolved=True),
     "through /proc/self/fd/N/"),  # the link not followed
    (ProcessExec(pid=6, path="/usr/bin/sh", argv=["sh", "-c", "exit 3", _ARG[:199] + "..."], argv_cut=True),
     "-byte argv string whole"),  # a cut argv
])
def test_a_fact_recorded_wrong_is_a_failure(wrong, says):
    events = [wrong if type(e) is type(wrong) and getattr(e, "pid", None) == wrong.pid
              and getattr(e, "syscall", "openat") == getattr(wrong, "syscall", "openat") else e for e in HONEST]
    failures = check_qualification(_records(events))
    assert any(says in f for f in failures), failures


def test_a_gap_a_failed_run_and_a_voiding_detector_each_fail_it():
    assert any("gap: lost 3" in f for f in check_qualification(_records(
        HONEST + [WitnessGap(witness="ebpf", reason="lost 3")])))
    assert any("did not complete" in f for f in check_qualification(_records(HONEST, RunEnded(exit_code=1))))
    leak = FileOpen(pid=7, path="/work/sandbox/../../etc/x", flags="O_WRONLY|O_CREAT", access="w", result=6)
    assert any("voided the honest probe" in f for f in check_qualification(_records(HONEST + [leak])))


@pytest.mark.docker
def test_the_qualification_runs_in_seconds_on_this_host(chamber_image):
    from caisson.run.ebpf import ebpf_problem

    require(ebpf_problem())
    failures, seconds = qualify_module.qualify_ebpf()
    assert failures == [] and seconds < 30
