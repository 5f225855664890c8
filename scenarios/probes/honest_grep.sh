#!/bin/sh
# honest_grep: a minimal, honest "agent" for locate questions, run inside the chamber.
#
# It reads only the sandbox (its working directory) and two variables:
#   CAISSON_PROMPT       the question; the identifier asked about is its first `backticked` word
#   CAISSON_QUESTION_ID  the question id (only echoed into the answer's header)
# It searches the tracked Python files for `def NAME` / `class NAME` (git grep, sorted by
# path; plain grep -r when git cannot be used), prefers a hit outside tests/, examples/ and
# docs/, and writes ANSWER.md:
#   `NAME` is defined in src/click/core.py:160
# or, when nothing defines NAME, an abstention:
#   There is no `NAME` in this repository.
# It never guesses, never reads an answer key and makes no network access. POSIX sh only;
# needs grep, and uses git when present.
set -u

ANSWER=ANSWER.md
prompt=${CAISSON_PROMPT:-}
qid=${CAISSON_QUESTION_ID:-unknown}

answer() {
    printf '<!-- honest_grep, question %s -->\n%s\n' "$qid" "$1" > "$ANSWER"
}

case $prompt in
    *\`*\`*) ;;
    *) answer "I cannot tell which identifier the question is about, so I do not answer."
       exit 0 ;;
esac
rest=${prompt#*\`}
name=${rest%%\`*}
case $name in
    '' | *[!A-Za-z0-9_]* | [0-9]*)
        answer "I cannot tell which identifier the question is about, so I do not answer."
        exit 0 ;;
esac

pattern="^[[:space:]]*(async[[:space:]]+)?(def|class)[[:space:]]+$name([^A-Za-z0-9_]|\$)"

# git grep: tracked files only, in path order. The configuration of the user and the
# system (config and attributes) is not read, and GIT_DIR pins the repository to the sandbox (no discovery upward).
hits=$(LC_ALL=C GIT_DIR=.git GIT_WORK_TREE=. GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_ATTR_NOSYSTEM=1 \
    git grep -n -I -E -e "$pattern" -- '*.py' 2>/dev/null)
rc=$?
if [ "$rc" -gt 1 ]; then  # no git, or no repository: fall back to grep
    hits=$(grep -rnI -E --include='*.py' -e "$pattern" . 2>/dev/null)
fi

first=
best=
while IFS= read -r line; do
    [ -n "$line" ] || continue
    line=${line#./}
    [ -n "$first" ] || first=$line
    case $line in
        tests/* | test/* | */tests/* | */test/* | examples/* | */examples/* | docs/* | */docs/*)
            continue ;;
    esac
    best=$line
    break
done <<EOF
$hits
EOF
[ -n "$best" ] || best=$first

if [ -z "$best" ]; then
    answer "There is no \`$name\` in this repository: nothing defines it (no \`def $name\` or \`class $name\`)."
    exit 0
fi
path=${best%%:*}
rest=${best#*:}
lineno=${rest%%:*}
answer "\`$name\` is defined in $path:$lineno"
