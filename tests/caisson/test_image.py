"""caisson.chamber.image: recipe digest and tag scheme, cached offline build, image contents."""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import time

import pytest

from caisson.chamber import image
from caisson._cli import image as image_cli
from caisson.errors import ChamberError
from tests.helpers import image_inspect


def test_digest_is_stable_and_tag_uses_its_prefix():
    digest = image.recipe_digest("chamber")
    assert re.fullmatch(r"[0-9a-f]{64}", digest)
    assert image.recipe_digest("chamber") == digest
    assert image.image_tag("chamber") == f"caisson/chamber:{digest[:16]}"


def test_digest_covers_every_recipe_file(tmp_path, monkeypatch):
    shutil.copytree(image.IMAGES_DIR / "chamber", tmp_path / "chamber")
    monkeypatch.setattr(image, "IMAGES_DIR", tmp_path)
    base = image.recipe_digest("chamber")
    for name, edit in [
        ("packages.txt", lambda t: t + "jq\n"),
        ("recipe.toml", lambda t: t.replace("bookworm", "trixie")),
        ("build-rootfs.sh", lambda t: t + "\n# touched\n"),
    ]:
        path = tmp_path / "chamber" / name
        original = path.read_text()
        path.write_text(edit(original))
        assert image.recipe_digest("chamber") != base, name
        path.write_text(original)
        assert image.recipe_digest("chamber") == base


def test_unknown_recipe_is_a_chamber_error():
    with pytest.raises(ChamberError, match="no image recipe 'nope'"):
        image.image_tag("nope")


def test_missing_image_has_no_id(docker_available):
    assert image.image_id("caisson/chamber:0000000000000000") is None


@pytest.mark.docker
def test_image_is_labelled_with_its_recipe(chamber_image):
    info = image_inspect(chamber_image)
    labels = info["Config"]["Labels"]
    assert labels["caisson.recipe"] == "chamber"
    assert labels["caisson.recipe.digest"] == image.recipe_digest("chamber")
    assert info["Config"]["User"] == "agent"
    assert info["Config"]["WorkingDir"] == "/home/agent"
    assert info["Id"] == image.image_id(chamber_image)


@pytest.mark.docker
def test_second_build_is_a_cached_no_op(chamber_image):
    lines: list[str] = []
    t0 = time.monotonic()
    image_id = image.build_image("chamber", log=lines.append)
    assert time.monotonic() - t0 < 10
    assert image_id == image.image_id(chamber_image)
    assert any("up to date" in line for line in lines)


@pytest.mark.docker
def test_chamber_has_its_tools_and_the_agent_user(chamber_image):
    script = (
        "set -e; python3 --version; git --version; rg --version | head -1; ps --version; "
        "patch --version | head -1; test -s /etc/ssl/certs/ca-certificates.crt; "
        "getent passwd agent; id -u; test -w /home/agent"
    )
    proc = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", chamber_image, "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "agent:x:1000:1000::/home/agent:/bin/bash" in proc.stdout
    assert proc.stdout.splitlines()[-1] == "1000"


@pytest.mark.docker
def test_cli_build_prints_tag_and_id(chamber_image, capsys):
    parser = argparse.ArgumentParser(prog="caisson")
    image_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["image", "build", "--quiet"])
    assert args.func(args) == 0
    tag, image_id = capsys.readouterr().out.split()
    assert tag == chamber_image and image_id == image.image_id(chamber_image)


def test_cli_reports_errors_with_exit_code_2(capsys):
    parser = argparse.ArgumentParser(prog="caisson")
    image_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["image", "build", "--name", "nope"])
    assert args.func(args) == 2
    assert "no image recipe 'nope'" in capsys.readouterr().err
