"""Tests for caisson.chamber._decode and the containment scan over decoded texts.

The question is planted in every form an agent's own tools read without help (ripgrep's
BOM transcoding, grep on a file with NULs, zgrep / bzgrep / xzgrep / zstdgrep / rg -z,
zipgrep, zcat of a .Z, tar, base32 -d, a browser's HTML) and the scan must find it; a file
too big or too deep to scan is reported, never skipped in silence.
"""

from __future__ import annotations

import base64
import bz2
import gzip
import io
import lzma
import os
import random
import re
import tarfile
import zipfile
import zlib
from pathlib import Path

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from caisson.chamber._containment import containment_scan, scan_tree
from caisson.chamber._decode import MAX_DEPTH, TooBig, TooDeep, decoded_texts
from caisson.chamber.sandbox import build_sandbox
from caisson.errors import ContainmentError
from caisson.scenario import Question, Scenario
from tests.helpers import git

PROMPT = "Which function loads the configuration file and where is it defined?"
TEXT = f"notes\n\nquestion: {PROMPT}\n"
WINDOW = '"which function loads the configuration file and where is it defined" (question q1)'


def scenario(**kw: object) -> Scenario:
    base: dict[str, object] = {"name": "t", "questions": [Question(id="q1", prompt=PROMPT)]}
    base.update(kw)
    return Scenario(**base)  # type: ignore[arg-type]


def _zip(members: dict[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


def _tar_gz(name: str, data: bytes) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


UTF8 = TEXT.encode()
U16LE = TEXT.encode("utf-16-le")


def _deflate(data: bytes) -> bytes:
    d = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    return d.compress(data) + d.flush()


def _base64url(text: str) -> bytes:
    """base64url without padding of `text` behind as few spaces as give it a `-` or `_`."""
    for pad in range(8):
        out = base64.urlsafe_b64encode((" " * pad + text).encode()).rstrip(b"=")
        if b"-" in out or b"_" in out:
            return out
    raise AssertionError("no base64url character")


def _tar(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + kind + body + zlib.crc32(kind + body).to_bytes(4, "big")


def _nested_gzip(data: bytes, layers: int) -> bytes:
    for _ in range(layers):
        data = gzip.compress(data)
    return data


Z = (Path(__file__).parent / "test_decode" / "question.txt.Z").read_bytes()  # compress -c (ncompress 4.2.4.6)
LOOKALIKE = TEXT.translate(str.maketrans("aeio", "\u0430\u0435\u0456\u043e"))  # Cyrillic a e i o: in every needle
FULLWIDTH = TEXT.translate({c: c + 0xFEE0 for c in range(0x21, 0x7F)})
PDF = b"%PDF-1.4\n1 0 obj\n<</Length 88/Filter/FlateDecode>>\nstream\n"
SCRIPT = b"#!/bin/sh\ntail -c +64 \"$0\" | zcat; exit\n" + b"#" * 21 + b"\n"
PNG = b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", bytes(13))
B64 = base64.b64encode(UTF8)
FORMS: dict[str, tuple[bytes, str]] = {  # file bytes, the decoding the hit names ("" raw)
    "utf-8 with BOM": (b"\xef\xbb\xbf" + UTF8, ""),
    "utf-16-le with BOM": (TEXT.encode("utf-16"), "utf-16-le"),  # Python writes LE + BOM here
    "utf-16-be with BOM": (b"\xfe\xff" + TEXT.encode("utf-16-be"), "utf-16-be"),
    "utf-32-le with BOM": (b"\xff\xfe\0\0" + TEXT.encode("utf-32-le"), "utf-32-le"),
    "utf-32-be with BOM": (b"\0\0\xfe\xff" + TEXT.encode("utf-32-be"), "utf-32-be"),
    "utf-16-le, no BOM": (U16LE, "utf-16-le"),
    "utf-16-be at an odd offset of a binary": (b"\x7fELF\0" + TEXT.encode("utf-16-be"), "utf-16-be@1"),
    "utf-32-le, no BOM": (TEXT.encode("utf-32-le"), "utf-32-le"),
    "utf-8 after a NUL": (b"\0" + UTF8, ""),
    "gzip": (gzip.compress(UTF8), "gzip"),
    "gzip, second member": (gzip.compress(b"first\n") + gzip.compress(UTF8), "gzip"),
    "bzip2": (bz2.compress(UTF8), "bzip2"),
    "xz": (lzma.compress(UTF8), "xz"),
    "zstd": (zstandard.ZstdCompressor().compress(UTF8), "zstd"),
    "zip, deflated": (_zip({"docs/q.txt": UTF8}), "zip:docs/q.txt"),
    "zip, stored": (_zip({"q.txt": UTF8}, zipfile.ZIP_STORED), ""),  # stored: raw bytes show it
    "gzip of utf-16 with BOM": (gzip.compress(TEXT.encode("utf-16")), "gzip, utf-16-le"),
    "zip of a gzip": (_zip({"inner.gz": gzip.compress(UTF8)}), "zip:inner.gz, gzip"),
    "tar.gz": (_tar_gz("q.txt", UTF8), "gzip"),
    "truncated gzip": (gzip.compress(UTF8 + os.urandom(4096))[:-200], "gzip"),
    "zlib": (zlib.compress(UTF8), "zlib"),
    "zlib, fastest": (zlib.compress(UTF8, 1), "zlib"),
    "raw deflate": (_deflate(UTF8), "deflate"),
    "zip of a zlib stream": (_zip({"k.z": zlib.compress(UTF8)}), "zip:k.z, zlib"),
    "base64": (B64, "base64 (line 1)"),
    "base64 in a JSON string": (b'{\n  "blob": "' + B64 + b'"\n}\n', "base64 (line 2)"),
    "base64 wrapped at 76 columns": (b"-----\n" + base64.encodebytes(UTF8) + b"-----\n", "base64 (line 2)"),
    "base64url without padding": (_base64url(TEXT), "base64url (line 1)"),
    "hex": (b"x = " + UTF8.hex().encode() + b"\n", "hex (line 1)"),
    "base64 of gzip": (base64.b64encode(gzip.compress(UTF8)), "base64 (line 1), gzip"),
    "base64 of raw deflate": (base64.b64encode(_deflate(UTF8)), "base64 (line 1), deflate"),
    "base64 of base64": (base64.b64encode(B64), "base64 (line 1), base64 (line 1)"),
    "base64 of utf-16": (base64.b64encode(TEXT.encode("utf-16")), "base64 (line 1), utf-16-le"),
    "base64 in a utf-16 file": (B64.decode().encode("utf-16"), "utf-16-le, base64 (line 1)"),
    "gzip of base64": (gzip.compress(B64), "gzip, base64 (line 1)"),
    "utf-16-le, no BOM, lookalikes in every needle": (LOOKALIKE.encode("utf-16-le"), "utf-16-le"),
    "utf-16-be, no BOM, fullwidth, at an odd offset": (b"\x7f" + FULLWIDTH.encode("utf-16-be"), "utf-16-be@1"),
    "utf-32-le, no BOM, lookalikes": (b"\0" + LOOKALIKE.encode("utf-32-le"), "utf-32-le@1"),
    "html character references": (TEXT.replace(" ", "&#32;").replace("e", "&#x65;").encode(), "html"),
    "html named references": (TEXT.replace(" ", "&nbsp;").replace("i", "&imath;").encode(), "html"),
    "backslash escapes in a JSON string": (b'{"q": "' + TEXT.encode("ascii", "backslashreplace").replace(b"\n", b"\\n")
                                           .replace(b" ", b"\\u0020").replace(b"i", b"\\x69") + b'"}\n', "escapes"),
    "URL percent-encoding": (b"see https://example.invalid/?q=" + TEXT.replace("\n", " ").replace(" ", "%20")
                             .replace("e", "%65").encode() + b"\n", "percent"),
    "base32": (base64.b32encode(UTF8), "base32 (line 1)"),
    "base32 wrapped at 76 columns": (b"-----\n" + re.sub(rb"(.{76})", rb"\1\n", base64.b32encode(UTF8)) + b"\n-----\n",
                                     "base32 (line 2)"),
    "base32 without padding": (base64.b32encode(UTF8 + b"!").rstrip(b"="), "base32 (line 1)"),
    "base32hex": (base64.b32hexencode(UTF8), "base32hex (line 1)"),
    "compress .Z": (Z, "compress"),
    "base64 of .Z": (base64.b64encode(Z), "base64 (line 1), compress"),
    "gzip in an uncompressed tar": (_tar({"a.txt": b"x\n", "q.txt.gz": gzip.compress(UTF8)}), "tar:q.txt.gz, gzip"),
    ".Z in a tar": (_tar({"q.txt.Z": Z}), "tar:q.txt.Z, compress"),
    "zip in a tar": (_tar({"q.zip": _zip({"q.txt": UTF8})}), "tar:q.zip, zip:q.txt"),
    "zlib stream in a PDF": (PDF + zlib.compress(UTF8) + b"\nendstream\nendobj\n", f"zlib@{len(PDF)}"),
    "gzip after a shell script": (SCRIPT + gzip.compress(UTF8), f"gzip@{len(SCRIPT)}"),
    "zTXt chunk of a PNG": (PNG + _png_chunk(b"zTXt", b"Comment\0\0" + zlib.compress(UTF8)) + _png_chunk(b"IEND", b""),
                            f"zlib@{len(PNG) + 8 + 9}"),
    "xz at an offset": (b"MAGIC\0" + lzma.compress(UTF8) + b"trailer", "xz@6"),
    "bzip2 at an offset": (b"MAGIC\0" + bz2.compress(UTF8) + b"trailer", "bzip2@6"),
    "zstd at an offset": (b"MAGIC\0" + zstandard.ZstdCompressor().compress(UTF8) + b"trailer", "zstd@6"),
    "gzip five deep": (_nested_gzip(UTF8, 5), ", ".join(["gzip"] * 5)),
    "gzip 32 deep": (_nested_gzip(UTF8, 32), ", ".join(["gzip"] * 32)),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_question_found_in_every_form(tmp_path: Path, form: str) -> None:
    data, where = FORMS[form]
    (tmp_path / "f").write_bytes(data)
    scan = containment_scan(tmp_path, ["f"], scenario())
    name = f"f [{where}]" if where else "f"
    assert any(h.startswith(f"{name}:") and h.endswith(WINDOW) for h in scan.hits), scan.hits
    assert scan.unscanned == []


@pytest.mark.parametrize("form", list(FORMS))
def test_every_form_refuses_the_tree(tmp_path: Path, form: str) -> None:
    (tmp_path / "f").write_bytes(FORMS[form][0])
    with pytest.raises(ContainmentError):
        scan_tree(tmp_path, ["f"], scenario())


def test_utf16_with_bom_refuses_the_sandbox(tmp_path: Path) -> None:
    """The issue's example: ripgrep in the chamber finds it, so the scan must."""
    root = tmp_path / "live"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "src.py").write_text("x = 1\n")
    (root / "notes.txt").write_bytes(TEXT.encode("utf-16"))
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "c")
    with pytest.raises(ContainmentError) as e:
        build_sandbox(root, "HEAD", scenario(), tmp_path / "sb")
    assert e.value.hits == [f"notes.txt [utf-16-le]:3: {WINDOW}"]
    assert not (tmp_path / "sb").exists()


def test_leak_term_in_a_compressed_utf16_member(tmp_path: Path) -> None:
    data = _zip({"a/key.txt": gzip.compress("…\nthe ANSWER-KEY-7\n".encode("utf-16"))})
    (tmp_path / "k.zip").write_bytes(data)
    s = scenario(questions=[], leak_terms=["answer-key-7"])
    assert containment_scan(tmp_path, ["k.zip"], s).hits == [
        "k.zip [zip:a/key.txt, gzip, utf-16-le]:2: leak term 'answer-key-7'"]


def test_past_the_depth_limit_is_reported_not_silent(tmp_path: Path) -> None:
    (tmp_path / "deep.gz").write_bytes(_nested_gzip(UTF8, 33))
    scan = containment_scan(tmp_path, ["deep.gz"], scenario())
    assert scan.unscanned == ["deep.gz: not scanned past 32 nested layers: too deep"]
    assert scan.hits == []
    with pytest.raises(TooDeep) as e:
        _texts_of(_nested_gzip(UTF8, 3), depth=2)
    assert e.value.depth == 2


def test_a_bidi_override_in_the_tree(tmp_path: Path) -> None:
    (tmp_path / "k.txt").write_text("x\nkey: rt-canary-\u202eq1x9\u202c\n")
    (tmp_path / "q.txt").write_text(f"x\n\u202e{PROMPT[::-1]}\u202c\n")  # the prompt stored backwards
    s = scenario(leak_terms=["rt-canary-9x1q"])
    assert containment_scan(tmp_path, ["k.txt", "q.txt"], s).hits == [
        "k.txt:2: leak term 'rt-canary-9x1q'", f"q.txt:2: {WINDOW}"]


@pytest.mark.parametrize("blank", ["\u3164", "\uffa0", "\u2800"])
def test_a_prompt_whose_spaces_are_blanks(tmp_path: Path, blank: str) -> None:
    (tmp_path / "n.md").write_text("q: " + PROMPT.replace(" ", blank) + "\n")
    assert containment_scan(tmp_path, ["n.md"], scenario()).hits == [f"n.md:1: {WINDOW}"]


def test_clean_binaries_have_no_hits(tmp_path: Path) -> None:
    rnd = bytes(range(256)) * 64 + os.urandom(1 << 16)
    files = {"r.bin": rnd, "r.gz": gzip.compress(rnd), "r.zip": _zip({"r": rnd}), "e.gz": b"\x1f\x8bjunk"}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    scan = containment_scan(tmp_path, list(files), scenario(leak_terms=["answer-key-7"]))
    assert scan.hits == [] and scan.unscanned == []


def test_binaries_with_stream_headers_inside_have_no_hits(tmp_path: Path) -> None:
    """Random bytes strewn with the magic of every stream the scan looks for inside a file,
    a zlib stream of random bytes (as a PNG's pixels are), right-to-left and Arabic code
    points as UTF-8 and UTF-16: nothing is kept, nothing is found, nothing is left unscanned."""
    rng = random.Random(5)
    magics = [b"\x1f\x8b\x08", b"x\x01", b"x^", b"x\x9c", b"x\xda", b"BZh91AY&SY", b"\xfd7zXZ\0", b"\x28\xb5\x2f\xfd",
              b"\x1f\x9d\x90", "\u202e\u05d0\u0627\u0661".encode(), "\u202e\u05d0".encode("utf-16-le")]
    noise = b"".join(rng.randbytes(rng.randint(0, 300)) + rng.choice(magics) for _ in range(3000))
    files = {"n.bin": noise, "p.png": PNG + _png_chunk(b"IDAT", zlib.compress(rng.randbytes(1 << 17)))}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    scan = containment_scan(tmp_path, list(files), scenario(leak_terms=["answer-key-7"]))
    assert scan.hits == [] and scan.unscanned == []
    png = files["p.png"]  # the pixels' stream is judged by its first 4 KiB, and dropped uncharged
    assert [w for w, _ in decoded_texts(png, limit=len(png) + 1, needles=["configuration"])] == [""]


def test_runs_of_numbers_and_capitals_are_not_base32_of_text() -> None:
    """Identifiers in capitals and numbers are runs of the base32 and base32hex alphabets:
    what they decode to is no text, so nothing is kept or charged."""
    code = b"\n".join(b"CONFIGURATIONSETTINGS%d = 1000003337829800186%d" % (i, i) for i in range(2000))
    assert _texts_of(code, limit=len(code) + 1) == [""]


@pytest.mark.parametrize("text", [
    "the canary rt\u2011canary\u20119x1q",  # U+2011 hyphens
    "rt-c\u0430nary-9x1q",  # Cyrillic a
])
def test_an_encoded_leak_term_in_another_spelling(text: str, tmp_path: Path) -> None:
    (tmp_path / "k.b64").write_bytes(base64.b64encode(text.encode()))
    hits = containment_scan(tmp_path, ["k.b64"], scenario(questions=[], leak_terms=["rt-canary-9x1q"])).hits
    assert hits == ["k.b64 [base64 (line 1)]:1: leak term 'rt-canary-9x1q'"]


def _texts_of(data: bytes, limit: int = 1 << 26, depth: int = MAX_DEPTH) -> list[str]:
    return [where for where, _ in decoded_texts(data, limit=limit, depth=depth)]


def test_runs_that_decode_to_noise_are_dropped_and_not_charged() -> None:
    """Identifiers, hashes and random base64-looking bytes are runs too: what they decode to
    is not text, so no layer is added and none of the budget is spent on them."""
    rng = random.Random(7)
    rnd = base64.b64encode(rng.randbytes(3 << 18))  # one 1 MiB run of random base64
    code = b"\n".join(b"    DescribeInstancesRequest = configuration_settings_%d" % i for i in range(2000))
    lock = b"\n".join(b"sha256:" + rng.randbytes(32).hex().encode() for _ in range(2000))
    for data in (rnd, code, lock):
        assert _texts_of(data, limit=len(data) + 1) == [""]  # the budget holds the raw text alone


def test_text_is_not_mistaken_for_a_deflate_or_zlib_stream() -> None:
    """A raw deflate stream has no header: `{` (0x7B) inflates as a final fixed block, so a
    trial is kept only when the stream ends where the bytes do."""
    for data in (b'{"a": 1}\n', b"{\n", b"x^ looks like a zlib header\n", os.urandom(4096)):
        assert "deflate" not in _texts_of(data)
    assert "deflate" not in _texts_of(_deflate(b"plain") + b"trailing junk")


def test_encoded_decompression_is_bounded() -> None:
    bz2_bomb = base64.b64encode(bz2.compress(b"\0" * (64 << 20)))
    deflate_bomb = _deflate(b"\0" * (64 << 20))
    for bomb in (bz2_bomb, deflate_bomb, base64.b64encode(deflate_bomb)):
        with pytest.raises(TooBig):
            _texts_of(bomb, limit=1 << 20)


def test_too_big_is_reported_not_silent(tmp_path: Path) -> None:
    bomb = gzip.compress(b"\n" * 4096 + UTF8 + b"x" * (1 << 20))
    (tmp_path / "bomb.gz").write_bytes(bomb)
    (tmp_path / "big.txt").write_bytes(UTF8 + b"y" * 5000)
    (tmp_path / "small.txt").write_bytes(b"clean\n")
    scan = containment_scan(tmp_path, ["big.txt", "bomb.gz", "small.txt"], scenario(), limit=4096 + 200)
    assert scan.unscanned == [
        "big.txt: not scanned past 4296 bytes: too big",
        "bomb.gz: not scanned past 4296 bytes decoded: too big",
    ]
    assert [h.split(":")[0] for h in scan.hits] == ["big.txt"]  # what was read is still scanned


def test_decompression_is_bounded() -> None:
    bomb = bz2.compress(b"\0" * (64 << 20))  # 64 MiB of zeros in a few dozen bytes
    with pytest.raises(TooBig) as e:
        for _ in decoded_texts(bomb, limit=1 << 20):
            pass
    assert e.value.limit == 1 << 20


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=512), st.sampled_from([b"", b"\x1f\x8b", b"BZh9", b"\xfd7zXZ\0", b"\x28\xb5\x2f\xfd",
                                                  b"PK\x03\x04", b"\xff\xfe", b"\0\0\xfe\xff"]))
def test_any_bytes_decode_without_error(junk: bytes, magic: bytes) -> None:
    texts = list(decoded_texts(magic + junk, limit=1 << 20))
    assert texts[0][0] == "" and texts[0][1] == (magic + junk).decode("utf-8", "replace")


@given(st.binary(max_size=64))
def test_trailing_junk_after_a_compressed_member(junk: bytes) -> None:
    texts = {w: t for w, t in decoded_texts(gzip.compress(UTF8) + b"\0\0" + junk)}
    assert texts["gzip"].startswith(TEXT)


def test_the_sandbox_records_what_it_did_not_scan(tmp_path: Path) -> None:
    root = tmp_path / "live"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "bomb.bz2").write_bytes(bz2.compress(b"\0" * (65 << 20)))  # 65 MiB of zeros, ~100 bytes
    (root / "src.py").write_text("x = 1\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "c")
    sb = build_sandbox(root, "HEAD", scenario(), tmp_path / "sb")
    assert sb.unscanned == [f"bomb.bz2: not scanned past {64 << 20} bytes decoded: too big"]
