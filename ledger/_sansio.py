"""What every sans-IO parser of caisson shares: one shape (`SansIOParser`), the "need more
bytes" sentinel and the error of feeding one after it closed."""

from __future__ import annotations

import enum
from collections.abc import Iterator
from typing import Final, Protocol, TypeVar, runtime_checkable

from ledger._errors import CaissonError

__all__ = ["NEED_DATA", "NeedData", "ParserClosedError", "SansIOParser", "drain"]


class NeedData(enum.Enum):
    """The type of `NEED_DATA` (an enum, so a type checker narrows ``is not NEED_DATA``)."""

    NEED_DATA = "NEED_DATA"

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = NeedData.NEED_DATA
"""Returned by a parser's `SansIOParser.next_event` when the bytes fed so far hold no
complete item (after ``close``, none ever will)."""


class ParserClosedError(CaissonError):
    """Our own misuse: a sans-IO parser or builder fed after it closed."""


T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


@runtime_checkable
class SansIOParser(Protocol[T_co]):
    """The one shape of a parser: bytes in, items of type ``T_co`` out; no I/O, no clock.

    - ``feed(data)`` adds bytes at any split point (``b""`` is harmless); after ``close``
      it raises `ParserClosedError`.
    - ``next_event()`` returns the next complete item, or `NEED_DATA` when the bytes so far
      hold none; call it until `NEED_DATA` after each ``feed``.
    - ``close()`` says no more bytes come. Whatever the end completes (a last line without
      a newline, calls never returned, a whole transcript) is then queued; ``next_event``
      drains it, then returns `NEED_DATA` forever. A second ``close`` does nothing.

    How a torn tail is told is each parser's own contract, never ``close``'s return: a
    counter or property read after ``close`` (`collectors.sse.SseParser.cut`,
    ``FrameParser.pending``, ``EventStreamDecoder.buffered``), an item of its own
    (``witness.raw``), or an error from ``next_event`` (``FrameDecoder``'s ``FrameError``).

    Not parsers in this sense, so not of this shape: the proxy's body decoders
    (``BodyDecoder`` and its stages) transform bytes into bytes, one output per input with
    nothing to pull; ``ExchangeAssembler`` is fed decoded frames, not bytes, and its
    ``close`` takes the time the stream ended (it shares ``next_event``);
    ``LedgerChecker`` verifies over a ``FrameParser`` and yields records from ``records()``.
    ``tests/test_sansio_contract.py`` holds every parser to this contract and names those
    exceptions.
    """

    def feed(self, data: bytes, /) -> None: ...

    def next_event(self) -> T_co | NeedData: ...

    def close(self) -> None: ...


def drain(parser: SansIOParser[T]) -> Iterator[T]:
    """The items ``parser`` holds now, in order, until it returns `NEED_DATA`."""
    while (item := parser.next_event()) is not NEED_DATA:
        yield item
