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
from collections.abc import Callable, Iterable
from typing import Final, Protocol
from urllib.parse import quote, unquote

import zstandard

try:  # brotli comes with mitmproxy; without it, br bodies are kept raw
    import brotli
except ImportError:  # pragma: no cover
    brotli = None

__all__ = ["SECRET_HEADERS", "SECRET_QUERY_PARAMS", "BodyDecoder", "Redactor"]

SECRET_HEADERS: Final = frozenset({
    "authorization", "proxy-authorization", "x-api-key", "api-key", "cookie", "set-cookie",
    "x-goog-api-key", "x-auth-token", "x-amz-security-token", "proxy-authenticate-info",
})
"""Header names (lowercase) whose values are fingerprinted."""
SECRET_QUERY_PARAMS: Final = frozenset({
    "key", "api_key", "api-key", "apikey", "token", "access_token", "auth", "secret",
    "password", "client_secret", "sig", "signature",
})
"""Query parameter names (lowercase) whose values are fingerprinted."""
MIN_SCRUB_CHARS: Final = 8
"""Secret values shorter than this are fingerprinted in headers but not searched for in
bodies (a short cookie value like ``1`` would corrupt unrelated bytes)."""


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
        failed: decoding stopped; the decoded output so far is not the body.
        encoded: the body had a content coding other than identity.
    """

    def __init__(self, content_encoding: str | None, *, max_bytes: int):
        codings = [c.strip().lower() for c in (content_encoding or "").split(",")]
        codings = [c for c in codings if c and c != "identity"]
        self.encoded = bool(codings)
        self.max_bytes = max_bytes
        self.problem: str | None = None
        self.failed = False
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
            return self._fail(f"decoded body over {self.max_bytes} bytes")
        return data

    def finish(self) -> None:
        """The raw body ended: note a truncated encoded stream in `problem`."""
        if not self.failed and any(not stage.finished() for stage in self._stages):
            self.problem = "content-encoded body ended before its encoded stream did"


class Redactor:
    """Replace secrets with keyed fingerprints, and remember them to scrub bodies.

    Args:
        fingerprint: value -> keyed fingerprint, e.g. ``"fp:1a2b..."``.

    Attributes:
        replaced: how many secret values were replaced so far (headers, query, bodies).
    """

    def __init__(self, fingerprint: Callable[[str], str]):
        self._fingerprint = fingerprint
        self._known: dict[bytes, bytes] = {}  # secret bytes (raw and percent-encoded) -> fp
        self._order: list[bytes] = []  # longest first, so a secret inside another goes last
        self.replaced = 0

    def _fp(self, value: str) -> str:
        fp = self._fingerprint(value)
        self.replaced += 1
        if len(value) >= MIN_SCRUB_CHARS:
            for form in {value, quote(value, safe=""), unquote(value)}:
                key = form.encode("utf-8", "surrogateescape")
                if key not in self._known:
                    self._known[key] = fp.encode()
                    self._order = sorted(self._known, key=len, reverse=True)
        return fp

    def header(self, name: str, value: str) -> str:
        """The header value to record (unchanged unless ``name`` is a credential)."""
        lname = name.lower()
        if lname not in SECRET_HEADERS or not value:
            return value
        if lname in ("authorization", "proxy-authorization"):
            scheme, sep, cred = value.strip().partition(" ")
            return f"{scheme} {self._fp(cred.strip())}" if sep and cred.strip() else self._fp(value)
        if lname == "cookie":
            return "; ".join(self._pair(p.strip()) for p in value.split(";") if p.strip())
        if lname == "set-cookie":
            first, sep, attrs = value.partition(";")
            return self._pair(first.strip()) + sep + attrs
        return self._fp(value)

    def _pair(self, pair: str) -> str:
        name, sep, val = pair.partition("=")
        return f"{name}={self._fp(val)}" if sep and val else (pair if sep else self._fp(pair))

    def headers(self, headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
        """Redacted ``(name, value)`` pairs, in order."""
        return [(k, self.header(k, v)) for k, v in headers]

    def path(self, path: str) -> str:
        """The request target with credential query parameter values fingerprinted."""
        base, sep, query = path.partition("?")
        if not sep:
            return path
        frag_sep, fragment = "", ""
        if "#" in query:
            query, fragment = query.split("#", 1)
            frag_sep = "#"
        parts = []
        for item in query.split("&"):
            name, eq, val = item.partition("=")
            if eq and val and unquote(name).lower() in SECRET_QUERY_PARAMS:
                item = f"{name}={self._fp(unquote(val))}"
            parts.append(item)
        return base + "?" + "&".join(parts) + frag_sep + fragment

    def scrub(self, data: bytes) -> bytes:
        """``data`` with every remembered secret (>= `MIN_SCRUB_CHARS`) fingerprinted."""
        for secret in self._order:
            if secret in data:
                self.replaced += data.count(secret)
                data = data.replace(secret, self._known[secret])
        return data
