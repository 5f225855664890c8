"""Ed25519 operator keys: generate, store, load, fingerprint.

Key files are PEM: the private key as unencrypted PKCS#8 (file mode 0600), the public
key as SubjectPublicKeyInfo. A fingerprint is ``"ed25519:" + first 16 bytes of
sha256(raw public key)`` in hex, short enough to read aloud, long enough to bind.
"""

from __future__ import annotations

import hashlib
import stat
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ledger._errors import KeyFileError
from ledger._files import write_whole

__all__ = [
    "SigningKey",
    "VerifyKey",
    "generate_keypair",
    "load_signing_key",
    "load_verify_key",
    "fingerprint",
]


def fingerprint(raw_public_key: bytes) -> str:
    """Fingerprint of a raw 32-byte Ed25519 public key, e.g. ``ed25519:3f2a...`` (32 hex)."""
    return "ed25519:" + hashlib.sha256(raw_public_key).hexdigest()[:32]


class VerifyKey:
    """A trusted Ed25519 public key."""

    def __init__(self, key: Ed25519PublicKey):
        self._key = key
        self.raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        self.fingerprint = fingerprint(self.raw)

    @classmethod
    def from_raw(cls, raw: bytes) -> "VerifyKey":
        """Build from 32 raw bytes. Raises ValueError on a wrong length."""
        return cls(Ed25519PublicKey.from_public_bytes(raw))

    def verify(self, signature: bytes, message: bytes) -> bool:
        """True when ``signature`` is this key's Ed25519 signature of ``message``."""
        try:
            self._key.verify(signature, message)
        except (InvalidSignature, ValueError):
            return False
        return True

    def to_pem(self) -> bytes:
        """The key as a PEM SubjectPublicKeyInfo block."""
        return self._key.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )


class SigningKey:
    """An operator's Ed25519 private key; signs seals (about 30-40 us a signature)."""

    def __init__(self, key: Ed25519PrivateKey):
        self._key = key
        self.verify_key = VerifyKey(key.public_key())
        self.fingerprint = self.verify_key.fingerprint

    @classmethod
    def generate(cls) -> "SigningKey":
        """A fresh random key."""
        return cls(Ed25519PrivateKey.generate())

    def sign(self, message: bytes) -> bytes:
        """The 64-byte Ed25519 signature of ``message``."""
        return self._key.sign(message)

    def to_pem(self) -> bytes:
        """The key as unencrypted PKCS#8 PEM."""
        return self._key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )


def generate_keypair(private_path: Path, public_path: Path, *, overwrite: bool = False) -> SigningKey:
    """Create a key pair; the private key file is created with mode 0600.

    Each file is written whole under a temporary name beside it and renamed into place,
    the public key first: a reader never sees a part of a key, and a reader of the private
    key finds its public key already there. Two processes creating pairs at once must be
    serialized by the caller (`caisson.home.ensure_operator_key` locks).

    Raises:
        KeyFileError: a key file exists and ``overwrite`` is False.
    """
    for p in (private_path, public_path):
        if p.exists() and not overwrite:
            raise KeyFileError("exists; refusing to overwrite an operator key", path=str(p))
    key = SigningKey.generate()
    private_path.parent.mkdir(parents=True, exist_ok=True)
    public_path.parent.mkdir(parents=True, exist_ok=True)
    write_whole(public_path, key.verify_key.to_pem(), 0o644)
    write_whole(private_path, key.to_pem(), 0o600)
    return key


def load_signing_key(path: Path) -> SigningKey:
    """Load a PEM Ed25519 private key.

    Raises:
        KeyFileError: missing, unreadable, not Ed25519, or readable by group/others.
    """
    try:
        mode = path.stat().st_mode
        data = path.read_bytes()
    except OSError as exc:
        raise KeyFileError(f"cannot read private key ({exc.strerror}); run `caisson keygen`", path=str(path)) from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise KeyFileError("private key is accessible to group/others; chmod 600 it", path=str(path))
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise KeyFileError(f"not a PEM private key: {exc}", path=str(path)) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError("not an Ed25519 private key", path=str(path))
    return SigningKey(key)


def load_verify_key(path: Path) -> VerifyKey:
    """Load a PEM Ed25519 public key (or the public half of a private key file).

    Raises:
        KeyFileError: missing, unreadable or not an Ed25519 key.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise KeyFileError(f"cannot read public key ({exc.strerror})", path=str(path)) from None
    try:
        if b"PRIVATE KEY" in data:
            priv = serialization.load_pem_private_key(data, password=None)
            key = priv.public_key()
        else:
            key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise KeyFileError(f"not a PEM public key: {exc}", path=str(path)) from None
    if not isinstance(key, Ed25519PublicKey):
        raise KeyFileError("not an Ed25519 public key", path=str(path))
    return VerifyKey(key)
