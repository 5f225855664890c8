"""Project-wide fixtures: an isolated $CAISSON_HOME for every test session; under
pytest-xdist, tests marked ``engine_exclusive`` run alone on the shared Docker engine."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session", autouse=True)
def caisson_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Point $CAISSON_HOME at a temp dir so tests never touch the operator's real keys."""
    home = tmp_path_factory.mktemp("caisson-home")
    old = os.environ.get("CAISSON_HOME")
    os.environ["CAISSON_HOME"] = str(home)
    yield home
    if old is None:
        os.environ.pop("CAISSON_HOME", None)
    else:
        os.environ["CAISSON_HOME"] = old


# Under pytest-xdist (`make test` runs `-n 2 --dist loadgroup`) the workers share one
# Docker engine. A test marked `engine_exclusive` acts on every caisson container on it (it
# reaps orphans, or leaves one for the next `caisson record` to reap, which reaps every
# orphan it finds): it runs alone, while no other worker's test (nor its module or session
# fixtures) runs. Every other test shares the engine. Two flock(2) locks in a directory the
# controller makes for the run: the gate keeps an exclusive test from waiting forever
# behind shared ones.
LOCKS_ENV = "CAISSON_TEST_LOCKS"


def pytest_configure(config: pytest.Config) -> None:
    """On the xdist controller: make the run's lock directory, for its workers to inherit."""
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        os.environ[LOCKS_ENV] = tempfile.mkdtemp(prefix="caisson-test-locks-")


def pytest_unconfigure(config: pytest.Config) -> None:
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        shutil.rmtree(os.environ.pop(LOCKS_ENV, ""), ignore_errors=True)


@contextlib.contextmanager
def _engine_turn(exclusive: bool) -> Iterator[None]:
    """Hold the engine shared (or, when ``exclusive``, alone) while the block runs; a no-op
    outside an xdist worker."""
    locks = os.environ.get(LOCKS_ENV)
    if not locks or not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    with open(Path(locks) / "gate", "a") as gate, open(Path(locks) / "engine", "a") as engine:
        fcntl.flock(gate, fcntl.LOCK_EX)
        fcntl.flock(engine, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        if not exclusive:
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(engine, fcntl.LOCK_UN)
            fcntl.flock(gate, fcntl.LOCK_UN)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Run each test's setup, call and teardown (with the module and session fixtures set up
    or torn down there) in its turn on the engine: alone when marked ``engine_exclusive``."""
    with _engine_turn(item.get_closest_marker("engine_exclusive") is not None):
        yield


ENGINE_FIXTURES = frozenset({"docker_available", "chamber_image", "agent_image"})
"""The fixtures that need a Docker engine (tests/caisson/conftest.py): a test that uses one,
directly or through another fixture, is marked ``docker``."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``docker`` every test that uses an engine fixture, so ``-m "not docker"`` runs
    what needs no engine. In an xdist worker, tests marked ``long`` (15 s or more) come
    first, in their order: `--dist loadgroup` hands them out round-robin, so they start on
    every worker at once and no worker starts one last while the other has nothing left to run."""
    for item in items:
        if ENGINE_FIXTURES & set(getattr(item, "fixturenames", ())) and item.get_closest_marker("docker") is None:
            item.add_marker(pytest.mark.docker)
    if hasattr(config, "workerinput"):
        items.sort(key=lambda item: item.get_closest_marker("long") is None)
