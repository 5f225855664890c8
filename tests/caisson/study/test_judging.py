"""The judge's rules, pure: the prompt, the reply's text in each API shape, the verdict line
(never guessed), and when a verdict disagrees with the deterministic score."""

from __future__ import annotations

import json

import pytest

from caisson.scenario import Claim, Fact, Question
from caisson.study.judging import MAX_ANSWER_CHARS, disagrees, judge_prompt, parse_verdict, reply_text, request_body

Q = Question(id="q", prompt="Where is `Context` defined?", required=[Fact(subject="Context", pattern="core.py")],
             forbidden=[Claim(subject="Context", claim="types.py")])


@pytest.mark.parametrize("reply, verdict", [
    ("PASS\nIt names the file.", "pass"),
    ("fail", "fail"),
    ("\n\n  **PASS**  \nreason", "pass"),
    ("# FAIL.", "fail"),
    ("`PASS`:", "pass"),
    ("Pass, mostly", "unparseable"),
    ("PASSED", "unparseable"),
    ("The answer is PASS", "unparseable"),
    ("", "unparseable"),
    ("I cannot grade this.", "unparseable"),
    (None, "error"),
])
def test_the_first_line_is_the_verdict_or_nothing(reply, verdict):
    assert parse_verdict(reply)[0] == verdict


def test_the_first_line_is_kept_and_capped():
    assert parse_verdict("\n  Looks right to me.\nPASS") == ("unparseable", "Looks right to me.")
    assert len(parse_verdict("x" * 500)[1]) == 200


@pytest.mark.parametrize("verdict, score, expected", [
    ("pass", 1.0, False), ("fail", 0.0, False), ("fail", 0.5, False),
    ("pass", 0.5, True), ("pass", 0.0, True), ("fail", 1.0, True),
    ("unparseable", 0.0, False), ("error", 1.0, False), ("pass", None, False),
])
def test_a_disagreement_is_pass_below_full_marks_or_fail_at_full_marks(verdict, score, expected):
    assert disagrees(verdict, score) is expected


def test_the_prompt_holds_question_key_and_the_answer_between_markers():
    prompt = judge_prompt(Q, "It is in core.py.")
    assert "Question: Where is `Context` defined?" in prompt
    assert "- Required: a statement about 'Context': containing 'core.py'." in prompt
    assert "- Forbidden: asserting about 'Context' 'types.py'." in prompt
    assert prompt.endswith("<<<ANSWER\nIt is in core.py.\nANSWER>>>")
    assert "PASS or FAIL alone on the first line" in prompt
    absent = judge_prompt(Question(id="a", prompt="Where is x?", kind="absence", absent=True), "none")
    assert "does not exist in the repository" in absent
    long = judge_prompt(Q, "y" * (MAX_ANSWER_CHARS + 5))
    assert f"its first {MAX_ANSWER_CHARS} characters of {MAX_ANSWER_CHARS + 5}" in long
    assert "y" * (MAX_ANSWER_CHARS + 1) not in long


def test_request_and_reply_in_each_api_shape():
    body = json.loads(request_body("anthropic", "judge-1", "hi"))
    assert body == {"model": "judge-1", "max_tokens": 200, "temperature": 0,
                    "messages": [{"role": "user", "content": "hi"}]}
    anthropic = {"content": [{"type": "text", "text": "PASS\n"}, {"type": "text", "text": "why"}]}
    assert reply_text("anthropic", json.dumps(anthropic).encode()) == "PASS\nwhy"
    openai = {"choices": [{"message": {"role": "assistant", "content": "FAIL"}}]}
    assert reply_text("openai", json.dumps(openai).encode()) == "FAIL"
    for bad in (b"not json", b"[]", json.dumps(openai).encode()):
        assert reply_text("anthropic", bad) is None
    assert reply_text("openai", json.dumps(anthropic).encode()) is None


def test_a_judge_ledger_read_back_takes_served_models_from_the_witness():
    from caisson.study.judging import REQUEST_HEADER, read_judge_records
    from ledger import Record
    from ledger.events import HttpExchange, JudgeStarted, JudgeVerdict, LlmCall

    def ex(status, judge=True):
        return HttpExchange(method="POST", scheme="https", host="j", port=443, path="/v1/messages", status=status,
                            request_headers=[(REQUEST_HEADER, "1:c")] if judge else [])

    def call(served):
        return LlmCall(provider="anthropic", endpoint="messages", requested_model="judge-1", served_model=served)

    events = [JudgeStarted(study="s", study_run_id="r", study_head="h", endpoint="https://j", api="anthropic",
                           requested_model="judge-1", prompt="judge-prompt@1"),
              ex(200), call("judge-1-20250929"), ex(200), call(None), ex(529), call(None),
              ex(200, judge=False), call("other"),  # not a judge call: not the judge's served model
              ex(200), call("judge-2"),
              JudgeVerdict(cell_id="c", question_id="q", run_id="r", request_id="1:c", verdict="pass",
                           served_model="judge-1")]  # the verdict's own claim is not what is read
    read = read_judge_records([Record(seq=i, wall_ns=0, mono_ns=0, source="x", event=e) for i, e in enumerate(events)])
    assert (read.served_models, read.substituted, read.unknown_served) == (
        ("judge-1-20250929", "judge-2"), ("judge-2",), 1)
    assert len(read.verdicts) == 1 and read.ended is None
