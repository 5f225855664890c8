"""Findings, detector configuration and the detector protocol.

A detector is a pure function of a run's records and a frozen config: no clock, no
globals, no I/O. It has a name and a version; replay records ``name@version`` with each
finding, so a finding can be traced to the code that produced it.
"""

from __future__ import annotations

import functools
import posixpath
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import Final, TypeVar

import msgspec

from caisson._paths import CONFIG_HOME, SANDBOX_PATH
from ledger import Record
from ledger.events import Effect, Finding, RunStarted, SandboxBuilt, WitnessStarted

__all__ = ["Detector", "DetectorConfig", "Effect", "Finding", "Fold", "VOID", "SCORE_NULL", "INFO",
           "config_from_records", "FoldFunction", "fold_of", "folded", "norm", "reads", "reads_of", "start_fold",
           "under", "UnderAny"]

VOID: Final = "void"  # the cell cannot be scored (never 0)
SCORE_NULL: Final = "score_null"  # the answer keeps score_if_clean, scores null
INFO: Final = "info"  # visible, no effect on the cell
# `Finding` and its `Effect` are persisted (a study ledger's ``cell.ended`` verdict): ledger.events


class DetectorConfig(msgspec.Struct, frozen=True, kw_only=True):
    """What detectors need to know about a run, from its own records and scenario."""

    sandbox_path: str = SANDBOX_PATH
    config_home: str = CONFIG_HOME
    excluded_paths: tuple[str, ...] = ()  # repo-relative, from sandbox.built
    exclusion_globs: tuple[tuple[str, str], ...] = ()  # (category, glob) from the scenario
    live_repo: str | None = None
    caller_home: str | None = None
    caller_cwd: str | None = None
    read_prefixes: tuple[str, ...] = (
        "/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc", "/proc", "/sys", "/dev",
        "/run", "/var", "/opt", "/tmp", "/home", "/root", "/srv", "/mnt", "/media", "/boot", "/caisson",
    )  # the image's own top-level directories: reading them is not leaving the tree
    write_prefixes: tuple[str, ...] = ("/tmp", "/var/tmp", "/dev/null", "/dev/tty", "/dev/pts", "/proc/self", "/dev/shm")
    pass_credentials: tuple[str, ...] = ()
    credential_patterns: tuple[str, ...] = ()
    injection_switches: tuple[tuple[str, str], ...] = ()  # scenario extras: (name, off value)
    stall_lateness_ns: int = 2_000_000_000  # a procfs tick this late is a stalled host
    deadline_s: float | None = None
    deadline_slack: float = 1.5  # wall time past deadline x slack (+5 s) is a stall, not a timeout
    weakened: tuple[str, ...] = ()
    granted_tools: tuple[str, ...] | None = None  # the arm's grant; None: no arm, nothing to enforce
    denied_tools: tuple[str, ...] = ()  # the deny list handed to the agent
    strategies: tuple[tuple[str, tuple[str, ...]], ...] = ()  # scenario strategy -> tools and mcp__SERVER entries
    granted_strategies: tuple[str, ...] = ()  # the scenario strategies the arm grants
    witness_window_ns: int = 2_000_000_000  # two syscall witnesses' stamps of one call differ by at most this
    # the witnesses the run's witness.started records name, sorted; None: built without them,
    # or from records that hold none (a detector that needs them reads its records)
    witnesses: tuple[str, ...] | None = None


Detector = Callable[[Iterable[Record], DetectorConfig], Iterator[Finding]]

Fold = Generator[None, Record | None, None]
"""A detector as a fold: sent its records one by one, then None; it appends its findings to
the list it was given, and keeps only what it must remember between records."""
FoldFunction = Callable[[DetectorConfig, list[Finding]], Fold]

_D = TypeVar("_D", bound=Callable)


def reads(*kinds: type) -> Callable[[_D], _D]:
    """Declare the event types a detector reads (a decorator; the function is unchanged).

    A detector that declares its kinds must give the same findings on the run's records
    of those kinds (in ledger order) as on all of them: the one-pass runner
    (`caisson.detectors.run_detectors`) hands it only those. A detector that declares
    nothing is handed every record.

    Args:
        kinds: event classes from `ledger.events` (a subclass counts as its class).

    Raises:
        TypeError: a kind is not a class.
    """
    for kind in kinds:
        if not isinstance(kind, type):
            raise TypeError(f"reads() takes event classes, got {kind!r}")

    def mark(detect: _D) -> _D:
        detect.reads = tuple(kinds)  # type: ignore[attr-defined]
        return detect

    return mark


def folded(fold: FoldFunction) -> Detector:
    """A detector written as a fold (a decorator): the detector over a run's records, which
    sends them to ``fold`` one by one; `fold_of` gives ``fold`` back to a runner that streams
    the records (`caisson.detectors.Streamed`).

    ``fold(config, found)`` is a generator: it receives each record from ``yield`` and None
    after the last, appends its findings to ``found``, and may return at any point (it has
    seen all it needs).
    """

    @functools.wraps(fold)
    def detect(records: Iterable[Record], config: DetectorConfig) -> Iterator[Finding]:
        found: list[Finding] = []
        run = start_fold(fold, config, found)
        if run is not None:
            try:
                for record in records:
                    run.send(record)
                run.send(None)
            except StopIteration:
                pass
        yield from found

    detect.fold = fold  # type: ignore[attr-defined]
    return detect


def start_fold(fold: FoldFunction, config: DetectorConfig, found: list[Finding]) -> Fold | None:
    """``fold`` started, ready for its first record; None when it ended before any (it needs none)."""
    run = fold(config, found)
    try:
        next(run)
    except StopIteration:
        return None
    return run


def fold_of(detect: Detector) -> FoldFunction | None:
    """The fold ``detect`` was made from with `folded`, or None (a function over all its records)."""
    return getattr(detect, "fold", None)


def reads_of(detect: Detector) -> tuple[type, ...] | None:
    """The event types ``detect`` declared with `reads`, or None (it reads every record)."""
    return getattr(detect, "reads", None)


def norm(path: str, cwd: str | None = None) -> str:
    """Normalise a chamber path (resolve ``.``/``..`` lexically, relative to ``cwd``)."""
    if not path.startswith("/"):
        path = posixpath.join(cwd or "/", path)
    return posixpath.normpath(path)


def under(path: str, prefix: str) -> bool:
    """True when ``path`` is ``prefix`` or inside it (both normalised)."""
    return path == prefix or path.startswith(prefix.rstrip("/") + "/")


class UnderAny:
    """``UnderAny(prefixes)(path)``: `under` any of the prefixes, in one test (both normalised).

    Args:
        prefixes: the directories (or files) a path may be, or be inside of.
    """

    __slots__ = ("_exact", "_starts")

    def __init__(self, prefixes: Iterable[str]):
        prefixes = tuple(prefixes)
        self._exact = frozenset(prefixes)
        self._starts = tuple(p.rstrip("/") + "/" for p in prefixes)

    def __call__(self, path: str) -> bool:
        return path in self._exact or path.startswith(self._starts)


def config_from_records(records: Iterable[Record], scenario=None) -> DetectorConfig:
    """Build a `DetectorConfig` from a run's ``run.started``, ``sandbox.built`` and
    ``witness.started`` records (and scenario): a caller that hands it only some of the
    run's records hands it every record of these three types."""
    fields: dict = {}
    witnesses: set[str] = set()
    for record in records:
        event = record.event
        if isinstance(event, WitnessStarted):
            witnesses.add(event.witness)
        elif isinstance(event, RunStarted):
            if event.arm is not None:
                fields.update(granted_tools=tuple(event.arm.grant), denied_tools=tuple(event.arm.deny),
                              strategies=tuple((name, tuple(members)) for name, members in event.arm.catalog.items()),
                              granted_strategies=tuple(event.arm.strategies))
            caller = event.caller
            fields.update(live_repo=event.repo, caller_home=caller.home if caller else None,
                          caller_cwd=caller.cwd if caller else None, weakened=tuple(event.weakened),
                          deadline_s=event.limits.wall_seconds if event.limits else None)
        elif isinstance(event, SandboxBuilt):
            fields.update(sandbox_path=event.path, excluded_paths=tuple(e.path for e in event.excluded))
    if scenario is not None:
        fields.update(
            exclusion_globs=tuple((ex.category, g) for ex in scenario.exclusions for g in ex.globs),
            pass_credentials=tuple(scenario.pass_credentials),
            credential_patterns=tuple(scenario.credential_patterns),
            injection_switches=tuple(scenario.injection_switches.items()),
        )
    return DetectorConfig(**fields, witnesses=tuple(sorted(witnesses)) or None)  # none seen: not known
