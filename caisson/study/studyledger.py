"""The study ledger: a signed ledger like any run's, in segments, under ``DIR/study/``.

Segment ``DIR/study/000/`` starts with ``study.planned``; a resumed study writes a new
segment (``001``, ...) whose first event, ``study.resumed``, names the previous segment's
run id, record count and chain head at its last valid seal, so the segments verify as
one whole even though a crash left the previous one unclosed. Every study event is
sealed (flushed and fsynced) as soon as it is written: ``cell.started`` is durable
before its cell is dispatched.

What comes after the study closed (a judge run, a backfill segment) is announced in a
segment of its own (`announce`): ``study.resumed`` then one ``judge.recorded`` or
``backfill.recorded`` binding that ledger's final head, and the final seal. Removing a
judge directory or a backfill segment afterwards then leaves its announcement naming
nothing, which `caisson verify DIR` reports.

One process writes a study at a time: a study run or resume (`StudyLedger`), a judge run
or a backfill holds `study_lock` on ``DIR/study/.lock`` while it writes, so two of them never
take the same segment number; the second is refused at once, naming the directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import msgspec

from caisson.errors import UsageError
import ledger
from ledger import (BlobStore, LedgerChecker, LedgerError, Record, SigningKey, VerifyKey, VerifyReport,
                    locate, verify_and_read)
from ledger.events import BackfillRecorded, HostKey, JudgeRecorded, StudyResumed

__all__ = ["SealedState", "StudyLedger", "StudySegment", "read_segments", "announce", "announced", "segments",
           "numbered_dirs", "sealed_records", "sealed_state", "state_of", "read_study",
           "STUDY_DIR", "SOURCE", "enrolled_keys", "run_signer", "run_key", "run_trust", "lock_study", "study_lock",
           "LOCK_FILE"]

STUDY_DIR = "study"
SOURCE = "study"


class SealedState(msgspec.Struct, frozen=True, kw_only=True):
    """What a ledger's last valid seal covers: the state a study binds."""

    run_id: str | None
    records: int  # records covered by the last valid seal
    head: str  # hex chain head at that seal ("" when no seal checked out)
    final: bool  # that seal closed the ledger
    signature: str  # hex Ed25519 signature of that seal
    status: str  # ok | tampered | unclosed (as `ledger.verify_ledger` would say)
    reason: str = ""


def state_of(report: VerifyReport) -> SealedState:
    """The sealed state a `ledger.verify_ledger` report found (blobs checked too): the same
    `sealed_state` would give for an intact ledger, without reading it again."""
    return SealedState(run_id=report.run_id, records=report.sealed, head=report.head,
                       final=report.final, signature=report.signature,
                       status=report.status, reason=report.reason or "")


def sealed_state(path: Path, trusted: VerifyKey) -> SealedState:
    """Check a ledger (run directory or file) against ``trusted``; its last seal's state.

    Blobs are not checked here (`ledger.verify_ledger` does that).

    Raises:
        LedgerError: nothing readable at ``path`` (NotALedgerError: not a ledger).
    """
    ledger_path, _ = locate(Path(path))
    try:
        data = ledger_path.read_bytes()
    except OSError as exc:
        raise LedgerError(f"cannot read: {exc.strerror}", path=str(ledger_path)) from None
    checker = LedgerChecker(trusted, decode=False)
    checker.feed(data)
    for _ in checker.records():
        pass
    seal = checker.last_seal
    status, reason = "ok", ""
    if checker.tampered is not None:
        status, reason = "tampered", checker.tampered[0]
    elif not checker.final:
        status = "unclosed"
    elif checker.pending_bytes:
        status, reason = "tampered", f"{checker.pending_bytes} bytes after the final seal"
    return SealedState(run_id=checker.header.run_id if checker.header else None,
                       records=seal.upto if seal else 0, head=seal.head.hex() if seal else "",
                       final=bool(seal and seal.final), signature=seal.signature.hex() if seal else "",
                       status=status, reason=reason)


def run_signer(path: Path) -> bytes | None:
    """The raw Ed25519 public key a ledger's header names (32 bytes), unchecked; None when
    there is no readable header. Trust comes from the caller's enrolled set, never from this."""
    ledger_path, _ = locate(Path(path))
    checker = LedgerChecker(None, decode=False)
    try:
        with open(ledger_path, "rb") as handle:
            checker.feed(handle.read(1 << 16))
        next(iter(checker.records()), None)
    except (OSError, LedgerError):
        return None
    return checker.header.public_key if checker.header is not None else None


def enrolled_keys(host_keys: Iterable[HostKey]) -> dict[bytes, VerifyKey]:
    """``study.planned.host_keys`` as raw public key -> key.

    Raises:
        UsageError: an entry whose ``public_key`` is not the hex of a 32-byte Ed25519 key.
    """
    keys = {}
    for entry in host_keys:
        try:
            raw = bytes.fromhex(entry.public_key)
            keys[raw] = VerifyKey.from_raw(raw)
        except ValueError as exc:
            raise UsageError(f"study.planned.host_keys: {entry!r}: not an Ed25519 public key ({exc})") from None
    return keys


def run_key(path: Path, enrolled: dict[bytes, VerifyKey]) -> VerifyKey | None:
    """The enrolled key a run's ledger names, or None (no header, or a key not enrolled)."""
    raw = run_signer(path)
    return enrolled.get(raw) if raw is not None else None


def run_trust(run_dir: Path, trusted: VerifyKey, enrolled: dict[bytes, VerifyKey]) -> VerifyKey | None:
    """The key a study's run verifies against: ``trusted`` when the study enrolled no host
    keys, else the enrolled key its ledger names (None: signed by a key not enrolled)."""
    return run_key(run_dir, enrolled) if enrolled else trusted


def numbered_dirs(root: Path) -> list[Path]:
    """The directories under ``root`` named by a number (``000``, ``001``, ...: segments,
    judge runs), in order; [] when ``root`` is not a directory."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and p.name.isdigit())


def segments(study_dir: Path) -> list[Path]:
    """The study ledger's segment directories under ``DIR/study/``, in order."""
    return numbered_dirs(Path(study_dir) / STUDY_DIR)


def sealed_records(segment: Path, trusted: VerifyKey | None) -> list[Record]:
    """A segment's records up to its last valid seal (a crash's unsealed tail left out),
    signatures checked against ``trusted`` (None: not checked)."""
    ledger_path, _ = locate(segment)
    checker = LedgerChecker(trusted, decode=True)
    checker.feed(ledger_path.read_bytes())
    records = list(checker.records())
    sealed = checker.last_seal.upto if checker.last_seal else 0
    return [r for r in records if r.seq < sealed]


class StudySegment(msgspec.Struct, frozen=True, kw_only=True):
    """One study ledger segment as one read found it: its verification (blobs checked) and
    its records up to its last valid seal."""

    path: Path  # the segment's ledger file (DIR/study/NNN/ledger)
    report: VerifyReport
    records: list[Record]


def read_segments(study_dir: Path, trusted: VerifyKey) -> list[StudySegment]:
    """Every segment of a study ledger, each verified against ``trusted`` and read once.

    Raises:
        UsageError: ``study_dir`` holds no study ledger.
        LedgerError: a segment is not readable (NotALedgerError: not a ledger).
    """
    segs = segments(study_dir)
    if not segs:
        raise UsageError(f"{study_dir}: no study ledger ({STUDY_DIR}/000/ledger); is it a study directory?")
    read = []
    for seg in segs:
        report, records = verify_and_read(seg, trusted)
        read.append(StudySegment(path=seg, report=report, records=[r for r in records if r.seq < report.sealed]))
    return read


def read_study(study_dir: Path, trusted: VerifyKey | None = None) -> list[Record]:
    """Every record of every segment, in order, up to each segment's last valid seal.

    With ``trusted`` None, signatures are not checked (a viewer: `caisson study status`);
    records after a segment's last seal (a crash's unsealed tail) are left out.

    Raises:
        UsageError: ``study_dir`` holds no study ledger.
    """
    segs = segments(study_dir)
    if not segs:
        raise UsageError(f"{study_dir}: no study ledger ({STUDY_DIR}/000/ledger); is it a study directory?")
    return [r for seg in segs for r in sealed_records(seg, trusted)]


LOCK_FILE = ".lock"
"""The writer lock's file under ``DIR/study/`` (empty; not a segment: `segments` lists digits)."""


def lock_study(study_dir: Path, what: str, *, create: bool = False) -> int:
    """Take the study directory's writer lock: an exclusive ``flock(2)`` on
    ``DIR/study/.lock`` (a regular file opened for writing, as NFS's emulation of flock by
    POSIX locks needs), held until the returned descriptor is closed (or the process
    ends, a crash included: nothing is left to clean up).

    Args:
        study_dir: the study directory (``DIR``).
        what: what is about to write (``study run``, ``judge``, ``backfill``), for the error.
        create: make ``DIR/study/`` (and ``DIR``) when missing (a new study).

    Returns:
        The lock file's descriptor; close it to release the lock.

    Raises:
        UsageError: no ``DIR/study/`` (without ``create``: not a study directory); another
            process holds the lock (a study running or resuming, a judge or a backfill); or
            the filesystem refuses the lock (e.g. ENOLCK: no lock daemon), named.
    """
    root = Path(study_dir) / STUDY_DIR
    if create:
        root.mkdir(parents=True, exist_ok=True)
    elif not root.is_dir():
        raise UsageError(f"{study_dir}: no study ledger ({STUDY_DIR}/000/ledger); is it a study directory?")
    path = root / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise UsageError(f"{path}: cannot open the study's lock file: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise UsageError(f"{study_dir}: another caisson process is writing this study (a study run or resume, a"
                         f" judge or a backfill); {what} refused: try again once it has ended") from None
    except OSError as exc:
        os.close(fd)
        raise UsageError(f"{path}: the filesystem refused the study's writer lock ({exc.strerror}); {what} needs"
                         " it so that two writers never take one segment number: use a directory on a filesystem"
                         " with flock(2)") from None
    return fd


@contextlib.contextmanager
def study_lock(study_dir: Path, what: str) -> Iterator[None]:
    """`lock_study` (of an existing study) for the duration of a ``with`` block."""
    fd = lock_study(study_dir, what)
    try:
        yield
    finally:
        os.close(fd)


class StudyLedger:
    """The writer of one segment of a study ledger; every event is sealed at once.

    Args:
        study_dir: the study directory (``DIR``).
        key: the operator's signing key.
        run_id: the segment's ledger run id.
        resume: continue a study: a new segment naming the last one's sealed state.

    Raises:
        UsageError: a new study over a directory that already has a study ledger, a
            continuation whose previous segment does not verify (tampered), or another
            process writing the study (`lock_study`, held until `close`).
    """

    def __init__(self, study_dir: Path, key: SigningKey, *, run_id: str, resume: bool = False):
        self.study_dir = Path(study_dir)
        self._lock = lock_study(self.study_dir, "study --resume" if resume else "study run", create=True)
        try:
            self._open(key, run_id=run_id, resume=resume)
        except BaseException:
            os.close(self._lock)
            raise

    def _open(self, key: SigningKey, *, run_id: str, resume: bool) -> None:
        existing = segments(self.study_dir)
        if existing and not resume:
            raise UsageError(f"{self.study_dir}: a study already ran here; pass --resume to continue it,"
                             " or pick a new --out")
        if resume and not existing:
            raise UsageError(f"{self.study_dir}: --resume, but there is no study ledger to continue")
        previous = None
        if existing:
            previous = sealed_state(existing[-1], key.verify_key)
            if previous.status == "tampered":
                raise UsageError(f"{existing[-1]}: the study ledger does not verify ({previous.reason});"
                                 " it cannot be continued")
        seg = self.study_dir / STUDY_DIR / f"{len(existing):03d}"
        seg.mkdir(parents=True)
        self.path = seg
        self.writer = ledger.LedgerWriter(seg / "ledger", run_id=run_id, key=key, blobs=BlobStore(seg / "blobs"),
                                   flush_records=1 << 20, flush_interval_s=float("inf"))
        if previous is not None:
            self.append(StudyResumed(previous_run_id=previous.run_id or "", previous_records=previous.records,
                                     previous_head=previous.head, previous_final=previous.final))

    def put_blob(self, data: bytes, role: str, media_type: str = "application/octet-stream") -> str:
        """Store a blob beside the segment and record it (``blob.stored``); its sha256 hex."""
        return self.writer.put_blob(data, role=role, media_type=media_type, source=SOURCE)

    def append(self, event) -> int:
        """Append one study event and seal it (durable when this returns); its sequence number."""
        seq = self.writer.append(event, source=SOURCE, wall_ns=time.time_ns(), mono_ns=time.monotonic_ns())
        self.writer.flush()
        return seq

    def close(self) -> None:
        """Write the final seal and release the study's writer lock."""
        try:
            self.writer.close()
        finally:
            if self._lock >= 0:
                os.close(self._lock)
                self._lock = -1


def announce(study_dir: Path, key: SigningKey, ledger_dir: Path, kind: type[JudgeRecorded] | type[BackfillRecorded],
             *, run_id: str) -> Path:
    """Announce a closed judge ledger or backfill segment in a new study ledger segment.

    The segment (``DIR/study/NNN/``) holds ``study.resumed`` (the previous segment's last
    seal, as a resumed study's does) and one ``kind`` event naming ``ledger_dir``'s run
    id and final seal, then its own final seal. It is written under a hidden name and
    renamed once closed, so a crash leaves no half segment (nothing is announced then).
    The caller holds `study_lock` (a judge run, a backfill).

    Args:
        study_dir: the study directory.
        key: the operator's signing key (the study ledger's).
        ledger_dir: the closed judge directory or backfill segment, inside ``study_dir``.
        kind: `JudgeRecorded` or `BackfillRecorded`.
        run_id: the new segment's ledger run id.

    Returns:
        The new segment's directory.

    Raises:
        UsageError: the study ledger's last segment is not closed and intact, or
            ``ledger_dir`` is not a closed ledger signed by ``key``.
    """
    study_dir = Path(study_dir)
    existing = segments(study_dir)
    if not existing:
        raise UsageError(f"{study_dir}: no study ledger to announce {ledger_dir} in")
    previous = sealed_state(existing[-1], key.verify_key)
    if previous.status != "ok":
        raise UsageError(f"{existing[-1]}: the study ledger is {previous.status} ({previous.reason or 'not closed'});"
                         f" {ledger_dir} cannot be announced in it")
    state = sealed_state(ledger_dir, key.verify_key)
    if state.status != "ok":
        raise UsageError(f"{ledger_dir}: {state.status} ({state.reason or 'not closed'}); only a closed ledger"
                         " is announced")
    seg = study_dir / STUDY_DIR / f"{len(existing):03d}"
    partial = seg.with_name(f".{seg.name}.partial")  # not a segment until closed and renamed
    if partial.exists():
        shutil.rmtree(partial)  # an announcement that crashed before its segment was closed
    partial.mkdir()
    with ledger.LedgerWriter(partial / "ledger", run_id=run_id, key=key, blobs=BlobStore(partial / "blobs"),
                      flush_records=1 << 20, flush_interval_s=float("inf")) as writer:
        for event in (StudyResumed(previous_run_id=previous.run_id or "", previous_records=previous.records,
                                   previous_head=previous.head, previous_final=previous.final),
                      kind(run_dir=str(Path(ledger_dir).relative_to(study_dir)), run_id=state.run_id or "",
                           ledger_records=state.records, ledger_head=state.head)):
            writer.append(event, source=SOURCE, wall_ns=time.time_ns(), mono_ns=time.monotonic_ns())
    partial.rename(seg)
    return seg


def announced(records: list[Record]) -> dict[str, JudgeRecorded | BackfillRecorded]:
    """The judge runs and backfill segments a study ledger announces: relative directory ->
    its latest announcement (`announce`)."""
    return {r.event.run_dir: r.event for r in records if isinstance(r.event, (JudgeRecorded, BackfillRecorded))}
