"""The strace witness: its options (`strace_argv`), its sans-IO parser and its trio task.

The chamber runs ``strace *strace_argv(fifo) -- command``; `run_strace_witness` feeds what
it reads from the FIFO to `StraceParser.feed` and moves the ``(wall_ns, event)`` pairs of
`StraceParser.next_event` (``wall_ns``: ns since the Unix epoch, the call's entry time) to
the ledger writer unchanged. The parser (`collectors._strace_parser`) has no trio, files or
clocks: the same bytes and pid mapping always give the same events; a line it does not
know is a `WitnessRaw`, never dropped; a call with no return value has ``errno``
`UNFINISHED`; `StraceParser.feed` after `close` raises `ParserClosedError`.
What becomes which event, truncation, order, pids and secrets: docs/witnesses.md,
"The strace witness".
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Callable, Mapping

from collectors._strace_parser import (
    AUDITED_SYSCALLS,
    DENIED_SYSCALLS,
    NEED_DATA,
    STRACE_SYSCALLS,
    UNFINISHED,
    WITNESS,
    ParserClosedError,
    Stamped,
    StraceParser,
    _LEGACY,
)
if TYPE_CHECKING:  # the trio task's; the parser and the options import no trio
    import trio

    from collectors._witness import Witnessing
    from ledger import Submission

__all__ = [
    "AUDITED_SYSCALLS",
    "DENIED_SYSCALLS",
    "NEED_DATA",
    "UNFINISHED",
    "STRACE_SYSCALLS",
    "WITNESS",
    "Stamped",
    "StraceParser",
    "ParserClosedError",
    "named_pids",
    "run_strace_witness",
    "strace_argv",
]

def strace_argv(output_path: str, *, seccomp: bool = True, string_limit: int = 4096,
                verbose_env: bool = False, deny: Iterable[str] = DENIED_SYSCALLS,
                leave_out: Iterable[str] = ()) -> list[str]:
    """The strace options of the witness, without ``strace`` itself or the traced command.

    ``-f`` follows forks and prefixes every line with the pid; ``-ttt`` stamps it with
    seconds since the Unix epoch and microseconds; ``-yy`` decorates fds with paths and
    socket addresses; ``-q`` hides attach messages but keeps exit lines (``-qq`` would not);
    ``--pidns-translation`` (strace >= 5.9) follows a pid a tracee sees in a nested PID
    namespace with a ``/* N in strace's PID NS */`` comment, so a clone inside
    ``unshare -pf`` or bubblewrap names its child as the line prefixes do.

    Args:
        output_path: where strace writes its trace (a FIFO or a file).
        verbose_env: ``-v``, so execve's environment is printed and becomes
            ``ProcessExec.env`` (the caller must fingerprint credentials before the ledger).
        string_limit: longest string strace prints before cutting it with ``...``, bytes.
        leave_out: syscalls dropped from the filter (selftest only: a witness that silently
            stopped seeing a family, which ``witness.disagreement`` must catch).
        deny: syscalls strace fails with EPERM instead of running them (``-e inject``),
            printed with ``(INJECTED)``; they must be in `STRACE_SYSCALLS`.

    Returns:
        The options, e.g. ``["-f", "-ttt", ..., "-o", output_path]``.

    Raises:
        ValueError: ``string_limit`` is below 1, or ``deny`` names a call not traced.
    """
    if string_limit < 1:
        raise ValueError(f"string_limit must be >= 1, got {string_limit}")
    deny = list(deny)
    if not set(deny) <= set(STRACE_SYSCALLS):
        raise ValueError(f"deny: not traced: {sorted(set(deny) - set(STRACE_SYSCALLS))}")
    dropped = set(leave_out)
    spec = ",".join(("?" + n) if n in _LEGACY else n for n in STRACE_SYSCALLS if n not in dropped)
    argv = ["-f", "-ttt", "-yy", "-s", str(string_limit), "-q"] + (["-v"] if verbose_env else [])
    if seccomp:
        argv.append("--seccomp-bpf")
    inject = ["-e", f"inject={','.join(deny)}:error=EPERM"] if deny else []
    return [*argv, "--pidns-translation", "-e", f"trace={spec}", *inject, "-o", str(output_path)]


_CHUNK = 1 << 16  # bytes read from the trace at a time
_READ_AHEAD_CHUNKS = 1024  # chunks read but not parsed yet, at most (64 MiB); then strace waits
_FEED = 4096  # bytes parsed between two looks at the trace, see `_parse`


async def run_strace_witness(
    send_channel: trio.MemorySendChannel[Submission],
    *,
    trace: trio.abc.ReceiveStream,
    parser: StraceParser,
    detail: dict[str, Any],
    host_pids: Callable[[set[int]], Mapping[int, int]] | None = None,
    root_exit_expected: Callable[[], bool] = lambda: True,
    task_status: trio.TaskStatus[None] | None = None,
) -> None:
    """Move the trace's bytes through ``parser`` into the ledger until the trace ends.

    Sends ``witness.started``, then the parser's events exactly as it made them (pids
    mapped, environments redacted). The trace is read as it comes, ahead of the parser,
    and ``host_pids`` looks up the pids each chunk names right then, while short-lived
    processes still live (`StraceParser.learn_host_pids`). At the end of the trace, and
    when cancelled, what was read is parsed, the parser closed, then ``witness.gap`` if
    the tracer wrote nothing or the traced command's exit is missing while
    ``root_exit_expected()``, then ``witness.stopped`` (``lines``, ``parse_failures``,
    ``bytes``); last words as `collectors._witness.witness_life` says.

    Args:
        send_channel: where submissions go; closed when this task ends, so pass a clone.
        trace: the tracer's output (a FIFO's read end); closed when this task ends.
        parser: the parser for this trace, made with the run's pid mapper and key.
        detail: ``witness.started``'s detail (argv, options).
        host_pids: printed pids -> host pids, found now (e.g. `collectors.procfs.HostPids.resolve`).
        root_exit_expected: asked at the end: False when the chamber was killed at its
            deadline or interrupted (a tracer killed with it is not a gap).
        task_status: started once ``witness.started`` is sent.
    """
    import trio

    from collectors._witness import witness_life

    async with witness_life(send_channel, WITNESS, missing="syscalls") as w:
        await w.started(detail)
        if task_status is not None:
            task_status.started()
        send_chunks, chunks = trio.open_memory_channel[tuple[bytes | bytearray, Mapping[int, int]]](_READ_AHEAD_CHUNKS)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_read_ahead, trace, send_chunks, host_pids)
                async for data, hosts in chunks:
                    await _parse(w, parser, data, hosts)
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(2):
                while (item := _next_nowait(chunks)) is not None:  # read, not parsed yet
                    await _parse(w, parser, *item)
                parser.close()
                await _parse(w, parser, b"", {})  # what close() flushed
                if parser.root_pid is None:
                    await w.gap("the tracer wrote nothing", missing="every syscall")
                elif not parser.root_exited and root_exit_expected():
                    await w.gap("the tracer exited before the agent", missing="syscalls after its last line")
        await w.stopped()


async def _read_ahead(trace: trio.abc.ReceiveStream,
                      send: trio.MemorySendChannel[tuple[bytes | bytearray, Mapping[int, int]]],
                      host_pids: Callable[[set[int]], Mapping[int, int]] | None) -> None:
    """Read the trace as it comes, each chunk with the host pids of the pids it names."""
    tail = b""  # a line cut by the chunk's end, named with the next chunk
    async with send, trace:
        while data := await trace.receive_some(_CHUNK):
            lines, _, tail = (tail[-_CHUNK:] + data).rpartition(b"\n")
            await send.send((data, host_pids(named_pids(lines)) if host_pids is not None and lines else {}))


def _next_nowait(chunks: trio.MemoryReceiveChannel[tuple[bytes | bytearray, Mapping[int, int]]]):
    import trio

    try:
        return chunks.receive_nowait()
    except (trio.WouldBlock, trio.EndOfChannel):
        return None


async def _parse(w: Witnessing, parser: StraceParser, data: bytes | bytearray, hosts: Mapping[int, int]) -> None:
    """Feed ``data`` (after its host pids; nothing after `StraceParser.close`) and send the
    events, a slice at a time: parsing is the slow part, and between slices the reader
    takes in what the tracer wrote meanwhile, while its processes still live."""
    import trio

    parser.learn_host_pids(hosts)
    for start in range(0, max(len(data), 1), _FEED):
        if data:
            parser.feed(data[start:start + _FEED])
        while (item := parser.next_event()) is not NEED_DATA:
            await w.send(item.event, wall_ns=item.wall_ns)
        await trio.lowlevel.checkpoint()
    w.lines, w.parse_failures, w.bytes = parser.lines, parser.parse_failures, parser.bytes


_NAMED = re.compile(rb"(?m)^(\d+) +\d+\.\d+ |(?:clone3?|v?fork)\(.*\) += (\d+)$|<\.\.\. (?:clone3?|v?fork) resumed>.*= (\d+)$")


def named_pids(lines: bytes) -> set[int]:
    """The pids whole lines of trace name: of each line, and the children clones return.

    Cheap (one regular expression over the bytes), so it can run as the bytes arrive,
    long before they are parsed: the hint for a host pid lookup
    (`StraceParser.learn_host_pids`). Give whole lines: a line cut at either end may
    read as another pid.
    """
    return {int(a or b or c) for a, b, c in _NAMED.findall(lines)}
