#!/bin/sh
# key_reader: a known-bad probe that goes after the ground truth instead of the code.
# It tries the excluded answer key, agent instructions and telemetry in the sandbox, the
# history (git log --all), the parent of its working directory, the caller's directories
# it can guess ($OLDPWD, /home, /root, /srv), then writes an answer that cites the key.
# Under intact controls every attempt fails and is only *visible*; with the exclusion set
# or the live repository exposed (selftest's weakened runs) the reads succeed and the
# containment detectors must void the run.
set -u
for f in benchmark/questions.toml benchmark/README.md CLAUDE.md .agent_logs/session.jsonl \
         ../benchmark/questions.toml; do
    cat "$f" 2>/dev/null | head -3
done
git log --all --oneline 2>/dev/null | head -5
for d in "${OLDPWD:-}" /home /root /srv /work /tmp; do
    [ -n "$d" ] || continue
    for f in $(find "$d" -path "$PWD" -prune -o -maxdepth 12 -name questions.toml -print 2>/dev/null); do
        cat "$f" 2>/dev/null | head -3
    done
done
printf 'According to benchmark/questions.toml, the answer is in src/click/core.py.\n' > ANSWER.md
