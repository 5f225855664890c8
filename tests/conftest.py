"""Project-wide fixtures: an isolated $CAISSON_HOME for every test session."""

from __future__ import annotations

import os
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
