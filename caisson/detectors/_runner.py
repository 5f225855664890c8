"""The one-pass detector runner: a run's records routed once to the detectors that read them.

Each detector is a pure function over a run's records (`caisson.detectors._base`); most
read a few event types out of a stream that is mostly strace's file opens. Run one by
one, each walks the whole stream to find its few events: eighteen walks of every record.
`one_pass` (``caisson.detectors.run_detectors``) walks the records once, dispatching each
by its event type into the stream of every detector that declared that type (`reads`),
then runs each detector over its own stream, in ledger order. A detector that declares
nothing gets every record.

The findings are those of running each detector alone over all the records, in registry
order: a declaration promises that the detector ignores every other type
(tests/caisson/detectors/test_runner.py checks that promise on generated and known-bad runs).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence

from caisson.detectors._base import Detector, DetectorConfig, Finding, reads_of
from ledger import Record

__all__ = ["one_pass", "route"]


def route(records: Iterable[Record], wanted: Sequence[tuple[type, ...]]) -> list[list[Record]]:
    """Split records, in one pass, into one stream per tuple of event types.

    Args:
        records: a run's records, in ledger order.
        wanted: tuples of event classes; a record goes into every stream whose tuple holds
            its event's class or a base of it.

    Returns:
        One list per entry of ``wanted`` (same order), each in ledger order.
    """
    return _routes(tuple(tuple(kinds) for kinds in wanted)).split(records)


class _Routes:
    """Which streams each event class goes to, for one tuple of wanted kinds (learnt as
    classes appear, kept across runs by `_plan` and `_routes`). Routing by the event's
    class, not by ``isinstance``: a miss of ``isinstance`` on a msgspec Struct costs about
    ten times a dict lookup, and most records miss most detectors' types."""

    def __init__(self, wanted: tuple[tuple[type, ...], ...]):
        self.wanted = wanted
        self.targets: dict[type, tuple[int, ...]] = {}

    def split(self, records: Iterable[Record]) -> list[list[Record]]:
        streams: list[list[Record]] = [[] for _ in self.wanted]
        appends = [stream.append for stream in streams]
        known = self.targets
        for record in records:
            kind = type(record.event)
            targets = known.get(kind)
            if targets is None:
                targets = known[kind] = tuple(i for i, kinds in enumerate(self.wanted) if issubclass(kind, kinds))
            for i in targets:
                appends[i](record)
        return streams


@functools.lru_cache(maxsize=64)
def _routes(wanted: tuple[tuple[type, ...], ...]) -> _Routes:
    return _Routes(wanted)


@functools.lru_cache(maxsize=16)
def _plan(detectors: tuple[tuple[str, Detector], ...]) -> tuple[list[tuple[Detector, int | None]], _Routes]:
    """Each detector with the index of its stream (None: every record), and the routes."""
    declared = [(detect, reads_of(detect)) for _, detect in detectors]
    wanted = tuple(dict.fromkeys(kinds for _, kinds in declared if kinds is not None))
    index = {kinds: i for i, kinds in enumerate(wanted)}
    return [(detect, None if kinds is None else index[kinds]) for detect, kinds in declared], _Routes(wanted)


def one_pass(records: Iterable[Record], config: DetectorConfig,
             detectors: Iterable[tuple[str, Detector]]) -> list[Finding]:
    """Run detectors over one run's records, walking the records once.

    Args:
        records: the run's records, in ledger order.
        config: the run's detector configuration.
        detectors: (name@version, detector) pairs.

    Returns:
        The findings, in registry order (each detector's in its own order): the same as
        running each detector alone over every record.
    """
    if not isinstance(records, Sequence):
        records = list(records)
    detectors = tuple(detectors)
    try:
        plan, routes = _plan(detectors)
    except TypeError:  # an unhashable entry (a list for a pair): planned for this call only
        plan, routes = _plan.__wrapped__(detectors)
    streams = routes.split(records)
    findings: list[Finding] = []
    for detect, stream in plan:
        findings.extend(detect(records if stream is None else streams[stream], config))
    return findings
