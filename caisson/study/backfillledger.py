"""The backfill ledger of a study, read and verified (`caisson.study.backfill` writes it).

Its segments live under ``DIR/backfill/NNN/``; `read_backfill` gives the latest
``token.backfilled`` per run, `verify_backfill` (run by `caisson verify DIR`) checks every
segment against the trusted key, the chain of segments, that each record names a run the
study ledger binds at the same head, and that each blob is a session file that run collected.
"""

from __future__ import annotations

from pathlib import Path

from caisson.study.studyledger import numbered_dirs, run_trust, sealed_records, sealed_state
from ledger import LedgerError, VerifyKey, read_records, verify_ledger
from ledger.events import AgentSessionFile, BackfillStarted, TokenBackfilled

__all__ = ["BACKFILL_DIR", "backfill_segments", "read_backfill", "verify_backfill"]

BACKFILL_DIR = "backfill"


def backfill_segments(study_dir: Path) -> list[Path]:
    """The backfill ledger's segment directories under ``DIR/backfill/``, in order."""
    return numbered_dirs(Path(study_dir) / BACKFILL_DIR)


def read_backfill(study_dir: Path, trusted: VerifyKey) -> dict[str, TokenBackfilled]:
    """The latest ``token.backfilled`` per run id over every segment (later segments win).

    Raises:
        LedgerError: a segment cannot be read. Call `verify_backfill` first: this reads
            up to each segment's last valid seal and checks nothing else.
    """
    latest: dict[str, TokenBackfilled] = {}
    for seg in backfill_segments(study_dir):
        for record in sealed_records(seg, trusted):
            if isinstance(record.event, TokenBackfilled):
                latest[record.event.run_id] = record.event
    return latest


def verify_backfill(study_dir: Path, trusted: VerifyKey, bound: dict[str, tuple[str, str]],
                    enrolled: dict[bytes, VerifyKey] | None = None) -> list[str]:
    """Check the backfill ledger of a study directory; its problems (empty: ok or none).

    Args:
        study_dir: the study directory.
        trusted: the key every segment must verify against.
        bound: run directory (relative) -> (run id, chain head) as the study ledger binds
            it (counting cell attempts and baselines).
        enrolled: the host keys ``study.planned`` enrolled (raw public key -> key): each
            run is read with the one its ledger names; empty or None: with ``trusted``.

    Returns:
        One line per problem: a segment that does not verify or is not closed, a
        ``backfill.started`` that does not name the previous segment's last seal, a
        record naming a run the study does not bind at that head, a blob that run did
        not collect as a session file.
    """
    problems: list[str] = []
    prev = None
    collected: dict[str, set[str]] = {}
    for seg in backfill_segments(study_dir):
        try:
            full = verify_ledger(seg, trusted)
            state = sealed_state(seg, trusted)
        except LedgerError as exc:
            problems.append(f"{seg}: {exc}")
            return problems
        if full.status != "ok" or not state.final:
            problems.append(f"{seg}: backfill ledger {full.status}: {full.reason or 'not closed'}")
            return problems
        records = sealed_records(seg, trusted)
        first = records[0].event if records else None
        expected = (prev.run_id, prev.records, prev.head) if prev else ("", 0, "")
        if not isinstance(first, BackfillStarted):
            problems.append(f"{seg}: a backfill segment must start with backfill.started")
        elif (first.previous_run_id, first.previous_records, first.previous_head) != expected:
            problems.append(f"{seg}: backfill.started names {first.previous_run_id or 'no segment'} at"
                            f" {first.previous_records} records, not the previous segment's last seal")
        for r in records:
            e = r.event
            if not isinstance(e, TokenBackfilled):
                continue
            if bound.get(e.run_dir) != (e.run_id, e.ledger_head):
                problems.append(f"{seg}: seq {r.seq}: {e.target} {e.cell_id or e.arm}: run {e.run_dir} is not bound"
                                f" by the study ledger as {e.run_id} at head {e.ledger_head[:16]}")
                continue
            if e.run_dir not in collected:
                run_dir = study_dir / e.run_dir
                collected[e.run_dir] = {x.event.blob_sha256 for x in
                                        read_records(run_dir, run_trust(run_dir, trusted, enrolled or {}))
                                        if isinstance(x.event, AgentSessionFile) and x.event.blob_sha256}
            missing = [b for b in e.blobs if b not in collected[e.run_dir]]
            if missing or not e.blobs:
                problems.append(f"{seg}: seq {r.seq}: blob {missing[0] if missing else '(none)'} is not a session"
                                f" file run {e.run_id} collected")
        prev = state
    return problems
