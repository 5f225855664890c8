"""Red team, caisson#28 item 5: a leak that changes its spelling, past the backstop and the scan.

The kind: text the same to a reader and different as bytes. Each case below reads as the
canary ``rt-canary-9x1q`` (or the question's prompt) to a person, or is undone by a tool
the chamber ships (``base32``, ``zcat``), and got past `caisson.replay.scoring.grade`'s
backstop or the containment scan before the fix; each check raises `Missed` when it
gets through again.

Out of scope here, as docs/architecture.md says no scan can catch them: ROT13, XOR, a
cipher, a term split over two files, leetspeak (``c4n4ry``: another spelling to a reader
too), Morse, and the encodings the scan does not try (listed there with the control that
covers them).
"""

from __future__ import annotations

import base64
import codecs
import gzip
import quopri
import zlib
from pathlib import Path

import pytest

from caisson.chamber._containment import containment_scan
from caisson.replay.scoring import grade
from caisson.scenario import Question, Scenario

CANARY = "rt-canary-9x1q"
PROMPT = "Which function loads the configuration file and where is it defined?"
QUESTION = Question(id="q1", prompt=PROMPT)


class Missed(AssertionError):
    """The leak got through: raised by the one check each test is about."""


def _backstop(answer: str, terms: tuple[str, ...] = (CANARY,)) -> None:
    g = grade(QUESTION, answer, provenance_terms=terms)
    assert g.score_if_clean == 1.0  # the set-up: a non-empty answer, no required facts
    if g.leak_cited is None:
        raise Missed(f"{answer!r} scored {g.score}: the backstop saw no provenance term")


# --- the answer backstop: what markdown renders, and what the fold leaves alone -----------

RENDERED_THE_SAME = {
    # markdown renders each as the canary's text (CommonMark 0.31: links, emphasis by "_",
    # an empty link or image); the backstop stripped tags, comments, "*", "`", "~~" and escapes only
    "a link around part of it": f"The key says [rt-can](https://example.invalid)ary-9x1q.",
    "underscore emphasis": "The key says rt-_canary_-9x1q.",
    "an empty link inside it": "The key says rt-can[]()ary-9x1q.",
    "an empty image inside it": "The key says rt-can![](x.png)ary-9x1q.",
    # U+202E RIGHT-TO-LEFT OVERRIDE: "q1x9" is displayed "9x1q"; the fold drops the control
    # and keeps the stored order
    "right-to-left override": "The key says rt-canary-\u202eq1x9\u202c.",
    # U+2067 RIGHT-TO-LEFT ISOLATE: "9x1q-" is displayed "-9x1q" (its letters and digits keep
    # their order, UAX #9 I2; the hyphen at its start takes the isolate's direction, N1)
    "right-to-left isolate": "The key says rt-canary\u20679x1q-\u2069.",
    # small capitals (U+1D1B, U+1D00, U+0274): neither NFKD nor confusables.txt maps them
    "small capitals": "The key says \u0280\u1d1b-\u1d04\u1d00\u0274\u1d00\u0280\u028f-9x1q.",
    # negative circled and squared letters (U+1F150.., U+1F170..): no decomposition
    "negative circled letters": "The key says " + "".join(
        chr(0x1F150 + ord(c) - 97) if c.isalpha() else c for c in CANARY) + ".",
    "negative squared letters": "The key says " + "".join(
        chr(0x1F170 + ord(c) - 97) if c.isalpha() else c for c in CANARY) + ".",
    # the digits in Arabic-Indic (U+0669 is 9, U+0661 is 1: unicodedata.digit agrees); the
    # fold mapped U+0661 to "l" by confusables.txt, so the term was further away still
    "Arabic-Indic digits": "The key says rt-canary-\u0669x\u0661q.",
    # U+2500 BOX DRAWINGS LIGHT HORIZONTAL and U+30FC KATAKANA-HIRAGANA PROLONGED SOUND MARK as hyphens
    "box-drawing hyphens": "The key says rt\u2500canary\u25009x1q.",
    "katakana prolonged-sound hyphens": "The key says rt\u30fccanary\u30fc9x1q.",
}


@pytest.mark.parametrize("case", list(RENDERED_THE_SAME))
def test_the_backstop_catches_a_canary_that_reads_the_same(case):
    _backstop(RENDERED_THE_SAME[case])


def test_a_right_to_left_isolate_around_left_to_right_letters_reorders_nothing():
    """As first filed, the isolate case was "rt-canary-<RLI>q1x9<PDI>": every character in it
    is left to right or a European digit, so it is displayed "q1x9" (UAX #9 I2 puts them all
    at level 2, reversed twice: ICU 72.1 and FriBidi 1.0.16 agree). It is not the canary to
    a reader, and must not be cited."""
    g = grade(QUESTION, "The key says rt-canary-\u2067q1x9\u2069.", provenance_terms=(CANARY,))
    assert g.leak_cited is None


def test_a_blank_that_folds_to_nothing_still_separates_words():
    _backstop("The key's phrase is purple\u3164elephant.", terms=("purple elephant",))


# --- the containment scan -----------------------------------------------------------------

KEY = f"answers:\n  q1: config.py:12 ({CANARY})\n".encode()


def _compress_z(data: bytes) -> bytes:
    """compress(1)'s .Z (LZW, block mode, 16-bit maximum) of a short input: fewer than
    255 new codes, so every code is 9 bits and no width change (nor its padding) occurs.
    The chamber's ``zcat`` and ``uncompress`` (gzip 1.12) decode it."""
    table = {bytes([i]): i for i in range(256)}
    free, word, codes = 257, b"", []  # 256 is CLEAR in block mode
    for byte in data:
        longer = word + bytes([byte])
        if longer in table:
            word = longer
            continue
        codes.append(table[word])
        table[longer], free, word = free, free + 1, bytes([byte])
    codes.append(table[word])
    assert free <= 512
    acc = bits = 0
    out = bytearray(b"\x1f\x9d\x90")  # magic, then block mode | 16 bits
    for code in codes:
        acc |= code << bits
        bits += 9
        while bits >= 8:
            out.append(acc & 0xFF)
            acc >>= 8
            bits -= 8
    return bytes(out + (bytes([acc]) if bits else b""))


def _nested_gzip(data: bytes, layers: int) -> bytes:
    for _ in range(layers):
        data = gzip.compress(data)
    return data


IN_THE_TREE = {
    # the needles that gate the UTF-16 guesses were compared unfolded: one Cyrillic "а" in
    # the longest word and the guess was never decoded, though the fold would have matched it
    "UTF-16LE without a BOM, a Cyrillic a in the canary": f"x rt-c\u0430nary-9x1q y\n".encode("utf-16-le"),
    # coreutils `base32 -d` is in the chamber, as `base64 -d` is
    "base32": base64.b32encode(KEY),
    # compress(1)'s format: the chamber's `zcat` and `uncompress` read it without help
    "compress .Z": _compress_z(KEY),
    # a zlib stream that does not start the file (a PDF's FlateDecode stream, any container)
    "zlib stream at an offset (a PDF object)": b"%PDF-1.4\n1 0 obj\n<</Length 60/Filter/FlateDecode>>\nstream\n"
                                                + zlib.compress(KEY) + b"\nendstream\nendobj\n",
    # five gzip layers (MAX_DEPTH was 4); `zcat | zcat | zcat | zcat | zcat` reads it
    "gzip in gzip, five deep": _nested_gzip(KEY, 5),
    # an HTML page (a published report) renders these as the canary; the backstop unescaped them, the scan not
    "HTML character references": b"<p>key: rt&#8209;canary&#x2011;9x1q</p>\n",
    "right-to-left override": "key: rt-canary-\u202eq1x9\u202c\n".encode(),
}


@pytest.mark.parametrize("case", list(IN_THE_TREE))
def test_the_scan_finds_the_canary_however_the_tree_holds_it(tmp_path: Path, case):
    (tmp_path / "f").write_bytes(IN_THE_TREE[case])
    scan = containment_scan(tmp_path, ["f"], Scenario(name="t", questions=[QUESTION], leak_terms=[CANARY]))
    assert scan.unscanned == []
    if not scan.hits:
        raise Missed(f"{case}: no hit")


def test_the_scan_finds_a_prompt_whose_spaces_are_blanks_that_fold_to_nothing(tmp_path: Path):
    (tmp_path / "notes.md").write_text("question: " + PROMPT.replace(" ", "\u3164") + "\n")
    scan = containment_scan(tmp_path, ["notes.md"], Scenario(name="t", questions=[QUESTION]))
    if not scan.hits:
        raise Missed("no window of the prompt found")


# --- what the scan does not try: docs/architecture.md names it and the control that covers it

NOT_TRIED = {
    # each spelling, and the words docs/architecture.md ("Leak matching folds both sides") names it by
    "ROT13": (codecs.encode(KEY.decode(), "rot13").encode(), "ROT13"),
    "Ascii85": (base64.a85encode(KEY), "Ascii85"),
    "quoted-printable": (quopri.encodestring(KEY, quotetabs=True).replace(b"-", b"=2D"), "quoted-printable"),
    "a raw deflate stream inside a file": (b"header\n" + zlib.compress(KEY)[2:-4] + b"\ntrailer\n",
                                           "a raw deflate stream that\ndoes not start a file"),
}


@pytest.mark.parametrize("case", list(NOT_TRIED))
def test_what_the_scan_does_not_try_is_documented(tmp_path: Path, case):
    """These get past the scan, by design: the doc lists them, and the excluded read and the
    answer backstop are the controls that cover them. A scan that learns one fails here,
    so the doc is changed with it."""
    data, named = NOT_TRIED[case]
    (tmp_path / "f").write_bytes(data)
    scan = containment_scan(tmp_path, ["f"], Scenario(name="t", questions=[QUESTION], leak_terms=[CANARY]))
    assert scan.hits == [] and scan.unscanned == []
    doc = (Path(__file__).parents[2] / "docs" / "architecture.md").read_text()
    section = doc[doc.index("### Leak matching folds both sides"):doc.index("### The tool audit")]
    assert " ".join(named.split()) in " ".join(section.split())
