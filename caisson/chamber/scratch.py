"""A run's scratch directory on the host: where its sandbox, config home and witness files live.

Every scratch directory is `<scratch root>/<32 random hex>` (`scratch_root`): its path says
nothing of the host's temporary directory, user, run or container, and it is what the
chamber sees of the host in ``/proc/self/mountinfo``, whose fourth field (proc(5): "root")
is a bind mount's source path within its filesystem. On the root filesystem that is the
whole host path; an operator who mounts a filesystem of its own at the scratch root (a
tmpfs, say) leaves the chamber only ``/<hex>/sandbox``.

A directory is made with its owner in place (`open_scratch`): ``recorder.json`` (the
recorder's labels, `caisson.chamber.reap.recorder_labels`) is written under another name,
locked with flock(2) and renamed, so the reaper never reads half of it; the lock is held
until `ScratchDir.remove`, or until the kernel drops it when the holder dies
(flock(2): the lock goes with the last descriptor of its open file description). A reaper
that can take the lock (`claim`) holds the proof that no process holds the directory.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import secrets
import stat
import tempfile
from pathlib import Path

from caisson.chamber.sandbox import _rmtree

__all__ = ["RECORDER_FILE", "SCRATCH_ENV", "SCRATCH_ROOT", "ScratchDir", "claim", "open_scratch", "remove_tree",
           "scratch_root"]

RECORDER_FILE = "recorder.json"
"""The file in a scratch directory that holds its recorder's labels, as a JSON object."""

SCRATCH_ENV = "CAISSON_SCRATCH"
"""The variable that names the scratch root (an absolute path), overriding `SCRATCH_ROOT`."""

SCRATCH_ROOT = Path("/var/lib/caisson/scratch")
"""The scratch root of a recorder running as root, when `SCRATCH_ENV` is unset."""


def scratch_root() -> Path:
    """Where scratch directories are: ``$CAISSON_SCRATCH``, else `SCRATCH_ROOT` for root,
    else ``<tempdir>/caisson-scratch-<uid>`` (which names the temporary directory and uid:
    only a root recorder's binds are neutral by default)."""
    if os.environ.get(SCRATCH_ENV):
        return Path(os.environ[SCRATCH_ENV])
    if os.geteuid() == 0:
        return SCRATCH_ROOT
    return Path(tempfile.gettempdir()) / f"caisson-scratch-{os.geteuid()}"


def _ensure_root(root: Path) -> Path:
    """``root``, made (mode 0700) if missing.

    Raises:
        OSError: it cannot be made, or it is not a directory of this user that only this
            user may write (a symbolic link, or one another user could swap files in).
    """
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(root)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise OSError(errno.EPERM, f"scratch root {root}: not a directory of uid {os.geteuid()} writable by it alone"
                      f" (set {SCRATCH_ENV} to another)")
    return root


class ScratchDir:
    """A scratch directory its holder has made and holds (see the module docstring).

    Attributes:
        path: the directory.
    """

    def __init__(self, path: Path, lock_fd: int):
        self.path = path
        self._fd: int | None = lock_fd

    def remove(self) -> None:
        """Delete the tree, ``recorder.json`` last, then release the lock. A tree that cannot
        be deleted whole keeps its ``recorder.json`` (the reaper removes it once this
        process is gone). Idempotent."""
        try:
            if self._fd is not None:
                remove_tree(self.path)
        except OSError:
            pass
        finally:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def open_scratch(labels: dict[str, str], root: Path | None = None) -> ScratchDir:
    """Make a scratch directory owned by this process: ``recorder.json`` holds ``labels``
    and stays locked while the returned `ScratchDir` lives.

    Args:
        labels: the recorder's labels (`caisson.chamber.reap.recorder_labels`, run id too).
        root: the scratch root (default `scratch_root`).

    Raises:
        OSError: the root or the directory cannot be made.
    """
    path = _ensure_root(Path(root or scratch_root())) / secrets.token_hex(16)
    path.mkdir(mode=0o700)
    part = path / f"{RECORDER_FILE}.part"
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        data = json.dumps(labels).encode()
        while data:
            data = data[os.write(fd, data):]
        os.replace(part, path / RECORDER_FILE)
    except BaseException:
        os.close(fd)
        remove_tree(path)
        raise
    return ScratchDir(path, fd)


def claim(path: Path) -> int | None:
    """Take the lock of the scratch directory ``path`` without waiting: the descriptor that
    holds it (close it to release), or None when another holds it or there is no lock file
    to take (gone, or not yet renamed in place)."""
    try:
        fd = os.open(path / RECORDER_FILE, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def remove_tree(path: Path) -> None:
    """Delete the scratch directory ``path``, read-only parts too, its ``recorder.json`` last.

    Raises:
        OSError: something could not be removed (``recorder.json`` is then still there).
    """
    if not path.is_dir() or path.is_symlink():
        return
    for child in path.iterdir():
        if child.name == RECORDER_FILE:
            continue
        if child.is_dir() and not child.is_symlink():
            _rmtree(child)
        else:
            child.unlink()
    (path / RECORDER_FILE).unlink(missing_ok=True)
    path.rmdir()
