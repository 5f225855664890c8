"""Tests for collectors/procfs.py: parsers on golden and hand-made text, the tree
sampler on a real process tree, and the trio task's grid, lateness and lifecycle."""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from ledger import CaissonError, Submission
from ledger.events import HostSample, ProcSample, WitnessGap, WitnessStarted, WitnessStopped
from collectors.procfs import (
    TcpSocket,
    CpuTimes,
    StallClock,
    HostPids,
    HostSampler,
    ProcfsParseError,
    parse_loadavg,
    parse_nspid,
    parse_pid_stat_starttime,
    parse_pressure,
    parse_proc_net_tcp,
    parse_proc_stat_cpu,
    parse_socket_link,
    run_procfs_witness,
    sample_tree,
    steal_ratio,
)

GOLDEN = Path(__file__).parent / "test_procfs"


def golden(name: str) -> str:
    return (GOLDEN / name).read_text()


# --- parsers on text captured from a real machine -------------------------------------------


def test_proc_stat_golden():
    first = parse_proc_stat_cpu(golden("proc_stat.txt"))
    later = parse_proc_stat_cpu(golden("proc_stat_later.txt"))
    # cpu  39314 0 9870 112928 1396 0 456 303 0 0 (guest fields excluded from the total)
    assert first == CpuTimes(total=39314 + 9870 + 112928 + 1396 + 456 + 303, steal=303)
    assert later.total > first.total
    assert steal_ratio(first, later) == 0.0  # steal did not move in that second


def test_pressure_golden():
    cpu = parse_pressure("cpu", golden("pressure_cpu.txt"))
    assert set(cpu) == {f"cpu.{k}.{f}" for k in ("some", "full")
                        for f in ("avg10", "avg60", "avg300", "total_us")}
    assert cpu["cpu.some.avg10"] == 0.34
    assert cpu["cpu.some.total_us"] == 30456910.0
    memory = parse_pressure("memory", golden("pressure_memory.txt"))
    assert memory["memory.full.total_us"] == 0.0
    io = parse_pressure("io", golden("pressure_io.txt"))
    assert (io["io.full.avg300"], io["io.some.total_us"]) == (0.98, 9873903.0)


def test_loadavg_golden():
    load = parse_loadavg(golden("loadavg.txt"))
    assert (load.load1, load.load5, load.load15, load.runnable, load.total) == (0.71, 0.70, 0.42, 2, 112)


def test_pid_files_golden():
    assert parse_pid_stat_starttime(golden("pid_stat.txt")) == 82436
    assert parse_nspid(golden("pid_status.txt")) == 17528


# --- parsers on hand-made edge cases ---------------------------------------------------------


def test_steal_ratio_cases():
    a = CpuTimes(total=1000, steal=10)
    assert steal_ratio(a, CpuTimes(total=1200, steal=60)) == 0.25
    assert steal_ratio(a, a) is None  # no time passed
    assert steal_ratio(a, CpuTimes(total=900, steal=0)) is None  # counters went back
    assert steal_ratio(CpuTimes(total=0, steal=0), CpuTimes(total=100, steal=0)) == 0.0


def test_proc_stat_old_kernel_and_errors():
    assert parse_proc_stat_cpu("cpu  1 2 3 4\ncpu0 1 2 3 4\n") == CpuTimes(total=10, steal=0)
    for bad in ("", "cpu0 1 2 3 4 5 6 7 8\n", "cpu  1 2 3\n", "cpu  1 x 3 4 5\n", "cpu  -1 2 3 4\n"):
        with pytest.raises(ProcfsParseError) as info:
            parse_proc_stat_cpu(bad)
        assert info.value.source == "/proc/stat"


def test_pressure_without_full_line_and_errors():
    # /proc/pressure/cpu before Linux 5.13 had only the "some" line.
    only_some = parse_pressure("cpu", "some avg10=1.50 avg60=0.00 avg300=0.00 total=42\n")
    assert only_some == {"cpu.some.avg10": 1.5, "cpu.some.avg60": 0.0,
                         "cpu.some.avg300": 0.0, "cpu.some.total_us": 42.0}
    assert parse_pressure("io", "") == {}
    for bad in ("half avg10=0.00\n", "some\n", "some avg10\n", "some avg10=zero\n", "some =1\n"):
        with pytest.raises(ProcfsParseError):
            parse_pressure("cpu", bad)


def test_loadavg_errors():
    for bad in ("", "0.1 0.2 0.3", "0.1 0.2 0.3 2-114 9", "a b c 1/2 3"):
        with pytest.raises(ProcfsParseError):
            parse_loadavg(bad)


def test_pid_stat_name_with_spaces_and_parens():
    rest = " ".join(["S"] + ["0"] * 18 + ["777"] + ["0"] * 30)
    assert parse_pid_stat_starttime(f"42 (a) b (c)) {rest}\n") == 777
    for bad in ("42 (x) S 1 2", "no paren at all " + rest, f"42 (x) {rest.replace('777', 'x')}"):
        with pytest.raises(ProcfsParseError):
            parse_pid_stat_starttime(bad)


def test_nspid_nested_missing_and_bad():
    assert parse_nspid("Name:\tsh\nNSpid:\t31337\t12\t1\n") == 1
    assert parse_nspid("Name:\tsh\nPid:\t5\n") is None  # Linux < 4.1
    with pytest.raises(ProcfsParseError):
        parse_nspid("NSpid:\t\n")


def test_parse_error_is_a_value_error_and_a_caisson_error():
    with pytest.raises(ProcfsParseError) as info:
        parse_loadavg("junk")
    assert isinstance(info.value, ValueError) and isinstance(info.value, CaissonError)
    assert info.value.line == "junk" and "/proc/loadavg" in str(info.value)


def test_net_tcp_golden_ipv4_listening_connected_and_time_wait():
    # /proc/net/tcp of an x86-64 host (6.18): two listeners, a connection, a time-wait socket
    assert parse_proc_net_tcp(golden("net_tcp.txt"), byteorder="little") == [
        TcpSocket(local=("0.0.0.0", 2024), remote=("0.0.0.0", 0), state=0x0A, uid=0, inode=1546),
        TcpSocket(local=("127.0.0.1", 54111), remote=("0.0.0.0", 0), state=0x0A, uid=0, inode=1366967),
        TcpSocket(local=("127.0.0.1", 43438), remote=("127.0.0.1", 35003), state=0x01, uid=0, inode=1366965),
        TcpSocket(local=("127.0.0.1", 40726), remote=("127.0.0.1", 54111), state=0x06, uid=0, inode=0),
    ]


def test_net_tcp6_golden_loopback_and_ipv4_mapped():
    # /proc/net/tcp6 of the same host: ::1 on both ends, and a dual-stack listener's accepted
    # IPv4 connection (::ffff:127.0.0.1), named by its IPv4 form
    sockets = parse_proc_net_tcp(golden("net_tcp6.txt"), byteorder="little")
    assert [(s.local, s.remote, s.state, s.inode) for s in sockets] == [
        (("::", 35003), ("::", 0), 0x0A, 1366964),
        (("::1", 35127), ("::", 0), 0x0A, 1366961),
        (("::1", 36226), ("::1", 35127), 0x01, 1366962),
        (("::1", 35127), ("::1", 36226), 0x01, 1366963),
        (("127.0.0.1", 35003), ("127.0.0.1", 43438), 0x01, 1366966),
    ]


def test_net_tcp_words_are_in_the_printing_kernels_byte_order():
    line = "   0: 7F000001:0050 0A000002:C350 01 00000000:00000000 00:00000000 00000000  1000        0 77 1\n"
    [big] = parse_proc_net_tcp(line, byteorder="big")  # a big-endian kernel prints 127.0.0.1 so
    assert big == TcpSocket(local=("127.0.0.1", 80), remote=("10.0.0.2", 50000), state=1, uid=1000, inode=77)
    [little] = parse_proc_net_tcp(line, byteorder="little")
    assert little.local == ("1.0.0.127", 80)


@pytest.mark.parametrize("line", [
    "   0: 0100007F:0050 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0",  # cut before inode
    "   0: 0100007F:50 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 7 1",  # short port
    "   0: 0100007:0050 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 7 1",  # 7 digits
    "   0: 0x00007F:0050 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 7 1",  # not hex
    "   0: 0100007F:0050 0100007F:C350 1 00000000:00000000 00:00000000 00000000     0        0 7 1",  # state
    "   x: 0100007F:0050 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 7 1",  # slot
    "   0: 0100007F:0050 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 ٧ 1",  # digit
    "   0: 0100007F:0050 0100007F:C350 01 00000000:00000000 00:00000000 00000000    -1        0 7 1",  # uid
])
def test_net_tcp_mangled_lines_raise(line):
    good = "   0: 0100007F:0050 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 7 1"
    assert parse_proc_net_tcp(good)[0].inode == 7
    with pytest.raises(ProcfsParseError):
        parse_proc_net_tcp(line)


def test_socket_link():
    assert parse_socket_link("socket:[1366965]") == 1366965
    for other in ("pipe:[5]", "anon_inode:[eventfd]", "/dev/null", "socket:[]", "socket:[12]x", "socket:[١]"):
        assert parse_socket_link(other) is None


@given(st.text(max_size=300))
def test_parsers_raise_only_their_own_error(text):
    for parse in (parse_proc_stat_cpu, parse_loadavg, parse_pid_stat_starttime, parse_nspid,
                  lambda t: parse_pressure("cpu", t), parse_proc_net_tcp, parse_socket_link):
        try:
            parse(text)
        except ProcfsParseError:
            pass


# --- HostSampler on a fake procfs ---------------------------------------------------------------


def test_host_sampler_fake_proc(tmp_path):
    (tmp_path / "loadavg").write_text("1.25 0.50 0.10 3/200 999\n")
    (tmp_path / "stat").write_text("cpu  100 0 100 800 0 0 0 0 0 0\n")
    sampler = HostSampler(tmp_path)
    first = sampler.sample()
    assert (first.load1, first.cpu_steal_ratio, first.psi) == (1.25, None, {})  # no PSI here
    (tmp_path / "stat").write_text("cpu  150 0 150 850 0 0 0 50 0 0\n")
    (tmp_path / "pressure").mkdir()
    (tmp_path / "pressure" / "cpu").write_text("some avg10=3.00 avg60=2.00 avg300=1.00 total=5\n")
    (tmp_path / "pressure" / "io").write_text("garbage\n")
    second = sampler.sample()
    assert second.cpu_steal_ratio == 0.25
    assert second.psi["cpu.some.avg10"] == 3.0 and not any(k.startswith("io.") for k in second.psi)
    assert sampler.parse_failures == 1
    assert sampler.bytes_read > 0


def test_host_sampler_real_proc():
    sampler = HostSampler()
    sampler.sample()
    time.sleep(0.05)
    reading = sampler.sample()
    assert reading.load1 >= 0.0
    assert reading.cpu_steal_ratio is None or 0.0 <= reading.cpu_steal_ratio <= 1.0
    if Path("/proc/pressure/cpu").exists():
        assert "cpu.some.avg10" in reading.psi
    assert sampler.parse_failures == 0


# --- sample_tree on a real process tree ----------------------------------------------------------

CHILD = """
import time
buf = bytearray(32 * 1024 * 1024)
for i in range(0, len(buf), 4096):
    buf[i] = 1
t = time.process_time()
while time.process_time() - t < 0.2:
    pass
print("ready", flush=True)
time.sleep(60)
"""

PARENT = f"""
import subprocess, sys, time
kids = [subprocess.Popen([sys.executable, "-c", {CHILD!r}], stdout=subprocess.PIPE, text=True)
        for _ in range(2)]
for kid in kids:
    kid.stdout.readline()
print(" ".join(str(kid.pid) for kid in kids), flush=True)
time.sleep(60)
"""


@pytest.fixture
def tree():
    """A python parent with two children that burned CPU and hold 32 MiB each: (root, kids)."""
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    kids = [int(pid) for pid in parent.stdout.readline().split()]
    try:
        yield parent.pid, kids
    finally:
        for pid in kids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        parent.kill()
        parent.wait()


def test_sample_tree_real_processes(tree):
    root, kids = tree
    samples = sample_tree(root)
    by_host_pid = {s.host_pid: s for s in samples}
    assert samples[0].host_pid == root
    assert set(by_host_pid) == {root, *kids}
    for pid in kids:
        s = by_host_pid[pid]
        assert s.name.startswith("python")
        assert s.cpu_ns >= 150_000_000  # burned 0.2 s of CPU
        assert s.rss_bytes >= 32 * 1024 * 1024
        assert s.pid == pid  # no pid namespace between the test and the tree
        assert s.ppid == root  # the parent, as the tree's namespace names it
        assert s.start_time_ns > 0
    assert by_host_pid[root].ppid is None  # its parent (pytest) is outside the tree
    again = {s.host_pid: s for s in sample_tree(root)}
    # (pid, start_time_ns) is the stable key; CPU time only grows.
    assert {(s.pid, s.start_time_ns) for s in samples} == {(s.pid, s.start_time_ns) for s in again.values()}
    assert all(again[p].cpu_ns >= by_host_pid[p].cpu_ns for p in by_host_pid)


def test_host_pids_on_a_real_tree(tree):
    root, kids = tree
    host_pids = HostPids(root)
    assert [host_pids(pid) for pid in (root, *kids)] == [root, *kids]  # no namespace here: NSpid == pid
    assert host_pids.scans == 1  # one listing of /proc found them all
    assert host_pids(2**22 + 1) is None  # beyond any pid_max: no such process


def _proc(proc: Path, host_pid: int, namespace: str, nspid: int) -> None:
    """A fake /proc/PID: its pid namespace link and NSpid line."""
    (proc / str(host_pid) / "ns").mkdir(parents=True, exist_ok=True)
    link = proc / str(host_pid) / "ns" / "pid"
    link.unlink(missing_ok=True)
    link.symlink_to(f"pid:[{namespace}]")
    (proc / str(host_pid) / "status").write_text(f"Name:\tx\nNSpid:\t{host_pid}\t{nspid}\n")


def _gone(proc: Path, host_pid: int) -> None:
    shutil.rmtree(proc / str(host_pid))


def test_host_pids_are_exact_in_the_chamber_namespace_and_never_stale(tmp_path):
    _proc(tmp_path, 100, "4026532001", 1)  # the chamber's init
    _proc(tmp_path, 300, "4026539999", 2)  # another container's pid 2
    _proc(tmp_path, 200, "4026532001", 2)  # the chamber's pid 2
    host_pids = HostPids(100, proc_root=tmp_path)
    assert host_pids(2) == 200 and host_pids(1) == 100
    _gone(tmp_path, 200)  # pid 2 exited; the chamber reuses 2 for a new process
    _proc(tmp_path, 201, "4026532001", 2)
    assert host_pids(2) == 201
    _gone(tmp_path, 201)
    assert host_pids(2) is None  # gone: never the old host pid, never the other container's
    _gone(tmp_path, 300)  # host pid 300 reused by a process of the chamber
    _proc(tmp_path, 300, "4026532001", 3)
    assert host_pids(3) == 300
    assert HostPids(999, proc_root=tmp_path)(1) is None  # no such init


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="unshare -p needs root")
def test_a_process_in_a_nested_pid_namespace_is_named_at_the_roots_depth(tmp_path):
    """bubblewrap and ``unshare -pf`` nest a pid namespace below the chamber's: the syscall
    witnesses name its processes as the chamber sees them (strace --pidns-translation), and
    procfs must name them alike, never by their innermost pid (1 in a new namespace)."""
    ready = tmp_path / "ready"
    root = subprocess.Popen(["unshare", "-pf", "sh", "-c", f"sleep 30 & touch {ready}; wait"])
    try:
        deadline = time.monotonic() + 10
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        samples = sample_tree(root.pid)
        inner = [s for s in samples if s.name == "sleep"]
        assert len(inner) == 1 and inner[0].pid == inner[0].host_pid  # the test's namespace: host pids
        shell = next(s for s in samples if s.name == "sh")
        assert shell.pid == shell.host_pid != 1 and inner[0].ppid == shell.pid
    finally:
        root.kill()
        root.wait()


def test_sample_tree_vanished_root_and_vanishing_child(tree):
    root, kids = tree
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert sample_tree(dead.pid) == []
    os.kill(kids[0], signal.SIGKILL)
    time.sleep(0.1)  # a zombie until the parent reaps it, which it does not: skipped or sampled
    samples = sample_tree(root)
    assert {root, kids[1]} <= {s.host_pid for s in samples}


# --- the trio task -------------------------------------------------------------------------


async def _run_witness(duration_s: float, consumer=None, **kwargs) -> list[Submission]:
    send, receive = trio.open_memory_channel[Submission](10_000)
    got: list[Submission] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(lambda task_status: run_procfs_witness(send, task_status=task_status, **kwargs))
        if consumer is None:
            await trio.sleep(duration_s)
        else:
            await consumer(receive, got)
        nursery.cancel_scope.cancel()
    async for item in receive:
        got.append(item)
    return got


def _hosts(got: list[Submission]) -> list[Submission]:
    return [s for s in got if isinstance(s.event, HostSample)]


def test_witness_one_second_on_a_real_tree(tree):
    root, kids = tree
    got = trio.run(functools.partial(_run_witness, 1.1, root_host_pid=lambda: root))
    assert all(s.source == "procfs" for s in got)
    assert isinstance(got[0].event, WitnessStarted) and got[0].event.detail == {"interval_ns": 250_000_000}
    stopped = got[-1].event
    assert isinstance(stopped, WitnessStopped)
    hosts = _hosts(got)
    assert 4 <= len(hosts) <= 6
    # Deadlines (wake - lateness) lie exactly on a 250 ms grid.
    deadlines = [s.mono_ns - s.event.timer_lateness_ns for s in hosts]
    assert all((d - deadlines[0]) % 250_000_000 == 0 for d in deadlines)
    assert all(0 <= s.event.timer_lateness_ns < 100_000_000 for s in hosts)
    assert all(s.event.interval_ns == 250_000_000 for s in hosts)
    procs = [s.event for s in got if isinstance(s.event, ProcSample)]
    assert len(procs) == 3 * len(hosts)
    assert {p.host_pid for p in procs} == {root, *kids}
    assert len({(p.pid, p.start_time_ns) for p in procs}) == 3
    assert (stopped.lines, stopped.events, stopped.parse_failures) == (len(hosts), len(got) - 2, 0)


def test_a_stop_while_a_tick_is_sampled_is_recorded_as_a_stall():
    """The whole process stopped (SIGSTOP, as a paused or starved host) after a tick woke and
    before its next deadline is chosen: that tick was on time and the next deadline is
    chosen after the stop, so no tick is late; the stall clock saw it (``stall_ns``)."""
    asked = 0

    def stopped_on_the_third_tick() -> None:
        nonlocal asked
        asked += 1
        if asked == 3:  # another process stops us and continues us 1 s later; we wait for it
            me = os.getpid()
            subprocess.run(["sh", "-c", f"kill -STOP {me}; sleep 1; kill -CONT {me}"], check=True)
        return None

    async def five_ticks(receive, got):
        async for item in receive:
            got.append(item)
            if len(_hosts(got)) == 5:
                return

    got = trio.run(functools.partial(_run_witness, 0, five_ticks, root_host_pid=stopped_on_the_third_tick))
    hosts = [s.event for s in _hosts(got)]
    assert hosts[2].stall_ns >= 800_000_000, hosts  # taken after the stop, in that tick: overdue if not yet woken
    assert sum(h.stall_ns >= 800_000_000 for h in hosts) == 1, hosts  # one stop, one sample
    assert all(h.timer_lateness_ns < 800_000_000 for h in hosts), hosts  # what host.stalled@1 read: nothing


def test_the_stall_clock_reports_the_worst_wake_since_it_was_last_asked():
    with StallClock(period_ns=10_000_000) as clock:
        time.sleep(0.1)
        assert clock.take_worst() < 300_000_000  # this thread sleeping does not hold the clock
        me = os.getpid()
        subprocess.run(["sh", "-c", f"kill -STOP {me}; sleep 0.5; kill -CONT {me}"], check=True)
        # asked at once: the clock's wake is overdue (its thread may not have run yet) or was late
        assert clock.take_worst() >= 400_000_000
        time.sleep(0.05)  # its thread wakes: that late wake was reported already, not again
        assert clock.take_worst() < 300_000_000
    with pytest.raises(ValueError, match="period_ns"):
        StallClock(period_ns=0)


def test_blocked_trio_thread_is_recorded_as_lateness():
    async def block_before_a_deadline(receive, got):
        seen = 0
        async for item in receive:
            got.append(item)
            if isinstance(item.event, HostSample):
                seen += 1
                if seen == 2:
                    next_deadline = item.mono_ns - item.event.timer_lateness_ns + 250_000_000
                    await trio.sleep((next_deadline - time.monotonic_ns()) / 1e9 - 0.04)
                    time.sleep(0.6)  # blocks the whole trio thread: a host stall
                elif seen == 4:
                    return

    got = trio.run(_run_witness, 0, block_before_a_deadline)
    lateness = [s.event.timer_lateness_ns for s in _hosts(got)]
    assert lateness[2] >= 500_000_000, lateness
    assert lateness[3] < 100_000_000, lateness  # one stall, one late tick: no burst after it
    assert isinstance(got[-1].event, WitnessStopped)


def test_sampling_failure_sends_a_gap_and_returns():
    def broken() -> int:
        raise RuntimeError("chamber lookup failed")

    async def main():
        send, receive = trio.open_memory_channel[Submission](100)
        before = time.time_ns()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: run_procfs_witness(send, root_host_pid=broken))
        return before, [item async for item in receive]  # the witness closed its channel

    before, got = trio.run(main)
    assert [type(s.event) for s in got] == [WitnessStarted, WitnessGap]
    gap = got[1].event
    assert "chamber lookup failed" in gap.reason and gap.since_ns >= before


def test_host_only_when_no_root_and_receiver_gone():
    async def main():
        send, receive = trio.open_memory_channel[Submission](100)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: run_procfs_witness(send, interval_s=0.05))
            first = [await receive.receive() for _ in range(3)]
            await receive.aclose()  # the writer went away: the witness ends quietly
        return first

    first = trio.run(main)
    assert [type(s.event) for s in first] == [WitnessStarted, HostSample, HostSample]


def test_interval_must_be_positive():
    send, _ = trio.open_memory_channel[Submission](1)
    with pytest.raises(ValueError):
        trio.run(lambda: run_procfs_witness(send, interval_s=0))
