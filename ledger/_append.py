"""The ledger writer's append: its state and its hot path.

`Appender` keeps what an append needs (the pending records, the next sequence number,
the previous record's times, the flush deadline) and does one append. It runs in native
code (``ledger/_appendc.c``) when that extension was built, else as `AppenderPy`, which is
its definition; a property test pins the two together. `ledger._writer.LedgerWriter` owns
one and does everything else: flushing, sealing, closing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import trio

__all__ = ["Appender", "AppenderPy", "NATIVE"]

_monotonic_ns = time.monotonic_ns
_time_ns = time.time_ns
_MAX_NS = 2**63 - 1


def _timestamp(value: Any, name: str) -> int:
    """``value`` as a plain int of ns: an int subclass (bool, IntEnum) gives its int value,
    whatever it overrides, as the native code reads it.

    Raises:
        TypeError: not an int.
        ValueError: outside 0 .. 2**63-1.
    """
    if not isinstance(value, int):
        raise TypeError(f"{name} must be an int (ns), got {type(value).__name__}")
    ns = int.__int__(value)  # before comparing: a subclass's comparisons are not consulted
    if not 0 <= ns <= _MAX_NS:
        raise ValueError(f"{name} must be in 0..2**63-1 ns, got {value!r}")
    return ns


class AppenderPy:
    """Append state and the append itself, in Python.

    Args:
        pending: the list stored records are added to, as tuples
            ``(seq, wall delta ns, mono delta ns, source, event)`` (the `WireRecord`
            fields); the writer removes the ones it flushes.
        event_types: the event classes an append accepts.
        on_due: called with no arguments after an append that leaves ``flush_records``
            records pending or finds the monotonic clock at or past ``flush_at_ns``.
        flush_records: pending records that make a flush due.
        flush_at_ns: monotonic ns at which a flush becomes due; the writer moves it.
        closed_error: the exception class an append after `close` raises.
        path: the ledger's path, for that error's message.

    Attributes:
        next_seq: the sequence number the next record gets.
        flush_records, flush_at_ns: as the arguments; writable.
        on_record: None, or ``callable(seq, wall_ns, mono_ns, source, event)`` called
            after each append (the writer's stream listeners).
        closed: True after `close`.
    """

    __slots__ = ("_pending", "_event_types", "_on_due", "flush_records", "flush_at_ns",
                 "_closed_error", "_path", "_on_record", "next_seq", "_last_wall", "_last_mono")

    def __init__(self, *, pending: list[tuple], event_types: frozenset[type], on_due: Callable[[], Any],
                 flush_records: int, flush_at_ns: int, closed_error: type[Exception], path: str):
        if hasattr(self, "next_seq"):  # a second init would restart the seqs on the same records
            raise RuntimeError("an Appender is initialised once")
        self._pending: list[tuple] | None = pending
        self._event_types = event_types
        self._on_due = on_due
        self.flush_records = flush_records
        self.flush_at_ns = flush_at_ns
        self._closed_error = closed_error
        self._path = path
        self._on_record: Callable[[int, int, int, str, Any], Any] | None = None
        self.next_seq = 0
        self._last_wall = 0  # times are stored as deltas from the previous record
        self._last_mono = 0

    @property
    def on_record(self) -> Callable[[int, int, int, str, Any], Any] | None:
        return self._on_record

    @on_record.setter
    def on_record(self, callback: Callable[[int, int, int, str, Any], Any] | None) -> None:
        if callback is not None and not callable(callback):
            raise TypeError("on_record must be None or callable")
        self._on_record = callback

    @trio.lowlevel.enable_ki_protection  # Ctrl-C under trio never lands between its state updates
    def append(self, event: Any, *, source: str, wall_ns: int | None = None, mono_ns: int | None = None) -> int:
        """Add one record; returns its sequence number.

        Args:
            event: an instance of one of ``event_types``.
            source: the witness name.
            wall_ns: ns since the Unix epoch (default: ``time.time_ns()``).
            mono_ns: monotonic ns (default: ``time.monotonic_ns()``).

        Raises:
            closed_error: after `close`.
            TypeError: ``event`` is not of ``event_types``, ``source`` is not a str, or a
                time is not an int.
            ValueError: a time outside 0 .. 2**63-1 ns.
            Exception: whatever ``on_record`` or ``on_due`` raise, after the record was added.
        """
        if self._pending is None:
            raise self._closed_error(f"{self._path}: append after close")
        if type(event) not in self._event_types:
            raise TypeError(f"not a ledger event, got {type(event).__name__}")
        if not isinstance(source, str):
            raise TypeError(f"source must be a str, got {type(source).__name__}")
        now = _monotonic_ns()  # the flush clock: a witness's mono_ns may lag, or be from elsewhere
        if wall_ns is None:
            wall_ns = _time_ns()
        elif type(wall_ns) is not int or not 0 <= wall_ns <= _MAX_NS:  # the common case, inline
            wall_ns = _timestamp(wall_ns, "wall_ns")
        if mono_ns is None:
            mono_ns = now
        elif type(mono_ns) is not int or not 0 <= mono_ns <= _MAX_NS:
            mono_ns = _timestamp(mono_ns, "mono_ns")
        while True:
            # Building the tuple may run the garbage collector, and so a finaliser that
            # appends or closes: the state is read again until it held still. From the
            # check to the update nothing allocates a tracked object.
            seq = self.next_seq
            record = (seq, wall_ns - self._last_wall, mono_ns - self._last_mono, source, event)
            if seq == self.next_seq:
                break
        pending = self._pending
        if pending is None:
            raise self._closed_error(f"{self._path}: append after close")
        pending.append(record)
        self._last_wall = wall_ns
        self._last_mono = mono_ns
        self.next_seq = seq + 1
        if self._on_record is not None:
            self._on_record(seq, wall_ns, mono_ns, source, event)
        pending = self._pending  # a callback may have closed the writer
        if pending is not None and (len(pending) >= self.flush_records or now >= self.flush_at_ns):
            self._on_due()
        return seq

    def close(self) -> None:
        """Refuse later appends (they raise ``closed_error``)."""
        self._pending = None

    @property
    def closed(self) -> bool:
        return self._pending is None


try:
    from ledger._appendc import Appender
except ImportError:  # built without a C compiler: same records, slower
    Appender = AppenderPy  # type: ignore[assignment,misc]
NATIVE = Appender is not AppenderPy
