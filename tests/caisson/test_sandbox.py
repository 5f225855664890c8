"""Tests for caisson.chamber.sandbox and caisson.chamber._containment: the tree the agent sees."""

from __future__ import annotations

import base64
import hashlib
import os
import stat
import subprocess
import zlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from caisson.chamber._containment import containment_hits, normalize_words, prompt_windows
from caisson.errors import ContainmentError, SandboxError
from caisson.chamber.sandbox import (
    build_sandbox,
    glob_to_regex,
    remove_sandbox,
    tree_digest,
)
from caisson.scenario import ExclusionCategory, Question, Scenario
from ledger.events import ExcludedPath
from tests.helpers import git

PROMPT = "Which function loads the configuration file and where is it defined?"

FILES = {
    "README.md": "A demo project.\n",
    "src/config.py": "def load_config(path):\n    return open(path).read()\n",
    "src/http.py": "def get(url):\n    pass\n",
    "answers/q1.md": "load_config in src/config.py (unique answer text 1)\n",
    "docs/reports/2024/summary.md": "Published summary of results 42.\n",
    "CLAUDE.md": "agent instructions at top\n",
    "pkg/sub/CLAUDE.md": "agent instructions nested\n",
    "logs/run-1/session.jsonl": '{"event": "telemetry 7"}\n',
    "grading/check.py": "GRADER = True\n",
    "scripts/run.sh": "#!/bin/sh\necho run\n",
    "keep.log": "tracked although ignored\n",
    ".gitignore": "*.log\n",
    ".gitattributes": "notes.txt export-ignore\n",
    "notes.txt": "exported in spite of export-ignore\n",
}

EXCLUSIONS = [
    ExclusionCategory(category="answer_key", globs=["answers/**"]),
    ExclusionCategory(category="telemetry", globs=["**/*.jsonl"]),
    ExclusionCategory(category="agent_instructions", globs=["**/CLAUDE.md"]),
    ExclusionCategory(category="published_reports", globs=["docs/reports"]),
    ExclusionCategory(category="grading", globs=["grading/"]),
]
EXCLUDED = {
    "answers/q1.md": "answer_key",
    "logs/run-1/session.jsonl": "telemetry",
    "CLAUDE.md": "agent_instructions",
    "pkg/sub/CLAUDE.md": "agent_instructions",
    "docs/reports/2024/summary.md": "published_reports",
    "grading/check.py": "grading",
}


def write_files(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


@pytest.fixture
def repo(tmp_path: Path) -> dict[str, object]:
    """A live repository: commit `first` with FILES, then a later commit."""
    root = tmp_path / "live"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    write_files(root, FILES)
    os.chmod(root / "scripts/run.sh", 0o755)
    os.symlink("README.md", root / "readme-link")
    git(root, "add", "-A")
    git(root, "add", "-f", "keep.log")
    git(root, "commit", "-q", "-m", "first")
    first = git(root, "rev-parse", "HEAD").strip()
    write_files(root, {"later.py": "LATER = 'future work'\n", "README.md": "Changed later.\n"})
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "second")
    (root / "untracked.txt").write_text("untracked\n")  # the live tree is dirty too
    return {"root": root, "first": first, "second": git(root, "rev-parse", "HEAD").strip()}


def scenario(**kw: object) -> Scenario:
    base: dict[str, object] = {
        "name": "t",
        "questions": [Question(id="q1", prompt=PROMPT, evidence=["src/config.py"])],
        "exclusions": EXCLUSIONS,
    }
    base.update(kw)
    return Scenario(**base)  # type: ignore[arg-type]


def snapshot(root: Path) -> dict[str, bytes]:
    out = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            p = Path(dirpath) / n
            data = os.readlink(p).encode() if p.is_symlink() else p.read_bytes()
            out[str(p.relative_to(root))] = data
    return out


def test_exports_exact_commit(repo, tmp_path: Path) -> None:
    sb = build_sandbox(repo["root"], repo["first"][:8], scenario(), tmp_path / "sb")
    dest = Path(sb.path)
    assert sb.commit == repo["first"]
    assert not (dest / "later.py").exists() and not (dest / "untracked.txt").exists()
    assert (dest / "README.md").read_text() == FILES["README.md"]
    assert (dest / "notes.txt").read_text() == FILES["notes.txt"]  # export-ignore ignored
    assert (dest / "keep.log").exists()  # tracked-but-ignored files are kept
    assert os.readlink(dest / "readme-link") == "README.md"
    assert os.stat(dest / "scripts/run.sh").st_mode & stat.S_IXUSR
    assert not os.stat(dest / "src/config.py").st_mode & stat.S_IXUSR
    assert sb.file_count == len(FILES) + 1 - len(EXCLUDED)
    assert git(dest, "ls-files", "-s", "scripts/run.sh").startswith("100755")
    assert git(dest, "ls-files", "-s", "readme-link").startswith("120000")
    assert git(dest, "status", "--porcelain") == ""


def test_resolves_refs(repo, tmp_path: Path) -> None:
    sb = build_sandbox(repo["root"], "main", scenario(), tmp_path / "sb")
    assert sb.commit == repo["second"]
    assert (Path(sb.path) / "later.py").exists()


def test_exclusions_by_category(repo, tmp_path: Path) -> None:
    sb = build_sandbox(repo["root"], repo["first"], scenario(), tmp_path / "sb")
    assert sb.excluded == [ExcludedPath(path=p, category=c) for p, c in sorted(EXCLUDED.items())]
    for p in EXCLUDED:
        assert not (Path(sb.path) / p).exists()
    assert not (Path(sb.path) / "answers").exists()


def test_sandbox_has_no_history(repo, tmp_path: Path) -> None:
    root = repo["root"]
    sb = build_sandbox(root, repo["first"], scenario(), tmp_path / "sb")
    dest = Path(sb.path)
    assert git(dest, "log", "--all", "--format=%H").split() == [sb.sandbox_commit]
    assert git(dest, "for-each-ref", "--format=%(refname)").split() == ["refs/heads/main"]
    assert git(dest, "remote") == ""
    objects = git(dest, "rev-list", "--all", "--objects")
    forbidden = [git(root, "hash-object", p).strip() for p in EXCLUDED]
    forbidden.append(git(root, "rev-parse", f"{repo['second']}:later.py").strip())
    forbidden.append(git(root, "rev-parse", f"{repo['second']}:README.md").strip())
    forbidden += [repo["first"], repo["second"]]
    for oid in forbidden:
        assert oid not in objects
        r = subprocess.run(["git", "cat-file", "-e", oid], cwd=dest, capture_output=True)
        assert r.returncode != 0, oid
    fsck = subprocess.run(
        ["git", "fsck", "--lost-found"], cwd=dest, capture_output=True, text=True, check=True
    )
    assert "dangling" not in fsck.stdout + fsck.stderr
    assert not (dest / ".git" / "lost-found").exists()


def test_live_repo_unchanged(repo, tmp_path: Path) -> None:
    root = repo["root"]
    status = git(root, "status", "--porcelain")
    before = snapshot(root)
    build_sandbox(root, repo["first"], scenario(), tmp_path / "sb")
    assert snapshot(root) == before
    assert git(root, "status", "--porcelain") == status
    assert git(root, "worktree", "list").count("\n") == 1


def test_deterministic_and_digest(repo, tmp_path: Path) -> None:
    a = build_sandbox(repo["root"], repo["first"], scenario(), tmp_path / "a")
    b = build_sandbox(repo["root"], repo["first"], scenario(), tmp_path / "b")
    assert (a.sandbox_commit, a.tree_digest) == (b.sandbox_commit, b.tree_digest)
    entries = []
    for rel, text in FILES.items():
        if rel not in EXCLUDED:
            mode = "100755" if rel == "scripts/run.sh" else "100644"
            entries.append((rel, mode, hashlib.sha256(text.encode()).hexdigest()))
    entries.append(("readme-link", "120000", hashlib.sha256(b"README.md").hexdigest()))
    assert a.tree_digest == tree_digest(entries)
    c = build_sandbox(repo["root"], repo["second"], scenario(), tmp_path / "c")
    assert c.tree_digest != a.tree_digest


@pytest.mark.parametrize(
    ("which", "needle"),
    [("missing", "does not exist"), ("plain", "not a git repository"), ("commit", "is not in")],
)
def test_bad_repo_or_commit(repo, tmp_path: Path, which: str, needle: str) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    path, rev = {
        "missing": (tmp_path / "nope", "HEAD"),
        "plain": (plain, "HEAD"),
        "commit": (repo["root"], "deadbeef" * 5),
    }[which]
    with pytest.raises(SandboxError, match=needle) as e:
        build_sandbox(path, rev, scenario(), tmp_path / "sb")
    assert "\n" not in str(e.value)
    assert not (tmp_path / "sb").exists()


def test_dest_must_be_empty(repo, tmp_path: Path) -> None:
    (tmp_path / "sb").mkdir()
    (tmp_path / "sb" / "x").write_text("x")
    with pytest.raises(SandboxError, match="not empty"):
        build_sandbox(repo["root"], repo["first"], scenario(), tmp_path / "sb")


def test_containment_window_hit(repo, tmp_path: Path) -> None:
    root = repo["root"]
    faq = "intro\n\nQ: WHICH function   loads the\nConfiguration file, please?\n"
    write_files(root, {"notes/faq.md": faq})
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "faq")
    with pytest.raises(ContainmentError) as e:
        build_sandbox(root, "HEAD", scenario(), tmp_path / "sb")
    hit = 'notes/faq.md:3: "which function loads the configuration file" (question q1)'
    assert e.value.hits == [hit]
    assert not (tmp_path / "sb").exists()  # a refused sandbox does not linger


def test_containment_leak_terms(repo, tmp_path: Path) -> None:
    s = scenario(
        leak_terms=["Unique ANSWER"],
        questions=[Question(id="q1", prompt="x y", evidence=["src"], leak_terms=["loads()"])],
        exclusions=[],
    )
    with pytest.raises(ContainmentError) as e:
        build_sandbox(repo["root"], repo["first"], s, tmp_path / "sb")
    assert e.value.hits == ["answers/q1.md:1: leak term 'Unique ANSWER'"]  # as the scenario spells it
    write_files(tmp_path / "t", {"a.txt": "one\ncall LOADS() here\n", "loads()/b.txt": ""})
    hits = containment_hits(tmp_path / "t", ["a.txt", "loads()/b.txt"], s)
    assert hits == [
        "a.txt:2: leak term 'loads()'",
        "loads()/b.txt: leak term 'loads()' in the path",
    ]


CANARY = "rt-canary-9x1q"
WINDOW_HIT = '"which function loads the configuration file and where is it defined" (question q1)'
SIX_WORDS = '"which function loads the configuration file" (question q1)'


def test_a_leak_in_another_spelling_refuses_the_sandbox(repo, tmp_path: Path) -> None:
    """The issue's tree: the key as a raw zlib stream, the prompt with a Cyrillic о and soft
    hyphens, the canary in base64. Each is a hit; on main the scan passed them all."""
    root = repo["root"]
    (root / "data").mkdir()
    (root / "data" / "key.z").write_bytes(zlib.compress(f"{CANARY}: load_config, src/config.py\n".encode()))
    write_files(root, {
        "docs/faq.md": "Q: Which functi\u043en lo\u00adads the con\u00adfiguration file and where is it defined?\n",
        "tests/fixture.json": '{"blob": "' + base64.b64encode(f"the canary is {CANARY}".encode()).decode() + '"}\n',
    })
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "leaks")
    with pytest.raises(ContainmentError) as e:
        build_sandbox(root, "HEAD", scenario(leak_terms=[CANARY]), tmp_path / "sb")
    assert e.value.hits == [
        f"data/key.z [zlib]:1: leak term {CANARY!r}",
        f"docs/faq.md:1: {WINDOW_HIT}",
        f"tests/fixture.json [base64 (line 1)]:1: leak term {CANARY!r}",
    ]
    assert not (tmp_path / "sb").exists()


MEMBERS = {  # file text, the hit it must give
    "fullwidth prompt": ("Ｗｈｉｃｈ ｆｕｎｃｔｉｏｎ ｌｏａｄｓ ｔｈｅ ｃｏｎｆｉｇｕｒａｔｉｏｎ ｆｉｌｅ\n", "1: " + SIX_WORDS),
    "Greek omicron in the prompt": ("which functi\u03bfn l\u03bfads the c\u03bfnfiguration file\n", "1: " + SIX_WORDS),
    "combining low lines on the prompt": ("".join(c + "\u0332" for c in "which function loads") + " the configuration file\n",
                                          "1: " + SIX_WORDS),
    "zero-width joiners in the prompt": ("which\u200d function\u200c loads the con\u200dfiguration file\n", "1: " + SIX_WORDS),
    "mixed case": ("WhIcH FuNcTiOn LoAdS tHe CoNfIgUrAtIoN fIlE\n", "1: " + SIX_WORDS),
    "non-breaking hyphens in the term": ("x\nrt\u2011canary\u20119x1q\n", f"2: leak term {CANARY!r}"),
    "en and em dash in the term": ("rt\u2013canary\u20149x1q\n", f"1: leak term {CANARY!r}"),
    "a zero-width joiner inside the term": ("rt-can\u200dary-9x1q\n", f"1: leak term {CANARY!r}"),
    "base64url without padding": (base64.urlsafe_b64encode(b"<<<" + CANARY.encode() + b">>>?").decode().rstrip("=") + "\n",
                                  f"1: leak term {CANARY!r}"),
    "a term with a space, split over a line break": ("the unique\nanswer text\n", "1: leak term 'Unique Answer'"),
}


@pytest.mark.parametrize("member", list(MEMBERS))
def test_other_spellings_are_hits(tmp_path: Path, member: str) -> None:
    text, hit = MEMBERS[member]
    (tmp_path / "f.txt").write_text(text)
    hits = containment_hits(tmp_path, ["f.txt"], scenario(leak_terms=[CANARY, "Unique Answer"]))
    assert len(hits) == 1 and hits[0].endswith(hit) and hits[0].startswith("f.txt"), hits


@pytest.mark.parametrize("text", [
    "Which function loads the data? The configuration file is read elsewhere.\n",  # words, not 5 in a row
    "rt canary 9x1q, rt-canary-9x1, canary-9x1q\n",  # the term's words, not the term
    "unique\n\nanswer\n",  # a blank line between is whitespace too: only words that touch
])
def test_text_that_shares_words_is_not_a_hit(tmp_path: Path, text: str) -> None:
    (tmp_path / "f.txt").write_text(text)
    hits = containment_hits(tmp_path, ["f.txt"], scenario(leak_terms=[CANARY, "unique answer x"]))
    assert hits == []


def test_a_stray_nul_hides_nothing(tmp_path: Path) -> None:
    # grep searches files with NULs too ("binary file matches"); so does the scan.
    (tmp_path / "blob.bin").write_bytes(b"\0\1" + PROMPT.encode())
    (tmp_path / "late.bin").write_bytes(b"x" * 9000 + b"\0" + PROMPT.encode())
    hits = containment_hits(tmp_path, ["blob.bin", "late.bin"], scenario())
    assert [h.split(":")[0] for h in hits] == ["blob.bin", "late.bin"]


def test_evidence_excluded_is_refused(repo, tmp_path: Path) -> None:
    s = scenario(questions=[Question(id="q1", prompt=PROMPT, evidence=["answers/q1.md"])])
    with pytest.raises(SandboxError, match="never the answers") as e:
        build_sandbox(repo["root"], repo["first"], s, tmp_path / "sb")
    assert "answers/q1.md" in str(e.value) and "answer_key" in str(e.value)
    s = scenario(questions=[Question(id="q1", prompt=PROMPT, evidence=["docs/reports"])])
    with pytest.raises(SandboxError, match="published_reports"):
        build_sandbox(repo["root"], repo["first"], s, tmp_path / "sb")


def test_evidence_missing_at_commit(repo, tmp_path: Path) -> None:
    s = scenario(questions=[Question(id="q1", prompt=PROMPT, evidence=["later.py"])])
    with pytest.raises(SandboxError, match="does not exist at this commit"):
        build_sandbox(repo["root"], repo["first"], s, tmp_path / "sb")
    s = scenario(questions=[Question(id="q1", prompt=PROMPT, evidence=["./src/", "later.py"])])
    assert build_sandbox(repo["root"], repo["second"], s, tmp_path / "ok").file_count > 0


def test_unknown_category_at_build(repo, tmp_path: Path) -> None:
    bad = ExclusionCategory(category="secrets", globs=["x"])  # type: ignore[arg-type]
    s = scenario(exclusions=[bad])
    with pytest.raises(SandboxError, match="answer_key"):
        build_sandbox(repo["root"], repo["first"], s, tmp_path / "sb")


def test_remove_sandbox_read_only(repo, tmp_path: Path) -> None:
    sb = build_sandbox(repo["root"], repo["first"], scenario(), tmp_path / "sb")
    dest = Path(sb.path)
    os.chmod(dest / "src/config.py", 0o444)
    os.chmod(dest / "src", 0o555)
    remove_sandbox(sb)
    assert not dest.exists()
    remove_sandbox(sb)  # already gone: fine


@pytest.mark.parametrize(
    ("glob", "path", "hit"),
    [
        ("answers/**", "answers/a/b.md", True),
        ("answers/**", "answersx/b.md", False),
        ("**/CLAUDE.md", "CLAUDE.md", True),
        ("**/CLAUDE.md", "a/b/CLAUDE.md", True),
        ("**/CLAUDE.md", "a/b/NOTCLAUDE.md", False),
        ("a/**/b.md", "a/b.md", True),
        ("a/**/b.md", "a/x/y/b.md", True),
        ("*.md", "x/y.md", False),
        ("*.md", "y.md", True),
        ("docs/report-?.md", "docs/report-1.md", True),
        ("docs/report-[!0-9].md", "docs/report-1.md", False),
        ("docs/report-[!0-9].md", "docs/report-a.md", True),
        ("a*", "ab/c", False),
        ("/docs/", "docs", True),
        ("we(ir)d+.md", "we(ir)d+.md", True),
    ],
)
def test_glob_to_regex(glob: str, path: str, hit: bool) -> None:
    assert bool(glob_to_regex(glob).fullmatch(path)) is hit


def test_windows_and_normaliser() -> None:
    assert normalize_words("Where is `parse()`\n  DEFINED?") == ["where", "is", "parse", "defined"]
    assert prompt_windows("a b c") == {("a", "b", "c")}
    assert prompt_windows("?!") == set()
    assert prompt_windows("one two three four five six") == {
        ("one", "two", "three", "four", "five"),
        ("two", "three", "four", "five", "six"),
    }


# Words whose case change is a single word of the same case-folded text (Unicode has a
# few letters, such as the dotless i, whose upper case folds to another letter).
WORD = st.text(st.characters(categories=["L", "Nd"]), min_size=1, max_size=8).filter(
    lambda w: normalize_words(w.upper()) == normalize_words(w) == [w.casefold()]
)
WORDS = st.lists(WORD, min_size=1, max_size=12)
SEP = st.sampled_from([" ", "\n", "\t", "  ", ", ", ". ", "?\n", " (", ") ", "`"])
SEPS = st.lists(SEP, min_size=12, max_size=12)


@given(WORDS, SEPS)
def test_normaliser_ignores_case_and_separators(words: list[str], seps: list[str]) -> None:
    joined = " ".join(words)
    noisy = "".join(w.upper() + s for w, s in zip(words, seps))
    assert normalize_words(noisy) == normalize_words(joined)
    for win in prompt_windows(joined):
        assert len(win) == min(5, len(normalize_words(joined)))


def test_scan_of_many_ordinary_files_finds_nothing(tmp_path: Path) -> None:
    """200 files against 20 prompts: no false hit (its speed is benchmarks/scan_bench.py's)."""
    body = "\n".join(f"line {i} of some ordinary source text with words" for i in range(200))
    paths = []
    for i in range(200):
        (tmp_path / f"f{i}.py").write_text(body)
        paths.append(f"f{i}.py")
    qs = [Question(id=f"q{i}", prompt=f"{PROMPT} variant {i}") for i in range(20)]
    s = scenario(questions=qs)
    assert containment_hits(tmp_path, paths, s) == []


def test_odd_file_names_round_trip(tmp_path: Path) -> None:
    root = tmp_path / "odd"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    write_files(root, {'"quoted"': "a\n", "new\nline": "b\n", "ünï cödé.txt": "c\n"})
    os.symlink("/etc/passwd", root / "abs-link")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "odd")
    sb = build_sandbox(root, "HEAD", Scenario(name="t"), tmp_path / "sb")
    assert git(Path(sb.path), "ls-tree", "-r", "HEAD") == git(root, "ls-tree", "-r", "HEAD")
    assert sb.file_count == 4


def test_build_of_200_files_keeps_them_all(tmp_path: Path) -> None:
    """(its speed is benchmarks/scan_bench.py's and record_bench.py's)"""
    root = tmp_path / "big"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    body = "\n".join(f"def f{i}(x):\n    return x + {i}" for i in range(100))
    write_files(root, {f"pkg{i % 10}/mod{i}.py": body for i in range(200)})
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "big")
    s = scenario(questions=[Question(id="q", prompt=PROMPT)])
    sb = build_sandbox(root, "HEAD", s, tmp_path / "sb")
    assert sb.file_count == 200
