"""The hash chain and the seal message.

Chain: ``h[-1] = sha256(GENESIS_TAG || header payload)`` and
``h[i] = sha256(h[i-1] || canonical msgpack bytes of record i)``. A seal signs
``SEAL_TAG || run_id || 0x00 || upto (u64 BE) || head || final (1 byte)`` with Ed25519
(RFC 8032), so a seal cannot be replayed onto another run or another position.
"""

from __future__ import annotations

import hashlib

GENESIS_TAG = b"caisson-ledger/1 genesis\x00"
SEAL_TAG = b"caisson-ledger/1 seal\x00"


def genesis(header_payload: bytes) -> bytes:
    """The chain value before the first record: 32 bytes bound to the header."""
    return hashlib.sha256(GENESIS_TAG + header_payload).digest()


def seal_message(run_id: str, upto: int, head: bytes, final: bool) -> bytes:
    """The exact bytes a seal signs (see the module docstring)."""
    return b"".join(
        (SEAL_TAG, run_id.encode(), b"\x00", upto.to_bytes(8, "big"), head, b"\x01" if final else b"\x00")
    )
