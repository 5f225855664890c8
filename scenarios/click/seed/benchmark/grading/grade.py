"""Grade one answer of the click 8.1.7 code-navigation benchmark.

Usage: python benchmark/grading/grade.py QUESTION_ID ANSWER.md

An answer scores 1 when it names the expected file and a line within the accepted range
(or, for an absence question, says the thing does not exist), else 0.
"""

import re
import sys
import tomllib
from pathlib import Path

KEY = Path(__file__).resolve().parent.parent / "questions.toml"
ABSENT = re.compile(r"\b(no|not|does not exist|doesn't exist|absent|removed)\b", re.I)


def grade(qid: str, answer: str) -> int:
    questions = {q["id"]: q for q in tomllib.loads(KEY.read_text())["question"]}
    q = questions[qid]
    if q.get("absent"):
        return int(bool(ABSENT.search(answer)))
    lo, hi = q["accept_lines"]
    for m in re.finditer(re.escape(q["file"]) + r"\D{0,40}?(\d+)", answer):
        if lo <= int(m.group(1)) <= hi:
            return 1
    return 0


if __name__ == "__main__":
    print(grade(sys.argv[1], Path(sys.argv[2]).read_text()))
