"""Every text an agent's own tools could read out of a file's bytes (sans-IO).

The containment scan must see what the chamber's tools see, so it decodes a file the ways
they do, and more, never fewer:

- **raw**: the bytes as UTF-8 with replacement characters, NULs and all. GNU grep searches
  a file with NUL bytes too (it prints "binary file matches"; `grep -a` prints the line),
  so one stray NUL never hides a file.
- **byte order marks** (Unicode 15, section 23.8, table 23-1 and the WHATWG Encoding
  Standard's BOM sniffing): UTF-8 (`EF BB BF`), UTF-16LE (`FF FE`), UTF-16BE (`FE FF`),
  UTF-32LE (`FF FE 00 00`, checked before UTF-16LE) and UTF-32BE (`00 00 FE FF`). ripgrep
  transcodes UTF-16 with a BOM by default (its `--encoding auto`, the default; see
  `rg --help`, "-E/--encoding"); the UTF-32 forms are decoded because `rg -E utf-32le`
  and `iconv` read them.
- **UTF-16 and UTF-32 without a BOM** (`rg -E utf-16le`, `iconv -f utf-16be`,
  `strings -e l`): when the bytes hold a NUL, they are also decoded as UTF-16LE and BE at
  both byte alignments, and, when they hold two NULs in a row, as UTF-32LE and BE at all
  four alignments, so text embedded at any offset of a binary is found.
- **compressed files** an agent's tools open without help (`zgrep`, `zcat`, `bzgrep`,
  `xzgrep`, `zstdgrep`, `rg -z`, `zipgrep`, `unzip -p`): gzip (RFC 1952, every member),
  bzip2, xz, zstd (RFC 8878) and zip (every member, stored or deflated, as in PKWARE's
  APPNOTE.TXT), recognised by their magic bytes and opened recursively up to `MAX_DEPTH`
  layers (a gzip in a zip in a gzip). Each decompressed layer is scanned as above.

The work per file is bounded: all layers of one file together may decode at most
`MAX_DECODED_BYTES`; past that `TooBig` is raised and the caller records the file as not
scanned past that size, rather than staying silent.
"""

from __future__ import annotations

import bz2
import io
import lzma
import zipfile
import zlib
from collections.abc import Iterable, Iterator

import zstandard

__all__ = ["MAX_DECODED_BYTES", "MAX_DEPTH", "TooBig", "decoded_texts"]

MAX_DECODED_BYTES = 64 * 2**20
"""Most bytes one file may yield, raw and decompressed layers together (64 MiB)."""

MAX_DEPTH = 4
"""Most nested compressed layers opened below a file (a zip of a gzip is two)."""

_CHUNK = 1 << 20

_BOMS: tuple[tuple[bytes, str], ...] = (  # longest first: FF FE 00 00 is UTF-32LE, not UTF-16LE
    (b"\xff\xfe\x00\x00", "utf-32-le"),
    (b"\x00\x00\xfe\xff", "utf-32-be"),
    (b"\xef\xbb\xbf", "utf-8"),
    (b"\xff\xfe", "utf-16-le"),
    (b"\xfe\xff", "utf-16-be"),
)


class TooBig(Exception):
    """A file yields more than its budget of decoded bytes.

    Attributes:
        limit: the budget that was exceeded, bytes.
    """

    def __init__(self, limit: int):
        super().__init__(f"more than {limit} bytes decoded")
        self.limit = limit


class _Budget:
    """Decoded bytes left for one file."""

    def __init__(self, limit: int):
        self.limit = limit
        self.left = limit

    def take(self, n: int) -> None:
        self.left -= n
        if self.left < 0:
            raise TooBig(self.limit)


def decoded_texts(
    data: bytes,
    *,
    limit: int = MAX_DECODED_BYTES,
    depth: int = MAX_DEPTH,
    needles: Iterable[str] | None = None,
) -> Iterator[tuple[str, str]]:
    """Every text a file's bytes decode to, lazily, layer by layer.

    Args:
        data: the file's bytes (at most `limit` of them).
        limit: most bytes all decompressed layers together may produce.
        depth: most nested compressed layers to open.
        needles: when given, lowercase ASCII strings of which a text must contain one to
            matter: a UTF-16/32 guess (no BOM) is decoded only when one of them, so
            encoded, occurs in the ASCII-lowercased bytes. Decoding every guess of a
            binary costs ~10 ms per 50 KB; this test costs well under 1 ms. A needle
            with a non-ASCII character turns the test off (every guess is decoded).

    Yields:
        `(where, text)`: `where` names the decoding, empty for the raw bytes as UTF-8,
        else steps joined by `, ` (e.g. `utf-16-le`, `utf-16-be@1` for a start at byte
        1, `gzip`, `zip:docs/q.txt, utf-16-le`); `text` is the decoded text.

    Raises:
        TooBig: the decompressed layers exceed `limit` bytes; texts already yielded stand.
    """
    budget = _Budget(limit)
    budget.take(len(data))
    probe = None if needles is None else sorted(set(needles))
    if probe is not None and not all(n.isascii() for n in probe):
        probe = None
    yield from _texts(data, "", budget, depth, probe)


def _join(where: str, step: str) -> str:
    return f"{where}, {step}" if where else step


def _texts(data: bytes, where: str, budget: _Budget, depth: int,
           probe: list[str] | None) -> Iterator[tuple[str, str]]:
    yield where, data.decode("utf-8", errors="replace")
    for bom, codec in _BOMS:
        if data.startswith(bom):
            if codec != "utf-8":  # UTF-8 with a BOM is the raw decoding already
                yield _join(where, codec), data[len(bom):].decode(codec, errors="replace")
            break
    else:
        if b"\0" in data:
            yield from _guesses(data, where, probe)
    if depth > 0:
        yield from _unpacked(data, where, budget, depth, probe)


def _guesses(data: bytes, where: str, probe: list[str] | None) -> Iterator[tuple[str, str]]:
    """UTF-16 and UTF-32 decodings of bytes without a BOM, at every alignment."""
    lowered = data.lower() if probe is not None else b""
    for codec, width in (("utf-16-le", 2), ("utf-16-be", 2), ("utf-32-le", 4), ("utf-32-be", 4)):
        if width == 4 and b"\0\0" not in data:
            continue
        if probe is not None and not any(n.encode(codec) in lowered for n in probe):
            continue
        for shift in range(width):
            step = codec if shift == 0 else f"{codec}@{shift}"
            yield _join(where, step), data[shift:].decode(codec, errors="replace")


def _unpacked(data: bytes, where: str, budget: _Budget, depth: int,
              probe: list[str] | None) -> Iterator[tuple[str, str]]:
    """The texts of a compressed file's contents, when its magic bytes say it is one."""
    if data.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        yield from _zip_members(data, where, budget, depth, probe)
        return
    kind = _stream_kind(data)
    if kind is not None:
        inner = _decompress(kind, data, budget)
        if inner:
            yield from _texts(inner, _join(where, kind), budget, depth - 1, probe)


def _stream_kind(data: bytes) -> str | None:
    """gzip, bzip2, xz or zstd by the stream's magic bytes, else None."""
    if data.startswith(b"\x1f\x8b"):
        return "gzip"
    if data.startswith(b"BZh") and data[3:4] in (b"1", b"2", b"3", b"4", b"5", b"6", b"7", b"8", b"9"):
        return "bzip2"
    if data.startswith(b"\xfd7zXZ\x00"):
        return "xz"
    if data.startswith(b"\x28\xb5\x2f\xfd"):
        return "zstd"
    return None


def _decompressor(kind: str):
    if kind == "gzip":
        return zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    if kind == "bzip2":
        return bz2.BZ2Decompressor()
    if kind == "xz":
        return lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
    return zstandard.ZstdDecompressor().decompressobj()


def _decompress(kind: str, data: bytes, budget: _Budget) -> bytes:
    """Every member (gzip, bzip2, xz) or frame (zstd) of a stream, decompressed, as far as
    it goes: a corrupt or truncated stream gives what came before the damage, as `zcat`
    prints it. The output is charged to the budget as it grows.

    Raises:
        TooBig: the output exceeds the budget.
    """
    out = bytearray()
    rest = data
    while rest.strip(b"\0"):  # zero padding after a member (tar blocks, xz stream padding)
        try:
            rest = _member(kind, _decompressor(kind), rest, out, budget)
        except TooBig:
            raise
        except Exception:  # zlib.error, OSError, LZMAError, ZstdError: damaged from here on
            break
    return bytes(out)


def _member(kind: str, d, data: bytes, out: bytearray, budget: _Budget) -> bytes:
    """Feed one member through a decompressor with bounded output; return what follows it
    (empty when the member is cut short)."""
    if kind == "zstd":  # zstandard's decompressobj has no output bound: feed small chunks
        for i in range(0, len(data), 4096):
            chunk = d.decompress(data[i : i + 4096])
            budget.take(len(chunk))
            out += chunk
            if d.eof:
                return d.unused_data + data[i + 4096 :]
        return b""
    chunk = d.decompress(data, _CHUNK)
    while True:
        budget.take(len(chunk))
        out += chunk
        if d.eof:
            return d.unused_data
        if kind == "gzip":
            if not d.unconsumed_tail:
                return b""
            chunk = d.decompress(d.unconsumed_tail, _CHUNK)
        elif d.needs_input:
            return b""
        else:
            chunk = d.decompress(b"", _CHUNK)


def _zip_members(data: bytes, where: str, budget: _Budget, depth: int,
                 probe: list[str] | None) -> Iterator[tuple[str, str]]:
    """The texts of every readable member of a zip archive."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        infos = archive.infolist()
    except Exception:
        return
    for info in infos:
        if info.is_dir():
            continue
        try:
            with archive.open(info) as member:
                inner = member.read(budget.left + 1)
        except Exception:  # encrypted, an unsupported method, or corrupt: raw is all there is
            continue
        budget.take(len(inner))
        yield from _texts(inner, _join(where, f"zip:{info.filename}"), budget, depth - 1, probe)
