"""Replay: recompute a run's findings and score from its sealed evidence, offline.

For each run: verify the ledger against the trusted key (a ledger that does not verify
is reported and not scored), read its records, rebuild its LLM usage and agent events
from the raw bodies and stdout it kept as blobs with today's parsers and rules
(`caisson.replay._rederive`: the fields derived live are not trusted), take the scenario
the run kept as a blob, run every registered detector, grade the answer the run kept as
a blob, and write ``findings.json`` beside the run. The ledger is never written:
re-running replay with a changed detector or parser changes only the findings file.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Literal

import msgspec

from caisson.detectors import DEFAULT_DETECTORS, VOID, Detector, DetectorConfig, Finding, Streamed, route_for
from caisson.detectors import config_from_records, tool_audit_status
from caisson.errors import CaissonError
from caisson.scenario import Scenario, parse_scenario
from caisson.replay._rederive import Hints, Rebuild, Rederived, rederive, rederive_kinds
from caisson.replay.scoring import Grade, grade
from ledger import BLOBS_DIR, BlobStore, LedgerError, Record, VerifiedStream, VerifyKey, VerifyReport, locate
from ledger.events import BlobStored, RunStarted, SandboxBuilt, Verdict, WitnessStarted

__all__ = ["BLOB_ROLES", "FINDINGS_FILE", "RunReplay", "replay_records", "replay_run", "rebuilt_records", "replay_runs",
           "replay_streams", "verdict_change", "verdict_of", "write_findings"]

FINDINGS_FILE = "findings.json"
WEAKENED = "controls.weakened@1"


class RunReplay(msgspec.Struct, kw_only=True):
    """The findings and score of one run, as written to ``findings.json``."""

    run_dir: str
    run_id: str | None = None
    verified: Literal["ok", "tampered", "unclosed", "unreadable"]
    verify_detail: str = ""
    question_id: str | None = None
    detectors: list[str] = []  # name@version of every detector run
    findings: list[Finding] = []
    status: Literal["clean", "void", "unverified"] = "void"
    reasons: list[str] = []  # why void: one line per voiding finding
    score: float | None = None  # None: void, unverified, unscored, or the leak backstop
    score_if_clean: float | None = None
    grade: Grade | None = None
    rederived: Rederived | None = None  # LLM usage and agent events rebuilt from blobs, with versions
    # how far the agent's tool use was audited (audited | partial | unavailable); None: no agent, no arm
    tool_audit: str | None = None


def verdict_of(replay: RunReplay) -> Verdict:
    """A replay's verdict: its status, score, voiding findings and the detectors that judged it.

    The one function from a replay to a cell's outcome: the study runner records it in
    ``cell.ended`` and the report computes it again with today's detectors.
    """
    return Verdict(status=replay.status, score=replay.score, detectors=list(replay.detectors),
                   void=[f for f in replay.findings if f.effect == VOID] if replay.status == "void" else [])


def verdict_change(recorded: Verdict, today: Verdict) -> str:
    """How today's verdict of a run differs from the one recorded of it ("" when it does not).

    Status, score and the kinds of the voiding findings are compared; the detector versions
    are named when they changed (a change of versions alone is no change of verdict).
    """
    def said(v: Verdict) -> str:
        kinds = ", ".join(dict.fromkeys(f.kind or "?" for f in v.void))
        score = "" if v.score is None else f" {v.score:.2f}"
        return f"{v.status}{score}" + (f" ({kinds})" if kinds else "")

    same_score = (recorded.score is None) == (today.score is None) and (
        recorded.score is None or today.score is None or abs(recorded.score - today.score) < 1e-9)
    if (recorded.status == today.status and same_score
            and {f.kind for f in recorded.void} == {f.kind for f in today.void}):
        return ""
    change = f"recorded {said(recorded)}, today {said(today)}"
    if not recorded.detectors:
        return change + "; the recorded detector versions are unknown (schema <= 15)"
    gone = [d for d in recorded.detectors if d not in today.detectors]
    new = [d for d in today.detectors if d not in recorded.detectors]
    if gone or new:
        change += f"; detectors then {', '.join(gone) or '-'}, now {', '.join(new) or '-'}"
    return change


BLOB_ROLES = ("http.request_body", "http.response_body", "stdout", "scenario", "answer")
"""Prefixes of the roles of the blobs replay reads (body blobs, the agent's stdout, the kept
scenario, the answer): what to ask `ledger.verify_and_read` to hand over (``keep_roles``)."""


@functools.lru_cache(maxsize=32)
def _scenario(data: bytes) -> Scenario:
    """A kept scenario, parsed once per distinct bytes (a study's cells keep the same one)."""
    return parse_scenario(data, "scenario")


def replay_run(run_dir: Path, trusted: VerifyKey,
               detectors: Sequence[tuple[str, Detector]] = DEFAULT_DETECTORS) -> RunReplay:
    """Verify, detect and grade one run (does not write anything), its records streamed from
    the file through the rebuild and the detectors (`ledger.VerifiedStream`): what is held
    is what the detectors must remember, not the run.

    Raises:
        CaissonError: the run keeps a scenario that no longer parses (names the field).
    """
    names = [name for name, _ in detectors]
    preset: _Preset | None = None
    while True:
        try:
            stream = VerifiedStream(run_dir, trusted)
        except LedgerError as exc:
            return RunReplay(run_dir=str(run_dir), verified="unreadable", verify_detail=str(exc), status="unverified",
                             detectors=names)
        records = iter(stream)
        failure: Exception | None = None
        walked = None
        try:
            walked = _walk(run_dir, records, detectors, _blob_reader(stream.path, None), preset)
        except (CaissonError, OSError) as exc:  # a read of the file, a blob, the scenario
            failure = exc
        try:
            for _ in records:  # the rest, to the end, when the walk stopped at a failure
                pass
        except LedgerError as exc:
            failure = exc
        if not stream.complete:
            return RunReplay(run_dir=str(run_dir), verified="unreadable", verify_detail=str(failure),
                             status="unverified", detectors=names)
        report = stream.report()
        if report.status != "ok":
            return _unverified(run_dir, report, names)
        if failure is not None:
            raise failure
        assert walked is not None
        if walked.exact or preset is not None:
            return walked.replay(run_dir, report, names)
        preset = walked.preset()  # a decision made early was not the whole run's: once more, knowing it


def replay_records(run_dir: Path, report: VerifyReport, records: Sequence[Record],
                   detectors: Sequence[tuple[str, Detector]] = DEFAULT_DETECTORS, *,
                   verified_blobs: Mapping[str, bytes] | None = None) -> RunReplay:
    """Detect and grade a run already verified and read (`ledger.verify_and_read`), so a
    caller that needs the records too reads the ledger once.

    Args:
        run_dir: the run directory (its blobs hold the scenario and the answer).
        report: the verification report of ``records``; a status other than ``ok`` gives
            an unverified, unscored result.
        records: the run's records, in order.
        detectors: (name@version, detector) pairs to run.
        verified_blobs: sha256 hex -> bytes the verification hashed (its ``kept_blobs``);
            a blob not in it is read from the store, its hash checked again.

    Raises:
        CaissonError: the run keeps a scenario that no longer parses (names the field).
    """
    return replay_streams(run_dir, report, records, detectors, verified_blobs=verified_blobs)[0]


def replay_streams(run_dir: Path, report: VerifyReport, records: Sequence[Record],
                   detectors: Sequence[tuple[str, Detector]] = DEFAULT_DETECTORS,
                   extra: Sequence[tuple[type, ...]] = (), *,
                   verified_blobs: Mapping[str, bytes] | None = None) -> tuple[RunReplay, list[list[Record]]]:
    """`replay_records`, and the rebuilt records of the event types in ``extra``, from the
    same walk of the records the detectors are fed.

    Args:
        run_dir, report, detectors, verified_blobs: as `replay_records`.
        records: the run's records, in order (held whole: the detectors are handed lists,
            routed at C speed, as `caisson.detectors.route_for` splits them; `replay_run`
            streams a run from its file instead).
        extra: tuples of event classes (as `caisson.detectors.route`'s ``wanted``).

    Returns:
        The replay, and one list per ``extra`` entry: the records of those types after the
        rebuild (`caisson.replay._rederive`), in order; empty lists for a run that did not
        verify.

    Raises:
        CaissonError: the run keeps a scenario that no longer parses (names the field).
    """
    names = [name for name, _ in detectors]
    if report.status != "ok":
        return _unverified(run_dir, report, names), [[] for _ in extra]
    checked = _blob_reader(Path(report.path), verified_blobs)
    rebuilt, kinds, rederived = rederive_kinds(records, _or_none(checked))
    # one walk: the manifest, the caller's streams and the detectors' streams
    routed = route_for(rebuilt, detectors, (_MANIFEST, *extra), kinds=kinds)
    manifest, *streams = routed.streams
    blobs = {r.event.role: r.event.sha256 for r in manifest if isinstance(r.event, BlobStored)}  # the last of each
    config, scenario = _configured(run_dir, manifest, blobs, checked)
    return _graded(run_dir, report, names, manifest, blobs, config, scenario, routed.detect(config), rederived,
                   checked), streams


def _unverified(run_dir: Path, report: VerifyReport, names: list[str]) -> RunReplay:
    detail = report.reason or f"not closed: {report.unsealed} records after the last seal"
    return RunReplay(run_dir=str(run_dir), run_id=report.run_id, verified=report.status, verify_detail=detail,
                     status="unverified", detectors=names)


def _configured(run_dir: Path, manifest: Iterable[Record], blobs: Mapping[str, str],
                checked: Callable[[str], bytes]) -> tuple[DetectorConfig, Scenario | None]:
    """The detector configuration and the scenario of a run's manifest records (its
    ``run.started``, ``sandbox.built``, ``witness.started``) and blobs (role -> sha256).

    Raises:
        CaissonError: the kept scenario no longer parses (names the run and the field).
        OSError: the scenario blob cannot be read.
    """
    sha = blobs.get("scenario")
    data = checked(sha) if sha is not None else None
    scenario: Scenario | None = None
    if data:
        try:
            scenario = _scenario(data)
        except CaissonError:
            parse_scenario(data, f"{run_dir}:scenario")  # raises, naming the run
            raise
    return config_from_records(manifest, scenario), scenario


def _graded(run_dir: Path, report: VerifyReport, names: list[str], manifest: list[Record], blobs: Mapping[str, str],
            config: DetectorConfig, scenario: Scenario | None, findings: list[Finding], rederived: Rederived,
            checked: Callable[[str], bytes]) -> RunReplay:
    """A verified run's replay: its findings, status and grade."""
    started = next((r.event for r in manifest if isinstance(r.event, RunStarted)), None)
    if started is not None and started.weakened:
        findings.append(Finding(detector=WEAKENED, kind="weakened_control", effect=VOID, evidence=[0],
                                message=f"controls weakened on purpose: {', '.join(started.weakened)}"))
    out = RunReplay(run_dir=str(run_dir), run_id=report.run_id, verified="ok", detectors=names + [WEAKENED],
                    findings=findings, question_id=started.question_id if started else None, rederived=rederived)
    out.reasons = [f"{f.kind}: {f.message}" for f in findings if f.effect == VOID]
    if (started is not None and started.agent is not None) or config.granted_tools is not None:
        out.tool_audit = tool_audit_status(findings)
    out.status = "void" if out.reasons else "clean"
    question = None
    if scenario is not None and out.question_id is not None:
        question = scenario.question(out.question_id)
    if question is not None:
        sha = blobs.get("answer") or blobs.get("stdout")
        answer = checked(sha) if sha is not None else None
        provenance = [*config.excluded_paths, *(os.path.basename(p) for p in config.excluded_paths),
                      *scenario.leak_terms, *question.leak_terms]  # only the answer key holds these
        out.grade = grade(question, answer.decode("utf-8", "replace") if answer is not None else None,
                          provenance_terms=provenance)
        out.score_if_clean = out.grade.score_if_clean
        out.score = None if out.status == "void" else out.grade.score
    return out


_HOLD = 4096
"""Records held at a run's start before the detectors are configured from those seen (a
recorder writes its manifest first); a run whose later records change the configuration
is walked again with the whole run's (`_Walk.exact`)."""
_CONFIG_EVENTS = (RunStarted, SandboxBuilt, WitnessStarted)  # `config_from_records`' events
_MANIFEST = (*_CONFIG_EVENTS, BlobStored)  # and the blobs replay grades


class _Preset(msgspec.Struct, frozen=True, kw_only=True):
    """What a whole walk of a run found, for a second walk to use from its start."""

    config: DetectorConfig
    scenario: str | None  # sha256 of the scenario blob
    hints: Hints


class _Walk:
    """One walk of a run's records: rebuilt (`Rebuild`), fed to the detectors
    (`caisson.detectors.Streamed`), its manifest kept (the configuration's records, the
    last blob of each role).

    Attributes:
        exact: every decision made before the whole run was read (the detector
            configuration, the rebuild's) is the one the whole run gives.
    """

    def __init__(self, run_dir: Path, detectors: Sequence[tuple[str, Detector]], checked: Callable[[str], bytes],
                 preset: _Preset | None):
        self._run_dir, self._detectors, self._checked = run_dir, detectors, checked
        self.rebuild = Rebuild(_or_none(checked), preset.hints if preset is not None else None)
        self.manifest: list[Record] = []
        self.blobs: dict[str, str] = {}  # role -> sha256 of its last blob.stored
        self.config: DetectorConfig | None = None
        self.scenario: Scenario | None = None
        self.used: tuple[DetectorConfig, str | None] | None = None  # what the detectors were configured with
        self.streamed: Streamed | None = None
        if preset is not None:
            self._start(preset.config, preset.scenario)
        self.exact = True

    def _configure(self) -> tuple[DetectorConfig, Scenario | None]:
        return _configured(self._run_dir, self.manifest, self.blobs, self._checked)

    def _start(self, config: DetectorConfig, scenario_sha: str | None) -> Streamed:
        self.used = (config, scenario_sha)
        self.streamed = Streamed(self._detectors, config)
        return self.streamed

    def walk(self, records: Iterable[Record]) -> None:
        manifest, blobs = self.manifest, self.blobs
        early: list[Record] = []
        feed = self.streamed.feed if self.streamed is not None else early.append
        kept: dict[type, int] = {}  # event class -> 1 a blob, 2 a configuration event, 0 neither
        for record in self.rebuild.records(records):
            event = record.event
            kind = event.__class__
            keep = kept.get(kind)
            if keep is None:
                keep = kept[kind] = 1 if issubclass(kind, BlobStored) else 2 if issubclass(kind, _CONFIG_EVENTS) else 0
            if keep == 1:
                blobs[event.role] = event.sha256
            elif keep == 2:
                manifest.append(record)
            feed(record)
            if self.streamed is None and len(early) >= _HOLD:
                feed = self._release(early)
        self.config, self.scenario = self._configure()
        if self.streamed is None:
            self._start(self.config, self.blobs.get("scenario"))
            self._release(early)
        self.exact = self.rebuild.exact and self.used == (self.config, self.blobs.get("scenario"))

    def _release(self, early: list[Record]) -> Callable[[Record], None]:
        """Start the detectors (configured from what was seen) and feed them the held records."""
        streamed = self.streamed
        if streamed is None:
            streamed = self._start(self._configure()[0], self.blobs.get("scenario"))
        for record in early:
            streamed.feed(record)
        early.clear()
        return streamed.feed

    def preset(self) -> _Preset:
        assert self.config is not None
        return _Preset(config=self.config, scenario=self.blobs.get("scenario"), hints=self.rebuild.hints)

    def replay(self, run_dir: Path, report: VerifyReport, names: list[str]) -> RunReplay:
        """The run's replay, from a whole walk."""
        assert self.streamed is not None and self.config is not None
        return _graded(run_dir, report, names, self.manifest, self.blobs, self.config, self.scenario,
                       self.streamed.finish(), self.rebuild.out, self._checked)


def _walk(run_dir: Path, records: Iterable[Record], detectors: Sequence[tuple[str, Detector]],
          checked: Callable[[str], bytes], preset: _Preset | None) -> _Walk:
    walked = _Walk(run_dir, detectors, checked, preset)
    walked.walk(records)
    return walked



def _blob_reader(ledger_path: Path, verified_blobs: Mapping[str, bytes] | None) -> Callable[[str], bytes]:
    """sha256 hex -> a blob's bytes: those verification hashed, else read from the store beside
    the ledger verified (as `ledger.locate` puts it), hash checked.

    The reader raises `OSError` for a blob that cannot be read, `ledger.BlobMismatchError`
    for one whose bytes changed since.
    """
    kept = verified_blobs or {}
    store: list[BlobStore] = []  # opened at the first blob verification did not keep (rare)

    def checked(sha256: str) -> bytes:
        data = kept.get(sha256)
        if data is not None:
            return data
        if not store:
            store.append(BlobStore(ledger_path.parent / BLOBS_DIR))
        return store[0].get(sha256)

    return checked


def _or_none(checked: Callable[[str], bytes]) -> Callable[[str], bytes | None]:
    """The reader, giving None for a blob it cannot read (rederive then keeps the live event)."""

    def blob(sha256: str) -> bytes | None:
        try:
            return checked(sha256)
        except OSError:
            return None

    return blob


def rebuilt_records(report: VerifyReport, records: Sequence[Record],
                    verified_blobs: Mapping[str, bytes] | None = None) -> list[Record]:
    """A verified run's records with its ``llm.call`` and transcript events rebuilt from its
    blobs by today's parsers, as replay and the report read them (`caisson.replay._rederive`).

    Args:
        report: the verification report of ``records`` (where the ledger and its blobs are).
        records: the run's records, in order.
        verified_blobs: the bytes verification hashed (`ledger.verify_and_read`'s ``kept_blobs``).

    Returns:
        The records, rebuilt events in place of the live ones (a body blob that cannot be
        read keeps its live event).
    """
    return rederive(records, _or_none(_blob_reader(Path(report.path), verified_blobs)))[0]


def replay_runs(run_dirs: Iterable[Path], trusted: VerifyKey, *, write: bool = True,
                detectors: Sequence[tuple[str, Detector]] = DEFAULT_DETECTORS) -> list[RunReplay]:
    """Replay each run; with ``write``, put ``findings.json`` beside each verified ledger."""
    results = []
    for run_dir in run_dirs:
        result = replay_run(Path(run_dir), trusted, detectors)
        if write:
            write_findings(Path(run_dir), result)
        results.append(result)
    return results


def write_findings(run_dir: Path, result: RunReplay) -> None:
    """Put ``findings.json`` (the replay, as JSON) beside a run's ledger, replacing it whole;
    nothing for an unreadable run.

    Raises:
        OSError: the file cannot be written.
    """
    if result.verified == "unreadable":
        return
    ledger_path, _ = locate(Path(run_dir))
    target = ledger_path.parent / FINDINGS_FILE
    tmp = target.with_suffix(".tmp")
    tmp.write_bytes(msgspec.json.format(msgspec.json.encode(result)) + b"\n")
    os.replace(tmp, target)


def check_replayable(run_dir: Path) -> None:
    """Raise a clear error when ``run_dir`` is not a run (for the CLI's argument checks)."""
    try:
        locate(run_dir)
    except LedgerError as exc:
        raise CaissonError(str(exc)) from None
