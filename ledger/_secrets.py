"""Keyed fingerprints: how a secret is named in the ledger without being written there."""

from __future__ import annotations

import hashlib
import hmac

__all__ = ["fingerprint_secret"]


def fingerprint_secret(value: str, key: bytes) -> str:
    """A keyed fingerprint of a secret (HMAC-SHA256, first 16 hex), e.g. ``fp:1a2b...``.

    The key is per operator, so a fingerprint tells two runs used the same secret
    without letting anyone test guesses offline. Lone surrogates (undecodable bytes kept
    by ``surrogateescape``) are fingerprinted as the bytes they stand for.
    """
    return "fp:" + hmac.new(key, value.encode("utf-8", "surrogateescape"), hashlib.sha256).hexdigest()[:16]
