"""Collect the agent's session files from its config home when it exits.

The chamber's config home (``HOME``, ``CLAUDE_CONFIG_DIR``, ``CODEX_HOME``: see
caisson/chamber/envpin.py) is a fresh directory of the run's scratch space, bind-mounted
into the chamber; whatever is in it was written during this run. When the command has
ended (the container stopped, its processes gone) and before ``run.ended`` is written and
the scratch space removed, the recorder reads the files matching the known session-file
layouts (`caisson.agents.sessionfiles.SESSION_FILE_GLOBS`, every agent's: a plain command
may run an agent CLI too), stores each as a blob and writes one ``agent.session_file``
naming it, so `caisson study backfill` can read first-party usage from sealed evidence
later.

The files belong to the agent, so the host reads them warily: the walk does not follow
symbolic links, a file is opened with ``O_NOFOLLOW`` and read only when ``fstat`` says it
is a regular file, and everything is bounded: `FILE_CAP_BYTES` per file, `TOTAL_CAP_BYTES`
in all, `MAX_ENTRIES` directory entries walked. A file over a cap is still named, with
its size and why it was not stored (``skipped``); never silently dropped.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

from caisson.agents import agent_of_file
from ledger import BlobStore
from ledger.events import AgentSessionFile, BlobStored, Event

__all__ = ["FILE_CAP_BYTES", "MAX_ENTRIES", "TOTAL_CAP_BYTES", "collect_session_files"]

FILE_CAP_BYTES = 64 * 2**20
"""A session file larger than this is named and not stored (Claude Code writes ~250 KiB for a two-call session)."""
TOTAL_CAP_BYTES = 256 * 2**20
"""Session files past this many bytes in all are named and not stored."""
MAX_ENTRIES = 100_000
"""Directory entries the walk looks at before it stops (and says so)."""
ROLE = "agent.session_file"
"""The ``blob.stored`` role of a collected session file."""


def _read(path: Path, cap: int) -> tuple[bytes | None, int, str | None]:
    """(bytes, size, why not read) of a file, never following a link, at most ``cap`` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        return None, 0, f"cannot open: {exc.strerror}"
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None, info.st_size, "not a regular file"
        if info.st_size > cap:
            return None, info.st_size, f"{info.st_size} bytes, over the cap of {cap}"
        chunks, left = [], cap + 1
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > cap:  # it grew while read
            return None, len(data), f"more than the cap of {cap} bytes"
        return data, len(data), None
    finally:
        os.close(fd)


def _walk(home: Path) -> Iterator[tuple[str, Path] | str]:
    """Relative POSIX paths of the files under ``home`` that match a session layout, in a
    stable order; a string instead when the walk stopped at `MAX_ENTRIES`."""
    seen = 0
    for dirpath, dirnames, filenames in os.walk(home, followlinks=False):
        dirnames.sort()
        seen += len(dirnames) + len(filenames)
        if seen > MAX_ENTRIES:
            yield f"the walk stopped after {MAX_ENTRIES} directory entries"
            return
        for name in sorted(filenames):
            full = Path(dirpath) / name
            rel = full.relative_to(home).as_posix()
            if agent_of_file(rel) is not None:
                yield rel, full


def collect_session_files(home: Path, blobs: BlobStore, *, file_cap: int = FILE_CAP_BYTES,
                          total_cap: int = TOTAL_CAP_BYTES) -> list[Event]:
    """Store the session files under ``home`` as blobs; their events, in order.

    Args:
        home: the config home on the host (the directory bound at the chamber's config home).
        blobs: the run's blob store.
        file_cap: bytes per file above which a file is not stored.
        total_cap: bytes in all above which no further file is stored.

    Returns:
        For each stored file a ``blob.stored`` (role `ROLE`) then its ``agent.session_file``;
        for a file not stored, only the ``agent.session_file`` with ``skipped``. Nothing
        when ``home`` is not a directory.
    """
    out: list[Event] = []
    stored = 0
    if not home.is_dir() or home.is_symlink():
        return out
    for item in _walk(home):
        if isinstance(item, str):
            out.append(AgentSessionFile(agent="-", path=".", size_bytes=0, skipped=item))
            break
        rel, full = item
        agent = agent_of_file(rel) or "-"
        data, size, why = _read(full, min(file_cap, max(total_cap - stored, 0)))
        if data is None:
            if why and why.startswith(f"{size} bytes, over") and size <= file_cap:
                why = f"{size} bytes: the total cap of {total_cap} bytes is reached"
            out.append(AgentSessionFile(agent=agent, path=rel, size_bytes=size, skipped=why))
            continue
        digest = blobs.put(data)
        stored += size
        out.append(BlobStored(sha256=digest, size_bytes=size, role=ROLE, media_type="application/jsonl"))
        out.append(AgentSessionFile(agent=agent, path=rel, size_bytes=size, sha256=digest, blob_sha256=digest))
    return out
