"""Fixtures for the view's browser tests: a `caisson view` server and headless Chromium."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger import generate_keypair, load_verify_key
from tests.caisson.conftest import require

REPO = Path(__file__).resolve().parents[3]
ARTIFACTS = REPO / "tests" / "artifacts"  # gitignored: screenshots of every browser test
CHROMIUM = "/usr/bin/chromium"  # Debian's package (scripts/setup.sh)
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


@pytest.fixture
def keys(tmp_path: Path):
    """(signing key, trusted verify key, public key path) for the test's ledgers."""
    key = generate_keypair(tmp_path / "key", tmp_path / "key.pub")
    return key, load_verify_key(tmp_path / "key.pub"), tmp_path / "key.pub"


@pytest.fixture
def browser(tmp_path: Path) -> Iterator:
    """A page of headless Debian Chromium (Playwright, no downloaded browser), fresh profile."""
    if not os.path.exists(CHROMIUM):
        require(f"{CHROMIUM} is missing: apt-get install chromium")
    try:
        import playwright.sync_api as playwright
    except ImportError:
        require("Playwright for Python is missing: pip install -e '.[test]'")
    # trio_asyncio (imported by the chamber code) installs a global asyncio loop policy
    # whose loops cannot run Playwright's; use asyncio's default while the browser runs.
    policy = asyncio.get_event_loop_policy()
    asyncio.set_event_loop_policy(asyncio.DefaultEventLoopPolicy())
    try:
        yield from _page(playwright, tmp_path)
    finally:
        asyncio.set_event_loop_policy(policy)


def _page(playwright, tmp_path: Path) -> Iterator:
    with playwright.sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True,
            viewport={"width": 1280, "height": 900})
        try:
            yield context.new_page()
        finally:
            context.close()


def shoot(page, name: str) -> Path:
    """Save a full-page screenshot under tests/artifacts (and under docs/ when
    CAISSON_UPDATE_SCREENSHOTS=1, for the README)."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=False)
    if os.environ.get("CAISSON_UPDATE_SCREENSHOTS") == "1":
        shutil.copy(path, REPO / "docs" / f"{name}.png")
    return path


class Server:
    """A `caisson view` process on a free localhost port."""

    def __init__(self, paths: list[Path], key_pub: Path):
        path = os.environ.get("PYTHONPATH", "")
        env = dict(os.environ, PYTHONPATH=path if str(REPO) in path.split(os.pathsep) else str(REPO))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "caisson.cli", "view", *map(str, paths), "--port", "0", "--key", str(key_pub)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        line = self.proc.stdout.readline()
        found = re.search(r"serving (http://127\.0\.0\.1:\d+)", line)
        if not found:
            self.proc.kill()
            raise AssertionError(f"caisson view did not start: {line!r} {self.proc.stderr.read()}")
        self.url = found.group(1)
        self.banner = line

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


@pytest.fixture
def serve(keys) -> Iterator:
    """Start `caisson view` over paths: ``serve([run_dir])`` -> `Server`."""
    servers: list[Server] = []

    def start(paths: list[Path]) -> Server:
        servers.append(Server(paths, keys[2]))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()
