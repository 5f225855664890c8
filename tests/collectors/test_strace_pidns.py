"""Issue 19, item 7: a traced program that forks inside a nested PID namespace (``unshare
-pf``, bubblewrap ``--unshare-pid``). Its clone returns the child's pid in the inner
namespace; the parser tracks pids in strace's namespace (``--pidns-translation``), makes no
phantom process, and gives no process a parent it did not have."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from collectors.strace import NEED_DATA, StraceParser, strace_argv
from ledger.events import ProcessExec, ProcessExit, WitnessRaw

T = "1796058818.600000"


def events(text: str, **kw) -> list:
    parser = StraceParser(**kw)
    parser.feed(text.encode())
    parser.close()
    out = []
    while (item := parser.next_event()) is not NEED_DATA:
        out.append(item.event)
    return out


FLAGS = "child_stack=NULL, flags=CLONE_CHILD_CLEARTID|CLONE_CHILD_SETTID|SIGCHLD, child_tidptr=0x7f"
# pid 2 is the chamber's traced root (strace is pid 1); it runs ``unshare -pf sh -c 'true; sleep 0 & wait'``:
# unshare (pid 5 here, pid 1 inside) forks twice; its clones return 2 and 3, the inner numbers.
NESTED = (
    f'2 {T} execve("/bin/sh", ["sh"], 0x1 /* 2 vars */) = 0\n'
    f"2 {T} clone({FLAGS}) = 5\n"
    f'5 {T} execve("/usr/bin/unshare", ["unshare", "-pf", "sh"], 0x1 /* 2 vars */) = 0\n'
    f"5 {T} vfork( <unfinished ...>\n"
    f'6 {T} execve("/bin/true", ["true"], 0x1 /* 2 vars */ <unfinished ...>\n'
    f"5 {T} <... vfork resumed>) = 2 /* 6 in strace's PID NS */\n"
    f"6 {T} <... execve resumed>) = 0\n"
    f"6 {T} +++ exited with 0 +++\n"
    f"5 {T} clone({FLAGS}) = 3 /* 7 in strace's PID NS */\n"
    f'7 {T} execve("/bin/sleep", ["sleep", "0"], 0x1 /* 2 vars */) = 0\n'
    f"7 {T} +++ exited with 0 +++\n"
    f"5 {T} +++ exited with 0 +++\n"
    f'2 {T} execve("/bin/echo", ["echo"], 0x1 /* 2 vars */) = 0\n'
    f"2 {T} +++ exited with 0 +++\n"
)


def test_issue_example_no_phantom_and_no_parent_borrowed_from_one():
    evs = events(NESTED)
    assert [(e.pid, e.ppid, e.path) for e in evs if isinstance(e, ProcessExec)] == [
        (2, None, "/bin/sh"),
        (5, 2, "/usr/bin/unshare"),
        (6, 5, "/bin/true"),  # its clone said 2: the inner number
        (7, 5, "/bin/sleep"),  # its clone said 3
        (2, None, "/bin/echo"),  # the root keeps no parent: the phantom 2 of the inner namespace is gone
    ]
    assert [e.pid for e in evs if isinstance(e, ProcessExit)] == [6, 7, 5, 2]
    assert not [e for e in evs if isinstance(e, WitnessRaw)]


def test_the_child_clone_comment_is_read_at_any_split():
    whole = events(NESTED)
    data = NESTED.encode()
    for step in (1, 3, 17):
        parser = StraceParser()
        for i in range(0, len(data), step):
            parser.feed(data[i:i + step])
        parser.close()
        out = []
        while (item := parser.next_event()) is not NEED_DATA:
            out.append(item.event)
        assert out == whole


def test_a_clone_in_strace_namespace_has_no_comment_and_is_taken_as_returned():
    evs = events(f'2 {T} execve("/bin/sh", ["sh"], 0x1 /* 2 vars */) = 0\n'
                 f"2 {T} clone3({{flags=CLONE_VM|CLONE_VFORK, exit_signal=SIGCHLD}} => {{parent_tid=[0]}}, 88)"
                 f" = 9\n"
                 f'9 {T} execve("/bin/ls", ["ls"], 0x1 /* 2 vars */) = 0\n')
    assert [(e.pid, e.ppid) for e in evs if isinstance(e, ProcessExec)] == [(2, None), (9, 2)]


def test_strace_argv_asks_for_pid_namespace_translation():
    assert "--pidns-translation" in strace_argv("x")


@pytest.mark.skipif(shutil.which("strace") is None or shutil.which("unshare") is None or os.geteuid() != 0,
                    reason="needs strace, unshare and root (CLONE_NEWPID)")
def test_real_strace_in_a_nested_pid_namespace(tmp_path):
    out = tmp_path / "trace"
    script = "/bin/true; /bin/sleep 0 & wait"
    argv = ["strace", *strace_argv(str(out)), "unshare", "-pf", "/bin/sh", "-c", script]
    proc = subprocess.run(argv, capture_output=True, timeout=60)
    if proc.returncode != 0 and (b"ptrace" in proc.stderr or b"unshare" in proc.stderr):
        pytest.skip(f"not permitted here: {proc.stderr[-300:]!r}")
    assert proc.returncode == 0, proc.stderr
    parser = StraceParser()
    parser.feed(out.read_bytes())
    parser.close()
    evs = []
    while (item := parser.next_event()) is not NEED_DATA:
        evs.append(item.event)
    execs = [e for e in evs if isinstance(e, ProcessExec) and e.result == 0]
    by_path = {e.path: e for e in execs}
    shell = by_path["/bin/sh"]
    assert by_path["/bin/true"].ppid == shell.pid and by_path["/bin/sleep"].ppid == shell.pid
    assert shell.ppid == by_path["/usr/bin/unshare"].pid
    pids = {e.pid for e in execs}
    exits = {e.pid for e in evs if isinstance(e, ProcessExit)}
    assert pids <= exits  # every process that ran also ended: none is a phantom of an inner number
    assert all(e.ppid is None or e.ppid in pids for e in execs)
