"""Chamber images, built offline from the recipes in `images/<name>/`.

No image registry is assumed. A recipe is a folder holding `recipe.toml` (Debian suite,
debootstrap variant, mirror, the unprivileged user), `packages.txt` (one Debian package a
line) and `build-rootfs.sh`; building runs debootstrap into a temporary root, adds the
user, tars the tree and `docker import`s it.

Images are cached by recipe: the tag is `caisson/<name>:<first 16 hex of the recipe
digest>`, a sha256 over every file of the recipe folder, so any change to the package
list, the script, the suite or the mirror gives a new tag, and building an existing tag
is a no-op. The image carries the full digest in the label `caisson.recipe.digest`.

Building shells out to `debootstrap` and the `docker` CLI: it is a one-off and needs root.
"""

from __future__ import annotations

import collections
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

from caisson.errors import ChamberError

__all__ = ["IMAGES_DIR", "recipe_dir", "recipe_digest", "image_tag", "image_id", "build_image"]

IMAGES_DIR = Path(
    os.environ.get("CAISSON_IMAGES_DIR", Path(__file__).resolve().parent.parent / "images")
)
"""Folder holding one recipe folder per image (`images/chamber/`, ...)."""

_REQUIRED_KEYS = ("suite", "variant", "mirror", "user", "uid", "gid", "home")
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_DOCKER_TIMEOUT_S = 120.0


def _stderr_log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def recipe_dir(name: str = "chamber") -> Path:
    """Return the folder of recipe `name`.

    Args:
        name: recipe name, a folder under `IMAGES_DIR`.

    Returns:
        The absolute path of `IMAGES_DIR/name`.

    Raises:
        ChamberError: the folder or its `recipe.toml` is missing.
    """
    path = IMAGES_DIR / name
    if not (path / "recipe.toml").is_file():
        raise ChamberError(f"no image recipe {name!r} at {path}: expected {path / 'recipe.toml'}")
    return path


def recipe_digest(name: str = "chamber") -> str:
    """Hash every file of a recipe folder, names and contents, in a stable order.

    Args:
        name: recipe name.

    Returns:
        The sha256 digest as 64 lowercase hex characters.

    Raises:
        ChamberError: the recipe is missing.
    """
    root = recipe_dir(name)
    h = hashlib.sha256(b"caisson-image-recipe-v1\0")
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix().encode()
        data = path.read_bytes()
        h.update(len(rel).to_bytes(8, "big") + rel + len(data).to_bytes(8, "big") + data)
    return h.hexdigest()


def image_tag(name: str = "chamber") -> str:
    """Return the cache tag of recipe `name`: `caisson/<name>:<16 hex of its digest>`.

    Raises:
        ChamberError: the recipe is missing.
    """
    return f"caisson/{name}:{recipe_digest(name)[:16]}"


def _docker(*args: str, timeout: float = _DOCKER_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    if shutil.which("docker") is None:
        raise ChamberError("docker CLI not installed: apt-get install docker.io")
    try:
        return subprocess.run(
            ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise ChamberError(f"docker {args[0]} hung for {timeout:.0f} s: check dockerd") from exc


def _require_engine() -> str:
    proc = _docker("version", "--format", "{{.Server.Version}}", timeout=30.0)
    if proc.returncode != 0:
        detail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ChamberError(f"Docker engine not reachable ({detail}): start dockerd")
    return proc.stdout.strip()


def image_id(tag: str) -> str | None:
    """Look up an image by tag in the local engine.

    Args:
        tag: image reference, e.g. `caisson/chamber:0123456789abcdef`.

    Returns:
        The image id (`sha256:<64 hex>`), or None when the engine has no such image.

    Raises:
        ChamberError: the docker CLI is missing or the engine is not reachable.
    """
    proc = _docker("image", "inspect", "--format", "{{.Id}}", tag)
    if proc.returncode == 0:
        return proc.stdout.strip()
    if "no such image" in proc.stderr.lower():
        return None
    _require_engine()  # raises the clearer error when the engine is down
    raise ChamberError(f"docker image inspect {tag} failed: {proc.stderr.strip()}")


def _load_recipe(root: Path) -> dict[str, object]:
    try:
        recipe = tomllib.loads((root / "recipe.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ChamberError(f"{root / 'recipe.toml'}: {exc}: fix the recipe") from exc
    missing = [k for k in _REQUIRED_KEYS if k not in recipe]
    if missing:
        raise ChamberError(f"{root / 'recipe.toml'}: missing keys {missing}: add them")
    return recipe


def _run_logged(cmd: list[str], log: Callable[[str], None], what: str) -> None:
    tail: collections.deque[str] = collections.deque(maxlen=15)
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    )
    assert proc.stdout is not None
    with proc:
        for line in proc.stdout:
            line = line.rstrip("\n")
            tail.append(line)
            log(line)
    if proc.returncode != 0:
        last = next((line for line in reversed(tail) if line.strip()), "no output")
        raise ChamberError(
            f"{what} failed with exit code {proc.returncode} ({last}): see the log above"
        )


def build_image(
    name: str = "chamber",
    *,
    force: bool = False,
    log: Callable[[str], None] = _stderr_log,
) -> str:
    """Build the image of recipe `name` unless its tag already exists.

    Runs `build-rootfs.sh` (debootstrap from the recipe's mirror, then the `agent` user)
    into a temporary tarball under `$TMPDIR` (default /var/tmp) and imports it as
    `image_tag(name)`, with the default user, workdir, PATH and recipe labels set.

    Args:
        name: recipe name, a folder under `IMAGES_DIR`.
        force: rebuild even when the tag exists; the old image is then removed
            (unless a container still uses it).
        log: called with each progress line (debootstrap's output included).

    Returns:
        The image id, `sha256:<64 hex>`.

    Raises:
        ChamberError: the recipe is missing or invalid, docker or debootstrap is not
            installed, the engine is not reachable, we are not root, or a build step fails.
    """
    root = recipe_dir(name)
    digest = recipe_digest(name)
    tag = f"caisson/{name}:{digest[:16]}"
    _require_engine()
    existing = image_id(tag)
    if existing is not None and not force:
        log(f"image {tag} is up to date ({existing})")
        return existing

    recipe = _load_recipe(root)
    if shutil.which("debootstrap") is None:
        raise ChamberError("debootstrap not installed: apt-get install debootstrap")
    if os.geteuid() != 0:
        raise ChamberError("building a chamber image needs root (debootstrap chroots): run as root")

    started = time.monotonic()
    with tempfile.TemporaryDirectory(
        prefix="caisson-image-", dir=os.environ.get("TMPDIR", "/var/tmp")
    ) as tmp:
        tarball = Path(tmp) / "rootfs.tar"
        log(f"building {tag} from {root} (suite {recipe['suite']}, mirror {recipe['mirror']})")
        _run_logged(
            [
                "sh",
                str(root / "build-rootfs.sh"),
                str(recipe["suite"]),
                str(recipe["variant"]),
                str(recipe["mirror"]),
                str(root / "packages.txt"),
                str(recipe["user"]),
                str(recipe["uid"]),
                str(recipe["gid"]),
                str(recipe["home"]),
                str(tarball),
            ],
            log,
            "build-rootfs.sh",
        )
        changes = [
            f"ENV PATH={_PATH}",
            "ENV LANG=C.UTF-8",
            f"USER {recipe['user']}",
            f"WORKDIR {recipe['home']}",
            'CMD ["/bin/bash"]',
            f"LABEL caisson.recipe={name}",
            f"LABEL caisson.recipe.digest={digest}",
            f"LABEL caisson.recipe.suite={recipe['suite']}",
            f"LABEL caisson.recipe.mirror={recipe['mirror']}",
            f"LABEL caisson.image.built_ns={time.time_ns()}",
        ]
        args = ["import"]
        for change in changes:
            args += ["--change", change]
        proc = _docker(*args, str(tarball), tag, timeout=600.0)
        if proc.returncode != 0:
            raise ChamberError(f"docker import of {tag} failed: {proc.stderr.strip()}")
    new_id = image_id(tag)
    if new_id is None:
        raise ChamberError(f"docker import reported success but {tag} is missing: check dockerd")
    if existing is not None and existing != new_id:
        _docker("image", "rm", existing)  # untagged by --force; fails harmlessly if in use
    log(f"built {tag} ({new_id}) in {time.monotonic() - started:.0f} s")
    return new_id
