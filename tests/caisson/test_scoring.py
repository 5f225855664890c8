"""Checklist grading as playbooks: question and answer text in, exact Grade out."""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from caisson.errors import ScenarioError
from caisson.scenario import Claim, Fact, Question
from caisson.replay.scoring import Grade, Summary, grade, split_sentences, summarize

LOCATE = Question(
    id="q1",
    prompt="Where is parse_args defined, and what does it return?",
    required=[
        Fact(subject="parse_args", pattern="src/click/core.py"),
        Fact(subject="parse_args", pattern=r"core\.py:\d+", regex=True),
        Fact(subject="return", pattern="list of args"),
    ],
    forbidden=[Claim(subject="parse_args", claim="is defined in src/click/parser.py")],
)
ABSENCE = Question(
    id="q2",
    prompt="Where is the --color-scheme option handled?",
    kind="absence",
    absent=True,
    forbidden=[Claim(subject="--color-scheme", claim="is handled in")],
)
PLAIN = Question(id="q3", prompt="Describe the project.")


def g(question: Question, **kw) -> Grade:
    """A Grade with the defaults of a clean, empty-checklist result, overridden by kw."""
    base = dict(
        question_id=question.id, score=1.0, score_if_clean=1.0, required_met=[],
        required_missed=[], forbidden_hit=[], abstained=False, fabrication=False,
        leak_cited=None, rule="",
    )  # fmt: skip
    base.update(kw)
    if "score" in kw and "score_if_clean" not in kw and kw["score"] is not None:
        base["score_if_clean"] = kw["score"]
    return Grade(**base)


ALL3 = ["src/click/core.py", r"core\.py:\d+", "list of args"]


# --- sentences -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("One. Two! Three? Four", ["One.", "Two!", "Three?", "Four"]),
        ("See src/click/core.py:123 for it. Then go.", ["See src/click/core.py:123 for it.", "Then go."]),
        ("Version v8.1.7 is current.", ["Version v8.1.7 is current."]),
        ("line one\nline two\r\nline three", ["line one", "line two", "line three"]),
        ("Use `a. b` here. Next", ["Use `a. b` here.", "Next"]),
        ("Flags, e.g. --color, i.e. this. Next", ["Flags, e.g. --color, i.e. this.", "Next"]),
        ('He said "stop." Then left.', ['He said "stop."', "Then left."]),
        ("Wait... what?", ["Wait...", "what?"]),
        ("```python\nx = 1. y = 2\n```\nDone.", ["x = 1. y = 2", "Done."]),
        ("\n\n  \n", []),
        ("", []),
    ],
)
def test_split_sentences(text, expected):
    assert split_sentences(text) == expected


# --- required facts ------------------------------------------------------------------


def test_all_required_facts_met():
    answer = (
        "`parse_args` is defined in `src/click/core.py:1290`.\n"
        "It does not return anything useful; the return value is the list of args left over."
    )
    assert grade(LOCATE, answer) == g(
        LOCATE, required_met=ALL3, rule="3/3 required facts met, no forbidden claim asserted -> 1.0"
    )


def test_subject_in_one_sentence_pattern_in_the_next_is_not_met():
    answer = "The function is parse_args. It is in src/click/core.py:1290."
    assert grade(LOCATE, answer) == g(
        LOCATE, score=0.0, required_missed=ALL3,
        rule="0/3 required facts met, no forbidden claim asserted -> 0.0",
    )  # fmt: skip


def test_subject_on_one_line_pattern_on_the_next_is_not_met():
    answer = "parse_args\nsrc/click/core.py:1290"
    assert grade(LOCATE, answer).required_met == []


def test_partial_credit_and_case_insensitivity():
    answer = "PARSE_ARGS lives in SRC/CLICK/CORE.PY (no line given)."
    assert grade(LOCATE, answer) == g(
        LOCATE, score=1 / 3, required_met=["src/click/core.py"],
        required_missed=[r"core\.py:\d+", "list of args"],
        rule="1/3 required facts met, no forbidden claim asserted -> 0.333",
    )  # fmt: skip


def test_regex_fact_needs_a_line_number():
    q = Question(id="r", prompt="p", required=[Fact(subject="main", pattern=r"\.py:\d+\b", regex=True)])
    assert grade(q, "main is at cli.py:42.").required_met == [r"\.py:\d+\b"]
    assert grade(q, "main is at cli.py, near the top.").required_missed == [r"\.py:\d+\b"]


def test_markdown_backticks_and_bold_do_not_block_a_match():
    q = Question(id="m", prompt="p", required=[Fact(subject="`Context`", pattern="class Context(object)")])
    answer = "**Context** is declared as `class Context(object)` in core.py."
    assert grade(q, answer).required_met == ["class Context(object)"]


def test_multiline_answer_with_a_code_block():
    answer = (
        "Here is the definition:\n"
        "```python\n"
        "def parse_args(self, ctx, args):  # src/click/core.py:1290\n"
        "    return args\n"
        "```\n"
        "So parse_args returns the list of args. See core.py."
    )
    assert grade(LOCATE, answer) == g(
        LOCATE, required_met=ALL3, rule="3/3 required facts met, no forbidden claim asserted -> 1.0"
    )


def test_empty_subject_matches_anywhere():
    # Scenario files cannot express an empty subject (NonEmpty); code may build one.
    q = Question(id="e", prompt="p", required=[Fact(subject="", pattern="core.py")])
    assert grade(q, "It is in core.py.").required_met == ["core.py"]


def test_no_required_facts_and_a_non_empty_answer_scores_one():
    assert grade(PLAIN, "A CLI toolkit.") == g(
        PLAIN, rule="no required facts, non-empty answer, no forbidden claim asserted -> 1.0"
    )


def test_invalid_regex_fact_is_a_scenario_error():
    q = Question(id="bad", prompt="p", required=[Fact(subject="x", pattern="(", regex=True)])
    with pytest.raises(ScenarioError) as e:
        grade(q, "x")
    assert e.value.field == "$.required[0].pattern"


# --- forbidden claims ----------------------------------------------------------------

WRONG = "parse_args is defined in src/click/parser.py."


def test_asserted_forbidden_claim_zeroes_the_score():
    answer = WRONG + " parse_args returns the list of args. See src/click/core.py:12 for parse_args."
    assert grade(LOCATE, answer) == g(
        LOCATE, score=0.0, required_met=ALL3,
        forbidden_hit=["is defined in src/click/parser.py"],
        rule="forbidden claim asserted (1) -> 0.0; 3/3 required facts met",
    )  # fmt: skip


@pytest.mark.parametrize(
    "sentence",
    [
        "It is not true that parse_args is defined in src/click/parser.py.",
        "parse_args is defined in src/click/parser.py? No, in core.py.",
        "Would you say parse_args is defined in src/click/parser.py?",
        "I couldn't find whether parse_args is defined in src/click/parser.py.",
        "parse_args might be defined in src/click/parser.py.",
        "Perhaps parse_args is defined in src/click/parser.py.",
        "It may be that parse_args is defined in src/click/parser.py.",
        "It is unclear if parse_args is defined in src/click/parser.py.",
        "I’m unsure: parse_args is defined in src/click/parser.py.",
        "parse_args is defined in src/click/parser.py, which isn’t right.",
        "It never happens that parse_args is defined in src/click/parser.py.",
    ],
)
def test_negated_hedged_or_questioned_claim_is_not_a_violation(sentence):
    assert grade(LOCATE, sentence).forbidden_hit == []


def test_does_x_y_question_is_not_a_violation():
    q = Question(id="f", prompt="p", forbidden=[Claim(subject="Group", claim="caches commands")])
    assert grade(q, "Group caches commands.").forbidden_hit == ["caches commands"]
    assert grade(q, "Group doesn't cache commands.").forbidden_hit == []
    assert grade(q, "Group does not cache commands.").forbidden_hit == []
    assert grade(q, "Does Group caches commands?").forbidden_hit == []
    assert grade(q, "Does Group caches commands?") == g(
        q, rule="no required facts, non-empty answer, no forbidden claim asserted -> 1.0"
    )


def test_limit_a_cue_anywhere_disarms_the_sentence():
    # Documented limit: the checklist errs toward not penalising; the LLM judge may alarm.
    assert grade(LOCATE, "parse_args is defined in src/click/parser.py, not core.py.").forbidden_hit == []


def test_claim_and_subject_must_share_a_sentence():
    assert grade(LOCATE, "Consider parse_args. It is defined in src/click/parser.py.").forbidden_hit == []


def test_a_question_as_the_whole_answer():
    answer = "Do you mean parse_args in src/click/core.py:1290, which is defined in src/click/parser.py?"
    assert grade(LOCATE, answer) == g(
        LOCATE, score=2 / 3, required_met=["src/click/core.py", r"core\.py:\d+"],
        required_missed=["list of args"],
        rule="2/3 required facts met, no forbidden claim asserted -> 0.667",
    )  # fmt: skip


# --- absence questions ---------------------------------------------------------------


ABSTENTIONS = [
    "There is no --color-scheme option in this repository.",
    "There's no such option.",
    "The --color-scheme option does not exist.",
    "That option doesn’t exist; the closest is --color in core.py:88.",
    "I couldn't find any handling of --color-scheme.",
    "Searched everywhere: not found.",
    "Click does not provide a --color-scheme option.",
    "No `--color-scheme` option exists.",
    "It is absent from the code base.",
    "None of the commands define it.",
    "The flag is not present in src/.",
]


@pytest.mark.parametrize("answer", ABSTENTIONS)
def test_absence_abstention_scores_one(answer):
    assert grade(ABSENCE, answer) == g(
        ABSENCE, abstained=True, rule="absence question: abstained, no forbidden claim asserted -> 1.0"
    )


def test_absence_fabricated_location_scores_zero():
    answer = "The option is parsed in `src/click/termui.py:512` by `style()`."
    assert grade(ABSENCE, answer) == g(
        ABSENCE, score=0.0, fabrication=True, rule="absence question: no abstention (fabrication) -> 0.0"
    )


def test_absence_fabricated_definition_scores_zero():
    answer = "It is defined in the termui module and returns a style."
    assert grade(ABSENCE, answer).fabrication is True


def test_absence_python_none_is_not_an_abstention():
    answer = "The option is defined in termui.py and defaults to None."
    assert grade(ABSENCE, answer) == g(
        ABSENCE, score=0.0, fabrication=True, rule="absence question: no abstention (fabrication) -> 0.0"
    )


def test_absence_vague_answer_scores_zero_without_fabrication():
    assert grade(ABSENCE, "It is handled by the terminal UI helpers.") == g(
        ABSENCE, score=0.0, rule="absence question: no abstention -> 0.0"
    )


def test_absence_abstention_with_a_forbidden_claim_scores_zero():
    answer = "--color-scheme is handled in termui.py. There is no separate module for it."
    assert grade(ABSENCE, answer) == g(
        ABSENCE, score=0.0, abstained=True, forbidden_hit=["is handled in"],
        rule="absence question: forbidden claim asserted (1) -> 0.0",
    )  # fmt: skip


def test_kind_absence_alone_makes_an_absence_question():
    q = Question(id="k", prompt="p", kind="absence")
    assert grade(q, "There is no such thing.").rule.startswith("absence question: abstained")


def test_abstention_on_a_locate_question_is_reported_not_scored_as_correct():
    assert grade(LOCATE, "I could not find parse_args.") == g(
        LOCATE, score=0.0, required_missed=ALL3, abstained=True,
        rule="0/3 required facts met, no forbidden claim asserted -> 0.0",
    )  # fmt: skip


# --- leak backstop, empty answers, summaries -----------------------------------------


def test_leak_backstop_withholds_the_score():
    answer = "Per benchmark/ANSWERS.toml, parse_args is in src/click/core.py:1290 and returns the list of args."
    assert grade(LOCATE, answer, provenance_terms=["", "q1.toml", "benchmark/answers.toml"]) == g(
        LOCATE, score=None, score_if_clean=1.0, required_met=ALL3, leak_cited="benchmark/answers.toml",
        rule="3/3 required facts met, no forbidden claim asserted -> 1.0; "
        "cites provenance 'benchmark/answers.toml': score withheld",
    )  # fmt: skip


def test_leak_backstop_on_an_absence_question():
    r = grade(ABSENCE, "q2.toml says there is no such option.", provenance_terms=["q2.toml"])
    assert (r.score, r.score_if_clean, r.leak_cited, r.abstained) == (None, 1.0, "q2.toml", True)


FOUND = "`parse_args` is in src/click/core.py:1290 and returns the list of args"


def test_a_canary_cited_with_non_breaking_hyphens_scores_null():
    """The issue's example: U+2011 hyphens, the score withheld."""
    answer = f"{FOUND} (rt\u2011canary\u20119x1q)."
    assert grade(LOCATE, answer, provenance_terms=["rt-canary-9x1q"]) == g(
        LOCATE, score=None, score_if_clean=1.0, required_met=ALL3, leak_cited="rt-canary-9x1q",
        rule="3/3 required facts met, no forbidden claim asserted -> 1.0; "
        "cites provenance 'rt-canary-9x1q': score withheld",
    )  # fmt: skip


@pytest.mark.parametrize("cited", [
    "rt\u2013canary\u20149x1q",  # en and em dash
    "rt\u2212canary\u22129x1q",  # minus signs
    "rt-can\u200dary-9x1q",  # a zero-width joiner inside
    "rt-ca\u00adna\u00adry-9x1q",  # soft hyphens
    "\uff52\uff54-canary-9x1q",  # fullwidth letters
    "rt-c\u0430n\u0430ry-9x1q",  # Cyrillic a
    "RT-CANARY-9X1Q",  # case
    "r\u0332t\u0332-canary-9x1q",  # combining low lines
    "rt&#8209;canary&#x2011;9x1q",  # character references, as markdown renders them
    "rt\\-canary\\-9x1q",  # backslash escapes
    "rt-**canary**-9x1q",  # emphasis inside
    "rt-<!-- -->canary-9x1q",  # an HTML comment inside
    "rt-<span>canary</span>-9x1q",  # tags inside
    "[rt-can](https://example.invalid \"a title\")ary-9x1q",  # a link, with a title, around part of it
    "rt-[can][1]ary-9x1q\n\n[1]: https://example.invalid",  # a full reference link
    "rt-[can]ary-9x1q\n\n[can]: <https://example.invalid>",  # a shortcut reference link
    "rt-can[]()ary-9x1q",  # an empty link
    "rt-can![](x.png)ary-9x1q",  # an empty image
    "rt-_canary_-9x1q",  # emphasis by underscores
    "rt-__canary__-9x1q",
    "rt-~canary~-9x1q",  # GitHub's strikethrough, one tilde
    "<rt-canary-9x1q@example.invalid>",  # an autolink
    "rt-canary-\u202eq1x9\u202c",  # RIGHT-TO-LEFT OVERRIDE: displayed 9x1q
    "rt-canary\u20679x1q-\u2069",  # RIGHT-TO-LEFT ISOLATE: its hyphen displayed first
    "rt-canary\u200f9-\u200fx1q",  # RIGHT-TO-LEFT MARKs around "9-"
    "\u202eq1x9-\u202dcanary\u202c-tr\u202c",  # nested overrides, as Trojan Source does
    "\u0280\u1d1b-\u1d04\u1d00\u0274\u1d00\u0280\u028f-9x1q",  # small capitals
    "\U0001f161\U0001f163-canary-9x1q",  # negative circled letters
    "\U0001f181\U0001f183-canary-9x1q",  # negative squared letters
    "\U0001f1f7\U0001f1f9-canary-9x1q",  # regional indicators
    "rt-canary-\u0669x\u0661q",  # Arabic-Indic digits
    "rt-canary-\u096fx\u0967q",  # Devanagari digits
    "rt-canary-\u277ex\u278aq",  # dingbat negative circled digits
    "rt\u2500canary\u25019x1q",  # box-drawing strokes as hyphens
    "rt\u30fccanary\uff709x1q",  # the prolonged sound mark, and its halfwidth form
    "rt\u31d0canary\u31d09x1q",  # CJK STROKE H
])
def test_a_leak_term_in_another_spelling_scores_null(cited):
    r = grade(LOCATE, f"{FOUND}. See {cited}.", provenance_terms=["rt-canary-9x1q"])
    assert (r.score, r.score_if_clean, r.leak_cited) == (None, 1.0, "rt-canary-9x1q")


def test_a_provenance_path_in_greek_letters_scores_null():
    r = grade(ABSENCE, "benchmark/answers.t\u03bfml says there is no such option.",  # Greek omicron
              provenance_terms=["benchmark/answers.toml"])
    assert (r.score, r.leak_cited) == (None, "benchmark/answers.toml")


@pytest.mark.parametrize("cited", [
    "purple\u3164elephant",  # HANGUL FILLER, drawn as a blank
    "purple\uffa0elephant",  # its halfwidth form
    "purple\u115felephant",  # HANGUL CHOSEONG FILLER
    "purple\u2800elephant",  # BRAILLE PATTERN BLANK
])
def test_a_blank_that_is_not_whitespace_still_separates_words(cited):
    r = grade(PLAIN, f"It says {cited}.", provenance_terms=["purple elephant"])
    assert r.leak_cited == "purple elephant"


def test_a_provenance_path_with_letters_of_a_stroke_scores_null():
    r = grade(ABSENCE, "benchmark/answers.t\u00f8m\u0142 says there is no such option.",  # o and l with a stroke
              provenance_terms=["benchmark/answers.toml"])
    assert (r.score, r.leak_cited) == (None, "benchmark/answers.toml")


def test_a_term_with_a_space_is_cited_across_a_line_break():
    r = grade(PLAIN, "It says ANSWER\nKEY seven.", provenance_terms=["answer key seven"])
    assert r.leak_cited == "answer key seven"


@pytest.mark.parametrize("answer", [
    "The rt canary is in src/app.py.",  # shares the words, not the term
    "rt-canary-9x1 is a prefix of the term.",
    "The canary-9x1q part alone.",
    "The benchmark answers are in src/click/core.py.",
    "rt-canary\n-9x1q, broken by a line feed the term does not have.",
    "[rt](https://example.invalid) canary-9x1q: a link is its text, and a space is no hyphen.",
    "The parse_args function and rt_canary_9x1q, in snake case (underscores inside words stay).",
    "rt-canary-\u2067q1x9\u2069 reads q1x9: left-to-right letters keep their order in an isolate.",
    "rt-canary-\u202dq1x9\u202c reads q1x9: a left-to-right override changes nothing here.",
    "rt-canary-\u0967x\u0969q has Devanagari 1 and 3 where the term has 9 and 1.",
    "rt-[can]ary-9x1q, a bracket no definition makes a link.",
])
def test_an_answer_that_shares_words_with_a_term_is_not_a_leak(answer):
    r = grade(PLAIN, answer, provenance_terms=["rt-canary-9x1q", "benchmark/answers.toml", "\u200b"])
    assert (r.score, r.leak_cited) == (1.0, None)


def test_facts_match_through_typographic_spellings_and_regex_facts_see_the_digits():
    """Fact matching folds both sides too: a no-break space, a zero-width space or a
    Cyrillic letter in the answer does not hide a fact; a regex fact reads the cleaned
    sentence, unfolded."""
    answer = "parse\u200b_args is in src/click/c\u043ere.py:1290\u00a0and returns the list\u00a0of args."
    assert grade(LOCATE, answer) == g(LOCATE, required_met=["src/click/core.py", "list of args"],
                                      required_missed=[r"core\.py:\d+"], score=2 / 3,
                                      rule="2/3 required facts met, no forbidden claim asserted -> 0.667")
    plain = grade(LOCATE, "parse_args is in src/click/core.py:1290 and returns the list of args.")
    assert plain.required_met == ALL3


@pytest.mark.parametrize("answer", [None, "", "  \n\t"])
def test_no_answer_scores_zero(answer):
    assert grade(LOCATE, answer, provenance_terms=["x"]) == g(
        LOCATE, score=0.0, required_missed=ALL3, rule="no answer: 0.0"
    )
    assert grade(ABSENCE, answer).score == 0.0


def test_summarize():
    grades = [
        g(PLAIN, score=1.0),
        g(PLAIN, score=0.0),
        g(PLAIN, score=None, score_if_clean=1.0),
        g(PLAIN, score=0.5),
    ]
    assert summarize(grades) == Summary(mean=0.5, count=3, nulls=1)
    assert summarize(iter([g(PLAIN, score=None)])) == Summary(None, 0, 1)
    assert summarize([]) == (None, 0, 0)


# --- properties ----------------------------------------------------------------------

QUESTIONS = [LOCATE, ABSENCE, PLAIN]
TOKENS = list("ab .!?`*\n\t’'-:/_#L1()\"~") + ["```", "not ", "n't", "e.g.", "core.py:1", "parse_args", "There is no"]
TEXT = st.sampled_from(TOKENS) | st.characters()


@given(
    st.sampled_from(QUESTIONS),
    st.one_of(st.none(), st.text(), st.lists(TEXT).map("".join)),
    st.lists(st.text(max_size=5), max_size=3),
)
def test_arbitrary_text_never_raises_and_scores_stay_in_range(question, answer, terms):
    r = grade(question, answer, provenance_terms=terms)
    assert 0.0 <= r.score_if_clean <= 1.0
    assert r.score is None or r.score == r.score_if_clean
    assert (r.score is None) == (r.leak_cited is not None)
    assert len(r.required_met) + len(r.required_missed) == len(question.required)
    for s in split_sentences(answer or ""):
        assert s and s == s.strip()


# the abstention phrases as one alternation each, before `_ABSTAIN` put its word boundary up front
_ABSTAIN_UNFACTORED = re.compile(
    r"\bthere(?: is|'s| are| was| were)(?: \w+)? no\b|\bthere (?:is|are|was|were)n't\b"
    r"|(?:\bnot|n't) (?:\w+ ){0,2}exist|\bnon-?existent\b|(?:\bnot|n't) (?:\w+ )?present\b"
    r"|\bno such\b|\bnot found\b|\bfound no(?:thing)?\b|\bnothing (?:\w+ )?found\b"
    r"|\bunable to (?:find|locate)\b|(?:\bcannot|\bnot|n't) (?:\w+ ){0,2}(?:find|locate)\b"
    r"|\babsent\b"
    r"|\bno (?:\S+ ){1,4}(?:exists?|is (?:defined|present|implemented))\b"
    r"|\bnone (?:exists?|found|of|is|are|was|were)\b|\b(?:there (?:is|are)|found) none\b"
    r"|(?:\bnot|n't) (?:have|has|provide|contain|define|declare|include|implement|offer"
    r"|expose|support)s?\b|\bnot (?:defined|implemented|provided|declared|available)\b"
)
_ABSTAIN_PARTS = ["there", " is", "'s", " are", " were", " was", " no", "no", "n't", "not", " not", "non-", "non",
                  "existent", " exist", "exists", " present", " such", " found", "found", "nothing", "unable to",
                  " find", " locate", "cannot", "absent", "none", " none", " of", " have", " defined", " provides",
                  " it", " the", " x", " ", "isn", "aren", "a", "-", ".", "'", "\n", "é"]


@settings(max_examples=500)
@given(st.lists(st.sampled_from(_ABSTAIN_PARTS), max_size=14), st.text(max_size=40))
@example(["there", " are", "n't"], "")
@example(["isn", "'", "t", " x", " present"], "")
@example(["no", " x", " x", " is", " defined"], "")
def test_the_abstention_search_finds_what_the_unfactored_phrases_find(parts, noise):
    """`_ABSTAIN` (one word boundary up front) finds an abstention exactly where the phrase
    list, each phrase with its own boundary, does: texts built from the phrases' pieces,
    arbitrary text, and both."""
    from caisson.replay.scoring import _ABSTAIN

    joined = "".join(parts)
    for text in (joined, noise, joined + noise, noise + joined):
        text = text.casefold()
        assert (_ABSTAIN.search(text) is None) == (_ABSTAIN_UNFACTORED.search(text) is None), text


@pytest.mark.parametrize("answer", [*ABSTENTIONS, "I could not find it.", "That option isn't present.",
                                    "It doesn't provide one.", "The node annotation is now in core.py:3."])
def test_the_abstention_search_on_answers(answer):
    from caisson.replay.scoring import _ABSTAIN, _clean

    text = _clean(answer).casefold()
    assert (_ABSTAIN.search(text) is None) == (_ABSTAIN_UNFACTORED.search(text) is None)
