"""caisson._fold: the one normal form of every leak match (text in, folded text out)."""

from __future__ import annotations

import re
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from caisson._confusables import PROTOTYPES
from caisson._fold import _prefold, _step2, find_term, fold, fold_ascii_part, fold_readings, fold_term

CANARY = "rt-canary-9x1q"

# Each spelling reads as the ASCII one and differs as bytes.
RESPELT = {
    "non-breaking hyphens U+2011": "rt\u2011canary\u20119x1q",
    "hyphens U+2010": "rt\u2010canary\u20109x1q",
    "en dash": "rt\u2013canary\u20139x1q",
    "em dash": "rt\u2014canary\u20149x1q",
    "minus sign": "rt\u2212canary\u22129x1q",
    "small and fullwidth hyphen-minus": "rt\ufe63canary\uff0d9x1q",
    "zero-width joiner": "rt-can\u200dary-9x1q",
    "zero-width space and non-joiner": "rt-\u200bcanary\u200c-9x1q",
    "soft hyphens": "rt-ca\u00adna\u00adry-9x1q",
    "word joiner and BOM": "rt\u2060-canary-\ufeff9x1q",
    "bidi controls": "\u202ert-canary-9x1q\u202c\u2066",
    "tag characters": "rt-canary-9x1q\U000e0041\U000e007f",
    "fullwidth": "ｒｔ－ｃａｎａｒｙ－９ｘ１ｑ",
    "mathematical bold": "\U0001d42b\U0001d42d-canary-9x1q",
    "Cyrillic a": "rt-c\u0430n\u0430ry-9x1q",
    "Cyrillic capitals": "RT-C\u0410NARY-9X1Q",
    "mixed case": "Rt-CaNaRy-9X1q",
    "combining low line": "".join(c + "\u0332" for c in CANARY),
    "combining long stroke overlay": "rt-c\u0336anary-9x1q",
    "accents": "rt-c\u00e1n\u00e4ry-9x1q",
    "enclosing circle": "rt-canary-9x1q\u20dd",
    "variation selector": "rt-canary\ufe0f-9x1q",
}


@pytest.mark.parametrize("name", list(RESPELT))
def test_a_respelt_term_folds_to_the_term(name):
    assert fold(RESPELT[name]) == CANARY
    assert next(find_term(fold(f"see {RESPELT[name]} here"), fold_term(CANARY))) == 4


@pytest.mark.parametrize(("text", "plain"), [
    ("functi\u043en", "function"),  # Cyrillic o
    ("functi\u03bfn", "function"),  # Greek omicron
    ("\u13aa\u13a1", "ar"),  # CHEROKEE LETTER GO and E, which look like A and R
    ("d\u0131v", "div"),  # dotless i
    ("\ufb01le", "file"),  # the fi ligature
    ("no\u00a0break\u202fthin", "no break thin"),  # NBSP, narrow NBSP: a space
    ("\u201cquoted\u201d \u2018single\u2019 \u00abguillemets\u00bb", "\"quoted\" 'single' \"guillemets\""),
    ("don\u02bct", "don't"),  # MODIFIER LETTER APOSTROPHE
    ("\u3164hangul\u115ffiller\uffa0a\u2800b", " hangul filler a b"),  # drawn as blanks: spaces
    ("\u0280\u1d1b \u1d04\u1d00\u0274\u1d00\u0280\u028f \ua730\u1d0d", "rt canary fm"),  # small capitals
    ("\U0001f161\U0001f163 \U0001f181\U0001f183 \U0001f18a", "rt rt p"),  # negative circled, squared
    ("\U0001f1f7\U0001f1f9", "rt"),  # regional indicators, unpaired: their letters
    ("\u0669\u0661 \u096f\u0967 \u09ef \u1369 \u0e51", "91 91 9 1 1"),  # digits of other scripts
    ("\u277e\u278a\u24ff \u24eb \u2789", "910 11 10"),  # dingbat and negative circled digits, numbers
    ("\u0142\u00f8\u0111\u0127 \u0180\u0268", "lodh bi"),  # letters with a stroke: confusables.txt + U+0338
    ("a\u2500b\u2501c\u30fcd\uff70e\u31d0f", "a-b-c-d-e-f"),  # one horizontal stroke: a dash
    ("\u4e00\u3161", "\u4e00\u1173"),  # ... but not the letters drawn so (CJK one, Hangul eu)
])
def test_other_members_of_the_kind(text, plain):
    assert fold(text) == plain


def test_capital_and_small_lookalikes_fold_by_their_folded_form():
    # Greek capital iota imitates l, its small form i: case folding comes first, so both are i
    assert fold("\u0399 \u03b9 \u0406 \u0456 \u04c0 \u04cf") == "i i i i l l"
    # an exact lookalike outranks one with a mark: capital eta is H, small eta (n + U+0329) too
    assert fold("\u0397 \u03b7 \u0398 \u03b8") == "h h o o"


def test_a_digit_folds_by_its_value_not_its_shape():
    """U+0661 ARABIC-INDIC DIGIT ONE looks like l, U+09ED BENGALI DIGIT SEVEN like 9:
    unicodedata.digit decides, as a reader of the script reads them."""
    assert fold("\u0661 \u09ed \u0966") == "1 7 0"
    for cp in range(0x20000):
        c = chr(cp)
        if unicodedata.category(c) == "Nd":
            assert fold(c) == str(unicodedata.digit(c)), f"U+{cp:04X}"


def test_ascii_is_only_lower_cased():
    text = "".join(map(chr, range(128)))
    assert fold(text) == text.lower()
    assert fold("0O1lI|") == "0o1li|"  # no ASCII lookalike folds to another


@pytest.mark.parametrize("text", ["a\u2502b", "3\u00d74", "a\u2223b", "a\u05c0b"])
def test_a_separator_never_becomes_a_letter(text):
    """Confusables maps BOX DRAWINGS LIGHT VERTICAL, MULTIPLICATION SIGN, DIVIDES and HEBREW
    PASEQ to l and x; folding them so would join the words they separate."""
    assert re.findall(r"\w+", fold(text)) == re.findall(r"\w+", text)


def test_no_confusable_turns_a_separator_into_word_characters():
    for cp in PROTOTYPES:
        c = chr(cp)
        if unicodedata.normalize("NFKD", c) == c and not re.match(r"\w", c):
            assert not re.search(r"\w", fold(c)), f"U+{cp:04X} {unicodedata.name(c, '?')} -> {fold(c)!r}"


@settings(max_examples=300, deadline=None)
@given(st.text(), st.text())
def test_fold_is_per_character(a, b):
    """One table, either path (dense text in one translate, sparse text run by run): the
    fold of a concatenation is the concatenation of the folds."""
    assert fold(a + b) == fold(a) + fold(b)


STEP2 = _step2()


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(exclude_categories=["Cs", "Mc"])))
def test_fold_is_nfkd_casefold_and_the_character_map(text):
    """The table agrees with the pipeline it stands for (spacing marks, whose canonical order
    the per-character table does not restore, left out)."""
    assert fold(text) == _prefold(text).translate(STEP2)


@given(st.text())
def test_line_feeds_are_kept(text):
    assert fold(text).count("\n") == text.count("\n")


def test_a_dense_text_folds_as_a_sparse_one():
    cyrillic = "\u0413\u0434\u0435 \u0444\u0443\u043d\u043a\u0446\u0438\u044f " * 50  # dense
    doc = "A \u201cquoted\u201d word, and plain ASCII text around it. " * 50  # sparse
    binary = bytes(range(256)).decode("utf-8", "replace") * 20  # U+FFFD between
    for text in (cyrillic, doc, binary):
        assert fold(text) == "".join(fold(c) for c in text)


@pytest.mark.parametrize(("text", "term", "found"), [
    ("the answer  key", "Answer Key", [4]),
    ("the answer\nkey", "answer key", [4]),  # a term split over a line break
    ("the answer\t \n key", "answer key", [4]),
    ("answerkey", "answer key", []),  # a space in the term needs whitespace in the text
    ("aaaa", "aa", [0, 1, 2]),
    ("anything", "\u200b", []),  # folds to nothing: found nowhere
])
def test_find_term(text, term, found):
    assert list(find_term(fold(text), fold_term(term))) == found


def test_fold_term_makes_whitespace_one_space():
    assert fold_term("  Answer\u00a0\n KEY\t") == "answer key"
    assert fold_term("\u200b\u00ad") == ""


@pytest.mark.parametrize(("text", "readings"), [
    ("plain ASCII", ["plain ascii"]),
    ("caf\u00e9", ["cafe"]),
    ("rt-canary-\u202eq1x9\u202c", ["rt-canary-q1x9", "rt-canary-9x1q"]),  # RLO ... PDF
    ("rt-canary\u20679x1q-\u2069", ["rt-canary9x1q-", "rt-canary-9x1q"]),  # RLI ... PDI
    ("rt-canary-\u2067q1x9\u2069", ["rt-canary-q1x9"]),  # left-to-right letters keep their order
    ("rt-canary\u200f9-\u200fx1q", ["rt-canary9-x1q", "rt-canary-9x1q"]),  # RIGHT-TO-LEFT MARKs
    ("\u202eq1x9-\u202dcanary\u202c-tr\u202c", ["q1x9-canary-tr", "rt-canary-9x1q"]),  # nested (Trojan Source)
    ("\u05d0 x", ["\u05d0 x", "x \u05d0"]),  # a right-to-left paragraph, and left to right
    ("a\n\u202eb c\u202c\nd", ["a\nb c\nd", "\nc b\n"]),  # the reordered paragraphs alone, lines kept
    ("\u202eab\ufffd\u202c\n\u202ecd\u202c", ["ab\ufffd\ncd", "\ndc"]),  # not a binary's line
])
def test_fold_readings(text, readings):
    assert fold_readings(text) == readings


@given(st.text())
def test_the_first_reading_is_the_fold(text):
    readings = fold_readings(text)
    assert readings[0] == fold(text) and len(set(readings)) == len(readings)
    assert all(r.count("\n") == text.count("\n") for r in readings)


@given(st.text(), st.sampled_from(["canary", "configuration", "9x1q"]))
def test_the_ascii_part_holds_every_ascii_term_the_fold_holds(text, term):
    for spelt in ("", "c\u0430n\u0430ry", "\uff43anary", "\U0001d41cnfiguration", "ca\u00adnary"):
        both = text + spelt + text
        if term in fold(both):
            assert term in fold_ascii_part(both)
