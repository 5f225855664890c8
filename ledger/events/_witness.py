"""Witness health: started, stopped, gaps, and records kept raw."""

from __future__ import annotations

from typing import Any

from ledger.events._base import _Event

__all__ = ["WitnessGap", "WitnessRaw", "WitnessStarted", "WitnessStopped"]


class WitnessStarted(_Event, tag="witness.started", frozen=True, kw_only=True):
    """A witness is running; ``detail`` says how (command line, version)."""

    witness: str
    detail: dict[str, Any] = {}


class WitnessStopped(_Event, tag="witness.stopped", frozen=True, kw_only=True):
    """A witness stopped normally, with its counts."""

    witness: str
    lines: int = 0
    events: int = 0
    parse_failures: int = 0
    bytes: int = 0


class WitnessGap(_Event, tag="witness.gap", frozen=True, kw_only=True):
    """A witness died, lagged or dropped: what is missing and from when."""

    witness: str
    reason: str
    missing: str = ""  # what the ledger lacks because of it
    since_ns: int | None = None  # wall ns from which evidence is missing
    dropped: int = 0  # events known to be lost


class WitnessRaw(_Event, tag="witness.raw", frozen=True, kw_only=True):
    """A line a witness's parser did not understand, kept raw, never dropped."""

    witness: str
    line: str
