"""Shared by the transcript parsers' tests: feed a parser a transcript in pieces, pick its usage,
read a folder of goldens."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ledger import SansIOParser, drain
from ledger.events import AgentUsage


def parse(factory: Callable[[], SansIOParser[Any]], data: bytes, sizes: list[int] | None = None) -> list:
    """The events of a fresh ``factory()`` parser fed ``data`` in pieces of ``sizes`` bytes
    (then the rest), closed."""
    parser = factory()
    pos = 0
    for size in sizes or []:
        parser.feed(data[pos:pos + size])
        pos += size
    parser.feed(data[pos:])
    parser.close()
    return list(drain(parser))


def usage_of(events: list) -> AgentUsage:
    """The one ``agent.usage`` event a transcript gives (every adapter emits exactly one)."""
    [usage] = [e for e in events if isinstance(e, AgentUsage)]
    return usage


def goldens(folder: Path) -> dict[str, bytes]:
    """Every golden transcript in ``folder`` (name -> bytes), sorted by name."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def kinds(events: list, *types: type) -> list:
    """The events of those types, in order."""
    return [e for e in events if isinstance(e, types)]
