"""The eBPF parser's paths: the path the kernel opened, never a cut one or a guess (issue #28).

Lines as the libbpf loader prints them (its ``B`` line says ``4097 kernel``: path strings of
up to 4096 bytes, and ``Y`` lines with the paths its kernel side walked: a relative name's
directory, the file an open returned, an exec's cwd) and as bpftrace prints them (no ``Y``
lines: the parser follows each process's fds through the ``X`` lines of dup, fcntl, ioctl,
close and close_range, and the clone flags of ``F`` lines). The libbpf lines' shape is the
loader's (collectors/bpf/loader.c), checked against its real output in test_ebpf's golden.
Each set is parsed whole, a byte at a time and at any split.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.events import FileChange, FileOpen, ProcessExec, WitnessRaw
from tests.collectors.test_ebpf import parse

LIBBPF_B = "B 5 4026532181 1 7 4097 kernel\n"
BPFTRACE_B = "B 5 4026532181 1 7\n"
W = "/work/sandbox"
O_DIRECTORY = 0o200000


def _open(ts: int, dirfd: int, ret: int, name: str, flags: int = 0, tid: int = 10) -> str:
    return f"O {ts} 10 {tid} 2 tracepoint:syscalls:sys_exit_openat {dirfd} {flags} {ret} {name}\n"


def _x(ts: int, probe: str, ret: int, a0: int, a1: int = 0, a2: int = 0, tgid: int = 10) -> str:
    return f"X {ts} {tgid} {tgid} 2 tracepoint:syscalls:{probe} {ret} {a0} {a1} {a2}\n"


def opens(text: str, **kw) -> list[FileOpen]:
    return [e for _, e in parse([text.encode()], root_cwd=W, **kw) if isinstance(e, FileOpen)]


def _at_any_split(text: str, cuts: list[int]) -> list:
    data = text.encode()
    points = [0, *sorted(min(c, len(data)) for c in cuts), len(data)]
    return [e for _, e in parse([data[a:b] for a, b in zip(points, points[1:])], root_cwd=W)]


# --- the two examples -------------------------------------------------------------

LONG = "./" * 120 + "key/answers.json"  # 256 bytes


def test_a_long_relative_name_is_whole_and_placed_by_the_kernel():
    text = LIBBPF_B + f"Y 10 i0 ok {W}\nY 10 ret ok {W}/key/answers.json\n" + _open(100, -100, 3, LONG)
    assert opens(text) == [FileOpen(pid=2, host_pid=10, path=f"{W}/key/answers.json", flags="O_RDONLY", result=3)]


def test_with_bpftrace_a_long_name_is_marked_cut_never_a_silent_prefix():
    [event] = opens(BPFTRACE_B + _open(100, -100, 3, LONG[:199]))  # what bpftrace's 200-byte string keeps
    assert (event.path, event.path_cut, event.unresolved, event.real_path) == (f"{W}/....", True, False, None)


MOVED = (_open(100, -100, 3, "src", O_DIRECTORY) + _open(101, -100, 4, "key", O_DIRECTORY)
         + _x(102, "sys_enter_close", 0, 3) + _x(103, "sys_exit_dup2", 3, 4, 3) + _open(104, 3, 5, "answers.json"))


def test_a_moved_dirfd_is_followed_through_close_and_dup2():
    libbpf = (LIBBPF_B + f"Y 10 i0 ok {W}\nY 10 ret ok {W}/src\n" + _open(100, -100, 3, "src", O_DIRECTORY)
              + f"Y 10 i0 ok {W}\nY 10 ret ok {W}/key\n" + _open(101, -100, 4, "key", O_DIRECTORY)
              + f"Y 10 i0 ok {W}/key\nY 10 ret ok {W}/key/answers.json\n" + _open(104, 3, 5, "answers.json"))
    want = [f"{W}/src", f"{W}/key", f"{W}/key/answers.json"]
    assert [e.path for e in opens(libbpf)] == want  # the kernel's path of fd 3, whatever moved it
    assert [e.path for e in opens(BPFTRACE_B + MOVED)] == want  # bpftrace: the parser follows the fds


# --- every member of the kind, with bpftrace's fd tracking ---------------------------------

def _dirfd_cases():
    """(name, lines after a src dir at fd 3 and a key dir at fd 4, the path of ``openat(5, "f")``)."""
    at5 = _open(200, 5, 6, "f")
    return [
        ("dup", _x(110, "sys_exit_dup", 5, 4) + at5, f"{W}/key/f"),
        ("F_DUPFD", _x(110, "sys_exit_fcntl", 5, 4, 0, 5) + at5, f"{W}/key/f"),
        ("F_DUPFD_CLOEXEC", _x(110, "sys_exit_fcntl", 5, 4, 1030, 5) + at5, f"{W}/key/f"),
        ("dup3", _x(110, "sys_exit_dup3", 5, 4, 5, 0o2000000) + at5, f"{W}/key/f"),
        ("dup2 of a closed fd replaced", _x(110, "sys_exit_dup2", 5, 3, 5) + _x(111, "sys_enter_close", 0, 5)
         + _x(112, "sys_exit_dup2", 5, 4, 5) + at5, f"{W}/key/f"),
        ("a failed dup2 changes nothing", _x(110, "sys_exit_dup2", 5, 3, 5) + _x(111, "sys_exit_dup2", -9, 9, 5)
         + at5, f"{W}/src/f"),
        ("dup2 onto itself", _x(110, "sys_exit_dup2", 5, 4, 5) + _x(111, "sys_exit_dup2", 5, 5, 5) + at5,
         f"{W}/key/f"),
        ("close", _x(110, "sys_exit_dup", 5, 4) + _x(111, "sys_enter_close", 0, 5) + at5, None),
        ("close_range", _x(110, "sys_exit_dup", 5, 4) + _x(111, "sys_enter_close_range", 0, 4, -1, 0) + at5, None),
        ("close_range of others", _x(110, "sys_exit_dup", 5, 4) + _x(111, "sys_enter_close_range", 0, 6, 9, 0)
         + at5, f"{W}/key/f"),
        ("never made (received over a unix socket)", at5, None),
        ("an open that could not be placed", _open(110, 99, 5, "x", O_DIRECTORY) + at5, None),
    ]


@settings(max_examples=20, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=8))
def test_bpftrace_dirfds_follow_dup_fcntl_and_close_and_an_unknown_one_is_unresolved(cuts):
    base = BPFTRACE_B + _open(100, -100, 3, "src", O_DIRECTORY) + _open(101, -100, 4, "key", O_DIRECTORY)
    for name, lines, want in _dirfd_cases():
        got = [e for e in _at_any_split(base + lines, cuts) if isinstance(e, FileOpen)][-1]
        assert (got.path, got.unresolved) == ((want, False) if want else ("f", True)), name


CLOEXEC = 0o2000000


def _exec(ts: int, tgid: int, path: str = "/usr/bin/python3") -> str:
    return (f"E {ts} {tgid} {tgid} 3 tracepoint:syscalls:sys_enter_execve 2 10\nS {tgid} {path}\nZ {tgid}\n"
            f"R {ts + 1} {tgid} {tgid} 3 tracepoint:syscalls:sys_exit_execve 0\n")


def test_bpftrace_fds_are_inherited_shared_with_clone_files_and_closed_on_exec():
    key_dirs = (_open(100, -100, 3, "key", O_DIRECTORY | CLOEXEC) + _open(101, -100, 4, "key", O_DIRECTORY)
                + _open(102, -100, 5, "key", O_DIRECTORY))
    text = (BPFTRACE_B + key_dirs
            + _x(103, "sys_exit_fcntl", 0, 5, 2, 1)  # F_SETFD FD_CLOEXEC
            + _x(104, "sys_enter_ioctl", 0, 4, 0x5451)  # FIOCLEX ...
            + _x(105, "sys_enter_ioctl", 0, 4, 0x5450)  # ... then FIONCLEX
            + "F 106 10 10 2 11 17\n"  # fork (SIGCHLD): a copy
            + "F 107 10 10 2 12 1041\n"  # clone(CLONE_FILES|SIGCHLD): the same table
            + _x(108, "sys_enter_close", 0, 4, tgid=12)  # the sharer closes fd 4: gone for the parent too
            + _x(109, "sys_enter_close", 0, 5, tgid=11)  # the copy's close is its own
            + _exec(110, 11)  # fd 3 and 5 are close-on-exec: gone; 4 stays
            + "".join(_open(200 + fd, fd, 9, "f", tid=11).replace(" 10 11 ", " 11 11 ") for fd in (3, 4, 5))
            + "".join(_open(300 + fd, fd, 9, "f") for fd in (3, 4, 5)))
    got = [(e.host_pid, e.path, e.unresolved) for e in opens(text) if e.path.endswith("f")]
    assert got == [(11, "f", True), (11, f"{W}/key/f", False), (11, "f", True),
                   (10, f"{W}/key/f", False), (10, "f", True), (10, f"{W}/key/f", False)]


def test_close_range_cloexec_marks_and_unshare_copies():
    text = (BPFTRACE_B + _open(100, -100, 3, "key", O_DIRECTORY) + "F 101 10 10 2 12 1041\n"
            + _x(102, "sys_enter_close_range", 0, 0, -1, 2, tgid=12)  # UNSHARE: 12 closes its own copy
            + _x(103, "sys_enter_close_range", 0, 3, 3, 4)  # CLOEXEC: 10's fd 3 is marked
            + _open(104, 3, 9, "f") + _exec(105, 10) + _open(106, 3, 9, "g"))
    assert [(e.path, e.unresolved) for e in opens(text)][1:] == [(f"{W}/key/f", False), ("g", True)]


# --- magic links, the kernel's paths and their states ----------------------------------------

def test_magic_links_are_placed_where_the_fd_or_cwd_leads_and_else_unresolved():
    text = (BPFTRACE_B + _open(100, -100, 4, "key", O_DIRECTORY)
            + "".join(_open(101 + i, -100, -2, name) for i, name in enumerate((
                "/proc/self/fd/4/a", "/dev/fd/4/b", "/proc/thread-self/fd/4/c", "/proc/2/fd/4/d", "/proc/self/cwd/e",
                "/proc/3/fd/4/f", "/proc/self/root/etc/passwd", "/proc/self/fd/7/g", "/proc/self/fd/4"))))
    assert [(e.path, e.unresolved) for e in opens(text)][1:] == [
        (f"{W}/key/a", False), (f"{W}/key/b", False), (f"{W}/key/c", False), (f"{W}/key/d", False),
        (f"{W}/e", False), ("/proc/3/fd/4/f", True), ("/proc/self/root/etc/passwd", True),
        ("/proc/self/fd/7/g", True), ("/proc/self/fd/4", False)]  # the fd's own file: its open was judged


def test_with_the_kernels_paths_a_magic_link_is_kept_as_given_beside_where_it_led():
    text = (LIBBPF_B + f"Y 10 ret ok {W}/key/answers.json\n" + _open(100, -100, 5, "/proc/self/fd/4/answers.json")
            + _open(101, -100, -2, "/proc/self/cwd/nope"))
    assert opens(text) == [
        FileOpen(pid=2, host_pid=10, path="/proc/self/fd/4/answers.json", flags="O_RDONLY", result=5,
                 real_path=f"{W}/key/answers.json", unresolved=True),
        FileOpen(pid=2, host_pid=10, path="/proc/self/cwd/nope", flags="O_RDONLY", errno="ENOENT", unresolved=True)]


def test_the_kernel_side_says_when_it_has_no_path():
    text = (LIBBPF_B
            + "Y 10 i0 badf \n" + _open(100, 9, -9, "a")  # no such fd
            + "Y 10 i0 none \n" + _open(101, 8, -20, "b")  # a pipe: ENOTDIR
            + f"Y 10 i0 cut \nY 10 ret cut \n" + _open(102, 7, 3, "c")  # a directory past 4096 bytes
            + f"Y 10 ret none \n" + _open(103, -100, 4, "/dev/stdin")  # a pipe reopened: no path in the tree
            + _open(104, -100, -2, "d"))  # relative, and no Y line: never placed against a cwd
    assert [(e.path, e.unresolved, e.real_path, e.real_path_cut) for e in opens(text)] == [
        ("a", True, None, False), ("b", True, None, False), ("c", True, None, True),
        ("/dev/stdin", False, None, False), ("d", True, None, False)]


def test_a_symlink_and_dotdot_give_the_kernels_path_and_an_exec_its_cwd():
    text = (LIBBPF_B + f"Y 10 i0 ok {W}\nY 10 ret ok {W}/key/answers.json\n" + _open(100, -100, 3, "link")
            + f"Y 10 i0 ok {W}\nY 10 ret ok {W}/key/answers.json\n" + _open(101, -100, 4, "lnk/../answers.json")
            + "E 102 11 11 3 tracepoint:syscalls:sys_enter_execve 2 10\nS 11 /bin/cat\n"
            + f"Y 11 cwd ok {W}/key\nA 11 cat\nZ 11\nR 103 11 11 3 tracepoint:syscalls:sys_exit_execve 0\n")
    got = [e for _, e in parse([text.encode()], root_cwd=W)]
    assert [(e.path, e.real_path) for e in got if isinstance(e, FileOpen)] == [
        (f"{W}/link", f"{W}/key/answers.json"), (f"{W}/lnk/../answers.json", f"{W}/key/answers.json")]
    assert [e.cwd for e in got if isinstance(e, ProcessExec)] == [f"{W}/key"]


def test_renames_and_links_place_each_name_against_its_own_dirfd():
    text = (LIBBPF_B + f"S 10 old\nY 10 i0 ok {W}/src\nY 10 i1 ok {W}/key\n"
            "O 100 10 10 2 tracepoint:syscalls:sys_exit_renameat2 3 4 0 new\n"
            f"S 10 ../t\nY 10 i1 ok {W}/key\nO 101 10 10 2 tracepoint:syscalls:sys_exit_symlinkat -100 4 0 s\n"
            f"S 10 f\nY 10 i0 badf \nY 10 i1 ok {W}\nO 102 10 10 2 tracepoint:syscalls:sys_exit_linkat 9 -100 -9 h\n")
    got = [e for _, e in parse([text.encode()], root_cwd=W) if isinstance(e, FileChange)]
    assert got == [
        FileChange(pid=2, host_pid=10, syscall="renameat2", path=f"{W}/src/old", target=f"{W}/key/new"),
        FileChange(pid=2, host_pid=10, syscall="symlinkat", path=f"{W}/key/s", target="../t"),
        FileChange(pid=2, host_pid=10, syscall="linkat", path=f"{W}/h", target="f", result=-1, errno="EBADF",
                   unresolved=True)]


# --- lengths: whole up to what each backend reads, marked cut past it ------------------------

def _name(size: int) -> str:
    """A name of ``size`` bytes that resolves to key/answers.json (``.//`` adds one byte)."""
    tail = "key/answers.json"
    pad = size - len(tail)
    return "./" * (pad // 2) + ("/" if pad % 2 else "") + tail


def test_names_of_199_200_and_4095_bytes_are_whole_from_the_loader_and_4096_is_cut():
    sizes = (198, 199, 200, 4095, 4096)
    text = LIBBPF_B + "".join(f"Y 10 i0 ok {W}\n" + _open(100 + i, -100, -2, _name(n)) for i, n in enumerate(sizes))
    got = opens(text)
    assert [len(n) for n in map(_name, sizes)] == list(sizes)
    assert [(e.path, e.path_cut) for e in got[:4]] == [(f"{W}/key/answers.json", False)] * 4
    assert got[4].path_cut and got[4].path.endswith("...")  # 4096 bytes: the kernel refuses it (ENAMETOOLONG)


def test_bpftrace_names_of_199_bytes_or_more_are_cut_and_198_whole():
    text = BPFTRACE_B + _open(100, -100, -2, _name(198)) + _open(101, -100, -2, _name(199))
    # 199 bytes is all bpftrace keeps: whole or not, it cannot tell, so it is cut
    assert [(e.path_cut, e.path) for e in opens(text)] == [
        (False, f"{W}/key/answers.json"), (True, f"{W}/key/answers.json...")]


def test_exec_paths_and_strings_that_were_cut_are_marked():
    text = (BPFTRACE_B + f"E 1 11 11 3 tracepoint:syscalls:sys_enter_execve 2 10\nS 11 /{'a' * 198}\nA 11 x\n"
            f"A 11 {'b' * 199}\nZ 11\nR 2 11 11 3 tracepoint:syscalls:sys_exit_execve -2\n"
            f"E 3 12 12 4 tracepoint:syscalls:sys_enter_execve 2 10\nS 12 /bin/true\nA 12 true\nT 12 env\nZ 12\n"
            "R 4 12 12 4 tracepoint:syscalls:sys_exit_execve 0\n"
            "E 5 13 13 5 tracepoint:syscalls:sys_enter_execve 2 10\nS 13 /bin/true\nA 13 true\nZ 13\n"
            "R 6 13 13 5 tracepoint:syscalls:sys_exit_execve 0\n")
    got = [e for _, e in parse([text.encode()], root_cwd=W) if isinstance(e, ProcessExec)]
    assert [(e.path_cut, e.argv_cut) for e in got] == [(True, True), (False, True), (False, False)]


def test_an_fd_line_of_no_known_call_is_raw():
    got = [e for _, e in parse([(BPFTRACE_B + _x(1, "sys_exit_pipe", 3, 0)).encode()], root_cwd=W)]
    assert got == [WitnessRaw(witness="ebpf", line="X 1 10 10 2 tracepoint:syscalls:sys_exit_pipe 3 0 0 0")]


ALL = (LIBBPF_B + f"Y 10 i0 ok {W}\nY 10 ret ok {W}/key/answers.json\n" + _open(100, -100, 3, LONG)
       + f"S 10 old\nY 10 i0 ok {W}/src\nY 10 i1 ok {W}/key\n"
       "O 101 10 10 2 tracepoint:syscalls:sys_exit_renameat2 3 4 0 new\n"
       + f"Y 10 i0 ok {W}/a\nb\nY 10 ret ok {W}/a\nb/c\n" + _open(102, 3, 4, "c")  # a newline inside a path
       + "E 102 11 11 3 tracepoint:syscalls:sys_enter_execve 2 10\nS 11 /bin/cat\n"
       + f"Y 11 cwd ok {W}/key\nA 11 cat\nZ 11\nR 103 11 11 3 tracepoint:syscalls:sys_exit_execve 0\n")


@settings(max_examples=50, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=len(ALL)), max_size=20))
def test_the_kernels_paths_whole_byte_at_a_time_and_at_any_split(cuts):
    whole = [e for _, e in parse([ALL.encode()], root_cwd=W)]
    assert [(type(e).__name__, e.path, getattr(e, "real_path", None)) for e in whole] == [
        ("FileOpen", f"{W}/key/answers.json", None), ("FileChange", f"{W}/src/old", None),
        ("FileOpen", f"{W}/a\nb/c", None), ("ProcessExec", "/bin/cat", None)]
    assert whole[-1].cwd == f"{W}/key"
    assert _at_any_split(ALL, cuts) == whole
    assert [e for _, e in parse([ALL.encode()[i:i + 1] for i in range(len(ALL.encode()))], root_cwd=W)] == whole


def test_a_chdirs_directory_line_is_the_cwd_it_made():
    # chdir's Y i0 is read at its return: the new cwd, not the one its name is relative to (an
    # exec whose own cwd line is missing, lost with its record, falls back to the one followed)
    exec_ = ("E {0} 10 10 2 tracepoint:syscalls:sys_enter_execve 1 9\nS 10 /bin/true\nZ 10\n"
             "R {0} 10 10 2 tracepoint:syscalls:sys_exit_execve 0\n")
    text = (LIBBPF_B + f"Y 10 i0 ok {W}/sub\nO 100 10 10 2 tracepoint:syscalls:sys_exit_chdir -100 0 0 sub\n"
            + exec_.format(101) + "E 102 10 10 2 tracepoint:syscalls:sys_enter_fchdir 3 0\nZ 10\n"
            "R 103 10 10 2 tracepoint:syscalls:sys_exit_fchdir 0\n" + exec_.format(104))
    got = [e for _, e in parse([text.encode()], root_cwd=W) if isinstance(e, ProcessExec)]
    assert [e.cwd for e in got] == [f"{W}/sub", None]  # fchdir: the fds are not followed with kernel paths


def _mkdir(ts: int, ret: int, name: str) -> str:
    return f"O {ts} 10 10 2 tracepoint:syscalls:sys_exit_mkdir -100 0 {ret} {name}\n"


def test_with_the_kernels_paths_a_change_through_a_magic_link_is_placed_by_its_y_line():
    text = (LIBBPF_B + f"Y 10 i0 ok {W}/key\n" + _mkdir(100, 0, "/proc/self/fd/4/new")
            + _mkdir(101, 0, "/proc/self/fd/5/other")  # no Y line: the program did not follow it
            + f"Y 10 i0 badf \n" + _mkdir(102, -9, "/dev/fd/9/gone"))
    got = [(e.path, e.unresolved) for _, e in parse([text.encode()], root_cwd=W) if isinstance(e, FileChange)]
    assert got == [(f"{W}/key/new", False), ("/proc/self/fd/5/other", True), ("/dev/fd/9/gone", True)]
    for cuts in ([1], [len(LIBBPF_B) + 3], [len(text) // 2, len(text) - 5]):
        assert [(e.path, e.unresolved) for e in _at_any_split(text, cuts) if isinstance(e, FileChange)] == got


def _exec_of(arg: str) -> str:
    return ("E 102 11 11 3 tracepoint:syscalls:sys_enter_execve 2 10\nS 11 /bin/echo\n"
            f"Y 11 cwd ok {W}\nA 11 echo\nA 11 {arg}\nZ 11\nR 103 11 11 3 tracepoint:syscalls:sys_exit_execve 0\n")


def test_argv_strings_have_the_limit_the_b_line_gives():
    long = "x" * 3000  # what Claude Code's Bash tool passes to bash -c: its snapshot, then the command
    [new] = [e for _, e in parse([(LIBBPF_B.replace("kernel", "kernel 4097") + _exec_of(long)).encode()], root_cwd=W)
             if isinstance(e, ProcessExec)]
    assert (new.argv, new.argv_cut) == (["echo", long], False)
    # a ledger of a loader that kept 199 bytes (its B line has no argv limit): taken as cut
    [old] = [e for _, e in parse([(LIBBPF_B + _exec_of("y" * 199)).encode()], root_cwd=W) if isinstance(e, ProcessExec)]
    assert (old.argv, old.argv_cut) == (["echo", "y" * 199 + "..."], True)
    [whole] = [e for _, e in parse([(LIBBPF_B.replace("kernel", "kernel 4097") + _exec_of("z" * 4096)).encode()],
                                   root_cwd=W) if isinstance(e, ProcessExec)]
    assert whole.argv_cut and whole.argv[1].endswith("...")  # 4096 bytes: the limit less one and more, cut


def test_a_magic_link_spelt_with_dots_or_doubled_slashes_is_a_magic_link():
    # the kernel reads /proc/self/./fd/4/ and //proc/self/fd/4/ as /proc/self/fd/4/: placed
    # through fd 4 (bpftrace), or unresolved where the program did not walk it (the loader
    # walks the plain spelling only): never judged as a path under /proc/self
    names = ("/proc/self/./fd/4/a", "//proc/self/fd/4/b", "/proc/self//fd/4/c", "/proc/./self/cwd/d",
             "/proc/self/./root/run/lock/e")
    text = BPFTRACE_B + _open(100, -100, 4, "key", O_DIRECTORY) + "".join(
        _mkdir(101 + i, 0, name) for i, name in enumerate(names))
    got = [(e.path, e.unresolved) for _, e in parse([text.encode()], root_cwd=W) if isinstance(e, FileChange)]
    assert got == [(f"{W}/key/a", False), (f"{W}/key/b", False), (f"{W}/key/c", False), (f"{W}/d", False),
                   ("/proc/self/root/run/lock/e", True)]
    text = LIBBPF_B + "".join(_mkdir(101 + i, 0, name) for i, name in enumerate(names))
    got = [(e.path, e.unresolved) for _, e in parse([text.encode()], root_cwd=W) if isinstance(e, FileChange)]
    assert got == [("/proc/self/fd/4/a", True), ("/proc/self/fd/4/b", True), ("/proc/self/fd/4/c", True),
                   ("/proc/self/cwd/d", True), ("/proc/self/root/run/lock/e", True)]
