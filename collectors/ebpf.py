"""The eBPF syscall witness: a BPF program run from the host, its output parsed sans-IO into events.

Two backends (`collectors._ebpf_backend`) run the same probes and print the same lines:
the libbpf loader ``collectors/bpf/build/caisson-ebpf`` (``collectors/bpf/witness.bpf.c``,
one BPF ring buffer read in batches; built by ``scripts/setup.sh``) and, where it is not
built, bpftrace with `BPFTRACE_PROGRAM` (``collectors/ebpf.bt``). Either attaches to
syscall, scheduler and io_uring tracepoints from the host, outside the chamber's reach,
and prints one line per fact about the tasks of one PID namespace (the chamber's, and any
nested in it). `EbpfParser` turns those lines into the same events as the strace witness
(`collectors.strace`):

- ``execve``/``execveat`` -> `ProcessExec` (argv, environment, ppid in the chamber);
- ``open``/``openat``/``openat2``/``creat`` and io_uring's ``IORING_OP_OPENAT[2]`` ->
  `FileOpen` (``syscall`` ``io_uring_openat`` for the latter, which strace cannot see);
- ``unlink[at]``, ``rename[at[2]]``, ``mkdir[at]``, ``rmdir``, ``[sym]link[at]``, ``chmod``,
  ``fchmodat``, ``truncate`` -> `FileChange` (``path`` and ``target`` as strace's);
- ``mknod``/``mknodat`` -> `FileChange` too;
- ``connect`` -> `NetConnect` (AF_INET, AF_INET6, AF_UNIX);
- ``sendto``/``sendmsg``/``sendmmsg`` naming a destination -> `NetSend`, one per distinct
  destination, as the strace witness's (a send on a connected socket names none and is
  not recorded at all: the kernel side tests the address pointer first);
- the audited calls (`collectors.strace.AUDITED_SYSCALLS`: io_uring, file handles,
  fanotify, mount-like, ``pidfd_getfd``, ``ptrace``, ``process_vm_readv``/``writev``,
  ``memfd_create``) -> `ProcessSyscall`, ``denied`` when the chamber's seccomp filter
  refused it (see the ``P`` line);
- a process's last thread exiting -> `ProcessExit`;
- ``chdir``/``fchdir``/fork: state only (cwd, inherited by children);
- ``Lost N events`` (bpftrace's perf buffer, or the loader's count of records its ring
  buffer or entry map had no room for) -> `WitnessGap` (the cell is void);
- any other line -> `WitnessRaw` (``parse_failures``), never dropped.

Line grammar (space separated; a string is the rest of its line)::

    B <mono_ns> <pidns_inum> <level> <init_pid>       probes attached (BEGIN)
    O <entry_ns> <tgid> <tid> <nspid> <probe> <i0> <i1> <ret> <path>   an open or change, on return
    E <mono_ns> <tgid> <tid> <nspid> <probe> <i0> <i1> exec, fchdir or connect entered
    S|A|V <tid> <string>                               path / argv / env string of that call
    T <tid> argv|env                                   the list was cut (64 argv, 128 env)
    Z <tid>                                            the entry's strings are complete
    R <mono_ns> <tgid> <tid> <nspid> <probe> <ret>     it returned (ret: value or -errno)
    F <mono_ns> <tgid> <tid> <nspid> <child_tid>       a fork or thread
    Q <mono_ns> <tgid> <tid> <nspid> <exit_code>       a process's last thread exited (wait status)
    U <mono_ns> <tgid> <tid> <nspid> <op> <req> <dfd> <flags> [<path>]  io_uring submission
    K <mono_ns> <tgid> <tid> <req> <res>               completion of a traced io_uring open
    N <tid> <family> <port> <address>                  one destination of the send its thread entered
    T <tid> dests                                      sendmmsg: messages past the 64th were not read
    P <mono_ns> <tgid> <tid> <nspid> <syscall> <entered> <ret> <a0> <a1> <a2> <a3> <string>
                                                       an audited call returned

``i0``/``i1``: exec: the parent's pid in the chamber (0: outside) and on the host; opens:
dirfd (-100 is AT_FDCWD), flags; renames and links: old and new dirfd (the first name is
an ``S`` line just before the ``O``); unlinkat: dirfd, flags; connect: family, port; fchdir: fd;
sends (``E`` then one ``N`` per message naming a destination, ``Z``; then ``R``): the
flags (``MSG_*``) and 0. ``N``: the family number, the port (0 outside AF_INET/AF_INET6)
and the address (IP text, a unix path, ``@name`` for an abstract one; empty for other
families). The libbpf program reads the ``msg_name`` of sendmmsg's first 64 messages
(bpftrace's, the first 8: 0.17 has no bounded loop but ``unroll``); past those, a
``T <tid> dests`` line, and the parser makes a `WitnessGap` (destinations unread).

``P``: the syscall's name (``umount2``, as seccomp spells it), ``entered`` 1 when its
``sys_enter`` tracepoint fired, ``ret`` the value or -errno, four integer arguments as the
kernel got them (ptrace: request, pid, addr, data; process_vm_readv/writev: pid, liovcnt,
riovcnt, flags, never the buffers nor their addresses; memfd_create: flags, 0, 0, 0 and
its name as the string; the others: their first four, 0 past their count) and a string
(empty but for memfd_create). The refusal rule: the kernel runs the seccomp filter before
the ``sys_enter`` tracepoints, and a refused call still passes the ``sys_exit`` one with the
filter's errno (kernel/entry/common.c, ``syscall_trace_enter`` and ``syscall_exit_work``;
checked on Linux 6.18 with SECCOMP_RET_ERRNO). So a ``P`` line with ``entered`` 0 and ret
-EPERM of a call in the run's denied list (`EbpfParser`'s ``denied_syscalls``) is a call the
chamber's policy refused: ``ProcessSyscall`` ``denied``, with no arguments (the filter ran
before any probe could read them). A call entered before the probes attached also has no
entry: it is reported as refused only if it also returned -EPERM.
Pids: ``tgid``/``tid`` are the host's; ``nspid`` is the process's pid in the chamber.
An exec, fchdir or connect can return on another CPU than it entered, and bpftrace prints
each CPU's buffer in turn: its ``R`` may come before its ``E``; the two are paired in
either order and the event comes out once both and the ``Z`` are in. (The libbpf loader's
ring buffer is one stream in the order the records were reserved; the pairing in either
order is kept for bpftrace.)

Limits, stated: either backend copies at most `STRING_LIMIT` - 1 = 199 bytes of a string
(bpftrace 0.17 with ``BPFTRACE_STRLEN`` = 200; the loader's ``STRLEN`` in
``collectors/bpf/witness.h``, a 200-byte field whose last byte is the NUL), 64 argv and 128
environment strings per exec (more: a ``T`` line): a string of 199 bytes or more is taken
as cut and marked with a ``...`` suffix (``truncated``).
Both print strings raw, so a newline inside one continues on the next line: a line
that is no record, right after a string line, is joined to that string. Relative paths are
resolved against the cwd tracked from chdir/fchdir and inherited from the parent (the
chamber's workdir at its start); a path through a dirfd whose open was not seen stays
relative. bpftrace prints each CPU's buffer in turn, so lines of different CPUs can come
out of order (a child's exec before its parent's fork line): a process takes its parent's
cwd at whichever of the two comes first, and ``wall_ns`` is not monotonic across events.
Paths of opens and changes are read when the call returns (the kernel has faulted them
in by then); exec's path and argv when it enters (its memory is gone after a successful
exec), so a string the program could not read is empty, never guessed.
Times: ``wall_ns`` = the line's monotonic ns + ``clock_offset_ns`` (wall - monotonic, taken
once by the task and recorded in ``witness.started``), so replay builds identical events.
"""

from __future__ import annotations

import errno as _errno
import fcntl
import functools
import posixpath
import re
import signal as _signal
import subprocess
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import trio

from collectors._ebpf_backend import (BPFTRACE_PROGRAM, LOADER, EbpfProgram, ebpf_program,
                                      loader_command)
from collectors._lines import take_lines
from collectors._strace_parser import AUDITED_SYSCALLS, DENIED_SYSCALLS, NEED_DATA, UNFINISHED, Stamped, _NeedData
from collectors._witness import Witnessing, witness_life
from ledger import CaissonError, Submission, redact_exec
from ledger.events import (FileChange, FileOpen, NetConnect, NetSend, ProcessExec, ProcessExit, ProcessSyscall,
                           WitnessGap, WitnessRaw, WitnessStopped)

__all__ = ["BPFTRACE_PROGRAM", "LOADER", "NEED_DATA", "STRING_LIMIT", "WITNESS", "EbpfParser", "EbpfProgram",
           "EbpfWitnessError", "ParserClosedError", "bpftrace_command", "ebpf_program", "loader_command", "open_flags",
           "run_ebpf_witness"]

WITNESS = "ebpf"
"""The ``witness`` name of the events this parser makes and of its ledger source."""
STRING_LIMIT = 200
"""Bytes reserved per string, the NUL included: ``BPFTRACE_STRLEN`` (0.17's maximum) and the
libbpf program's ``STRLEN`` (``collectors/bpf/witness.h``); at most 199 bytes are copied."""
AT_FDCWD = -100
BATCH_S = 0.02
"""Default wait between reads of bpftrace's output once it has attached, seconds (`run_ebpf_witness`)."""
READ_BYTES = 1 << 20
"""Most bytes taken from bpftrace's output by one read."""
PIPE_BYTES = 1 << 20
"""Capacity asked for bpftrace's stdout pipe (``F_SETPIPE_SZ``; Linux's default is 64 KiB and
its unprivileged ceiling ``/proc/sys/fs/pipe-max-size``, 1 MiB by default): 50 ms of a flood of
200-byte lines at 100,000 a second."""

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
_RECORD = re.compile(r"^(?:[BERFQUKOP] \d|[SAVTN] \d+ |[SAVTZ] \d+$)")
_LOST = re.compile(r"^Lost (\d+) events$")


@functools.lru_cache(maxsize=1024)
def open_flags(flags: int) -> str:
    """``open(2)`` flags as strace spells them, e.g. ``O_RDONLY|O_CLOEXEC`` (unknown bits in hex)."""
    names = [("O_RDONLY", "O_WRONLY", "O_RDWR", "O_ACCMODE")[flags & 3]]
    rest = flags & ~3
    for bit, name in _OPEN_FLAGS:
        if rest & bit:
            names.append(name)
            rest &= ~bit
    if rest:
        names.append(hex(rest))
    return "|".join(names)


def bpftrace_command(pidns_inum: int, level: int, init_pid: int, *, program: Path = BPFTRACE_PROGRAM,
                     perf_rb_pages: int = 1024) -> tuple[list[str], dict[str, str]]:
    """The bpftrace command line and extra environment that witness one PID namespace.

    Args:
        pidns_inum: inode number of the chamber's PID namespace (``stat -L /proc/PID/ns/pid``).
        level: that namespace's depth below the host's (1 for a container of the host).
        init_pid: host pid of the namespace's init (its child reaper).
        program: the bpftrace program.
        perf_rb_pages: pages per CPU of bpftrace's perf ring buffer; a smaller buffer
            loses events sooner (tests use it to force ``Lost N events``).

    Returns:
        ``(argv, env)``: argv starts with ``bpftrace``; env is to be added to the caller's.

    Raises:
        ValueError: ``pidns_inum``, ``level`` or ``init_pid`` below 1, or ``perf_rb_pages`` not a
            power of 2.
    """
    if min(pidns_inum, level, init_pid) < 1:
        raise ValueError(f"pidns_inum, level and init_pid must be >= 1, got {pidns_inum}, {level}, {init_pid}")
    if perf_rb_pages < 1 or perf_rb_pages & (perf_rb_pages - 1):
        raise ValueError(f"perf_rb_pages must be a power of 2, got {perf_rb_pages}")
    env = {"BPFTRACE_STRLEN": str(STRING_LIMIT), "BPFTRACE_PERF_RB_PAGES": str(perf_rb_pages),
           "BPFTRACE_MAP_KEYS_MAX": "65536"}
    return ["bpftrace", "-B", "line", str(program), str(pidns_inum), str(level), str(init_pid)], env


class ParserClosedError(CaissonError):
    """Raised on our own misuse: `EbpfParser.feed` after `EbpfParser.close`."""


class _Call:
    __slots__ = ("name", "mono", "tgid", "nspid", "i0", "i1", "strings", "argv", "env", "cut", "ret", "sealed")

    def __init__(self, name: str, mono: int, tgid: int, nspid: int, i0: int, i1: int):
        self.name, self.mono, self.tgid, self.nspid, self.i0, self.i1 = name, mono, tgid, nspid, i0, i1
        self.strings: list[str] = []
        self.argv: list[str] = []
        self.env: list[str] = []
        self.cut: set[str] = set()
        self.ret: int | None = None  # the return value, once its R line is read
        self.sealed = False  # its Z line was read: no more strings


class _Text(NamedTuple):
    values: list[str]  # the list whose last string a continuation line extends
    call: _Call | None


class EbpfParser:
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
                ``string_limit - 1`` bytes or more is taken as cut).
            max_line_bytes: a longer line is cut there and the rest parsed as lines.
            denied_syscalls: the calls the chamber's seccomp profile refuses (``run.started``'s
                ``seccomp.denied``): a ``P`` line of one that never entered and returned
                -EPERM is ``denied``.
        """
        self._denied = frozenset(denied_syscalls)
        self._offset, self._root_cwd = clock_offset_ns, root_cwd
        self._limit, self._max_line = string_limit, max_line_bytes
        self._root = root_host_pid
        self._key, self._patterns = fingerprint_key, tuple(credential_patterns)
        self._tracer, self._skip = skip_tracer, None  # the tracer's host pid, once its exec is read
        self._skip_children: set[int] = set()  # the tracer's children, until their exec
        self.root_exited = False
        self._buf = bytearray()
        self._out: deque[Stamped] = deque()
        self._calls: dict[int, _Call] = {}  # tid -> its E call, until both R and Z are read
        self._early: dict[int, tuple[str, int, int, int]] = {}  # tid -> (name, ret, mono, tgid) of an R before its E
        self._pre: dict[int, list[str]] = {}  # tid -> S lines before an O (a rename's old name)
        self._uring: dict[int, _Call] = {}  # io_uring req address -> its open
        self._cwd: dict[int, str | None] = {}  # tgid (or a child's tid, until it runs) -> cwd
        self._fds: dict[int, dict[int, str]] = {}  # tgid -> fd -> path, from opens seen
        self._text: _Text | None = None  # the string a continuation line extends
        self._held: tuple[int, _Call] | None = None  # an O line's call, until its path is whole
        self.last_ns: int | None = None
        self._closed = False
        self.attached = False
        self.pidns_inum: int | None = None
        self.lines = self.events = self.parse_failures = self.bytes = 0
        self.lost = self.truncated = self.unmapped = 0

    def feed(self, data: bytes) -> None:
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

    def next_event(self) -> Stamped | _NeedData:
        """The next ``(wall_ns, event)``, or `NEED_DATA` when the bytes so far are used up."""
        if not self._out:
            return NEED_DATA
        self.events += 1
        return self._out.popleft()

    def witness_stopped(self) -> WitnessStopped:
        """The ``witness.stopped`` event with this parser's counts."""
        return WitnessStopped(witness=WITNESS, lines=self.lines, events=self.events,
                              parse_failures=self.parse_failures, bytes=self.bytes)

    # --- lines ---------------------------------------------------------------------------

    def _line(self, text: str) -> None:
        self.lines += 1
        record = _RECORD.match(text) is not None
        lost = None if record else _LOST.match(text)
        if not record and lost is None and self._text is not None:  # a newline inside the previous string
            values = self._text.values
            values[-1] = self._cut(values[-1] + "\n" + text)
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
        if tag in "SAVTZN":
            self._string(tag, text)
            return
        f = text.split(" ", 12 if tag == "P" else 9)
        mono = int(f[1])
        self.last_ns = mono + self._offset
        if tag == "B":
            self.attached, self.pidns_inum = True, int(f[2])
        elif tag == "K":
            call = self._uring.pop(int(f[4]))
            self._finish(int(f[3]), call, int(f[5]))
        elif tag == "O":
            tid = int(f[3])
            call = _Call(f[5].rpartition("sys_exit_")[2], mono, int(f[2]), int(f[4]), int(f[6]), int(f[7]))
            call.ret = int(f[8])
            call.strings = [*self._pre.pop(tid, []), self._cut(f[9] if len(f) > 9 else "")]
            self._text = _Text(call.strings, call)
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
            call.strings = [self._cut(f[12] if len(f) > 12 else "")]
            self._text = _Text(call.strings, call)
            self._held = (tid, call)  # the next line may continue its string
        elif tag == "R":
            self._return(f, mono)
        elif tag == "F":
            self._inherit(int(f[2]), int(f[5]))
            if int(f[2]) == self._skip:  # the tracer's child runs the tracer's code until it execs
                self._skip_children.add(int(f[5]))
        elif tag == "Q":
            tgid, nspid, status = int(f[2]), int(f[4]), int(f[5])
            sig = status & 0x7F
            self._cwd.pop(tgid, None)
            self._fds.pop(tgid, None)
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
            call.strings = [self._cut(f[9] if len(f) > 9 else "")]
            self._uring[int(f[6])] = call
            self._text = _Text(call.strings, call)

    def _string(self, tag: str, text: str) -> None:
        """An S/A/V/N/T/Z line: a string of the call its thread is entering (or, S, of an O to come)."""
        _, tid_s, *rest = text.split(" ", 2)
        tid = int(tid_s)
        value = rest[0] if rest else ""
        call = self._calls.get(tid)
        if call is not None and call.sealed:
            call = None
        if tag == "Z":
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
            values.append(self._cut(value))
            self._text = _Text(values, None)
        else:
            values = {"S": call.strings, "A": call.argv, "V": call.env, "N": call.strings}[tag]
            values.append(self._cut(value))
            self._text = _Text(values, call)

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

    def _inherit(self, parent: int, child: int) -> None:
        """A child's cwd and fds are its parent's, unless the child was seen first."""
        if child not in self._cwd:
            self._cwd[child] = self._cwd.get(parent, self._root_cwd)
            self._fds[child] = dict(self._fds.get(parent, {}))

    def _cut(self, value: str) -> str:
        size = len(value) if value.isascii() else len(value.encode("utf-8", "surrogateescape"))
        if size >= self._limit - 1 and not value.endswith("..."):
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
            argv = call.argv + (["..."] if "argv" in call.cut else [])
            env = dict(item.partition("=")[::2] for item in call.env if "=" in item)
            if self._key is not None:  # no secret reaches the ledger, in argv or environment
                argv, env = redact_exec(argv, env, key=self._key, patterns=self._patterns)
            self._emit(wall, ProcessExec(**ident, ppid=call.i0 or None, path=s[0] if s else "", argv=argv,
                                         cwd=self._cwd.get(call.tgid, self._root_cwd), env=env,
                                         result=-1 if failed else 0, errno=err))
        elif name in _OPENS or name in ("io_uring_openat", "io_uring_openat2"):
            dirfd = call.i0 if name not in ("open", "creat") else AT_FDCWD
            path = self._resolve(call.tgid, dirfd, s[0] if s else "")
            flags = open_flags(call.i1)
            access = ("r", "w", "rw", "rw")[call.i1 & 3]
            if not failed and path.startswith("/"):
                self._fds.setdefault(call.tgid, {})[ret] = path  # type: ignore[index]
            self._emit(wall, FileOpen(**ident, syscall=name, path=path, flags=flags, access=access,
                                      result=None if failed else ret, errno=err))
        elif name in _CHANGES:  # as strace's FileChange: path is the entry made, removed or changed
            first_fd = AT_FDCWD if name in ("symlinkat", "rename", "link", "symlink") else call.i0
            if name.startswith(("rename", "link", "symlink")) and len(s) > 1:
                second = self._resolve(call.tgid, call.i1, s[1])
                if name.startswith("rename"):  # old name -> new name
                    path, target = self._resolve(call.tgid, first_fd, s[0]), second
                elif name.startswith("link"):  # the new link; target: the existing file
                    path, target = second, self._resolve(call.tgid, first_fd, s[0])
                else:  # the new symlink; target: its contents, verbatim (never resolved)
                    path, target = second, s[0]
            else:
                path, target = self._resolve(call.tgid, first_fd, s[0] if s else ""), None
            self._emit(wall, FileChange(**ident, syscall=name, path=path, target=target,
                                        result=-1 if failed else 0, errno=err))
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
            else:
                args = call.argv
            denied = not entered and ret == -_EPERM and name in self._denied
            self._emit(wall, ProcessSyscall(**ident, syscall=name, args=args, result=-1 if failed else ret,
                                            errno=err, denied=denied))
        elif name in ("chdir", "fchdir") and not failed:
            new = self._resolve(call.tgid, AT_FDCWD, s[0]) if name == "chdir" and s else \
                self._fds.get(call.tgid, {}).get(call.i0)
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

    def _resolve(self, tgid: int, dirfd: int, path: str) -> str:
        if not path:  # kept empty: never resolved to the directory (AT_EMPTY_PATH, or unreadable)
            return path
        if path.startswith("/"):
            return _clean(path)
        base = self._cwd.get(tgid, self._root_cwd) if dirfd == AT_FDCWD else self._fds.get(tgid, {}).get(dirfd)
        return _clean(posixpath.join(base, path)) if base else path

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


@functools.lru_cache(maxsize=256)
def _msg_flags(flags: int) -> str:
    """``send(2)`` flags as strace spells them, e.g. ``MSG_NOSIGNAL|MSG_FASTOPEN``; ``0`` for none."""
    names, rest = [], flags & 0xFFFFFFFF
    for bit, name in _MSG_FLAGS:
        if rest & bit:
            names.append(name)
            rest &= ~bit
    if rest:
        names.append(hex(rest))
    return "|".join(names) or "0"


def _errno_name(code: int) -> str:
    return _errno.errorcode.get(code) or _KERNEL_ERRNOS.get(code) or str(code)


def _signame(sig: int) -> str:
    try:
        return _signal.Signals(sig).name
    except ValueError:
        return f"SIG{sig}"


def _clean(path: str) -> str:
    """Drop ``.`` parts and repeated slashes; keep ``..`` (a symlink can make it lie)."""
    if path.startswith("/") and "//" not in path and "/./" not in path and not path.endswith(("/", "/.")):
        return path  # already clean: most paths, at no cost
    lead = "/" if path.startswith("/") else ""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    return lead + "/".join(parts) if parts or lead else "."


class EbpfWitnessError(CaissonError):
    """Raised when the witness's program (the loader or bpftrace) exits before it has attached
    its probes (``stderr``: its last words)."""

    def __init__(self, message: str, stderr: str = ""):
        super().__init__(message)
        self.stderr = stderr


async def run_ebpf_witness(send_channel: trio.MemorySendChannel[Submission], *, argv: list[str],
                           env: dict[str, str], parser: EbpfParser, stop: trio.Event, detail: dict | None = None,
                           batch_s: float = BATCH_S,
                           task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Run the witness's program (the libbpf loader or bpftrace: ``argv[0]``), feed its output
    to ``parser`` and send the events, until ``stop``; "it" below.

    Sends ``witness.started`` and signals ``task_status.started()`` once it has
    attached every probe (its BEGIN line), so the caller can let the chamber's command
    start only then; then the parser's events exactly as it made them (environments
    redacted, the skipped process left out). When ``stop`` is set, waits up to 2 s for
    the exit of the chamber's init (``parser.root_exited``) to be read, then stops
    it with SIGINT and drains its output. Then ``witness.gap`` if it was
    killed before it drained (cancelled) or exited before ``stop``; ``witness.stopped``
    with the parser's counts; last words as `collectors._witness.witness_life` says.

    Args:
        send_channel: the ledger channel clone of this witness (closed on return).
        argv, env: from `loader_command` or `bpftrace_command` (env is the program's whole environment).
        parser: a fresh `EbpfParser`, made with the run's fingerprint key.
        stop: set when the chamber has ended.
        detail: added to ``witness.started``.
        batch_s: seconds to wait after each read once attached, so that the next read takes
            many lines at once (bpftrace writes one line per ``write``; reading each as it
            comes woke this task and its ledger once per syscall of the chamber). The program
            never waits on us meanwhile: the pipe is widened to `PIPE_BYTES`.
        task_status: started once the program has attached and ``witness.started`` is sent.

    Raises:
        EbpfWitnessError: the program exited before it attached (the caller must not start the command).
    """
    proc = await trio.lowlevel.open_process(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    errors, root_exited, stderr_read, drained = bytearray(), trio.Event(), trio.Event(), trio.Event()
    async with witness_life(send_channel, WITNESS, missing="syscalls") as w:
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_read_stderr, proc, errors, stderr_read)
                nursery.start_soon(_stop_at_end, proc, stop, root_exited)
                _widen_pipe(proc.stdout)
                while data := await proc.stdout.receive_some(READ_BYTES):
                    parser.feed(data)
                    if parser.attached and not w.has_started:
                        await w.started({"argv": argv, "pidns_inum": parser.pidns_inum, **(detail or {})})
                        task_status.started()
                    await _pump(w, parser, root_exited)
                    if parser.attached:  # let lines gather in the pipe: one wake-up for many
                        await trio.sleep(batch_s)
                drained.set()  # end of its output: every line is read, whatever its exit takes
                await proc.wait()
                with trio.move_on_after(1):  # its last words, before they are quoted
                    await stderr_read.wait()
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(2):
                await _end(w, proc, parser, stop, errors, root_exited, drained)
        if not w.has_started:
            raise EbpfWitnessError(f"{_name(argv)} exited ({proc.returncode}) before attaching: {_tail(errors)}",
                                   _tail(errors))
        await w.stopped()


async def _end(w: Witnessing, proc: trio.Process, parser: EbpfParser, stop: trio.Event, errors: bytearray,
               root_exited: trio.Event, drained: trio.Event) -> None:
    """Kill the program if it still runs, send what the parser holds, then the gap if any.

    Killed after the end of its output (the loader closes stdout once its ring is drained,
    then detaches its probes, which can take seconds): nothing was lost, no gap."""
    running = proc.returncode is None
    killed = running and not drained.is_set()  # cancelled before the program drained
    if running:
        proc.kill()
    parser.close()
    await _pump(w, parser, root_exited)
    w.lines, w.parse_failures, w.bytes = parser.lines, parser.parse_failures, parser.bytes
    if w.has_started and killed:
        await w.gap(f"{_name(proc.args)} was killed before it had drained its buffers",
                    missing="syscalls not yet printed", since_ns=parser.last_ns)
    elif w.has_started and not stop.is_set():
        await w.gap(f"{_name(proc.args)} exited before the chamber ended: {_tail(errors)}",
                    missing="syscalls after its last line", since_ns=parser.last_ns)


async def _pump(w: Witnessing, parser: EbpfParser, root_exited: trio.Event) -> None:
    items = []
    while (item := parser.next_event()) is not NEED_DATA:
        items.append((item.event, item.wall_ns))
    await w.send_many(items)
    if parser.root_exited:
        root_exited.set()


async def _read_stderr(proc: trio.Process, errors: bytearray, done: trio.Event) -> None:
    """Keep the program's words (16 KiB of each chunk at most), to quote them in a gap."""
    async for chunk in proc.stderr:
        errors.extend(chunk[: 1 << 14])
    done.set()


async def _stop_at_end(proc: trio.Process, stop: trio.Event, root_exited: trio.Event) -> None:
    await stop.wait()
    with trio.move_on_after(2):
        await root_exited.wait()
    proc.send_signal(_signal.SIGINT)


def _widen_pipe(stream) -> None:
    """Ask for a `PIPE_BYTES` pipe (fcntl(2) ``F_SETPIPE_SZ``); the default stays if refused."""
    try:
        fcntl.fcntl(stream.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except OSError:  # refused: the program may wait on a full pipe, and what the kernel then drops is a gap
        pass


def _tail(errors: bytearray) -> str:
    lines = [ln for ln in errors.decode("utf-8", "replace").splitlines()
             if ln.strip() and "RLIMIT_MEMLOCK" not in ln]  # 0.17 warns of it even when BPF needs none
    return " | ".join(lines[-5:]) or "(nothing on stderr)"


def _name(argv) -> str:
    """The program's name for messages: ``bpftrace`` or ``caisson-ebpf``."""
    return Path(str(argv[0])).name if argv else "the eBPF witness"
