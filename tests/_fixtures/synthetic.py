"""A deterministic, strace-like synthetic event stream (demo and benchmarks).

It imitates what the strace witness records while a coding agent works: processes
exec programs whose start-up opens the same libraries and modules in the same order
every time (as the dynamic loader and Python's import system do), failed probes along
a search path, then a workload (``git grep`` opening the tree's files in order), some
connects and tree changes, and an exit. strace's ``-tt`` clock has microsecond
resolution, so wall times are whole microseconds; events are a few microseconds apart.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from ledger.events import Event, FileChange, FileOpen, NetConnect, ProcessExec, ProcessExit

__all__ = ["strace_like"]

_LIBS = ["/etc/ld.so.cache", "/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libm.so.6",
         "/lib/x86_64-linux-gnu/libz.so.1", "/lib/x86_64-linux-gnu/libpcre2-8.so.0"]
_STDLIB = ["encodings/__init__", "codecs", "io", "abc", "site", "os", "stat", "posixpath",
           "genericpath", "_collections_abc", "_sitebuiltins", "email/__init__", "json/__init__",
           "json/decoder", "json/scanner", "json/encoder", "re/__init__", "enum", "functools",
           "collections/__init__", "keyword", "operator", "reprlib", "asyncio/__init__",
           "asyncio/base_events", "concurrent/futures/__init__", "logging/__init__", "selectors",
           "socket", "ssl", "typing", "contextlib", "heapq", "weakref", "subprocess", "signal"]
_TREE = [f"/work/sandbox/src/click/{m}.py" for m in (
    "__init__", "_compat", "_termui_impl", "_textwrap", "_winconsole", "core", "decorators",
    "exceptions", "formatting", "globals", "parser", "shell_completion", "termui", "testing",
    "types", "utils")] + [f"/work/sandbox/tests/test_{m}.py" for m in (
    "arguments", "basic", "chain", "commands", "compat", "context", "defaults", "formatting",
    "imports", "info_dict", "options", "parser", "shell_completion", "termui", "testing", "types",
    "utils")]
_RO = "O_RDONLY|O_CLOEXEC"


def _program(rng: random.Random) -> tuple[str, list[str], list[tuple[str, str, str | None]]]:
    """(path, argv, opens) for one exec; opens are (path, flags, errno or None)."""
    kind = rng.random()
    if kind < 0.45:
        opens = [(p, _RO, None) for p in _LIBS] + [
            ("/work/sandbox/.git/config", _RO, None), ("/work/sandbox/.git/HEAD", _RO, None),
            ("/work/sandbox/.git/index", _RO, None)] + [(p, _RO, None) for p in _TREE]
        return "/usr/bin/git", ["git", "grep", "-n", rng.choice(["def main", "class Context", "echo("])], opens
    if kind < 0.85:
        opens = [(p, _RO, None) for p in _LIBS[:3]]
        for mod in _STDLIB[: rng.randint(12, len(_STDLIB))]:
            opens.append((f"/usr/lib/python3.11/__pycache__/{mod.split('/')[-1]}.cpython-311.pyc", _RO, "ENOENT"))
            opens.append((f"/usr/lib/python3.11/{mod}.py", _RO, None))
        return "/usr/bin/python3", ["python3", "-c", "import email, json, asyncio"], opens
    opens = [(p, _RO, None) for p in _LIBS[:2]] + [("/work/sandbox/out.txt", "O_WRONLY|O_CREAT|O_TRUNC", None)]
    return "/bin/sh", ["sh", "-c", "ls -la > out.txt"], opens


def strace_like(n: int, *, seed: int = 7, start_ns: int = 1_767_225_600_000_000_000) -> Iterator[tuple[int, int, Event]]:
    """Yield exactly ``n`` tuples ``(wall_ns, mono_ns, event)`` of a strace-like stream.

    Args:
        n: number of events.
        seed: the stream is a pure function of ``seed``.
        start_ns: wall-clock start, ns since the Unix epoch (a whole microsecond).
    """
    rng = random.Random(seed)
    clock = [start_ns, 1_000_000_000]
    emitted = 0
    parent, next_pid = 100, 101

    def tick() -> tuple[int, int]:
        step = rng.choice((1, 1, 2, 3, 5, 8, 13, 40)) * 1_000
        clock[0] += step
        clock[1] += step + rng.randint(0, 2) * 1_000
        return clock[0], clock[1]

    while True:
        path, argv, opens = _program(rng)
        pid, next_pid = next_pid, next_pid + 1
        events: list[Event] = [ProcessExec(pid=pid, host_pid=pid + 40_000, ppid=parent, path=path,
                                           argv=argv, cwd="/work/sandbox")]
        fd = 3
        for p, flags, errno in opens:
            if errno:
                events.append(FileOpen(pid=pid, host_pid=pid + 40_000, path=p, flags=flags, result=None, errno=errno))
            else:
                events.append(FileOpen(pid=pid, host_pid=pid + 40_000, path=p, flags=flags,
                                       access="w" if "O_WRONLY" in flags else "r", result=fd))
        if rng.random() < 0.2:
            events.append(NetConnect(pid=pid, host_pid=pid + 40_000, family="AF_INET", address="10.89.0.2",
                                     port=3128, result=0))
        if rng.random() < 0.2:
            events.append(FileChange(pid=pid, host_pid=pid + 40_000, syscall="unlink",
                                     path=f"/tmp/tmp{rng.randint(0, 99999):05d}", result=0))
        events.append(ProcessExit(pid=pid, host_pid=pid + 40_000, code=0 if rng.random() < 0.9 else 1))
        for event in events:
            if emitted == n:
                return
            wall, mono = tick()
            yield wall, mono, event
            emitted += 1
