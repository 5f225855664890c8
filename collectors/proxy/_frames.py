"""Frames from the proxy addon: typed structs and a sans-IO decoder of the byte stream.

The wire format is documented in `collectors.proxy.addon`: a u32 big-endian length, then
a msgpack map tagged by ``t``. `FrameDecoder` turns bytes into typed frames; a frame
whose map does not match its struct is reported (`FrameError`, ``fatal=False``) and the
stream goes on; a length past `MAX_FRAME_BYTES` means the stream lost sync and nothing
after it can be trusted (``fatal=True``).
"""

from __future__ import annotations

import struct
from typing import Final, Union

import msgspec

from ledger import NEED_DATA, CaissonError, NeedData, ParserClosedError
from ledger.events import TunnelVia

__all__ = [
    "MAX_FRAME_BYTES", "NEED_DATA", "Chunk", "ConnError", "Connected", "Denied", "Dropped", "Frame",
    "FrameDecoder", "FrameError", "Hello", "ProxyError", "Request", "RequestBody",
    "ResponseEnd", "ResponseStart", "Tunnel", "TunnelEnd", "encode_frame",
]

MAX_FRAME_BYTES: Final = 64 << 20
"""Largest frame accepted, bytes (a request body travels in one frame)."""

_LEN = struct.Struct(">I")
Headers = list[tuple[str, str]]


class FrameError(CaissonError, ValueError):
    """Raised by `FrameDecoder.next_event` on bytes that are not a valid frame.

    Attributes:
        fatal: the stream lost sync (oversized length); the decoder is closed.
        offset: stream offset of the bad frame's length prefix, bytes.
    """

    def __init__(self, message: str, *, fatal: bool, offset: int):
        super().__init__(f"{message} (at byte {offset})")
        self.fatal = fatal
        self.offset = offset


class _Frame(msgspec.Struct, frozen=True, kw_only=True, tag_field="t"):
    """Base of every frame; ``t`` is the tag."""


class Hello(_Frame, tag="hello", frozen=True, kw_only=True):
    """The proxy listens: where, and with which policy."""

    pid: int
    mitmproxy_version: str = ""
    listen: list[tuple[str, int]] = []
    confdir: str = ""
    allow: list[str] = []
    upstream: dict[str, str] = {}
    tunnels: str = ""  # "policed" | "open"
    rawtcp: bool | None = None  # mitmproxy's option as the addon saw it
    egress: str = ""  # path of the collectors/egress.py the addon loaded


class Connected(_Frame, tag="connected", frozen=True, kw_only=True):
    """A client connection was accepted (before CONNECT, TLS or a request)."""

    id: str  # mitmproxy's id of the client connection: `Request.conn` of its requests
    ts_ns: int
    mono_ns: int
    client: str | None = None  # "ip:port" of the chamber's end


class Request(_Frame, tag="request", frozen=True, kw_only=True):
    """Request headers arrived (before the policy check)."""

    id: str
    ts_ns: int  # wall ns since the Unix epoch
    mono_ns: int  # CLOCK_MONOTONIC ns
    method: str
    scheme: str
    host: str
    port: int
    path: str
    http_version: str = ""
    headers: Headers = []
    client: str | None = None  # "ip:port" of the chamber's end
    conn: str | None = None  # mitmproxy's id of the client connection (a uuid): one per connection


class RequestBody(_Frame, tag="request_body", frozen=True, kw_only=True):
    """The whole request body (content-encoded as sent); the request goes upstream."""

    id: str
    ts_ns: int
    mono_ns: int
    body: bytes = b""
    upstream: str | None = None  # "ip:port" when the host was rewritten


class Denied(_Frame, tag="denied", frozen=True, kw_only=True):
    """The policy refused the request; the client got ``status``. Terminal."""

    id: str
    ts_ns: int
    mono_ns: int
    status: int = 403
    policy: str = ""
    reason: str = ""


class ResponseStart(_Frame, tag="response_start", frozen=True, kw_only=True):
    """Response headers arrived."""

    id: str
    ts_ns: int
    mono_ns: int
    status: int
    reason: str = ""
    http_version: str = ""
    headers: Headers = []


class Chunk(_Frame, tag="chunk", frozen=True, kw_only=True):
    """Response body bytes as they passed (transfer-decoded, still content-encoded)."""

    id: str
    data: bytes


class ResponseEnd(_Frame, tag="response_end", frozen=True, kw_only=True):
    """The response ended normally. Terminal."""

    id: str
    ts_ns: int
    mono_ns: int


class ProxyError(_Frame, tag="error", frozen=True, kw_only=True):
    """The exchange failed (cut stream, upstream unreachable, bad request). Terminal."""

    id: str
    ts_ns: int
    mono_ns: int
    message: str = ""


class Tunnel(_Frame, tag="tunnel", frozen=True, kw_only=True):
    """A CONNECT or an upgrade was asked of the proxy. Terminal when ``denied``."""

    id: str
    ts_ns: int
    mono_ns: int
    via: TunnelVia
    host: str
    port: int
    client: str | None = None
    protocol: str = ""  # an upgrade's protocol
    denied: str | None = None


class TunnelEnd(_Frame, tag="tunnel_end", frozen=True, kw_only=True):
    """A tunnel closed: what it carried. Terminal."""

    id: str
    ts_ns: int
    mono_ns: int
    protocol: str = ""
    exchanges: int = 0
    client_bytes: int = 0
    server_bytes: int = 0
    denied: str | None = None
    error: str | None = None


class ConnError(_Frame, tag="conn_error", frozen=True, kw_only=True):
    """A client connection failed TLS or closed without one HTTP request."""

    id: str
    ts_ns: int
    mono_ns: int
    client: str | None = None
    sni: str | None = None
    message: str = ""


class Dropped(_Frame, tag="dropped", frozen=True, kw_only=True):
    """The addon lost ``count`` frames (socket gone or queue full)."""

    ts_ns: int
    count: int


Frame = Union[Hello, Connected, Request, RequestBody, Denied, ResponseStart, Chunk, ResponseEnd,
              ProxyError, Tunnel, TunnelEnd, ConnError, Dropped]
"""Every frame the addon sends."""

_decoder = msgspec.msgpack.Decoder(Frame)
_encoder = msgspec.msgpack.Encoder()


def encode_frame(frame: Frame) -> bytes:
    """One frame on the wire: length prefix and msgpack map (for tests and tools)."""
    body = _encoder.encode(frame)
    return _LEN.pack(len(body)) + body


class FrameDecoder:
    """Incremental decoder (`ledger.SansIOParser`): `feed` bytes, then `next_event` until
    `NEED_DATA`; `close` at the end of the stream, after which `buffered` counts the bytes
    of a frame it cut.

    Attributes:
        frames: frames decoded so far.
        bad_frames: frames skipped because their map did not match a frame struct.
        bytes_fed: total bytes given to `feed`.
    """

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._offset = 0  # stream offset of _buf[0]
        self._broken: FrameError | None = None
        self._closed = False
        self.frames = 0
        self.bad_frames = 0
        self.bytes_fed = 0

    def feed(self, data: bytes) -> None:
        """Append received bytes (ignored once the stream lost sync).

        Raises:
            ParserClosedError: after `close`.
        """
        if self._closed:
            raise ParserClosedError("FrameDecoder.feed after close")
        self.bytes_fed += len(data)
        if self._broken is None:
            self._buf += data

    def close(self) -> None:
        """The stream ended; an incomplete frame stays `buffered`."""
        self._closed = True

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame waiting for more data."""
        return len(self._buf)

    def next_event(self) -> Frame | NeedData:
        """The next complete frame, or `NEED_DATA`.

        Raises:
            FrameError: ``fatal=False`` for a well-framed but invalid map (it is skipped;
                call again); ``fatal=True`` for an oversized length (raised again on
                every later call: the stream cannot be resynchronised).
        """
        if self._broken is not None:
            raise self._broken
        if len(self._buf) < 4:
            return NEED_DATA
        (size,) = _LEN.unpack_from(self._buf)
        if size > self.max_frame_bytes:
            self._broken = FrameError(f"frame of {size} bytes exceeds the {self.max_frame_bytes}-byte limit",
                                      fatal=True, offset=self._offset)
            self._buf.clear()
            raise self._broken
        if len(self._buf) < 4 + size:
            return NEED_DATA
        body = bytes(self._buf[4:4 + size])
        del self._buf[:4 + size]
        offset, self._offset = self._offset, self._offset + 4 + size
        try:
            frame = _decoder.decode(body)
        except (msgspec.DecodeError, RecursionError) as exc:
            self.bad_frames += 1
            raise FrameError(f"invalid frame: {str(exc)[:200]}", fatal=False, offset=offset) from None
        self.frames += 1
        return frame
