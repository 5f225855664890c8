"""Chamber images, built offline from the recipes in `images/<name>/`.

No image registry is assumed. A recipe is a folder holding `recipe.toml` (Debian suite,
debootstrap variant, mirror, the unprivileged user), `packages.txt` (one Debian package a
line) and `build-rootfs.sh`; building runs debootstrap into a temporary root, adds the
user, tars the tree and `docker import`s it.

A recipe may instead name a `base` recipe (`base = "chamber"` in `recipe.toml`): it
inherits the base's keys, its `packages.txt` is added to the base's package list for the
one debootstrap run, and its own `build-rootfs.sh` is then run as
`build-rootfs.sh IN_TAR OUT_TAR RECIPE_DIR USER UID GID HOME` on the base's rootfs
tarball (the agent image adds the npm and PyPI agent CLIs this way).

Images are cached by recipe: the tag is `caisson/<name>:<first 16 hex of the recipe
digest>`, a sha256 over every file of the recipe folder (and the digest of its base
recipe, if any), so any change to the package list, the script, the suite, the mirror or
the base recipe gives a new tag, and building an existing tag is a no-op. The image
carries the full digest in the label `caisson.recipe.digest`.

Building shells out to `debootstrap` and the `docker` CLI (and `npm` for a recipe that
installs npm packages): it is a one-off and needs root.
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
from caisson.resources import resource_dir

__all__ = [
    "IMAGES_DIR",
    "recipe_dir",
    "recipe_chain",
    "recipe_digest",
    "image_tag",
    "image_id",
    "HOST_RECIPES",
    "recipe_tags",
    "build_image",
]

IMAGES_DIR = resource_dir("images")
"""Folder holding one recipe folder per image (`images/chamber/`, ...); see `caisson.resources`."""

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


def _read_toml(root: Path) -> dict[str, object]:
    try:
        return tomllib.loads((root / "recipe.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ChamberError(f"{root / 'recipe.toml'}: {exc}: fix the recipe") from exc


def recipe_chain(name: str = "chamber") -> list[str]:
    """Return the recipe names from the root recipe down to `name`, following `base`.

    Args:
        name: recipe name.

    Returns:
        E.g. `["chamber"]` for the chamber, `["chamber", "agent"]` for the agent image.

    Raises:
        ChamberError: a recipe is missing or invalid, or the bases form a cycle.
    """
    chain = [name]
    while True:
        base = _read_toml(recipe_dir(chain[0])).get("base")
        if base is None:
            return chain
        if not isinstance(base, str) or not base:
            raise ChamberError(f"{recipe_dir(chain[0]) / 'recipe.toml'}: base must be a name")
        if base in chain:
            raise ChamberError(f"image recipes form a base cycle: {' -> '.join([base, *chain])}")
        chain.insert(0, base)


def recipe_digest(name: str = "chamber") -> str:
    """Hash every file of a recipe folder, names and contents, in a stable order.

    A recipe with a `base` also hashes the base recipe's digest, so changing the base
    changes every recipe built on it.

    Args:
        name: recipe name.

    Returns:
        The sha256 digest as 64 lowercase hex characters.

    Raises:
        ChamberError: the recipe (or its base) is missing or invalid.
    """
    root = recipe_dir(name)
    h = hashlib.sha256(b"caisson-image-recipe-v1\0")
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix().encode()
        data = path.read_bytes()
        h.update(len(rel).to_bytes(8, "big") + rel + len(data).to_bytes(8, "big") + data)
    chain = recipe_chain(name)
    if len(chain) > 1:
        h.update(b"\0base\0" + chain[-2].encode() + b"\0" + recipe_digest(chain[-2]).encode())
    return h.hexdigest()


def image_tag(name: str = "chamber") -> str:
    """Return the cache tag of recipe `name`: `caisson/<name>:<16 hex of its digest>`.

    Raises:
        ChamberError: the recipe is missing.
    """
    return f"caisson/{name}:{recipe_digest(name)[:16]}"


HOST_RECIPES = ("chamber", "agent")
"""The recipes a host records with: its chamber, and the agents' image built on it."""


def recipe_tags(names: tuple[str, ...] = HOST_RECIPES) -> str:
    """The cache tags (`image_tag`) of ``names``, space-separated: what two hosts compare to
    know they build the same images from the same recipes (a tag names its recipe's digest;
    the built images' ids differ, image builds not being reproducible).

    Raises:
        ChamberError: a recipe is missing.
    """
    return " ".join(image_tag(name) for name in names)


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


def _load_recipe(name: str) -> dict[str, object]:
    """The recipe's keys merged over its bases' (the recipe's own keys win)."""
    recipe: dict[str, object] = {}
    for link in recipe_chain(name):
        recipe.update(_read_toml(recipe_dir(link)))
    missing = [k for k in _REQUIRED_KEYS if k not in recipe]
    if missing:
        raise ChamberError(
            f"{recipe_dir(name) / 'recipe.toml'}: missing keys {missing} (also in its bases):"
            " add them"
        )
    return recipe


def _merged_packages(chain: list[str], out: Path) -> Path:
    """Write every `packages.txt` of the chain, base first, into one list at `out`."""
    parts = []
    for link in chain:
        path = recipe_dir(link) / "packages.txt"
        if path.is_file():
            parts.append(f"# from images/{link}/packages.txt\n{path.read_text()}\n")
    out.write_text("".join(parts))
    return out


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
    digest = recipe_digest(name)  # raises ChamberError for a missing or invalid recipe
    tag = f"caisson/{name}:{digest[:16]}"
    _require_engine()
    existing = image_id(tag)
    if existing is not None and not force:
        log(f"image {tag} is up to date ({existing})")
        return existing

    chain = recipe_chain(name)
    recipe = _load_recipe(name)
    if shutil.which("debootstrap") is None:
        raise ChamberError("debootstrap not installed: apt-get install debootstrap")
    if os.geteuid() != 0:
        raise ChamberError("building a chamber image needs root (debootstrap chroots): run as root")

    started = time.monotonic()
    with tempfile.TemporaryDirectory(
        prefix="caisson-image-", dir=os.environ.get("TMPDIR", "/var/tmp")
    ) as tmp:
        base_root = recipe_dir(chain[0])
        tarball = Path(tmp) / f"rootfs-{chain[0]}.tar"
        log(
            f"building {tag} from {' + '.join(str(recipe_dir(c)) for c in chain)}"
            f" (suite {recipe['suite']}, mirror {recipe['mirror']})"
        )
        user_args = [str(recipe[k]) for k in ("user", "uid", "gid", "home")]
        _run_logged(
            [
                "sh",
                str(base_root / "build-rootfs.sh"),
                str(recipe["suite"]),
                str(recipe["variant"]),
                str(recipe["mirror"]),
                str(_merged_packages(chain, Path(tmp) / "packages.txt")),
                *user_args,
                str(tarball),
            ],
            log,
            f"images/{chain[0]}/build-rootfs.sh",
        )
        for link in chain[1:]:
            layer_tar = Path(tmp) / f"rootfs-{link}.tar"
            log(f"layering images/{link}/ onto the {chain[chain.index(link) - 1]} rootfs")
            _run_logged(
                [
                    "sh",
                    str(recipe_dir(link) / "build-rootfs.sh"),
                    str(tarball),
                    str(layer_tar),
                    str(recipe_dir(link)),
                    *user_args,
                ],
                log,
                f"images/{link}/build-rootfs.sh",
            )
            tarball.unlink()
            tarball = layer_tar
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
            f"LABEL caisson.chamber.image.built_ns={time.time_ns()}",
        ]
        if len(chain) > 1:
            changes += [
                f"LABEL caisson.recipe.base={chain[-2]}",
                f"LABEL caisson.recipe.base.digest={recipe_digest(chain[-2])}",
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
