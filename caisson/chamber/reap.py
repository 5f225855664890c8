"""Chambers never outlive their recorder: who owns a chamber, and reaping the orphans.

Every chamber container, network and scratch directory (the sandbox and config home) of
a run carries its recorder's identity (`recorder_labels`): the recorder's pid, its start
time (`/proc/<pid>/stat` field 22, clock ticks since boot, so a reused pid is told
apart), its host (host name and kernel boot id, so a reboot is told apart) and the
chamber's own deadline (when it kills itself, see `ContainerSpec.self_deadline_s`).

A thing is an **orphan** (`orphan_reason`) when its recorder is gone:
- on this host: no process with that pid, or one with another start time;
- on another host (a remote engine): its deadline passed more than `REMOTE_SLACK_S` ago,
  since a recorder elsewhere cannot be asked.

Things without recorder labels (made by an older caisson, or by hand) are never reaped:
nothing tells whose they are. `reap` removes orphans (or only lists them, `dry_run`); the
next `caisson record` calls it before it starts, and `caisson gc` on demand.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import msgspec
import trio

from caisson.chamber._docker import RUN_LABEL, Engine
from caisson.chamber._firewall import unguard_interface
from caisson.chamber.sandbox import _rmtree

__all__ = [
    "DEADLINE_LABEL",
    "RECORDER_FILE",
    "RECORDER_HOST_LABEL",
    "RECORDER_PID_LABEL",
    "RECORDER_START_LABEL",
    "REMOTE_SLACK_S",
    "SCRATCH_PREFIX",
    "Reaped",
    "RecorderIdentity",
    "orphan_reason",
    "process_start",
    "reap",
    "recorder_identity",
    "recorder_labels",
]

RECORDER_PID_LABEL = "caisson.recorder.pid"
RECORDER_START_LABEL = "caisson.recorder.start"
RECORDER_HOST_LABEL = "caisson.recorder.host"
DEADLINE_LABEL = "caisson.deadline_ns"
"""Label keys: the recorder's pid, start time (clock ticks since boot), host, and the
chamber's own deadline (ns since the Unix epoch)."""

RECORDER_FILE = "recorder.json"
"""The file in a run's scratch directory that holds the same labels, as a JSON object."""

SCRATCH_PREFIX = "caisson-"
"""Scratch directories are `<tempdir>/caisson-<run id>-<random>`."""

REMOTE_SLACK_S = 60.0
"""How long past its deadline a chamber of another host is left before it is an orphan."""


class RecorderIdentity(msgspec.Struct, frozen=True, kw_only=True):
    """Who is recording: enough to tell later whether that process still runs."""

    pid: int
    """The recorder's pid, in the host's (its own) PID namespace."""
    start: str
    """Its start time: `/proc/<pid>/stat` field 22 (clock ticks since boot), as text."""
    host: str
    """`<host name>/<kernel boot id>`."""


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown-boot"


def process_start(pid: int) -> str | None:
    """A process's start time in clock ticks since boot (`/proc/<pid>/stat` field 22,
    proc(5)), as text; None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()  # the name in parentheses may hold spaces
    return fields[19].decode() if len(fields) > 19 else None


def recorder_identity(pid: int | None = None) -> RecorderIdentity:
    """This process's (or `pid`'s) identity as a recorder.

    Raises:
        OSError: the process does not exist.
    """
    pid = os.getpid() if pid is None else pid
    start = process_start(pid)
    if start is None:
        raise OSError(f"no process {pid}")
    return RecorderIdentity(pid=pid, start=start, host=f"{socket.gethostname()}/{_boot_id()}")


def recorder_labels(identity: RecorderIdentity, deadline_ns: int) -> dict[str, str]:
    """The labels a run's containers, networks and scratch directory carry.

    Args:
        identity: the recorder.
        deadline_ns: when the chamber kills itself, ns since the Unix epoch.
    """
    return {RECORDER_PID_LABEL: str(identity.pid), RECORDER_START_LABEL: identity.start,
            RECORDER_HOST_LABEL: identity.host, DEADLINE_LABEL: str(deadline_ns)}


def orphan_reason(
    labels: dict[str, str], *, here: str, started: Callable[[int], str | None], now_ns: int
) -> str | None:
    """Why a labelled thing is an orphan, or None when its recorder may be alive (pure).

    Args:
        labels: its labels (`recorder_labels`).
        here: this host's `RecorderIdentity.host`.
        started: pid -> its start time (`process_start`), None when no such process.
        now_ns: the wall clock, ns since the Unix epoch.

    Returns:
        A sentence for the report, or None (alive, or without recorder labels: unknown).
    """
    try:
        pid = int(labels[RECORDER_PID_LABEL])
        start, host = labels[RECORDER_START_LABEL], labels[RECORDER_HOST_LABEL]
        deadline_ns = int(labels.get(DEADLINE_LABEL) or 0)
    except (KeyError, ValueError):
        return None
    if host == here:
        now_start = started(pid)
        if now_start is None:
            return f"its recorder (pid {pid}) is gone"
        if now_start != start:
            return f"its recorder (pid {pid}, started at tick {start}) is gone; the pid was reused"
        return None
    if deadline_ns and now_ns > deadline_ns + int(REMOTE_SLACK_S * 1e9):
        late = (now_ns - deadline_ns) / 1e9
        return f"its recorder is on another host ({host}) and its deadline passed {late:.0f} s ago"
    return None


class Reaped(msgspec.Struct, frozen=True, kw_only=True):
    """One orphan found, and what became of it."""

    kind: str
    """`container`, `network` or `scratch` (a run's sandbox and config home on the host)."""
    name: str
    """Container or network name, or the directory's path."""
    id: str
    """Container or network id; the path again for a directory."""
    run_id: str
    reason: str
    """Why it is an orphan (`orphan_reason`)."""
    state: str = ""
    """A container's state when found (`running`, `exited`, ...)."""
    removed: bool = False
    error: str | None = None
    """Why it could not be removed."""

    def line(self) -> str:
        """One line for a report, e.g. `reaped container caisson-x (run R, running): its ...`."""
        what = f"{self.kind} {self.name}" + (f" (run {self.run_id}, {self.state})" if self.state else
                                              f" (run {self.run_id})")
        verb = "reaped" if self.removed else ("cannot reap" if self.error else "orphan")
        tail = f": {self.error}" if self.error else ""
        return f"{verb} {what}: {self.reason}{tail}"


def _scratch_dirs(tmp: Path) -> list[tuple[Path, dict[str, str]]]:
    out = []
    try:
        candidates = sorted(tmp.glob(f"{SCRATCH_PREFIX}*"))
    except OSError:
        return out
    for d in candidates:
        try:
            labels = json.loads((d / RECORDER_FILE).read_text())
        except (OSError, ValueError):
            continue  # not ours, or an older caisson's: left alone
        if isinstance(labels, dict):
            out.append((d, {str(k): str(v) for k, v in labels.items()}))
    return out


async def reap(
    engine: Engine,
    *,
    dry_run: bool = False,
    tmp: Path | None = None,
    now_ns: int | None = None,
    started: Callable[[int], str | None] = process_start,
) -> list[Reaped]:
    """Find the orphaned chambers, networks and scratch directories, and remove them.

    Containers go first (a network in use cannot be removed), then networks (with the
    host's firewall rules for their bridge, `unguard_interface`), then scratch directories.

    Args:
        engine: the Docker engine.
        dry_run: only list them.
        tmp: where scratch directories are (default: `tempfile.gettempdir()`).
        now_ns: the wall clock (default: now), ns since the Unix epoch.
        started: pid -> start time (default `process_start`; tests pass their own).

    Returns:
        One `Reaped` per orphan, removed or not (`error` says why not).

    Raises:
        ChamberError: the engine cannot list containers or networks.
    """
    now_ns = time.time_ns() if now_ns is None else now_ns
    here = recorder_identity().host
    containers, networks = await engine.labelled()
    found: list[Reaped] = []
    for kind, items in (("container", containers), ("network", networks)):
        for item in items:
            reason = orphan_reason(item["labels"], here=here, started=started, now_ns=now_ns)
            if reason is None:
                continue
            entry = Reaped(kind=kind, name=item["name"], id=item["id"], run_id=item["labels"].get(RUN_LABEL, ""),
                           reason=reason, state=item["state"])
            if not dry_run:
                with trio.CancelScope(shield=True):
                    if kind == "container":
                        error = await engine.remove_container(item["id"])
                    else:
                        error = await engine.remove_network_id(item["id"])
                        if error is None and item.get("bridge"):  # the guard rules it left on the host
                            await trio.to_thread.run_sync(unguard_interface, item["bridge"])
                entry = msgspec.structs.replace(entry, removed=error is None, error=error)
            found.append(entry)
    for path, labels in _scratch_dirs(Path(tmp or tempfile.gettempdir())):
        reason = orphan_reason(labels, here=here, started=started, now_ns=now_ns)
        if reason is None:
            continue
        entry = Reaped(kind="scratch", name=str(path), id=str(path), run_id=labels.get(RUN_LABEL, ""),
                       reason=reason)
        if not dry_run:
            try:
                await trio.to_thread.run_sync(_rmtree, path)
                entry = msgspec.structs.replace(entry, removed=True)
            except OSError as exc:
                entry = msgspec.structs.replace(entry, error=str(exc))
        found.append(entry)
    return found
