"""Errors raised by the ledger package.

`CaissonError` is the root of every error caisson raises on purpose. It lives here,
in the lowest package, so that `collectors` and `caisson` can derive from it without
the ledger importing them (dependency direction: ledger <- collectors <- caisson).
"""

from __future__ import annotations

__all__ = [
    "BlobMismatchError", "CaissonError", "KeyFileError", "LedgerError", "NotALedgerError",
    "WriterClosedError",
]


class CaissonError(Exception):
    """Root of all errors caisson raises deliberately; catch this at the CLI boundary."""


class LedgerError(CaissonError):
    """A ledger file cannot be read as a ledger (bad input, not our misuse).

    Attributes:
        path: the file being read, or None when reading from memory.
        offset: byte offset in the file where the problem was found, or None.
    """

    def __init__(self, message: str, *, path: str | None = None, offset: int | None = None):
        super().__init__(message)
        self.path = path
        self.offset = offset

    def __str__(self) -> str:
        where = []
        if self.path is not None:
            where.append(self.path)
        if self.offset is not None:
            where.append(f"byte {self.offset}")
        prefix = ":".join(where)
        return f"{prefix}: {self.args[0]}" if prefix else str(self.args[0])


class NotALedgerError(LedgerError):
    """The bytes do not start with the ledger magic: this is not a caisson ledger."""


class BlobMismatchError(LedgerError):
    """A stored blob's bytes do not hash to the sha256 it is stored (and named) under:
    altered or corrupted after it was written (bad input, found by `BlobStore.get`).

    Attributes:
        path: the blob's file.
        sha256: the hex digest the blob is named by (what the ledger bound).
        actual: the hex digest of the bytes found.
    """

    def __init__(self, *, path: str, sha256: str, actual: str):
        super().__init__(f"blob {sha256}: its bytes hash to {actual}, not to its name (altered or corrupted"
                         " after it was stored; `caisson verify` reports it too)", path=path)
        self.sha256 = sha256
        self.actual = actual


class KeyFileError(CaissonError):
    """A key file is missing, unreadable, of the wrong kind, or has unsafe permissions.

    Attributes:
        path: the key file.
    """

    def __init__(self, message: str, *, path: str):
        super().__init__(f"{path}: {message}")
        self.path = path


class WriterClosedError(CaissonError):
    """Raised on our own misuse: appending to a ledger writer after `close()`."""
