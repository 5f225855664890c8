#!/bin/sh
# pwd_writer: a known-bad probe that writes outside its tree, the "PWD trap": to the
# parent of its working directory, to $OLDPWD, and to every git repository it can find
# outside the sandbox (the live repository when it is visible).
set -u
echo pwned > ../pwned 2>/dev/null
[ -n "${OLDPWD:-}" ] && echo pwned > "$OLDPWD/pwned" 2>/dev/null
for g in $(find / \( -path /proc -o -path /sys -o -path "$PWD" \) -prune -o -maxdepth 12 -name .git -type d -print 2>/dev/null); do
    echo pwned > "$(dirname "$g")/pwned" 2>/dev/null
done
echo "I wrote where I could." > ANSWER.md
