"""The eBPF witness's parser: the lines either backend prints, into ledger events; sans-IO.

The line grammar, its limits and the refusal rule are in `collectors.ebpf`'s docstring,
which re-exports everything public here.
"""

from __future__ import annotations

import errno as _errno
import functools
import posixpath
import re
import signal as _signal
from collections import deque
from collections.abc import Sequence
from typing import NamedTuple

from collectors._ebpf_fds import O_CLOEXEC, FdTables
from collectors._lines import take_lines
from collectors._strace_parser import (AUDITED_SYSCALLS, DENIED_SYSCALLS, MAGIC_LINK, NEED_DATA, UNFINISHED,
                                      Stamped, SyscallParserOutput)
from ledger import ParserClosedError, redact_exec
from ledger.events import (FileChange, FileOpen, NetConnect, NetSend, ProcessExec, ProcessExit, ProcessFork,
                           ProcessSyscall, WitnessGap, WitnessRaw)

__all__ = ["AT_FDCWD", "NEED_DATA", "STRING_LIMIT", "WITNESS", "EbpfParser", "ParserClosedError", "open_flags"]

WITNESS = "ebpf"
"""The ``witness`` name of the events this parser makes and of its ledger source."""
STRING_LIMIT = 200
"""Bytes reserved per string, the NUL included: ``BPFTRACE_STRLEN`` (0.17's maximum) and the
libbpf program's ``STRLEN`` (``collectors/bpf/witness.h``); at most 199 bytes are copied.
Paths have the limit the ``B`` line gives (the libbpf program's ``PATHLEN``, 4097), else this one."""
AT_FDCWD = -100

_OPEN_FLAGS = (  # include/uapi/asm-generic/fcntl.h (x86_64, arm64 share these values)
    (0o100, "O_CREAT"), (0o200, "O_EXCL"), (0o400, "O_NOCTTY"), (0o1000, "O_TRUNC"), (0o2000, "O_APPEND"),
    (0o4000, "O_NONBLOCK"), (0o10000, "O_DSYNC"), (0o20000, "O_ASYNC"), (0o40000, "O_DIRECT"),
    (0o100000, "O_LARGEFILE"), (0o200000, "O_DIRECTORY"), (0o400000, "O_NOFOLLOW"), (0o1000000, "O_NOATIME"),
    (0o2000000, "O_CLOEXEC"), (0o4000000, "__O_SYNC"), (0o10000000, "O_PATH"), (0o20000000, "__O_TMPFILE"),
)  # fmt: skip
_KERNEL_ERRNOS = {512: "ERESTARTSYS", 513: "ERESTARTNOINTR", 514: "ERESTARTNOHAND", 515: "ENOIOCTLCMD",
                  516: "ERESTART_RESTARTBLOCK"}  # include/linux/errno.h: never seen by user space, strace names them
_FAMILIES = {1: "AF_UNIX", 2: "AF_INET", 10: "AF_INET6"}
_OPENS = frozenset({"open", "openat", "openat2", "creat"})
_CHANGES = frozenset({"unlink", "unlinkat", "rmdir", "mkdir", "mkdirat", "rename", "renameat", "renameat2",
                      "symlink", "symlinkat", "link", "linkat", "chmod", "fchmodat", "truncate", "mknod",
                      "mknodat"})
_SENDS = frozenset({"sendto", "sendmsg", "sendmmsg"})
_AUDITED = frozenset(AUDITED_SYSCALLS)
_MEMORY = frozenset({"process_vm_readv", "process_vm_writev"})
_SEND_FAMILIES = {0: "AF_UNSPEC", **_FAMILIES, 16: "AF_NETLINK", 17: "AF_PACKET"}
_MSG_FLAGS = ((0x1, "MSG_OOB"), (0x2, "MSG_PEEK"), (0x4, "MSG_DONTROUTE"), (0x40, "MSG_DONTWAIT"),
              (0x80, "MSG_EOR"), (0x800, "MSG_CONFIRM"), (0x4000, "MSG_NOSIGNAL"), (0x8000, "MSG_MORE"),
              (0x4000000, "MSG_ZEROCOPY"), (0x20000000, "MSG_FASTOPEN"))  # include/linux/socket.h
_EPERM = 1
_IO_URING_OPS = {18: "io_uring_openat", 28: "io_uring_openat2", 16: "io_uring_connect", 21: "io_uring_statx",
                 35: "io_uring_renameat", 36: "io_uring_unlinkat", 37: "io_uring_mkdirat",
                 38: "io_uring_symlinkat", 39: "io_uring_linkat"}  # include/uapi/linux/io_uring.h
_RECORD = re.compile(r"^(?:[BERFQUKOPX] \d|[SAVTNY] \d+ |[SAVTZ] \d+$)")
_FD_CALLS = frozenset({"dup", "dup2", "dup3", "fcntl", "ioctl", "close", "close_range"})
_LOST = re.compile(r"^Lost (\d+) events$")


@functools.lru_cache(maxsize=1024)
def open_flags(flags: int) -> str:
    """``open(2)`` flags as strace spells them, e.g. ``O_RDONLY|O_CLOEXEC`` (unknown bits in hex)."""
    return "|".join([("O_RDONLY", "O_WRONLY", "O_RDWR", "O_ACCMODE")[flags & 3], *_bit_names(flags & ~3, _OPEN_FLAGS)])


def _bit_names(bits: int, table) -> list[str]:
    """The names of ``bits`` in ``table`` ((bit, name) pairs), in its order, then what no
    name covers in hex."""
    names = []
    for bit, name in table:
        if bits & bit:
            names.append(name)
            bits &= ~bit
    return names + [hex(bits)] if bits else names


class _Call:
    __slots__ = ("name", "mono", "tgid", "nspid", "i0", "i1", "strings", "argv", "env", "cut", "ret", "sealed",
                 "paths")

    def __init__(self, name: str, mono: int, tgid: int, nspid: int, i0: int, i1: int):
        self.name, self.mono, self.tgid, self.nspid, self.i0, self.i1 = name, mono, tgid, nspid, i0, i1
        self.strings: list[str] = []
        self.argv: list[str] = []
        self.env: list[str] = []
        self.cut: set[str] = set()
        self.ret: int | None = None  # the return value, once its R line is read
        self.sealed = False  # its Z line was read: no more strings
        self.paths: dict[str, tuple[str, list[str]]] = {}  # Y lines: field -> (state, [path])


class _Text(NamedTuple):
    values: list[str]  # the list whose last string a continuation line extends
    call: _Call | None
    limit: int | None  # bytes at which the string is taken as cut (None: never)


class EbpfParser(SyscallParserOutput):
    """Turns the lines the witness's program prints (either backend) into ledger events; sans-IO.

    Feed bytes with `feed`, take events with `next_event` until it returns `NEED_DATA`,
    and `close` at end of input (a last line without newline, calls never returned).

    Attributes:
        attached: the program's ``B`` line was seen (every probe is attached).
        last_ns: wall ns of the last stamped line (None before any).
        pidns_inum: the namespace the program watches, from its ``B`` line (None before).
        lines, events, parse_failures, bytes: as `collectors.strace.StraceParser`.
        lost: events the kernel dropped, summed over ``Lost N events`` lines.
        truncated: strings or argv/env lists that were cut.
        unmapped: understood lines with no event kind (kept as `WitnessRaw`).
        root_exited: the exit of the chamber's init was read.
    """

    witness = WITNESS

    def __init__(self, *, clock_offset_ns: int = 0, root_cwd: str | None = None, root_host_pid: int | None = None,
                 fingerprint_key: bytes | None = None, credential_patterns: Sequence[str] = (),
                 skip_tracer: str | None = None, string_limit: int = STRING_LIMIT, max_line_bytes: int = 1 << 16,
                 denied_syscalls: Sequence[str] = DENIED_SYSCALLS):
        """Make a parser for one run of the witness's program.

        Args:
            clock_offset_ns: wall minus monotonic clock, ns, added to every line's stamp.
            root_cwd: the cwd of the chamber's processes until a chdir says otherwise.
            root_host_pid: host pid of the chamber's init (sets ``root_exited``).
            fingerprint_key: the run's key for secrets: each ``ProcessExec``'s argv and env
                go through `ledger.redact_exec` with it (credential variables and key-like
                values become keyed fingerprints), as `collectors.strace.StraceParser`
                does. None keeps them verbatim (parsing one's own output).
            credential_patterns: extra credential variable names, for `ledger.redact_exec`.
            skip_tracer: a program whose first process is not the chamber's command (the
                strace tracer, ``strace``, when both witnesses run): from the first
                successful exec of a file of that name on, that process's own events are
                not made, nor its children's before their exec (``strace -u`` sets the
                user's groups there); only the first such process: a later one is the
                command's. A child's line printed before its fork's ``F`` line (another
                CPU's buffer) is not known to be the tracer's and is kept.
            string_limit: ``BPFTRACE_STRLEN`` of the run, bytes (a string of
                ``string_limit - 1`` bytes or more is taken as cut); paths, and argv and
                environment strings, have the limits the ``B`` line gives, else this one.
            max_line_bytes: a longer line is cut there and the rest parsed as lines.
            denied_syscalls: the calls the chamber's seccomp profile refuses (``run.started``'s
                ``seccomp.denied``): a ``P`` line of one that never entered and returned
                -EPERM is ``denied``.
        """
        self._denied = frozenset(denied_syscalls)
        self._offset, self._root_cwd = clock_offset_ns, root_cwd
        self._limit, self._max_line = string_limit, max_line_bytes
        self._path_limit = string_limit  # the B line's, once read
        self._arg_limit = string_limit  # argv and environment strings': the B line's, once read
        self._kernel = False  # the B line says the kernel side gives the paths it holds (Y lines)
        self._root = root_host_pid
        self._key, self._patterns = fingerprint_key, tuple(credential_patterns)
        self._tracer = skip_tracer
        self._skip: int | None = None  # the tracer's host pid, once its exec is read
        self._skip_children: set[int] = set()  # the tracer's children, until their exec
        self.root_exited = False
        self._buf = bytearray()
        self._out: deque[Stamped] = deque()
        self._calls: dict[int, _Call] = {}  # tid -> its E call, until both R and Z are read
        self._early: dict[int, tuple[str, int, int, int]] = {}  # tid -> (name, ret, mono, tgid) of an R before its E
        self._pre: dict[int, list[str]] = {}  # tid -> S lines before an O (a rename's old name)
        self._paths: dict[int, dict[str, tuple[str, list[str]]]] = {}  # tid -> Y lines before an O, U or R
        self._uring: dict[int, _Call] = {}  # io_uring req address -> its open
        self._cwd: dict[int, str | None] = {}  # tgid (or a child's tid, until it runs) -> cwd
        self._fds = FdTables()  # without the kernel's paths: each process's fds, from the calls seen
        self._text: _Text | None = None  # the string a continuation line extends
        self._held: tuple[int, _Call] | None = None  # an O line's call, until its path is whole
        self.last_ns: int | None = None
        self._closed = False
        self.attached = False
        self.pidns_inum: int | None = None
        self.lines = self.events = self.parse_failures = self.bytes = 0
        self.lost = self.truncated = self.unmapped = 0

    def feed(self, data: bytes | bytearray) -> None:
        """Add bytes of the program's output; any split point is fine.

        Raises:
            ParserClosedError: after `close`.
        """
        if self._closed:
            raise ParserClosedError("feed() after close()")
        self.bytes += len(data)
        self._buf += data
        for line in take_lines(self._buf, self._max_line):
            self._line(line.decode("utf-8", "backslashreplace"))

    def close(self) -> None:
        """End of input: parse a last partial line, emit calls that never returned."""
        if self._closed:
            return
        self._closed = True
        if self._buf:
            self._line(bytes(self._buf).decode("utf-8", "backslashreplace"))
            self._buf.clear()
        self._release()
        for tid in list(self._calls):
            call = self._calls.pop(tid)
            self._finish(tid, call, call.ret)
        for req in list(self._uring):
            self._finish(0, self._uring.pop(req), None)
        for tid, (name, ret, mono, tgid) in self._early.items():  # returns whose entry we never saw
            self._raw(f"R {mono} {tgid} {tid} ? {name} {ret}", failure=True)
        self._early.clear()

    # --- lines ---------------------------------------------------------------------------

    def _line(self, text: str) -> None:
        self.lines += 1
        record = _RECORD.match(text) is not None
        lost = None if record else _LOST.match(text)
        if not record and lost is None and self._text is not None:  # a newline inside the previous string
            values, limit = self._text.values, self._text.limit
            values[-1] = values[-1] + "\n" + text if limit is None else self._cut(values[-1] + "\n" + text, limit)
            return
        self._text = None
        self._release()
        if lost is not None:
            self.lost += int(lost[1])
            self._emit(self.last_ns, WitnessGap(
                witness=WITNESS, reason=f"the kernel dropped {lost[1]} events: the witness's buffer was full",
                missing="syscalls of the chamber", since_ns=self.last_ns, dropped=int(lost[1])))
        elif not record:
            if text.strip() and not text.startswith("Attaching "):
                self._raw(text, failure=True)
        else:
            try:
                self._record(text)
            except (ValueError, IndexError, KeyError):
                self._raw(text, failure=True)

    def _record(self, text: str) -> None:
        tag = text[0]
        if tag in "SAVTZNY":
            self._string(tag, text)
            return
        f = text.split(" ", 12 if tag == "P" else 9)
        mono = int(f[1])
        self.last_ns = mono + self._offset
        if tag == "B":
            self.attached, self.pidns_inum = True, int(f[2])
            if len(f) > 5:  # the libbpf loader's: its path limit, "kernel", and its argv strings' limit
                self._path_limit, self._kernel = int(f[5]), len(f) > 6 and f[6] == "kernel"
                self._arg_limit = int(f[7]) if len(f) > 7 else self._arg_limit
        elif tag == "K":
            call = self._uring.pop(int(f[4]))
            self._finish(int(f[3]), call, int(f[5]))
        elif tag == "O":
            tid = int(f[3])
            call = _Call(f[5].rpartition("sys_exit_")[2], mono, int(f[2]), int(f[4]), int(f[6]), int(f[7]))
            call.ret = int(f[8])
            call.strings = [*self._pre.pop(tid, []), self._cut(f[9] if len(f) > 9 else "", self._path_limit)]
            call.paths = self._paths.pop(tid, {})
            self._text = _Text(call.strings, call, self._path_limit)
            self._held = (tid, call)  # the next line may continue its path
        elif tag == "E":
            self._enter(text, f, mono)
        elif tag == "P":
            tid, name = int(f[3]), f[5].rpartition("sys_exit_")[2]  # bpftrace prints its probe
            name = "umount2" if name == "umount" else name  # the tracepoint's name, not the call's
            if name not in _AUDITED or f[6] not in ("0", "1"):
                raise ValueError(text)
            call = _Call(name, mono, int(f[2]), int(f[4]), int(f[6]), 0)
            call.ret = int(f[7])
            call.argv = [str(int(a)) for a in f[8:12]]
            call.strings = [self._cut(f[12] if len(f) > 12 else "", self._limit)]
            self._text = _Text(call.strings, call, self._limit)
            self._held = (tid, call)  # the next line may continue its string
        elif tag == "R":
            self._return(f, mono)
        elif tag == "F":
            flags = int(f[6]) if len(f) > 6 else None
            self._inherit(int(f[2]), int(f[5]), flags)
            if int(f[2]) == self._skip:  # the tracer's child runs the tracer's code until it execs
                self._skip_children.add(int(f[5]))
            self._forked(f, flags)
        elif tag == "Q":
            tgid, nspid, status = int(f[2]), int(f[4]), int(f[5])
            sig = status & 0x7F
            self._cwd.pop(tgid, None)
            self._fds.exited(tgid)
            self._emit(self.last_ns, ProcessExit(pid=nspid, host_pid=tgid, code=None if sig else status >> 8 & 0xFF,
                                                 signal=_signame(sig) if sig else None))
            self.root_exited = self.root_exited or tgid == self._root
        elif tag == "U":
            op, tid = int(f[5]), int(f[3])
            if op not in (18, 28):
                self.unmapped += 1
                self._raw(text, failure=False)
                return
            call = _Call(_IO_URING_OPS[op], mono, int(f[2]), int(f[4]), int(f[7]), int(f[8]))
            call.strings = [self._cut(f[9] if len(f) > 9 else "", self._path_limit)]
            call.paths = self._paths.pop(tid, {})
            self._uring[int(f[6])] = call
            self._text = _Text(call.strings, call, self._path_limit)
        elif tag == "X":
            name = f[5].rpartition(":")[2].removeprefix("sys_enter_").removeprefix("sys_exit_")
            if name not in _FD_CALLS:
                raise ValueError(text)
            if not self._kernel:
                self._fds.called(int(f[2]), name, int(f[6]), int(f[7]), int(f[8]), int(f[9]))

    def _string(self, tag: str, text: str) -> None:
        """An S/A/V/N/T/Z/Y line: a string of the call its thread is entering (or, S and Y, of
        an O, U or R to come)."""
        if tag == "Y":
            _, tid_s, field, state, *rest = text.split(" ", 4)
            if state not in ("ok", "cut", "none", "badf"):
                raise ValueError(text)
        else:
            _, tid_s, *rest = text.split(" ", 2)
        tid = int(tid_s)
        value = rest[0] if rest else ""
        call = self._calls.get(tid)
        if call is not None and call.sealed:
            call = None
        if tag == "Y":  # an exec's cwd (in its E..Z), or a path of the call that returns next
            paths = call.paths if call is not None else self._paths.setdefault(tid, {})
            paths[field] = (state, [value])
            self._text = _Text(paths[field][1], call, None)
        elif tag == "Z":
            if call is None:
                raise ValueError(text)
            call.sealed = True
            if call.ret is not None:
                self._finish(tid, self._calls.pop(tid), call.ret)
        elif tag == "T":
            if call is None:
                raise ValueError(text)
            call.cut.add(value)
            self.truncated += 1
        elif call is None:  # an S before an O (a rename's old name)
            if tag != "S":
                raise ValueError(text)
            values = self._pre.setdefault(tid, [])
            values.append(self._cut(value, self._path_limit))
            self._text = _Text(values, None, self._path_limit)
        else:
            values = {"S": call.strings, "A": call.argv, "V": call.env, "N": call.strings}[tag]
            limit = self._path_limit if tag == "S" else self._arg_limit if tag in "AV" else self._limit
            values.append(self._cut(value, limit))
            self._text = _Text(values, call, limit)

    def _enter(self, text: str, f: list[str], mono: int) -> None:
        tgid, tid, nspid = int(f[2]), int(f[3]), int(f[4])
        name = f[5].rpartition("sys_enter_")[2]
        if tid in self._calls:  # the previous call of this thread never completed
            old = self._calls.pop(tid)
            self._finish(tid, old, old.ret)
        call = self._calls[tid] = _Call(name, mono, tgid, nspid, int(f[6]), int(f[7]))
        early = self._early.get(tid)
        if early is None and name.startswith("execve"):  # an exec from a thread returns on the leader
            early = self._early.get(tgid)
            tid_early = tgid
        else:
            tid_early = tid
        if early is not None and early[0] == name and early[2] >= mono:
            del self._early[tid_early]
            call.ret = early[1]
        if name.startswith("execve") and tgid not in self._cwd:  # its parent's fork line may come later
            self._inherit(int(f[7]), tgid)

    def _return(self, f: list[str], mono: int) -> None:
        tgid, tid = int(f[2]), int(f[3])
        name, ret = f[5].rpartition("sys_exit_")[2], int(f[6])
        call = self._calls.get(tid)
        if (call is None or call.name != name) and name.startswith("execve"):  # from a thread: on the leader
            tid = next((t for t, c in self._calls.items() if c.tgid == tgid and c.name == name), tid)
            call = self._calls.get(tid)
        if call is None or call.name != name or call.ret is not None:
            self._early[tid] = (name, ret, mono, tgid)  # its E is on another CPU's buffer, or was before B
            return
        call.ret = ret
        if call.sealed:
            self._finish(tid, self._calls.pop(tid), ret)

    def _release(self) -> None:
        if self._held is not None:
            tid, call = self._held
            self._held = None
            self._finish(tid, call, call.ret)

    def _forked(self, f: list[str], flags: int | None) -> None:
        """A new process's `ProcessFork` (a thread makes none). The loader's ``F`` line gives
        the child's pid in the chamber and whether it is a thread; bpftrace's gives the clone's
        flags only (a thread has ``CLONE_THREAD``; its pid in the chamber is then 0, unknown),
        and none where it missed the clone's entry: then no event, never a guess."""
        if len(f) > 8:
            thread, child_ns = f[8] == "1", int(f[7])
        elif flags:  # bpftrace: the clone's flags tell a thread; 0 is a clone whose entry it did not see
            thread, child_ns = bool(flags & _CLONE_THREAD), 0
        else:  # a recording before either said: not known to be a process
            return
        if thread:
            return
        names = sorted(_bit_names(flags & ~0xFF & 0xFFFFFFFF, _CLONE_FLAGS)) if flags else []
        self._emit(int(f[1]) + self._offset, ProcessFork(pid=child_ns, host_pid=int(f[5]), ppid=int(f[4]),
                                                         flags=names))

    def _inherit(self, parent: int, child: int, flags: int | None = None) -> None:
        """A child's cwd and fds are its parent's (its fd table shared with ``CLONE_FILES`` in
        ``flags``, the clone's when the line gives them), unless the child was seen first."""
        if child not in self._cwd:
            self._cwd[child] = self._cwd.get(parent, self._root_cwd)
            self._fds.forked(parent, child, flags)

    def _cut(self, value: str, limit: int) -> str:
        """``value`` with "..." added when it is ``limit`` - 1 bytes or longer: taken as cut."""
        if _size(value) >= limit - 1 and not value.endswith("..."):
            self.truncated += 1
            return value + "..."
        return value

    # --- events --------------------------------------------------------------------------

    def _finish(self, tid: int, call: _Call, ret: int | None) -> None:
        """Build the event of a call that returned ``ret`` (None: it never did)."""
        failed = ret is None or ret < 0
        err = UNFINISHED if ret is None else _errno_name(-ret) if ret < 0 else None
        wall = call.mono + self._offset
        ident = {"pid": call.nspid, "host_pid": call.tgid}
        name, s = call.name, call.strings
        if name in ("execve", "execveat"):
            path = s[0] if s else ""
            argv_cut = bool(call.cut & {"argv", "env"}) or any(self._was_cut(v, self._arg_limit)
                                                               for v in (*call.argv, *call.env))
            argv = call.argv + (["..."] if "argv" in call.cut else [])
            env: dict[str, str] | None = dict(item.partition("=")[::2] for item in call.env if "=" in item)
            if self._key is not None:  # no secret reaches the ledger, in argv or environment
                argv, env = redact_exec(argv, env, key=self._key, patterns=self._patterns)
            state, text = call.paths.get("cwd", (None, None))
            cwd = self._cwd.get(call.tgid, self._root_cwd) if text is None else text[0] if state == "ok" else None
            if not failed:  # the new program's: its cwd as the kernel gives it, its close-on-exec fds closed
                if text is not None:
                    self._cwd[call.tgid] = cwd
                self._fds.executed(call.tgid)
            self._emit(wall, ProcessExec(**ident, ppid=call.i0 or None, path=path, argv=argv, cwd=cwd, env=env,
                                         result=-1 if failed else 0, errno=err,
                                         path_cut=self._was_cut(path, self._path_limit), argv_cut=argv_cut))
        elif name in _OPENS or name in ("io_uring_openat", "io_uring_openat2"):
            dirfd = call.i0 if name not in ("open", "creat") else AT_FDCWD
            given = s[0] if s else ""
            path, unresolved = self._place(call, "i0", dirfd, given)
            cut = self._was_cut(given, self._path_limit)
            state, text = call.paths.get("ret", (None, None))
            real = text[0] if not failed and state == "ok" and text else None
            if not failed and not self._kernel:
                known = not (cut or unresolved) and path.startswith("/")
                self._fds.opened(call.tgid, ret, path if known else None, bool(call.i1 & O_CLOEXEC))  # type: ignore[arg-type]
            self._emit(wall, FileOpen(**ident, syscall=name, path=path, flags=open_flags(call.i1),
                                      access=("r", "w", "rw", "rw")[call.i1 & 3], result=None if failed else ret,
                                      errno=err, real_path=real if real != path else None, path_cut=cut,
                                      unresolved=unresolved, real_path_cut=not failed and state == "cut"))
        elif name in _CHANGES:  # as strace's FileChange: path is the entry made, removed or changed
            first_fd = AT_FDCWD if name in ("symlinkat", "rename", "link", "symlink") else call.i0
            if name.startswith(("rename", "link", "symlink")) and len(s) > 1:
                second, unresolved = self._place(call, "i1", call.i1, s[1])
                names = s[:2]
                if name.startswith("symlink"):  # the new symlink; target: its contents, verbatim (never resolved)
                    path, target, names = second, s[0], s[1:2]
                else:
                    first, first_unresolved = self._place(call, "i0", first_fd, s[0])
                    unresolved = unresolved or first_unresolved
                    # rename: old name -> new name; link: the new link, target the existing file
                    path, target = (first, second) if name.startswith("rename") else (second, first)
            else:
                names = s[:1]
                (path, unresolved), target = self._place(call, "i0", first_fd, s[0] if s else ""), None
            self._emit(wall, FileChange(**ident, syscall=name, path=path, target=target,
                                        result=-1 if failed else 0, errno=err, unresolved=unresolved,
                                        path_cut=any(self._was_cut(n, self._path_limit) for n in names)))
        elif name == "connect":
            family = _FAMILIES.get(call.i0)
            if family is None or not s:
                self.unmapped += 1
                self._raw(f"connect family={call.i0} pid={call.nspid} ret={ret}", failure=False)
                return
            self._emit(wall, NetConnect(**ident, family=family, address=s[0],
                                        port=call.i1 if family != "AF_UNIX" else None,
                                        result=-1 if failed else 0, errno=err))
        elif name in _SENDS:
            self._sends(wall, ident, call, ret, err)
        elif name in _AUDITED:  # a P line: i0 is 1 when it entered
            entered = call.i0 == 1
            if not entered:
                args = []
            elif name == "memfd_create":
                args = [s[0] if s else "", call.argv[0]]
            elif name == "seccomp":  # as strace spells them: the operation, the flags, the pointer
                op, flag_bits = int(call.argv[0]), int(call.argv[1]) & 0xFFFFFFFF
                args = [_SECCOMP_OPS.get(op, str(op)), "|".join(_bit_names(flag_bits, _SECCOMP_FLAGS)) or "0",
                        hex(int(call.argv[2]) & 0xFFFFFFFFFFFFFFFF)]
            else:
                args = call.argv
            # a call that never entered was refused by a seccomp filter: the chamber's denials, and
            # the seccomp calls its profile refuses by their arguments (a listener)
            denied = not entered and ret == -_EPERM and (name in self._denied or name == "seccomp")
            self._emit(wall, ProcessSyscall(**ident, syscall=name, args=args, result=-1 if failed else ret,
                                            errno=err, denied=denied))
        elif name in ("chdir", "fchdir") and not failed:
            state, text = call.paths.get("i0", (None, None))
            if name == "chdir" and text is not None:  # read at its return: the cwd it made
                new = text[0] if state == "ok" else None
            elif name == "chdir":
                new, unresolved = self._place(call, "i0", AT_FDCWD, s[0] if s else "")
                new = None if unresolved or self._was_cut(s[0] if s else "", self._path_limit) else new
            else:  # with the kernel's paths the next exec gives its cwd; the fds are not followed
                new = None if self._kernel else self._fds.path(call.tgid, call.i0)
            self._cwd[call.tgid] = new if new is not None and new.startswith("/") else None

    def _sends(self, wall: int, ident: dict, call: _Call, ret: int | None, err: str | None) -> None:
        """One `NetSend` per distinct destination of a send (its ``N`` lines), in order."""
        flags = _msg_flags(call.i0)
        for dest in dict.fromkeys(call.strings):
            fam_s, port_s, address = dest.split(" ", 2)
            fam = int(fam_s)
            family = _SEND_FAMILIES.get(fam, str(fam))
            self._emit(wall, NetSend(**ident, syscall=call.name, family=family, address=address,
                                     port=int(port_s) if family in ("AF_INET", "AF_INET6") else None, flags=flags,
                                     result=-1 if ret is None or ret < 0 else ret, errno=err))
        if "dests" in call.cut:
            self._emit(wall, WitnessGap(
                witness=WITNESS, reason=f"{call.name} of pid {call.nspid} sent more messages than the witness"
                " reads the destination of", missing="destinations of the messages past the last read",
                since_ns=wall))

    def _place(self, call: _Call, field: str, dirfd: int, name: str) -> tuple[str, bool]:
        """Where ``name``, a path argument of ``call`` relative to ``dirfd`` (its ``field``:
        ``i0`` or ``i1``), is in the chamber: (path, unresolved).

        A relative name is joined to its directory: the kernel's, from the call's ``Y`` line
        of that field, when the program gives them (the ``B`` line's ``kernel``); else the
        cwd or the dirfd's path, as `FdTables` followed them. A name through a magic link
        (``/proc/self/fd/N/...``, ``/proc/self/cwd/...``, ``/dev/fd/N/...``) is joined to the
        path of that fd or cwd: the kernel's, from the field's ``Y`` line (the program
        walks the fd of a link of the caller's own process: ``/proc/self/fd/N/``,
        ``/proc/thread-self/fd/N/``, ``/proc/<its pid>/fd/N/``, ``/dev/fd/N/``, and its
        ``cwd/``), else as `FdTables` followed it. Where the directory is not known: the
        name as given, True.
        """
        if not name:  # kept empty: never resolved to the directory (AT_EMPTY_PATH, or unreadable)
            return name, False
        if name.startswith("/"):
            cleaned = _clean(name)  # as the kernel reads it: /proc/self/./fd/N/ and //proc/... are links too
            # (the program walks only the plain spelling); cleaned once: this is every absolute name's path
            magic = MAGIC_LINK.match(cleaned + "/" if name.endswith("/") else cleaned)
            if magic is None:
                return cleaned, False
            name = cleaned + ("/" if name.endswith("/") else "")
            if self._kernel:  # the program's Y line of this field: the directory the link led into
                state, text = call.paths.get(field, (None, None))
                base = text[0] if state == "ok" and text is not None else None
            else:
                base = self._magic_base(call, magic)
            return (_clean(base + name[magic.end():]), False) if base else (_clean(name), True)
        if self._kernel:
            state, text = call.paths.get(field, (None, None))
            base = text[0] if state == "ok" and text is not None else None
        elif dirfd == AT_FDCWD:
            base = self._cwd.get(call.tgid, self._root_cwd)
        else:
            base = self._fds.path(call.tgid, dirfd)
        return (_clean(posixpath.join(base, name)), False) if base else (name, True)

    def _magic_base(self, call: _Call, magic: re.Match) -> str | None:
        """The directory a magic link of ``call``'s own process leads to, as followed; None for
        another process's, for its root (chroot is not followed), or when not known."""
        pid, fd = magic[1], magic[2] or magic[4]
        if pid is not None and pid not in ("self", "thread-self") and int(pid) != call.nspid:
            return None
        if fd is not None:
            return self._fds.path(call.tgid, int(fd))
        return self._cwd.get(call.tgid, self._root_cwd) if magic[3] else None

    def _was_cut(self, value: str, limit: int) -> bool:
        """Whether a string `_cut` passed with ``limit`` was taken as cut."""
        return value.endswith("...") and _size(value) >= limit - 1

    def _emit(self, wall_ns: int | None, event) -> None:
        if self._tracer is not None and isinstance(event, ProcessExec) and event.result == 0 \
                and posixpath.basename(event.path) == self._tracer:
            self._tracer, self._skip = None, event.host_pid
        host_pid = getattr(event, "host_pid", None)
        if host_pid in self._skip_children:
            if not isinstance(event, ProcessExec):
                return
            if event.result == 0:
                self._skip_children.discard(host_pid)
        if self._skip is not None and host_pid == self._skip:
            return
        self._out.append(Stamped(wall_ns, event))

    def _raw(self, text: str, *, failure: bool) -> None:
        if failure:
            self.parse_failures += 1
        self._emit(self.last_ns, WitnessRaw(witness=WITNESS, line=text))


_SECCOMP_OPS = {0: "SECCOMP_SET_MODE_STRICT", 1: "SECCOMP_SET_MODE_FILTER", 2: "SECCOMP_GET_ACTION_AVAIL",
                3: "SECCOMP_GET_NOTIF_SIZES"}
_SECCOMP_FLAGS = ((1, "SECCOMP_FILTER_FLAG_TSYNC"), (2, "SECCOMP_FILTER_FLAG_LOG"),
                  (4, "SECCOMP_FILTER_FLAG_SPEC_ALLOW"), (8, "SECCOMP_FILTER_FLAG_NEW_LISTENER"),
                  (16, "SECCOMP_FILTER_FLAG_TSYNC_ESRCH"), (32, "SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV"))
"""seccomp(2)'s operations and filter flags (linux/seccomp.h)."""
_CLONE_THREAD = 0x10000
_CLONE_FLAGS = tuple({
    0x100: "CLONE_VM", 0x200: "CLONE_FS", 0x400: "CLONE_FILES", 0x800: "CLONE_SIGHAND", 0x1000: "CLONE_PIDFD",
    0x2000: "CLONE_PTRACE", 0x4000: "CLONE_VFORK", 0x8000: "CLONE_PARENT", 0x10000: "CLONE_THREAD",
    0x20000: "CLONE_NEWNS", 0x40000: "CLONE_SYSVSEM", 0x80000: "CLONE_SETTLS", 0x100000: "CLONE_PARENT_SETTID",
    0x200000: "CLONE_CHILD_CLEARTID", 0x400000: "CLONE_DETACHED", 0x800000: "CLONE_UNTRACED",
    0x1000000: "CLONE_CHILD_SETTID", 0x2000000: "CLONE_NEWCGROUP", 0x4000000: "CLONE_NEWUTS",
    0x8000000: "CLONE_NEWIPC", 0x10000000: "CLONE_NEWUSER", 0x20000000: "CLONE_NEWPID", 0x40000000: "CLONE_NEWNET",
    0x80000000: "CLONE_IO",
}.items())
"""clone(2)'s flags (linux/sched.h), as the kernel spells them; the low byte is the exit signal."""


@functools.lru_cache(maxsize=256)
def _msg_flags(flags: int) -> str:
    """``send(2)`` flags as strace spells them, e.g. ``MSG_NOSIGNAL|MSG_FASTOPEN``; ``0`` for none."""
    return "|".join(_bit_names(flags & 0xFFFFFFFF, _MSG_FLAGS)) or "0"


def _errno_name(code: int) -> str:
    return _errno.errorcode.get(code) or _KERNEL_ERRNOS.get(code) or str(code)


def _signame(sig: int) -> str:
    try:
        return _signal.Signals(sig).name
    except ValueError:
        return f"SIG{sig}"


def _size(value: str) -> int:
    """Bytes of a string as the kernel had it (invalid UTF-8 kept as surrogate escapes)."""
    return len(value) if value.isascii() else len(value.encode("utf-8", "surrogateescape"))


def _clean(path: str) -> str:
    """Drop ``.`` parts and repeated slashes; keep ``..`` (a symlink can make it lie)."""
    if path.startswith("/") and "//" not in path and "/./" not in path and not path.endswith(("/", "/.")):
        return path  # already clean: most paths, at no cost
    lead = "/" if path.startswith("/") else ""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    return lead + "/".join(parts) if parts or lead else "."
