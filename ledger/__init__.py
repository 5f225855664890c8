"""The evidence ledger: append-only, hash-chained, sealed with Ed25519, zstd-framed.

Knows only bytes, hashes, keys and the event vocabulary (`ledger.events`); it imports
neither `collectors` nor `caisson`.
"""

import importlib
from typing import TYPE_CHECKING, Any

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
    from ledger._format import FORMAT_VERSION, Header, Record, Seal
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
    from ledger._writer import BLOBS_DIR, LEDGER_FILE, LedgerWriter, Submission, run_writer

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
# cryptography or trio (docs/benchmarks.md, "Import time of each command"). The same mechanism
# as `caisson._lazy.lazy_face`, which the ledger cannot import (ledger <- collectors <- caisson).
_LAZY = {
    "_blobs": ("BlobStore",),
    "_format": ("FORMAT_VERSION", "Header", "Record", "Seal"),
    "_keys": ("SigningKey", "VerifyKey", "fingerprint", "generate_keypair", "load_signing_key", "load_verify_key"),
    "_secrets": ("CREDENTIAL_PATTERNS", "SECRET_HEADERS", "SECRET_QUERY_PARAMS", "Redactor", "derive_fingerprint_key",
                 "fingerprint_secret", "is_credential", "keyed_fingerprint", "looks_secret", "redact_argv",
                 "redact_env", "redact_exec"),
    "_reader": ("LedgerChecker", "VerifiedStream", "VerifyReport", "follow_records", "locate", "read_records",
                "verify_and_read", "verify_ledger"),
    "_writer": ("BLOBS_DIR", "LEDGER_FILE", "LedgerWriter", "Submission", "run_writer"),
    "_heads": ("HeadCheck", "HeldHead", "encode_head", "load_heads"),
    "_proof": ("PROOF_MAGIC", "PROOF_VERSION", "LedgerProof", "Proof", "ProofReport", "ProvenBlob", "ProvenRecord",
               "decode_proof", "encode_proof", "is_proof", "prove", "read_proof", "verify_proof"),
}
_MODULE_OF = {name: module for module, names in _LAZY.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_MODULE_OF})
