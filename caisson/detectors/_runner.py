"""The one-pass detector runner: a run's records routed once to the detectors that read them.

Each detector is a pure function over a run's records (`caisson.detectors._base`); most
read a few event types out of a stream that is mostly strace's file opens. Run one by
one, each walks the whole stream to find its few events: eighteen walks of every record.
`one_pass` (``caisson.detectors.run_detectors``) walks the records once, dispatching each by its event type into the
stream of every detector that declared that type (`reads`), then runs each detector over
its own stream, in ledger order. A detector that declares nothing gets every record.

The findings are those of running each detector alone over all the records, in registry
order: a declaration promises that the detector ignores every other type
(tests/caisson/detectors/test_runner.py checks that promise on generated and known-bad runs).
"""

from __future__ import annotations

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
    streams: list[list[Record]] = [[] for _ in wanted]
    appenders: dict[type, tuple] = {}  # event class -> the appends of the streams that want it
    for record in records:
        kind = type(record.event)
        targets = appenders.get(kind)
        if targets is None:
            targets = appenders[kind] = tuple(stream.append for stream, kinds in zip(streams, wanted)
                                              if issubclass(kind, kinds))
        for append in targets:
            append(record)
    return streams


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
    plan = [(detect, reads_of(detect)) for _, detect in detectors]
    wanted = list(dict.fromkeys(kinds for _, kinds in plan if kinds is not None))
    streams = dict(zip(wanted, route(records, wanted)))
    findings: list[Finding] = []
    for detect, kinds in plan:
        findings.extend(detect(records if kinds is None else streams[kinds], config))
    return findings
