"""Where caisson keeps its state: ``$CAISSON_HOME`` (default: the user's data dir).

Layout: ``keys/operator.key`` (Ed25519 private key, mode 0600) and
``keys/operator.pub`` (its public key, trusted by default by `caisson verify`).
"""

from __future__ import annotations

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
    """Load the operator key, creating the pair first when there is none."""
    private, public = operator_key_paths()
    if not private.exists():
        return generate_keypair(private, public)
    return load_signing_key(private)


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
