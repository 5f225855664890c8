"""Sans-IO decoder of the AWS event-stream binary framing (Bedrock's
``invoke-with-response-stream``).

Each message ("Event stream encoding", AWS SDK / Amazon Transcribe docs,
https://docs.aws.amazon.com/transcribe/latest/dg/streaming-setting-up.html#streaming-event-stream,
and the Bedrock runtime's ``InvokeModelWithResponseStream`` reference,
https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_InvokeModelWithResponseStream.html)
is, big-endian::

    total length (4) | headers length (4) | prelude CRC32 (4, of the 8 bytes before)
    headers (headers length bytes) | payload | message CRC32 (4, of everything before)

A header is a name (1-byte length, UTF-8), a value type (1 byte) and a value: 0/1 bool
true/false (no bytes), 2 byte, 3 int16, 4 int32, 5 int64, 6 bytes and 7 string (2-byte
length), 8 timestamp (int64 ms), 9 UUID (16 bytes). Bedrock's ``chunk`` events carry the
JSON ``{"bytes": BASE64}`` whose bytes are one Anthropic Messages stream event.

`EventStreamDecoder.feed` takes bytes in any splits; `next_event` returns the next
`EventStreamMessage`, or `NEED_DATA`. A bad CRC or impossible lengths raise
`EventStreamError` naming the byte offset; the stream cannot be resynchronised after it.
"""

from __future__ import annotations

import struct
import uuid
import zlib
from typing import Any, Final

import msgspec

from ledger import NEED_DATA, NeedData, ParserClosedError

__all__ = ["EventStreamDecoder", "EventStreamError", "EventStreamMessage", "NEED_DATA"]

PRELUDE_BYTES: Final = 12
MIN_MESSAGE_BYTES: Final = 16  # prelude + message CRC, no headers, no payload
MAX_MESSAGE_BYTES: Final = 24 << 20  # the AWS SDKs' limit: 16 MiB payload + 128 KiB headers, rounded up


class EventStreamError(ValueError):
    """The bytes are not a valid event stream (bad CRC, lengths, header type).

    Attributes:
        offset: byte offset, in the whole stream, of the message that failed.
    """

    def __init__(self, message: str, offset: int):
        super().__init__(f"event stream at byte {offset}: {message}")
        self.offset = offset


class EventStreamMessage(msgspec.Struct, frozen=True, kw_only=True):
    """One decoded message.

    Attributes:
        headers: header name -> value (bool, int, bytes, str, or a UUID's str).
        payload: the payload bytes.
        index: 0-based ordinal of the message in the stream.
    """

    headers: dict[str, Any]
    payload: bytes
    index: int = 0


_FIXED: Final = {2: ">b", 3: ">h", 4: ">i", 5: ">q", 8: ">q"}


def _headers(data: bytes, offset: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    pos = 0
    try:
        while pos < len(data):
            size = data[pos]
            name = data[pos + 1:pos + 1 + size].decode("utf-8")
            if len(name.encode()) != size:
                raise EventStreamError("header name cut", offset)
            pos += 1 + size
            kind = data[pos]
            pos += 1
            if kind in (0, 1):
                value: Any = kind == 0
            elif kind in _FIXED:
                width = struct.calcsize(_FIXED[kind])
                (value,) = struct.unpack_from(_FIXED[kind], data, pos)
                pos += width
            elif kind in (6, 7):
                (length,) = struct.unpack_from(">H", data, pos)
                raw = data[pos + 2:pos + 2 + length]
                if len(raw) != length:
                    raise EventStreamError("header value cut", offset)
                value = raw if kind == 6 else raw.decode("utf-8")
                pos += 2 + length
            elif kind == 9:
                raw = data[pos:pos + 16]
                if len(raw) != 16:
                    raise EventStreamError("header value cut", offset)
                value = str(uuid.UUID(bytes=raw))
                pos += 16
            else:
                raise EventStreamError(f"unknown header value type {kind}", offset)
            out[name] = value
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise EventStreamError(f"malformed headers: {exc}", offset) from None
    return out


class EventStreamDecoder:
    """Decode AWS event-stream messages from bytes fed in any splits (`ledger.SansIOParser`);
    after `close`, `buffered` counts the bytes of a message the end cut."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._offset = 0  # stream offset of _buf[0]
        self._count = 0
        self._failed: EventStreamError | None = None
        self._closed = False

    def feed(self, data: bytes) -> None:
        """Append received bytes.

        Raises:
            ParserClosedError: after `close`.
        """
        if self._closed:
            raise ParserClosedError("EventStreamDecoder.feed after close")
        self._buf += data

    def close(self) -> None:
        """The stream ended; a cut message stays `buffered`."""
        self._closed = True

    @property
    def buffered(self) -> int:
        """Bytes received and not yet decoded (a partial message at the end of a stream)."""
        return len(self._buf)

    def next_event(self) -> EventStreamMessage | NeedData:
        """The next whole message, or `NEED_DATA`.

        Raises:
            EventStreamError: a bad prelude or message CRC, or impossible lengths; raised
                again on every later call (the framing is lost).
        """
        if self._failed is not None:
            raise self._failed
        buf = self._buf
        if len(buf) < PRELUDE_BYTES:
            return NEED_DATA
        total, headers_len, prelude_crc = struct.unpack_from(">III", buf, 0)
        if zlib.crc32(bytes(buf[:8])) != prelude_crc:
            self._failed = EventStreamError("prelude CRC mismatch", self._offset)
            raise self._failed
        if total < MIN_MESSAGE_BYTES or total > MAX_MESSAGE_BYTES or headers_len > total - MIN_MESSAGE_BYTES:
            self._failed = EventStreamError(f"impossible lengths (total {total}, headers {headers_len})", self._offset)
            raise self._failed
        if len(buf) < total:
            return NEED_DATA
        message = bytes(buf[:total])
        (crc,) = struct.unpack_from(">I", message, total - 4)
        if zlib.crc32(message[:-4]) != crc:
            self._failed = EventStreamError("message CRC mismatch", self._offset)
            raise self._failed
        try:
            headers = _headers(message[PRELUDE_BYTES:PRELUDE_BYTES + headers_len], self._offset)
        except EventStreamError as exc:
            self._failed = exc
            raise
        del buf[:total]
        self._offset += total
        self._count += 1
        return EventStreamMessage(headers=headers, payload=message[PRELUDE_BYTES + headers_len:-4],
                                  index=self._count - 1)


def encode_message(headers: dict[str, str], payload: bytes) -> bytes:
    """One message with string headers (type 7): the inverse of the decoder, for tests and
    the scripted endpoint."""
    head = b"".join(bytes([len(k.encode())]) + k.encode() + b"\x07" + struct.pack(">H", len(v.encode())) + v.encode()
                    for k, v in headers.items())
    total = PRELUDE_BYTES + len(head) + len(payload) + 4
    prelude = struct.pack(">II", total, len(head))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    body = prelude + head + payload
    return body + struct.pack(">I", zlib.crc32(body))
