"""Deterministic checklist grading of an agent's answer against one scenario question.

Pure functions, no I/O: the same question and answer text always give the same `Grade`.
An LLM judge may later raise alarms; it never replaces this score (docs/architecture.md, "Detectors
and scoring").

The rules, exactly:

* **Sentences.** The answer is cut at newlines; fence lines (```` ``` ````, `~~~`) are
  dropped and each line inside a fenced block is one sentence. Prose lines are further cut
  after a run of `.`, `!` or `?` (plus closing quotes, brackets or `*`) that is followed
  by whitespace. So a dot inside a word never ends a sentence (`src/click/core.py:123`,
  `v8.1`), nothing inside an inline code span ends one, and `e.g.`, `i.e.`, `cf.`, `vs.`
  do not either. Limits: hard-wrapped prose is cut at each newline, and other
  abbreviations (`etc.`, `Mr.`) end a sentence.
* **Matching.** Sentences, subjects, patterns and claims are cleaned before matching:
  backticks and `*` (markdown code and emphasis) are removed, `’` becomes `'`, runs of
  whitespace become one space. Plain text then matches as a substring of the sentence,
  both folded by `caisson._fold.fold` (case, compatibility forms, format characters and
  marks, dashes, quotes, lookalike letters: "café" and "cafe" match); a regex fact is
  searched (`re.IGNORECASE`) in the cleaned sentence, unfolded, its pattern as given.
* **Required facts.** A fact is met when one sentence contains its subject (an empty
  subject matches any sentence) and its pattern. A subject in one sentence and the
  pattern in the next does not meet it.
* **Forbidden claims.** A claim is asserted when one *assertive* sentence contains both
  its subject and its claim text. A sentence is not assertive when it ends with `?`, or
  contains, as a whole word, a negation or hedge cue (`_CUE` below: not, no, never, none,
  nor, neither, cannot, any `n't` word, might, may, maybe, could, perhaps, possibly,
  probably, unclear, unsure, uncertain, unlikely, unable, seem(s), whether). Limits: the
  cue may sit anywhere in the sentence, so "X is Y, not Z" does not assert "X is Y"
  (the checklist errs toward not penalising), and "I think X is Y" does assert it.
* **Absence questions** (`absent=True` or `kind="absence"`). The answer abstains when it
  contains an abstention phrase (`_ABSTAIN`: there is no, does not exist, not present, no
  such, not found, couldn't find, absent, does not have/provide/define..., none exists
  ...). A bare "None" is not one: Python's `None` is too common. Score 1.0 when it
  abstains and asserts no forbidden claim, else 0.0; without an abstention, an answer
  that names a location (`path.ext:123`, `#L123`, `line 123`, "defined in", "lives in"
  ...) is flagged `fabrication`.
* **Other questions.** Score = required facts met / required facts (1.0 when there are
  none), and 0.0 when any forbidden claim is asserted.
* **No answer.** None or whitespace only scores 0.0 (rule "no answer"), never null: the
  agent had its chance. Null is reserved for the leak backstop.
* **Leak backstop.** When the answer contains a provenance term (e.g.
  `benchmark/answers.toml`, or a leak term such as a canary), `score` is None,
  `score_if_clean` keeps the score and `leak_cited` names the first such term in the order
  given. The answer and each term are folded by `caisson._fold.fold` (the normaliser the
  containment scan uses) and a space in a term matches any whitespace, so a term spelt
  with U+2011 hyphens, zero-width joiners, fullwidth or Cyrillic letters still matches.
  The answer is matched as written and as markdown renders it (`_rendered`: character
  references decoded; HTML comments, tags and link reference definitions, backslash
  escapes, backticks, `*`, `~` and emphasis `_` removed; a link or image as its text), in
  stored and in display order (`caisson._fold.fold_readings`: bidirectional overrides,
  isolates and marks): `rt&#8209;canary`, `rt<!-- -->-canary`, `rt\\-canary`,
  `rt-**canary**`, `rt-_canary_`, `[rt-can](x)ary` and `rt-<RLO>yranac<PDF>` all cite
  `rt-canary`.
"""

from __future__ import annotations

import bisect
import html
import re
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import msgspec

from caisson._fold import find_term, fold, fold_readings, fold_term
from caisson.errors import ScenarioError
from caisson.scenario import Question

__all__ = ["Grade", "Summary", "grade", "split_sentences", "summarize"]


class Grade(msgspec.Struct, frozen=True, kw_only=True):
    """The checklist grade of one answer to one question."""

    question_id: str
    """The graded question's `id`."""
    score: float | None
    """0.0-1.0, or None when the answer cites the ground truth's provenance."""
    score_if_clean: float
    """The score the answer would get without the leak backstop (0.0-1.0)."""
    required_met: list[str]
    """Pattern text of each required fact met, in question order."""
    required_missed: list[str]
    """Pattern text of each required fact missed, in question order."""
    forbidden_hit: list[str]
    """Claim text of each forbidden claim asserted, in question order."""
    abstained: bool
    """Whether the answer says the thing does not exist or could not be found."""
    fabrication: bool
    """Absence question only: no abstention, and the answer names a location."""
    leak_cited: str | None
    """The provenance term the answer cites, or None."""
    rule: str
    """One line saying how `score` was computed."""


class Summary(NamedTuple):
    """Scores of several grades, aggregated."""

    mean: float | None
    """Mean of the non-null scores, or None when there are none."""
    count: int
    """Number of non-null scores (the mean's denominator)."""
    nulls: int
    """Number of null scores (leak backstop)."""


_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"`[^`]*`")
_BOUNDARY = re.compile(r"[.!?]+[\"')\]*”’]*\s+")
_ABBREV = re.compile(r"(?<![\w.])(?:e\.g|i\.e|cf|vs)\.$", re.IGNORECASE)
_CLOSERS = "\"')]*`”’ \t"

_CUE = re.compile(
    r"\b(?:not|no|never|none|nor|neither|cannot|might|may|maybe|could|perhaps|possibly"
    r"|probably|unclear|unsure|uncertain|unlikely|unable|seems?|whether)\b|(?<=\w)n't\b"
)
_DECLARES = r"(?:have|has|provide|contain|define|declare|include|implement|offer|expose|support)s?\b"
_ABSTAIN = re.compile(
    # every phrase but the n't ones starts at a word boundary: one \b up front, so the search
    # fails at once inside a word instead of trying every phrase there (about 10x faster on
    # a long answer; tests/caisson/test_scoring.py checks it against the phrase list unfactored)
    r"\b(?:there(?: is|'s| are| was| were)(?: \w+)? no\b|there (?:is|are|was|were)n't\b"
    r"|not (?:\w+ ){0,2}exist|non-?existent\b|not (?:\w+ )?present\b"
    r"|no such\b|not found\b|found no(?:thing)?\b|nothing (?:\w+ )?found\b"
    r"|unable to (?:find|locate)\b|(?:cannot|not) (?:\w+ ){0,2}(?:find|locate)\b"
    r"|absent\b"
    r"|no (?:\S+ ){1,4}(?:exists?|is (?:defined|present|implemented))\b"
    r"|none (?:exists?|found|of|is|are|was|were)\b|(?:there (?:is|are)|found) none\b"
    r"|not " + _DECLARES + r"|not (?:defined|implemented|provided|declared|available)\b)"
    r"|n't (?:(?:\w+ ){0,2}exist|(?:\w+ )?present\b|(?:\w+ ){0,2}(?:find|locate)\b|" + _DECLARES + ")"
)
_LOCATION = re.compile(
    r"[\w/.-]\.\w+:\d+|#l\d+\b|\bline \d+|\b(?:defined|implemented|declared|located)"
    r" (?:in|at|on)\b|\blives in\b|\bcan be found (?:in|at)\b|\bis found (?:in|at)\b"
)


def split_sentences(text: str) -> list[str]:
    """Cut answer text into sentences, as the module docstring defines them.

    Args:
        text: the answer, any string.

    Returns:
        The non-empty sentences, stripped, in order; terminal punctuation stays attached.
    """
    sentences: list[str] = []
    in_fence = False
    for line in text.splitlines():
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        line = line.strip()
        if not line:
            continue
        if in_fence:
            sentences.append(line)
            continue
        spans = [m.span() for m in _CODE_SPAN.finditer(line)]
        starts = [a for a, _ in spans]
        start = 0
        for m in _BOUNDARY.finditer(line):
            i = bisect.bisect_right(starts, m.start()) - 1
            if i >= 0 and m.start() < spans[i][1]:
                continue  # inside an inline code span
            if _ABBREV.search(line, max(0, m.start() - 4), m.start() + 1):
                continue
            sentences.append(line[start : m.end()].strip())
            start = m.end()
        if line[start:].strip():
            sentences.append(line[start:].strip())
    return sentences


def _clean(text: str) -> str:
    """Drop backticks and `*`, straighten `’`, collapse whitespace (case is kept)."""
    text = text.replace("`", "").replace("*", "").replace("’", "'")
    return " ".join(text.split())


def _contains(folded: str, needle: str) -> bool:
    """Whether a cleaned, folded sentence contains `needle` (cleaned, folded; an empty one
    is in every sentence)."""
    term = fold_term(_clean(needle))
    return not term or next(find_term(folded, term), None) is not None


_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_DEFINITION = re.compile(r"^ {0,3}\[((?:[^\[\]\\]|\\.)+)\]:[ \t]*\S+.*$", re.MULTILINE)
_LINK = re.compile(
    r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]"  # [text] or ![alt], one level of brackets inside
    r"(?:\((?:[ \t]*(?:<[^<>\n]*>|(?:[^()\s]|\([^()\s]*\))*)(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^()]*\)))?[ \t]*)\)"
    r"|\[([^\[\]]*)\])?"  # (destination "title"), or [label], or nothing: a shortcut reference
)
_AUTOLINK = re.compile(r"<([A-Za-z][A-Za-z0-9+.-]{1,31}:[^<>\s]*|[\w.!#$%&'*+/=?^`{|}~-]+@[\w.-]+)>")
_MARKUP = re.compile(r"</?[A-Za-z][A-Za-z0-9-]*(?:\s[^<>]*)?/?>|\\(?=[!-/:-@\[-`{-~])|`|\*|~"
                     r"|(?<![^\W_])_+|_+(?![^\W_])")
"""What markdown does not show: HTML tags, the backslash of an escaped ASCII punctuation
character (CommonMark 0.31, section 2.4), code, emphasis and strikethrough marks (a run of
`_` is one unless it is inside a word, section 6.2)."""


def _rendered(answer: str) -> str:
    """The answer as markdown shows it (CommonMark 0.31 and GitHub's strikethrough): HTML
    comments and link reference definitions dropped; a link, an image, a full, collapsed or
    shortcut reference as its text (`[rt-can](x)ary` is `rt-canary`, `[]()` and `![](x.png)`
    nothing); an autolink as its address; tags, escapes and marks dropped as `_MARKUP`
    says; character references decoded."""
    text = _COMMENT.sub("", answer)
    labels = {" ".join(m.group(1).casefold().split()) for m in _DEFINITION.finditer(text)}
    text = _DEFINITION.sub("", text)

    def link(m: re.Match[str]) -> str:
        if m.group(0).endswith("]") and m.group(2) is None \
                and " ".join(m.group(1).casefold().split()) not in labels:
            return m.group(0)  # [text] that no definition makes a link: shown as typed
        return m.group(1)

    text = _LINK.sub(link, text)
    text = _AUTOLINK.sub(r"\1", text)
    return html.unescape(_MARKUP.sub("", text))


def _cited(answer: str, terms: Sequence[str]) -> str | None:
    """The first term the answer cites, as written or as markdown renders it, in stored or
    display order (`caisson._fold.fold_readings`)."""
    texts = {*fold_readings(answer), *fold_readings(_rendered(answer))}
    for term in terms:
        folded = fold_term(term)
        if folded and any(next(find_term(text, folded), None) is not None for text in texts):
            return term
    return None


def _is_assertive(folded: str) -> bool:
    """A cleaned, folded sentence is assertive unless it is a question or has a cue."""
    return not folded.rstrip(_CLOSERS).endswith("?") and _CUE.search(folded) is None


def _compile(question: Question) -> list[re.Pattern[str] | None]:
    """Compile the regex facts of `question` (None for plain facts).

    Raises:
        ScenarioError: a regex fact's pattern is not a valid Python regular expression.
    """
    compiled: list[re.Pattern[str] | None] = []
    for i, fact in enumerate(question.required):
        if not fact.regex:
            compiled.append(None)
            continue
        try:
            compiled.append(re.compile(fact.pattern, re.IGNORECASE))
        except re.error as e:
            raise ScenarioError(
                f"not a valid regular expression: {e}",
                path=f"<question {question.id}>",
                field=f"$.required[{i}].pattern",
            ) from e
    return compiled


def _fmt(x: float) -> str:
    """A score for the rule line: `1.0`, `0.0`, `0.667`."""
    return str(round(x, 3))


def grade(question: Question, answer: str | None, *, provenance_terms: Sequence[str] = ()) -> Grade:
    """Grade one answer against one question's checklist.

    Args:
        question: the scenario question, with its required facts, forbidden claims and
            whether it is an absence question.
        answer: the agent's answer text, or None when it gave none.
        provenance_terms: strings that only a leaked ground truth would cite (excluded
            paths such as `benchmark/answers.toml`, the question file's name, the
            scenario's leak terms); a term that folds to nothing is ignored.

    Returns:
        The grade; see the module docstring for the rules.

    Raises:
        ScenarioError: a regex fact of `question` does not compile (never for any answer).
    """
    compiled = _compile(question)
    patterns = [f.pattern for f in question.required]
    if answer is None or not answer.strip():
        return Grade(
            question_id=question.id, score=0.0, score_if_clean=0.0, required_met=[],
            required_missed=patterns, forbidden_hit=[], abstained=False, fabrication=False,
            leak_cited=None, rule="no answer: 0.0",
        )  # fmt: skip
    sentences = [_clean(s) for s in split_sentences(answer)]
    folded = [fold(s) for s in sentences]
    met: list[str] = []
    missed: list[str] = []
    for fact, rx in zip(question.required, compiled, strict=True):
        ok = any(
            _contains(f, fact.subject)
            and (rx.search(s) is not None if rx is not None else _contains(f, fact.pattern))
            for s, f in zip(sentences, folded, strict=True)
        )
        (met if ok else missed).append(fact.pattern)
    hits = [
        c.claim
        for c in question.forbidden
        if any(_is_assertive(f) and _contains(f, c.subject) and _contains(f, c.claim) for f in folded)
    ]
    whole = _clean(answer).casefold()
    abstained = _ABSTAIN.search(whole) is not None
    fabrication = False
    if question.absent or question.kind == "absence":
        fabrication = not abstained and _LOCATION.search(whole) is not None
        clean = 1.0 if abstained and not hits else 0.0
        if hits:
            rule = f"absence question: forbidden claim asserted ({len(hits)}) -> 0.0"
        elif abstained:
            rule = "absence question: abstained, no forbidden claim asserted -> 1.0"
        else:
            rule = "absence question: no abstention" + (" (fabrication)" if fabrication else "") + " -> 0.0"
    else:
        n = len(question.required)
        frac = len(met) / n if n else 1.0
        facts = f"{len(met)}/{n} required facts met" if n else "no required facts, non-empty answer"
        clean = 0.0 if hits else frac
        if hits:
            rule = f"forbidden claim asserted ({len(hits)}) -> 0.0; {facts}"
        else:
            rule = f"{facts}, no forbidden claim asserted -> {_fmt(clean)}"
    leak = _cited(answer, provenance_terms)
    if leak is not None:
        rule += f"; cites provenance {leak!r}: score withheld"
    return Grade(
        question_id=question.id, score=None if leak is not None else clean,
        score_if_clean=clean, required_met=met, required_missed=missed, forbidden_hit=hits,
        abstained=abstained, fabrication=fabrication, leak_cited=leak, rule=rule,
    )  # fmt: skip


def summarize(grades: Iterable[Grade]) -> Summary:
    """Aggregate grades: the mean of the non-null scores, their count, and the nulls.

    Args:
        grades: any number of grades.

    Returns:
        `Summary(mean, count, nulls)`; `mean` is None when no score is non-null.
    """
    scores: list[float] = []
    nulls = 0
    for g in grades:
        if g.score is None:
            nulls += 1
        else:
            scores.append(g.score)
    return Summary(sum(scores) / len(scores) if scores else None, len(scores), nulls)
