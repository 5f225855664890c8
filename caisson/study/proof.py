"""A proof of one cell with its place in its study: the cell's records, and the study
ledger's ``cell.ended`` that binds the cell ledger's seal (`ledger.Proof` with ``study``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from caisson.errors import UsageError
from caisson.study.studyledger import enrolled_keys, read_segments, run_signer
from ledger import PROOF_VERSION, LedgerChecker, LedgerError, Proof, VerifyKey, locate, prove
from ledger.events import CellEnded, StudyPlanned

__all__ = ["prove_cell"]


def prove_cell(study_dir: Path, run_dir: Path, seqs: Sequence[int], trusted: VerifyKey, *,
               blobs: bool = False) -> Proof:
    """Prove records of a study's cell ledger against the seal the study ledger bound.

    Args:
        study_dir: the study directory.
        run_dir: the cell's run directory (any attempt the study ledger ended).
        seqs: the cell ledger's records to prove.
        trusted: the study's operator key; the cell is checked against the host key the
            study enrolled when it names one.
        blobs: include the blobs the proven records name.

    Raises:
        UsageError: no ``cell.ended`` of the study binds that run, or its key is not enrolled.
        LedgerError: a ledger does not verify, or cannot prove those records.
    """
    signer = run_signer(run_dir)
    segments = read_segments(study_dir, trusted)
    enrolled: dict[bytes, VerifyKey] = {}
    for seg in segments:
        for r in seg.records:
            if isinstance(r.event, StudyPlanned):
                enrolled = enrolled_keys(r.event.host_keys)
    key = enrolled.get(signer, trusted) if enrolled and signer is not None else trusted
    run_id = _run_id(run_dir)
    bound = [(seg, r) for seg in segments for r in seg.records
             if isinstance(r.event, CellEnded) and r.event.run_id == run_id and r.event.ledger_records]
    if not bound:
        raise UsageError(f"{study_dir}: no cell.ended of the study ledger binds the run in {run_dir} (run {run_id})")
    seg, record = bound[-1]
    assert isinstance(record.event, CellEnded)
    cell = prove(run_dir, seqs, key, blobs=blobs, upto=record.event.ledger_records)
    study = prove(seg.path, [record.seq], trusted)
    return Proof(proof_version=PROOF_VERSION, run=cell, study=study)


def _run_id(run_dir: Path) -> str:
    """The run id a ledger's header names (unchecked: `prove` verifies the ledger).

    Raises:
        LedgerError: no readable header.
    """
    ledger_path, _ = locate(run_dir)
    checker = LedgerChecker(None, decode=False)
    try:
        with open(ledger_path, "rb") as handle:
            checker.feed(handle.read(1 << 16))
    except OSError as exc:
        raise LedgerError(f"cannot read: {exc.strerror}", path=str(ledger_path)) from None
    next(iter(checker.records()), None)
    if checker.header is None:
        raise LedgerError("no readable header", path=str(ledger_path))
    return checker.header.run_id
