"""One normal form for every leak match: text that reads the same folds the same.

`fold` is the only normaliser the leak matches use: the containment scan (question
windows and leak terms, `caisson.chamber._containment`) and the answer's leak backstop
(`caisson.replay.scoring`). Both sides of a match are folded, the text and the term. In
order:

1. **Compatibility decomposition and case folding**: NFKD, `str.casefold`, NFKD again, a
   form of the compatibility caseless match (The Unicode Standard, section 3.13, D146),
   left decomposed where NFKC would compose, so that step 2 can drop the marks. Fullwidth
   and mathematical letters, ligatures, superscripts and the no-break and typographic
   spaces become their plain forms, upper case lower. These are the running Python's
   Unicode tables (`unicodedata.unidata_version`: 14.0.0 on Python 3.11).
2. **One character map** (`str.translate`):
   - dropped: format characters (category Cf: soft hyphen U+00AD, U+200B-U+200D, word
     joiner U+2060, U+FEFF, the bidirectional controls, tag characters U+E0000-U+E007F),
     combining marks (Mn, Me: accents, and the decorations U+0332 LOW LINE, U+0336 LONG
     STROKE OVERLAY, U+20DD ENCLOSING CIRCLE, variation selectors) and the Hangul fillers
     U+115F, U+1160 (with U+3164 and U+FFA0, which NFKD maps to U+1160): the
     Default_Ignorable_Code_Point characters that are neither;
   - every dash to `-`: category Pd (U+2010-U+2015, U+2E3A, U+FE58, U+FE63, U+FF0D ...) and
     the minus signs U+2212, U+2796, U+02D7, U+2043;
   - quotes to `'` and `"` (`_QUOTES`);
   - a lookalike to its ASCII prototype in Unicode 17.0.0 confusables.txt
     (`caisson._confusables`): Cyrillic `о` and Greek `ο` to `o`, Cherokee `Ꭺ` to `a`,
     dotless `ı` to `i`, U+2215 DIVISION SLASH to `/`. A lookalike is keyed by its folded
     form (Cyrillic `О` folds to `о`, then maps); when two prototypes meet on one key, the
     key's own one wins (Greek `ι` is `i`, although capital `Ι` imitates `l`). A symbol or
     punctuation mark is never mapped to a letter or digit (`×` stays, `│` is not `l`):
     that would join the words it separates.

ASCII text is only lower-cased: ASCII characters never map to one another (`0` is not `O`,
`1` is not `l`), so a letter that imitates an ASCII digit folds to the letter it imitates
too (Cyrillic `О` to `o`), and a term spelt with the digit does not match it. Whitespace is
kept as it is, line feeds included, so a folded text has the lines of its original; a term
matches across any whitespace (`find_term`).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterator

from caisson._confusables import PROTOTYPES

__all__ = ["find_term", "fold", "fold_term"]

_DASHES = (0x2212, 0x2796, 0x02D7, 0x2043)
"""Dash lookalikes outside category Pd (MINUS SIGN, HEAVY MINUS SIGN, MODIFIER LETTER MINUS
SIGN, HYPHEN BULLET), each mapped to `-` by confusables.txt."""

_QUOTES = {
    "'": "\u2018\u2019\u201a\u201b\u2032\u2035\u2039\u203a\u02b9\u02bb\u02bc\u02bd\u02c8\u0374",
    '"': "\u201c\u201d\u201e\u201f\u2033\u2036\u00ab\u00bb\u301d\u301e\u301f\u02ba\u02ee",
}
"""ASCII quote -> the quotation marks, primes and apostrophe letters folded to it."""

_FILLERS = (0x115F, 0x1160)
"""HANGUL CHOSEONG and JUNGSEONG FILLER: default ignorable letters (Lo)."""

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


def _step2() -> dict[int, str | None]:
    """The character map of step 2, keyed by the code points that step 1 yields."""
    table: dict[int, str | None] = {}
    for plane in _PLANES:
        for cp in plane:
            category = unicodedata.category(chr(cp))
            if category in ("Cf", "Mn", "Me"):
                table[cp] = None
            elif category == "Pd":
                table[cp] = "-"
    table.update(dict.fromkeys(_FILLERS))
    table.update(dict.fromkeys(_DASHES, "-"))
    for ascii_quote, marks in _QUOTES.items():
        table.update(dict.fromkeys(map(ord, marks), ascii_quote))
    lookalikes: dict[int, tuple[bool, int, str]] = {}
    for cp, prototype in PROTOTYPES.items():
        key = _prefold(chr(cp)).translate(table)
        if len(key) != 1 or key.isascii() or ord(key) in table:
            continue  # step 1 handles it, or it is not one character, or already mapped
        target = _prefold(prototype).replace("''", '"')
        if not _is_word(chr(cp)) and re.search(r"\w", target):
            continue  # a separator must not become part of a word
        rank = (key != chr(cp), cp)  # the key's own mapping first, then by code point
        if ord(key) not in lookalikes or rank < lookalikes[ord(key)][:2]:
            lookalikes[ord(key)] = (*rank, target)
    table.update({k: target for k, (_, _, target) in lookalikes.items()})
    return table


@functools.cache  # about 110 ms of CPU, once, at the first non-ASCII text of a process
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
    """The normal form of a text for leak matching (see the module docstring).

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
