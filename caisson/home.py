"""Where caisson keeps its state: ``$CAISSON_HOME`` (default: the user's data dir).

Layout: ``keys/operator.key`` (Ed25519 private key, mode 0600) and
``keys/operator.pub`` (its public key, trusted by default by `caisson verify`).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import platformdirs

from ledger import SigningKey, derive_fingerprint_key, VerifyKey, generate_keypair, load_signing_key, load_verify_key

__all__ = ["caisson_home", "operator_key_paths", "operator_key", "trusted_key", "ensure_operator_key", "fingerprint_key"]


def caisson_home() -> Path:
    """``$CAISSON_HOME`` if set, else the platform's user data dir (``~/.local/share/caisson``)."""
    env = os.environ.get("CAISSON_HOME")
    return Path(env) if env else Path(platformdirs.user_data_dir("caisson"))


def operator_key_paths() -> tuple[Path, Path]:
    """(private key path, public key path) of the operator key pair."""
    keys = caisson_home() / "keys"
    return keys / "operator.key", keys / "operator.pub"


def operator_key() -> SigningKey:
    """Load the operator's signing key.

    Raises:
        KeyFileError: no key yet (run `caisson keygen`), or unsafe permissions.
    """
    private, _ = operator_key_paths()
    return load_signing_key(private)


def ensure_operator_key() -> SigningKey:
    """Load the operator key, creating the pair first when there is none.

    Creation holds an exclusive lock (``keys/.lock``, flock): recorders started at once on
    a fresh home (a study's parallel cells, pytest's workers) get the one pair the first of
    them wrote, never each a key of its own, nor a private key from one and a public key
    from another (tests/caisson/test_home.py).

    Raises:
        KeyFileError: the key cannot be read, or has unsafe permissions, or only its public
            half exists (never overwritten).
    """
    private, public = operator_key_paths()
    if private.exists():
        return load_signing_key(private)
    private.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(private.parent / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if private.exists():  # another process made it while this one waited
            return load_signing_key(private)
        return generate_keypair(private, public)
    finally:
        os.close(fd)  # releases the lock


def trusted_key(path: str | os.PathLike[str] | None) -> VerifyKey:
    """The key to verify against: ``path`` when given, else the operator's public key.

    Raises:
        KeyFileError: the key file is missing or not an Ed25519 key.
    """
    if path is not None:
        return load_verify_key(Path(path))
    _, public = operator_key_paths()
    return load_verify_key(public)


def fingerprint_key(key: SigningKey) -> bytes:
    """The operator's key for secret fingerprints, derived from the signing key (32 bytes)."""
    return derive_fingerprint_key(key.to_pem())
