"""The lifecycle every witness task shares: stamp, count and send; end the same way.

A witness task holds its clone of the ledger channel in `witness_life` and sends
through the `Witnessing` it yields::

    async with witness_life(send_channel, "procfs", missing="host.sample, proc.sample") as w:
        await w.started({"interval_ns": interval_ns})
        while True:
            ...
            await w.send(HostSample(...), wall_ns=wall, mono_ns=woke)

How the block ends decides the witness's last word (docs/architecture.md: a witness
failure is a gap, never a crash):

- **cancelled** (the session stops witnesses by cancelling them): ``witness.stopped``
  with the counts, then the cancellation goes on;
- **an exception**: ``witness.gap`` (`WitnessFailed` says what is missing and since when;
  any other exception is reported by its repr), and the task returns: the run goes on,
  the cell is void. Before ``witness.started``, an exception other than `WitnessFailed`
  is the caller's (the witness could not start) and propagates;
- **the writer is gone** (the channel is broken or closed): nothing, quietly: there is
  no one left to tell;
- **a normal return**: nothing more; the task said why it ended (`Witnessing.stopped`,
  a gap).

The last events are sent shielded (a cancelled task cannot otherwise await) and bounded
by `FINAL_SEND_TIMEOUT_S`, so a full channel nobody drains cannot hang shutdown. The
channel clone is closed on the way out.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

import trio

from ledger import CaissonError, Submission
from ledger.events import Event, WitnessGap, WitnessStarted, WitnessStopped

__all__ = ["FINAL_SEND_TIMEOUT_S", "WitnessFailed", "Witnessing", "witness_life"]

FINAL_SEND_TIMEOUT_S = 1.0
"""How long a cancelled witness may wait to hand each last event (stopped, gap) over, s."""

_GONE = (trio.BrokenResourceError, trio.ClosedResourceError)


class WitnessFailed(CaissonError):
    """Raised by a witness task that cannot go on; `witness_life` records it as ``witness.gap``.

    Attributes:
        reason: why, for the operator.
        missing: what the ledger lacks because of it (None: the witness's default).
        since_ns: wall ns from which evidence is missing (None: now).
        dropped: events known to be lost.
    """

    def __init__(self, reason: str, *, missing: str | None = None, since_ns: int | None = None,
                 dropped: int = 0):
        super().__init__(reason)
        self.reason, self.missing, self.since_ns, self.dropped = reason, missing, since_ns, dropped


class Witnessing:
    """One witness's side of the ledger channel: stamps, counts and sends its events.

    Made by `witness_life`. The task adds what it read to the counters; `stopped` reports
    them.

    Attributes:
        witness: the witness's name, its events' ``witness`` and its ledger ``source``.
        events: events sent so far, ``witness.started`` excluded.
        ended: the witness said its last word (``witness.stopped``, or the gap of a
            failure): nothing more is sent on the way out.
        lines: input units read (lines, ticks, queries, frames, packets).
        parse_failures: input units the parser could not read.
        bytes: input bytes read.
    """

    def __init__(self, send_channel: trio.MemorySendChannel[Submission], witness: str, *,
                 wall_clock: Callable[[], int] = time.time_ns,
                 mono_clock: Callable[[], int] = time.monotonic_ns):
        self.witness = witness
        self._send = send_channel
        self._wall, self._mono = wall_clock, mono_clock
        self.events = self.lines = self.parse_failures = self.bytes = 0
        self.ended = False
        self._started = False

    @property
    def has_started(self) -> bool:
        """Whether ``witness.started`` was sent."""
        return self._started

    def now(self) -> tuple[int, int]:
        """``(wall_ns, mono_ns)``: ns since the Unix epoch, and on the monotonic clock."""
        return self._wall(), self._mono()

    async def send(self, event: Event, *, wall_ns: int | None = None, mono_ns: int | None = None) -> None:
        """Stamp ``event`` (now, unless given), send it and count it.

        Raises:
            trio.BrokenResourceError, trio.ClosedResourceError: the writer is gone.
        """
        wall, mono = self.now()
        await self._send.send(Submission(source=self.witness, event=event,
                                         wall_ns=wall if wall_ns is None else wall_ns,
                                         mono_ns=mono if mono_ns is None else mono_ns))
        self.events += not isinstance(event, (WitnessStarted, WitnessStopped))

    async def send_many(self, events: Iterable[tuple[Event, int | None]]) -> None:
        """Send ``(event, wall_ns)`` pairs in order, as `send` does each, yielding to the
        scheduler once for all of them rather than once per event (a witness that read a
        thousand lines at once sends a thousand events without a thousand trio turns); waits
        only while the channel is full.

        Raises:
            trio.BrokenResourceError, trio.ClosedResourceError: the writer is gone.
        """
        for event, wall_ns in events:
            wall, mono = self.now()
            item = Submission(source=self.witness, event=event, wall_ns=wall if wall_ns is None else wall_ns,
                              mono_ns=mono)
            try:
                self._send.send_nowait(item)
            except trio.WouldBlock:
                await self._send.send(item)
            self.events += not isinstance(event, (WitnessStarted, WitnessStopped))
        await trio.lowlevel.checkpoint()

    async def started(self, detail: dict[str, Any]) -> None:
        """Send ``witness.started`` with ``detail`` (argv, listen address, options)."""
        await self.send(WitnessStarted(witness=self.witness, detail=detail))
        self._started = True

    async def send_last(self, event: Event, *, timeout_s: float = FINAL_SEND_TIMEOUT_S) -> None:
        """Send ``event`` even while cancelled: shielded, bounded by ``timeout_s`` seconds,
        and nothing when the writer is gone."""
        with trio.move_on_after(timeout_s, shield=True):
            try:
                await self.send(event)
            except _GONE:
                pass

    async def stopped(self) -> None:
        """Send ``witness.stopped`` with the counts: once, only after ``witness.started``
        (`send_last` rules)."""
        if self._started and not self.ended:
            self.ended = True
            await self.send_last(WitnessStopped(witness=self.witness, lines=self.lines, events=self.events,
                                                parse_failures=self.parse_failures, bytes=self.bytes))

    async def gap(self, reason: str, *, missing: str, since_ns: int | None = None, dropped: int = 0) -> None:
        """Send ``witness.gap`` (`send_last` rules); ``since_ns`` defaults to now."""
        await self.send_last(WitnessGap(witness=self.witness, reason=reason, missing=missing,
                                        since_ns=self.now()[0] if since_ns is None else since_ns,
                                        dropped=dropped))


@asynccontextmanager
async def witness_life(send_channel: trio.MemorySendChannel[Submission], witness: str, *,
                       missing: str, wall_clock: Callable[[], int] = time.time_ns,
                       mono_clock: Callable[[], int] = time.monotonic_ns) -> AsyncIterator[Witnessing]:
    """Hold a witness's ledger channel for its life and end it as the module docstring says.

    Args:
        send_channel: the witness's clone of the ledger channel; closed on exit.
        witness: the witness's name (``strace``, ``procfs``, ...).
        missing: what a gap of this witness leaves out of the ledger, when the failure
            does not say (e.g. ``"dns.query; the chamber's name resolution"``).
        wall_clock: ns since the Unix epoch (tests inject a fake).
        mono_clock: monotonic ns (tests inject a fake).

    Yields:
        The `Witnessing` to send through.

    Raises:
        trio.Cancelled: re-raised after ``witness.stopped``.
        Exception: raised before ``witness.started`` and not a `WitnessFailed`.
    """
    async with send_channel:
        w = Witnessing(send_channel, witness, wall_clock=wall_clock, mono_clock=mono_clock)
        try:
            yield w
        except BaseException as exc:
            failure = _first_failure(exc)
            if failure is not None and not isinstance(failure, WitnessFailed) and not w.has_started:
                raise  # it never started: the caller's error (e.g. a start timeout), not a gap
            if failure is not None:
                if not _has(exc, _GONE):
                    w.ended = True
                    if isinstance(failure, WitnessFailed):
                        await w.gap(failure.reason, missing=failure.missing or missing,
                                    since_ns=failure.since_ns, dropped=failure.dropped)
                    else:
                        await w.gap(f"failed: {failure!r}", missing=missing)
                if _has(exc, trio.Cancelled):  # the cancellation goes on; the failure is told
                    if isinstance(exc, BaseExceptionGroup):
                        cancelled, _ = exc.split(trio.Cancelled)
                        assert cancelled is not None  # _has found one
                        raise cancelled
                    raise
                return
            if _has(exc, trio.Cancelled):
                if not _has(exc, _GONE):
                    await w.stopped()
                raise
            if _has(exc, _GONE):
                return  # the writer is gone: there is no one left to tell
            raise  # KeyboardInterrupt, SystemExit: not ours to turn into events


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _has(exc: BaseException, kinds: type[BaseException] | tuple[type[BaseException], ...]) -> bool:
    return any(isinstance(leaf, kinds) for leaf in _leaves(exc))


def _first_failure(exc: BaseException) -> Exception | None:
    """The first exception that is neither a cancellation nor the writer going away."""
    return next((leaf for leaf in _leaves(exc) if isinstance(leaf, Exception) and not isinstance(leaf, _GONE)),
                None)
