"""Shared by the transcript parsers' tests: feed a parser a transcript in pieces, pick its usage."""

from __future__ import annotations

from collections.abc import Callable

from ledger.events import AgentUsage


def parse(factory: Callable[[], object], data: bytes, sizes: list[int] | None = None) -> list:
    """The events of a fresh ``factory()`` parser fed ``data`` in pieces of ``sizes`` bytes
    (then the rest), closed."""
    parser = factory()
    pos = 0
    for size in sizes or []:
        parser.feed(data[pos:pos + size])  # type: ignore[attr-defined]
        pos += size
    parser.feed(data[pos:])  # type: ignore[attr-defined]
    parser.close()  # type: ignore[attr-defined]
    return list(parser.events())  # type: ignore[attr-defined]


def usage_of(events: list) -> AgentUsage:
    """The one ``agent.usage`` event a transcript gives (every adapter emits exactly one)."""
    [usage] = [e for e in events if isinstance(e, AgentUsage)]
    return usage
