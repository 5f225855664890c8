"""The containment scan: does the sandbox tree already hold a question or its answer key?

`containment_scan` reads every text file of the tree before any agent starts and returns a
`ContainmentScan`: the hits of each question's `WINDOW`-word windows and of every leak term,
over every text a file decodes to (`caisson.chamber._decode`), both sides folded
(`caisson._fold`), and the files not scanned past `MAX_DECODED_BYTES` or the decoding depth
(never skipped in silence); a file that cannot be read raises OSError. The rules:
docs/chamber.md, "The containment scan".
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import msgspec

from caisson._fold import find_term, fold, fold_readings, fold_term
from caisson.chamber._decode import MAX_DECODED_BYTES, TooBig, TooDeep, decoded_texts
from caisson.errors import ContainmentError
from caisson.scenario import Scenario

__all__ = [
    "MAX_DECODED_BYTES",
    "WINDOW",
    "ContainmentScan",
    "containment_hits",
    "containment_scan",
    "normalize_words",
    "prompt_windows",
    "scan_tree",
]

WINDOW = 5
"""Words per question window."""

_WORD = re.compile(r"\w+")


def normalize_words(text: str) -> list[str]:
    """Split text into folded words; whitespace and punctuation are separators.

    Args:
        text: any text.

    Returns:
        The words of `fold(text)` in order, e.g. `"Where is `parse()`?"` -> `["where", "is",
        "parse"]`.
    """
    return _WORD.findall(fold(text))


def prompt_windows(prompt: str, size: int = WINDOW) -> set[tuple[str, ...]]:
    """The overlapping word windows of a prompt.

    Args:
        prompt: the question text.
        size: words per window (>= 1).

    Returns:
        Every run of `size` consecutive normalised words; a prompt with fewer words gives
        one window of all of them, an empty prompt none.
    """
    words = normalize_words(prompt)
    if not words:
        return set()
    if len(words) <= size:
        return {tuple(words)}
    return {tuple(words[i : i + size]) for i in range(len(words) - size + 1)}


def _line_of(newlines: list[int], offset: int) -> int:
    """1-based line number of a character offset, given the offsets of the newlines."""
    return bisect.bisect_left(newlines, offset) + 1


def _scan_text(
    text: str,
    windows: _Windows,
    firsts: set[str],
    terms: Iterable[tuple[str, str]],
) -> Iterator[tuple[int, str]]:
    """Yield (line, description) for every window run and leak term in a folded text.

    Overlapping windows of one question merge into one run of words, reported at the
    line of its first word, so a copied prompt is one hit, not one per window. `terms`
    are (folded term, the scenario's spelling).
    """
    words = _WORD.findall(text)
    newlines: list[int] | None = None
    # most texts hold no window: a set test over all n-grams (in C) skips the walk below
    if any(not table.keys().isdisjoint(zip(*(words[k:] for k in range(size)))) for size, table in windows.items()):
        newlines = [m.start() for m in re.finditer("\n", text)]
        yield from _window_runs(text, words, newlines, windows, firsts)
    for term, spelt in terms:
        for start in find_term(text, term):
            if newlines is None:
                newlines = [m.start() for m in re.finditer("\n", text)]
            yield _line_of(newlines, start), f"leak term {spelt!r}"


def _window_runs(text: str, words: list[str], newlines: list[int], windows: _Windows,
                 firsts: set[str]) -> Iterator[tuple[int, str]]:
    """(line, description) of each run of overlapping windows of one question."""
    starts = [m.start() for m in _WORD.finditer(text)]
    n = len(words)
    last: dict[str, list[int]] = {}  # question id -> [start, end) of its latest run
    runs: list[tuple[str, list[int]]] = []  # overlapping windows merge into one run
    for i, w in enumerate(words):
        if w not in firsts:
            continue
        for size, table in windows.items():
            qid = table.get(tuple(words[i : i + size])) if i + size <= n else None
            if qid is None:
                continue
            run = last.get(qid)
            if run is not None and i <= run[1]:
                run[1] = max(run[1], i + size)
            else:
                last[qid] = run = [i, i + size]
                runs.append((qid, run))
    for qid, (start, end) in runs:
        yield _line_of(newlines, starts[start]), f'"{" ".join(words[start:end])}" (question {qid})'


_Windows = dict[int, dict[tuple[str, ...], str]]
"""Window length -> (window -> id of the first question that has it)."""


def _tables(scenario: Scenario) -> tuple[_Windows, set[str], list[tuple[str, str]]]:
    """Windows grouped by length (window -> question id), first words, and the leak terms
    as (folded term, the scenario's spelling), one per folded term."""
    windows: _Windows = {}
    spellings = [*scenario.leak_terms]
    for q in scenario.questions:
        for win in prompt_windows(q.prompt):
            windows.setdefault(len(win), {}).setdefault(win, q.id)
        spellings.extend(q.leak_terms)
    terms: dict[str, str] = {}
    for spelt in sorted(spellings):
        terms.setdefault(fold_term(spelt), spelt)
    firsts = {w[0] for table in windows.values() for w in table}
    return windows, firsts, sorted((t, spelt) for t, spelt in terms.items() if t)


class ContainmentScan(msgspec.Struct, frozen=True, kw_only=True):
    """What the containment scan found in a tree."""

    hits: list[str]
    """One line per hit, sorted by path and line (see `containment_hits`)."""
    unscanned: list[str]
    """One line per file not scanned to its end, `path: not scanned past N bytes: too big`
    (or `... N nested layers: too deep`), sorted by path."""


def containment_scan(
    root: Path, paths: Iterable[str], scenario: Scenario, *, limit: int = MAX_DECODED_BYTES
) -> ContainmentScan:
    """Every question window and leak term found in a tree, in every decoding of its files.

    Args:
        root: the tree.
        paths: repo-relative POSIX paths of its files to scan.
        scenario: gives the prompts and leak terms.
        limit: most bytes read and decoded per file, all decoded layers together.

    Returns:
        The hits, `path:line: "window" (question id)` or `path:line: leak term 'x'` (a
        hit in a file name is `path: leak term 'x' in the path`; in a decoded text the
        path is followed by its decoding in brackets, `path [gzip, utf-16-le]:line: ...`),
        and the files not scanned to their end.

    Raises:
        OSError: a file cannot be read.
    """
    windows, firsts, terms = _tables(scenario)
    # A window matches only where its longest word occurs, a term where its longest word
    # does: the needles (folded) that gate the UTF-16/32 guesses of a binary's bytes (see
    # decoded_texts, which folds each guess before it looks for them).
    needles = sorted({max(w, key=len) for table in windows.values() for w in table}
                     | {max(_WORD.findall(t) or [t], key=len) for t, _ in terms})
    hits: list[tuple[str, str, int, str]] = []
    unscanned: list[str] = []
    for rel in sorted(paths):
        folded = fold(rel)
        hits.extend((rel, "", 0, f"leak term {spelt!r} in the path")
                    for t, spelt in terms if next(find_term(folded, t), None) is not None)
        f = root / rel
        if f.is_symlink() or not f.is_file():
            continue
        with f.open("rb") as fh:
            data = fh.read() if f.stat().st_size <= limit else fh.read(limit + 1)
        if len(data) > limit:  # (read(n) allocates n bytes up front: only for big files)
            unscanned.append(f"{rel}: not scanned past {limit} bytes: too big")
            data = data[:limit]
        try:
            for where, raw in decoded_texts(data, limit=limit, needles=needles):
                found: dict[tuple[int, str], None] = {}  # ordered dedupe, over the readings too
                for text in fold_readings(raw):
                    found.update(dict.fromkeys(_scan_text(text, windows, firsts, terms)))
                hits.extend((rel, where, line, what) for line, what in found)
        except TooBig as e:
            if not unscanned or not unscanned[-1].startswith(f"{rel}: "):
                unscanned.append(f"{rel}: not scanned past {e.limit} bytes decoded: too big")
        except TooDeep as e:
            unscanned.append(f"{rel}: not scanned past {e.depth} nested layers: too deep")
    hits.sort(key=lambda h: (h[0], h[1], h[2]))
    lines = []
    for p, where, line, what in hits:
        name = f"{p} [{where}]" if where else p
        lines.append(f"{name}: {what}" if line == 0 else f"{name}:{line}: {what}")
    return ContainmentScan(hits=lines, unscanned=unscanned)


def containment_hits(root: Path, paths: Iterable[str], scenario: Scenario) -> list[str]:
    """The hits of `containment_scan` alone (see there).

    Raises:
        OSError: a file cannot be read.
    """
    return containment_scan(root, paths, scenario).hits


def scan_tree(root: Path, paths: Iterable[str], scenario: Scenario) -> list[str]:
    """Refuse a tree that holds a question window or a leak term.

    Args:
        root: the tree.
        paths: repo-relative POSIX paths of its files to scan.
        scenario: gives the prompts and leak terms.

    Returns:
        The files not scanned to their end (`ContainmentScan.unscanned`), for the record.

    Raises:
        ContainmentError: one or more hits; `hits` has one `file:line: ...` line each.
        OSError: a file cannot be read.
    """
    scan = containment_scan(root, paths, scenario)
    if scan.hits:
        raise ContainmentError(
            f"containment scan: {len(scan.hits)} hit(s) in {root}; withhold these files with an "
            "exclusion category or fix the scenario",
            hits=scan.hits,
        )
    return scan.unscanned
