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
- **zlib and raw deflate streams** (`python3 -c 'zlib.decompress(...)'`, `pigz -dz`,
  `openssl zlib -d`): a zlib stream (RFC 1950) is recognised by its two header bytes
  (compression method 8, a window of at most 32 KiB, the check bits, no preset
  dictionary). A raw deflate stream (RFC 1951) has no header: every layer that is no other
  kind is inflated on trial, and kept only when it inflates without error to the end of
  its final block and nothing but zero bytes follows (no file of a 5,207-file sample of
  real trees does; a trial that fails costs microseconds: input is fed 64 KiB at a time).
- **base64, base64url and hex runs** in any decoded text (coreutils' `base64 -d` and
  `basenc --base64url -d` / `--base16 -d`, `python3 -m base64`, `xxd -r -p`): a run of at
  least 12 characters of one alphabet, padded or not, or a block of whole lines of them
  (`base64` wraps at 76 columns, PEM at 64, `xxd -p` at 60), is decoded, as hex too when
  it is an even number of hex digits, 16 or more. Hex is here because the chamber's
  coreutils undo it as they undo base64, and it costs one more check of runs already found.
  Identifiers are runs of these alphabets too, so a lone run is decoded only when it may
  encode text: it is padded, or each of its first three four-character groups starts
  with `A`-`Z` or `a`-`f` (a byte below 0x80: every run of ASCII or UTF-16 text does), or
  it holds a digit (or `+`, `/`), as nearly every run of other UTF-8 text does; this skips
  89% of the runs of botocore's 935 service models. What a run decodes to is kept when it
  reads as text (UTF-8, or UTF-16 of ASCII, at most a quarter of it unreadable:
  replacement characters and control characters but tab, line feed and carriage return),
  is an archive, starts with a BOM, or is a compressed stream (a zlib or raw deflate one
  only when it inflates whole); anything else is dropped without being charged to the
  budget. A kept decoding is named by its kind and the line of its run (`base64 (line
  3)`) and is one layer.

The work per file is bounded: all layers of one file together may decode at most
`MAX_DECODED_BYTES`; past that `TooBig` is raised and the caller records the file as not
scanned past that size, rather than staying silent.
"""

from __future__ import annotations

import binascii
import bz2
import io
import lzma
import re
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
_TRIAL_INPUT = 1 << 16

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
    yield from _with_runs(where, data.decode("utf-8", errors="replace"), budget, depth, probe)
    for bom, codec in _BOMS:
        if data.startswith(bom):
            if codec != "utf-8":  # UTF-8 with a BOM is the raw decoding already
                text = data[len(bom):].decode(codec, errors="replace")
                yield from _with_runs(_join(where, codec), text, budget, depth, probe)
            break
    else:
        if b"\0" in data:
            for at, text in _guesses(data, where, probe):
                yield from _with_runs(at, text, budget, depth, probe)
    if depth > 0:
        yield from _unpacked(data, where, budget, depth, probe)


def _with_runs(where: str, text: str, budget: _Budget, depth: int,
               probe: list[str] | None) -> Iterator[tuple[str, str]]:
    """A text, then the texts of its encoded runs."""
    yield where, text
    if depth > 0:
        yield from _encoded_runs(text, where, budget, depth, probe)


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
    else:
        kind, inner = "deflate", _inflated(data, budget)
        if inner:
            budget.take(len(inner))
    if inner:
        yield from _texts(inner, _join(where, kind), budget, depth - 1, probe)


def _stream_kind(data: bytes) -> str | None:
    """gzip, bzip2, xz, zstd or zlib by the stream's magic bytes, else None."""
    if data.startswith(b"\x1f\x8b"):
        return "gzip"
    if len(data) > 2 and data[0] & 0x0F == 8 and data[0] >> 4 <= 7 and not data[1] & 0x20 \
            and (data[0] << 8 | data[1]) % 31 == 0:
        return "zlib"  # RFC 1950, section 2.2: CM 8, CINFO <= 7, FCHECK, no FDICT
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
    if kind == "zlib":
        return zlib.decompressobj(wbits=zlib.MAX_WBITS)
    if kind == "bzip2":
        return bz2.BZ2Decompressor()
    if kind == "xz":
        return lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
    return zstandard.ZstdDecompressor().decompressobj()


def _decompress(kind: str, data: bytes, budget: _Budget) -> bytes:
    """Every member (gzip, bzip2, xz, zlib) or frame (zstd) of a stream, decompressed, as far as
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
        if kind in ("gzip", "zlib"):
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


def _inflated(data: bytes, budget: _Budget, wbits: int = -zlib.MAX_WBITS) -> bytes | None:
    """`data` inflated as one raw deflate stream (or, with `wbits` 15, one zlib stream), or
    None when it is not one: inflating fails, or stops before the final block ends, or
    leaves anything but zero bytes after it. Nothing is charged to the budget; a trial is
    only cut short at the whole budget, which no bytes that are not a stream inflate to.

    Raises:
        TooBig: it inflates past `budget.limit` without an error.
    """
    d = zlib.decompressobj(wbits=wbits)
    out = bytearray()
    view = memoryview(data)
    end = 0
    try:
        while end < len(data) and not d.eof:
            chunk = d.decompress(view[end : end + _TRIAL_INPUT], _CHUNK)
            end += _TRIAL_INPUT
            while True:
                out += chunk
                if len(out) > budget.limit:
                    raise TooBig(budget.limit)
                if d.eof or not d.unconsumed_tail:
                    break
                chunk = d.decompress(d.unconsumed_tail, _CHUNK)
    except zlib.error:
        return None
    if not d.eof or d.unused_data.strip(b"\0") or view[end:].tobytes().strip(b"\0"):
        return None
    return bytes(out)


_RUN = re.compile(r"[A-Za-z0-9+/_-]{12,}=*")  # a bare class first: 14 ns a character, lookarounds 200
_LINE_BREAK = re.compile(r"[ \t]*\r?\n[ \t]*")
_LAST_LINE = re.compile(r"[A-Za-z0-9+/]{1,11}=*(?=[ \t]*\r?\n|[ \t]*\Z)")
_HEX = re.compile(r"(?:[0-9A-Fa-f]{2}){8,}")
_DIGIT = re.compile(r"[0-9]")
_ASCII_LEAD = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef")  # base64 digits below 32: a byte below 0x80
_URL_TO_B64 = str.maketrans("-_", "+/")
_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_PACKED = (b"PK\x03\x04", b"PK\x05\x06", *(bom for bom, _ in _BOMS))


def _encoded_runs(text: str, where: str, budget: _Budget, depth: int,
                  probe: list[str] | None) -> Iterator[tuple[str, str]]:
    """The texts of the base64, base64url and hex runs of a text that decode to something."""
    line, seen = 1, 0
    for start, run in _runs(text):
        for kind, data in _run_decodings(run):
            if _kept(data, len(run) % 4 == 0, budget):
                line += text.count("\n", seen, start)
                seen = start
                budget.take(len(data))
                yield from _texts(data, _join(where, f"{kind} (line {line})"), budget, depth - 1, probe)
                break


def _runs(text: str) -> Iterator[tuple[int, str]]:
    """(offset, run) of each run of 12 or more base64 or base64url characters (padding
    included) that may encode text. A run that fills its line, the runs that fill the lines
    right after it and a short last line are one run: a wrapped block."""
    block: list[str] = []
    first = end = 0
    whole = False
    for m in _RUN.finditer(text):
        if whole and _LINE_BREAK.fullmatch(text, end, m.start()):
            block.append(m.group())
            end = m.end()
            continue
        if block:
            yield from _block(text, first, end, block, whole)
        line = text.rfind("\n", 0, m.start()) + 1
        whole = not text[line : m.start()].strip(" \t")
        block, first, end = [m.group()], m.start(), m.end()
    if block:
        yield from _block(text, first, end, block, whole)


def _block(text: str, first: int, end: int, lines: list[str], whole: bool) -> Iterator[tuple[int, str]]:
    """A run, or the lines of a wrapped block joined, when it may encode text."""
    gap = _LINE_BREAK.match(text, end) if whole else None
    last = _LAST_LINE.match(text, gap.end()) if gap else None
    if last:
        lines.append(last.group())
    run = "".join(lines)
    body = run.rstrip("=")
    url = "-" in body or "_" in body
    if url and ("+" in body or "/" in body):
        return  # neither alphabet
    if len(lines) > 1 or len(body) < len(run) or (body[0] in _ASCII_LEAD and body[4] in _ASCII_LEAD
                                                 and body[8] in _ASCII_LEAD):
        yield first, run  # wrapped, padded, or it can encode ASCII (or UTF-16 of it)
    elif (not url and not body.isalpha()) or _DIGIT.search(body):
        yield first, run  # a digit, + or /: most encoded non-ASCII text has one


def _run_decodings(run: str) -> Iterator[tuple[str, bytes]]:
    """A run decoded as hex (when it is an even number of hex digits, 16 or more) and as base64."""
    if _HEX.fullmatch(run):
        yield "hex", bytes.fromhex(run)
    kind = "base64"
    if "-" in run or "_" in run:
        kind, run = "base64url", run.translate(_URL_TO_B64)
    try:
        yield kind, binascii.a2b_base64(run + "==")  # padding past the end is ignored
    except binascii.Error:
        pass


def _kept(data: bytes, aligned: bool, budget: _Budget) -> bool:
    """Whether a run's decoding is worth scanning: text, an archive or a BOM, a compressed
    stream (a zlib one only when it inflates whole: about one random run in 2,000 starts
    with a valid two-byte header), or, for a run of whole four-character groups, a raw
    deflate stream.

    Raises:
        TooBig: as `_inflated`.
    """
    if _readable(data) or data.startswith(_PACKED):
        return True
    kind = _stream_kind(data)
    if kind == "zlib":
        return _inflated(data, budget, zlib.MAX_WBITS) is not None
    return kind is not None or (aligned and _inflated(data, budget) is not None)


def _readable(data: bytes) -> bool:
    """Whether bytes read as text: UTF-8, or UTF-16 of ASCII either way round, at most a
    quarter of it unreadable (replacement characters, control characters but tab, line
    feed and carriage return)."""
    if not data:
        return False
    if data.isascii():
        if b"\0" in data and data.count(0) * 3 >= len(data):  # UTF-16 of ASCII text
            data = data.replace(b"\0", b"")
        return len(_CONTROL.findall(data)) * 4 <= len(data)
    text = data.decode("utf-8", errors="replace")
    return (text.count("\ufffd") + len(_CONTROL.findall(data))) * 4 <= len(text)
