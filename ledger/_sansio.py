"""What every sans-IO parser of caisson shares: the "need more bytes" sentinel and the
error of feeding one after it closed.

A parser takes bytes (``feed``) and gives out items (``next_event``, ``next_item``,
``next_output``, ...) until it returns `NEED_DATA`; ``close`` says no more bytes come.
"""

from __future__ import annotations

import enum
from typing import Final

from ledger._errors import CaissonError

__all__ = ["NEED_DATA", "NeedData", "ParserClosedError"]


class NeedData(enum.Enum):
    """The type of `NEED_DATA` (an enum, so a type checker narrows ``is not NEED_DATA``)."""

    NEED_DATA = "NEED_DATA"

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = NeedData.NEED_DATA
"""Returned by a parser's next-item call when the bytes fed so far hold no complete item
(after ``close``, none ever will)."""


class ParserClosedError(CaissonError):
    """Our own misuse: a sans-IO parser or builder fed after it closed."""
