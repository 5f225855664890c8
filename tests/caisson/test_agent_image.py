"""The agent image (images/agent/): chamber rootfs + Claude Code, Codex CLI, mini-swe-agent.

The digest covers the base chamber recipe; the built image runs every pinned agent CLI as
the `agent` user with no network.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time

import pytest

from caisson.chamber import image
from caisson.errors import ChamberError
from tests.helpers import image_inspect


def _pins(filename: str) -> dict[str, str]:
    """`name -> version` from a recipe pin list (`name@version` or `name==version`)."""
    pins = {}
    for line in (image.recipe_dir("agent") / filename).read_text().splitlines():
        spec = line.split("#", 1)[0].strip()
        if spec:
            name, version = re.fullmatch(r"(@?[^@=]+)(?:@|==)(\S+)", spec).groups()
            pins[name] = version
    return pins


def test_agent_recipe_is_layered_on_the_chamber():
    assert image.recipe_chain("agent") == ["chamber", "agent"]
    assert image.recipe_chain("chamber") == ["chamber"]
    assert image.image_tag("agent") == f"caisson/agent:{image.recipe_digest('agent')[:16]}"
    assert image.recipe_digest("agent") != image.recipe_digest("chamber")


def test_agent_pins_are_exact():
    npm = _pins("npm-packages.txt")
    assert set(npm) == {"@anthropic-ai/claude-code", "@openai/codex", "opencode-ai", "@github/copilot"}
    pip = _pins("pip-packages.txt")
    assert set(pip) == {"mini-swe-agent"}
    for version in [*npm.values(), *pip.values()]:
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), version


def test_agent_digest_covers_the_base_recipe(tmp_path, monkeypatch):
    for name in ("chamber", "agent"):
        shutil.copytree(image.IMAGES_DIR / name, tmp_path / name)
    monkeypatch.setattr(image, "IMAGES_DIR", tmp_path)
    chamber, agent = image.recipe_digest("chamber"), image.recipe_digest("agent")
    for folder, name in [
        ("chamber", "packages.txt"),
        ("chamber", "build-rootfs.sh"),
        ("agent", "npm-packages.txt"),
        ("agent", "pip-packages.txt"),
    ]:
        path = tmp_path / folder / name
        original = path.read_text()
        path.write_text(original + "\n# touched\n")
        assert image.recipe_digest("agent") != agent, (folder, name)
        assert (image.recipe_digest("chamber") != chamber) == (folder == "chamber")
        path.write_text(original)
    assert image.recipe_digest("agent") == agent


def test_base_keys_are_inherited_and_packages_merged(tmp_path):
    recipe = image._load_recipe("agent")
    assert recipe["base"] == "chamber"
    assert (recipe["user"], recipe["uid"], recipe["home"]) == ("agent", 1000, "/home/agent")
    merged = image._merged_packages(["chamber", "agent"], tmp_path / "p.txt").read_text()
    names = {line.split("#")[0].strip() for line in merged.splitlines()} - {""}
    assert {"strace", "python3", "nodejs", "python3-venv"} <= names


def test_base_cycle_is_a_chamber_error(tmp_path, monkeypatch):
    for name, base in [("a", "b"), ("b", "a")]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "recipe.toml").write_text(f'base = "{base}"\n')
    monkeypatch.setattr(image, "IMAGES_DIR", tmp_path)
    with pytest.raises(ChamberError, match="base cycle"):
        image.recipe_digest("a")


@pytest.mark.docker
def test_agent_image_is_labelled_with_recipe_and_base(agent_image):
    info = image_inspect(agent_image)
    labels = info["Config"]["Labels"]
    assert labels["caisson.recipe"] == "agent"
    assert labels["caisson.recipe.digest"] == image.recipe_digest("agent")
    assert labels["caisson.recipe.base"] == "chamber"
    assert labels["caisson.recipe.base.digest"] == image.recipe_digest("chamber")
    assert info["Config"]["User"] == "agent"
    assert info["Config"]["WorkingDir"] == "/home/agent"


@pytest.mark.docker
def test_agent_image_runs_every_pinned_agent(agent_image):
    npm, pip = _pins("npm-packages.txt"), _pins("pip-packages.txt")
    script = (
        "set -e; id -u; claude --version; codex --version; mini --help; strace -V; "
        "HOME=/tmp/h opencode --version; HOME=/tmp/h copilot --version; "
        "python3 -V; node -v; git --version"
    )
    proc = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "-e", "COLUMNS=200", agent_image,
         "bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert proc.stdout.splitlines()[0] == "1000"
    assert f"{npm['@anthropic-ai/claude-code']} (Claude Code)" in out
    assert f"codex-cli {npm['@openai/codex']}" in out
    assert f"mini-swe-agent version {pip['mini-swe-agent']}" in out
    assert re.search(rf"^{re.escape(npm['opencode-ai'])}$", proc.stdout, re.MULTILINE), out
    assert f"GitHub Copilot CLI {npm['@github/copilot']}" in out
    assert "--task" in out and "--yolo" in out
    assert re.search(r"strace -- version \d", out)
    assert re.search(r"Python 3\.11\.\d", out)
    node = re.search(r"^v(\d+)\.\d+\.\d+$", proc.stdout, re.MULTILINE)
    assert node and int(node.group(1)) >= 16, out  # @openai/codex: engines node >= 16


@pytest.mark.docker
def test_agent_image_second_build_is_a_cached_no_op(agent_image):
    lines: list[str] = []
    t0 = time.monotonic()
    assert image.build_image("agent", log=lines.append) == image.image_id(agent_image)
    assert time.monotonic() - t0 < 10
    assert any("up to date" in line for line in lines)
