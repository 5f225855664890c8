"""The evidence ledger: append-only, hash-chained, sealed with Ed25519, zstd-framed.

Knows only bytes, hashes, keys and the event vocabulary (`ledger.events`); it imports
neither `collectors` nor `caisson`.
"""

from ledger._blobs import BlobStore
from ledger._errors import (
    BlobMismatchError,
    CaissonError,
    KeyFileError,
    LedgerError,
    NotALedgerError,
    WriterClosedError,
)
from ledger._format import FORMAT_VERSION, Header, Record, Seal
from ledger._sansio import NEED_DATA, NeedData, ParserClosedError, SansIOParser, drain
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
]
