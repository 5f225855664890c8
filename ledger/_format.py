"""Byte layout of a ledger file, format versions 1 to 3, and a sans-IO frame parser.

A ledger file is a header followed by frames::

    header   MAGIC (8) | u32 length | u32 crc32(payload) | u32 crc32(previous 16 bytes)
             | payload = msgpack(Header)
    frame    u8 type | u64 first_seq | u32 count | u32 length | u32 crc32(payload)
             | u32 crc32(previous 21 bytes) | payload

All integers are big-endian. A ``records`` frame's payload is exactly one zstd frame
(RFC 8878) that declares its content size, with nothing before or after it, holding the
msgpack array of the frame's records (``count`` of them, at least one); a ``seal`` frame's
payload is msgpack(Seal), uncompressed, and its ``count`` is 0. The header checksum of
each frame protects its length, so a damaged length is told apart from a file that simply
ends early: as in SQLite's WAL and Kafka's log segments, a frame whose declared bytes run
past the end of the file is a *torn* tail (a crash), while a complete frame that fails its
checksum is damage.

Version 2 binds raw bytes: each seal carries ``size``, the byte offset of its own frame,
and ``file_hash``, the SHA-256 of the file's bytes 0..size-1, and signs them with every
other seal field, so any change to a sealed prefix fails the next seal. Its header and seal
payloads must be exactly the bytes this module encodes for them. In version 3 a seal's
``head`` is the root of the RFC 9162 Merkle tree whose leaves are records 0..upto-1 (see
`ledger._merkle`) in place of the linear chain's head: with ``upto`` as the tree size,
each seal is a signed tree head, and one record can be proven by itself. Version 1 seals sign only (run id, upto, chain head, final): they bind the
records, not the bytes that hold them.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from typing import Final

import msgspec
import zstandard

from ledger._errors import LedgerError, NotALedgerError
from ledger._sansio import NEED_DATA, NeedData, ParserClosedError
from ledger.events import Event

__all__ = [
    "BLOBS_DIR", "Damage", "Envelope", "FORMAT_VERSION", "FRAME_HEADER_SIZE", "FRAME_RECORDS", "FRAME_SEAL", "Frame",
    "FrameParser", "HASH_ALG", "HEADER_PREFIX_SIZE", "Header", "LEDGER_FILE", "MAGIC", "MAX_BODY", "MAX_PAYLOAD",
    "READABLE_VERSIONS", "Record", "Seal", "WireRecord", "ZSTD_MAGIC", "decompress_records", "encode_frame",
    "encode_header", "envelope_list_decoder", "header_decoder", "msgpack_array_header", "record_encoder",
    "seal_decoder", "wire_list_decoder",
]

FORMAT_VERSION: Final = 3  # what the writer writes
READABLE_VERSIONS: Final = (1, 2, 3)  # what the reader reads
MAGIC: Final = b"\x89CSNLDG\n"
HASH_ALG: Final = "sha256"
LEDGER_FILE: Final = "ledger"  # a run directory's ledger file
BLOBS_DIR: Final = "blobs"  # and its blob store, beside it

FRAME_RECORDS: Final = 1
FRAME_SEAL: Final = 2

_HEADER_PREFIX = struct.Struct(">8sII")
_HEADER_PREFIX_CRC = struct.Struct(">I")
HEADER_PREFIX_SIZE: Final = _HEADER_PREFIX.size + _HEADER_PREFIX_CRC.size  # 20 bytes
_FRAME_HEAD = struct.Struct(">BQIII")
_FRAME_HEAD_CRC = struct.Struct(">I")
FRAME_HEADER_SIZE: Final = _FRAME_HEAD.size + _FRAME_HEAD_CRC.size  # 25 bytes
MAX_PAYLOAD: Final = 1 << 30
MAX_BODY: Final = 1 << 30  # largest decompressed records frame, bytes
ZSTD_MAGIC: Final = b"\x28\xb5\x2f\xfd"  # RFC 8878 frame magic, little-endian 0xFD2FB528


class Header(msgspec.Struct, frozen=True, kw_only=True):
    """The ledger header; its bytes seed the hash chain, so seals cover it."""

    format_version: int
    run_id: str
    hash_alg: str  # "sha256"
    key_fingerprint: str  # fingerprint of the signing key (see ledger.keys)
    public_key: bytes  # raw Ed25519 public key, 32 bytes (informational: trust is external)
    schema_version: int  # ledger.events.SCHEMA_VERSION at write time
    created_ns: int  # wall ns since the Unix epoch
    compression: str = "zstd"


class Record(msgspec.Struct, frozen=True, kw_only=True):
    """One ledger record as readers see it, with absolute times."""

    seq: int  # 0, 1, 2, ... without gaps
    wall_ns: int  # wall clock, ns since the Unix epoch, as the witness observed it
    mono_ns: int  # time.monotonic_ns() of the recording host at the same instant
    source: str  # the witness that produced the event: strace, proxy, recorder, ...
    event: Event


class WireRecord(msgspec.Struct, frozen=True, array_like=True):
    """A record as stored: the msgpack array ``[seq, wall_delta_ns, mono_delta_ns, source, event]``.

    Times are stored as differences from the previous record (the first record's from
    0), as time-series stores do (Gorilla, Prometheus TSDB): absolute ns timestamps
    are 9 msgpack bytes of mostly noise, differences are small and repetitive. Readers
    restore absolute times by a running sum; the chain hashes these canonical bytes,
    so the differences are as tamper-evident as the events.
    """

    seq: int
    wall_delta_ns: int  # wall_ns minus the previous record's wall_ns (may be negative)
    mono_delta_ns: int  # mono_ns minus the previous record's mono_ns
    source: str
    event: Event


class Seal(msgspec.Struct, frozen=True, kw_only=True):
    """An Ed25519 signature over every other field (versions 2 and 3; see `ledger._chain`).

    In version 3 it is a *signed tree head*: ``upto`` is the RFC 9162 tree size and
    ``head`` its root hash. Version 1 seals have no ``size`` and ``file_hash`` (None here)
    and sign only (run id, upto, head, final).
    """

    run_id: str
    upto: int  # number of records covered: seq 0 .. upto-1
    head: bytes  # 32 bytes: chain hash after record upto-1 (versions 1, 2); Merkle root over 0..upto-1 (3)
    final: bool  # True only for the seal written by a clean close
    wall_ns: int  # when it was signed, ns since the Unix epoch
    size: int | None = None  # bytes of the file before this seal's frame (version 2)
    file_hash: bytes | None = None  # sha256 of those bytes, 32 bytes (version 2)
    signature: bytes  # 64 bytes


class Envelope(msgspec.Struct, frozen=True, array_like=True):
    """A stored record whose event is left undecoded (verify does not need it)."""

    seq: int
    wall_delta_ns: int
    mono_delta_ns: int
    source: str
    event: msgspec.Raw


record_encoder = msgspec.msgpack.Encoder()
wire_list_decoder = msgspec.msgpack.Decoder(list[WireRecord])
envelope_list_decoder = msgspec.msgpack.Decoder(list[Envelope])
seal_decoder = msgspec.msgpack.Decoder(Seal)
header_decoder = msgspec.msgpack.Decoder(Header)


def encode_header(header: Header) -> tuple[bytes, bytes]:
    """Encode a header. Returns (file bytes, payload bytes that seed the chain)."""
    payload = record_encoder.encode(header)
    prefix = _HEADER_PREFIX.pack(MAGIC, len(payload), zlib.crc32(payload))
    return prefix + _HEADER_PREFIX_CRC.pack(zlib.crc32(prefix)) + payload, payload


def encode_frame(kind: int, first_seq: int, count: int, payload: bytes) -> bytes:
    """Frame ``payload`` (already compressed for records frames) with its checked header."""
    head = _FRAME_HEAD.pack(kind, first_seq, count, len(payload), zlib.crc32(payload))
    return head + _FRAME_HEAD_CRC.pack(zlib.crc32(head)) + payload


def msgpack_array_header(n: int) -> bytes:
    """The msgpack array prefix for ``n`` elements (msgpack spec: fixarray/array16/array32)."""
    if n < 16:
        return bytes((0x90 | n,))
    if n < 1 << 16:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def decompress_records(dctx: zstandard.ZstdDecompressor, payload: bytes) -> bytes:
    """The body of a records frame, when its payload is exactly one zstd frame.

    Refuses what would let two byte strings stand for one body, or let another zstd
    reader decode other bytes than ours: a skippable frame, a second frame, any byte
    after the frame, a frame that does not declare its content size or that names a
    dictionary.

    Args:
        dctx: a reusable decompressor.
        payload: the frame's payload bytes.

    Returns:
        The decompressed body, at most `MAX_BODY` bytes.

    Raises:
        ValueError: the payload breaks one of those rules or does not decompress.
    """
    if payload[:4] != ZSTD_MAGIC:
        raise ValueError(f"payload does not start with a zstd frame (starts with {payload[:4].hex()})")
    try:
        params = zstandard.get_frame_parameters(payload)
        if params.content_size >= zstandard.CONTENTSIZE_ERROR:
            raise ValueError("zstd frame does not declare its content size")
        if params.content_size > MAX_BODY:
            raise ValueError(f"zstd frame declares {params.content_size} bytes, over {MAX_BODY}")
        if params.dict_id:
            raise ValueError(f"zstd frame names dictionary {params.dict_id}")
        # allow_extra_data=False: a skippable frame, a second frame or junk after it is refused
        return dctx.decompress(payload, max_output_size=MAX_BODY, allow_extra_data=False)
    except zstandard.ZstdError as exc:
        raise ValueError(f"zstd: {exc}") from None


class Frame(msgspec.Struct, frozen=True):
    """A complete, checksum-valid frame as the parser yields it."""

    kind: int
    first_seq: int
    count: int
    offset: int  # byte offset of the frame header in the file
    payload: bytes
    prefix_sha256: bytes = b""  # seal frames: sha256 of the file's bytes 0..offset-1


class Damage(msgspec.Struct, frozen=True):
    """Complete bytes that fail their checks: tampering or corruption, never a crash."""

    offset: int
    reason: str
    first_seq: int | None = None  # from the frame header, when that header is intact


class FrameParser:
    """Sans-IO parser of a ledger byte stream (`ledger.SansIOParser`): `feed` bytes, then
    `next_event`.

    `next_event()` returns the `Header` first, then one `Frame` per complete frame, a
    `Damage` when complete bytes fail their checks (after which the parser stops), or
    `NEED_DATA`. After `close`, `pending` tells how many bytes of an incomplete (torn)
    item remain. It hashes the bytes it parses (SHA-256, as it goes): each seal `Frame`
    carries the hash of the file before it.

    Raises:
        NotALedgerError: from `next_event`, the stream does not start with the ledger magic.
        LedgerError: from `next_event`, a format version this reader does not read.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._base = 0  # file offset of self._buf[0]
        self._pos = 0  # parse position within self._buf
        self.header: Header | None = None
        self.header_payload: bytes | None = None
        self.damaged = False
        self._closed = False
        self._sha256 = hashlib.sha256()  # of the bytes before self.offset

    def feed(self, data: bytes) -> None:
        """Append bytes read from the file.

        Raises:
            ParserClosedError: after `close`.
        """
        if self._closed:
            raise ParserClosedError("FrameParser.feed after close")
        self._buf += data

    def close(self) -> None:
        """The file ends here: what is not a complete item stays `pending` (a torn tail)."""
        self._closed = True

    @property
    def offset(self) -> int:
        """File offset of the next unparsed byte."""
        return self._base + self._pos

    @property
    def pending(self) -> int:
        """Bytes received but not yet forming a complete item."""
        return len(self._buf) - self._pos

    def _compact(self) -> None:
        if self._pos > 1 << 20:
            del self._buf[: self._pos]
            self._base += self._pos
            self._pos = 0

    def next_event(self) -> Header | Frame | Damage | NeedData:
        """Parse the next item; see the class docstring."""
        if self.damaged:
            return NEED_DATA
        if self.header is None:
            return self._next_header()
        buf, pos = self._buf, self._pos
        if len(buf) - pos < FRAME_HEADER_SIZE:
            return NEED_DATA
        (head_crc,) = _FRAME_HEAD_CRC.unpack_from(buf, pos + _FRAME_HEAD.size)
        if zlib.crc32(memoryview(buf)[pos : pos + _FRAME_HEAD.size]) != head_crc:
            return self._damage(self.offset, "frame header checksum mismatch")
        kind, first_seq, count, length, crc = _FRAME_HEAD.unpack_from(buf, pos)
        if kind not in (FRAME_RECORDS, FRAME_SEAL) or length > MAX_PAYLOAD:
            return self._damage(self.offset, f"unknown frame type {kind}", first_seq)
        start = pos + FRAME_HEADER_SIZE
        if len(buf) - start < length:
            return NEED_DATA
        payload = bytes(buf[start : start + length])
        if zlib.crc32(payload) != crc:
            return self._damage(self.offset, "frame checksum mismatch", first_seq)
        prefix = self._sha256.copy().digest() if kind == FRAME_SEAL else b""
        frame = Frame(kind, first_seq, count, self.offset, payload, prefix)
        self._sha256.update(memoryview(buf)[pos : start + length])
        self._pos = start + length
        self._compact()
        return frame

    def _damage(self, offset: int, reason: str, first_seq: int | None = None) -> Damage:
        self.damaged = True
        return Damage(offset, reason, first_seq)

    def _next_header(self) -> Header | Damage | NeedData:
        buf = self._buf
        have = bytes(buf[: len(MAGIC)])
        if have != MAGIC[: len(have)]:
            # A file that is mostly our magic is a damaged ledger, not a foreign file.
            same = sum(a == b for a, b in zip(have, MAGIC))
            if len(have) == len(MAGIC) and same >= len(MAGIC) - 2:
                return self._damage(0, "header magic damaged", 0)
            raise NotALedgerError("not a caisson ledger (bad magic)", offset=0)
        if len(buf) < HEADER_PREFIX_SIZE:
            return NEED_DATA
        (prefix_crc,) = _HEADER_PREFIX_CRC.unpack_from(buf, _HEADER_PREFIX.size)
        if zlib.crc32(memoryview(buf)[: _HEADER_PREFIX.size]) != prefix_crc:
            return self._damage(0, "header prefix checksum mismatch", 0)
        _, length, crc = _HEADER_PREFIX.unpack_from(buf, 0)
        if length > 1 << 20:
            return self._damage(0, "header length implausible", 0)
        end = HEADER_PREFIX_SIZE + length
        if len(buf) < end:
            return NEED_DATA
        payload = bytes(buf[HEADER_PREFIX_SIZE:end])
        if zlib.crc32(payload) != crc:
            return self._damage(0, "header checksum mismatch", 0)
        try:
            header = header_decoder.decode(payload)
        except (msgspec.DecodeError, RecursionError) as exc:  # msgspec recurses into unknown keys
            return self._damage(0, f"header undecodable: {exc}", 0)
        if header.format_version not in READABLE_VERSIONS:
            raise LedgerError(
                f"unsupported ledger format version {header.format_version}"
                f" (this caisson reads versions {', '.join(map(str, READABLE_VERSIONS))})",
                offset=0,
            )
        if header.format_version >= 2 and record_encoder.encode(header) != payload:
            return self._damage(0, "header is not in canonical form (bytes our writer would not write)", 0)
        self.header = header
        self.header_payload = payload
        self._sha256.update(memoryview(buf)[:end])
        self._pos = end
        return header
