"""The containment scan: does the sandbox tree already hold a question or its answer key?

Two checks, run over every text file of the tree before any agent starts:

- **question windows**: each prompt is normalised into words and cut into overlapping
  windows of `WINDOW` (5) words; any window found in a file means the question (or a
  copy of it with its answer nearby) is in the tree. A prompt shorter than 5 words is
  one window of all its words.
- **leak terms**: every scenario-wide and per-question leak term, case-insensitively, as
  a plain substring of the file text and of its path.

Normalisation (`normalize_words`): the text is case-folded (`str.casefold`) and split into
maximal runs of word characters (regex `\\w+`: Unicode letters, digits, underscore);
everything else, whitespace and punctuation alike, is a separator and is dropped. So
"Where is `parse()` defined?" and "where  is parse\\n defined" normalise to the same words.

Every file is scanned in every text its bytes decode to, the ways the chamber's own tools
read it (`caisson.chamber._decode`): the raw bytes as UTF-8 with replacement characters
(NULs included: grep searches binary files too), a byte order mark's encoding, UTF-16 and
UTF-32 without a BOM when the bytes hold NULs, and the contents of gzip, bzip2, xz, zstd
and zip files. A hit in a decoded text names its decoding: `notes.txt [utf-16-le]:1: ...`,
`q.zip [zip:a.txt, gzip]:3: ...`. Symlinks are not followed.

The work per file is bounded: at most `MAX_DECODED_BYTES` are read and decoded per file,
all layers together; a file past that is scanned up to the bound and reported as
`path: not scanned past N bytes: too big` (see `ContainmentScan.unscanned`), never skipped
in silence.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import msgspec

from caisson.chamber._decode import MAX_DECODED_BYTES, TooBig, decoded_texts
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
    """Split text into case-folded words; whitespace and punctuation are separators.

    Args:
        text: any text.

    Returns:
        The words in order, e.g. `"Where is `parse()`?"` -> `["where", "is", "parse"]`.
    """
    return _WORD.findall(text.casefold())


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
    terms: Iterable[str],
) -> Iterator[tuple[int, str]]:
    """Yield (line, description) for every window run and leak term in a case-folded text.

    Overlapping windows of one question merge into one run of words, reported at the
    line of its first word, so a copied prompt is one hit, not one per window.
    """
    newlines = [m.start() for m in re.finditer("\n", text)]
    matches = list(_WORD.finditer(text))
    words = [m.group() for m in matches]
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
        line = _line_of(newlines, matches[start].start())
        yield line, f'"{" ".join(words[start:end])}" (question {qid})'
    for term in terms:
        start = text.find(term)
        while start != -1:
            yield _line_of(newlines, start), f"leak term {term!r}"
            start = text.find(term, start + 1)


_Windows = dict[int, dict[tuple[str, ...], str]]
"""Window length -> (window -> id of the first question that has it)."""


def _tables(scenario: Scenario) -> tuple[_Windows, set[str], list[str]]:
    """Windows grouped by length (window -> question id), first words, leak terms."""
    windows: _Windows = {}
    terms = {t.casefold() for t in scenario.leak_terms}
    for q in scenario.questions:
        for win in prompt_windows(q.prompt):
            windows.setdefault(len(win), {}).setdefault(win, q.id)
        terms.update(t.casefold() for t in q.leak_terms)
    firsts = {w[0] for table in windows.values() for w in table}
    return windows, firsts, sorted(t for t in terms if t)


class ContainmentScan(msgspec.Struct, frozen=True, kw_only=True):
    """What the containment scan found in a tree."""

    hits: list[str]
    """One line per hit, sorted by path and line (see `containment_hits`)."""
    unscanned: list[str]
    """One line per file not scanned to its end, `path: not scanned past N bytes: too big`,
    sorted by path."""


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
    # A window matches only where its longest word occurs: the needles that gate the
    # UTF-16/32 guesses of a binary's bytes (see decoded_texts; they are compared in ASCII
    # lower case, so a guess whose only needle is spelt with a letter that casefolds to
    # ASCII, like U+212A KELVIN SIGN for "k", is not decoded).
    needles = sorted({max(w, key=len) for table in windows.values() for w in table} | set(terms))
    hits: list[tuple[str, str, int, str]] = []
    unscanned: list[str] = []
    for rel in sorted(paths):
        folded = rel.casefold()
        hits.extend((rel, "", 0, f"leak term {t!r} in the path") for t in terms if t in folded)
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
                text = raw.casefold()
                found = dict.fromkeys(_scan_text(text, windows, firsts, terms))  # ordered dedupe
                hits.extend((rel, where, line, what) for line, what in found)
        except TooBig as e:
            if not unscanned or not unscanned[-1].startswith(f"{rel}: "):
                unscanned.append(f"{rel}: not scanned past {e.limit} bytes decoded: too big")
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
