"""The eBPF witness's parser, on real output of both backends and on each line form.

probe.out is collectors/ebpf.bt's output for test_ebpf/probe.sh in the chamber image,
recorded from the host with ``bpftrace -B line collectors/ebpf.bt INUM 1 INIT_PID`` (the
command's first line waits for a go FIFO written once bpftrace had attached).
probe.events.jsonl is what the parser made of it, reviewed by hand: the exact expectation.
probe.libbpf.out is the libbpf loader's output for the same probe, recorded the same way
(``collectors/bpf/build/caisson-ebpf INUM 1 INIT_PID``, container user ``agent``, network
none, ``API_TOKEN``, ``PATH=/usr/bin:/bin`` and ``HOME`` set); probe.libbpf.events.jsonl
is the parser's reading of it, which a test pins equal to probe.events.jsonl but for pids,
times, the container's hostname and what only the loader gives (the kernel's paths, whole
names of 200 bytes and more).
Re-recording changes pids and times: regenerate the events and review them again.
"""

from __future__ import annotations

import posixpath
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.ebpf import (
    NEED_DATA,
    EbpfParser,
    ParserClosedError,
    bpftrace_command,
    ebpf_program,
    loader_command,
    open_flags,
)
from collectors.strace import UNFINISHED
from ledger import fingerprint_secret
from ledger.events import (Event, FileChange, FileOpen, NetConnect, NetSend, ProcessExec, ProcessExit, ProcessFork,
                           ProcessSyscall, WitnessGap, WitnessRaw)

GOLDEN = Path(__file__).with_suffix("")
PROBE = (GOLDEN / "probe.out").read_bytes()
OFFSET = 10**18  # wall - monotonic, ns, as the task would pass it
INIT = 6657  # host pid of the chamber's init in probe.out


class _Stamped(msgspec.Struct):
    wall_ns: int | None
    event: Event


EXPECTED = [(s.wall_ns, s.event) for s in
            (msgspec.json.decode(line, type=_Stamped) for line in (GOLDEN / "probe.events.jsonl").read_bytes().splitlines())]


def parse(chunks, **kw) -> list[tuple[int | None, object]]:
    parser = EbpfParser(clock_offset_ns=kw.pop("clock_offset_ns", OFFSET), root_cwd=kw.pop("root_cwd", "/work/sandbox"),
                        root_host_pid=kw.pop("root_host_pid", INIT), **kw)
    out = []
    for chunk in chunks:
        parser.feed(chunk)
        while (item := parser.next_event()) is not NEED_DATA:
            out.append(tuple(item))
    parser.close()
    while (item := parser.next_event()) is not NEED_DATA:
        out.append(tuple(item))
    return out


def events(text: str, **kw) -> list:
    return [e for _, e in parse([text.encode()], **kw)]


def test_golden_whole():
    assert parse([PROBE]) == EXPECTED


def test_golden_byte_at_a_time():
    assert parse([PROBE[i:i + 1] for i in range(len(PROBE))]) == EXPECTED


@settings(max_examples=25, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=len(PROBE)), max_size=20))
def test_golden_at_any_split(cuts):
    points = [0, *sorted(cuts), len(PROBE)]
    assert parse([PROBE[a:b] for a, b in zip(points, points[1:])]) == EXPECTED


def test_golden_with_trailing_junk_keeps_every_event_and_the_junk():
    got = parse([PROBE + b"R garbage\n\x00\xffnot a record"])
    # the last expected event is the unpaired return, kept raw at close: after the junk
    assert got[:len(EXPECTED) - 1] == EXPECTED[:-1] and got[-1] == EXPECTED[-1]
    assert [e for _, e in got[len(EXPECTED) - 1:-1]] == [
        WitnessRaw(witness="ebpf", line="R garbage"), WitnessRaw(witness="ebpf", line="\x00\\xffnot a record")]


LIBBPF = (GOLDEN / "probe.libbpf.out").read_bytes()
LIBBPF_INIT = 5376  # host pid of the chamber's init in probe.libbpf.out
LIBBPF_EXPECTED = [(s.wall_ns, s.event) for s in (msgspec.json.decode(line, type=_Stamped) for line in
                                                   (GOLDEN / "probe.libbpf.events.jsonl").read_bytes().splitlines())]


@settings(max_examples=10, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=len(LIBBPF)), max_size=20))
def test_libbpf_golden_whole_byte_at_a_time_and_at_any_split(cuts):
    assert parse([LIBBPF], root_host_pid=LIBBPF_INIT) == LIBBPF_EXPECTED
    points = [0, *sorted(cuts), len(LIBBPF)]
    assert parse([LIBBPF[a:b] for a, b in zip(points, points[1:])], root_host_pid=LIBBPF_INIT) == LIBBPF_EXPECTED


def test_libbpf_golden_byte_at_a_time():
    assert parse([LIBBPF[i:i + 1] for i in range(len(LIBBPF))], root_host_pid=LIBBPF_INIT) == LIBBPF_EXPECTED


def _same_facts(event) -> dict:
    """An event without what differs between two recordings (pids, the container's hostname,
    the stamps of a raw line) nor what only the loader's kernel side gives: the path of each
    file opened (``real_path``), which is all it keeps of a name through a magic link (kept as
    given, ``unresolved``: bpftrace's parser followed that fd itself). The loader also keeps
    the audited calls' first two arguments as 32-bit numbers: io_uring_setup's pointer differs."""
    d = msgspec.to_builtins(event)
    for k in ("host_pid", "pid", "ppid"):
        d.pop(k, None)
    d.get("env", {}).pop("HOSTNAME", None)
    if "line" in d:
        d["line"] = " ".join(d["line"].split()[4:])
    real = d.pop("real_path", None)
    if d.pop("unresolved", False) and real:
        d["path"] = real
    if d.get("syscall") == "io_uring_setup":
        d["args"][1] = "params"
    return d


def test_the_libbpf_loader_and_bpftrace_print_the_same_facts_of_the_probe():
    # the libbpf recording predates the loader's fork lines' flags and child pid: births apart
    libbpf, bpftrace = ([_same_facts(e) for _, e in run if not isinstance(e, ProcessFork)]
                        for run in (LIBBPF_EXPECTED, EXPECTED))
    # a path of 365 bytes: whole from the loader (it reads 4096), cut at 199 by bpftrace
    [cut] = [i for i, e in enumerate(bpftrace) if e.get("path_cut")]
    assert (bpftrace.pop(cut)["path"], libbpf.pop(cut)) == ("/etc/...", {
        "kind": "file.open", "syscall": "openat", "path": "/etc/hostname", "flags": "O_RDONLY|O_CLOEXEC", "result": 5})
    assert libbpf == bpftrace
    assert LIBBPF_EXPECTED[-1][1] == WitnessRaw(witness="ebpf", line="R 7382690104750 5376 5376 ? openat 3")
    assert len(LIBBPF_EXPECTED) == 361
    # the kernel's path of the files opened: a symlink's target, a magic link's directory, a library's file
    reals = {(e.path, e.real_path, e.unresolved) for _, e in LIBBPF_EXPECTED if isinstance(e, FileOpen) and e.real_path}
    assert {("/tmp/h", "/etc/hostname", False), ("/proc/self/fd/4/share", "/usr/share", True),
            ("/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6", False)} <= reals
    assert not [e for _, e in EXPECTED if isinstance(e, FileOpen) and e.real_path]


def test_golden_facts():
    evs = [e for _, e in EXPECTED]
    execs = [e for e in evs if isinstance(e, ProcessExec)]
    # A multi-line argument is joined back; a cut one keeps a "..." suffix; a long argv ends with "...".
    sh = next(e for e in execs if e.argv[:2] == ["sh", "-c"])
    assert sh.argv[2] == "cat /etc/hostname\necho two lines" and sh.cwd == "/tmp" and sh.ppid == 1
    py = next(e for e in execs if e.argv[0] == "python3")
    assert py.argv[3].endswith("...") and len(py.argv[3].encode()) == 199 + 3 and py.cwd == "/tmp"
    echo = next(e for e in execs if e.path == "/bin/echo")
    assert echo.argv[-1] == "..." and len(echo.argv) == 65
    assert py.env["API_TOKEN"] == "sk-ant-secret0123456789"  # no fingerprint key given: verbatim
    opens = [e for e in evs if isinstance(e, FileOpen)]
    assert FileOpen(pid=13, host_pid=7690, syscall="io_uring_openat", path="/etc/hostname",
                    flags="O_RDONLY|O_LARGEFILE", access="r", result=4) in opens
    # fchdir to an fd of /etc, then a relative open; chdir("/usr") then openat("lib")
    mine = [e.path for e in opens if e.pid == py.pid and e.path in ("/etc/hostname", "/usr/lib")]
    assert mine == ["/etc/hostname", "/etc/hostname", "/usr/lib"]
    assert [e for e in evs if isinstance(e, NetConnect)] == [
        NetConnect(pid=py.pid, host_pid=py.host_pid, family="AF_INET", address="10.1.2.3", port=80, result=-1,
                   errno="ENETUNREACH"),
        NetConnect(pid=py.pid, host_pid=py.host_pid, family="AF_UNIX", address="/tmp/nope.sock", result=-1,
                   errno="ENOENT")]
    changes = [(e.syscall, e.path, e.target) for e in evs if isinstance(e, FileChange)]
    assert changes == [("renameat2", "/tmp/a.txt", "/tmp/b.txt"), ("unlinkat", "/tmp/b.txt", None),
                       ("mkdir", "/tmp/d", None), ("rmdir", "/tmp/d", None),
                       ("symlink", "/tmp/h", "/etc/hostname"), ("unlink", "/tmp/h", None)]
    exits = [e for e in evs if isinstance(e, ProcessExit)]
    assert exits[-1] == ProcessExit(pid=1, host_pid=INIT, code=3)
    assert any(e.signal == "SIGKILL" and e.code is None for e in exits)
    # The go FIFO's open returned after bpftrace attached; its entry was before: kept raw, last.
    assert [e.line for e in evs if isinstance(e, WitnessRaw)] == [
        "R 3361460233588 6657 6657 ? openat 3"]
    # Directory fds followed through close and dup2 (X lines); a path of 365 bytes cut at 199 and
    # marked; a magic link to a followed fd placed at that fd's path
    py2 = next(e for e in execs if e.argv[0] == "python3" and "dup2" in e.argv[3])
    assert [(e.path, e.path_cut, e.unresolved) for e in opens if e.pid == py2.pid and e.result == 5] == [
        ("/usr/share", False, False), ("/etc/...", True, False), ("/tmp/h", False, False), ("/usr/share", False, False)]


def test_the_parser_redacts_exec_environments_with_the_run_key_and_leaves_out_the_tracer():
    key = b"k" * 32
    got = [e for _, e in parse([PROBE], fingerprint_key=key, credential_patterns=("MY_*",))]
    py = next(e for e in got if isinstance(e, ProcessExec) and e.argv[0] == "python3")
    assert py.env["API_TOKEN"] == fingerprint_secret("sk-ant-secret0123456789", key)
    assert "sk-ant-secret0123456789" not in msgspec.json.encode(got).decode()
    skipped = [e for _, e in parse([PROBE], fingerprint_key=key, credential_patterns=("MY_*",),
                                   skip_tracer=posixpath.basename(py.path))]  # as if python were the tracer
    assert [e for e in got if getattr(e, "host_pid", None) != py.host_pid] == skipped and len(skipped) < len(got)


def test_the_parser_redacts_exec_command_lines_keeping_their_shape():
    """Secrets in argv are fingerprinted in place, as the strace witness does (ledger.redact_exec)."""
    key = b"k" * 32
    text = ("B 5 4026532181 1 7\nE 100 8 8 14 tracepoint:syscalls:sys_enter_execve 1 7\nS 8 /bin/echo\n"
            "A 8 echo\nA 8 --api-key=k3y-not-real\nA 8 --password\nA 8 hunter2\nV 8 X=1\n"
            "R 200 8 8 14 tracepoint:syscalls:sys_exit_execve 0\n")
    (plain,) = [e for e in events(text) if isinstance(e, ProcessExec)]
    assert plain.argv == ["echo", "--api-key=k3y-not-real", "--password", "hunter2"]
    (redacted,) = [e for e in events(text, fingerprint_key=key) if isinstance(e, ProcessExec)]
    assert redacted.argv == ["echo", f"--api-key={fingerprint_secret('k3y-not-real', key)}", "--password",
                             fingerprint_secret("hunter2", key)]
    assert redacted.env == {"X": "1"}


def test_attached_and_root_exit_are_reported():
    parser = EbpfParser(root_host_pid=7)
    parser.feed(b"Attaching 40 probes...\n")
    assert not parser.attached
    parser.feed(b"B 5 4026532181 1 7\n")
    assert parser.attached and parser.pidns_inum == 4026532181
    parser.feed(b"Q 9 8 8 2 0\n")
    assert not parser.root_exited
    parser.feed(b"Q 10 7 7 1 256\n")
    assert parser.root_exited


def test_lost_events_are_a_gap_with_the_count():
    got = events("B 5 1 1 7\nQ 1000 8 8 2 0\nLost 12 events\nLost 3 events\n", clock_offset_ns=100)
    assert got[1:] == [
        WitnessGap(witness="ebpf", reason="the kernel dropped 12 events: the witness's buffer was full",
                   missing="syscalls of the chamber", since_ns=1100, dropped=12),
        WitnessGap(witness="ebpf", reason="the kernel dropped 3 events: the witness's buffer was full",
                   missing="syscalls of the chamber", since_ns=1100, dropped=3)]


def test_a_lost_line_right_after_a_path_is_a_gap_not_part_of_the_path():
    got = events("O 7 5 5 2 tracepoint:syscalls:sys_exit_openat -100 0 3 /a\nLost 4 events\n")
    assert got == [FileOpen(pid=2, host_pid=5, syscall="openat", path="/a", flags="O_RDONLY", result=3),
                   WitnessGap(witness="ebpf", reason="the kernel dropped 4 events: the witness's buffer was full",
                              missing="syscalls of the chamber", since_ns=OFFSET + 7, dropped=4)]


def test_a_call_that_never_returned_is_unfinished_and_an_exec_from_a_thread_returns_on_the_leader():
    text = ("E 1 50 50 3 tracepoint:syscalls:sys_enter_connect 2 80\nS 50 10.0.0.1\nZ 50\n"
            "E 2 60 61 4 tracepoint:syscalls:sys_enter_execve 1 0\nS 61 /bin/true\nA 61 true\nV 61 A=1\nZ 61\n"
            "R 3 60 60 4 tracepoint:syscalls:sys_exit_execve 0\n")
    got = events(text)
    assert got == [
        ProcessExec(pid=4, host_pid=60, ppid=1, path="/bin/true", argv=["true"], cwd="/work/sandbox", env={"A": "1"}),
        NetConnect(pid=3, host_pid=50, family="AF_INET", address="10.0.0.1", port=80, result=-1, errno=UNFINISHED)]


def test_an_exec_that_returned_on_another_cpu_is_paired_in_either_order():
    entry = "E 5 70 70 2 tracepoint:syscalls:sys_enter_execve 1 9\nS 70 /usr/bin/sleep\nA 70 sleep\nZ 70\n"
    ret = "R 9 70 70 2 tracepoint:syscalls:sys_exit_execve -514\n"
    want = [ProcessExec(pid=2, host_pid=70, ppid=1, path="/usr/bin/sleep", argv=["sleep"], cwd="/work/sandbox",
                        env={}, result=-1, errno="ERESTARTNOHAND")]  # killed inside execve: the restart code
    assert events(entry + ret) == want
    assert events(ret + "Q 8 9 9 1 0\n" + entry)[1:] == want


def test_relative_paths_follow_chdir_and_are_inherited_whichever_line_comes_first():
    text = ("O 1 10 10 1 tracepoint:syscalls:sys_exit_chdir -100 0 0 sub\n"
            # the child's exec is printed before its parent's fork line (another CPU)
            "E 3 11 11 2 tracepoint:syscalls:sys_enter_execve 1 10\nS 11 ./tool\nA 11 tool\nZ 11\n"
            "R 4 11 11 2 tracepoint:syscalls:sys_exit_execve 0\n"
            "F 2 10 10 1 11\n"
            "O 5 11 11 2 tracepoint:syscalls:sys_exit_openat -100 65 3 ../out\n")
    got = events(text)
    assert got == [
        ProcessExec(pid=2, host_pid=11, ppid=1, path="./tool", argv=["tool"], cwd="/work/sandbox/sub", env={}),
        FileOpen(pid=2, host_pid=11, syscall="openat", path="/work/sandbox/sub/../out", flags="O_WRONLY|O_CREAT",
                 access="w", result=3)]


def test_an_open_whose_path_holds_a_newline_is_joined_before_its_event_comes_out():
    parser = EbpfParser(root_cwd="/w")
    parser.feed(b"O 7 5 5 2 tracepoint:syscalls:sys_exit_openat -100 0 3 a\n")
    assert parser.next_event() is NEED_DATA  # the next line may continue the path
    parser.feed(b"b\nQ 8 5 5 2 0\n")
    assert [parser.next_event().event for _ in range(2)] == [
        FileOpen(pid=2, host_pid=5, syscall="openat", path="/w/a\nb", flags="O_RDONLY", result=3),
        ProcessExit(pid=2, host_pid=5, code=0)]


def test_a_rename_takes_its_old_name_from_the_line_before():
    got = events("S 5 a\nb\nO 7 5 5 2 tracepoint:syscalls:sys_exit_renameat2 -100 -100 0 c\n"
                 "U 8 5 5 2 18 99 -100 32768 key\nK 9 5 6 99 4\n")
    assert got == [FileChange(pid=2, host_pid=5, syscall="renameat2", path="/work/sandbox/a\nb",
                              target="/work/sandbox/c"),
                   FileOpen(pid=2, host_pid=5, syscall="io_uring_openat", path="/work/sandbox/key",
                            flags="O_RDONLY|O_LARGEFILE", result=4)]


def test_links_and_symlinks_read_like_strace():
    got = events("S 5 ../f\nO 1 5 5 2 tracepoint:syscalls:sys_exit_symlinkat -100 -100 0 s\n"
                 "S 5 f\nO 2 5 5 2 tracepoint:syscalls:sys_exit_linkat -100 -100 0 h\n"
                 "O 3 5 5 2 tracepoint:syscalls:sys_exit_fchmodat -100 0 -1 f\n", root_cwd="/w")
    assert got == [FileChange(pid=2, host_pid=5, syscall="symlinkat", path="/w/s", target="../f"),
                   FileChange(pid=2, host_pid=5, syscall="linkat", path="/w/h", target="/w/f"),
                   FileChange(pid=2, host_pid=5, syscall="fchmodat", path="/w/f", result=-1, errno="EPERM")]


def test_an_unknown_io_uring_op_and_an_unknown_family_are_raw_not_dropped():
    got = events("U 1 5 5 2 16 123 0 0\nE 2 5 5 2 tracepoint:syscalls:sys_enter_connect 16 0\nZ 5\n"
                 "R 3 5 5 2 tracepoint:syscalls:sys_exit_connect 0\n")
    assert got == [WitnessRaw(witness="ebpf", line="U 1 5 5 2 16 123 0 0"),
                   WitnessRaw(witness="ebpf", line="connect family=16 pid=2 ret=0")]


# Lines of issue 15's calls as the libbpf loader printed them for a chamber with the run's
# seccomp profile (action errno): a refused io_uring_setup (an exit with no entry), UDP sends
# naming their destination, memfd_create, mknodat. bpftrace prints its probe's name in the
# P line's syscall field; both are read.
AUDIT_LINES = (
    b"P 38427957475749 7999 7999 13 io_uring_setup 0 -1 0 0 0 0 \n"
    b"E 38428149517689 8017 8017 14 tracepoint:syscalls:sys_enter_sendto 0 0\n"
    b"N 8017 2 5353 203.0.113.9\nZ 8017\n"
    b"R 38428149673340 8017 8017 14 tracepoint:syscalls:sys_exit_sendto 1\n"
    b"E 38428149690175 8017 8017 14 tracepoint:syscalls:sys_enter_sendmsg 536887296 0\n"
    b"N 8017 10 53 2001:db8::1\nZ 8017\n"
    b"R 38428149831105 8017 8017 14 tracepoint:syscalls:sys_exit_sendmsg -101\n"
    b"E 38428149849562 8017 8018 14 tracepoint:syscalls:sys_enter_sendmmsg 0 0\n"
    b"N 8018 2 53 203.0.113.10\nN 8018 1 0 @sock\nN 8018 2 53 203.0.113.10\nT 8018 dests\nZ 8018\n"
    b"R 38428149861099 8017 8018 14 tracepoint:syscalls:sys_exit_sendmmsg 3\n"
    b"P 38428149988118 8017 8017 14 tracepoint:syscalls:sys_exit_memfd_create 1 5 1 0 0 0 secret\nname\n"
    b"P 38428149988200 8017 8017 14 process_vm_readv 1 -1 9 2 1 0 \n"
    b"P 38428149988300 8017 8017 14 tracepoint:syscalls:sys_exit_umount 1 -22 0 0 0 0 \n"
    b"P 38428149988400 8017 8017 14 ptrace 0 -1 0 0 0 0 \n"
    b"O 38428150015689 8017 8017 14 tracepoint:syscalls:sys_exit_mknodat -100 0 0 nod\n"
)
AUDIT_EVENTS = [
    ProcessSyscall(pid=13, host_pid=7999, syscall="io_uring_setup", args=[], result=-1, errno="EPERM", denied=True),
    NetSend(pid=14, host_pid=8017, syscall="sendto", family="AF_INET", address="203.0.113.9", port=5353, flags="0",
            result=1),
    NetSend(pid=14, host_pid=8017, syscall="sendmsg", family="AF_INET6", address="2001:db8::1", port=53,
            flags="MSG_NOSIGNAL|MSG_FASTOPEN", result=-1, errno="ENETUNREACH"),
    NetSend(pid=14, host_pid=8017, syscall="sendmmsg", family="AF_INET", address="203.0.113.10", port=53, flags="0",
            result=3),
    NetSend(pid=14, host_pid=8017, syscall="sendmmsg", family="AF_UNIX", address="@sock", port=None, flags="0",
            result=3),
    WitnessGap(witness="ebpf", reason="sendmmsg of pid 14 sent more messages than the witness reads the"
               " destination of", missing="destinations of the messages past the last read",
               since_ns=38428149849562 + OFFSET),
    ProcessSyscall(pid=14, host_pid=8017, syscall="memfd_create", args=["secret\nname", "1"], result=5),
    ProcessSyscall(pid=14, host_pid=8017, syscall="process_vm_readv", args=["9", "2", "1", "0"], result=-1,
                   errno="EPERM"),
    ProcessSyscall(pid=14, host_pid=8017, syscall="umount2", args=["0", "0", "0", "0"], result=-1, errno="EINVAL"),
    # no entry and EPERM, but not a call the profile denies (entered before attach): not "denied"
    ProcessSyscall(pid=14, host_pid=8017, syscall="ptrace", args=[], result=-1, errno="EPERM"),
    FileChange(pid=14, host_pid=8017, syscall="mknodat", path="/w/nod"),
]


@settings(max_examples=50, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=len(AUDIT_LINES)), max_size=20))
def test_audited_calls_sends_and_mknod_read_like_strace_whole_and_at_any_split(cuts):
    assert [e for _, e in parse([AUDIT_LINES], root_cwd="/w")] == AUDIT_EVENTS
    points = [0, *sorted(cuts), len(AUDIT_LINES)]
    assert [e for _, e in parse([AUDIT_LINES[a:b] for a, b in zip(points, points[1:])], root_cwd="/w")] \
        == AUDIT_EVENTS


def test_audited_calls_byte_at_a_time_and_with_trailing_junk():
    assert [e for _, e in parse([AUDIT_LINES[i:i + 1] for i in range(len(AUDIT_LINES))], root_cwd="/w")] \
        == AUDIT_EVENTS
    got = [e for _, e in parse([AUDIT_LINES + b"P 1 2 3 4 not_audited 0 -1 0 0 0 0 \nP 1 2"], root_cwd="/w")]
    assert got == [*AUDIT_EVENTS, WitnessRaw(witness="ebpf", line="P 1 2 3 4 not_audited 0 -1 0 0 0 0 "),
                   WitnessRaw(witness="ebpf", line="P 1 2")]


def test_a_refused_call_is_denied_only_when_the_run_denies_it():
    line = "P 5 7 7 2 io_uring_setup 0 -1 0 0 0 0 \n"
    assert events(line, denied_syscalls=())[0].denied is False
    assert events(line)[0].denied is True
    assert events("P 5 7 7 2 io_uring_setup 0 -38 0 0 0 0 \n")[0].denied is False  # ENOSYS: not seccomp's EPERM
    assert events("P 5 7 7 2 io_uring_setup 1 -1 2 0 0 0 \n")[0].denied is False  # it entered: the kernel said no


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2000))
def test_any_bytes_give_events_never_an_exception(data):
    parse([data])


def test_feed_after_close_is_our_misuse():
    parser = EbpfParser()
    parser.close()
    with pytest.raises(ParserClosedError):
        parser.feed(b"x")


def test_open_flags_spell_like_strace():
    assert open_flags(0o2000000) == "O_RDONLY|O_CLOEXEC"
    assert open_flags(0o1101) == "O_WRONLY|O_CREAT|O_TRUNC"
    assert open_flags(2 | 0x80000000) == "O_RDWR|0x80000000"


def test_bpftrace_command():
    argv, env = bpftrace_command(4026532181, 1, 4242, perf_rb_pages=8)
    assert argv[0] == "bpftrace" and argv[-3:] == ["4026532181", "1", "4242"]
    assert env["BPFTRACE_PERF_RB_PAGES"] == "8" and env["BPFTRACE_STRLEN"] == "200"
    with pytest.raises(ValueError):
        bpftrace_command(4026532181, 1, 4242, perf_rb_pages=3)
    with pytest.raises(ValueError):
        bpftrace_command(0, 1, 4242)


def test_loader_command():
    argv = loader_command(4026532181, 2, 4242, loader=Path("/x/caisson-ebpf"), ring_bytes=4096)
    assert argv == ["/x/caisson-ebpf", "--ring-bytes", "4096", "--wake-bytes", str(1 << 20), "--poll-ms", "50",
                    "4026532181", "2", "4242"]
    for bad in ({"ring_bytes": 6144}, {"ring_bytes": 2048}, {"poll_ms": 0}):
        with pytest.raises(ValueError):
            loader_command(4026532181, 1, 4242, **bad)
    for ns in ((0, 1, 4242), (4026532181, 32, 4242), (4026532181, 1, 0)):
        with pytest.raises(ValueError):
            loader_command(*ns)


def test_the_backend_is_libbpf_when_its_loader_is_built_else_bpftrace(tmp_path):
    import hashlib

    missing = tmp_path / "caisson-ebpf"
    program = ebpf_program(loader=missing)  # not built: bpftrace, and why
    assert program.backend == "bpftrace" and "not built" in program.why
    assert program.sha256 == hashlib.sha256(program.path.read_bytes()).hexdigest()
    with pytest.raises(ValueError):
        ebpf_program("libbpf", loader=missing)
    with pytest.raises(ValueError):
        ebpf_program("ptrace", loader=missing)
    # A "loader" that writes its embedded object: the digest is of that object, not of the loader.
    missing.write_text("#!/bin/sh\n[ \"$1\" = --object ] && printf '\\177ELF object'\n")
    missing.chmod(0o755)
    built = ebpf_program(loader=missing)
    assert (built.backend, built.path) == ("libbpf", missing)
    assert built.sha256 == hashlib.sha256(b"\x7fELF object").hexdigest()
    assert ebpf_program("bpftrace", loader=missing).backend == "bpftrace"
    broken = tmp_path / "broken"  # built, but it does not run: bpftrace, and why; never a crash
    broken.write_text("#!/bin/sh\nexit 1\n")
    broken.chmod(0o755)
    fallback = ebpf_program(loader=broken)
    assert fallback.backend == "bpftrace" and "does not run" in fallback.why
    with pytest.raises(OSError):
        ebpf_program("libbpf", loader=broken)


def test_the_tracer_and_its_child_before_exec_are_left_out_and_only_the_first_tracer():
    lines = b"""B 1 4026532181 1 7
E 10 20 20 5 sys_enter_execve 1 7
S 20 /usr/bin/strace
A 20 strace
Z 20
R 11 20 20 5 sys_exit_execve 0
O 12 20 20 5 sys_exit_openat -100 0 3 /etc/localtime
F 13 20 20 5 21
O 14 21 21 6 sys_exit_openat -100 0 3 /etc/group
E 15 21 21 6 sys_enter_execve 5 20
S 21 /usr/bin/strace
A 21 strace
Z 21
R 16 21 21 6 sys_exit_execve 0
O 17 21 21 6 sys_exit_openat -100 0 3 /etc/group
"""
    got = [e for _, e in parse([lines], clock_offset_ns=0, root_cwd="/w", root_host_pid=7, skip_tracer="strace")]
    assert got == [
        ProcessExec(pid=6, host_pid=21, ppid=5, path="/usr/bin/strace", argv=["strace"], cwd="/w", env={}),
        FileOpen(pid=6, host_pid=21, syscall="openat", path="/etc/group", flags="O_RDONLY", access="r", result=3)]
    assert len([e for _, e in parse([lines], clock_offset_ns=0, root_cwd="/w", root_host_pid=7)]) == 5


_FAKE_BPFTRACE = """
import signal, sys, time
signal.signal(signal.SIGINT, lambda *_: sys.exit(0))
print("B 1 4026532181 1 7", flush=True)
for i in range(300):  # one write per line, as bpftrace -B line does, a little apart
    print(f"O {2 + i} 7 7 1 sys_exit_openat -100 0 3 /f{i}", flush=True)
    time.sleep(0.001)
print("Q 400 7 7 1 0", flush=True)
while True:
    time.sleep(1)
"""


def test_the_task_reads_many_lines_at_once_and_sends_every_event_in_order():
    """bpftrace writes a line per call; the task waits ``batch_s`` between reads, so one read
    (and one scheduler turn for the ledger) serves many lines: before, 300 lines a ms apart
    took about 300 reads. Every event still reaches the channel, in order."""
    import functools
    import os
    import sys

    import trio

    from collectors.ebpf import run_ebpf_witness
    from ledger.events import WitnessStarted, WitnessStopped

    class Counting(EbpfParser):
        feeds = 0

        def feed(self, data: bytes) -> None:
            self.feeds += 1
            super().feed(data)

    parser = Counting(root_cwd="/w", root_host_pid=7)

    async def main():
        send, receive = trio.open_memory_channel(1000)
        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            await nursery.start(functools.partial(run_ebpf_witness, send, argv=[sys.executable, "-c", _FAKE_BPFTRACE],
                                                  env=dict(os.environ), parser=parser, stop=stop, batch_s=0.2))
            while not parser.root_exited:
                await trio.sleep(0.01)
            stop.set()
        return [item.event async for item in receive]

    got = trio.run(main)
    assert isinstance(got[0], WitnessStarted) and isinstance(got[-1], WitnessStopped)
    assert [e.path for e in got if isinstance(e, FileOpen)] == [f"/f{i}" for i in range(300)]
    assert isinstance(got[-2], ProcessExit) and len(got) == 303
    assert parser.feeds <= 30, parser.feeds


def test_a_new_process_is_a_fork_event_a_thread_none_and_a_clone_the_witness_missed_no_guess():
    """The loader's F line: the clone's flags, the child's pid in the chamber, 1 for a thread;
    bpftrace's: the flags alone (a thread has CLONE_THREAD), 0 where it missed the clone's
    entry (then no event); a recording before either: no event (witness.unseen_process reads
    births against procfs's samples)."""
    untraced = 0x800000 | 17
    lines = (f"F 100 7000 7000 3 7001 {untraced} 4 0\n"  # loader: a process cloned with CLONE_UNTRACED
             f"F 101 7000 7000 3 7002 {0x10000 | 0x100 | 0x800} 3 1\n"  # loader: a thread
             "F 102 7000 7000 3 7003 17\n"  # bpftrace: a fork (SIGCHLD only)
             f"F 103 7000 7000 3 7004 {0x10000 | 0x100}\n"  # bpftrace: a thread
             "F 104 7000 7000 3 7005 0\n"  # bpftrace: a clone whose entry it missed
             "F 105 7000 7000 3 7006\n")  # an older recording
    forks = [e for e in events(lines) if isinstance(e, ProcessFork)]
    assert forks == [ProcessFork(pid=4, host_pid=7001, ppid=3, flags=["CLONE_UNTRACED"]),
                     ProcessFork(pid=0, host_pid=7003, ppid=3)]


def test_a_seccomp_call_reads_as_strace_spells_it_and_one_refused_by_the_filter_is_denied():
    entered = "P 200 7000 7000 3 sys_exit_seccomp 1 0 1 8 94000000 0 \n"
    refused = "P 201 7000 7000 3 sys_exit_seccomp 0 -1 0 0 0 0 \n"
    calls = [e for e in events(entered + refused) if isinstance(e, ProcessSyscall)]
    assert [(e.syscall, e.args, e.result, e.denied) for e in calls] == [
        ("seccomp", ["SECCOMP_SET_MODE_FILTER", "SECCOMP_FILTER_FLAG_NEW_LISTENER", "0x59a5380"], 0, False),
        ("seccomp", [], -1, True)]
