"""Proofs: some records of a ledger, shown to a third party without the rest of it.

A proof file is ``PROOF_MAGIC`` then msgpack(`Proof`). It holds the records themselves (each
its canonical bytes, the leaf of the ledger's RFC 9162 Merkle tree) with their inclusion
proofs against one signed tree head (a format version 3 `Seal`), optionally the blobs they
name, and optionally a second `LedgerProof`: the record of a study ledger that binds the
first ledger's seal (``cell.ended``), so a cell is shown with its place in a study. It is
checked with nothing but a trusted public key (`verify_proof`).

What a proof shows: that the holder of the key signed a tree head over ``upto`` records of
run ``run_id`` whose leaves include these exact bytes at these positions. What it does not
show: any other record (what came before or after, whether a record like it is absent;
though the inclusion paths hold other records' unsalted leaf hashes, so a holder can test
a guess of a neighbouring record's exact bytes),
the records' absolute times (they are stored as differences from the previous record; the
seal's ``wall_ns`` bounds them: they were signed by then), or that the run was clean.
Fields cannot be withheld: a leaf is a record's whole canonical bytes, so a proof of part
of a record would prove bytes that were never signed; `prove` has no redaction.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import msgspec

from ledger import _chain, _merkle
from ledger._errors import LedgerError
from ledger._format import Envelope, Seal, WireRecord
from ledger._keys import VerifyKey
from ledger._reader import LedgerChecker, _read_ledger, locate
from ledger.events import BlobStored, CellEnded, decode_event

__all__ = [
    "PROOF_MAGIC", "PROOF_VERSION", "LedgerProof", "Proof", "ProofReport", "ProvenBlob", "ProvenRecord",
    "decode_proof", "encode_proof", "is_proof", "prove", "read_proof", "verify_proof",
]

PROOF_MAGIC: Final = b"\x89CSNPRF\n"
PROOF_VERSION: Final = 1
_envelope = msgspec.msgpack.Decoder(Envelope)
_wire = msgspec.msgpack.Decoder(WireRecord)


class ProvenRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One record and its place in the tree."""

    seq: int  # its sequence number: the leaf index
    leaf: bytes  # its canonical msgpack bytes (a `ledger.WireRecord`), the tree's leaf
    path: list[bytes]  # RFC 9162 inclusion proof against the proof's seal, leaf side first, 32 bytes each


class ProvenBlob(msgspec.Struct, frozen=True, kw_only=True):
    """A blob a proven record's ``blob.stored`` event names, with its bytes."""

    sha256: str  # hex, as the event names it
    content: bytes


class LedgerProof(msgspec.Struct, frozen=True, kw_only=True):
    """Records of one ledger proven against one of its signed tree heads."""

    run_id: str  # the ledger's run id (its header's, and the seal's)
    key_fingerprint: str  # the signing key's fingerprint (ledger.fingerprint)
    public_key: bytes  # that key, raw Ed25519 (32 bytes); trust comes from the verifier's key
    format_version: int  # the ledger's format version (3)
    seal: Seal  # the signed tree head: size ``upto``, root ``head``
    records: list[ProvenRecord]
    blobs: list[ProvenBlob] = []


class Proof(msgspec.Struct, frozen=True, kw_only=True):
    """What a proof file holds (after `PROOF_MAGIC`)."""

    proof_version: int  # PROOF_VERSION
    run: LedgerProof
    study: LedgerProof | None = None  # the study ledger record binding ``run.seal`` (a cell.ended)


class ProofReport(msgspec.Struct, kw_only=True):
    """What `verify_proof` found: ``ok``, or ``failed`` with every ``problems`` line."""

    path: str
    status: str = "ok"
    run_id: str = ""
    tree_size: int = 0  # the run's signed tree head: records it covers
    records: list[int] = []  # the seqs proven
    blobs: int = 0
    study_run_id: str | None = None  # the study ledger segment binding the run, when the proof has one
    run_key: str = ""  # the fingerprint of the key that signed the run part
    study_key: str | None = None  # and the study part's, when the proof has one
    problems: list[str] = []

    @property
    def exit_code(self) -> int:
        """0 ok, 1 a check failed."""
        return 0 if self.status == "ok" else 1

    def describe(self) -> str:
        """The lines `caisson verify PROOF` prints."""
        if self.status != "ok":
            return "\n".join([f"PROOF FAILS {self.path}:"] + [f"  {p}" for p in self.problems])
        study = (f"; bound as a cell by study ledger {self.study_run_id} (signed by {self.study_key})"
                 if self.study_run_id else "")
        seqs = ", ".join(map(str, self.records))
        return (f"PROOF OK {self.path}: run {self.run_id}, records {seqs} of a signed tree head of"
                f" {self.tree_size} records, {self.blobs} blobs, signed by {self.run_key}{study}")


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Proof)


def encode_proof(proof: Proof) -> bytes:
    """The bytes of a proof file."""
    return PROOF_MAGIC + _encoder.encode(proof)


def is_proof(path: Path) -> bool:
    """Whether ``path`` is a file that starts with `PROOF_MAGIC`."""
    try:
        with open(path, "rb") as f:
            return f.read(len(PROOF_MAGIC)) == PROOF_MAGIC
    except OSError:
        return False


def decode_proof(data: bytes, path: str = "<proof>") -> Proof:
    """Decode a proof file's bytes.

    Only the bytes `encode_proof` writes are accepted: a field given twice, a field this
    version does not know, or an integer not in its shortest form would let another
    msgpack reader see records other than those checked (msgspec keeps a repeated key's
    last value and skips unknown keys).

    Raises:
        LedgerError: not a proof, a field of the wrong shape (the message names it), or
            not in canonical form.
    """
    if not data.startswith(PROOF_MAGIC):
        raise LedgerError("not a caisson proof (bad magic)", path=path)
    body = data[len(PROOF_MAGIC):]
    try:
        proof = _decoder.decode(body)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise LedgerError(f"proof undecodable: {exc}", path=path) from None
    if _encoder.encode(proof) != body:
        raise LedgerError("proof is not in canonical form (a field repeated or unknown, or an encoding"
                          " caisson prove does not write)", path=path)
    return proof


def read_proof(path: Path) -> Proof:
    """Read a proof file.

    Raises:
        LedgerError: unreadable, not a proof, or malformed (as `decode_proof`).
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise LedgerError(f"cannot read: {exc.strerror}", path=str(path)) from None
    return decode_proof(data, str(path))


def prove(path: Path, seqs: Sequence[int], trusted: VerifyKey, *, blobs: bool = False,
          upto: int | None = None) -> LedgerProof:
    """Prove records of a verified ledger against one of its signed tree heads.

    Args:
        path: a run directory or a ledger file (format version 3).
        seqs: the records to prove, by sequence number.
        trusted: the key the ledger must be signed with (it is verified first).
        blobs: include the blobs the proven records' ``blob.stored`` events name.
        upto: prove against the seal of this size (default: the last valid seal).

    Raises:
        LedgerError: the ledger does not verify up to that seal, is of an older format
            version, has no such seal, or a seq is not covered by it; a blob is missing.
        NotALedgerError: not a ledger.
    """
    ledger_path, store = locate(path)
    wanted = set(seqs)
    checker = LedgerChecker(trusted, decode=False, keep_leaves=True, keep_records=wanted)
    checker.feed(_read_ledger(ledger_path))
    for _ in checker.records():
        pass
    where = str(ledger_path)
    if checker.header is None:
        raise LedgerError("the file ends inside its header: nothing to prove", path=where)
    if checker.header.format_version < 3:
        raise LedgerError(f"format version {checker.header.format_version} seals sign no Merkle tree head:"
                          " its records cannot be proven one by one", path=where)
    seal = next((s for s in reversed(checker.seals) if upto is None or s.upto == upto), None)
    if checker.tampered is not None and (seal is None or checker.tampered[2] < seal.upto):
        reason, offset, seq = checker.tampered
        raise LedgerError(f"does not verify: {reason} (first bad record seq {seq})", path=where, offset=offset)
    if seal is None:
        raise LedgerError("no valid seal" + (f" covers exactly {upto} records" if upto is not None else ""),
                          path=where)
    outside = sorted(s for s in wanted if not 0 <= s < seal.upto)
    if outside:
        raise LedgerError(f"seq {outside[0]} is not covered by the seal over records 0..{seal.upto - 1}", path=where)
    tree = _merkle.Tree(bytes(checker.leaf_hashes[: 32 * seal.upto]))
    records = [ProvenRecord(seq=s, leaf=checker.kept[s], path=tree.inclusion(s, seal.upto)) for s in sorted(wanted)]
    kept: list[ProvenBlob] = []
    if blobs:
        for digest in dict.fromkeys(ref.sha256 for seq, ref in checker.blob_refs if seq in wanted):
            problem, content = store.read_checked(digest, 1 << 62)
            if problem is not None or content is None:
                raise LedgerError(f"blob {digest}: {problem}", path=where)
            kept.append(ProvenBlob(sha256=digest, content=content))
    header = checker.header
    return LedgerProof(run_id=header.run_id, key_fingerprint=header.key_fingerprint, public_key=header.public_key,
                       format_version=header.format_version, seal=seal, records=records, blobs=kept)


def _check_ledger_proof(part: LedgerProof, trusted: Sequence[VerifyKey], what: str) -> list[str]:
    """Every problem of one `LedgerProof` (``what`` names it in the messages)."""
    problems = []
    seal = part.seal
    key = next((k for k in trusted if k.fingerprint == part.key_fingerprint), None)
    if key is None:
        return [f"{what}: key_fingerprint {part.key_fingerprint} is not a trusted key"
                f" ({', '.join(k.fingerprint for k in trusted)})"]
    if part.public_key != key.raw:
        problems.append(f"{what}: public_key is not the trusted key {key.fingerprint}")
    if part.format_version != 3:
        return problems + [f"{what}: format_version {part.format_version}: only version 3 seals sign a tree head"]
    if seal.run_id != part.run_id:
        problems.append(f"{what}: seal.run_id {seal.run_id!r} is not run_id {part.run_id!r}")
    try:
        message = _chain.signed_message(seal, part.format_version)
    except ValueError as exc:
        return problems + [f"{what}: seal: {exc}"]
    if not key.verify(seal.signature, message):
        problems.append(f"{what}: seal.signature does not verify with {key.fingerprint}"
                        " (a seal field or the signature was changed)")
    if not part.records:
        problems.append(f"{what}: records: none")
    seqs = [r.seq for r in part.records]
    if seqs != sorted(set(seqs)):
        problems.append(f"{what}: records: seqs not strictly increasing ({seqs})")
    digests = [b.sha256 for b in part.blobs]
    if len(set(digests)) != len(digests):
        problems.append(f"{what}: blobs: one given twice")
    named: set[str] = set()
    for i, rec in enumerate(part.records):
        try:
            env = _envelope.decode(rec.leaf)
        except (msgspec.DecodeError, RecursionError) as exc:
            problems.append(f"{what}: records[{i}].leaf is not a record: {exc}")
            continue
        if env.seq != rec.seq:
            problems.append(f"{what}: records[{i}]: seq {rec.seq}, but its leaf holds seq {env.seq}")
        if not _merkle.verify_inclusion(rec.seq, seal.upto, _merkle.leaf_hash(rec.leaf), rec.path, seal.head):
            problems.append(f"{what}: records[{i}] (seq {rec.seq}): the inclusion proof does not lead to the signed"
                            f" tree head ({seal.upto} records)")
        event = _event(env)
        if isinstance(event, BlobStored):
            named.add(event.sha256)
    for i, blob in enumerate(part.blobs):
        if hashlib.sha256(blob.content).hexdigest() != blob.sha256:
            problems.append(f"{what}: blobs[{i}] ({blob.sha256}): content does not match its hash")
        elif blob.sha256 not in named:
            problems.append(f"{what}: blobs[{i}] ({blob.sha256}): no proven record names it")
    return problems


def _event(env: Envelope) -> object:
    try:
        return decode_event(env.event)
    except (msgspec.DecodeError, RecursionError):
        return None


def verify_proof(proof: Proof, trusted: Sequence[VerifyKey], path: str = "<proof>",
                 study_trusted: Sequence[VerifyKey] | None = None) -> ProofReport:
    """Check a proof with nothing but trusted keys: signatures, inclusion proofs, blob
    hashes and, for a study proof, that the study record binds the run's seal.

    The study part is checked against its own keys: a cell may be signed by an enrolled host's
    key, and a host trusted for its cells must not be able to sign a study ledger of its own
    that binds them. With one trusted key and no ``study_trusted``, that key signs both parts.

    Args:
        proof: as `read_proof` gives it.
        trusted: the keys the run part may be signed with.
        path: named in the report.
        study_trusted: the keys the study part may be signed with; required (a problem
            otherwise) when the proof has a study part and ``trusted`` holds several keys.
    """
    report = ProofReport(path=path, run_id=proof.run.run_id, tree_size=proof.run.seal.upto,
                         records=[r.seq for r in proof.run.records], blobs=len(proof.run.blobs),
                         run_key=proof.run.key_fingerprint)
    problems = []
    if proof.proof_version != PROOF_VERSION:
        problems.append(f"proof_version {proof.proof_version}: this caisson reads version {PROOF_VERSION}")
    problems += _check_ledger_proof(proof.run, trusted, "run")
    if proof.study is not None:
        report.study_run_id = proof.study.run_id
        report.study_key = proof.study.key_fingerprint
        if study_trusted is None and len(trusted) > 1:
            problems.append(f"study: {len(trusted)} keys are trusted and none is named for the study part"
                            " (the key of the study ledger: verify --study-key)")
        else:
            problems += _check_ledger_proof(proof.study, trusted if study_trusted is None else study_trusted, "study")
        problems += _check_binding(proof.study, proof.run)
    report.problems = problems
    report.status = "failed" if problems else "ok"
    return report


def _check_binding(study: LedgerProof, run: LedgerProof) -> list[str]:
    """The study part must prove one ``cell.ended`` that binds the run's seal."""
    seal = run.seal
    for rec in study.records:
        try:
            event = _wire.decode(rec.leaf).event
        except (msgspec.DecodeError, RecursionError):
            continue
        if isinstance(event, CellEnded) and event.run_id == run.run_id:
            bound = (event.ledger_records, event.ledger_head, event.seal_signature or seal.signature.hex())
            if bound != (seal.upto, seal.head.hex(), seal.signature.hex()):
                return [f"study: the cell.ended at seq {rec.seq} binds {event.ledger_records} records at head"
                        f" {event.ledger_head[:16]}, not the run's seal ({seal.upto} records, head {seal.head.hex()[:16]})"]
            return []
    return [f"study: no proven cell.ended names run {run.run_id}"]
