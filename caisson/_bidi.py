"""The display order of a paragraph: the Unicode Bidirectional Algorithm (UAX #9).

`visual` applies UAX #9 (revision 44, Unicode 14; the rules unchanged through Unicode 17)
to one paragraph laid out as one line: paragraph level (P2, P3, or given as HL1 allows),
explicit levels and directions (X1-X10: embeddings, overrides, isolates, the 125-level
limit), weak types (W1-W7), paired brackets (N0, for the pairs in `_BRACKETS`), neutrals
(N1, N2), implicit levels (I1, I2), whitespace at the end (L1), reordering (L2) and
mirroring (L4, for the pairs in `_BRACKETS`). Character types are this Python's
`unicodedata.bidirectional` (an unassigned code point is L). Not done: L3 (combining
marks after a right-to-left base stay before it), line breaking (HL1-HL6 aside).

Characters X9 removes (embedding and override controls, boundary neutrals) stay in the
output at the level of the character before them, as the standard's section 5.2 allows.
"""

from __future__ import annotations

import unicodedata

__all__ = ["paragraph_level", "visual"]

MAX_DEPTH = 125
"""Deepest explicit embedding level (BD2)."""

_BRACKETS = "()[]{}\u2045\u2046\u207d\u207e\u208d\u208e\u2329\u232a\u27e8\u27e9\u3008\u3009\u300a\u300b" \
            "\u300c\u300d\u300e\u300f\u3010\u3011\u3014\u3015\uff08\uff09\uff3b\uff3d\uff5b\uff5d"
"""Opening and closing brackets, in pairs (BidiBrackets.txt, BidiMirroring.txt): the ASCII
ones, and the common others."""

_OPENING = {_BRACKETS[i]: _BRACKETS[i + 1] for i in range(0, len(_BRACKETS), 2)}
_CLOSING = {v: k for k, v in _OPENING.items()}
_MIRROR = {**_OPENING, **_CLOSING, "<": ">", ">": "<", "\u00ab": "\u00bb", "\u00bb": "\u00ab",
           "\u2039": "\u203a", "\u203a": "\u2039"}
_CANONICAL = {"\u2329": "\u3008", "\u232a": "\u3009"}  # BD16: canonically equivalent brackets match

_REMOVED = frozenset({"RLE", "LRE", "RLO", "LRO", "PDF", "BN"})
_INITIATORS = frozenset({"LRI", "RLI", "FSI"})
_EXPLICIT = frozenset({"RLE", "LRE", "RLO", "LRO", "PDF", "LRI", "RLI", "FSI", "PDI"})
_NEUTRAL = frozenset({"B", "S", "WS", "ON", "LRI", "RLI", "FSI", "PDI"})


def _types(text: str) -> list[str]:
    return [unicodedata.bidirectional(c) or "L" for c in text]


def _first_strong(types: list[str], start: int, end: int) -> int | None:
    """P2, P3: 0 for L, 1 for R or AL, None when no strong type is outside an isolate."""
    depth = 0
    for t in types[start:end]:
        if t in _INITIATORS:
            depth += 1
        elif t == "PDI":
            depth = max(depth - 1, 0)
        elif depth == 0 and t == "L":
            return 0
        elif depth == 0 and t in ("R", "AL"):
            return 1
    return None


def _matching_pdis(types: list[str]) -> dict[int, int]:
    """BD9: isolate initiator index -> index of its matching PDI."""
    open_: list[int] = []
    match: dict[int, int] = {}
    for i, t in enumerate(types):
        if t in _INITIATORS:
            open_.append(i)
        elif t == "PDI" and open_:
            match[open_.pop()] = i
    return match


def _explicit(types: list[str], para: int, match: dict[int, int]) -> tuple[list[int], list[str]]:
    """X1-X8: each character's embedding level, and its type with overrides applied."""
    n = len(types)
    levels = [para] * n
    out = list(types)
    stack: list[tuple[int, str | None, bool]] = [(para, None, False)]  # level, override, isolate
    overflow_isolates = overflow_embeddings = valid_isolates = 0
    for i, t in enumerate(types):
        level, override, _ = stack[-1]
        if t in ("RLE", "LRE", "RLO", "LRO"):
            new = (level + 1) | 1 if t[0] == "R" else (level + 2) & ~1
            if new <= MAX_DEPTH and overflow_isolates == 0 and overflow_embeddings == 0:
                stack.append((new, {"RLO": "R", "LRO": "L"}.get(t), False))
            elif overflow_isolates == 0:
                overflow_embeddings += 1
            levels[i] = level
        elif t in _INITIATORS:
            levels[i] = level
            if override:
                out[i] = override
            rtl = t == "RLI" or (t == "FSI" and _first_strong(types, i + 1, match.get(i, n)) == 1)
            new = (level + 1) | 1 if rtl else (level + 2) & ~1
            if new <= MAX_DEPTH and overflow_isolates == 0 and overflow_embeddings == 0:
                valid_isolates += 1
                stack.append((new, None, True))
            else:
                overflow_isolates += 1
        elif t == "PDI":
            if overflow_isolates:
                overflow_isolates -= 1
            elif valid_isolates:
                overflow_embeddings = 0
                while not stack[-1][2]:
                    stack.pop()
                stack.pop()
                valid_isolates -= 1
            levels[i], override, _ = stack[-1]
            if override:
                out[i] = override
        elif t == "PDF":
            if overflow_isolates:
                pass
            elif overflow_embeddings:
                overflow_embeddings -= 1
            elif not stack[-1][2] and len(stack) > 1:
                stack.pop()
            levels[i] = stack[-1][0]
        else:
            levels[i] = level
            if override and t not in ("B", "BN"):
                out[i] = override
    return levels, out


def _sequences(kept: list[int], levels: list[int], types: list[str], match: dict[int, int]) -> list[list[int]]:
    """BD13: the isolating run sequences, as lists of indices of kept characters."""
    runs: list[list[int]] = []
    for i in kept:
        if runs and levels[runs[-1][-1]] == levels[i]:
            runs[-1].append(i)
        else:
            runs.append([i])
    starting = {run[0]: run for run in runs}
    matched = set(match.values())
    sequences = []
    for run in runs:
        if types[run[0]] == "PDI" and run[0] in matched:
            continue
        seq = list(run)
        while types[seq[-1]] in _INITIATORS and seq[-1] in match and match[seq[-1]] in starting:
            seq.extend(starting[match[seq[-1]]])
        sequences.append(seq)
    return sequences


def _weak(t: list[str], sos: str) -> None:
    """W1-W7 over one isolating run sequence's types, in place."""
    n = len(t)
    for i in range(n):  # W1
        if t[i] == "NSM":
            t[i] = sos if i == 0 else ("ON" if t[i - 1] in _INITIATORS or t[i - 1] == "PDI" else t[i - 1])
    strong = sos
    for i in range(n):  # W2, W3
        if t[i] in ("R", "L", "AL"):
            strong = t[i]
            if t[i] == "AL":
                t[i] = "R"
        elif t[i] == "EN" and strong == "AL":
            t[i] = "AN"
    for i in range(1, n - 1):  # W4
        if t[i] == "ES" and t[i - 1] == "EN" == t[i + 1]:
            t[i] = "EN"
        elif t[i] == "CS" and t[i - 1] == t[i + 1] and t[i - 1] in ("EN", "AN"):
            t[i] = t[i - 1]
    i = 0
    while i < n:  # W5
        if t[i] != "ET":
            i += 1
            continue
        j = i
        while j < n and t[j] == "ET":
            j += 1
        if (i > 0 and t[i - 1] == "EN") or (j < n and t[j] == "EN"):
            t[i:j] = ["EN"] * (j - i)
        i = j
    for i in range(n):  # W6
        if t[i] in ("ES", "ET", "CS"):
            t[i] = "ON"
    strong = sos
    for i in range(n):  # W7
        if t[i] in ("R", "L"):
            strong = t[i]
        elif t[i] == "EN" and strong == "L":
            t[i] = "L"


def _strong(t: str) -> str | None:
    return "L" if t == "L" else "R" if t in ("R", "EN", "AN") else None


def _brackets(seq: list[int], text: str, t: list[str], original: list[str], sos: str, e: str) -> None:
    """N0 over one isolating run sequence's types (after W1-W7), in place."""
    pairs: list[tuple[int, int]] = []
    stack: list[tuple[str, int]] = []
    for k, i in enumerate(seq):
        if t[k] != "ON":
            continue
        c = _CANONICAL.get(text[i], text[i])
        if c in _OPENING:
            if len(stack) == 63:
                break
            stack.append((_CANONICAL.get(_OPENING[c], _OPENING[c]), k))
        elif c in _CLOSING:
            for depth in range(len(stack) - 1, -1, -1):
                if stack[depth][0] == c:
                    pairs.append((stack[depth][1], k))
                    del stack[depth:]
                    break
    for a, b in sorted(pairs):
        inside = {_strong(x) for x in t[a + 1 : b]} - {None}
        if not inside:
            continue
        if e in inside:
            d = e
        else:
            before = next((s for s in map(_strong, reversed(t[:a])) if s), sos)
            d = before if before != e else e
        for k in (a, b):
            t[k] = d
            j = k + 1
            while j < len(t) and original[seq[j]] == "NSM":
                t[j] = d
                j += 1


def _neutrals(t: list[str], sos: str, eos: str, e: str) -> None:
    """N1, N2 over one isolating run sequence's types, in place."""
    n = len(t)
    i = 0
    while i < n:
        if t[i] not in _NEUTRAL:
            i += 1
            continue
        j = i
        while j < n and t[j] in _NEUTRAL:
            j += 1
        before = sos if i == 0 else _strong(t[i - 1])
        after = eos if j == n else _strong(t[j])
        t[i:j] = [before if before == after and before else e] * (j - i)
        i = j


def paragraph_level(paragraph: str) -> int:
    """P2, P3: 1 when the first strong character outside an isolate is R or AL, else 0."""
    return _first_strong(_types(paragraph), 0, len(paragraph)) or 0


def visual(paragraph: str, level: int | None = None) -> str:
    """A paragraph's characters in display order, as one line.

    Args:
        paragraph: one paragraph: text without a paragraph separator (type B) but at its end.
        level: the paragraph embedding level, 0 (left to right) or 1; None for P2 and P3
            (the first strong character outside an isolate decides, else 0).

    Returns:
        The same characters, reordered, the brackets and other mirrored characters of
        `_MIRROR` at an odd level mirrored (L4).
    """
    levels = _levels(paragraph, level)
    return "".join(_MIRROR.get(paragraph[i], paragraph[i]) if levels[i] % 2 else paragraph[i]
                   for i in _order(levels))


def _levels(paragraph: str, level: int | None) -> list[int]:
    """Each character's resolved level, after L1."""
    n = len(paragraph)
    if n == 0:
        return []
    original = _types(paragraph)
    para = level if level is not None else (_first_strong(original, 0, n) or 0)
    kept = [i for i in range(n) if original[i] not in _REMOVED]
    if _EXPLICIT.isdisjoint(original):  # one level, one isolating run sequence
        match: dict[int, int] = {}
        embedding, types = [para] * n, original
        sequences = [kept] if kept else []
    else:
        match = _matching_pdis(original)
        embedding, types = _explicit(original, para, match)
        sequences = _sequences(kept, embedding, original, match)
    levels = list(embedding)
    for seq in sequences:
        lvl = embedding[seq[0]]
        first, last = seq[0], seq[-1]
        prev = next((embedding[i] for i in range(first - 1, -1, -1) if original[i] not in _REMOVED), para)
        nxt = para
        if original[last] not in _INITIATORS:
            nxt = next((embedding[i] for i in range(last + 1, n) if original[i] not in _REMOVED), para)
        sos = "R" if max(lvl, prev) % 2 else "L"
        eos = "R" if max(lvl, nxt) % 2 else "L"
        e = "R" if lvl % 2 else "L"
        t = [types[i] for i in seq]
        _weak(t, sos)
        _brackets(seq, paragraph, t, original, sos, e)
        _neutrals(t, sos, eos, e)
        for i, x in zip(seq, t, strict=True):  # I1, I2
            if lvl % 2 == 0:
                levels[i] = lvl + (1 if x == "R" else 2 if x in ("AN", "EN") else 0)
            else:
                levels[i] = lvl + (1 if x in ("L", "EN", "AN") else 0)
    for i in range(n):  # what X9 removed takes the level of the character before it
        if original[i] in _REMOVED:
            levels[i] = levels[i - 1] if i else para
    trailing = True  # L1: separators, and whitespace before them or at the end
    for i in range(n - 1, -1, -1):
        t = original[i]
        if t in ("S", "B"):
            levels[i] = para
            trailing = True
        elif trailing and (t == "WS" or t in _INITIATORS or t == "PDI" or t in _REMOVED):
            levels[i] = para
        else:
            trailing = False
    return levels


def _order(levels: list[int]) -> list[int]:
    """L2: the indices in display order: every run at each level, from the highest to the
    lowest odd one, reversed."""
    order = list(range(len(levels)))
    if not levels:
        return order
    top = max(levels)
    low = min(level for level in levels if level % 2) if any(level % 2 for level in levels) else top + 1
    for level in range(top, low - 1, -1):
        i = 0
        while i < len(order):
            if levels[order[i]] < level:
                i += 1
                continue
            j = i
            while j < len(order) and levels[order[j]] >= level:
                j += 1
            order[i:j] = order[i:j][::-1]
            i = j
    return order
