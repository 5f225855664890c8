"""The strace witness's parser, on real traces (test_strace/*.strace) and on each line form.

The golden traces were recorded by test_strace/record_golden.sh with `strace_argv`; their
root cwd was /tmp/caisson-golden. Re-recording changes pids and times: update the exact
expectations below.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collectors._strace_lines import decode_escaped, decode_string, parse_fd, parse_sockaddr, split_call
from collectors.strace import (
    AUDITED_SYSCALLS,
    DENIED_SYSCALLS,
    NEED_DATA,
    STRACE_SYSCALLS,
    UNFINISHED,
    ParserClosedError,
    named_pids,
    Stamped,
    StraceParser,
    strace_argv,
)
from ledger import fingerprint_secret
from ledger.events import (
    FileChange, FileOpen, NetConnect, NetSend, ProcessExec, ProcessExit, ProcessFork, ProcessSyscall, WitnessRaw,
)

GOLDEN = Path(__file__).with_suffix("")
TRACES = sorted(p.name for p in GOLDEN.glob("*.strace"))
ROOT_CWD = "/tmp/caisson-golden"


def parse(chunks, **kw) -> list[Stamped]:
    parser = StraceParser(root_cwd=kw.pop("root_cwd", ROOT_CWD), **kw)
    out: list[Stamped] = []
    for chunk in chunks:
        parser.feed(chunk)
        while (item := parser.next_event()) is not NEED_DATA:
            out.append(item)
    parser.close()
    while (item := parser.next_event()) is not NEED_DATA:
        out.append(item)
    return out


def events(data: bytes | str, **kw) -> list:
    if isinstance(data, str):
        data = data.encode()
    return [s.event for s in parse([data], **kw)]


def golden(name: str) -> bytes:
    return (GOLDEN / name).read_bytes()


def of(items, kind):
    return [e for e in items if isinstance(e, kind)]


def not_lib(e: FileOpen) -> bool:
    return not e.path.startswith(("/usr/lib", "/lib/", "/etc/ld.so.cache"))


# --- the options ---------------------------------------------------------------------------


def test_strace_argv_flags():
    argv = strace_argv("/run/w/trace", string_limit=512)
    assert argv[:6] == ["-f", "-ttt", "-yy", "-s", "512", "-q"]
    assert "--seccomp-bpf" in argv and "-qq" not in argv
    assert argv[-2:] == ["-o", "/run/w/trace"]
    spec = argv[argv.index("-e") + 1].removeprefix("trace=").split(",")
    assert [s.lstrip("?") for s in spec] == list(STRACE_SYSCALLS)
    assert "?open" in spec and "openat" in spec and "execve" in spec and "chdir" in spec
    assert "--seccomp-bpf" not in strace_argv("x", seccomp=False)
    inject = argv[argv.index("-e", argv.index("-e") + 1) + 1]
    assert inject == f"inject={','.join(DENIED_SYSCALLS)}:error=EPERM"
    assert set(DENIED_SYSCALLS) <= set(AUDITED_SYSCALLS) <= set(STRACE_SYSCALLS)
    assert "-e" not in strace_argv("x", deny=())[strace_argv("x", deny=()).index("-e") + 2:]
    with pytest.raises(ValueError, match="not traced"):
        strace_argv("x", deny=["read"])
    with pytest.raises(ValueError):
        strace_argv("x", string_limit=0)


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace not installed")
def test_strace_accepts_the_options(tmp_path):
    out = tmp_path / "trace"
    argv = ["strace", *strace_argv(str(out)), "/bin/true"]
    proc = subprocess.run(argv, capture_output=True, timeout=60)
    if proc.returncode != 0 and b"ptrace" in proc.stderr:
        pytest.skip(f"ptrace not permitted here: {proc.stderr!r}")
    assert proc.returncode == 0, proc.stderr
    evs = events(out.read_bytes(), root_cwd=str(tmp_path))
    assert isinstance(evs[0], ProcessExec) and evs[0].path == "/bin/true"
    assert evs[-1] == ProcessExit(pid=evs[0].pid, host_pid=evs[0].host_pid, code=0)
    assert not of(evs, WitnessRaw)


# --- every golden file, any split ------------------------------------------------------------


@pytest.mark.parametrize("name", TRACES)
def test_golden_whole_equals_byte_at_a_time(name):
    data = golden(name)
    whole = parse([data])
    assert whole == parse([data[i : i + 1] for i in range(len(data))])
    assert all(isinstance(t, int) and t > 1_700_000_000 * 10**9 for t, _ in whole)


@pytest.mark.parametrize("name", TRACES)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.integers(min_value=0, max_value=200_000), max_size=20))
def test_golden_any_split_points(name, cuts):
    data = golden(name)
    points = sorted({c % (len(data) + 1) for c in cuts})
    chunks = [data[a:b] for a, b in zip([0, *points], [*points, len(data)])]
    assert parse(chunks) == parse([data])


@pytest.mark.parametrize("name", TRACES)
@pytest.mark.parametrize("junk", [b"12345 1796000697.1", b"\xff\xfe garbage", b"17759 1796000697.437637 openat(AT_F"])
def test_golden_with_trailing_junk(name, junk):
    clean = parse([golden(name)])
    dirty = parse([golden(name) + junk])
    extra = [e for _, e in dirty if e not in [c for _, c in clean]]
    assert len(extra) == 1 and isinstance(extra[0], WitnessRaw)
    assert extra[0].line == junk.decode("utf-8", "backslashreplace")


@pytest.mark.parametrize("name", TRACES)
def test_golden_counters(name):
    data = golden(name)
    parser = StraceParser(root_cwd=ROOT_CWD)
    parser.feed(data)
    parser.close()
    n = 0
    while parser.next_event() is not NEED_DATA:
        n += 1
    stopped = parser.witness_stopped()
    assert stopped.witness == "strace" and stopped.bytes == len(data)
    assert stopped.lines == data.count(b"\n") and stopped.events == n and stopped.parse_failures == 0


# --- what the golden traces say --------------------------------------------------------------


def test_pipeline_exec_tree_files_and_exits():
    evs = events(golden("pipeline.strace"))
    sh = 17759
    assert [(e.pid, e.host_pid, e.ppid, e.path, e.argv, e.cwd, e.result) for e in of(evs, ProcessExec)] == [
        (sh, sh, None, "/bin/sh", ["/bin/sh", "-c", "ls / | grep -c e > /tmp/caisson-golden/x; cat "
                                   "/etc/hostname; cd /tmp && cat caisson-golden/x; rm caisson-golden/x; "
                                   "exit 3"], ROOT_CWD, 0),
        (17760, 17760, sh, "/usr/bin/ls", ["ls", "/"], ROOT_CWD, 0),
        (17761, 17761, sh, "/usr/bin/grep", ["grep", "-c", "e"], ROOT_CWD, 0),
        (17762, 17762, sh, "/usr/bin/cat", ["cat", "/etc/hostname"], ROOT_CWD, 0),
        (17763, 17763, sh, "/usr/bin/cat", ["cat", "caisson-golden/x"], "/tmp", 0),
        (17764, 17764, sh, "/usr/bin/rm", ["rm", "caisson-golden/x"], "/tmp", 0),
    ]
    opens = [(e.pid, e.path, e.access, e.result) for e in of(evs, FileOpen) if not_lib(e)]
    assert (17761, "/tmp/caisson-golden/x", "w", 3) in opens  # the shell's '>' in the grep child
    assert (17762, "/etc/hostname", "r", 3) in opens
    assert (17763, "/tmp/caisson-golden/x", "r", 3) in opens  # relative 'caisson-golden/x' after cd /tmp
    assert of(evs, FileChange) == [FileChange(pid=17764, host_pid=17764, syscall="unlinkat",
                                              path="/tmp/caisson-golden/x")]
    assert [(e.pid, e.code, e.signal) for e in of(evs, ProcessExit)] == [
        (17760, 0, None), (17761, 0, None), (17762, 0, None), (17763, 0, None), (17764, 0, None),
        (sh, 3, None)]
    assert all(e.path.startswith("/") for e in of(evs, FileOpen))


def test_python_threads_map_to_their_process_and_exec_from_a_thread():
    evs = events(golden("python_threads.strace"))
    py = 17772
    execs = of(evs, ProcessExec)
    assert [(e.pid, e.ppid, e.argv) for e in execs if e.path == "/bin/true"] == [
        (17775, py, ["/bin/true", "0"]), (17777, py, ["/bin/true", "1"]), (17778, py, ["/bin/true", "2"])]
    # thread 17779 exec'd: strace says "<pid changed to 17772 ...>", then "superseded"
    assert execs[-2] == ProcessExec(pid=py, host_pid=py, path="/bin/sh", cwd="/tmp", result=0,
                                    argv=["sh", "-c", "cat caisson-golden/threads.py > /dev/null; exit 7"])
    assert execs[-1].ppid == py and execs[-1].cwd == "/tmp"
    # the threads' own file opens belong to the process; their exits are not process exits
    assert {e.host_pid for e in of(evs, FileOpen) if e.path == "/etc/hostname"} == {py}
    assert [(e.pid, e.code) for e in of(evs, ProcessExit)] == [
        (17775, 0), (17777, 0), (17778, 0), (17780, 0), (py, 7)]
    assert FileOpen(pid=17780, host_pid=17780, path="/tmp/caisson-golden/threads.py", flags="O_RDONLY",
                    result=3) in evs  # relative path, cwd inherited across the exec


def test_connect_refused_accepted_inprogress_ipv6_unix():
    evs = events(golden("connect.strace"))
    got = [(e.family, e.address, e.port, e.result, e.errno) for e in of(evs, NetConnect)]
    assert got == [
        ("AF_INET", "127.0.0.1", 42391, -1, "ECONNREFUSED"),
        ("AF_INET", "127.0.0.1", 52407, 0, None),
        ("AF_INET", "127.0.0.1", 52407, -1, "EINPROGRESS"),
        ("AF_INET6", "::1", 42391, -1, "ECONNREFUSED"),
        ("AF_UNIX", "/tmp/caisson-golden/no-such.sock", None, -1, "ENOENT"),
    ]
    raws = of(evs, WitnessRaw)
    assert len(raws) == 2 and all(" bind(" in r.line for r in raws)  # no kind for bind yet: kept raw


def test_killed_signals_unfinished_and_restarted():
    parser_events = parse([golden("killed.strace")])
    evs = [e for _, e in parser_events]
    exits = {e.pid: (e.code, e.signal) for e in of(evs, ProcessExit)}
    assert exits == {17798: (None, "SIGKILL"), 17800: (None, "SIGABRT"), 17801: (0, None), 17797: (0, None)}
    fifo = [(e.pid, e.access, e.result, e.errno) for e in of(evs, FileOpen) if e.path.endswith("/fifo")]
    assert fifo == [
        (17798, "r", None, UNFINISHED),  # cat killed inside openat: "= ?"
        (17797, "r", None, "ERESTARTSYS"),  # interrupted by SIGALRM ...
        (17797, "r", 3, None),  # ... and retried
        (17801, "w", 3, None),
    ]
    assert [r.line.split(" ", 2)[2] for r in of(evs, WitnessRaw)] == [
        "kill(17798, SIGKILL) = 0", "tgkill(17800, 17800, SIGABRT) = 0"]
    # a call split over lines is stamped with its entry time
    (stamp,) = [t for t, e in parser_events if isinstance(e, FileOpen) and e.errno == UNFINISHED]
    assert stamp == 1796000697_661700000


def test_escapes_truncation_dirfd_fchdir_and_changes():
    evs = events(golden("escapes.strace"))
    esc = "/tmp/caisson-golden/esc/"
    created = [e.path.removeprefix(esc) for e in of(evs, FileOpen)
               if e.path.startswith(esc) and "O_CREAT" in e.flags]
    assert created == ["café.txt", "new\nline", 'quo"te', "back\\slash", "tab\there", "a>b<c", "bad\\xff"]
    assert FileOpen(pid=17809, host_pid=17809, path=esc + "café.txt", flags="O_RDONLY|O_CLOEXEC",
                    result=4) in evs  # openat(3</.../esc>, "caf\303\251.txt")
    assert FileOpen(pid=17809, host_pid=17809, path=esc + "tab\there", flags="O_RDWR|O_CLOEXEC",
                    access="rw", result=4) in evs  # relative, after fchdir(3</.../esc>)
    changes = [(e.syscall, e.path.removeprefix(esc), e.target) for e in of(evs, FileChange)]
    assert changes == [
        ("mkdir", "/tmp/caisson-golden/esc", None),
        ("rename", 'quo"te', esc + "renamed"),
        ("link", "hard", esc + "renamed"),
        ("symlink", "soft", "renamed"),  # a symlink's contents stay verbatim
        ("chmod", "soft", None), ("truncate", "hard", None), ("unlink", "soft", None),
        ("mkdir", "sub", None), ("rmdir", "sub", None),
    ]
    failed, echo = of(evs, ProcessExec)[1:]
    assert failed.path == "/no/such/prog" and failed.result == -1 and failed.errno == "ENOENT"
    assert failed.argv == ["prog", *[f"arg{i}" for i in range(31)], "..."]  # cut at 32 elements by -s 32
    assert echo.argv == ["echo", "y" * 32 + "..."] and echo.cwd == esc.rstrip("/")


# --- line forms ------------------------------------------------------------------------------

T = "1796000000.000001"


def test_decode_escapes_and_truncated_strings():
    assert decode_escaped(r"a\tb\nc\"d\\e\x41\101\0f") == 'a\tb\nc"d\\eAA\x00f'
    assert decode_escaped(r"caf\303\251") == "café"
    assert decode_escaped(r"bad\377") == "bad\\xff"  # not UTF-8: kept as text
    assert decode_escaped("trailing\\") == "trailing\\"
    assert decode_string('"abc"...') == ("abc", True)
    assert decode_string('"abc"') == ("abc", False)
    assert decode_string("0x7ffd1234") is None


def test_decorations():
    assert parse_fd("AT_FDCWD</w/a,b)>") == (-100, "/w/a,b)")
    assert parse_fd("3</dev/null<char 1:3>>") == (3, "/dev/null")
    assert parse_fd(r"4</x/a\76b\74c>") == (4, "/x/a>b<c")
    assert parse_fd("5<TCP:[127.0.0.1:40000->127.0.0.1:8080]>") == (5, "TCP:[127.0.0.1:40000->127.0.0.1:8080]")
    assert parse_fd("NULL") == (None, None)
    args, res = split_call('5<TCP:[127.0.0.1:40000->127.0.0.1:8080]>, 3</a)b,c>, "x)" ) = 7<UNIX:[1->2]>')
    assert args == ["5<TCP:[127.0.0.1:40000->127.0.0.1:8080]>", "3</a)b,c>", '"x)"'] and res.value == 7
    assert res.decoration == "UNIX:[1->2]"


def test_results():
    assert split_call("x) = -1 ENOENT (No such file or directory)")[1] == (-1, "ENOENT", None, False)
    restart = split_call("x) = ? ERESTARTSYS (To be restarted if SA_RESTART is set)")
    assert restart[1] == (None, "ERESTARTSYS", None, False)
    assert split_call("x) = ? ERESTARTNOINTR (To be restarted)")[1] == (None, "ERESTARTNOINTR", None, False)
    assert split_call("x)   = ?")[1] == (None, None, None, False)
    assert split_call("x) = ? <unavailable>")[1] == (None, None, None, False)
    assert split_call("x) = 0x7f00")[1].value == 0x7F00
    assert split_call("x) = -1 (errno 18446744073709551359)")[1].errno == "errno 18446744073709551359"
    assert split_call("x") is None and split_call("x) junk") is None and split_call("a]) = 0") is None


def test_sockaddrs():
    assert parse_sockaddr('{sa_family=AF_UNIX, sun_path=@"abstract"}') == ("AF_UNIX", "@abstract", None)
    assert parse_sockaddr("{sa_family=AF_UNSPEC, sa_data=...}") == ("AF_UNSPEC", "", None)
    assert parse_sockaddr("0x7ffd0000") is None


def test_resumed_pair_and_orphan_resumed():
    evs = events(f'7 {T} openat(AT_FDCWD</w>, "f", O_WRONLY|O_CREAT, 0600 <unfinished ...>\n'
                 f"8 {T} <... openat resumed>) = 3</w/g>\n"  # no call pending for 8
                 f"7 {T} <... openat resumed>) = 3</w/f>\n")
    assert isinstance(evs[0], WitnessRaw) and "<... openat resumed>" in evs[0].line
    assert evs[1] == FileOpen(pid=7, host_pid=7, path="/w/f", flags="O_WRONLY|O_CREAT", access="w", result=3)


def test_unfinished_at_close_and_resumed_unavailable():
    addr = '{sa_family=AF_INET, sin_port=htons(80), sin_addr=inet_addr("10.0.0.1")}'
    evs = events(f"7 {T} connect(3<TCP:[9]>, {addr}, 16 <unfinished ...>\n"
                 f'8 {T} unlink("/w/x" <unfinished ...>\n'
                 f"8 {T} <... unlink resumed> <unavailable>) = ?\n")
    assert evs == [
        FileChange(pid=8, host_pid=8, syscall="unlink", path="/w/x", result=-1, errno=UNFINISHED),
        NetConnect(pid=7, host_pid=7, family="AF_INET", address="10.0.0.1", port=80, result=-1,
                   errno=UNFINISHED),
    ]


def test_exit_forms_and_signals():
    evs = events(f"7 {T} +++ killed by SIGSEGV (core dumped) +++\n"
                 f"8 {T} --- SIGCHLD {{si_signo=SIGCHLD, si_code=CLD_EXITED}} ---\n"
                 f"8 {T} --- stopped by SIGSTOP ---\n"
                 f"8 {T} +++ exited with 255 +++\n")
    assert evs == [ProcessExit(pid=7, host_pid=7, signal="SIGSEGV"), ProcessExit(pid=8, host_pid=8, code=255)]


def test_clone_before_child_lines_and_child_lines_before_clone_result():
    evs = events(f'10 {T} execve("/bin/sh", ["sh"], 0x1 /* 2 vars */) = 0\n'
                 f"10 {T} clone(child_stack=NULL, flags=CLONE_CHILD_SETTID|SIGCHLD <unfinished ...>\n"
                 f'11 {T} execve("/bin/ls", ["ls"], 0x1 /* 2 vars */) = 0\n'  # before the clone returned
                 f'11 {T} open("rel", O_RDONLY) = 3</r/rel>\n'
                 f"10 {T} <... clone resumed>, child_tidptr=0x7f) = 11\n"
                 f"10 {T} chdir(\"/elsewhere\") = 0\n", root_cwd="/r")
    assert [(e.pid, e.ppid, e.cwd) for e in of(evs, ProcessExec)] == [(10, None, "/r"), (11, 10, "/r")]
    assert of(evs, FileOpen)[0].path == "/r/rel"


def test_close_with_a_clone_in_flight_releases_its_childs_lines():
    evs = events(f"10 {T} vfork( <unfinished ...>\n"
                 f'11 {T} execve("/bin/ls", ["ls"], 0x1 /* 2 vars */ <unfinished ...>\n'
                 f'12 {T} open("/x", O_RDONLY <unfinished ...>\n', root_cwd="/r")
    assert evs == [
        ProcessExec(pid=11, host_pid=11, path="/bin/ls", argv=["ls"], result=-1, errno=UNFINISHED),
        FileOpen(pid=12, host_pid=12, syscall="open", path="/x", flags="O_RDONLY", errno=UNFINISHED),
    ]


def test_clone_fs_threads_share_cwd_and_fork_copies_it():
    evs = events(f"1 {T} clone3({{flags=CLONE_VM|CLONE_FS|CLONE_THREAD}} => {{parent_tid=[2]}}, 88) = 2\n"
                 f"1 {T} vfork() = 3\n"
                 f'2 {T} chdir("/t") = 0\n'
                 f'1 {T} mkdir("a", 0777) = 0\n'
                 f'3 {T} mkdir("b", 0777) = -1 EEXIST (File exists)\n'
                 f"2 {T} +++ exited with 0 +++\n", root_cwd="/r")
    assert [(e.pid, e.path, e.result, e.errno) for e in of(evs, FileChange)] == [
        (1, "/t/a", 0, None), (3, "/r/b", -1, "EEXIST")]
    assert not of(evs, ProcessExit)  # a thread's exit is not a process exit


def test_openat_on_dirfd_openat2_creat_and_unresolvable():
    evs = events(f'1 {T} openat(5</d>, "./x//y", O_RDONLY) = 6</d/x/y>\n'
                 f'1 {T} openat2(AT_FDCWD</w>, "z", {{flags=O_RDWR|O_CLOEXEC, resolve=0}}, 24) = 4</w/z>\n'
                 f'1 {T} creat("n", 0644) = 7</w/n>\n'
                 f'1 {T} openat(9<pipe:[1]>, "p", O_RDONLY) = -1 ENOTDIR (Not a directory)\n'
                 f'1 {T} open("/a/../b", O_WRONLY|O_APPEND) = 3\n')
    assert [(e.syscall, e.path, e.access, e.flags) for e in evs] == [
        ("openat", "/d/x/y", "r", "O_RDONLY"),
        ("openat2", "/w/z", "rw", "O_RDWR|O_CLOEXEC"),
        ("creat", "/w/n", "w", "O_CREAT|O_WRONLY|O_TRUNC"),
        ("openat", "p", "r", "O_RDONLY"),  # no path for the dirfd: left relative, honestly
        ("open", "/a/../b", "w", "O_WRONLY|O_APPEND"),  # '..' kept: a symlink can make it lie
    ]


def test_exec_from_thread_superseded():
    evs = events(f"5 {T} clone3({{flags=CLONE_VM|CLONE_FS|CLONE_THREAD}} => {{parent_tid=[6]}}, 88) = 6\n"
                 f'6 {T} execve("/bin/x", ["x"], 0x1 /* 1 var */ <pid changed to 5 ...>\n'
                 f"5 {T} +++ superseded by execve in pid 6 +++\n"
                 f"5 {T} <... execve resumed>) = -1 (errno 18446744073709551359)\n", root_cwd=None)
    assert evs == [ProcessExec(pid=5, host_pid=5, path="/bin/x", argv=["x"], result=0)]


def test_unknown_lines_are_kept_raw():
    lines = ["strace: Process 12 attached", f"7 {T} ", f"7 {T} +++ weird +++",
             f"7 {T} openat(unbalanced = 3", f"7 {T} openat(0x7ffd, O_RDONLY) = 3",
             f"7 {T} connect(3, 0x7ffd0000, 16) = 0", "", "\x00\x01"]
    evs = events("\n".join(lines) + "\n")
    assert evs == [WitnessRaw(witness="strace", line=line) for line in lines]
    raw = events(f"7 {T} kill(8, SIGTERM) = 0\n")
    assert raw == [WitnessRaw(witness="strace", line=f"7 {T} kill(8, SIGTERM) = 0")]


def test_chamber_pid_translation():
    seen: list[int] = []

    def chamber_pid(host: int) -> int | None:
        seen.append(host)
        return {100: 1}.get(host)

    evs = events(f'100 {T} open("/a", O_RDONLY) = 3\n100 {T} open("/b", O_RDONLY) = 3\n'
                 f'200 {T} open("/c", O_RDONLY) = 3\n', chamber_pid=chamber_pid)
    assert [(e.pid, e.host_pid) for e in evs] == [(1, 100), (1, 100), (0, 200)]
    assert seen == [100, 200]  # once per process


def test_host_pid_mapping_for_a_trace_taken_in_the_chamber():
    seen: list[int] = []

    def host_pid(chamber: int) -> int | None:
        seen.append(chamber)
        return {1: 4001}.get(chamber)

    evs = events(f'1 {T} open("/a", O_RDONLY) = 3\n1 {T} open("/b", O_RDONLY) = 3\n'
                 f'2 {T} open("/c", O_RDONLY) = 3\n', host_pid=host_pid)
    assert [(e.pid, e.host_pid) for e in evs] == [(1, 4001), (1, 4001), (2, None)]
    assert seen == [1, 2]  # once per process
    with pytest.raises(ValueError):
        StraceParser(host_pid=host_pid, chamber_pid=host_pid)


def test_a_child_is_mapped_when_its_clone_returns_not_when_it_is_gone():
    """A process whose first event is its exit: by then it has been reaped on the host, so
    its host pid is asked for as soon as the trace names it (its parent's clone)."""
    parser: StraceParser

    def host_pid(chamber: int) -> int | None:  # pid 11 lives until its exit line is read
        return {10: 4010, 11: 4011}[chamber] if chamber == 10 or parser.lines < 2 else None

    parser = StraceParser(host_pid=host_pid)
    parser.feed(f"10 {T} clone(child_stack=NULL, flags=CLONE_CHILD_SETTID|SIGCHLD) = 11\n"
                f"11 {T} +++ exited with 0 +++\n".encode())
    parser.close()
    assert parser.next_event().event == ProcessFork(pid=11, host_pid=4011, ppid=10, syscall="clone",
                                                    flags=["CLONE_CHILD_SETTID"])
    assert parser.next_event().event == ProcessExit(pid=11, host_pid=4011, code=0)
    assert (parser.root_pid, parser.root_exited) == (10, False)


def test_a_new_process_is_a_fork_event_with_its_flags_and_a_thread_is_none():
    """Every process the trace saw born is an event (witness.unseen_process reads them against
    procfs), with the clone's flags as strace printed them (CLONE_UNTRACED among them, when a
    chamber's profile let it through); a thread is no process, and a failed clone made none."""
    parser = StraceParser()
    parser.feed(f"10 {T} clone(child_stack=NULL, flags=CLONE_UNTRACED|SIGCHLD) = 11\n"
                f"10 {T} clone3({{flags=CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_SIGHAND|CLONE_THREAD|CLONE_SYSVSEM,"
                f" exit_signal=0, stack=0x7f, stack_size=0x7fff00}}, 88) = 12\n"
                f"10 {T} clone(child_stack=NULL, flags=CLONE_NEWUSER|SIGCHLD) = -1 EPERM (Operation not permitted)\n"
                f"10 {T} fork() = 13\n".encode())
    parser.close()
    forks = [s.event for s in iter(parser.next_event, NEED_DATA) if isinstance(s.event, ProcessFork)]
    assert forks == [ProcessFork(pid=11, host_pid=11, ppid=10, syscall="clone", flags=["CLONE_UNTRACED"]),
                     ProcessFork(pid=13, host_pid=13, ppid=10, syscall="fork")]


def test_named_pids_finds_line_pids_and_clone_children_whole_or_cut():
    data = golden("env.strace")
    assert named_pids(data) == {17972, 17973}
    assert named_pids(golden("pipeline.strace")) == {17759, 17760, 17761, 17762, 17763, 17764}
    assert named_pids(f"1 {T} clone3({{flags=CLONE_VM}} => {{parent_tid=[2]}}, 88) = 2\n".encode()) == {1, 2}
    assert named_pids(b"") == set() and named_pids(b"\xff\xfe garbage\n") == set()
    lines = data.splitlines(keepends=True)
    assert set().union(*(named_pids(line) for line in lines)) == {17972, 17973}  # line by line
    assert named_pids(lines[4]) == {17973} and named_pids(lines[5]) == {17972, 17973}  # vfork resumed = 17973


def test_learned_host_pids_beat_the_mapper_and_are_asked_once():
    asked: list[int] = []
    parser = StraceParser(host_pid=lambda pid: asked.append(pid) or None)
    parser.learn_host_pids({1: 4001})
    parser.feed(f'1 {T} open("/a", O_RDONLY) = 3\n2 {T} open("/b", O_RDONLY) = 3\n'.encode())
    parser.close()
    assert [(s.event.pid, s.event.host_pid) for s in iter(parser.next_event, NEED_DATA)] == [(1, 4001), (2, None)]
    assert asked == [2]


KEY = bytes(range(32))


def test_env_golden_is_recorded_redacted_with_host_pids():
    """What the witness's parser makes of a trace is what the ledger holds: host pids mapped,
    credentials and key-like values fingerprinted with the run's key (ledger.redact_env)."""
    parser_events = parse([golden("env.strace")], host_pid={17972: 90072, 17973: 90073}.get,
                          fingerprint_key=KEY, credential_patterns=("MY_ORG_*",))
    evs = [e for _, e in parser_events if not isinstance(e, FileOpen) or not_lib(e)]
    fp = {v: fingerprint_secret(v, KEY) for v in ("sk-ant-api03-not-a-real-key", "org-42",
                                                   "http://user:pw@proxy.example/")}
    base = {"PATH": "/usr/bin:/bin", "LC_ALL": "C", "GREETING": "hello",
            "ANTHROPIC_API_KEY": fp["sk-ant-api03-not-a-real-key"], "MY_ORG_ID": fp["org-42"]}
    assert evs == [
        ProcessExec(pid=17972, host_pid=90072, path="/bin/sh", cwd=ROOT_CWD, result=0, env=base, argv=[
            "/bin/sh", "-c", f"PROXY_URL=http://user:{fingerprint_secret('pw', KEY)}@proxy.example/ /bin/true;"
            " exec /bin/echo done"]),
        ProcessFork(pid=17973, host_pid=90073, ppid=17972, syscall="vfork", flags=["CLONE_VFORK", "CLONE_VM"]),
        ProcessExec(pid=17973, host_pid=90073, ppid=17972, path="/bin/true", argv=["/bin/true"], cwd=ROOT_CWD,
                    result=0, env={**base, "PROXY_URL": fp["http://user:pw@proxy.example/"], "PWD": ROOT_CWD}),
        ProcessExit(pid=17973, host_pid=90073, code=0),
        ProcessExec(pid=17972, host_pid=90072, path="/bin/echo", argv=["/bin/echo", "done"], cwd=ROOT_CWD,
                    result=0, env={**base, "PWD": ROOT_CWD}),
        ProcessExit(pid=17972, host_pid=90072, code=0),
    ]
    assert [list(e.env) for e in evs if isinstance(e, ProcessExec)][1][:3] == ["PROXY_URL", "MY_ORG_ID", "GREETING"]
    envs = repr([(e.argv, e.env) for _, e in parser_events if isinstance(e, ProcessExec)])
    assert "not-a-real-key" not in envs and "user:pw" not in envs and "org-42" not in envs


def test_argv_golden_is_recorded_redacted_keeping_its_shape():
    """Secrets in command lines (a URL's userinfo in a shell script, an Authorization header,
    a key option with '=' and one standing alone) are fingerprinted in place (ledger.redact_argv)."""
    execs = of([e for _, e in parse([golden("argv.strace")], fingerprint_key=KEY)], ProcessExec)
    fp = {v: fingerprint_secret(v, KEY) for v in ("pw", "sk-proj-notarealkey0123456789", "k3y-not-real", "hunter2")}
    assert [e.argv for e in execs] == [
        ["/bin/sh", "-c", f"X=http://user:{fp['pw']}@proxy.example/ /bin/true; exec /bin/echo -H \"Authorization:"
         f" Bearer {fp['sk-proj-notarealkey0123456789']}\" --api-key={fp['k3y-not-real']} --password"
         f" {fp['hunter2']} https://example.com/"],
        ["/bin/true"],
        ["/bin/echo", "-H", f"Authorization: Bearer {fp['sk-proj-notarealkey0123456789']}",
         f"--api-key={fp['k3y-not-real']}", "--password", fp["hunter2"], "https://example.com/"],
    ]
    assert execs[1].env["X"] == fingerprint_secret("http://user:pw@proxy.example/", KEY)
    plain = of(events(golden("argv.strace")), ProcessExec)  # no key: kept as printed (one's own traces)
    assert plain[2].argv[3:6] == ["--api-key=k3y-not-real", "--password", "hunter2"]


def test_env_without_a_key_is_kept_as_printed():
    (sh, *_) = of(events(golden("env.strace")), ProcessExec)
    assert sh.env["ANTHROPIC_API_KEY"] == "sk-ant-api03-not-a-real-key"


def test_overlong_lines_are_cut_deterministically():
    data = f'1 {T} open("/{"a" * 100}", O_RDONLY) = 3\n1 {T} open("/b", O_RDONLY) = 3\n'.encode()
    whole = parse([data], max_line_bytes=64)
    assert whole == parse([data[i : i + 1] for i in range(len(data))], max_line_bytes=64)
    assert [type(s.event) for s in whole] == [WitnessRaw, WitnessRaw, WitnessRaw, FileOpen]
    assert "".join(s.event.line for s in whole[:3]) == data.decode().split("\n")[0]


def test_feed_after_close_is_misuse():
    parser = StraceParser()
    parser.close()
    parser.close()  # idempotent
    with pytest.raises(ParserClosedError):
        parser.feed(b"x")


# --- never an exception ----------------------------------------------------------------------

_GOLDEN_LINES = [line for name in TRACES for line in golden(name).splitlines(keepends=True)]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2000))
def test_arbitrary_bytes_never_raise(data):
    for item in parse([data]):
        assert isinstance(item.event, (WitnessRaw, ProcessExit, ProcessExec, FileOpen, FileChange, NetConnect))


def test_a_released_line_that_starts_a_clone_holds_the_rest_again_and_close_ends():
    """Found by the mangled-lines property test (a hang in close): two clones unfinished at
    the end, a line of an unknown pid held behind them; releasing the second clone's held
    line starts a clone again, and the unknown pid's line must wait, not spin."""
    data = (b'11633 1796059241.504429 vfork( <unfinished ...>\n'
            b'17797 1796000697.961661 vfork( <unfinished ...>\n'
            b'17779 1796000697.504325 execve("/bin/sh", ["sh"], 0x7*)\xac\x8e')
    done: list = []
    worker = threading.Thread(target=lambda: done.append(parse([data])), daemon=True)
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive(), "close() spins on the held lines instead of ending"
    [items] = done
    assert items and all(isinstance(i.event, (ProcessExec, WitnessRaw, ProcessExit)) for i in items)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_GOLDEN_LINES), st.integers(0, 400),
                          st.integers(0, 400), st.binary(max_size=8)), max_size=30))
def test_mangled_golden_lines_never_raise(parts):
    data = b"".join(line[:a] + junk + line[a + b :] for line, a, b, junk in parts)
    parse([data])


def test_a_cut_or_unplaced_path_is_marked_never_a_silent_prefix_or_a_guess():
    """strace -s cuts a string and says so (``"..."...``); a name relative to an fd whose -yy
    decoration is no path, or through a magic link to an fd it has no path for, stays as given."""
    evs = events(f'1 {T} openat(AT_FDCWD</w>, "././././"..., O_RDONLY) = -1 ENAMETOOLONG (File name too long)\n'
                 f'1 {T} openat(9<pipe:[1]>, "p", O_RDONLY) = -1 ENOTDIR (Not a directory)\n'
                 f'1 {T} openat(3, "q", O_RDONLY) = 4</d/q>\n'  # no -yy path for fd 3: the real path stays
                 f'1 {T} openat(AT_FDCWD</w>, "/proc/self/fd/7/k", O_RDONLY) = -1 ENOENT (No such file or directory)\n'
                 f'1 {T} openat(AT_FDCWD</w>, "/proc/self/cwd/k", O_RDONLY) = -1 ENOENT (No such file or directory)\n'
                 f'1 {T} renameat(5<socket:[2]>, "a", AT_FDCWD</w>, "b"...) = -1 ENOTDIR (Not a directory)\n'
                 f'1 {T} execve("/usr/bin/"..., ["x", "y"...], 0x7ffd /* 3 vars */) = -1 ENOENT (No such file)\n')
    assert [(type(e).__name__, e.path, e.path_cut, getattr(e, "unresolved", None), getattr(e, "real_path", None))
            for e in evs] == [
        ("FileOpen", "/w/...", True, False, None), ("FileOpen", "p", False, True, None),
        ("FileOpen", "q", False, True, "/d/q"), ("FileOpen", "/proc/self/fd/7/k", False, True, None),
        ("FileOpen", "/w/k", False, False, None), ("FileChange", "a", True, True, None),
        ("ProcessExec", "/usr/bin/...", True, None, None)]
    assert evs[-1].argv_cut and evs[-1].argv == ["x", "y..."]


def test_paths_through_a_process_own_fd_are_mapped_back_and_real_paths_kept():
    from collectors.strace import StraceParser
    from ledger.events import FileChange, FileOpen

    trace = (
        b'7 1700000000.000001 openat(AT_FDCWD</w>, "/w/sb", O_RDONLY|O_PATH|O_CLOEXEC) = 14</w/sb>\n'
        b'7 1700000000.000002 openat(AT_FDCWD</w>, "/proc/self/fd/14/n.tmp", O_WRONLY|O_CREAT|O_EXCL) = 15</w/sb/n.tmp>\n'
        b'7 1700000000.000003 rename("/proc/self/fd/14/n.tmp", "/proc/self/fd/14/n") = 0\n'
        b'7 1700000000.000004 openat(AT_FDCWD</w>, "link", O_RDONLY) = 3</etc/passwd>\n'
    )
    parser = StraceParser(root_cwd="/w")
    parser.feed(trace)
    parser.close()
    events = []
    while (item := parser.next_event()) is not NEED_DATA:
        events.append(item.event)
    opens = [e for e in events if isinstance(e, FileOpen)]
    assert opens[1].path == "/w/sb/n.tmp" and opens[1].real_path is None
    assert opens[2].path == "/w/link" and opens[2].real_path == "/etc/passwd"
    [rename] = [e for e in events if isinstance(e, FileChange)]
    assert (rename.path, rename.target) == ("/w/sb/n.tmp", "/w/sb/n")


# --- issue 15: sends without connect, the audited calls, exit status vs signal -------------


def test_sends_name_their_destinations_and_a_connected_send_is_no_event():
    evs = events(golden("sends.strace"))
    got = [(e.syscall, e.address, e.port, e.flags, e.result, e.errno) for e in of(evs, NetSend)]
    assert got == [
        ("sendto", "127.0.0.1", 9, "0", 4, None),  # an unconnected UDP socket
        ("sendmsg", "127.0.0.2", 9, "0", 4, None),
        ("sendmmsg", "127.0.0.3", 53, "0", 2, None),  # one event per destination
        ("sendmmsg", "127.0.0.4", 53, "0", 2, None),
        ("sendto", "127.0.0.1", 9, "MSG_FASTOPEN", -1, "ECONNREFUSED"),  # TCP Fast Open: data on the SYN
    ]
    assert [(e.address, e.port) for e in of(evs, NetConnect)] == [("127.0.0.1", 9)]
    assert not of(evs, WitnessRaw)  # the send on the connected socket (NULL address) is no event


def test_audited_calls_denied_by_injection_memfd_exec_and_exit_status_vs_signal():
    evs = events(golden("audit.strace"))
    calls = [(e.syscall, e.result, e.errno, e.denied) for e in of(evs, ProcessSyscall)]
    assert calls == [
        ("io_uring_setup", -1, "EPERM", True),  # strace failed it itself: (INJECTED)
        ("name_to_handle_at", -1, "EPERM", True),
        ("memfd_create", 3, None, False),
        ("ptrace", -1, "EPERM", False),  # the kernel refused: already traced
        ("process_vm_readv", 8, None, False),
    ]
    assert of(evs, ProcessSyscall)[0].args == ["4", "{flags=0, sq_thread_cpu=0, sq_thread_idle=0}"]
    vm = of(evs, ProcessSyscall)[-1]  # the bytes read from a process's memory stay out of the ledger
    assert vm.args[1] == "[{iov_base=<8 chars>, iov_len=8}]" and vm.args[3].startswith("[{iov_base=0x")
    fexecve = [e for e in of(evs, ProcessExec) if e.argv == ["true"]]
    assert [e.path for e in fexecve] == ["/memfd:payload"]  # execveat(fd, "", AT_EMPTY_PATH)
    assert [(e.syscall, e.path) for e in of(evs, FileChange)] == [("mknodat", "/tmp/caisson-golden/fifo2")]
    shells = {e.pid: e.argv[-1] for e in of(evs, ProcessExec) if e.path == "/bin/sh"}
    exits = {shells[e.pid]: (e.code, e.signal) for e in of(evs, ProcessExit) if e.pid in shells}
    assert exits == {"exit 130": (130, None), "kill -INT $$": (None, "SIGINT")}


def test_injected_results_and_sends_line_by_line():
    assert split_call("4, {flags=0}) = -1 EPERM (Operation not permitted) (INJECTED)")[1] == (-1, "EPERM", None, True)
    assert split_call("3, NULL) = -1 EPERM (Operation not permitted)")[1].injected is False
    line = ('7 1.000001 sendto(3<UDP:[0.0.0.0:1]>, "x", 1, MSG_DONTWAIT, {sa_family=AF_INET6, '
            'sin6_port=htons(53), sin6_flowinfo=htonl(0), inet_pton(AF_INET6, "2001:db8::1", &sin6_addr), '
            'sin6_scope_id=0}, 28) = 1\n')
    assert events(line) == [NetSend(pid=7, host_pid=7, syscall="sendto", family="AF_INET6", address="2001:db8::1",
                                    port=53, flags="MSG_DONTWAIT", result=1)]
    unreadable = '7 1.000001 sendto(3, "x", 1, 0, 0x7ffd0000, 16) = -1 EFAULT (Bad address)\n'
    assert [type(e) for e in events(unreadable)] == [WitnessRaw]  # kept raw, counted as a failure
    nameless = '7 1.000001 sendmsg(3<UDP:[1]>, {msg_name=NULL, msg_namelen=0, msg_iov=[], msg_iovlen=0, ' \
               'msg_controllen=0, msg_flags=0}, 0) = 0\n'
    assert events(nameless) == []


def test_a_magic_link_spelt_with_dots_or_doubled_slashes_is_mapped_back_too():
    from ledger.events import FileChange

    trace = (
        b'7 1700000000.000001 openat(AT_FDCWD</w>, "/run/lock", O_RDONLY|O_PATH|O_DIRECTORY) = 14</run/lock>\n'
        b'7 1700000000.000002 mkdir("/proc/self/./fd/14/a", 0777) = 0\n'
        b'7 1700000000.000003 mkdir("//proc/self/fd/14/b", 0777) = 0\n'
        b'7 1700000000.000004 mkdir("/proc/self//fd/14/c", 0777) = 0\n'
        b'7 1700000000.000005 mkdir("/proc/self/./root/run/lock/d", 0777) = 0\n'
    )
    assert [(e.path, e.unresolved) for e in events(trace, root_cwd="/w") if isinstance(e, FileChange)] == [
        ("/run/lock/a", False), ("/run/lock/b", False), ("/run/lock/c", False),
        ("/proc/self/root/run/lock/d", True)]  # never a path under /proc/self, its write prefix
