"""The sandbox: the throwaway tree the agent sees.

`build_sandbox` exports exactly one commit of a repository, withholds the scenario's
exclusion set, refuses to go on if the tree still holds a question or a leak term (see
`caisson.chamber._containment`), and turns the result into a fresh git repository whose only
commit is that tree: no history, no remotes, no later commits, no excluded blob.

The live repository is only read (`rev-parse`, `ls-tree`, `cat-file`): no worktree is
registered, its index and refs are untouched, and excluded files are never copied out.
Files are written from the blobs themselves, so no clean/smudge filter, `eol` attribute or
`export-ignore`/`export-subst` of the commit can alter what the agent sees.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath

import msgspec

from caisson._glob import glob_to_regex
from caisson.chamber._containment import scan_tree
from caisson.chamber.agent_config import AGENT_CONFIG_GLOBS, DEFAULT_EXCLUSIONS, config_commands
from caisson.errors import SandboxError
from caisson.scenario import CATEGORIES, Category, Scenario
from ledger.events import AgentConfigFound, ExcludedPath

__all__ = [
    "Sandbox",
    "build_sandbox",
    "glob_to_regex",
    "remove_sandbox",
    "tree_digest",
]

#: Fixed identity and date of the sandbox's only commit, so its hash is deterministic.
SANDBOX_IDENTITY = {
    "GIT_AUTHOR_NAME": "caisson",
    "GIT_AUTHOR_EMAIL": "caisson@sandbox.invalid",
    "GIT_AUTHOR_DATE": "946684800 +0000",
    "GIT_COMMITTER_NAME": "caisson",
    "GIT_COMMITTER_EMAIL": "caisson@sandbox.invalid",
    "GIT_COMMITTER_DATE": "946684800 +0000",
}
SANDBOX_MESSAGE = "sandbox"


class Sandbox(msgspec.Struct, frozen=True, kw_only=True):
    """A built sandbox."""

    path: str
    """Absolute path of the sandbox tree (a fresh git repository)."""
    commit: str
    """Full hash of the exported commit in the live repository."""
    tree_digest: str
    """sha256 hex of the tree, see `tree_digest`."""
    excluded: list[ExcludedPath]
    """Every withheld file with its category, sorted by path."""
    sandbox_commit: str
    """Hash of the fresh repository's only commit."""
    file_count: int
    """Number of files (regular files and symlinks) in the sandbox."""
    unscanned: list[str] = []
    """Files the containment scan did not read to their end (too big), one line each."""
    agent_config: list[AgentConfigFound] = []
    """Agent configuration files left in the tree (`AGENT_CONFIG_GLOBS`), with the commands
    they would make the agent run; empty unless the default exclusions were turned off
    (see `build_sandbox`)."""


def tree_digest(entries: Iterable[tuple[str, str, str]]) -> str:
    """Digest of a tree independent of git's object format.

    The sha256 of the concatenation, over entries sorted by the UTF-8 bytes of their
    path, of `path NUL mode NUL sha256hex LF`, where mode is git's octal file mode
    (`100644`, `100755`, `120000`) and sha256hex is the sha256 of the file's content (for
    a symlink, of its target).

    Args:
        entries: (repo-relative POSIX path, mode, sha256 hex of content) per file.

    Returns:
        64 lowercase hex digits.
    """
    h = hashlib.sha256()
    def key(entry: tuple[str, str, str]) -> bytes:
        return entry[0].encode("utf-8", "surrogateescape")

    for path, mode, digest in sorted(entries, key=key):
        h.update(f"{path}\0{mode}\0{digest}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def _git_env(extra: Mapping[str, str] | None = None, *, isolated: bool = False) -> dict[str, str]:
    """The environment for git: no inherited GIT_* redirection, C locale messages."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["LC_ALL"] = "C"
    if isolated:  # the sandbox repo: no user hooks, signing, templates or filters
        env["GIT_CONFIG_NOSYSTEM"] = "1"
        env["GIT_CONFIG_GLOBAL"] = os.devnull
    env.update(extra or {})
    return env


def _git(cwd: Path, *args: str, env: dict[str, str], stdin: bytes | None = None) -> bytes:
    """Run git and return its stdout; raise SandboxError with its stderr on failure."""
    try:
        r = subprocess.run(
            ["git", *args], cwd=cwd, env=env, input=stdin, capture_output=True, check=False
        )
    except FileNotFoundError as e:
        raise SandboxError("git is not installed; install git and retry") from e
    if r.returncode != 0:
        err = r.stderr.decode(errors="replace").strip().splitlines()
        raise SandboxError(f"git {args[0]} failed in {cwd}: {err[-1] if err else r.returncode}")
    return r.stdout


def _resolve(repo: Path, commit: str) -> tuple[str, dict[str, str]]:
    """Check the repository and return the full commit hash and the env to read it."""
    if not repo.exists():
        raise SandboxError(f"repository {repo} does not exist; pass the path of a git checkout")
    if not repo.is_dir():
        raise SandboxError(f"repository {repo} is not a directory; pass a git checkout")
    env = _git_env({"GIT_CEILING_DIRECTORIES": str(repo.resolve().parent)})
    try:
        _git(repo, "rev-parse", "--git-dir", env=env)
    except SandboxError:
        raise SandboxError(
            f"{repo} is not a git repository; pass the top-level directory of a git checkout"
        ) from None
    try:
        rev = f"{commit}^{{commit}}"
        out = _git(repo, "rev-parse", "--verify", "--end-of-options", rev, env=env)
    except SandboxError:
        raise SandboxError(
            f"commit {commit!r} is not in {repo}; fetch it or pass an existing commit or ref"
        ) from None
    return out.decode().strip(), env


def _ls_tree(repo: Path, commit: str, env: dict[str, str]) -> list[tuple[str, str, str]]:
    """(mode, blob id, path) of every blob of the commit; submodules are skipped."""
    out = _git(repo, "ls-tree", "-r", "-z", "--full-tree", commit, env=env)
    entries = []
    for rec in out.split(b"\0"):
        if not rec:
            continue
        meta, _, raw = rec.partition(b"\t")
        mode, kind, oid = meta.decode().split()
        path = os.fsdecode(raw)
        parts = path.split("/")
        if any(x in ("", ".", "..") or x.lower() == ".git" for x in parts):
            raise SandboxError(f"commit {commit} has an unsafe path {path!r}; refusing it")
        if kind == "blob":
            entries.append((mode, oid, path))
    return entries


def _excluded_by(path: str, rules: list[tuple[Category, re.Pattern[str]]]) -> Category | None:
    """The first category whose glob matches the path or one of its ancestors."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for category, rx in rules:
        if any(rx.fullmatch(p) for p in prefixes):
            return category
    return None


def _export(
    repo: Path, env: dict[str, str], blobs: list[tuple[str, str, str]], dest: Path
) -> list[tuple[str, str, str]]:
    """Write the blobs into dest with `git cat-file --batch`; return digest entries."""
    digests = []
    proc = subprocess.Popen(
        ["git", "cat-file", "--batch"],
        cwd=repo,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        for mode, oid, path in blobs:
            proc.stdin.write(oid.encode() + b"\n")
            proc.stdin.flush()
            header = proc.stdout.readline().split()
            if len(header) != 3:
                raise SandboxError(f"cannot read blob {oid} of {path} from {repo}")
            data = proc.stdout.read(int(header[2]))
            proc.stdout.read(1)  # the LF after the content
            target = dest / path
            target.parent.mkdir(parents=True, exist_ok=True)
            if mode == "120000":
                os.symlink(os.fsdecode(data), target)
            else:
                target.write_bytes(data)
                os.chmod(target, 0o755 if mode == "100755" else 0o644)
            digests.append((path, mode, hashlib.sha256(data).hexdigest()))
    finally:
        proc.stdin.close()
        proc.wait()
    return digests


def _check_evidence(scenario: Scenario, kept: set[str], excluded: Mapping[str, str]) -> None:
    """Refuse when a question's evidence is withheld or missing at the commit."""
    for q in scenario.questions:
        for ev in q.evidence:
            p = str(PurePosixPath(ev.strip("/"))).removeprefix("./")
            under = p + "/"
            if p in kept or any(k.startswith(under) for k in kept):
                continue
            if p in excluded or any(x.startswith(under) for x in excluded):
                cat = excluded.get(p) or next(v for k, v in excluded.items() if k.startswith(under))
                raise SandboxError(
                    f"question {q.id}: evidence {ev!r} is excluded by category {cat!r}; "
                    "containment removes the answer key, never the answers: narrow the glob"
                )
            raise SandboxError(
                f"question {q.id}: evidence {ev!r} does not exist at this commit; "
                "fix the evidence path or the commit"
            )


def _init_repo(dest: Path, kept: list[tuple[str, str, str]]) -> str:
    """Make dest a fresh repository with one deterministic commit; return its hash.

    Plumbing, not `git add`: no .gitignore, filter or eol attribute of the tree can drop
    or alter a file on its way into the object store.
    """
    env = _git_env(SANDBOX_IDENTITY, isolated=True)
    _git(dest, "init", "--quiet", "--template=", "--initial-branch=main", ".", env=env)
    _git(dest, "config", "core.autocrlf", "false", env=env)
    batch = [p for m, _, p in kept if m != "120000" and "\n" not in p and p[:1] != '"']
    oids: dict[str, str] = {}
    if batch:
        stdin = "".join(p + "\n" for p in batch).encode("utf-8", "surrogateescape")
        out = _git(dest, "hash-object", "-w", "--no-filters", "--stdin-paths", env=env, stdin=stdin)
        oids.update(zip(batch, out.decode().split(), strict=True))
    index = []
    for mode, _, p in kept:
        if p not in oids:  # symlinks (hash the target) and names --stdin-paths would mangle
            f = dest / p
            data = os.fsencode(os.readlink(f)) if mode == "120000" else f.read_bytes()
            out = _git(dest, "hash-object", "-w", "--no-filters", "--stdin", env=env, stdin=data)
            oids[p] = out.decode().strip()
        index.append(f"{mode} {oids[p]}\t".encode() + p.encode("utf-8", "surrogateescape") + b"\0")
    _git(dest, "update-index", "--add", "-z", "--index-info", env=env, stdin=b"".join(index))
    _git(dest, "update-index", "-q", "--refresh", env=env)
    tree = _git(dest, "write-tree", env=env).decode().strip()
    commit = _git(dest, "commit-tree", tree, "-m", SANDBOX_MESSAGE, env=env).decode().strip()
    _git(dest, "update-ref", "refs/heads/main", commit, env=env)
    return commit


def build_sandbox(repo: Path, commit: str, scenario: Scenario, dest: Path, *,
                  default_exclusions: bool = True) -> Sandbox:
    """Build the sandbox for one commit of a repository.

    Args:
        repo: the live repository (its top-level directory, or a bare repository). Only
            read: never written, its index and refs untouched.
        commit: any revision naming a commit (hash, tag, branch).
        scenario: gives the exclusion set, the questions and the leak terms.
        dest: where to build the tree; must not exist or be an empty directory. It is
            removed again when the build is refused.
        default_exclusions: also withhold `DEFAULT_EXCLUSIONS` (agent configuration),
            after the scenario's categories; off only to weaken the control on purpose.

    Returns:
        The sandbox: a fresh git repository at `dest` with a single commit.

    Raises:
        SandboxError: the repository is missing or not a git repository, the commit is
            unknown, dest is not empty, a category is unknown, or a question's evidence
            is excluded or missing at the commit.
        ContainmentError: the tree holds a 5-word window of a question or a leak term;
            `hits` lists each as `file:line: window`.
    """
    repo, dest = Path(repo), Path(dest)
    full, env = _resolve(repo, commit)
    rules: list[tuple[Category, re.Pattern[str]]] = []
    for ex in scenario.exclusions:
        if ex.category not in CATEGORIES:
            raise SandboxError(
                f"unknown exclusion category {ex.category!r}; use one of {', '.join(CATEGORIES)}"
            )
        rules.extend((ex.category, glob_to_regex(g)) for g in ex.globs)
    if default_exclusions:
        rules.extend((ex.category, glob_to_regex(g)) for ex in DEFAULT_EXCLUSIONS for g in ex.globs)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise SandboxError(f"sandbox destination {dest} is not empty; pass a new directory")
    entries = _ls_tree(repo, full, env)
    excluded: dict[str, Category] = {}
    kept = []
    for mode, oid, path in entries:
        cat = _excluded_by(path, rules)
        if cat is None:
            kept.append((mode, oid, path))
        else:
            excluded[path] = cat
    created = not dest.exists()
    dest.mkdir(parents=True, exist_ok=True)
    try:
        _check_evidence(scenario, {p for _, _, p in kept}, excluded)
        digests = _export(repo, env, kept, dest)
        unscanned = scan_tree(dest, [p for _, _, p in kept], scenario)
        config_rules: list[tuple[Category, re.Pattern[str]]] = [("agent_config", glob_to_regex(g))
                                                                for g in AGENT_CONFIG_GLOBS]
        agent_config = [config_commands(p, (dest / p).read_bytes() if m != "120000" else b"")
                        for m, _, p in kept if _excluded_by(p, config_rules)]
        sandbox_commit = _init_repo(dest, kept)
    except BaseException:
        _rmtree(dest, keep_root=not created)
        raise
    return Sandbox(
        path=str(dest.resolve()),
        commit=full,
        tree_digest=tree_digest(digests),
        excluded=[ExcludedPath(path=p, category=c) for p, c in sorted(excluded.items())],
        sandbox_commit=sandbox_commit,
        file_count=len(kept),
        unscanned=unscanned,
        agent_config=agent_config,
    )


def _rmtree(path: Path, *, keep_root: bool = False) -> None:
    """Delete a tree even when files or directories in it are read-only."""

    def onerror(func, p, _exc):  # type: ignore[no-untyped-def]
        parent = os.path.dirname(p)
        for q in (parent, p):
            try:
                os.chmod(q, stat.S_IRWXU, follow_symlinks=False)
            except (OSError, NotImplementedError):
                pass
        func(p)

    if not path.exists() and not path.is_symlink():
        return
    if keep_root:
        for child in path.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, onerror=onerror)
            else:
                child.unlink()
    else:
        shutil.rmtree(path, onerror=onerror)


def remove_sandbox(sandbox: Sandbox) -> None:
    """Delete a sandbox's tree, including read-only files and directories.

    Args:
        sandbox: as returned by `build_sandbox`. A tree already gone is not an error.

    Raises:
        OSError: a file cannot be removed even after making it writable.
    """
    _rmtree(Path(sandbox.path))
