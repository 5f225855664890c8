"""caisson._bidi: the display order of a paragraph (UAX #9), against ICU and FriBidi.

tests/caisson/test_bidi/cases.txt holds 1,000 random paragraphs over every bidi type, each
with the display order that ICU 72.1 and FriBidi 1.0.16 both give it at each paragraph
direction (scripts/bidi_cases.py, in BidiCharacterTest.txt's notation): our order must be
theirs, character for character.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from caisson._bidi import _REMOVED, _levels, _order, _types, paragraph_level, visual

def _case(line: str) -> tuple[str, int | None, list[int]]:
    codes, direction, order = line.split(";")
    return "".join(chr(int(c, 16)) for c in codes.split()), None if direction == "2" else int(direction), \
        [int(i) for i in order.split()]


CASES = [_case(line) for line in (Path(__file__).parent / "test_bidi" / "cases.txt").read_text().splitlines()]


def test_the_cases_cover_every_type_and_level():
    types = {t for text, _, _ in CASES for t in _types(text)}
    assert types >= {"L", "R", "AL", "EN", "ES", "ET", "AN", "CS", "NSM", "BN", "B", "S", "WS", "ON", "LRE", "LRO",
                     "RLE", "RLO", "PDF", "LRI", "RLI", "FSI", "PDI"} - {"B"}
    assert {level for _, level, _ in CASES} == {None, 0, 1} and len(CASES) > 2500


@pytest.mark.parametrize("chunk", range(10))
def test_the_display_order_is_icus_and_fribidis(chunk):
    for text, level, expected in CASES[chunk::10]:
        order = _order(_levels(text, level))
        kept = [i for i in order if _types(text[i])[0] not in _REMOVED]
        assert kept == expected, (ascii(text), level)


def _shown(stored: str) -> str:
    return "".join(c for c in visual(stored) if c not in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200f")


@pytest.mark.parametrize(("stored", "shown"), [
    ("rt-canary-\u202eq1x9\u202c", "rt-canary-9x1q"),  # an override reverses its run
    ("rt-canary-\u2067q1x9\u2069", "rt-canary-q1x9"),  # an isolate alone does not: L stays L
    ("rt-canary\u20679x1q-\u2069", "rt-canary-9x1q"),  # the isolate's neutral at its end moves
    ("rt-canary\u200f9-\u200fx1q", "rt-canary-9x1q"),  # between two RLMs
    ("\u202eq1x9-\u202dcanary\u202c-tr\u202c", "rt-canary-9x1q"),  # nested overrides (Trojan Source)
    ("a (\u05d0\u05d1) b", "a (\u05d1\u05d0) b"),  # a right-to-left run in a left-to-right paragraph
    ("\u202e(ab)\u202c", "(ba)"),  # brackets of a right-to-left run are mirrored (L4)
])
def test_examples(stored, shown):
    assert _shown(stored) == shown


def test_paragraph_level():
    assert [paragraph_level(s) for s in ("abc", "\u05d0bc", "\u2067\u05d0\u2069abc", "123", "")] == [0, 1, 0, 0, 0]


@given(st.text(st.sampled_from(sorted({c for text, _, _ in CASES for c in text}))))
def test_visual_is_a_permutation(s):
    brackets = str.maketrans("()[]", "((((")
    assert sorted(visual(s).translate(brackets)) == sorted(s.translate(brackets))
