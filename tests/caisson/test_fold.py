"""caisson._fold: the one normal form of every leak match (text in, folded text out)."""

from __future__ import annotations

import re
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from caisson._confusables import PROTOTYPES
from caisson._fold import _prefold, _step2, find_term, fold, fold_term

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
    ("\u3164hangul\u115ffiller", "hangulfiller"),  # default ignorable letters
])
def test_other_members_of_the_kind(text, plain):
    assert fold(text) == plain


def test_capital_and_small_lookalikes_fold_by_their_folded_form():
    # Greek capital iota imitates l, its small form i: case folding comes first, so both are i
    assert fold("\u0399 \u03b9 \u0406 \u0456 \u04c0 \u04cf") == "i i i i l l"


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
