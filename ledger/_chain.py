"""The hash chain and the seal message.

Chain (format versions 1 and 2): ``h[-1] = sha256(GENESIS_TAG || header payload)`` and
``h[i] = sha256(h[i-1] || canonical msgpack bytes of record i)``.
A seal signs, with Ed25519 (RFC 8032), in format version 2::

    SEAL_TAG_V2 || run_id || 0x00 || upto (u64 BE) || head (32) || final (1 byte)
                || wall_ns (u64 BE) || size (u64 BE) || file_hash (32)

where ``size`` is the byte offset of the seal's frame and ``file_hash`` the SHA-256 of the
file's bytes before it; in version 3, the same fields after ``SEAL_TAG_V3``, where ``head``
is the RFC 9162 Merkle root over the ``upto`` records (`ledger._merkle`: a signed tree
head) and no linear chain is kept; in version 1, ``SEAL_TAG || run_id || 0x00 || upto || head ||
final``. Either way a seal cannot be replayed onto another run or another position; only a
version 2 seal binds the file's raw bytes and its own time.

`chain_frame` extends the chain over a whole frame. It runs in native code
(``ledger/_chainc.c``, OpenSSL's SHA-256) when that extension was built, else in the
pure-Python `chain_frame_py`; both give the same bytes (a property test pins this), except
that the pure-Python one refuses nesting deeper than the interpreter's recursion limit.
"""

from __future__ import annotations

import hashlib
import sys

import msgspec

__all__ = [
    "GENESIS_TAG", "MAX_DEPTH_CAP", "NATIVE", "SEAL_TAG", "SEAL_TAG_V2", "SEAL_TAG_V3", "chain_frame_py", "genesis",
    "seal_message", "seal_message_v2", "seal_message_v3", "signed_message", "within_depth",
]

GENESIS_TAG = b"caisson-ledger/1 genesis\x00"
SEAL_TAG = b"caisson-ledger/1 seal\x00"
SEAL_TAG_V2 = b"caisson-ledger/2 seal\x00"
SEAL_TAG_V3 = b"caisson-ledger/3 seal\x00"


def genesis(header_payload: bytes) -> bytes:
    """The chain value before the first record: 32 bytes bound to the header."""
    return hashlib.sha256(GENESIS_TAG + header_payload).digest()


def seal_message(run_id: str, upto: int, head: bytes, final: bool) -> bytes:
    """The exact bytes a format version 1 seal signs (see the module docstring)."""
    return b"".join(
        (SEAL_TAG, run_id.encode(), b"\x00", upto.to_bytes(8, "big"), head, b"\x01" if final else b"\x00")
    )


def seal_message_v2(run_id: str, upto: int, head: bytes, final: bool, wall_ns: int, size: int,
                    file_hash: bytes) -> bytes:
    """The exact bytes a format version 2 seal signs (see the module docstring).

    Args:
        run_id: the run the seal is bound to.
        upto: records covered, seq 0 .. upto-1.
        head: the 32-byte chain head after record upto-1.
        final: whether this seal closes the ledger.
        wall_ns: when it was signed, ns since the Unix epoch.
        size: bytes of the file before the seal's frame.
        file_hash: SHA-256 of those bytes, 32 bytes.

    Raises:
        ValueError: ``head`` or ``file_hash`` is not 32 bytes, or an integer is outside
            0 .. 2**64-1 (a reader meets these in tampered seals).
    """
    return _seal_fields(SEAL_TAG_V2, run_id, upto, head, final, wall_ns, size, file_hash)


def _seal_fields(tag: bytes, run_id: str, upto: int, head: bytes, final: bool, wall_ns: int, size: int,
                 file_hash: bytes) -> bytes:
    if len(head) != 32 or len(file_hash) != 32:
        raise ValueError("head and file_hash must be 32 bytes")
    try:
        numbers = upto.to_bytes(8, "big"), wall_ns.to_bytes(8, "big"), size.to_bytes(8, "big")
    except OverflowError:
        raise ValueError("upto, wall_ns and size must be in 0 .. 2**64-1") from None
    return b"".join((tag, run_id.encode(), b"\x00", numbers[0], head, b"\x01" if final else b"\x00",
                     numbers[1], numbers[2], file_hash))


def seal_message_v3(run_id: str, upto: int, root: bytes, final: bool, wall_ns: int, size: int,
                    file_hash: bytes) -> bytes:
    """The exact bytes a format version 3 seal signs: `seal_message_v2`'s fields under
    `SEAL_TAG_V3`, ``root`` (the seal's ``head``) being the RFC 9162 root of the tree of
    ``upto`` records.

    Raises:
        ValueError: as `seal_message_v2`.
    """
    return _seal_fields(SEAL_TAG_V3, run_id, upto, root, final, wall_ns, size, file_hash)


def signed_message(seal, format_version: int) -> bytes:
    """What ``seal`` (a `ledger.Seal`) signs in a ledger of ``format_version``.

    Raises:
        ValueError: a field the version signs is missing or malformed (a tampered seal).
    """
    if format_version == 1:
        return seal_message(seal.run_id, seal.upto, seal.head, seal.final)
    if seal.size is None or seal.file_hash is None:
        raise ValueError(f"a format version {format_version} seal needs size and file_hash")
    sign = seal_message_v2 if format_version == 2 else seal_message_v3
    return sign(seal.run_id, seal.upto, seal.head, seal.final, seal.wall_ns, seal.size, seal.file_hash)


_raw_list = msgspec.msgpack.Decoder(list[msgspec.Raw]).decode
MAX_DEPTH_CAP = 255  # the native walk's fixed stack


def _nesting(raw: bytes) -> int:
    """How deep arrays and maps nest in one msgpack object (a scalar is 0)."""
    try:
        value = msgspec.msgpack.decode(raw)
    except RecursionError:
        return sys.maxsize
    deepest = 0
    stack = [(value, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            deepest = max(deepest, depth)
            stack.extend((item, depth + 1) for pair in value.items() for item in pair)
        elif isinstance(value, (list, tuple)):
            deepest = max(deepest, depth)
            stack.extend((item, depth + 1) for item in value)
    return deepest


def chain_frame_py(head: bytes, body: bytes, max_depth: int = 0) -> tuple[bytes, int]:
    """Extend the chain over a frame body; returns (new head, number of records).

    Args:
        head: the 32-byte chain value before the frame's first record.
        body: the frame's canonical bytes, one msgpack array of records.
        max_depth: when not 0 (1 to 255), refuse a record whose arrays and maps nest
            deeper (the record array itself is depth 1).

    Raises:
        ValueError: ``body`` is not a well-formed msgpack array, a record nests deeper
            than ``max_depth``, or ``head`` is not 32 bytes.
    """
    if not 0 <= max_depth <= MAX_DEPTH_CAP:
        raise ValueError(f"max_depth must be 0 (no limit) to {MAX_DEPTH_CAP}")
    if len(head) != 32:
        raise ValueError("chain head must be 32 bytes")
    try:
        raws = _raw_list(body)
    except msgspec.DecodeError as exc:
        raise ValueError(str(exc)) from None
    except RecursionError:  # msgspec's walk recurses; the native one is iterative, any depth
        raise ValueError("msgpack nested deeper than this Python's recursion limit") from None
    if max_depth and any(_nesting(raw) > max_depth for raw in raws):
        raise ValueError("msgpack nested deeper than max_depth")
    sha256 = hashlib.sha256
    for raw in raws:
        head = sha256(head + raw).digest()
    return head, len(raws)


def within_depth(record: bytes, max_depth: int) -> bool:
    """Whether one record's arrays and maps nest at most ``max_depth`` deep (1 to 255),
    as `chain_frame` counts them (the record array is 1)."""
    try:
        chain_frame(bytes(32), b"\x91" + record, max_depth)  # as a one-record frame
    except ValueError:
        return False
    return True


try:
    from ledger._chainc import chain_frame
except ImportError:  # built without a C compiler or OpenSSL headers: same bytes, slower
    chain_frame = chain_frame_py
NATIVE = chain_frame is not chain_frame_py
