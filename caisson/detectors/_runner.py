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

from collections.abc import Iterable, Sequence

from caisson.detectors._base import Detector, DetectorConfig, Finding, reads_of
from ledger import Record

__all__ = ["Routed", "one_pass", "route", "route_for"]


def route(records: Iterable[Record], wanted: Sequence[tuple[type, ...]]) -> list[list[Record]]:
    """Split records, in one pass, into one stream per tuple of event types.

    Args:
        records: a run's records, in ledger order.
        wanted: tuples of event classes; a record goes into every stream whose tuple holds
            its event's class or a base of it.

    Returns:
        One list per entry of ``wanted`` (same order), each in ledger order.
    """
    wanted = [tuple(kinds) for kinds in wanted]
    streams: list[list[Record]] = [[] for _ in wanted]
    targets: dict[type, list[list[Record]]] = {}  # event class -> the streams it goes to
    for record in records:
        kind = type(record.event)
        found = targets.get(kind)
        if found is None:
            found = targets[kind] = [stream for stream, kinds in zip(streams, wanted) if issubclass(kind, kinds)]
        for stream in found:
            stream.append(record)
    return streams


class Routed:
    """A run's records split once for a set of detectors, and for the caller's own kinds.

    Attributes:
        streams: one list per tuple of kinds the caller asked for (`route_for`'s
            ``extra``), in ledger order, as `route` would give them.
    """

    def __init__(self, records: Sequence[Record], detectors: Iterable[tuple[str, Detector]],
                 extra: Sequence[tuple[type, ...]] = ()):
        declared = [(detect, reads_of(detect)) for _, detect in detectors]
        wanted = list(dict.fromkeys([*(kinds for _, kinds in declared if kinds is not None),
                                     *(tuple(kinds) for kinds in extra)]))
        split = route(records, wanted)
        self._records = records
        self._plan = [(detect, None if kinds is None else split[wanted.index(kinds)]) for detect, kinds in declared]
        self.streams = [split[wanted.index(tuple(kinds))] for kinds in extra]

    def detect(self, config: DetectorConfig) -> list[Finding]:
        """Run the detectors, each over its own stream; findings in registry order (each
        detector's in its own order): the same as each detector alone over every record."""
        findings: list[Finding] = []
        for detect, stream in self._plan:
            findings.extend(detect(self._records if stream is None else stream, config))
        return findings


def route_for(records: Iterable[Record], detectors: Iterable[tuple[str, Detector]],
              extra: Sequence[tuple[type, ...]] = ()) -> Routed:
    """Walk a run's records once, into the streams of ``detectors`` and those of ``extra``.

    For a caller that needs a few event types itself before it can run the detectors (the
    events the detector configuration comes from): one walk of the records, not two.

    Args:
        records: the run's records, in ledger order.
        detectors: (name@version, detector) pairs.
        extra: tuples of event classes, as `route`'s ``wanted``.

    Returns:
        The split records: `Routed.streams` for ``extra``, `Routed.detect` for the findings.
    """
    return Routed(records if isinstance(records, Sequence) else list(records), detectors, extra)


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
    return route_for(records, detectors).detect(config)
