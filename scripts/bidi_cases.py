"""Write tests/caisson/test_bidi/cases.txt: display orders from two implementations of UAX #9.

Usage: python scripts/bidi_cases.py [N] > tests/caisson/test_bidi/cases.txt

Draws N random paragraphs (default 1500, seed 9) over the characters of `ALPHABET` (every
bidi type: letters of three scripts, digits, separators, brackets, marks, the explicit
controls) and asks ICU (libicuuc, `ubidi_setPara`, `ubidi_getVisualMap`) and FriBidi
(libfribidi, `fribidi_get_par_embedding_levels_ex`, `fribidi_reorder_line`) for each one's
display order, with the paragraph level from P2/P3, 0 and 1. A line is written where the two
agree (where they differ, each deviates from UAX #9 in a way the other does not: ICU 72
lets an overridden bracket pair and skips N0's rule for marks after a bracket, FriBidi 1.0
mis-resolves some neutrals after an isolate). Each line, as BidiCharacterTest.txt writes
its fields: the paragraph's code points in hex; the paragraph direction (0 left to right,
1 right to left, 2 auto: P2, P3); the indices of its characters in display order, those X9
removes left out.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import random
import sys
import unicodedata

ALPHABET = [*"ab9 -,.()[]\t+$%:/", "\u05d0", "\u05d1", "\u0627", "\u0628", "\u0661", "\u0662", "\u06f1",
            "\u0301", "\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068",
            "\u2069", "\u200e", "\u200f", "\u061c", "\u00ad", "\x00", "\x0b"]
REMOVED = {"RLE", "LRE", "RLO", "LRO", "PDF", "BN"}


def _icu():
    lib = ctypes.CDLL(ctypes.util.find_library("icuuc"))
    suffix = next(f"_{v}" for v in range(60, 100) if hasattr(lib, f"ubidi_open_{v}"))
    fn = {name: getattr(lib, name + suffix) for name in ("ubidi_open", "ubidi_setPara", "ubidi_getVisualMap",
                                                          "ubidi_close")}
    fn["ubidi_open"].restype = ctypes.c_void_p

    def order(s: str, level: int | None) -> list[int]:
        n = len(s)
        text = ctypes.create_string_buffer(s.encode("utf-16-le"), 2 * n)
        bidi = ctypes.c_void_p(fn["ubidi_open"]())
        err = ctypes.c_int(0)
        fn["ubidi_setPara"](bidi, text, n, ctypes.c_uint8(0xFE if level is None else level), None, ctypes.byref(err))
        out = (ctypes.c_int * n)()
        fn["ubidi_getVisualMap"](bidi, out, ctypes.byref(err))
        fn["ubidi_close"](bidi)
        assert err.value <= 0, err.value
        return list(out)

    return order


def _fribidi():
    lib = ctypes.CDLL(ctypes.util.find_library("fribidi"))
    u32 = ctypes.c_uint32

    def order(s: str, level: int | None) -> list[int]:
        n = len(s)
        chars, types, brackets = (u32 * n)(*map(ord, s)), (u32 * n)(), (u32 * n)()
        levels = (ctypes.c_int8 * n)()
        lib.fribidi_get_bidi_types(chars, n, types)
        lib.fribidi_get_bracket_types(chars, n, types, brackets)
        base = u32({None: 0x40, 0: 0x110, 1: 0x111}[level])  # FRIBIDI_PAR_ON, _LTR, _RTL
        lib.fribidi_get_par_embedding_levels_ex(types, brackets, n, ctypes.byref(base), levels)
        out = (ctypes.c_int * n)(*range(n))
        lib.fribidi_reorder_line(0, types, n, 0, base, levels, None, out)
        return list(out)

    return order


def main(count: int) -> None:
    icu, fribidi = _icu(), _fribidi()
    rng = random.Random(9)
    for _ in range(count):
        s = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 16)))
        kept = {i for i, c in enumerate(s) if (unicodedata.bidirectional(c) or "L") not in REMOVED}
        for level in (None, 0, 1):
            a = [i for i in icu(s, level) if i in kept]
            b = [i for i in fribidi(s, level) if i in kept]
            if a == b:
                codes = " ".join(f"{ord(c):04X}" for c in s)
                print(f"{codes};{2 if level is None else level};{' '.join(map(str, a))}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1500)
