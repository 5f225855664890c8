"""The evidence ledger: append-only, hash-chained, sealed with Ed25519, zstd-framed.

Knows only bytes, hashes, keys and the event vocabulary (`ledger.events`); it imports
neither `collectors` nor `caisson`.
"""

from typing import TYPE_CHECKING

from ledger.lazy import lazy_face

from ledger._errors import (
    BlobMismatchError,
    CaissonError,
    KeyFileError,
    LedgerError,
    NotALedgerError,
    WriterClosedError,
)
from ledger._sansio import NEED_DATA, NeedData, ParserClosedError, SansIOParser, drain

if TYPE_CHECKING:
    from ledger._blobs import BlobStore
    from ledger._format import BLOBS_DIR, FORMAT_VERSION, LEDGER_FILE, Header, Record, Seal
    from ledger._keys import (
        SigningKey,
        VerifyKey,
        fingerprint,
        generate_keypair,
        load_signing_key,
        load_verify_key,
    )
    from ledger._secrets import (
        CREDENTIAL_PATTERNS,
        SECRET_HEADERS,
        SECRET_QUERY_PARAMS,
        Redactor,
        derive_fingerprint_key,
        fingerprint_secret,
        is_credential,
        keyed_fingerprint,
        looks_secret,
        redact_argv,
        redact_env,
        redact_exec,
    )
    from ledger._reader import (
        LedgerChecker,
        VerifiedStream,
        VerifyReport,
        follow_records,
        locate,
        read_records,
        verify_and_read,
        verify_ledger,
    )
    from ledger._heads import HeadCheck, HeldHead, encode_head, load_heads
    from ledger._proof import (
        PROOF_MAGIC,
        PROOF_VERSION,
        LedgerProof,
        Proof,
        ProofReport,
        ProvenBlob,
        ProvenRecord,
        decode_proof,
        encode_proof,
        is_proof,
        prove,
        read_proof,
        verify_proof,
    )
    from ledger._writer import LedgerWriter, Submission, run_writer

__all__ = [
    "NEED_DATA",
    "NeedData",
    "ParserClosedError",
    "SansIOParser",
    "drain",
    "CREDENTIAL_PATTERNS",
    "SECRET_HEADERS",
    "SECRET_QUERY_PARAMS",
    "Redactor",
    "derive_fingerprint_key",
    "is_credential",
    "keyed_fingerprint",
    "looks_secret",
    "redact_argv",
    "redact_env",
    "redact_exec",
    "BLOBS_DIR",
    "BlobStore",
    "BlobMismatchError",
    "CaissonError",
    "FORMAT_VERSION",
    "Header",
    "KeyFileError",
    "LEDGER_FILE",
    "LedgerChecker",
    "LedgerError",
    "LedgerWriter",
    "NotALedgerError",
    "Record",
    "Seal",
    "SigningKey",
    "Submission",
    "VerifyKey",
    "VerifyReport",
    "WriterClosedError",
    "fingerprint",
    "fingerprint_secret",
    "follow_records",
    "generate_keypair",
    "load_signing_key",
    "load_verify_key",
    "locate",
    "read_records",
    "run_writer",
    "verify_and_read",
    "VerifiedStream",
    "verify_ledger",
    "HeadCheck",
    "HeldHead",
    "encode_head",
    "load_heads",
    "PROOF_MAGIC",
    "PROOF_VERSION",
    "LedgerProof",
    "Proof",
    "ProofReport",
    "ProvenBlob",
    "ProvenRecord",
    "decode_proof",
    "encode_proof",
    "is_proof",
    "prove",
    "read_proof",
    "verify_proof",
]

# The errors and the parser contract are imported with the package; the rest on first access
# (PEP 562), so a command that names a ledger error, or none, does not pay for msgspec, zstandard,
# cryptography or trio (docs/benchmarks.md, "Import time of each command").
__getattr__, __dir__ = lazy_face(__name__, {
    "_blobs": ("BlobStore",),
    "_format": ("BLOBS_DIR", "FORMAT_VERSION", "Header", "LEDGER_FILE", "Record", "Seal"),
    "_keys": ("SigningKey", "VerifyKey", "fingerprint", "generate_keypair", "load_signing_key", "load_verify_key"),
    "_secrets": ("CREDENTIAL_PATTERNS", "SECRET_HEADERS", "SECRET_QUERY_PARAMS", "Redactor", "derive_fingerprint_key",
                 "fingerprint_secret", "is_credential", "keyed_fingerprint", "looks_secret", "redact_argv",
                 "redact_env", "redact_exec"),
    "_reader": ("LedgerChecker", "VerifiedStream", "VerifyReport", "follow_records", "locate", "read_records",
                "verify_and_read", "verify_ledger"),
    "_writer": ("LedgerWriter", "Submission", "run_writer"),
    "_heads": ("HeadCheck", "HeldHead", "encode_head", "load_heads"),
    "_proof": ("PROOF_MAGIC", "PROOF_VERSION", "LedgerProof", "Proof", "ProofReport", "ProvenBlob", "ProvenRecord",
               "decode_proof", "encode_proof", "is_proof", "prove", "read_proof", "verify_proof"),
}, globals())
