"""Streaming a run's events to an external monitor (`caisson record --monitor ADDR`).

The ledger writer calls `MonitorSink.offer` for each appended record; offer encodes the
record as one JSON line and appends it to a bounded buffer without ever waiting. A trio
task, `MonitorSink.run`, connects to the monitor (retrying with backoff while it is
absent), writes the buffered lines in order, and reconnects after a disconnect. When the
buffer is full, records are dropped and counted; before the next line the monitor gets a
gap line ``{"gap": {"first_seq": A, "last_seq": B, "missed": N}}``. A slow, absent or
dying monitor therefore never blocks the run nor costs the ledger an event.

After each seal the writer writes, the sink queues a head line ``{"head": <seal>}`` (a
`ledger.HeldHead`: the signed tree head, bytes as base64), in order with the records: a
monitor that appends those lines to a file holds heads `caisson verify RUN --heads FILE`
checks the ledger against. Head lines are not records: they are not counted in the
stats, and one the buffer has no room for, or whose write failed, is not sent.

Delivery is at most once. A line counts as sent when the kernel accepted it; lines in a
write that failed are reported in a gap to the next monitor that connects (a monitor that
died may have read part of them). The buffering and gap logic is `GapTracker`, sans-IO.
"""

from __future__ import annotations

from collections import deque
from typing import Literal

import msgspec
import trio

from caisson.errors import UsageError
from ledger import Record, Seal, encode_head
from ledger.events import event_kind

__all__ = [
    "Gap",
    "GapTracker",
    "MonitorAddress",
    "MonitorSink",
    "StreamStats",
    "parse_monitor_address",
    "record_json",
]

_encoder = msgspec.json.Encoder()
_FORMS = "expected unix:/path/to.sock or tcp:HOST:PORT (port 1-65535)"


def record_json(record: Record) -> bytes:
    """The JSON line for one record (without the newline).

    The line is ``{"seq", "ts_ns", "source", "kind", ...event fields}``; ``ts_ns`` is the
    wall time in ns since the Unix epoch. Shared by `caisson tail` and `MonitorSink`.
    """
    fields = msgspec.to_builtins(record.event)
    fields.pop("kind", None)
    line = {"seq": record.seq, "ts_ns": record.wall_ns, "source": record.source, "kind": event_kind(record.event)}
    line.update(fields)
    return _encoder.encode(line)


class MonitorAddress(msgspec.Struct, frozen=True, kw_only=True):
    """Where the monitor listens: a unix socket path or a TCP host and port."""

    kind: Literal["unix", "tcp"]
    path: str | None = None  # unix: the socket's filesystem path
    host: str | None = None  # tcp: a name or an IP literal (IPv6 without brackets)
    port: int | None = None  # tcp: 1-65535

    def __str__(self) -> str:
        if self.kind == "unix":
            return f"unix:{self.path}"
        host = f"[{self.host}]" if self.host and ":" in self.host else self.host
        return f"tcp:{host}:{self.port}"


def parse_monitor_address(text: str) -> MonitorAddress:
    """Parse ``unix:/path/to.sock`` or ``tcp:host:port`` (``tcp:[::1]:9000`` for IPv6).

    Raises:
        UsageError: the text is neither form; the message names it and the forms.
    """
    scheme, sep, rest = text.partition(":")
    if sep and scheme == "unix" and rest:
        return MonitorAddress(kind="unix", path=rest)
    if sep and scheme == "tcp":
        host, sep, port_text = rest.rpartition(":")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        if sep and host and port_text.isascii() and port_text.isdigit() and 0 < int(port_text) < 65536:
            return MonitorAddress(kind="tcp", host=host, port=int(port_text))
    raise UsageError(f"monitor address {text!r}: {_FORMS}")


class Gap(msgspec.Struct, frozen=True, kw_only=True):
    """Records the monitor will never get, told to it in place of them."""

    first_seq: int  # the first missed record's sequence number
    last_seq: int  # the last missed record's sequence number (inclusive)
    missed: int  # how many records in [first_seq, last_seq] were missed

    def merge(self, later: Gap) -> Gap:
        """The gap covering this one and ``later``, which follows it."""
        return Gap(first_seq=min(self.first_seq, later.first_seq), last_seq=max(self.last_seq, later.last_seq),
                   missed=self.missed + later.missed)

    def line(self) -> bytes:
        """The gap line sent to the monitor (without the newline)."""
        return _encoder.encode({"gap": self})


class StreamStats(msgspec.Struct, frozen=True, kw_only=True):
    """What a sink did; at the end of a run, ``offered == sent + dropped``."""

    offered: int  # records offered by the ledger writer
    sent: int  # records whose line the kernel accepted for a monitor
    dropped: int  # records no monitor got: buffer full, failed write, or left at close
    gaps: int  # gap lines sent
    connections: int  # successful connections to a monitor


class _Head(msgspec.Struct, frozen=True):
    line: bytes  # a head line, without its newline


class _Batch(msgspec.Struct):
    entries: list[tuple[int, bytes] | Gap | _Head]
    data: bytes


class GapTracker:
    """A bounded, ordered buffer of lines and gaps (sans-IO: no sockets, no clock).

    Entries are record lines ``(seq, line)`` and closed gaps, in sequence order. Drops
    extend an open gap, which closes when the next line is pushed (or when the buffer
    empties), so every offered sequence number is either a line or inside one gap.

    Args:
        capacity: how many record lines may wait (gaps are not counted).
    """

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._entries: deque[tuple[int, bytes] | Gap | _Head] = deque()
        self._lines = 0  # record lines in _entries
        self._open: Gap | None = None
        self.offered = self.sent = self.dropped = self.gaps = 0

    @property
    def full(self) -> bool:
        """True when the next record must be dropped."""
        return self._lines >= self.capacity

    @property
    def empty(self) -> bool:
        """True when nothing, neither a line nor a gap, waits to be sent."""
        return not self._entries and self._open is None

    def push(self, seq: int, line: bytes) -> None:
        """Queue one record's line (the caller checked `full`)."""
        self.offered += 1
        if self._open is not None:
            self._entries.append(self._open)
            self._open = None
        self._entries.append((seq, line))
        self._lines += 1

    def push_head(self, line: bytes) -> None:
        """Queue a head line after what is queued (not counted; left out when `full`)."""
        if self.full:
            return
        if self._open is not None:
            self._entries.append(self._open)
            self._open = None
        self._entries.append(_Head(line))

    def drop(self, seq: int) -> None:
        """Count one record as dropped; it joins the open gap."""
        self.offered += 1
        self.dropped += 1
        gap = Gap(first_seq=seq, last_seq=seq, missed=1)
        self._open = gap if self._open is None else self._open.merge(gap)

    def take(self, max_bytes: int = 65536) -> _Batch | None:
        """Remove the next entries (at least one, about ``max_bytes`` of lines) to send."""
        if not self._entries and self._open is not None:
            self._entries.append(self._open)
            self._open = None
        entries: list[tuple[int, bytes] | Gap | _Head] = []
        parts: list[bytes] = []
        size = 0
        while self._entries and (not parts or size < max_bytes):
            entry = self._entries.popleft()
            if isinstance(entry, Gap):
                data = entry.line()
            elif isinstance(entry, _Head):
                data = entry.line
            else:
                data = entry[1]
                self._lines -= 1
            entries.append(entry)
            parts.append(data)
            parts.append(b"\n")
            size += len(data) + 1
        return _Batch(entries=entries, data=b"".join(parts)) if entries else None

    def commit(self, batch: _Batch) -> None:
        """The batch was written: count its lines as sent and its gaps as told."""
        gaps = sum(isinstance(e, Gap) for e in batch.entries)
        self.gaps += gaps
        self.sent += sum(isinstance(e, tuple) for e in batch.entries)

    def fail(self, batch: _Batch) -> None:
        """The batch's write failed: its records become a gap in front of the rest."""
        gap: Gap | None = None
        for entry in batch.entries:
            if isinstance(entry, _Head):
                continue
            if not isinstance(entry, Gap):
                self.dropped += 1
                entry = Gap(first_seq=entry[0], last_seq=entry[0], missed=1)
            gap = entry if gap is None else gap.merge(entry)
        if gap is None:
            return
        if self._entries and isinstance(self._entries[0], Gap):
            self._entries[0] = gap.merge(self._entries[0])
        elif self._entries:
            self._entries.appendleft(gap)
        else:
            self._open = gap if self._open is None else gap.merge(self._open)

    def finish(self) -> StreamStats:
        """Count everything still waiting as dropped; return the final counts."""
        self.dropped += self._lines
        self._entries.clear()
        self._lines = 0
        self._open = None
        return self.stats()

    def stats(self) -> StreamStats:
        """The counts so far."""
        return StreamStats(offered=self.offered, sent=self.sent, dropped=self.dropped, gaps=self.gaps,
                           connections=0)


async def _connect(address: MonitorAddress) -> trio.SocketStream:
    if address.kind == "unix":
        assert address.path is not None
        return await trio.open_unix_socket(address.path)
    assert address.host is not None and address.port is not None
    return await trio.open_tcp_stream(address.host, address.port)


class MonitorSink:
    """Streams records to one monitor address as JSON lines, never blocking the writer.

    Use ``writer.add_listener(sink.offer)``, start ``await nursery.start(sink.run)``, and
    at the end of the run ``stats = await sink.aclose()``. `offer` must be called from the
    thread that runs trio (or before trio starts), never from another thread.

    Args:
        address: where the monitor listens.
        buffer_events: how many lines may wait for a slow or absent monitor.
        retry_initial_s: the first delay before reconnecting, seconds; doubled per failure.
        retry_max_s: the longest delay between connection attempts, seconds.
        connect_timeout_s: how long one connection attempt may take, seconds.
    """

    def __init__(self, address: MonitorAddress, *, buffer_events: int = 10_000, retry_initial_s: float = 0.05,
                 retry_max_s: float = 1.0, connect_timeout_s: float = 5.0):
        self.address = address
        self.retry_initial_s = retry_initial_s
        self.retry_max_s = retry_max_s
        self.connect_timeout_s = connect_timeout_s
        self._tracker = GapTracker(buffer_events)
        self._wakeup = trio.Event()
        self._closing = False
        self._scope: trio.CancelScope | None = None
        self._done: trio.Event | None = None
        self._connections = 0
        self._connected = False

    @property
    def connected(self) -> bool:
        """True while a monitor connection is open."""
        return self._connected

    def offer(self, record: Record) -> None:
        """Queue ``record``'s line, or drop and count it when the buffer is full. Never waits."""
        if self._closing or self._tracker.full:
            self._tracker.drop(record.seq)
        else:
            self._tracker.push(record.seq, record_json(record))
        self._wakeup.set()

    def offer_head(self, seal: Seal) -> None:
        """Queue a head line for ``seal`` (the writer's seal listener). Never waits."""
        if not self._closing:
            self._tracker.push_head(encode_head(seal))
            self._wakeup.set()

    def stats(self) -> StreamStats:
        """The counts so far (records still waiting are neither sent nor dropped yet)."""
        return msgspec.structs.replace(self._tracker.stats(), connections=self._connections)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Connect, send, reconnect; return after `aclose` once drained or out of time.

        Signals ``task_status.started()`` at once: the monitor may connect later.
        """
        self._done = trio.Event()
        delay = self.retry_initial_s
        try:
            with trio.CancelScope() as self._scope:
                task_status.started()
                while not (self._closing and self._tracker.empty):
                    stream = None
                    with trio.move_on_after(self.connect_timeout_s):
                        try:
                            stream = await _connect(self.address)
                        except OSError:
                            pass
                    if stream is None:
                        await self._pause(delay)
                        delay = min(delay * 2, self.retry_max_s)
                        continue
                    delay = self.retry_initial_s
                    self._connections += 1
                    self._connected = True
                    try:
                        async with stream:
                            await self._serve(stream)
                    finally:
                        self._connected = False
                    await self._pause(delay)
        finally:
            self._tracker.finish()
            self._done.set()

    async def _pause(self, delay: float) -> None:
        """Wait ``delay`` seconds before reconnecting, or less once closed with nothing to send."""
        with trio.move_on_after(delay):
            while not (self._closing and self._tracker.empty):
                self._wakeup = trio.Event()
                await self._wakeup.wait()

    async def _serve(self, stream: trio.SocketStream) -> None:
        batch = None
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._watch, stream, nursery.cancel_scope)
                while True:
                    batch = self._tracker.take()
                    if batch is None:
                        if self._closing:
                            break
                        self._wakeup = trio.Event()
                        await self._wakeup.wait()
                        continue
                    try:
                        await stream.send_all(batch.data)
                    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                        break
                    self._tracker.commit(batch)
                    batch = None
                nursery.cancel_scope.cancel()
        finally:
            if batch is not None:  # failed, or cancelled mid-write: the monitor may have part of it
                self._tracker.fail(batch)

    @staticmethod
    async def _watch(stream: trio.SocketStream, scope: trio.CancelScope) -> None:
        """Cancel ``scope`` when the monitor closes or resets; what it sends is ignored."""
        try:
            while await stream.receive_some(65536):
                pass
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        scope.cancel()

    async def aclose(self, drain_timeout_s: float = 2.0) -> StreamStats:
        """Stop taking records, send what can be sent within the timeout, and stop `run`.

        Args:
            drain_timeout_s: how long `run` may keep connecting and writing, seconds.

        Returns:
            The final counts; lines not sent in time count as dropped.
        """
        self._closing = True
        self._wakeup.set()
        if self._done is None:  # run never started
            self._tracker.finish()
        else:
            if self._scope is not None:
                self._scope.deadline = min(self._scope.deadline, trio.current_time() + drain_timeout_s)
            await self._done.wait()
        return self.stats()

