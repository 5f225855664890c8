"""caisson finds images/, scenarios/ and studies/ by one rule, from a checkout and from a wheel."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from caisson.errors import UsageError
from caisson.resources import resource_dir

ROOT = Path(__file__).resolve().parents[2]


def test_checkout_folders_are_found_beside_the_package(monkeypatch):
    monkeypatch.delenv("CAISSON_IMAGES_DIR", raising=False)
    monkeypatch.delenv("CAISSON_SCENARIOS_DIR", raising=False)
    monkeypatch.delenv("CAISSON_STUDIES_DIR", raising=False)
    assert resource_dir("images") == ROOT / "images"
    assert resource_dir("scenarios") == ROOT / "scenarios"
    assert resource_dir("studies") == ROOT / "studies"


def test_environment_variable_wins(monkeypatch, tmp_path):
    monkeypatch.setenv("CAISSON_SCENARIOS_DIR", str(tmp_path))
    assert resource_dir("scenarios") == tmp_path


def test_unknown_name_is_a_usage_error():
    with pytest.raises(UsageError, match="unknown resource folder 'docs'"):
        resource_dir("docs")  # type: ignore[arg-type]


def test_a_wheel_carries_images_and_scenarios(tmp_path):
    """The wheel holds both folders under caisson/_data/, where resource_dir looks next."""
    source = tmp_path / "src"  # a copy: building in the checkout would leave build/ there
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".demo", "build", "*.egg-info", "__pycache__", ".hypothesis", ".pytest_cache", "*.so"))
    out = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = out.glob("caisson-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "caisson/_data/images/chamber/recipe.toml" in names
    assert "caisson/_data/scenarios/probes/honest_grep.sh" in names
    assert "caisson/_data/scenarios/click/scenario.toml" in names
    assert "caisson/_data/studies/click-arms/study.toml" in names
    assert "caisson/resources.py" in names
