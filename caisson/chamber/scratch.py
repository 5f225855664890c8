"""A run's scratch directory on the host: where its sandbox, config home and witness files live.

Every scratch directory is `<scratch root>/<32 random hex>` (`scratch_root`): its path says
nothing of the host's temporary directory, user, run or container, and it is what the
chamber sees of the host in ``/proc/self/mountinfo``, whose fourth field (proc(5): "root")
is a bind mount's source path within its filesystem. On the root filesystem that is the
whole host path; an operator who mounts a filesystem of its own at the scratch root (a
tmpfs, say) leaves the chamber only ``/<hex>/sandbox``.

A directory is made with its owner in place (`open_scratch`): ``recorder.json`` (the
recorder's labels, `caisson.chamber._reap.recorder_labels`) is written under another name,
locked with flock(2) and renamed, so the reaper never reads half of it; the lock is held
until `ScratchDir.remove`, or until the kernel drops it when the holder dies
(flock(2): the lock goes with the last descriptor of its open file description). A reaper
that can take the lock (`claim`) holds the proof that no process holds the directory.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import secrets
import stat
import tempfile
from pathlib import Path

from caisson.chamber.sandbox import _rmtree

__all__ = ["CHAMBER_DIR", "RECORDER_FILE", "SCRATCH_ENV", "SCRATCH_ROOT", "ScratchDir", "claim", "mount_chamber_fs",
           "open_scratch", "remove_tree", "scratch_root"]

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
        labels: the recorder's labels (`caisson.chamber._reap.recorder_labels`, run id too).
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


CHAMBER_DIR = "chamber"
"""The subdirectory of a scratch directory that holds what the chamber is given (tree,
config home, /etc files, witness FIFOs): a tmpfs of its own where the recorder may mount one."""


def mount_chamber_fs(path: Path, size_bytes: int) -> tuple[Path, bool]:
    """Make ``path/chamber`` and, as root and in the engine's mount namespace, mount a tmpfs
    there of ``size_bytes`` (mode 0711).

    What the chamber writes into it (its tree, its config home) is then bounded and kept off
    the host's disk, where the run's ledger is written: an agent that fills it fills its own
    space, charged to its memory as it writes (tmpfs pages are charged to the writer's
    memory cgroup), never the recorder's disk. And the chamber's mount table names only
    ``/sandbox``, ``/home``...: paths within the tmpfs, nothing of the host's.

    Returns:
        (the directory, whether a tmpfs is mounted there); not as root, or where the engine
        would not see the mount: a plain directory.

    Raises:
        OSError: the directory cannot be made, or the mount failed as root.
    """
    chamber = path / CHAMBER_DIR
    chamber.mkdir(mode=0o711)
    if os.geteuid() != 0 or not _engine_shares_mounts():
        return chamber, False
    ms_nosuid, ms_nodev = 2, 4  # mount(2) flags; tmpfs(5) takes size and mode as data
    options = f"size={size_bytes},mode=0711".encode()
    if _libc().mount(b"tmpfs", os.fsencode(chamber), b"tmpfs", ms_nosuid | ms_nodev, options) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"cannot mount a tmpfs at {chamber}: {os.strerror(err)}")
    return chamber, True


ENGINE_PIDFILES = ("/run/docker.pid", "/var/run/docker.pid")
"""Where dockerd writes its pid (its ``--pidfile`` default)."""


def _engine_shares_mounts() -> bool:
    """Whether a mount made here is seen by the engine: this process and dockerd are in one
    mount namespace. A recorder in a namespace of its own (``unshare -m``, a container) would
    hand the engine an empty directory; unknown (no pidfile, dockerd not visible) is no."""
    for pidfile in ENGINE_PIDFILES:
        try:
            pid = int(Path(pidfile).read_text().strip())
            return os.readlink(f"/proc/{pid}/ns/mnt") == os.readlink("/proc/self/ns/mnt")
        except (OSError, ValueError):
            continue
    return False


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _unmount(chamber: Path) -> None:
    """Detach a tmpfs mounted at ``chamber`` (MNT_DETACH: it goes once no one uses it)."""
    if os.path.ismount(chamber) and _libc().umount2(os.fsencode(chamber), 2) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"cannot unmount {chamber}: {os.strerror(err)}")


def remove_tree(path: Path) -> None:
    """Delete the scratch directory ``path``, read-only parts too, its ``recorder.json`` last
    (its chamber tmpfs unmounted first).

    Raises:
        OSError: something could not be removed (``recorder.json`` is then still there).
    """
    if not path.is_dir() or path.is_symlink():
        return
    _unmount(path / CHAMBER_DIR)
    for child in path.iterdir():
        if child.name == RECORDER_FILE:
            continue
        if child.is_dir() and not child.is_symlink():
            _rmtree(child)
        else:
            child.unlink()
    (path / RECORDER_FILE).unlink(missing_ok=True)
    path.rmdir()
