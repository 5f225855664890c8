"""Helpers shared by test modules: git repositories made with a fixed identity and none of
the machine's git configuration, so a test sees the same repository everywhere; an
image as the Docker engine reports it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}


def git(cwd: Path, *args: str) -> str:
    """Run ``git ARGS`` in ``cwd``; its stdout. Raises CalledProcessError on failure."""
    return subprocess.run(["git", *args], cwd=cwd, env={**os.environ, **GIT_ENV}, check=True,
                          capture_output=True, text=True).stdout


def commit_all(repo: Path, message: str) -> str:
    """Make ``repo`` a git repository (branch main) if it is not one, commit every file in
    it, and return the new commit's full hash."""
    if not (repo / ".git").exists():
        git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD").strip()


def image_inspect(tag: str) -> dict:
    """What ``docker image inspect TAG`` says of the image (``Id``, ``Config`` with its
    labels, user, working dir, ...). Raises CalledProcessError when there is no such image."""
    out = subprocess.run(["docker", "image", "inspect", tag], capture_output=True, text=True, check=True).stdout
    [info] = json.loads(out)
    return info
