"""Fixtures for tests that need a real Docker engine and the chamber image, and real
agents' runs recorded once for the tests that only read them (tests/caisson/agent_runs.py).

Where the engine (or what a build needs) is missing, these tests skip locally but FAIL in
CI (`CI=true`): a missing engine must never turn into a green run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from caisson.chamber import image
from caisson.model._process import scripted_model
from tests.caisson import agent_runs


def _docker_problem() -> str | None:
    """Return why the Docker engine cannot be used, or None when it answers."""
    if shutil.which("docker") is None:
        return "docker CLI not installed: apt-get install docker.io"
    try:
        proc = subprocess.run(
            ["docker", "version", "--format", "{{.Server.Version}}"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return "docker version hung for 30 s: check dockerd"
    if proc.returncode != 0:
        return f"Docker engine not reachable ({proc.stderr.strip()}): start dockerd"
    return None


def require(problem: str | None) -> None:
    """Skip the test because of `problem`, or fail it when running in CI (`CI=true`)."""
    if problem is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and {problem}", pytrace=False)
    pytest.skip(problem)


def require_docker() -> None:
    """Skip (locally) or fail (CI) unless a Docker engine answers."""
    require(_docker_problem())


@pytest.fixture
def docker_available() -> None:
    """Skip (locally) or fail (CI) unless a Docker engine answers."""
    require_docker()


@pytest.fixture(scope="session")
def chamber_image() -> str:
    """Build the chamber image if its recipe tag is missing (cached); return the tag."""
    require_docker()
    tag = image.image_tag("chamber")
    if image.image_id(tag) is None:
        if shutil.which("debootstrap") is None:
            require("debootstrap not installed: apt-get install debootstrap")
        if os.geteuid() != 0:
            require("building the chamber image needs root")
    image.build_image("chamber", log=lambda line: None)
    return tag


@pytest.fixture(scope="session")
def agent_image() -> str:
    """Build the agent image (chamber + agent CLIs) if its tag is missing; return the tag."""
    require_docker()
    tag = image.image_tag("agent")
    if image.image_id(tag) is None:
        for tool in ("debootstrap", "npm"):
            if shutil.which(tool) is None:
                require(f"{tool} not installed: needed to build the agent image")
        if os.geteuid() != 0:
            require("building the agent image needs root")
    image.build_image("agent", log=lambda line: None)
    return tag


@pytest.fixture(scope="session")
def claude_grep_run(agent_image, tmp_path_factory) -> tuple[Path, list]:
    """Claude Code on scenarios/model/grep_then_answer.toml, arm shell, recorded once for
    the tests that only read it: (run dir, its events)."""
    root = tmp_path_factory.mktemp("claude-grep")
    with scripted_model(agent_runs.SCRIPTS / "grep_then_answer.toml") as address:
        return agent_runs.run(root, agent_runs.make_repo(root), address, "--arm", "shell")


@pytest.fixture(scope="session")
def codex_grep_run(agent_image, tmp_path_factory) -> tuple[Path, Path, Path]:
    """Codex on scenarios/model/codex_grep.toml, no arm, recorded once for the tests that
    only read it: (its scenario, its repository, run dir)."""
    root = tmp_path_factory.mktemp("codex-grep")
    repo = agent_runs.make_repo(root)
    with scripted_model(agent_runs.SCRIPTS / "codex_grep.toml") as address:
        path = agent_runs.codex_scenario(root, address)
        assert agent_runs.record_codex(path, repo, root / "run") == 0
    return path, repo, root / "run"


@pytest.fixture(scope="module")
def op_key():
    """The operator's signing key (`caisson keygen` once; an existing key is kept)."""
    from caisson.cli import main
    from caisson.home import operator_key

    if main(["keygen"]) not in (0, 2):  # 2: exists from an earlier test module
        raise AssertionError
    return operator_key()
