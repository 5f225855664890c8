"""Check the click 8.1.7 scenario against the real repository it is asked about.

Usage: .venv/bin/python scenarios/click/check_questions.py REPO [--scenario PATH] [--no-sandbox]

REPO is the repository built by `scenarios/click/fetch_repo.sh`. The checks:

1. the root commit is the pinned pristine sdist commit (read from fetch_repo.sh);
2. every question's evidence path exists at the pristine commit;
3. locate and trap questions: the required file defines the identifier named in the
   prompt's backticks (`def NAME` / `class NAME`), and the required line pattern accepts
   `PATH:LINE` for that definition's line; a trap's forbidden claim names another file;
4. absence questions: nothing in the pristine tree defines or assigns the identifier;
5. the containment scan (caisson.chamber._containment, same normalisation and 5-word windows) finds
   no prompt window and no leak term in HEAD minus the scenario's exclusions, while the
   answer key does hold every prompt and the canary (so the exclusion is what keeps the
   run clean);
6. unless --no-sandbox: `caisson.chamber.sandbox.build_sandbox(REPO, "HEAD", ...)` succeeds with
   the scenario, and is refused (ContainmentError) when the answer_key exclusion is dropped.

Exits 0 when every check passes, 1 otherwise; prints one line per check.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

import msgspec

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

from caisson.chamber._containment import containment_hits  # noqa: E402
from caisson.errors import ContainmentError  # noqa: E402
from caisson.chamber.sandbox import _excluded_by, build_sandbox, glob_to_regex  # noqa: E402
from caisson.scenario import Scenario, load_scenario  # noqa: E402

_BACKTICK = re.compile(r"`([A-Za-z_][A-Za-z0-9_]*)`")


class Checker:
    def __init__(self) -> None:
        self.failures = 0

    def ok(self, cond: bool, what: str) -> bool:
        print(("ok    " if cond else "FAIL  ") + what)
        if not cond:
            self.failures += 1
        return cond


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


def pinned_pristine() -> str:
    m = re.search(r"^PRISTINE_COMMIT=([0-9a-f]{40})$", (HERE / "fetch_repo.sh").read_text(), re.M)
    assert m, "fetch_repo.sh pins no PRISTINE_COMMIT"
    return m.group(1)


def export(repo: Path, commit: str, dest: Path) -> list[str]:
    """Write the commit's tree into dest (git archive); return its file paths."""
    data = subprocess.run(
        ["git", "-C", str(repo), "archive", "--format=tar", commit],
        capture_output=True, check=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(dest, filter="data")
    return git(repo, "ls-tree", "-r", "--name-only", "--full-tree", commit).splitlines()


def identifier(prompt: str) -> str:
    m = _BACKTICK.search(prompt)
    assert m, f"prompt names no identifier in backticks: {prompt!r}"
    return m.group(1)


def definitions(text: str, name: str) -> list[int]:
    """Line numbers of `def name` / `class name` (any indentation, async too)."""
    rx = re.compile(rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(name)}\b")
    return [i for i, line in enumerate(text.splitlines(), 1) if rx.match(line)]


def absent_grep(repo: Path, commit: str, name: str) -> subprocess.CompletedProcess[str]:
    """git grep for a definition, assignment or import of name in the commit's tree."""
    n = re.escape(name)
    rx = (rf"^\s*((async\s+)?(def|class)\s+{n}\b|{n}\s*(:[^=]*)?=[^=])"
          rf"|^\s*(from\s+\S+\s+)?import\b.*\b{n}\b")
    return subprocess.run(
        ["git", "-C", str(repo), "grep", "-n", "-E", rx, commit],
        capture_output=True, text=True,
    )


def check(repo: Path, scenario: Scenario, sandbox: bool) -> int:
    c = Checker()
    pristine = pinned_pristine()
    roots = git(repo, "rev-list", "--max-parents=0", "HEAD").split()
    c.ok(roots == [pristine], f"root commit is the pinned pristine commit {pristine[:12]}")
    head = git(repo, "rev-parse", "HEAD").strip()
    print(f"      HEAD {head}")
    c.ok(not git(repo, "status", "--porcelain").strip(), "work tree is clean")

    def show(path: str) -> str:
        return git(repo, "show", f"{pristine}:{path}")

    pristine_files = set(git(repo, "ls-tree", "-r", "--name-only", "--full-tree", pristine).split("\n"))

    # --- 2-4: each question against the pristine source
    for q in scenario.questions:
        tag = f"[{q.id}]"
        words = len(re.findall(r"\w+", q.prompt))
        c.ok(words >= 8, f"{tag} prompt has {words} words (>= 8)")
        for ev in q.evidence:
            p = ev.strip("/")
            exists = p in pristine_files or any(f.startswith(p + "/") for f in pristine_files)
            c.ok(exists, f"{tag} evidence {ev} exists at the pristine commit")
        name = identifier(q.prompt)
        if q.kind in ("locate", "trap"):
            c.ok(not q.absent, f"{tag} {q.kind} question is not marked absent")
            files = [f.pattern for f in q.required if not f.regex and f.pattern in pristine_files]
            if not c.ok(len(files) == 1, f"{tag} one required fact names a file: {files}"):
                continue
            path = files[0]
            lines = definitions(show(path), name)
            c.ok(bool(lines), f"{tag} {path} defines `{name}` at line(s) {lines}")
            for fact in q.required:
                if fact.regex:
                    rx = re.compile(fact.pattern, re.I)
                    good = [n for n in lines if rx.search(f"`{name}` is defined in {path}:{n}")]
                    c.ok(bool(good), f"{tag} line pattern accepts {path}:{good or lines}")
                    wrong = [n for n in (1, 9999) if rx.search(f"{path}:{n}")]
                    c.ok(not wrong, f"{tag} line pattern rejects a wrong line")
                else:
                    c.ok(fact.pattern in pristine_files, f"{tag} required file {fact.pattern} exists")
            if q.kind == "trap":
                c.ok(bool(q.forbidden), f"{tag} trap has a forbidden claim")
            for claim in q.forbidden:
                c.ok(path not in claim.claim, f"{tag} forbidden claim {claim.claim!r} names another file")
        else:  # absence
            c.ok(q.absent and q.kind == "absence", f"{tag} absence question has absent = true")
            c.ok(not [f for f in q.required if f.pattern in pristine_files],
                 f"{tag} requires no file")
            out = absent_grep(repo, pristine, name)
            c.ok(out.returncode == 1 and not out.stdout,
                 f"{tag} `{name}` is neither defined, assigned nor imported anywhere in the "
                 "pristine tree" + (f": {out.stdout.strip()}" if out.stdout else ""))
            control = next(identifier(x.prompt) for x in scenario.questions if x.kind == "locate")
            c.ok(bool(absent_grep(repo, pristine, control).stdout),
                 f"{tag} the same grep does find a defined name (`{control}`)")

    # --- 5: the containment scan over HEAD minus the exclusions
    rules = [(ex.category, glob_to_regex(g)) for ex in scenario.exclusions for g in ex.globs]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        paths = export(repo, "HEAD", root)
        kept = [p for p in paths if _excluded_by(p, rules) is None]
        excluded = sorted(set(paths) - set(kept))
        print(f"      HEAD has {len(paths)} files; the exclusions withhold {excluded}")
        hits = containment_hits(root, kept, scenario)
        c.ok(not hits, f"containment scan of HEAD minus exclusions: {len(hits)} hit(s)")
        for h in hits:
            print("        " + h)
        key = [ex.globs for ex in scenario.exclusions if ex.category == "answer_key"]
        key_files = [p for p in paths if _excluded_by(p, [("k", glob_to_regex(g)) for g in key[0]])]
        key_hits = containment_hits(root, key_files, scenario)
        for q in scenario.questions:
            c.ok(any(f"(question {q.id})" in h for h in key_hits),
                 f"[{q.id}] the answer key holds the prompt (positive control)")
        for term in scenario.leak_terms:
            holders = [p for p in paths if term.casefold() in (root / p).read_text(errors="replace").casefold()]
            c.ok(holders == key_files, f"leak term {term!r} appears only in the answer key: {holders}")

    # --- 6: build_sandbox with and without the answer_key exclusion
    if sandbox:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                sb = build_sandbox(repo, "HEAD", scenario, Path(tmp) / "sandbox")
                c.ok(True, f"build_sandbox passes: {sb.file_count} files, "
                     f"{len(sb.excluded)} withheld, sandbox commit {sb.sandbox_commit[:12]}")
            except Exception as e:  # noqa: BLE001
                c.ok(False, f"build_sandbox passes: {type(e).__name__}: {e}")
            bare = msgspec.structs.replace(
                scenario,
                exclusions=[ex for ex in scenario.exclusions if ex.category != "answer_key"],
            )
            try:
                build_sandbox(repo, "HEAD", bare, Path(tmp) / "bare")
                c.ok(False, "build_sandbox without the answer_key exclusion is refused")
            except ContainmentError as e:
                c.ok(True, f"build_sandbox without the answer_key exclusion is refused: "
                     f"{len(e.hits)} hit(s)")
                for h in e.hits:
                    print("        " + h)
            c.ok(not (Path(tmp) / "bare").exists(), "the refused sandbox was removed")

    print(f"{c.failures} failure(s)")
    return 1 if c.failures else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("repo", type=Path)
    ap.add_argument("--scenario", type=Path, default=HERE / "scenario.toml")
    ap.add_argument("--no-sandbox", action="store_true", help="skip the build_sandbox check")
    args = ap.parse_args()
    return check(args.repo, load_scenario(args.scenario), not args.no_sandbox)


if __name__ == "__main__":
    sys.exit(main())
