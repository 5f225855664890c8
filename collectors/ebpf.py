"""The eBPF syscall witness: a BPF program run from the host, its output parsed sans-IO into events.

Two backends (`collectors._ebpf_backend`) run the same probes and print the same lines:
the libbpf loader ``collectors/bpf/build/caisson-ebpf`` (``collectors/bpf/witness.bpf.c``,
one BPF ring buffer read in batches; built by ``scripts/setup.sh``) and, where it is not
built, bpftrace with `BPFTRACE_PROGRAM` (``collectors/ebpf.bt``). Either attaches to
syscall, scheduler and io_uring tracepoints from the host, outside the chamber's reach,
and prints one line per fact about the tasks of one PID namespace (the chamber's, and any
nested in it). `EbpfParser` turns those lines into the same events as the strace witness
(`collectors.strace`); the parser is `collectors._ebpf_parser`'s, re-exported here:

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
- ``chdir``/``fchdir``/fork, and bpftrace's fd-table lines (``X``): state only (cwd and
  fds, inherited by children);
- ``Lost N events`` (bpftrace's perf buffer, or the loader's count of records its ring
  buffer or entry map had no room for) -> `WitnessGap` (the cell is void);
- any other line -> `WitnessRaw` (``parse_failures``), never dropped.

Line grammar (space separated; a string is the rest of its line)::

    B <mono_ns> <pidns_inum> <level> <init_pid> [<path_limit> kernel [<arg_limit>]]  probes attached (BEGIN)
    O <entry_ns> <tgid> <tid> <nspid> <probe> <i0> <i1> <ret> <path>   an open or change, on return
    Y <tid> <field> <state> <path>                     a path the kernel holds (libbpf only; below)
    E <mono_ns> <tgid> <tid> <nspid> <probe> <i0> <i1> exec, fchdir or connect entered
    S|A|V <tid> <string>                               path / argv / env string of that call
    T <tid> argv|env                                   the list was cut (64 argv, 128 env)
    Z <tid>                                            the entry's strings are complete
    R <mono_ns> <tgid> <tid> <nspid> <probe> <ret>     it returned (ret: value or -errno)
    F <mono_ns> <tgid> <tid> <nspid> <child_tid> [<clone_flags>]  a fork or thread
    X <mono_ns> <tgid> <tid> <nspid> <probe> <ret> <a0> <a1> <a2>  an fd-table call (bpftrace only; below)
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
Paths (issue #28: a recorded path is the one the kernel opened, or says why not). The
loader's ``B`` line ends ``4097 kernel 4097``: its path arguments (``O``, ``S``, ``U``) are read up
to 4096 bytes (a name the kernel accepts is whole; one of 4096 bytes or more, which it
refuses, is taken as cut), and its kernel side walks the dentries and mounts of the paths it
holds up to the chamber's root, as d_path() does, printing a ``Y`` line for each before the
call's ``O`` (or ``U``): field ``i0``/``i1`` the directory a relative name of that field's
dirfd is resolved against (the dirfd's file, or the cwd for AT_FDCWD; read at the call's
return, so a chdir's is the cwd it made), ``ret`` the file an open returned (its
``real_path``, symlinks, magic links and ``..`` followed; no ``ret`` line when that path is
the name itself, or the name joined to its ``i0`` directory: most opens), and, inside an
exec's ``E``..``Z``, ``cwd`` its cwd; state ``ok`` (the path follows), ``cut`` (longer than
4096 bytes), ``none`` (no path in the chamber: a pipe, a socket, outside its root), ``badf``
(no such fd). A relative name is joined to its ``Y`` directory, and stays as given
(``unresolved``) without one; a name through a magic link of the caller's own process
(``/proc/<self|thread-self|its pid>[/task/<its tid>]/fd/N/...``, ``/dev/fd/N/...``, and
``cwd/``) is joined to the ``Y`` line of its field, the path of the file at that fd when the
call returned; any other (``root/``, another process's or thread's, one spelt otherwise,
``/proc/self/./fd/N/``) stays as given (``unresolved``), beside an open's ``Y ret``.
bpftrace's strings are 199 bytes and it has no ``Y`` lines: the parser follows each
process's fds from their opens and the ``X`` lines (``close``, ``close_range`` and the
``FIOCLEX``/``FIONCLEX`` ``ioctl`` at entry with ``ret`` 0; ``dup``, ``dup2``, ``dup3`` and
``fcntl``'s ``F_DUPFD``, ``F_SETFD``, ``F_DUPFD_CLOEXEC`` at exit: their arguments as the
kernel got them), a fork's ``F`` flags (``CLONE_FILES`` shares the table) and exec (its
close-on-exec fds close), in `collectors._ebpf_fds.FdTables`; an fd it did not see made (one
received over a unix socket) leaves its names unresolved. It cannot follow symlinks, nor
``..`` after one: its paths are lexical, with no ``real_path``.
Pids: ``tgid``/``tid`` are the host's; ``nspid`` is the process's pid in the chamber.
An exec, fchdir or connect can return on another CPU than it entered, and bpftrace prints
each CPU's buffer in turn: its ``R`` may come before its ``E``; the two are paired in
either order and the event comes out once both and the ``Z`` are in. (The libbpf loader's
ring buffer is one stream in the order the records were reserved; the pairing in either
order is kept for bpftrace.)

Limits, stated: bpftrace copies at most `STRING_LIMIT` - 1 = 199 bytes of any string (0.17
with ``BPFTRACE_STRLEN`` = 200); the libbpf loader 4096 bytes of a path, argv or environment
string (its ``B`` line gives both limits; strace's ``-s 4096`` keeps as much) and 199 of a
memfd name (``STRLEN`` in ``collectors/bpf/witness.h``); either, 64 argv and 128 environment
strings per exec (more: a ``T`` line): a string of the limit less one byte or more is taken
as cut and marked with a ``...`` suffix (``truncated``; the event's ``path_cut`` or
``argv_cut``).
Both print strings raw, so a newline inside one continues on the next line: a line
that is no record, right after a string line, is joined to that string. Relative paths are
resolved as the Paths paragraph says (with bpftrace: against the cwd tracked from
chdir/fchdir and inherited from the parent, the chamber's workdir at its start). bpftrace
prints each CPU's buffer in turn, so lines of different CPUs can come out of order (a
child's exec before its parent's fork line): a process takes its parent's cwd at whichever
of the two comes first, a dirfd moved on one CPU and used on another can be read before its
move, and ``wall_ns`` is not monotonic across events.
Paths of opens and changes are read when the call returns (the kernel has faulted them
in by then); exec's path and argv when it enters (its memory is gone after a successful
exec), so a string the program could not read is empty, never guessed.
Times: ``wall_ns`` = the line's monotonic ns + ``clock_offset_ns`` (wall - monotonic, taken
once by the task and recorded in ``witness.started``), so replay builds identical events.
"""

from __future__ import annotations

import fcntl
import os
import signal as _signal
import subprocess
import threading
from pathlib import Path

import trio

from collectors._ebpf_backend import (BPFTRACE_PROGRAM, LOADER, EbpfProgram, ebpf_program,
                                      loader_command)
from collectors._ebpf_parser import (AT_FDCWD, NEED_DATA, STRING_LIMIT, WITNESS, EbpfParser, ParserClosedError,
                                     open_flags)
from collectors.children import open_child
from collectors._witness import Witnessing, witness_life
from ledger import CaissonError, Submission

__all__ = ["AT_FDCWD", "BPFTRACE_PROGRAM", "LOADER", "NEED_DATA", "STRING_LIMIT", "WITNESS", "EbpfParser",
           "EbpfProgram", "EbpfWitnessError", "ParserClosedError", "bpftrace_command", "ebpf_program",
           "loader_command", "open_flags", "run_ebpf_witness"]

BATCH_S = 0.02
"""Default wait between reads of bpftrace's output once it has attached, seconds (`run_ebpf_witness`)."""
EXIT_WAIT_S = 0.2
"""How long the witness waits for its program's exit once its output has ended, seconds:
past it, the program (detaching its probes) is reaped in the background."""
READ_BYTES = 1 << 20
"""Most bytes taken from bpftrace's output by one read."""
PIPE_BYTES = 1 << 20
"""Capacity asked for bpftrace's stdout pipe (``F_SETPIPE_SZ``; Linux's default is 64 KiB and
its unprivileged ceiling ``/proc/sys/fs/pipe-max-size``, 1 MiB by default): 50 ms of a flood of
200-byte lines at 100,000 a second."""


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
    proc = await open_child(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    errors, root_exited, stderr_read, drained = bytearray(), trio.Event(), trio.Event(), trio.Event()
    async with witness_life(send_channel, WITNESS, missing="syscalls") as w:
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_read_stderr, proc, errors, stderr_read)
                nursery.start_soon(_stop_at_end, proc, stop, root_exited)
                stdout = _widened_stdout(proc)
                while data := await stdout.receive_some(READ_BYTES):
                    parser.feed(data)
                    if parser.attached and not w.has_started:
                        await w.started({"argv": argv, "pidns_inum": parser.pidns_inum, **(detail or {})})
                        task_status.started()
                    await _pump(w, parser, root_exited)
                    if parser.attached:  # let lines gather in the pipe: one wake-up for many
                        await trio.sleep(batch_s)
                drained.set()  # end of its output: every line is read, whatever its exit takes
                with trio.move_on_after(EXIT_WAIT_S):  # the loader detaches after: seconds of RCU waits
                    await proc.wait()
                    await stderr_read.wait()  # its last words, before they are quoted
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
    if killed:
        proc.kill()
    if running:  # drained, still detaching its probes (or killed): reaped in the background
        threading.Thread(target=_reap, args=(proc.pid,), name=f"reap-{proc.pid}", daemon=True).start()
    parser.close()
    await _pump(w, parser, root_exited)
    w.lines, w.parse_failures, w.bytes = parser.lines, parser.parse_failures, parser.bytes
    if w.has_started and killed:
        await w.gap(f"{_name(proc.args)} was killed before it had drained its buffers",
                    missing="syscalls not yet printed", since_ns=parser.last_ns)
    elif w.has_started and not stop.is_set():
        await w.gap(f"{_name(proc.args)} exited before the chamber ended: {_tail(errors)}",
                    missing="syscalls after its last line", since_ns=parser.last_ns)
    elif w.has_started and not running and proc.returncode != 0:  # stopped; it failed on the way out
        # (a program still detaching when its output ended is not waited for: its exit is unknown)
        await w.gap(f"{_name(proc.args)} failed when stopped (exit {proc.returncode}): {_tail(errors)}",
                    missing="syscalls it could not print", since_ns=parser.last_ns)


def _reap(pid: int) -> None:
    """Wait for the witness's program to exit, so it leaves no zombie (it is not waited for
    once its output has ended: the libbpf loader then detaches its probes, one RCU grace
    period or two each, seconds in all, that no run needs to wait for)."""
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:  # reaped already
        pass


async def _pump(w: Witnessing, parser: EbpfParser, root_exited: trio.Event) -> None:
    items = []
    while (item := parser.next_event()) is not NEED_DATA:
        items.append((item.event, item.wall_ns))
    await w.send_many(items)
    if parser.root_exited:
        root_exited.set()


async def _read_stderr(proc: trio.Process, errors: bytearray, done: trio.Event) -> None:
    """Keep the program's words (16 KiB of each chunk at most), to quote them in a gap."""
    assert proc.stderr is not None  # stderr=PIPE (`run_ebpf_witness`)
    async for chunk in proc.stderr:
        errors.extend(chunk[: 1 << 14])
    done.set()


async def _stop_at_end(proc: trio.Process, stop: trio.Event, root_exited: trio.Event) -> None:
    await stop.wait()
    with trio.move_on_after(2):
        await root_exited.wait()
    proc.send_signal(_signal.SIGINT)


def _widened_stdout(proc: trio.Process) -> trio.lowlevel.FdStream:
    """The program's stdout pipe, asked to be `PIPE_BYTES` (fcntl(2) ``F_SETPIPE_SZ``); the
    default size stays if that is refused."""
    stream = proc.stdout
    assert isinstance(stream, trio.lowlevel.FdStream)  # stdout=PIPE
    try:
        fcntl.fcntl(stream.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except OSError:  # refused: the program may wait on a full pipe, and what the kernel then drops is a gap
        pass
    return stream


def _tail(errors: bytearray) -> str:
    lines = [ln for ln in errors.decode("utf-8", "replace").splitlines()
             if ln.strip() and "RLIMIT_MEMLOCK" not in ln]  # 0.17 warns of it even when BPF needs none
    return " | ".join(lines[-5:]) or "(nothing on stderr)"


def _name(argv) -> str:
    """The program's name for messages: ``bpftrace`` or ``caisson-ebpf``."""
    return Path(str(argv[0])).name if argv else "the eBPF witness"
