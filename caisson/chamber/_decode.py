"""Every text an agent's own tools could read out of a file's bytes (sans-IO).

`decoded_texts(data)` yields ``(where, text)`` pairs lazily, layer by layer: the raw bytes,
BOM and BOM-less UTF-16/32, compressed files and archives, streams inside a file, a text's
own escapes, and base64/base32/hex runs (``where`` names the decoding, e.g. ``zip:a.txt,
gzip``). All layers of one file together decode at most `MAX_DECODED_BYTES` (bytes), at
most `MAX_DEPTH` layers deep; past either it raises `TooBig` or `TooDeep`. Each decoding
and when it is tried or kept: docs/chamber.md, "What the containment scan decodes".
"""

from __future__ import annotations

import base64
import binascii
import bz2
import html
import io
import lzma
import re
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator

import zstandard

from caisson._fold import fold_ascii_part
from caisson.chamber._lzw import MAGIC as _LZW_MAGIC
from caisson.chamber._lzw import unlzw

__all__ = ["MAX_DECODED_BYTES", "MAX_DEPTH", "TooBig", "TooDeep", "decoded_texts"]

MAX_DECODED_BYTES = 64 * 2**20
"""Most bytes one file may yield, raw and decompressed layers together (64 MiB)."""

MAX_DEPTH = 32
"""Most nested layers opened below a file (a zip of a gzip is two, base64 of a gzip too);
one more is `TooDeep`. The byte budget bounds the work; this bounds the recursion."""

_CHUNK = 1 << 20
_TRIAL_INPUT = 1 << 16
_PREFIX = 1 << 12  # what an embedded stream's output is judged by before it is inflated whole

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


class TooDeep(Exception):
    """A file holds a layer nested deeper than its depth limit.

    Attributes:
        depth: the limit, in layers.
    """

    def __init__(self, depth: int):
        super().__init__(f"more than {depth} nested layers")
        self.depth = depth


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
        depth: most nested layers to open.
        needles: when given, folded ASCII strings (`caisson._fold.fold`) of which a text
            must contain one to matter: a UTF-16/32 guess (no BOM) is yielded only when
            its `caisson._fold.fold_ascii_part` holds one, so a needle spelt with a
            lookalike or a soft hyphen still passes. A needle with a non-ASCII character
            turns the test off (every guess is yielded).

    Yields:
        `(where, text)`: `where` names the decoding, empty for the raw bytes as UTF-8,
        else steps joined by `, ` (e.g. `utf-16-le`, `utf-16-be@1` for a start at byte
        1, `gzip`, `zlib@1234` for a stream at byte 1234, `zip:docs/q.txt, utf-16-le`,
        `html`); `text` is the decoded text.

    Raises:
        TooBig: the decompressed layers exceed `limit` bytes; texts already yielded stand.
        TooDeep: a layer is nested more than `depth` deep; texts already yielded stand.
    """
    budget = _Budget(limit)
    budget.take(len(data))
    probe = None if needles is None else sorted(set(needles))
    if probe is not None and not all(n.isascii() for n in probe):
        probe = None
    yield from _texts(data, "", budget, depth, probe, depth)


def _join(where: str, step: str) -> str:
    return f"{where}, {step}" if where else step


def _texts(data: bytes, where: str, budget: _Budget, depth: int,
           probe: list[str] | None, limit: int) -> Iterator[tuple[str, str]]:
    if depth < 0:
        raise TooDeep(limit)
    yield from _with_runs(where, data.decode("utf-8", errors="replace"), budget, depth, probe, limit)
    for bom, codec in _BOMS:
        if data.startswith(bom):
            if codec != "utf-8":  # UTF-8 with a BOM is the raw decoding already
                text = data[len(bom):].decode(codec, errors="replace")
                yield from _with_runs(_join(where, codec), text, budget, depth, probe, limit)
            break
    else:
        if b"\0" in data:
            for at, text in _guesses(data, where, probe):
                yield from _with_runs(at, text, budget, depth, probe, limit)
    yield from _unpacked(data, where, budget, depth, probe, limit)


def _with_runs(where: str, text: str, budget: _Budget, depth: int,
               probe: list[str] | None, limit: int) -> Iterator[tuple[str, str]]:
    """A text, its escaped lines decoded (`_ESCAPES`), then the texts of its encoded runs."""
    yield where, text
    for kind, pattern, decode in _ESCAPES:
        decoded = _lines_decoded(text, pattern, decode)
        if decoded is not None:
            budget.take(len(decoded))
            yield _join(where, kind), decoded
    yield from _encoded_runs(text, where, budget, depth, probe, limit)


def _printable(decoded: str, written: str) -> str:
    """`decoded`, or `written` when it decodes to nothing or holds a control character but
    tab: an escaped NUL or line feed in a string literal stays as it is written."""
    return written if not decoded or any(c < " " and c != "\t" or "\x7f" <= c < "\xa0" for c in decoded) \
        else decoded


def _unreferenced(m: re.Match[str]) -> str:
    """An HTML character reference (`&#8209;`, `&#x2011;`, `&shy;`) decoded as
    `html.unescape` does (the HTML Living Standard's table)."""
    return _printable(html.unescape(m.group()), m.group())


_ESCAPE = re.compile(r"\\(?:x([0-9A-Fa-f]{2})|u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})|u\{([0-9A-Fa-f]{1,6})\})")


def _unescaped(m: re.Match[str]) -> str:
    """A run of backslash escapes (`\\x72`: a byte of UTF-8, or Latin-1 where that is not
    UTF-8; `\\u2011` with surrogate pairs; `\\U0001D42B`; `\\u{72}`) decoded as JSON,
    JavaScript, Python and `echo -e` (`printf %b`) decode them."""
    out: list[str] = []
    pending = bytearray()
    units: list[int] = []
    for e in _ESCAPE.finditer(m.group()):
        if e.group(1) is None and pending:
            out.append(_utf8_or_latin1(pending))
            pending.clear()
        if e.group(2) is None and units:
            out.append(b"".join(u.to_bytes(2, "little") for u in units).decode("utf-16-le", "replace"))
            units.clear()
        if e.group(1) is not None:
            pending.append(int(e.group(1), 16))
        elif e.group(2) is not None:
            units.append(int(e.group(2), 16))
        else:
            cp = int(e.group(3) or e.group(4), 16)
            out.append(chr(cp) if cp <= 0x10FFFF else "\ufffd")
    if pending:
        out.append(_utf8_or_latin1(pending))
    if units:
        out.append(b"".join(u.to_bytes(2, "little") for u in units).decode("utf-16-le", "replace"))
    return _printable("".join(out), m.group())


def _utf8_or_latin1(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def _unpercented(m: re.Match[str]) -> str:
    """A run of URL percent-encoded bytes (RFC 3986, section 2.1) as UTF-8, as a browser's
    address bar shows them."""
    data = bytes(int(m.group()[i + 1 : i + 3], 16) for i in range(0, len(m.group()), 3))
    try:
        return _printable(data.decode("utf-8"), m.group())
    except UnicodeDecodeError:
        return m.group()


_ESCAPES: tuple[tuple[str, re.Pattern[str], Callable[[re.Match[str]], str]], ...] = (
    ("html", re.compile(r"&(?:#[0-9]{1,7};?|#[xX][0-9a-fA-F]{1,6};?|[A-Za-z][A-Za-z0-9]{1,31};)"), _unreferenced),
    ("escapes", re.compile(_ESCAPE.pattern + f"(?:{_ESCAPE.pattern})*"), _unescaped),
    ("percent", re.compile(r"%[0-9A-Fa-f]{2}(?:%[0-9A-Fa-f]{2})*"), _unpercented),  # a literal first: a fast search
)
"""What a text's own format spells otherwise, and how its readers decode it: HTML character
references (a browser), backslash escapes (JSON, JavaScript, Python, C, `echo -e`), URL
percent-encoding (a browser's address bar)."""


def _lines_decoded(text: str, pattern: re.Pattern[str], decode: Callable[[re.Match[str]], str]) -> str | None:
    """The lines of a text that `pattern` finds something to decode in, decoded, every other
    line left empty so that line numbers stay (a decoded line feed is a space); None when
    no line changes. A line with a U+FFFD REPLACEMENT CHARACTER (a binary's) is left out."""
    m = pattern.search(text)
    out: list[str] = []
    done = 0
    while m is not None:
        start = text.rfind("\n", 0, m.start()) + 1
        end = text.find("\n", m.end())
        end = len(text) if end == -1 else end
        line = pattern.sub(decode, text[start:end]) if text.find("\ufffd", start, end) == -1 else ""
        if line and line != text[start:end]:
            out.append("\n" * text.count("\n", done, start))
            out.append(line.replace("\n", " "))
            done = end
        m = pattern.search(text, end)
    return "".join(out) if out else None


def _guesses(data: bytes, where: str, probe: list[str] | None) -> Iterator[tuple[str, str]]:
    """UTF-16 and UTF-32 decodings of bytes without a BOM, at every alignment (UTF-32 only
    where `_utf32_run` finds one)."""
    for codec, width in (("utf-16-le", 2), ("utf-16-be", 2), ("utf-32-le", 4), ("utf-32-be", 4)):
        if width == 4 and b"\0\0" not in data:
            continue
        for shift in range(width):
            if width == 4 and not _utf32_run(data, shift, codec.endswith("le")):
                continue
            text = data[shift:].decode(codec, errors="replace")
            if probe is not None:
                part = fold_ascii_part(text)
                if not any(n in part for n in probe):
                    continue
            yield _join(where, codec if shift == 0 else f"{codec}@{shift}"), text


_ZERO = bytes([0] + [1] * 255)  # bytes.translate: 0 stays 0, any other byte is 1
_BELOW_2 = bytes([0, 0] + [1] * 254)
_NONZERO = bytes([1] + [0] * 255)


def _utf32_run(data: bytes, shift: int, little: bool) -> bool:
    """Whether the UTF-32 code units from byte `shift` hold three in a row of planes 0 or 1
    (where every character that folds to ASCII is) but U+0000: a decoding without such a run
    holds no needle of three or more letters. Slices, translations and one big-integer
    `or` (all in C): a few ms for 10 MB, where decoding took 190 ns a code unit."""
    n = (len(data) - shift) // 4
    if n < 3 or b"\0\0\0" not in data[shift + (3 if little else 0) : shift + 4 * n : 4]:
        return False  # no three top bytes of 0 in a row: the usual answer, from one slice
    units = [data[shift + k : shift + 4 * n : 4] for k in range(4)]
    low0, low1, plane, top = units if little else units[::-1]
    mask = int.from_bytes(top.translate(_ZERO), "big") | int.from_bytes(plane.translate(_BELOW_2), "big") \
        | (int.from_bytes(low0.translate(_NONZERO), "big") & int.from_bytes(low1.translate(_NONZERO), "big")
           & int.from_bytes(plane.translate(_NONZERO), "big"))
    return b"\0\0\0" in mask.to_bytes(n, "big")


def _unpacked(data: bytes, where: str, budget: _Budget, depth: int,
              probe: list[str] | None, limit: int) -> Iterator[tuple[str, str]]:
    """The texts of a compressed or archived file's contents, when its magic bytes say it
    is one, and of the complete compressed streams inside it."""
    if data.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        yield from _zip_members(data, where, budget, depth, probe, limit)
        return
    if data[257:262] == b"ustar":  # POSIX.1-1988 and GNU tar headers
        yield from _tar_members(data, where, budget, depth, probe, limit)
        return
    kind = _stream_kind(data)
    end = 1
    if kind == "compress":
        inner = unlzw(data, budget.take) or b""
        end = len(data)
    elif kind is not None:
        inner, end = _decompress(kind, data, budget)
    else:
        kind, inner = "deflate", _inflated(data, budget)
        if inner:
            budget.take(len(inner))
            end = len(data)
    if inner:
        yield from _texts(inner, _join(where, kind), budget, depth - 1, probe, limit)
    for at, kind, inner in _embedded(data, max(end, 1), budget):
        yield from _texts(inner, _join(where, f"{kind}@{at}"), budget, depth - 1, probe, limit)


def _stream_kind(data: bytes) -> str | None:
    """gzip, compress, bzip2, xz, zstd or zlib by the stream's magic bytes, else None."""
    if data.startswith(b"\x1f\x8b"):
        return "gzip"
    if data.startswith(_LZW_MAGIC):
        return "compress"
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


def _decompress(kind: str, data: bytes, budget: _Budget) -> tuple[bytes, int]:
    """Every member (gzip, bzip2, xz, zlib) or frame (zstd) of a stream, decompressed, as far as
    it goes: a corrupt or truncated stream gives what came before the damage, as `zcat`
    prints it. The output is charged to the budget as it grows.

    Returns:
        The output, and the offset in `data` where the damage or the zero padding after the
        last member starts (`len(data)` when the stream ends with the data).

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
    return bytes(out), len(data) - len(rest)


_EMBEDDED = re.compile(rb"\x1f\x8b\x08|\x78[\x01\x5e\x9c\xda]|BZh[1-9]1AY&SY|\xfd7zXZ\x00|\x28\xb5\x2f\xfd")
"""Where a compressed stream may start inside other bytes: gzip (RFC 1952, deflate), zlib
as zlib's deflate writes it (RFC 1950: a 32 KiB window, one of the four levels), bzip2 with
its first block's magic, xz, zstd (RFC 8878). Each is one in 4 billion random positions or
rarer, but zlib's one in 16,384."""

_EMBEDDED_KIND = {0x1F: "gzip", 0x78: "zlib", 0x42: "bzip2", 0xFD: "xz", 0x28: "zstd"}


def _embedded(data: bytes, start: int, budget: _Budget) -> Iterator[tuple[int, str, bytes]]:
    """`(offset, kind, output)` of each compressed stream from `start` on that is whole (its
    end and checksum reached: a PDF's FlateDecode stream, a zTXt chunk, a gzip member of an
    uncompressed archive) and decompresses to something `_kept` keeps. A kept output is
    charged to the budget; a stream inside a kept one is not looked for again.

    Raises:
        TooBig: one stream decompresses past `budget.limit`.
    """
    m = _EMBEDDED.search(data, start)
    while m is not None:
        at, kind = m.start(), _EMBEDDED_KIND[data[m.start()]]
        found = _whole(kind, memoryview(data)[at:], budget.limit, lambda out: _kept(out, False, budget))
        if found is not None:
            budget.take(len(found[0]))
            yield at, kind, found[0]
            m = _EMBEDDED.search(data, at + found[1])
        else:
            m = _EMBEDDED.search(data, at + 1)


def _whole(kind: str, data: memoryview, limit: int,
           keep: Callable[[bytes], bool]) -> tuple[bytes, int] | None:
    """One stream of `kind` at the start of `data` decompressed, and its length, when it
    ends whole (a checksum is checked where the format has one) and `keep` takes its first
    4 KiB of output (or all of it, when shorter); None otherwise. Input goes in 64 KiB at a
    time (4 KiB for zstd, whose decompressor takes no output bound), so a failed trial, or
    a stream of pixels or glyphs, costs little.

    Raises:
        TooBig: it decompresses past `limit` bytes.
    """
    d = _decompressor(kind)
    out = bytearray()
    step = 4096 if kind == "zstd" else _TRIAL_INPUT
    fed = 0
    checked = False
    try:
        while fed < len(data) and not d.eof:
            piece = data[fed : fed + step]
            fed += len(piece)
            chunk = d.decompress(piece) if kind == "zstd" else d.decompress(piece, _PREFIX)
            while True:
                out += chunk
                if len(out) > limit:
                    raise TooBig(limit)
                if not checked and len(out) >= _PREFIX:
                    if not keep(bytes(out[:_PREFIX])):
                        return None
                    checked = True
                if d.eof or kind == "zstd":
                    break
                if kind in ("gzip", "zlib"):
                    if not d.unconsumed_tail:
                        break
                    chunk = d.decompress(d.unconsumed_tail, _CHUNK)
                elif d.needs_input:
                    break
                else:
                    chunk = d.decompress(b"", _CHUNK)
    except TooBig:
        raise
    except Exception:  # zlib.error, OSError, LZMAError, ZstdError: not a stream here
        return None
    if not d.eof or not (checked or keep(bytes(out))):
        return None
    return bytes(out), fed - len(d.unused_data)


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
                 probe: list[str] | None, limit: int) -> Iterator[tuple[str, str]]:
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
        yield from _texts(inner, _join(where, f"zip:{info.filename}"), budget, depth - 1, probe, limit)


def _tar_members(data: bytes, where: str, budget: _Budget, depth: int,
                 probe: list[str] | None, limit: int) -> Iterator[tuple[str, str]]:
    """The texts of every regular member of an uncompressed tar archive (`tar xf`; its raw
    bytes are scanned as they are, this opens what is compressed inside), as far as it reads."""
    try:
        archive = tarfile.open(fileobj=io.BytesIO(data), mode="r:")
        infos = [info for info in archive if info.isreg()]
    except Exception:  # tarfile.TarError, EOFError: what came before the damage
        return
    for info in infos:
        member = archive.extractfile(info)
        inner = member.read(budget.left + 1) if member is not None else b""
        budget.take(len(inner))
        yield from _texts(inner, _join(where, f"tar:{info.name}"), budget, depth - 1, probe, limit)


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
                  probe: list[str] | None, limit: int) -> Iterator[tuple[str, str]]:
    """The texts of the base64, base64url, base32, base32hex and hex runs of a text that
    decode to something."""
    line, seen = 1, 0
    for start, run in _runs(text):
        for kind, data, aligned in _run_decodings(run):
            if _kept(data, aligned, budget):
                line += text.count("\n", seen, start)
                seen = start
                budget.take(len(data))
                yield from _texts(data, _join(where, f"{kind} (line {line})"), budget, depth - 1, probe, limit)
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


_BASE32 = re.compile(r"[A-Z2-7]+=*")
_BASE32HEX = re.compile(r"[0-9A-V]+=*")
_TO_BASE32 = str.maketrans("0123456789ABCDEFGHIJKLMNOPQRSTUV", "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")


def _run_decodings(run: str) -> Iterator[tuple[str, bytes, bool]]:
    """`(kind, bytes, whole)` of a run decoded as hex (an even number of hex digits, 16 or
    more), base32 and base32hex (RFC 4648, sections 6 and 7: upper case, as coreutils'
    `base32 -d` and `basenc --base32hex -d` take it) and base64 or base64url; `whole` when
    the run is whole groups of its alphabet (8 characters of base32, 4 of base64)."""
    if _HEX.fullmatch(run):
        yield "hex", bytes.fromhex(run), len(run) % 8 == 0
    for kind, alphabet in (("base32", _BASE32), ("base32hex", _BASE32HEX)):
        if alphabet.fullmatch(run) and not run.isdigit():  # a number is no base32hex of text
            body = run.rstrip("=")
            if kind == "base32hex":
                body = body.translate(_TO_BASE32)
            if len(body) % 8 in (1, 3, 6):  # 8 characters hold 5 bytes: no byte ends there
                body = body[:-1]
            try:
                yield kind, base64.b32decode(body + "=" * (-len(body) % 8)), len(run) % 8 == 0
            except binascii.Error:
                pass
    kind = "base64"
    if "-" in run or "_" in run:
        kind, run = "base64url", run.translate(_URL_TO_B64)
    try:
        yield kind, binascii.a2b_base64(run + "=="), len(run) % 4 == 0  # padding past the end is ignored
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
    if _readable(data) or data.startswith(_PACKED) or data[257:262] == b"ustar":
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
