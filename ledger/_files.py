"""Writing a file whole: a reader sees the old file or the new one, never a part."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["write_whole"]


def write_whole(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to a temporary file of its own beside ``path`` (mkstemp: writers of the
    same path at once, threads or processes, never share one), fsync it, give it ``mode``
    and rename it over ``path``; on failure the temporary file is removed.

    Raises:
        OSError: the write, fsync or rename failed (``path`` is then as it was).
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)  # mkstemp creates it 0600, whatever the umask
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
