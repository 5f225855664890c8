"""One normal form for every leak match: text that reads the same folds the same.

`fold` is the only normaliser the leak matches use (the containment scan,
`caisson.chamber._containment`, and the answer's leak backstop, `caisson.replay.scoring`);
both sides of a match are folded. `fold` keeps a text's line feeds and lower-cases ASCII
only; `fold_term` also makes each whitespace run one space, which `find_term` matches
across any whitespace; `fold_readings` gives the stored and, where bidirectional text
reorders it, the displayed reading. The steps, the character classes and the tables they
come from: docs/architecture.md, "The fold, step by step".
"""

from __future__ import annotations

import bisect
import functools
import re
import unicodedata
from collections.abc import Iterator

from caisson._bidi import paragraph_level, visual
from caisson._confusables import DASH_STROKES, PROTOTYPES

__all__ = ["find_term", "fold", "fold_ascii_part", "fold_readings", "fold_term"]

_DASHES = (0x2212, 0x2796, 0x02D7, 0x2043)
"""Dash lookalikes outside category Pd (MINUS SIGN, HEAVY MINUS SIGN, MODIFIER LETTER MINUS
SIGN, HYPHEN BULLET), each mapped to `-` by confusables.txt."""

_QUOTES = {
    "'": "\u2018\u2019\u201a\u201b\u2032\u2035\u2039\u203a\u02b9\u02bb\u02bc\u02bd\u02c8\u0374",
    '"': "\u201c\u201d\u201e\u201f\u2033\u2036\u00ab\u00bb\u301d\u301e\u301f\u02ba\u02ee",
}
"""ASCII quote -> the quotation marks, primes and apostrophe letters folded to it."""

_BLANKS = (0x115F, 0x1160, 0x2800)
"""Drawn as a blank, yet no whitespace: HANGUL CHOSEONG and JUNGSEONG FILLER (default
ignorable letters, Lo; NFKD maps HANGUL FILLER U+3164 and its halfwidth U+FFA0 to U+1160)
and BRAILLE PATTERN BLANK (So)."""

_NAMED = (
    (re.compile(r"(.+) LETTER SMALL CAPITAL (.+)"), r"\1 CAPITAL LETTER \2"),
    (re.compile(r"(?:CROSSED )?NEGATIVE (?:CIRCLED|SQUARED) (LATIN CAPITAL LETTER .)"), r"\1"),
    (re.compile(r"REGIONAL INDICATOR SYMBOL LETTER (.)"), r"LATIN CAPITAL LETTER \1"),
)
"""Letters without a decomposition, and the letter each is drawn as, by Unicode name: a small
capital (U+1D1B `ᴛ`: LATIN CAPITAL LETTER T), a negative circled or squared capital
(U+1F150, U+1F170), a regional indicator (U+1F1E6, which shows as its letter when unpaired)."""

_PLANES = (range(0x20000), range(0x2F800, 0x2FA20), range(0xE0000, 0xE1000))
"""Where Unicode puts every character that folds to something else: planes 0 and 1, the
CJK compatibility ideographs of plane 2, the tags and variation selectors of plane 14."""

_SPARSE = re.compile("[^\x00-\x7f\ufffd]+")
"""The runs `fold` maps in a mostly ASCII text: non-ASCII characters but U+FFFD, the
replacement character a binary's bytes decode to."""


def _prefold(text: str) -> str:
    return unicodedata.normalize("NFKD", unicodedata.normalize("NFKD", text).casefold())


def _is_word(text: str) -> bool:
    return re.fullmatch(r"\w+", text) is not None


def _number(c: str) -> str | None:
    """The ASCII digits of a decimal digit of any script (Nd, by `unicodedata.digit`), or of
    a digit or circled number without a decomposition (No: Ethiopic, dingbat and negative
    circled digits, U+24EB NEGATIVE CIRCLED NUMBER ELEVEN)."""
    category = unicodedata.category(c)
    if category == "Nd":
        return str(unicodedata.digit(c))
    if category == "No" and not unicodedata.decomposition(c):
        value = unicodedata.numeric(c, None)
        if value is not None and value == int(value) and (
                unicodedata.digit(c, None) is not None or "CIRCLED" in unicodedata.name(c, "")):
            return str(int(value))
    return None


def _step2() -> dict[int, str | None]:
    """The character map of step 2, keyed by the code points that step 1 yields."""
    table: dict[int, str | None] = {}
    symbols_and_cased: list[int] = []  # where a name of `_NAMED` is: Ll (U+1D1B), So (U+1F150)
    for plane in _PLANES:
        for cp in plane:
            c = chr(cp)
            category = unicodedata.category(c)
            if category in ("Cf", "Mn", "Me"):
                table[cp] = None
            elif category == "Pd":
                table[cp] = "-"
            elif category in ("Nd", "No") and cp > 0x7F and _number(c) is not None:
                table[cp] = _number(c)
            elif category in ("Ll", "Lu", "So"):
                symbols_and_cased.append(cp)
    table.update(dict.fromkeys(_BLANKS, " "))
    table.update(dict.fromkeys(_DASHES, "-"))
    for ascii_quote, marks in _QUOTES.items():
        table.update(dict.fromkeys(map(ord, marks), ascii_quote))

    def key_of(cp: int) -> str | None:
        key = _prefold(chr(cp)).translate(table)
        if len(key) != 1 or key.isascii() or ord(key) in table:
            return None  # step 1 handles it, or it is not one character, or already mapped
        return key

    lookalikes: dict[int, tuple[bool, bool, int, str]] = {}
    for cp, prototype in PROTOTYPES.items():
        key = key_of(cp)
        if key is None:
            continue
        target = _prefold(prototype).translate(table).replace("''", '"')  # combining marks dropped
        if not _is_word(chr(cp)) and re.search(r"\w", target):
            continue  # a separator must not become part of a word
        rank = (not prototype.isascii(), key != chr(cp), cp)  # an exact lookalike, the key's own, then by code point
        if ord(key) not in lookalikes or rank < lookalikes[ord(key)][:3]:
            lookalikes[ord(key)] = (*rank, target)
    table.update({k: target for k, (_, _, _, target) in lookalikes.items()})
    for cp in DASH_STROKES:
        key = key_of(cp)
        if key is not None and unicodedata.category(key) != "Lo":  # not 一, ㅡ: letters of words
            table[ord(key)] = "-"
    named: dict[int, str] = {}
    for cp in symbols_and_cased:
        name = unicodedata.name(chr(cp), "")
        for rule, base in _NAMED:
            m = rule.fullmatch(name)
            if m is None or key_of(cp) != chr(cp):
                continue
            try:
                target = _prefold(unicodedata.lookup(m.expand(base))).translate(table)
            except KeyError:
                continue
            if target.isascii() and target:
                named[cp] = target
    table.update(named)
    return table


@functools.cache  # about 150 ms of CPU, once, at the first non-ASCII text of a process
def _table() -> dict[int, str | None]:
    """Both steps as one map of single characters: code point -> its fold, for every
    character that folds to something else (ASCII capitals included).

    Step 1 is the same character by character (NFKD decomposes each character alone, the
    Hangul syllables by rule, and only reorders combining marks, which step 2 drops; case
    folding is per character), so one `str.translate` folds a whole text: 40-50 ns a
    character, where NFKD, case folding and a translate took 70-200.
    """
    step2 = _step2()
    table: dict[int, str | None] = {}
    for plane in _PLANES:
        for cp in plane:
            c = chr(cp)
            if cp in step2 or c.casefold() != c or unicodedata.decomposition(c) or 0xAC00 <= cp <= 0xD7A3:
                folded = _prefold(c).translate(step2)
                if folded != c:
                    table[cp] = folded or None
    return table


def fold(text: str) -> str:
    """The normal form of a text for leak matching (docs/architecture.md, "The fold, step by step").

    Args:
        text: any text.

    Returns:
        The folded text: as many line feeds as `text`, other characters dropped or
        replaced; an ASCII text is only lower-cased.
    """
    if text.isascii():
        return text.lower()
    table = _table()
    others = len(text) - len(text.encode("ascii", "ignore")) - text.count("\ufffd")
    if others * 16 > len(text):  # dense: one pass is cheaper than a call per run
        return text.translate(table)
    mapped = _SPARSE.sub(lambda m: m.group().translate(table), text)
    return mapped.encode("utf-8", "surrogatepass").lower().decode("utf-8", "surrogatepass")  # ASCII only


_SEPARATORS = "\n\r\x1c\x1d\x1e\x85\u2029"
"""The paragraph separators (bidi type B)."""

_REORDERED = re.compile("[\u0590-\u08ff\u200f\u202a-\u202e\u2066-\u2069\ufb1d-\ufdff\ufe70-\ufefe"
                        "\U00010800-\U00010fff\U0001e800-\U0001efff]")
"""What may make a paragraph's display order read otherwise than its stored one: an
explicit directional control (U+202A-U+202E, U+2066-U+2069), RIGHT-TO-LEFT MARK, or a
character of the blocks where the right-to-left and Arabic letters and digits are (bidi
types R, AL, AN; ARABIC LETTER MARK U+061C among them): Hebrew to Arabic Extended-A, their
presentation forms, the right-to-left ranges of plane 1 (UAX #9, table 4, and the default
ranges of DerivedBidiClass.txt)."""

_PARAGRAPH_END = re.compile(f"[{_SEPARATORS}]")


def _reordered_paragraphs(text: str) -> list[tuple[int, int]]:
    """[start, end) of each paragraph that `_REORDERED` matches and that holds no U+FFFD
    REPLACEMENT CHARACTER: bytes that are not text (a binary's), whose reordering (about
    1.5 us a character) no reader sees."""
    found: list[tuple[int, int]] = []
    ends: list[int] | None = None
    done = 0
    for m in _REORDERED.finditer(text):
        if m.start() < done:
            continue  # in the paragraph just seen
        if ends is None:
            ends = [e.start() for e in _PARAGRAPH_END.finditer(text)] + [len(text)]
        k = bisect.bisect_left(ends, m.start())
        start, done = (ends[k - 1] + 1 if k else 0), ends[k]
        if text.find("\ufffd", start, done) == -1:
            found.append((start, done))
    return found


@functools.cache  # one pass over the BMP, after `_table`: a binary's UTF-16 guesses (caisson.chamber._decode)
def _ascii_folding() -> re.Pattern[str]:
    """A run of characters whose fold has an ASCII character or is empty: of the BMP as
    ranges (sre tests a class of BMP ranges in a bitmap, in one step) and every character
    past it (whose fold `fold` then computes)."""
    table = _table()
    cps = [cp for cp in range(0x10000)
           if cp < 0x80 or table.get(cp, "") is None or re.search("[\x00-\x7f]", table.get(cp, chr(cp)))]
    spans = []
    start = prev = cps[0]
    for cp in [*cps[1:], -1]:
        if cp != prev + 1:
            spans.append(re.escape(chr(start)) + ("" if start == prev else "-" + re.escape(chr(prev))))
            start = cp
        prev = cp
    return re.compile("[" + "".join(spans) + "\U00010000-\U0010ffff]+")


def fold_ascii_part(text: str) -> str:
    """The fold of what of a text can fold to ASCII: its runs of characters whose fold has
    an ASCII character or is empty (and of every character past the BMP), one a line.
    An ASCII term found in `fold(text)` is found in it too.

    Args:
        text: any text, e.g. a binary's bytes decoded as UTF-16.

    Returns:
        A folded text: on noise a tenth as long as `fold(text)`, in a tenth of the time.
    """
    return fold("\n".join(_ascii_folding().findall(text)))


def fold_readings(text: str) -> list[str]:
    """The folded readings of a text: as stored, and as displayed when that reads otherwise.

    A paragraph that `_REORDERED` matches is put in display order (`caisson._bidi.visual`,
    the Unicode Bidirectional Algorithm) twice: with the direction of its first strong
    character (UAX #9 P2, P3: what a browser does with `dir=auto`) and left to right (an
    editor's or terminal's default). So `rt-canary-<RLO>q1x9<PDF>` reads `rt-canary-9x1q`.

    Args:
        text: any text.

    Returns:
        `fold(text)`, then the fold of each display order that differs from it, of the
        reordered paragraphs alone (every other line empty); each has the line feeds of
        `text`, so a line number in one is a line number in all.
    """
    if text.isascii():
        return [text.lower()]
    paragraphs = _reordered_paragraphs(text)
    if not paragraphs:
        return [fold(text)]
    between: list[str] = []  # fold is per character: fold the pieces, each once
    stored: list[str] = []
    auto: list[str] = []
    ltr: list[str] = []
    done = 0
    for start, end in paragraphs:
        paragraph = text[start:end]
        between.append(fold(text[done:start]))
        stored.append(fold(paragraph))
        ltr.append(fold(visual(paragraph, 0)))
        auto.append(ltr[-1] if paragraph_level(paragraph) == 0 else fold(visual(paragraph, 1)))
        done = end
    tail = fold(text[done:])
    readings = ["".join(x for pair in zip(between, stored, strict=True) for x in pair) + tail]
    blank = ["\n" * b.count("\n") for b in between]  # what is not reordered reads as stored
    for folds in (auto, ltr):
        if folds != stored and (folds is ltr or auto != ltr):
            shown = "".join(x for pair in zip(blank, folds, strict=True) for x in pair)
            readings.append(shown + "\n" * tail.count("\n"))
    return readings


def fold_term(term: str) -> str:
    """A term as `find_term` takes it: folded, each whitespace run one space, stripped.

    Args:
        term: a leak or provenance term as the scenario spells it.

    Returns:
        The folded term; empty when nothing of it survives folding.
    """
    return " ".join(fold(term).split())


def find_term(folded: str, term: str) -> Iterator[int]:
    """Where a folded term occurs in a folded text.

    Args:
        folded: `fold` of the text searched.
        term: `fold_term` of the term; a space in it matches any run of whitespace, line
            feeds included. An empty term is found nowhere.

    Yields:
        The offset in `folded` of each occurrence, in order (overlapping ones included
        for a term without spaces).
    """
    if not term:
        return
    if " " not in term:
        at = folded.find(term)
        while at != -1:
            yield at
            at = folded.find(term, at + 1)
        return
    for m in re.finditer(r"\s+".join(map(re.escape, term.split(" "))), folded):
        yield m.start()
