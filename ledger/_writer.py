"""The ledger writer: append events, flush sealed frames, close with a final seal.

Usable from plain code (`LedgerWriter`) and from trio (`run_writer`, a task fed by a
memory channel). Flush policy: a frame is flushed and sealed every ``flush_records``
records or ``flush_interval_s`` seconds, whichever comes first; each seal is fsynced, so
a crash loses at most the records appended since the last seal. fsyncs run in a thread of
their own (`_Syncer`): frames and seals are written at once, a flush that an append triggers
does not wait for the disk (nor does the event loop), `flush` and `close` do, and
`LedgerWriter.sealed` counts only what an fsync has made durable. A failed fsync leaves the
ledger unclosed; it is never retried into a claim of durability. Each append is one call
into `ledger._append.Appender` (native code when built), which calls back here when a
flush is due.
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import trio
import zstandard

from ledger import _chain, _merkle
from ledger._append import Appender
from ledger._blobs import BlobStore
from ledger._errors import LedgerError, WriterClosedError
from ledger._format import (
    BLOBS_DIR,
    FORMAT_VERSION,
    FRAME_RECORDS,
    FRAME_SEAL,
    HASH_ALG,
    LEDGER_FILE,
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


RecordListener = Callable[[Record], None]
SealListener = Callable[[Seal], None]
_encode = record_encoder.encode
_EVENT_TYPES = frozenset(EVENT_TYPES)
_MAX_NS = 2**63 - 1  # "never" for a flush deadline


MAX_RECORD_DEPTH = 64
"""How deep arrays and maps may nest in a stored record (the record is 1, its event 2).

msgspec decodes recursively, so how deep it can go depends on how deep the reader's own
stack already is (about 1000 levels at most): an event the writer could just encode might
not decode in a verifier, and an agent controls the nesting of its tool calls' input.
Records stay far below that; a deeper event is stored as a ``witness.raw`` describing it."""


def _encode_salvaging(pending: list[tuple]) -> bytes:
    """Encode records one by one; one that cannot be encoded (an int over 64 bits, a lone
    surrogate, nesting deeper than `MAX_RECORD_DEPTH`) is kept as a ``witness.raw`` event
    describing it, so its seq is not lost."""
    parts = []
    for seq, wall_delta, mono_delta, source, event in pending:
        try:
            raw = _encode((seq, wall_delta, mono_delta, source, event))
            if not _chain.within_depth(raw, MAX_RECORD_DEPTH):
                raise ValueError(f"arrays and maps nested deeper than {MAX_RECORD_DEPTH} levels")
            parts.append(raw)
        except (TypeError, ValueError, OverflowError, UnicodeError, RecursionError) as exc:
            source = _storable(source)  # the fault may be the source's own
            note = WitnessRaw(witness=source, line=f"unencodable event ({exc}): {_describe(event)}")
            parts.append(_encode((seq, wall_delta, mono_delta, source, note)))
    return msgpack_array_header(len(parts)) + b"".join(parts)


def _storable(text: str) -> str:
    """``text``, or its ascii() form when UTF-8 cannot hold it (a lone surrogate)."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return ascii(text)
    return text


def _describe(event: object) -> str:
    try:
        return ascii(event)[:4000]
    except RecursionError:
        return f"{type(event).__name__}(...) nested too deep to show"


class _Syncer:
    """fsyncs one file in a thread of its own, as a group commit: an fsync covers every
    write made before it started, so requests made while one runs are served by the next.
    Every fsync of the writer's frames runs here, so no fsync error can be reported to one
    thread and missed by another (Linux reports a writeback error once per open file).

    ``durable`` is the highest seal position (``upto``) an fsync has covered; ``error`` is
    the OSError of a failed fsync, after which the thread stops: Linux may have dropped the
    unwritten pages, so nothing written before or after it is known to be durable.
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
            if self._thread is None and not self._stopping:
                thread = threading.Thread(target=self._run, name="ledger-fsync", daemon=True)
                thread.start()  # RuntimeError when no thread can be made: the next request retries
                self._thread = thread
            self._cond.notify_all()

    def wait(self, upto: int) -> None:
        """Request an fsync up to ``upto`` and block until it is done.

        Raises:
            OSError: that fsync (or an earlier one) failed.
        """
        self.request(upto)
        with self._cond:
            while self.durable < upto and self.error is None:
                self._cond.wait()
        if self.error is not None:
            raise self.error

    def stop(self) -> None:
        """Finish the fsyncs requested so far, then end the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
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
                with self._cond:
                    self.error = exc
                    self._cond.notify_all()
                return
            with self._cond:
                self.durable = target
                self._cond.notify_all()


def _flush_records(value: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"flush_records must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"flush_records must be at least 1, got {value}")
    return min(value, sys.maxsize)  # more than a list can hold: by time only


def _interval_ns(value: float, name: str, ns_per_unit: float) -> int:
    """A flush interval in whole ns, at most `_MAX_NS` (``math.inf``: never)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if not value >= 0:  # NaN too
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return int(min(value * ns_per_unit, _MAX_NS))


class _Callbacks:
    """What the appender calls back, holding the writer weakly: a writer dropped unclosed is
    freed at once, its file closed, as any file object is (no writer <-> appender cycle).
    KI-protected like the appender's own append, so Ctrl-C under trio waits for them."""

    __slots__ = ("_writer",)

    def __init__(self, writer: "LedgerWriter"):
        self._writer = weakref.ref(writer)

    @trio.lowlevel.enable_ki_protection
    def flush_due(self) -> None:
        writer = self._writer()
        if writer is not None:
            writer._flush(wait=False)

    @trio.lowlevel.enable_ki_protection
    def notify(self, seq: int, wall_ns: int, mono_ns: int, source: str, event: Event) -> None:
        writer = self._writer()
        if writer is not None:
            writer._notify(seq, wall_ns, mono_ns, source, event)


class LedgerWriter:
    """Appends records to a new ledger file and seals them.

    Args:
        path: the ledger file to create; it must not exist (a ledger is never reopened).
        run_id: the run this ledger belongs to; every seal is bound to it.
        key: the operator's signing key.
        blobs: the blob store beside the ledger, or None when the caller has none.
        flush_records: records per frame before a flush (default 4096; at least 1).
        flush_interval_s: seconds after which pending records are flushed on the next
            append or `flush_if_due` call (default 1.0; ``math.inf``: by count only).
        zstd_level: zstd compression level of record frames.
        created_ns: header creation time, ns since the Unix epoch (default: now).

    Raises:
        LedgerError: the file exists or cannot be created.
        TypeError, ValueError: a flush setting out of range (before any file is made).
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
        flush_records = _flush_records(flush_records)
        self._flush_interval_ns = _interval_ns(flush_interval_s, "flush_interval_s", 1e9)
        self._key = key
        self._zstd = zstandard.ZstdCompressor(level=zstd_level)
        self._pending: list[tuple] | None = []  # stored records not yet flushed; None once closed
        self._listeners: list[RecordListener] = []
        self._seal_listeners: list[SealListener] = []
        self.listener_failures = 0  # records or seals a listener raised on (the ledger kept them)
        self._written = 0  # records covered by a seal written to the file
        self._closed = False
        self._broken = False
        self._flushing = False  # in _write_frames
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
        self._tree: tuple[int, bytes] = (0, b"")  # the records' Merkle tree: (size, compact range)
        self._head = _merkle.EMPTY_ROOT  # its root: what a seal signs as its head
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        except OSError as exc:
            raise LedgerError(f"cannot create ledger: {exc.strerror}", path=str(self.path)) from None
        self._file = os.fdopen(fd, "wb", buffering=0)
        self._write(header_bytes)
        self._size = len(header_bytes)  # bytes written to the ledger
        self._sha256 = hashlib.sha256(header_bytes)  # of those bytes, for the seals (format version 2)
        os.fsync(self._file.fileno())
        self._syncer = _Syncer(self._file.fileno())
        self._callbacks = _Callbacks(self)
        self._appender = Appender(pending=self._pending, event_types=_EVENT_TYPES, on_due=self._callbacks.flush_due,
                                  flush_records=flush_records, flush_at_ns=self._flush_deadline(),
                                  closed_error=WriterClosedError, path=str(self.path))
        # the hot path: the same call, without a Python frame (an instance attribute over the method)
        setattr(self, "append", self._appender.append)
        # Whoever still holds that bound method once this writer is gone gets WriterClosedError,
        # not seqs for records that no flush will ever write.
        weakref.finalize(self, self._appender.close)

    def _flush_deadline(self) -> int:
        return min(time.monotonic_ns() + self.flush_interval_ns, _MAX_NS)

    @property
    def flush_interval_ns(self) -> int:
        """The flush interval, ns; writable (it counts from the next flush)."""
        return self._flush_interval_ns

    @flush_interval_ns.setter
    def flush_interval_ns(self, value: float) -> None:
        self._flush_interval_ns = _interval_ns(value, "flush_interval_ns", 1)

    @property
    def flush_records(self) -> int:
        """Records per frame before a flush; writable."""
        return self._appender.flush_records

    @flush_records.setter
    def flush_records(self, value: int) -> None:
        self._appender.flush_records = _flush_records(value)

    # -- appending ------------------------------------------------------------------

    @property
    def next_seq(self) -> int:
        """The sequence number the next appended record will get."""
        return self._appender.next_seq

    @property
    def sealed(self) -> int:
        """How many records are covered by a seal that an fsync made durable."""
        return self._syncer.durable

    def add_listener(self, listener: RecordListener) -> None:
        """Call ``listener(record)`` after each append (stream sinks). It must not block."""
        self._listeners.append(listener)
        self._appender.on_record = self._callbacks.notify

    def append(
        self,
        event: Event,
        *,
        source: str,
        wall_ns: int | None = None,
        mono_ns: int | None = None,
    ) -> int:
        """Append one event; returns its sequence number. May flush (by count or time).

        Each instance replaces this method with its `ledger._append.Appender`'s, which
        behaves the same; this one documents it.

        Args:
            event: the event, built by the witness.
            source: the witness name (``strace``, ``proxy``, ``recorder``, ...).
            wall_ns: when the witness observed it, ns since the Unix epoch (default now).
            mono_ns: the same instant on the monotonic clock, ns (default now).

        Raises:
            WriterClosedError: the writer is closed (our misuse).
            TypeError: ``event`` is not one of `ledger.events.EVENT_TYPES`, ``source`` is
                not a str, or a time is not an int.
            ValueError: a timestamp outside 0 .. 2**63-1 ns.
            LedgerError, OSError: a flush this append made due failed, as `flush`'s
                (the record is kept).
        """
        return self._appender.append(event, source=source, wall_ns=wall_ns, mono_ns=mono_ns)

    def add_seal_listener(self, listener: SealListener) -> None:
        """Call ``listener(seal)`` after each seal is written (a monitor keeping signed tree
        heads). It must not block; what it raises is counted in ``listener_failures``."""
        self._seal_listeners.append(listener)

    def _notify(self, seq: int, wall_ns: int, mono_ns: int, source: str, event: Event) -> None:
        record = Record(seq=seq, wall_ns=wall_ns, mono_ns=mono_ns, source=source, event=event)
        for listener in self._listeners:
            try:
                listener(record)
            except Exception:  # a monitor never costs the ledger an event
                self.listener_failures += 1

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
        if self._pending and time.monotonic_ns() >= self._appender.flush_at_ns:
            self._flush(wait=False)

    def flush(self) -> None:
        """Write pending records as one frame and a seal over them; return once everything
        written is fsynced.

        Raises:
            LedgerError: an fsync failed (now or in the background), or an earlier write
                could not be undone; the ledger stays unclosed, its durable prefix intact.
            OSError: the write failed (the frame is cut back; records stay pending).
        """
        if self._closed:
            return
        if self._pending:
            self._write_frames(final=False, wait=True)
        else:
            self._wait_durable()

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
        self._appender.close()  # first: no append may land in a list no flush will read
        try:
            self._write_frames(final=True, wait=True)
        finally:
            self._closed = True
            self._pending = None
            try:
                self._syncer.stop()
            finally:  # a Ctrl-C during the join still closes the file
                self._file.close()

    @property
    def closed(self) -> bool:
        """True after `close`."""
        return self._closed

    def _write_frames(self, *, final: bool, wait: bool) -> None:
        """Write the pending records as a frame, and a seal over them.

        The garbage collector may run a finaliser in here that appends (its records wait
        for the next flush: the frame is the records pending when this started) or that
        flushes (ignored: this flush is not re-entered).
        """
        if self._flushing:
            return
        self._flushing = True
        try:
            self._write_frames_once(final=final, wait=wait)
        finally:
            self._flushing = False

    def _write_frames_once(self, *, final: bool, wait: bool) -> None:
        pending = self._pending
        records = pending[: len(pending)] if pending else []  # the length is read before the copy is made
        head = self._head
        tree = self._tree
        sha256 = self._sha256.copy()  # the file's bytes so far; this flush's go in once written
        size = self._size
        parts = []
        n = len(records)
        if n:
            try:
                body = _encode(records)  # a msgpack array of the records' canonical bytes
            except (TypeError, ValueError, OverflowError, UnicodeError, RecursionError):
                body = _encode_salvaging(records)
            try:
                tree = _merkle.merkle_frame(*tree, body, MAX_RECORD_DEPTH)
            except ValueError:  # a record nested too deep: kept as witness.raw instead
                body = _encode_salvaging(records)
                tree = _merkle.merkle_frame(*tree, body, MAX_RECORD_DEPTH)
            head = _merkle.range_root(*tree)
            frame = encode_frame(FRAME_RECORDS, records[0][0], n, self._zstd.compress(body))
            parts.append(frame)
            sha256.update(frame)
            size += len(frame)
        upto = records[0][0] + n if n else self._written
        wall_ns = time.time_ns()
        file_hash = sha256.digest()
        signature = self._key.sign(_chain.seal_message_v3(self.run_id, upto, head, final, wall_ns, size, file_hash))
        seal = Seal(run_id=self.run_id, upto=upto, head=head, final=final, wall_ns=wall_ns, size=size,
                    file_hash=file_hash, signature=signature)
        seal_frame = encode_frame(FRAME_SEAL, upto, 0, record_encoder.encode(seal))
        parts.append(seal_frame)
        sha256.update(seal_frame)
        self._commit(b"".join(parts), head, tree, upto, n, sha256, wait=wait)
        for listener in self._seal_listeners:
            try:
                listener(seal)
            except Exception:  # a monitor never costs the ledger a seal
                self.listener_failures += 1

    @trio.lowlevel.enable_ki_protection
    def _commit(self, data: bytes, head: bytes, tree: tuple[int, bytes], upto: int, n: int, sha256: Any, *,
                wait: bool) -> None:
        """Write frames and seal, advance the state (chain head, Merkle tree, records
        written, the running SHA-256 of the file, now over ``data`` too), then fsync: wait for it with
        ``wait``, else leave it to the syncer's thread.

        The write is all or nothing: Ctrl-C under trio waits for it (KI protection), and
        any exception in it (a full disk, a KeyboardInterrupt in plain code) cuts the file
        back to where it was, so the records stay pending and a later flush or close
        writes them once. A failed fsync is not retried: the ledger stays unclosed.
        """
        self._raise_if_unsound()
        offset = self._size
        try:
            self._write(data)
        except BaseException:
            try:
                os.ftruncate(self._file.fileno(), offset)
            except OSError:
                self._broken = True  # a partial frame stays: write nothing after it
            raise
        self._size = offset + len(data)
        self._sha256 = sha256
        self._head = head
        self._tree = tree
        if n:
            assert self._pending is not None  # a frame is written only while the writer is open
            del self._pending[:n]
        self._written = upto
        self._appender.flush_at_ns = self._flush_deadline()
        if wait:
            self._wait_durable()
        else:
            self._syncer.request(upto)

    def _wait_durable(self) -> None:
        """Block until everything written is fsynced. Raises LedgerError if an fsync failed."""
        self._raise_if_unsound()
        if self._syncer.durable < self._written:
            try:
                self._syncer.wait(self._written)
            except OSError:
                self._raise_if_unsound()

    def _raise_if_unsound(self) -> None:
        if self._syncer.error is not None:
            self._broken = True  # Linux may have dropped unwritten pages: no later seal is trustworthy
            raise LedgerError(f"an fsync failed ({self._syncer.error}); the ledger stays unclosed",
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
                while True:  # what else is queued, without a scheduler turn per event
                    try:
                        item = receive.receive_nowait()
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                    writer.append(item.event, source=item.source, wall_ns=item.wall_ns, mono_ns=item.mono_ns)
                continue
            writer.flush_if_due()
    writer.flush()
