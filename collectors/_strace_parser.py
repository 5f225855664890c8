"""`StraceParser`: the strace witness's sans-IO parser (see `collectors.strace` for what
becomes what). No trio, files or clocks: the same bytes always give the same events."""

from __future__ import annotations

import posixpath
import re
from collections import deque
from typing import Callable, Iterable, Literal, Mapping, NamedTuple, Sequence, TypedDict

from collectors._lines import take_lines
from collectors._strace_lines import (
    AT_FDCWD,
    Call,
    Exited,
    Result,
    SignalDelivery,
    Superseded,
    decode_string,
    parse_fd,
    parse_line,
    parse_sockaddr,
    split_call,
)
from ledger import NEED_DATA, NeedData, ParserClosedError, redact_exec
from ledger.events import (
    Event,
    FileAccess,
    FileChange,
    FileOpen,
    NetConnect,
    NetSend,
    ProcessExec,
    ProcessExit,
    ProcessFork,
    ProcessSyscall,
    WitnessRaw,
    WitnessStopped,
)

__all__ = ["AUDITED_SYSCALLS", "DENIED_SYSCALLS", "NEED_DATA", "STRACE_SYSCALLS", "UNFINISHED", "WITNESS",
           "ParserClosedError", "Stamped", "StraceParser"]

WITNESS = "strace"
"""The ``witness`` name of the events this parser makes and of its ledger source."""

UNFINISHED = "UNFINISHED"
"""``errno`` of an event whose call never returned a value (not a kernel errno)."""




class Ident(TypedDict):
    """A process's two identities, as every process event carries them (``**ident``)."""

    pid: int  # in the chamber's namespace
    host_pid: int | None  # on the host; None when unknown


class Stamped(NamedTuple):
    """An event with the time strace saw it.

    Attributes:
        wall_ns: ns since the Unix epoch, from the line's ``-ttt`` stamp (the call's entry
            for a call split over lines); None for an unparsed line before any stamp.
        event: the event.
    """

    wall_ns: int | None
    event: Event


_CLONES = frozenset({"clone", "clone3", "fork", "vfork"})
_OPENS = frozenset({"open", "openat", "openat2", "creat"})
# syscall -> (index of the dirfd or None, index of the path, index of the second path or None,
#             index of its dirfd or None); the second path is FileChange.target.
_CHANGES: dict[str, tuple[int | None, int, int | None, int | None]] = {
    "unlink": (None, 0, None, None), "unlinkat": (0, 1, None, None),
    "rmdir": (None, 0, None, None), "mkdir": (None, 0, None, None), "mkdirat": (0, 1, None, None),
    "chmod": (None, 0, None, None), "fchmodat": (0, 1, None, None), "truncate": (None, 0, None, None),
    "rename": (None, 0, 1, None), "renameat": (0, 1, 3, 2), "renameat2": (0, 1, 3, 2),
    "link": (None, 1, 0, None), "linkat": (2, 3, 1, 0),
    "symlink": (None, 1, 0, None), "symlinkat": (1, 2, 0, None),
    "mknod": (None, 0, None, None), "mknodat": (0, 1, None, None),
}  # fmt: skip
_SENDS = frozenset({"sendto", "sendmsg", "sendmmsg"})
_CORE_SYSCALLS = (
    "execve", "execveat", "clone", "clone3", "fork", "vfork", "exit_group",
    "kill", "tkill", "tgkill",
    "open", "openat", "openat2", "creat",
    "unlink", "unlinkat", "rename", "renameat", "renameat2", "mkdir", "mkdirat", "rmdir",
    "chmod", "fchmodat", "truncate", "symlink", "symlinkat", "link", "linkat",
    "chdir", "fchdir",
    "mknod", "mknodat",
    "connect", "bind", "sendto", "sendmsg", "sendmmsg",
)  # fmt: skip

DENIED_SYSCALLS: tuple[str, ...] = (
    "io_uring_setup", "io_uring_enter", "io_uring_register",  # reads and opens the trace cannot name
    "open_by_handle_at", "name_to_handle_at",  # opens by file handle, no path
    "fanotify_init", "fanotify_mark",  # hands out fds of files other processes open
    "mount", "umount2", "mount_setattr", "open_tree", "move_mount",  # a tree moved is paths that lie
    "fsopen", "fsconfig", "fsmount", "fspick",
    "pidfd_getfd",  # an fd taken from another process
)  # fmt: skip
"""Syscalls the witness cannot see through: the chamber's seccomp profile refuses them and,
when the witness runs, hands them to it (SECCOMP_RET_TRACE), which fails them with EPERM
(``-e inject``) so each attempt is in the trace. The audit is in docs/architecture.md."""

AUDITED_SYSCALLS: tuple[str, ...] = (
    *DENIED_SYSCALLS, "ptrace", "process_vm_readv", "process_vm_writev", "memfd_create", "seccomp",
)
"""Traced calls that become `ProcessSyscall` (the tracer itself needs ptrace and
process_vm_readv, so those are seen, not denied; ``seccomp``: a filter an agent installs
for itself, allowed unless it asks for a user-notification listener, which the chamber's
profile refuses before the tracer sees it)."""

STRACE_SYSCALLS: tuple[str, ...] = (*_CORE_SYSCALLS, *AUDITED_SYSCALLS)
"""The syscalls the witness traces, as the kernel spells them."""

_LEGACY = frozenset({"open", "creat", "fork", "vfork", "unlink", "rename", "mkdir", "rmdir",
                     "chmod", "symlink", "link", "mknod"})  # absent on arm64 and riscv: '?' in the filter


_AUDITED = frozenset(AUDITED_SYSCALLS)
_MEMORY = frozenset({"process_vm_readv", "process_vm_writev"})
_IOV_BASE = re.compile(r'iov_base=("(?:[^"\\]|\\.)*"(?:\.\.\.)?)')
_MSG_NAME = re.compile(r"msg_name=(\{sa_family=[^{}]*\})")
_VERBATIM_TARGET = frozenset({"symlink", "symlinkat"})
_FLAGS = re.compile(r"flags=([A-Z0-9_|]+)")


class _Fs:
    """A cwd, shared by the threads and CLONE_FS children that share a fs_struct."""

    __slots__ = ("cwd",)

    def __init__(self, cwd: str | None):
        self.cwd = cwd


class _Task:
    __slots__ = ("tgid", "fs")

    def __init__(self, tgid: int, fs: _Fs):
        self.tgid, self.fs = tgid, fs


class _Pending(NamedTuple):
    call: Call
    superseded: bool = False


class SyscallParserOutput:
    """What the syscall witnesses' parsers (strace's, eBPF's) share: the queue of events
    they give out and the counts ``witness.stopped`` reports.

    A subclass sets `witness` (its ``witness.started`` name) and keeps ``_out`` (a deque of
    `Stamped`), ``lines``, ``events``, ``parse_failures`` and ``bytes``.
    """

    witness: str
    _out: deque[Stamped]
    lines: int
    events: int
    parse_failures: int
    bytes: int

    def next_event(self) -> Stamped | NeedData:
        """The next ``(wall_ns, event)``, or `NEED_DATA` when the bytes so far are used up."""
        if not self._out:
            return NEED_DATA
        self.events += 1
        return self._out.popleft()

    def witness_stopped(self) -> WitnessStopped:
        """The ``witness.stopped`` event with this parser's counts."""
        return WitnessStopped(witness=self.witness, lines=self.lines, events=self.events,
                              parse_failures=self.parse_failures, bytes=self.bytes)


class StraceParser(SyscallParserOutput):
    """Turns the bytes of a strace trace into ledger events; sans-IO.

    Feed bytes with `feed`, take events with `next_event` until it returns `NEED_DATA`,
    and call `close` at end of input to flush a last line without a newline, calls still
    unfinished and lines held for a child whose clone had not returned yet.

    Attributes:
        lines: lines parsed so far.
        events: events returned so far.
        parse_failures: lines kept as `WitnessRaw` because the grammar did not know them.
        bytes: bytes fed so far.
        unmapped: understood lines with no event kind, kept as `WitnessRaw`.
        signals: signal-delivery lines (no event).
        unfinished: events emitted with ``errno`` `UNFINISHED`.
        truncated: strings or argv arrays that strace cut (``-s``).
        root_pid: the printed pid of the first process of the trace (the traced
            command), None until a line of a process is parsed.
        root_exited: whether that process's exit (``+++ exited`` / ``killed``) was seen.
    """

    witness = WITNESS

    def __init__(
        self,
        *,
        root_cwd: str | None = None,
        chamber_pid: Callable[[int], int | None] | None = None,
        host_pid: Callable[[int], int | None] | None = None,
        fingerprint_key: bytes | None = None,
        credential_patterns: Sequence[str] = (),
        max_line_bytes: int = 8 << 20,
    ):
        """Make a parser for one trace.

        strace prints the pids of its own pid namespace. Traced from the host, they are
        host pids and ``chamber_pid`` names each in the chamber; traced from inside the
        chamber (the witness), they are chamber pids and ``host_pid`` finds each on the
        host. Give one or neither (then ``pid`` and ``host_pid`` are both the printed pid).

        Args:
            root_cwd: initial cwd of the traced command (the first process seen), so its
                relative paths resolve before a ``-yy`` ``AT_FDCWD</cwd>`` shows it.
            chamber_pid: maps a printed (host) pid to the pid in the chamber's namespace;
                None when unknown (the event's ``pid`` is then 0). Called once per
                process, when its first event is built.
            host_pid: maps a printed (chamber) pid to the host pid; None when unknown (the
                event's ``host_pid`` is then None). Called once per process, as early as
                the trace names it: when its parent's clone returns, else at its first
                event (a short-lived process may be gone by its first event).
            fingerprint_key: the run's key for secrets: each ``ProcessExec``'s argv and
                env (printed with ``-v``) go through `ledger.redact_exec` with it, so
                credentials in the command line (URL userinfo, header values, key
                options, key-shaped tokens), credential variables and key-like values
                become keyed fingerprints, argv keeping its length. None keeps them
                verbatim (parsing one's own traces; the witness always passes the run's key).
            credential_patterns: extra credential variable names (the scenario's
                ``credential_patterns``), for `ledger.redact_exec`.
            max_line_bytes: a longer line is cut there, deterministically, and the pieces
                parsed as lines of their own (they become `WitnessRaw`), bytes.

        Raises:
            ValueError: both ``chamber_pid`` and ``host_pid`` are given (our misuse).
        """
        if chamber_pid is not None and host_pid is not None:
            raise ValueError("give chamber_pid (strace on the host) or host_pid (strace in the chamber), not both")
        self._root_cwd = root_cwd
        self._chamber_pid = chamber_pid
        self._host_pid = host_pid
        self._key = fingerprint_key
        self._patterns = tuple(credential_patterns)
        self._max_line = max_line_bytes
        self._buf = bytearray()
        self._out: deque[Stamped] = deque()
        self._tasks: dict[int, _Task] = {}
        self._ppid: dict[int, int | None] = {}
        self._pids: dict[int, int | None] = {}  # printed tgid -> the other namespace's pid
        self._learned: dict[int, int] = {}  # printed pid -> host pid, found as the trace arrived
        self._pending: dict[int, _Pending] = {}
        self._fds: dict[tuple[int, int], str] = {}  # (tgid, fd) -> path, from -yy results of opens
        self._held: dict[int, list[tuple[int | None, object, str]]] = {}
        self._extra: list[Event] = []  # more events of the call just parsed (sendmmsg's destinations)
        self._seen_any = False
        self._last_ns: int | None = None
        self._closed = False
        self.root_pid: int | None = None
        self.root_exited = False
        self.lines = self.events = self.parse_failures = self.bytes = 0
        self.unmapped = self.signals = self.unfinished = self.truncated = 0

    # --- bytes in, events out ------------------------------------------------------------

    def feed(self, data: bytes | bytearray) -> None:
        """Add bytes of the trace; any split point is fine.

        Raises:
            ParserClosedError: after `close`.
        """
        if self._closed:
            raise ParserClosedError("feed() after close()")
        self.bytes += len(data)
        self._buf += data
        for line in take_lines(self._buf, self._max_line):
            self._line(line)

    def learn_host_pids(self, host_pids: Mapping[int, int]) -> None:
        """Host pids of printed pids, found when the bytes about to be fed arrived.

        Found then, a short-lived process is still alive; by the time its line is parsed
        it may be gone. Give them just before the `feed` of those bytes: a pid the trace
        names later again (reused in the chamber) is then learned anew, in order. A
        process with a learned host pid is not asked of the ``host_pid`` mapper.
        """
        self._learned.update(host_pids)

    def close(self) -> None:
        """End of input: flush the last partial line, held lines and unfinished calls."""
        if self._closed:
            return
        self._closed = True
        if self._buf:
            line = bytes(self._buf)
            self._buf.clear()
            self._line(line)
        while self._pending or self._held:  # a released line may leave a call pending
            for tid in list(self._pending):
                self._flush_unfinished(tid)
            self._release_held()

    # --- lines ---------------------------------------------------------------------------

    def _line(self, raw: bytes) -> None:
        self.lines += 1
        text = raw.decode("utf-8", "backslashreplace").rstrip("\r")
        wall_ns, parsed = parse_line(text)
        if wall_ns is not None:
            self._last_ns = wall_ns
        if parsed is None:
            self._raw(wall_ns if wall_ns is not None else self._last_ns, text, failure=True)
            return
        self._dispatch(wall_ns, parsed, text)

    def _dispatch(self, wall_ns: int | None, parsed: object, text: str) -> None:
        tid = parsed.pid  # type: ignore[attr-defined]
        if tid not in self._tasks and (tid in self._held or self._clone_in_flight()):
            self._held.setdefault(tid, []).append((wall_ns, parsed, text))
            return
        task = self._task(tid)
        if isinstance(parsed, SignalDelivery):
            self.signals += 1
        elif isinstance(parsed, Exited):
            self._exited(tid, task, parsed)
        elif isinstance(parsed, Superseded):
            if (p := self._pending.get(tid)) and p.call.name in ("execve", "execveat"):
                self._pending[tid] = p._replace(superseded=True)
            self._tasks.pop(parsed.old_pid, None)
        elif isinstance(parsed, Call):
            self._call(tid, parsed, text)

    def _call(self, tid: int, c: Call, text: str) -> None:
        if c.state == "unfinished":
            self._flush_unfinished(tid)
            self._pending[tid] = _Pending(c)
        elif c.state == "pid_changed":  # an execve from a thread: it takes the leader's pid
            self._flush_unfinished(c.new_pid)  # type: ignore[arg-type]
            self._pending[c.new_pid] = _Pending(c)  # type: ignore[index]
        elif c.state == "resumed":
            p = self._pending.get(tid)
            if p is None or p.call.name != c.name:
                self._raw(c.wall_ns, text, failure=True)
                return
            del self._pending[tid]
            joined = p.call.body + c.body.removeprefix(" <unavailable>")
            self._complete(tid, p.call._replace(body=joined, state="complete"),
                           _text(p.call, joined), superseded=p.superseded)
        else:
            self._complete(tid, c, text)

    def _complete(self, tid: int, c: Call, text: str, *, superseded: bool = False) -> None:
        split = split_call(c.body)
        child = None
        if split is None:
            self._raw(c.wall_ns, text, failure=True)
        else:
            args, res = split
            res = Result(0) if superseded else res
            if c.name in _CLONES and (outer := _strace_ns_pid(c.body)) is not None:
                res = res._replace(value=outer)  # the child as strace's namespace (and its lines) name it
            try:
                event = self._event(tid, c, args, res)
            except (IndexError, ValueError):
                event = None
                self._raw(c.wall_ns, text, failure=True)
            if event is False:
                self.unmapped += 1
                self._raw(c.wall_ns, text, failure=False)
            elif event is not None:
                self.unfinished += res.value is None and res.errno is None
                self._out.append(Stamped(c.wall_ns, event))
            self._out.extend(Stamped(c.wall_ns, extra) for extra in self._extra)
            self._extra.clear()
            child = res.value
        if c.name in _CLONES:  # a child's lines wait until its pid is known
            for held in self._held.pop(child, []) if child and child > 0 else []:
                self._dispatch(*held)
            self._release_held()

    def _flush_unfinished(self, tid: int) -> None:
        p = self._pending.pop(tid, None)
        if p is None:
            return
        c = p.call
        body = c.body + (") = 0" if p.superseded else ") = ?")
        self._complete(tid, c._replace(body=body, state="complete"), _text(c, body),
                       superseded=p.superseded)

    def _raw(self, wall_ns: int | None, text: str, *, failure: bool) -> None:
        if failure:
            self.parse_failures += 1
        self._out.append(Stamped(wall_ns, WitnessRaw(witness=WITNESS, line=text)))

    # --- processes -----------------------------------------------------------------------

    def _clone_in_flight(self) -> bool:
        return any(p.call.name in _CLONES for p in self._pending.values())

    def _release_held(self) -> None:
        # A released line may itself start a clone: the lines after it wait again, and are
        # not popped again until that clone returns (else they would be re-held forever).
        while self._held and not self._clone_in_flight():
            tid = next(iter(self._held))
            for wall_ns, parsed, text in self._held.pop(tid):
                self._dispatch(wall_ns, parsed, text)

    def _task(self, tid: int) -> _Task:
        task = self._tasks.get(tid)
        if task is None:  # the root, or a process whose parent we did not see
            task = self._tasks[tid] = _Task(tid, _Fs(None if self._seen_any else self._root_cwd))
            self._ppid.setdefault(tid, None)
            if self.root_pid is None:
                self.root_pid = tid
        self._seen_any = True
        return task

    def _ident(self, tgid: int) -> Ident:
        """``pid`` (in the chamber) and ``host_pid`` of the process strace names ``tgid``."""
        if tgid not in self._pids:
            if self._host_pid is not None:
                learned = self._learned.get(tgid)
                self._pids[tgid] = learned if learned is not None else self._host_pid(tgid)
            else:
                self._pids[tgid] = self._chamber_pid(tgid) if self._chamber_pid else tgid
        other = self._pids[tgid]
        if self._host_pid is not None:
            return {"pid": tgid, "host_pid": other}
        return {"pid": other if other is not None else 0, "host_pid": tgid}

    def _cloned(self, tid: int, args: Iterable[str], child: int) -> set[str]:
        """Track the child of a clone; returns the clone's flags as strace printed them."""
        parent = self._task(tid)
        m = _FLAGS.search(", ".join(args))
        flags = set(m[1].split("|")) if m else set()
        fs = parent.fs if "CLONE_FS" in flags else _Fs(parent.fs.cwd)
        if "CLONE_THREAD" in flags:
            self._tasks[child] = _Task(parent.tgid, fs)
            return flags
        self._tasks[child] = _Task(child, fs)
        ppid = self._ppid.get(parent.tgid) if "CLONE_PARENT" in flags else parent.tgid
        self._ppid[child] = ppid
        self._pids.pop(child, None)  # a reused pid is a new process
        if self._host_pid is not None:  # now, while the child surely lives: it may be gone by its first event
            self._ident(child)
        return flags

    def _exited(self, tid: int, task: _Task, e: Exited) -> None:
        self._flush_unfinished(tid)
        self._tasks.pop(tid, None)
        if task.tgid != tid:  # a thread
            return
        self.root_exited = self.root_exited or tid == self.root_pid
        self._out.append(Stamped(e.wall_ns, ProcessExit(**self._ident(tid), code=e.code, signal=e.signal)))

    # --- calls ---------------------------------------------------------------------------

    def _string(self, token: str) -> str:
        decoded = decode_string(token)
        if decoded is None:
            raise ValueError(token)
        if decoded[1]:
            self.truncated += 1
            return decoded[0] + "..."
        return decoded[0]

    def _path(self, task: _Task, args: list[str], dirfd: int | None, i: int) -> tuple[str, bool, bool]:
        """The path argument ``args[i]`` placed in the chamber (relative to the cwd, or to the
        fd ``args[dirfd]`` as its -yy decoration shows it): (path, cut, unresolved). Cut:
        strace printed only its start (``-s``); unresolved: it is relative to, or through a
        magic link to, a directory whose path is not known, and is kept as given."""
        decoded = decode_string(args[i])
        if decoded is None:
            raise ValueError(args[i])
        path, cut = decoded
        if cut:
            self.truncated += 1
            path += "..."
        if path.startswith("/"):  # matched as the kernel reads it: /proc/self/./fd/N/ and //proc/... are links too
            path = _clean(path) + ("/" if path.endswith("/") else "")
        magic = MAGIC_LINK.match(path)
        if magic is not None:  # /proc/self/fd/N/..., /proc/self/cwd/..., /dev/fd/N/...: that directory
            pid, fd = magic[1], magic[2] or magic[4]
            own = pid is None or pid in ("self", "thread-self") or int(pid) == task.tgid
            base = None if not own else self._fds.get((task.tgid, int(fd))) if fd else \
                task.fs.cwd if magic[3] else None
            return (_clean(base + path[magic.end():]), cut, False) if base else (_clean(path), cut, True)
        if path.startswith("/"):
            return _clean(path), cut, False
        base = task.fs.cwd
        if dirfd is not None:
            fd, deco = parse_fd(args[dirfd])
            if fd == AT_FDCWD:
                if deco is not None and deco.startswith("/"):
                    base = task.fs.cwd = deco
            else:
                base = deco if deco is not None and deco.startswith("/") else None
        return (_clean(posixpath.join(base, path)), cut, False) if base else (path, cut, True)

    def _env(self, token: str) -> dict[str, str] | None:
        """The exec'd environment when strace printed it (``-v``); None for ``/* N vars */``."""
        if not token.startswith("["):
            return None
        env: dict[str, str] = {}
        for item in self._argv(token):
            name, sep, value = item.partition("=")
            if sep:
                env[name] = value
        return env

    def _argv(self, token: str) -> list[str]:
        if not (token.startswith("[") and token.endswith("]")):
            return []
        items = split_call(token[1:-1] + ") = 0")
        if items is None:
            raise ValueError(token)
        argv = items[0]
        if argv and argv[-1] == "...":
            self.truncated += 1
            return [self._string(a) for a in argv[:-1]] + ["..."]
        return [self._string(a) for a in argv]

    def _event(self, tid: int, c: Call, args: list[str], res: Result) -> Event | None | Literal[False]:
        """The event of one finished call; None for state-only calls, False for unmapped."""
        task = self._task(tid)
        name, failed = c.name, res.value is None or res.value < 0
        errno = res.errno if res.errno else (UNFINISHED if res.value is None else None)
        result = -1 if failed else 0
        ident = self._ident(task.tgid)
        for token in args[:1]:  # the cwd the kernel reports beats our tracking
            fd, deco = parse_fd(token)
            if fd == AT_FDCWD and deco and deco.startswith("/"):
                task.fs.cwd = deco
        if name in ("execve", "execveat"):
            at = 1 if name == "execveat" else 0
            seen = self.truncated  # each cut string or list counts one
            env = self._env(args[at + 2]) if len(args) > at + 2 else None
            argv = self._argv(args[at + 1])
            argv_cut, seen = self.truncated > seen, self.truncated
            if self._key is not None:  # no secret reaches the ledger: argv and env redacted alike
                argv, env = redact_exec(argv, env, key=self._key, patterns=self._patterns)
            path = self._string(args[at])
            path_cut = self.truncated > seen
            if name == "execveat":  # relative to the dirfd; "" with AT_EMPTY_PATH: the fd itself (fexecve)
                deco = parse_fd(args[0])[1]
                if path == "" and deco is not None and deco.startswith("/"):
                    path = _decoration_path(deco) or deco
                elif path:
                    path = self._path(task, args, 0, 1)[0]
            return ProcessExec(**ident, ppid=self._ppid.get(task.tgid), path=path,
                               argv=argv, cwd=task.fs.cwd, env=env,
                               result=result, errno=errno, path_cut=path_cut, argv_cut=argv_cut)
        if name in _OPENS:
            at = {"open": 0, "creat": 0, "openat": 1, "openat2": 1}[name]
            path, cut, unresolved = self._path(task, args, at - 1 if at else None, at)
            if name == "creat":
                flags = "O_CREAT|O_WRONLY|O_TRUNC"
            elif name == "openat2":
                m = _FLAGS.search(args[2])
                flags = m[1] if m else ""
            else:
                flags = args[at + 1]
            access: FileAccess = "rw" if "O_RDWR" in flags.split("|") else "w" if "O_WRONLY" in flags.split("|") else "r"
            real = _decoration_path(res.decoration) if not failed else None
            if real is not None and res.value is not None:
                self._fds[(task.tgid, res.value)] = real
            return FileOpen(**ident, syscall=name, path=path, flags=flags, access=access,
                            result=None if failed else res.value, errno=errno,
                            real_path=real if real != path else None, path_cut=cut, unresolved=unresolved)
        if name in _CHANGES:
            dirfd, at, second, second_dirfd = _CHANGES[name]
            path, cut, unresolved = self._path(task, args, dirfd, at)
            if second is None:
                target = None
            elif name in _VERBATIM_TARGET:
                target = self._string(args[second])
            else:
                target, target_cut, target_unresolved = self._path(task, args, second_dirfd, second)
                cut, unresolved = cut or target_cut, unresolved or target_unresolved
            return FileChange(**ident, syscall=name, path=path, target=target, result=result, errno=errno,
                              path_cut=cut, unresolved=unresolved)
        if name == "connect":
            addr = parse_sockaddr(args[1])
            if addr is None:  # e.g. an address strace could not read: 0x7ffd...
                raise ValueError(args[1])
            family, address, port = addr
            return NetConnect(**ident, family=family, address=address, port=port,
                              result=result, errno=errno)
        if name in _SENDS:
            return self._sends(ident, name, args, res, errno)
        if name in _AUDITED:
            if name in _MEMORY:  # another process's memory may hold secrets: keep sizes, not bytes
                args = [_IOV_BASE.sub(lambda m: f"iov_base=<{len(self._string(m[1]))} chars>", a) for a in args]
            return ProcessSyscall(**ident, syscall=name, args=list(args), result=res.value, errno=errno,
                                  denied=res.injected)
        if name in _CLONES:
            if failed or not res.value:
                return None
            cloned = self._cloned(tid, args, res.value)
            if "CLONE_THREAD" in cloned:
                return None
            if name == "vfork":
                cloned |= {"CLONE_VM", "CLONE_VFORK"}
            parent = self._ppid.get(res.value)
            return ProcessFork(**self._ident(res.value), ppid=None if parent is None else self._ident(parent)["pid"],
                               syscall=name, flags=sorted(f for f in cloned if f.startswith("CLONE_")))
        if name == "chdir" and not failed:
            path, cut, unresolved = self._path(task, args, None, 0)
            task.fs.cwd = path if path.startswith("/") and not (cut or unresolved) else None
            return None
        if name == "fchdir" and not failed:
            deco = parse_fd(args[0])[1]
            task.fs.cwd = deco if deco is not None and deco.startswith("/") else None
            return None
        if name in ("chdir", "fchdir", "exit_group"):
            return None
        return False


    def _sends(self, ident: Ident, name: str, args: list[str], res: Result, errno: str | None) -> NetSend | None:
        """A send naming its destination; None on a connected socket (no address).

        sendmmsg's messages may each name one: the first is the event, and the others,
        when they differ, follow it in the output queue (same time stamp)."""
        if name == "sendto":
            dests, flags = ([args[4]] if args[4] != "NULL" else []), args[3]
        else:
            dests, flags = _MSG_NAME.findall(args[1]), args[-1]
        events = []
        for dest in dict.fromkeys(dests):  # distinct, in order
            addr = parse_sockaddr(dest)
            if addr is None:  # e.g. an address strace could not read: 0x7ffd...
                raise ValueError(dest)
            events.append(NetSend(**ident, syscall=name, family=addr[0], address=addr[1], port=addr[2],
                                  flags=flags, result=-1 if res.value is None or res.value < 0 else res.value,
                                  errno=errno))
        if not events:
            return None
        for extra in events[1:]:
            self._extra.append(extra)
        return events[0]


_PIDNS = re.compile(r"=\s*\d+ /\* (\d+) in strace's PID NS \*/\s*\Z")


def _strace_ns_pid(body: str) -> int | None:
    """The pid in strace's namespace that ``--pidns-translation`` printed after a call's
    return value (``= 2 /* 7509 in strace's PID NS */``), or None when it printed none."""
    m = _PIDNS.search(body)
    return int(m[1]) if m else None


def _decoration_path(deco: str | None) -> str | None:
    """The path in a ``-yy`` fd decoration, its escapes decoded (strace escapes it like a string)."""
    if not deco or not deco.startswith("/"):
        return None
    device = _DEVICE.match(deco)  # -yy adds the device numbers of char and block devices
    if device is not None:
        deco = device[1]
    decoded = decode_string('"' + deco.replace('"', '\\"') + '"')
    return decoded[0] if decoded is not None else deco


_DEVICE = re.compile(r"^(.*)<(?:char|block) \d+:\d+>$")
MAGIC_LINK = re.compile(r"^/(?:proc/(self|thread-self|\d+)(?:/task/\d+)?/(?:fd/(\d+)|(cwd)|root)|dev/fd/(\d+))(?=/)")
"""A name through a magic link to a directory (proc(5)): ``/proc/<self|thread-self|pid>[/task/<tid>]/``
then ``fd/<N>/`` (group 2), ``cwd/`` (group 3) or ``root/``; or ``/dev/fd/<N>/`` (group 4); group 1
the pid. An fd's path comes from its open's -yy result (close and dup are not traced, so a
reused fd number may map stale until an open re-maps it; a successful open's -yy real path
says where it led whatever the map)."""



def _text(c: Call, body: str) -> str:
    """A line for a call joined from its parts, as strace would have printed it whole."""
    return f"{c.pid} {c.wall_ns // 10**9}.{c.wall_ns % 10**9 // 1000:06d} {c.name}({body}"


def _clean(path: str) -> str:
    """Drop ``.`` parts and repeated slashes; keep ``..`` (a symlink can make it lie)."""
    lead = "/" if path.startswith("/") else ""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    return lead + "/".join(parts) if parts or lead else "."
