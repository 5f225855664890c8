#!/usr/bin/env bash
# Build the demo's seed repository: click 8.1.7 from its source distribution, as a git
# repository with two reproducible commits.
#
#   1. "click 8.1.7 (sdist)": the pristine unpacked sdist, nothing else.
#   2. "benchmark seed files": scenarios/click/seed/ copied on top (the answer key, a
#      published report, agent instructions, old session telemetry, grading), as a
#      benchmark's seed repository would carry them; the scenario's exclusions withhold
#      them from the sandbox.
#
# Usage: scenarios/click/fetch_repo.sh DEST
#   PYTHON  the interpreter whose pip downloads the sdist (default: the project's .venv).
#
# Idempotent: when DEST already holds the expected final commit it does nothing. Author,
# committer, dates and git configuration are fixed, so both commit hashes are the same on
# every machine. Prints the final commit hash on stdout.
set -euo pipefail

VERSION=8.1.7
SDIST="click-${VERSION}.tar.gz"
SDIST_SHA256=ca9853ad459e787e2192211578cc907e7594e294c7ccc834310722b41b9ca6de
PRISTINE_COMMIT=bf15db145ebef0db791a637c1bd1c43d78e3c301

if [ $# -ne 1 ]; then
    echo "usage: $0 DEST" >&2
    exit 2
fi
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
SEED="$HERE/seed"
DEST=$1
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
case $PYTHON in /*) ;; */*) PYTHON="$ROOT/$PYTHON" ;; esac

# A git that ignores the user's and the system's configuration (hooks, templates,
# autocrlf, excludes files, signing) and writes fixed identities and dates.
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
export GIT_AUTHOR_NAME="caisson demo" GIT_AUTHOR_EMAIL="demo@caisson.invalid"
export GIT_COMMITTER_NAME="caisson demo" GIT_COMMITTER_EMAIL="demo@caisson.invalid"
unset GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE GIT_OBJECT_DIRECTORY GIT_CEILING_DIRECTORIES
export LC_ALL=C TZ=UTC
g() { git -C "$DEST" -c core.autocrlf=false -c core.filemode=true -c commit.gpgsign=false "$@"; }
PRISTINE_DATE="1692230400 +0000"   # 2023-08-17, the release date of click 8.1.7
SEED_DATE="1692316800 +0000"       # one day later
SEED_MESSAGE="benchmark seed files"

sha256() {
    if command -v sha256sum >/dev/null 2>&1; then
        sha256sum "$1" | cut -d' ' -f1
    else
        "$PYTHON" -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' "$1"
    fi
}

# The seed files, relative to $SEED, sorted.
seed_files() { (cd "$SEED" && find . -type f | sed 's|^\./||' | LC_ALL=C sort); }

# The hash the seed commit must have on top of the pristine commit, computed with a
# scratch index (no checkout touched): the same tree and metadata `git commit` writes.
expected_commit() {
    local idx tree
    idx=$(mktemp)
    rm -f "$idx"
    GIT_INDEX_FILE=$idx g read-tree "$PRISTINE_COMMIT"
    while IFS= read -r f; do
        oid=$(g hash-object -w --no-filters -- "$SEED/$f")
        GIT_INDEX_FILE=$idx g update-index --add --cacheinfo "100644,$oid,$f"
    done < <(seed_files)
    tree=$(GIT_INDEX_FILE=$idx g write-tree)
    rm -f "$idx"
    GIT_AUTHOR_DATE=$SEED_DATE GIT_COMMITTER_DATE=$SEED_DATE \
        g commit-tree "$tree" -p "$PRISTINE_COMMIT" -m "$SEED_MESSAGE"
}

# Already built? Then do nothing.
if [ -d "$DEST/.git" ] && g cat-file -e "${PRISTINE_COMMIT}^{commit}" 2>/dev/null; then
    head=$(g rev-parse HEAD 2>/dev/null || true)
    want=$(expected_commit)
    if [ "$head" = "$want" ] && [ -z "$(g status --porcelain --untracked-files=all)" ]; then
        echo "$DEST is up to date" >&2
        echo "$head"
        exit 0
    fi
    echo "error: $DEST holds a different click repository (HEAD $head, expected $want);" \
        "remove it and run again" >&2
    exit 1
fi
if [ -e "$DEST" ] && [ -n "$(ls -A "$DEST" 2>/dev/null)" ]; then
    echo "error: $DEST exists and is not the click repository; pass a new directory" >&2
    exit 1
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

echo "downloading $SDIST from the package index" >&2
"$PYTHON" -m pip download --quiet --no-deps --no-binary :all: "click==$VERSION" -d "$WORK/dl" >&2
got=$(sha256 "$WORK/dl/$SDIST")
if [ "$got" != "$SDIST_SHA256" ]; then
    echo "error: $SDIST has sha256 $got, expected $SDIST_SHA256; refusing it" >&2
    exit 1
fi

mkdir -p "$DEST"
tar -xzf "$WORK/dl/$SDIST" -C "$DEST" --strip-components=1 --no-same-owner
g init --quiet --template= --initial-branch=main
# -f: the sdist's own .gitignore files (examples/imagepipe) must not drop a file.
g add -A -f .
GIT_AUTHOR_DATE=$PRISTINE_DATE GIT_COMMITTER_DATE=$PRISTINE_DATE \
    g commit --quiet --no-verify -m "click $VERSION (sdist)"
pristine=$(g rev-parse HEAD)
if [ "$pristine" != "$PRISTINE_COMMIT" ]; then
    echo "error: the pristine commit is $pristine, expected $PRISTINE_COMMIT" >&2
    exit 1
fi

(cd "$SEED" && tar -cf - .) | tar -xf - -C "$DEST"
while IFS= read -r f; do chmod 0644 "$DEST/$f"; done < <(seed_files)
g add -A -f .
GIT_AUTHOR_DATE=$SEED_DATE GIT_COMMITTER_DATE=$SEED_DATE \
    g commit --quiet --no-verify -m "$SEED_MESSAGE"
head=$(g rev-parse HEAD)
want=$(expected_commit)
if [ "$head" != "$want" ]; then
    echo "error: the seed commit is $head, expected $want" >&2
    exit 1
fi
echo "$head"
