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
from itertools import compress
from operator import attrgetter, is_not
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from caisson.detectors._base import Detector, DetectorConfig, Finding, Fold, fold_of, reads_of, start_fold
from ledger import Record

__all__ = ["Routed", "Streamed", "one_pass", "route", "route_for"]

_EVENT = attrgetter("event")


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
    ten times a dict lookup, and most records miss most detectors' types. A run of records
    of one class goes to its streams as one slice (tests/caisson/detectors/test_runner.py
    checks the streams against routing record by record)."""

    def __init__(self, wanted: tuple[tuple[type, ...], ...]):
        self.wanted = wanted
        self.targets: dict[type, tuple[int, ...]] = {}

    def split(self, records: Iterable[Record], kinds: Sequence[type] | None = None) -> list[list[Record]]:
        """One stream per wanted tuple; ``kinds``: the class of each record's event, when the
        caller has them (else read here)."""
        if not isinstance(records, (list, tuple)):
            records = list(records)
        streams: list[list[Record]] = [[] for _ in self.wanted]
        if not records:
            return streams
        known = self.targets
        # Records come in runs of one class (a stream of file opens, an exchange and its call):
        # the classes and the starts of the runs are found at C speed (map, compress), then each
        # run goes to its streams as one slice: a dict lookup per run, not per record.
        if kinds is None:
            kinds = list(map(type, map(_EVENT, records)))
        elif len(kinds) != len(records):
            raise ValueError(f"{len(kinds)} kinds for {len(records)} records")
        starts = [0, *compress(range(1, len(kinds)), map(is_not, kinds[1:], kinds)), len(kinds)]
        for start, end in zip(starts, starts[1:]):
            kind = kinds[start]
            targets = known.get(kind)
            if targets is None:
                targets = known[kind] = tuple(i for i, kinds_ in enumerate(self.wanted) if issubclass(kind, kinds_))
            if not targets:
                continue
            if end - start == 1:
                record = records[start]
                for i in targets:
                    streams[i].append(record)
            else:
                run = records[start:end]
                for i in targets:
                    streams[i] += run
        return streams


@functools.lru_cache(maxsize=64)
def _routes(wanted: tuple[tuple[type, ...], ...]) -> _Routes:
    return _Routes(wanted)


_Plan = tuple[list[tuple[Detector, int | None]], tuple[int, ...], _Routes]


@functools.lru_cache(maxsize=16)
def _plan(detectors: tuple[tuple[str, Detector], ...], extra: tuple[tuple[type, ...], ...] = ()) -> _Plan:
    """Each detector with the index of its stream (None: every record), the index of each
    of the caller's ``extra`` streams, and the routes (one stream per distinct tuple)."""
    declared = [(detect, reads_of(detect)) for _, detect in detectors]
    wanted = tuple(dict.fromkeys([*(kinds for _, kinds in declared if kinds is not None), *extra]))
    index = {kinds: i for i, kinds in enumerate(wanted)}
    plan = [(detect, None if kinds is None else index[kinds]) for detect, kinds in declared]
    return plan, tuple(index[kinds] for kinds in extra), _Routes(wanted)


class Routed:
    """A run's records split once for a set of detectors, and for the caller's own kinds.

    Attributes:
        streams: one list per tuple of kinds the caller asked for (`route_for`'s
            ``extra``), in ledger order, as `route` would give them.
    """

    def __init__(self, records: Sequence[Record], plan: _Plan, kinds: Sequence[type] | None = None):
        self._records = records
        self._plan, extra, routes = plan
        self._split = routes.split(records, kinds)
        self.streams = [self._split[i] for i in extra]

    def detect(self, config: DetectorConfig) -> list[Finding]:
        """Run the detectors, each over its own stream; findings in registry order (each
        detector's in its own order): the same as each detector alone over every record."""
        findings: list[Finding] = []
        for detect, stream in self._plan:
            findings.extend(detect(self._records if stream is None else self._split[stream], config))
        return findings


def route_for(records: Iterable[Record], detectors: Iterable[tuple[str, Detector]],
              extra: Sequence[tuple[type, ...]] = (), *, kinds: Sequence[type] | None = None) -> Routed:
    """Walk a run's records once, into the streams of ``detectors`` and those of ``extra``.

    For a caller that needs a few event types itself before it can run the detectors (the
    events the detector configuration comes from): one walk of the records, not two.

    Args:
        records: the run's records, in ledger order.
        detectors: (name@version, detector) pairs.
        extra: tuples of event classes, as `route`'s ``wanted``.
        kinds: the class of each record's event, in order, when the caller has them
            already (`caisson.replay._rederive.rederive_kinds`); else read here.

    Returns:
        The split records: `Routed.streams` for ``extra``, `Routed.detect` for the findings.
    """
    if not isinstance(records, Sequence):
        records = list(records)
    detectors = tuple(detectors)
    extra = tuple(tuple(wanted) for wanted in extra)
    try:
        plan = _plan(detectors, extra)
    except TypeError:  # an unhashable entry (a list for a pair): planned for this call only
        plan = _plan.__wrapped__(detectors, extra)
    return Routed(records, plan, kinds)


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


def _ignore(record: Record) -> None:
    """The sink of a fold that has ended: it takes no more records."""


def _hold_unkept(keeps: Callable[[Record], bool], hold: Callable[[Record], None], record: Record) -> None:
    """Hold ``record`` for a detector over a shared projection, unless the projection keeps
    all that matters of it."""
    if not keeps(record):
        hold(record)


class Streamed:
    """Detectors fed a run's records one at a time, holding no more of the run than they must.

    A detector made with `caisson.detectors._base.folded` is sent each record of the types
    it reads as it comes and keeps only its own state; any other is handed, at `finish`,
    the list of the records of its types (so what it reads stays held: detectors of the
    bulk of a run, its syscalls, are folds). Detectors over one projection of the run (the
    call owners: `caisson.detectors.attribution.attributed`) share one instance of it,
    which holds the run's process tree once, not once each (replay_bench's
    ``replay_growth``: a run's processes are most of what grows with it). The findings are
    those of `one_pass` over the same records.

    Args:
        detectors: (name@version, detector) pairs.
        config: the run's detector configuration.
    """

    def __init__(self, detectors: Iterable[tuple[str, Detector]], config: DetectorConfig):
        self._config = config
        self._found: list[list[Finding]] = []
        self._folds: list[Fold | None] = []
        self._lists: list[tuple[Detector, list[Record]] | None] = []
        self._sinks: list = []  # one per detector, then one per shared projection: what takes a record
        self._kinds: list[tuple[type, ...] | None] = []  # what each sink reads (None: every record)
        self._shared: dict[type, Any] = {}  # projection class -> the one instance the detectors over it share
        self._bodies: list[tuple[Any, Callable, list[Record]] | None] = []  # (projection, body, own records)
        for _, detect in detectors:
            fold, found = fold_of(detect), []
            projection = getattr(fold, "projection", None)
            if projection is not None:
                if projection not in self._shared:
                    self._shared[projection] = projection()
                own: list[Record] = []
                self._found.append(found)
                self._folds.append(None)
                self._lists.append(None)
                self._bodies.append((self._shared[projection], fold.body, own))  # type: ignore[union-attr]
                self._sinks.append(functools.partial(_hold_unkept, projection.keeps, own.append))
                self._kinds.append(reads_of(detect))
                continue
            self._bodies.append(None)
            run = start_fold(fold, config, found) if fold is not None else None
            self._found.append(found)
            self._folds.append(run)
            if fold is not None:
                self._lists.append(None)
                self._sinks.append(_ignore if run is None else run.send)
            else:
                stream: list[Record] = []
                self._lists.append((detect, stream))
                self._sinks.append(stream.append)
            self._kinds.append(reads_of(detect))
        self._sinks += [shared.feed for shared in self._shared.values()]
        self._kinds += [tuple(projection.READS) for projection in self._shared]
        self._targets: dict[type, tuple[int, ...]] = {}

    def _route(self, kind: type) -> tuple[int, ...]:
        targets = self._targets[kind] = tuple(
            i for i, kinds in enumerate(self._kinds)
            if self._sinks[i] is not _ignore and (kinds is None or issubclass(kind, kinds)))
        return targets

    def feed(self, record: Record) -> None:
        """Route one record, the next in ledger order."""
        kind = record.event.__class__
        targets = self._targets.get(kind)
        if targets is None:
            targets = self._route(kind)
        sinks = self._sinks
        for i in targets:
            try:
                sinks[i](record)
            except StopIteration:  # that fold has seen all it needs
                sinks[i] = _ignore
                self._targets.clear()

    def finish(self) -> list[Finding]:
        """The findings, in registry order (each detector's in its own order), once every
        record was fed."""
        findings: list[Finding] = []
        results = {id(shared): shared.result() for shared in self._shared.values()}
        for run, held, shared, found in zip(self._folds, self._lists, self._bodies, self._found):
            if shared is not None:
                projection, body, own = shared
                found.extend(body(own, results[id(projection)], self._config))
            elif held is not None:
                detect, stream = held
                found.extend(detect(stream, self._config))
            elif run is not None:
                try:
                    run.send(None)
                except StopIteration:
                    pass
            findings.extend(found)
        return findings
