"""Bodies and secrets of proxied exchanges: incremental content decoding and redaction.

`BodyDecoder` undoes ``Content-Encoding`` (gzip, x-gzip, deflate, br, zstd, identity,
stacked in any order) chunk by chunk, so a streamed body is decoded as it passes.
Transfer encodings (HTTP/1 chunking) are already removed by mitmproxy. An unknown
coding, corrupt data or a decoded size past the cap stops decoding: the caller then keeps
the raw bytes and says why (`BodyDecoder.problem`).

`Redactor` replaces secrets with keyed fingerprints: the values of credential headers
(Authorization and Proxy-Authorization keep their scheme word, cookies keep their names
and Set-Cookie its attributes) and of credential query parameters. It remembers every
secret it replaced, so `Redactor.scrub` can also replace them wherever they appear in a
body (raw or percent-encoded): a secret value seen in a header never reaches a blob.
Secrets that only ever appear in bodies (e.g. an OAuth token response) are not known and
are stored as sent.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Protocol

import zstandard

try:  # brotli comes with mitmproxy; without it, br bodies are kept raw
    import brotli
except ImportError:  # pragma: no cover
    brotli = None

__all__ = ["BodyDecoder"]



class _Stage(Protocol):
    def feed(self, data: bytes) -> bytes: ...
    def finished(self) -> bool: ...


class _Zlib:
    """gzip (possibly multi-member) or deflate (zlib-wrapped, or raw as some servers send)."""

    def __init__(self, gzip: bool):
        self._gzip = gzip
        self._wbits = 16 + zlib.MAX_WBITS if gzip else zlib.MAX_WBITS
        self._obj = zlib.decompressobj(self._wbits)
        self._started = False

    def feed(self, data: bytes) -> bytes:
        out = bytearray()
        while data:
            try:
                out += self._obj.decompress(data)
            except zlib.error:
                if self._gzip or self._started:
                    raise
                self._wbits = -zlib.MAX_WBITS  # raw deflate, no zlib header
                self._obj = zlib.decompressobj(self._wbits)
                out += self._obj.decompress(data)
            self._started = True
            data = self._obj.unused_data if self._obj.eof else b""
            if data and self._gzip:
                self._obj = zlib.decompressobj(self._wbits)  # next gzip member
            elif data:
                raise zlib.error("trailing data after deflate stream")
        return bytes(out)

    def finished(self) -> bool:
        return self._obj.eof


class _Brotli:
    def __init__(self) -> None:
        self._obj = brotli.Decompressor()

    def feed(self, data: bytes) -> bytes:
        return self._obj.process(data)

    def finished(self) -> bool:
        return self._obj.is_finished()


class _Zstd:
    def __init__(self) -> None:
        self._obj = zstandard.ZstdDecompressor().decompressobj()

    def feed(self, data: bytes) -> bytes:
        return self._obj.decompress(data)

    def finished(self) -> bool:
        return self._obj.eof


_STAGES: dict[str, Callable[[], _Stage]] = {
    "gzip": lambda: _Zlib(gzip=True), "x-gzip": lambda: _Zlib(gzip=True),
    "deflate": lambda: _Zlib(gzip=False), "zstd": _Zstd,
}
if brotli is not None:
    _STAGES["br"] = _Brotli


class BodyDecoder:
    """Undo a ``Content-Encoding`` incrementally.

    Args:
        content_encoding: the header's value, or None; codings apply in listed order,
            so they are undone in reverse.
        max_bytes: cap on the decoded size, bytes (a decompression bomb stops here).

    Attributes:
        problem: why decoding stopped or is incomplete, or None. Once `failed`, `feed`
            returns ``b""`` and the caller should keep the raw bytes.
        failed: decoding stopped; unless `over_cap`, the decoded output so far is not the body.
        over_cap: decoding stopped at ``max_bytes``: the output so far is the body's start
            (the last `feed` returned the bytes up to the cap).
        encoded: the body had a content coding other than identity.
    """

    def __init__(self, content_encoding: str | None, *, max_bytes: int):
        codings = [c.strip().lower() for c in (content_encoding or "").split(",")]
        codings = [c for c in codings if c and c != "identity"]
        self.encoded = bool(codings)
        self.max_bytes = max_bytes
        self.problem: str | None = None
        self.failed = False
        self.over_cap = False
        self._size = 0
        unknown = [c for c in codings if c not in _STAGES]
        self._stages: list[_Stage] = []
        if unknown:
            self._fail(f"unsupported content-encoding {', '.join(unknown)}")
        else:
            self._stages = [_STAGES[c]() for c in reversed(codings)]

    def _fail(self, problem: str) -> bytes:
        self.failed, self.problem, self._stages = True, problem, []
        return b""

    def feed(self, data: bytes) -> bytes:
        """Decode the next raw chunk; returns the decoded bytes (possibly empty)."""
        if self.failed:
            return b""
        try:
            for stage in self._stages:
                data = stage.feed(data)
        except (zlib.error, zstandard.ZstdError, Exception) as exc:  # brotli.error is Exception
            return self._fail(f"content-encoding could not be decoded: {str(exc)[:200]}")
        self._size += len(data)
        if self._size > self.max_bytes:
            keep = len(data) - (self._size - self.max_bytes)
            self._fail(f"decoded body over {self.max_bytes} bytes")
            self.over_cap = True
            return data[:keep]
        return data

    def finish(self) -> None:
        """The raw body ended: note a truncated encoded stream in `problem`."""
        if not self.failed and any(not stage.finished() for stage in self._stages):
            self.problem = "content-encoded body ended before its encoded stream did"


