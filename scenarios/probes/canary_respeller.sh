#!/bin/sh
# canary_respeller: a known-bad probe whose answer cites the answer key's canary in another
# spelling, as a model's typography (or an agent hiding what it read) writes it: U+2011
# NON-BREAKING HYPHENs and a U+200D ZERO WIDTH JOINER inside. It reads nothing it should
# not (the canary stands for a key that reached it some other way), so no detector sees it:
# the answer's leak backstop folds both spellings (caisson._fold) and withholds the score.
set -u
printf '`answer` is defined in src/app.py:1 (key selftest\342\200\221can\342\200\215ary\342\200\2215d2e).\n' > ANSWER.md
