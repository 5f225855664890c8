"""The ledger writer: append events, flush sealed frames, close with a final seal.

Usable from plain code (`LedgerWriter`) and from trio (`run_writer`, a task fed by a
memory channel). Flush policy: a frame is flushed and sealed every ``flush_records``
records or ``flush_interval_s`` seconds, whichever comes first; each seal is fsynced, so
a crash loses at most the records appended since the last seal. The fsync of a flush that
an append triggers runs in a background thread (`_Syncer`): frames and seals are written at
once, the event loop never waits on the disk, and `LedgerWriter.sealed` counts only what an
fsync has made durable. `flush` and `close` fsync before they return.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import trio
import zstandard

from ledger import _chain
from ledger._blobs import BlobStore
from ledger._errors import LedgerError, WriterClosedError
from ledger._format import (
    FORMAT_VERSION,
    FRAME_RECORDS,
    FRAME_SEAL,
    HASH_ALG,
    Header,
    Record,
    Seal,
    encode_frame,
    encode_header,
    msgpack_array_header,
    record_encoder,
)
from ledger._keys import SigningKey
from ledger.events import EVENT_TYPES, SCHEMA_VERSION, BlobStored, Event, WitnessRaw

__all__ = ["LedgerWriter", "Submission", "run_writer", "LEDGER_FILE", "BLOBS_DIR"]

LEDGER_FILE = "ledger"
BLOBS_DIR = "blobs"

RecordListener = Callable[[Record], None]
_encode = record_encoder.encode
_monotonic_ns = time.monotonic_ns
_time_ns = time.time_ns
_EVENT_TYPES = frozenset(EVENT_TYPES)


def _encode_salvaging(pending: list[tuple]) -> bytes:
    """Encode records one by one; one that cannot be encoded (an int over 64 bits, a lone
    surrogate, nesting deeper than msgspec's recursion limit) is kept as a ``witness.raw``
    event describing it, so its seq is not lost."""
    parts = []
    for seq, wall_delta, mono_delta, source, event in pending:
        try:
            parts.append(_encode((seq, wall_delta, mono_delta, source, event)))
        except (TypeError, ValueError, OverflowError, UnicodeError, RecursionError) as exc:
            note = WitnessRaw(witness=source, line=f"unencodable event ({exc}): {_describe(event)}")
            parts.append(_encode((seq, wall_delta, mono_delta, source, note)))
    return msgpack_array_header(len(parts)) + b"".join(parts)


def _describe(event: object) -> str:
    try:
        return ascii(event)[:4000]
    except RecursionError:
        return f"{type(event).__name__}(...) nested too deep to show"


class _Syncer:
    """fsyncs one file in a background thread, as a group commit: an fsync covers every
    write made before it started, so requests made while one runs are served by the next.

    ``durable`` is the highest seal position (``upto``) an fsync has covered; ``error`` is
    the OSError of a failed fsync, after which the thread stops (Linux may have dropped the
    unwritten pages: nothing written after it can be trusted to be durable).
    """

    def __init__(self, fd: int):
        self._fd = fd
        self._cond = threading.Condition()
        self._requested = 0
        self.durable = 0
        self.error: OSError | None = None
        self._stopping = False
        self._thread: threading.Thread | None = None

    def request(self, upto: int) -> None:
        """Ask for an fsync covering everything written so far, up to seal position ``upto``."""
        with self._cond:
            self._requested = max(self._requested, upto)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="ledger-fsync", daemon=True)
                self._thread.start()
            self._cond.notify()

    def stop(self) -> None:
        """Finish the fsync requested so far, then end the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._requested <= self.durable and not self._stopping:
                    self._cond.wait()
                if self._requested <= self.durable:
                    return
                target = self._requested
            try:
                os.fsync(self._fd)
            except OSError as exc:
                self.error = exc
                return
            self.durable = target


class LedgerWriter:
    """Appends records to a new ledger file and seals them.

    Args:
        path: the ledger file to create; it must not exist (a ledger is never reopened).
        run_id: the run this ledger belongs to; every seal is bound to it.
        key: the operator's signing key.
        blobs: the blob store beside the ledger, or None when the caller has none.
        flush_records: records per frame before a flush (default 4096).
        flush_interval_s: seconds after which pending records are flushed on the next
            append or `flush_if_due` call (default 1.0).
        zstd_level: zstd compression level of record frames.
        created_ns: header creation time, ns since the Unix epoch (default: now).

    Raises:
        LedgerError: the file exists or cannot be created.
    """

    def __init__(
        self,
        path: Path,
        *,
        run_id: str,
        key: SigningKey,
        blobs: BlobStore | None = None,
        flush_records: int = 4096,
        flush_interval_s: float = 1.0,
        zstd_level: int = 3,
        created_ns: int | None = None,
    ):
        self.path = Path(path)
        self.run_id = run_id
        self.blobs = blobs
        self.flush_records = flush_records
        self.flush_interval_ns = int(flush_interval_s * 1e9)
        self._key = key
        self._zstd = zstandard.ZstdCompressor(level=zstd_level)
        self._pending: list[tuple] | None = []  # None once closed
        self._listeners: list[RecordListener] = []
        self.listener_failures = 0  # records a listener raised on (the ledger kept them)
        self._next_seq = 0
        self._last_wall = 0  # times are stored as deltas from the previous record
        self._last_mono = 0
        self._sealed = 0  # records covered by a seal this thread fsynced
        self._written = 0  # records covered by a seal written to the file
        self._closed = False
        self._broken = False
        header = Header(
            format_version=FORMAT_VERSION,
            run_id=run_id,
            hash_alg=HASH_ALG,
            key_fingerprint=key.fingerprint,
            public_key=key.verify_key.raw,
            schema_version=SCHEMA_VERSION,
            created_ns=time.time_ns() if created_ns is None else created_ns,
        )
        header_bytes, payload = encode_header(header)
        self.header = header
        self._head = _chain.genesis(payload)
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        except OSError as exc:
            raise LedgerError(f"cannot create ledger: {exc.strerror}", path=str(self.path)) from None
        self._file = os.fdopen(fd, "wb", buffering=0)
        self._write(header_bytes)
        self._size = len(header_bytes)  # bytes durably part of the ledger
        os.fsync(self._file.fileno())
        self._syncer = _Syncer(self._file.fileno())
        self._flush_at_ns = time.monotonic_ns() + self.flush_interval_ns

    # -- appending ------------------------------------------------------------------

    @property
    def next_seq(self) -> int:
        """The sequence number the next appended record will get."""
        return self._next_seq

    @property
    def sealed(self) -> int:
        """How many records are covered by a fsynced seal (a background fsync included)."""
        return max(self._sealed, self._syncer.durable)

    def add_listener(self, listener: RecordListener) -> None:
        """Call ``listener(record)`` after each append (stream sinks). It must not block."""
        self._listeners.append(listener)

    @trio.lowlevel.enable_ki_protection  # Ctrl-C under trio never lands between its state updates
    def append(
        self,
        event: Event,
        *,
        source: str,
        wall_ns: int | None = None,
        mono_ns: int | None = None,
    ) -> int:
        """Append one event; returns its sequence number.

        Args:
            event: the event, built by the witness.
            source: the witness name (``strace``, ``proxy``, ``recorder``, ...).
            wall_ns: when the witness observed it, ns since the Unix epoch (default now).
            mono_ns: the same instant on the monotonic clock, ns (default now).

        Raises:
            WriterClosedError: the writer is closed (our misuse).
            TypeError: ``event`` is not one of `ledger.events.EVENT_TYPES`.
            ValueError: a timestamp outside 0 .. 2**63-1 ns.
        """
        pending = self._pending
        if pending is None:
            raise WriterClosedError(f"{self.path}: append after close")
        if type(event) not in _EVENT_TYPES:
            raise TypeError(f"not a ledger event: {type(event).__name__}")
        if mono_ns is None:
            mono_ns = _monotonic_ns()
        if wall_ns is None:
            wall_ns = _time_ns()
        if (wall_ns | mono_ns) >> 63:  # either one negative, or 2**63 ns and over
            raise ValueError(f"timestamps must be in 0..2**63-1 ns, got wall_ns={wall_ns} mono_ns={mono_ns}")
        seq = self._next_seq
        # The stored form is WireRecord: [seq, wall delta, mono delta, source, event]; the
        # frame's records are encoded together at flush, then chained one by one.
        pending.append((seq, wall_ns - self._last_wall, mono_ns - self._last_mono, source, event))
        self._last_wall = wall_ns
        self._last_mono = mono_ns
        self._next_seq = seq + 1
        if self._listeners:
            record = Record(seq=seq, wall_ns=wall_ns, mono_ns=mono_ns, source=source, event=event)
            for listener in self._listeners:
                try:
                    listener(record)
                except Exception:  # a monitor never costs the ledger an event
                    self.listener_failures += 1
        # The flush clock is the record's own monotonic time (when its witness saw it),
        # which saves reading the clock per record; `flush_if_due` covers a quiet stream.
        if len(pending) >= self.flush_records or mono_ns >= self._flush_at_ns:
            self._flush(wait=False)
        return seq

    def put_blob(self, data: bytes, *, role: str, media_type: str = "application/octet-stream",
                 source: str = "recorder") -> str:
        """Store ``data`` as a blob and append its ``blob.stored`` event; returns the hash.

        Raises:
            LedgerError: the writer has no blob store.
        """
        if self.blobs is None:
            raise LedgerError("this ledger writer has no blob store", path=str(self.path))
        digest = self.blobs.put(data)
        self.append(BlobStored(sha256=digest, size_bytes=len(data), role=role, media_type=media_type),
                    source=source)
        return digest

    # -- flushing and sealing -------------------------------------------------------

    def flush_if_due(self) -> None:
        """Flush when records are pending and the flush interval has passed; the fsync
        runs in the background, as for a flush an append triggers."""
        if self._pending and time.monotonic_ns() >= self._flush_at_ns:
            self._flush(wait=False)

    def flush(self) -> None:
        """Write pending records as one frame, then a seal over them, and fsync.

        Raises:
            LedgerError: an earlier write or background fsync failed; the ledger stays
                unclosed, its durable prefix intact.
            OSError: the write or fsync failed (the frame is cut back; records stay pending).
        """
        if self._closed:
            return
        if self._pending:
            self._write_frames(final=False, wait=True)
        elif self.sealed < self._written:  # the last flush's fsync is still in the background
            self._raise_if_unsound()
            os.fsync(self._file.fileno())
            self._sealed = self._written

    def _flush(self, *, wait: bool) -> None:
        if self._closed or not self._pending:
            return
        self._write_frames(final=False, wait=wait)

    def close(self) -> None:
        """Flush, write the final seal, fsync and close. Idempotent.

        Raises:
            LedgerError, OSError: as `flush`; the file is closed all the same.
        """
        if self._closed:
            return
        try:
            self._write_frames(final=True, wait=True)
        finally:
            self._closed = True
            self._pending = None
            self._syncer.stop()
            self._file.close()

    @property
    def closed(self) -> bool:
        """True after `close`."""
        return self._closed

    def _write_frames(self, *, final: bool, wait: bool) -> None:
        pending = self._pending
        head = self._head
        parts = []
        n = len(pending) if pending else 0
        if n:
            try:
                body = _encode(pending)  # a msgpack array of the records' canonical bytes
            except (TypeError, ValueError, OverflowError, UnicodeError, RecursionError):
                body = _encode_salvaging(pending)
            head, _ = _chain.chain_frame(head, body)
            payload = self._zstd.compress(body)
            parts.append(encode_frame(FRAME_RECORDS, self._next_seq - n, n, payload))
        upto = self._next_seq
        signature = self._key.sign(_chain.seal_message(self.run_id, upto, head, final))
        seal = Seal(run_id=self.run_id, upto=upto, head=head, final=final, wall_ns=time.time_ns(),
                    signature=signature)
        parts.append(encode_frame(FRAME_SEAL, upto, 0, record_encoder.encode(seal)))
        self._commit(b"".join(parts), head, upto, n, wait=wait)

    @trio.lowlevel.enable_ki_protection
    def _commit(self, data: bytes, head: bytes, upto: int, n: int, *, wait: bool) -> None:
        """Write frames and seal, then advance the state: all or nothing. With ``wait``,
        fsync first; else ask the syncer for a background fsync.

        Ctrl-C under trio waits for it (KI protection); any exception in the middle (a
        full disk, a KeyboardInterrupt in plain code) cuts the file back to where it was,
        so the records stay pending and a later flush or close writes them once.
        """
        self._raise_if_unsound()
        offset = self._size
        try:
            self._write(data)
            if wait:
                os.fsync(self._file.fileno())
        except BaseException:
            try:
                os.ftruncate(self._file.fileno(), offset)
            except OSError:
                self._broken = True  # a partial frame stays: write nothing after it
            raise
        self._size = offset + len(data)
        self._head = head
        if n:
            del self._pending[:n]
        self._written = upto
        if wait:
            self._sealed = upto
        else:
            self._syncer.request(upto)
        self._flush_at_ns = time.monotonic_ns() + self.flush_interval_ns

    def _raise_if_unsound(self) -> None:
        if self._syncer.error is not None:
            self._broken = True  # Linux may have dropped unwritten pages: no later seal is trustworthy
            raise LedgerError(f"a background fsync failed ({self._syncer.error}); the ledger stays unclosed",
                              path=str(self.path))
        if self._broken:
            raise LedgerError("an earlier write failed and could not be undone; the ledger stays unclosed",
                              path=str(self.path))

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = self._file.write(view)
            view = view[n:]

    def __enter__(self) -> "LedgerWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Submission(msgspec.Struct, frozen=True):
    """What a witness sends to the writer task: an event with its source and times."""

    source: str
    event: Event
    wall_ns: int | None = None  # ns since the Unix epoch; None: stamped on append
    mono_ns: int | None = None


async def run_writer(
    writer: LedgerWriter,
    receive: trio.MemoryReceiveChannel[Submission],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Append every submission from ``receive`` until all senders close.

    Flushes on the writer's policy and when idle for its flush interval. Does not
    close the writer: the owner appends ``run.ended`` and closes it. Cancellation
    leaves what was appended to the owner's `LedgerWriter.close`.
    """
    interval = writer.flush_interval_ns / 1e9
    task_status.started()
    async with receive:
        while True:
            with trio.move_on_after(interval):
                try:
                    item = await receive.receive()
                except trio.EndOfChannel:
                    break
                writer.append(item.event, source=item.source, wall_ns=item.wall_ns, mono_ns=item.mono_ns)
                continue
            writer.flush_if_due()
    writer.flush()
