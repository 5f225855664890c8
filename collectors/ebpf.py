"""The eBPF syscall witness: a BPF program run from the host, its output parsed sans-IO into events.

Two backends (`collectors._ebpf_backend`) print the same lines: the libbpf loader `LOADER`
(built by ``scripts/setup.sh``) and, where it is not built, bpftrace with
`BPFTRACE_PROGRAM`. `EbpfParser` (`collectors._ebpf_parser`, re-exported) turns them into
the strace witness's events; ``wall_ns`` is the line's monotonic ns plus
``clock_offset_ns`` (recorded in ``witness.started``), a lost-events line is a
`WitnessGap`, an unknown one a `WitnessRaw`. `run_ebpf_witness` is the trio task; it
raises `EbpfWitnessError` when the program exits before its probes attached. The line
grammar, what becomes which event, paths, pids and limits: docs/witnesses.md, "The eBPF
witness".
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
