"""Chambers never outlive their recorder: who owns a chamber, and reaping the orphans.

Every chamber container, network and scratch directory (`caisson.chamber.scratch`) of a
run carries its recorder's identity (`recorder_labels`): the recorder's pid, its start
time (`/proc/<pid>/stat` field 22, clock ticks since boot, so a reused pid is told
apart), its host (host name and kernel boot id) and its PID namespace (the namespace its
pid means something in), and the chamber's own deadline (when it kills itself, see
`ContainerSpec.self_deadline_s`).

A thing is an **orphan** (`orphan_reason`) only when its recorder is provably dead: on
the same host and in the same PID namespace as the reaper, with no process of that pid,
or one with another start time; and the lock of the run's scratch directory, when it has
one here, free (`caisson.chamber.scratch.claim`). Everything else is alive: labels missing or malformed
(an older caisson's, or made by hand), another host or PID namespace (its reaper is
there), a reaper whose own view cannot be told (`/proc` of another namespace, no boot
id), a process table entry that cannot be read, a scratch directory without its
``recorder.json`` yet, or whose lock is held. `reap` removes orphans (or only lists them,
`dry_run`); the next `caisson record` calls it before it starts, and `caisson gc` on demand.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable
from pathlib import Path

import msgspec
import trio

from caisson.chamber._docker import RUN_LABEL, Engine
from caisson.chamber._firewall import unguard_interface
from caisson.chamber.scratch import RECORDER_FILE, claim, remove_tree, scratch_root

__all__ = [
    "DEADLINE_LABEL",
    "RECORDER_HOST_LABEL",
    "RECORDER_PID_LABEL",
    "RECORDER_PIDNS_LABEL",
    "RECORDER_START_LABEL",
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
RECORDER_PIDNS_LABEL = "caisson.recorder.pidns"
DEADLINE_LABEL = "caisson.deadline_ns"
"""Label keys: the recorder's pid, start time (clock ticks since boot), host, PID namespace,
and the chamber's own deadline (ns since the Unix epoch)."""


class RecorderIdentity(msgspec.Struct, frozen=True, kw_only=True):
    """Who is recording: enough to tell later whether that process still runs. An empty
    field is one this process could not tell: nothing it labels is ever reaped, and as a
    reaper it judges nothing by pid."""

    pid: int
    """The recorder's pid, in its own PID namespace."""
    start: str
    """Its start time: `/proc/<pid>/stat` field 22 (clock ticks since boot), as text."""
    host: str
    """`<host name>/<kernel boot id>`."""
    pid_ns: str
    """Its PID namespace, as the link `/proc/self/ns/pid` reads (`pid:[<inode>]`,
    namespaces(7)), when the `/proc` it reads is that namespace's; else empty."""

    @property
    def complete(self) -> bool:
        """Whether every field could be told."""
        return bool(self.start and self.pid_ns and not self.host.endswith("/"))


def process_start(pid: int) -> str | None:
    """A process's start time in clock ticks since boot (`/proc/<pid>/stat` field 22,
    proc(5)), as text; None only when there is provably no such process (no
    `/proc/<pid>` and kill(2) with signal 0 says ESRCH).

    Raises:
        OSError: the process table cannot be read for it (e.g. `/proc` mounted with
            hidepid, a stat that cannot be parsed): whether it runs is unknown.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass  # it exists, and is another user's
        raise PermissionError(f"/proc/{pid} is hidden from this process, but pid {pid} runs") from None
    fields = stat[stat.rfind(b")") + 2 :].split()  # the name in parentheses may hold spaces
    if len(fields) <= 19 or not fields[19].isdigit():
        raise OSError(f"/proc/{pid}/stat: no start time in {stat[:200]!r}")
    return fields[19].decode()


def _pid_namespace() -> str:
    """This process's PID namespace (`pid:[<inode>]`), or "" when the `/proc` it reads is
    not that namespace's (`/proc/self` is then not its own pid) or cannot be read."""
    try:
        if os.readlink("/proc/self") != str(os.getpid()):
            return ""
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def recorder_identity() -> RecorderIdentity:
    """This process's identity as a recorder (fields it cannot tell are empty)."""
    pid = os.getpid()
    try:
        start = process_start(pid) or ""
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        start, boot = "", ""
    ns = _pid_namespace()
    return RecorderIdentity(pid=pid, start=start if ns else "", host=f"{socket.gethostname()}/{boot}", pid_ns=ns)


def recorder_labels(identity: RecorderIdentity, deadline_ns: int) -> dict[str, str]:
    """The labels a run's containers, networks and scratch directory carry.

    Args:
        identity: the recorder.
        deadline_ns: when the chamber kills itself, ns since the Unix epoch.
    """
    return {RECORDER_PID_LABEL: str(identity.pid), RECORDER_START_LABEL: identity.start,
            RECORDER_HOST_LABEL: identity.host, RECORDER_PIDNS_LABEL: identity.pid_ns,
            DEADLINE_LABEL: str(deadline_ns)}


def orphan_reason(labels: dict[str, str], *, here: RecorderIdentity, started: Callable[[int], str | None]
                  ) -> str | None:
    """Why a labelled thing is an orphan by its recorder's identity, or None when that
    recorder is not provably dead (pure).

    Args:
        labels: its labels (`recorder_labels`).
        here: the reaper's own identity (`recorder_identity`).
        started: pid -> its start time, None when there is provably no such process,
            OSError when it cannot be told (`process_start`).

    Returns:
        A sentence for the report, or None: alive, or unknown (labels missing, malformed or
        incomplete, another host or PID namespace, ``here`` incomplete, the process
        table unreadable).
    """
    try:
        pid = int(labels[RECORDER_PID_LABEL])
        start, host, ns = labels[RECORDER_START_LABEL], labels[RECORDER_HOST_LABEL], labels[RECORDER_PIDNS_LABEL]
    except (KeyError, ValueError):
        return None
    if pid <= 0 or not here.complete or not start or (host, ns) != (here.host, here.pid_ns):
        return None
    try:
        now_start = started(pid)
    except OSError:
        return None
    if now_start is None:
        return f"its recorder (pid {pid}) is gone"
    if now_start != start:
        return f"its recorder (pid {pid}, started at tick {start}) is gone; the pid was reused"
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


def _scratch_dirs(root: Path) -> list[tuple[Path, dict[str, str]]]:
    """The scratch directories under ``root`` whose ``recorder.json`` is in place, with its labels."""
    out = []
    try:
        candidates = sorted(root.iterdir())
    except OSError:
        return out
    for d in candidates:
        try:
            labels = json.loads((d / RECORDER_FILE).read_text())
        except (OSError, ValueError):
            continue  # not a directory of ours, or being made (its recorder.json not renamed in yet)
        if isinstance(labels, dict):
            out.append((d, {str(k): str(v) for k, v in labels.items()}))
    return out


async def reap(
    engine: Engine,
    *,
    dry_run: bool = False,
    root: Path | None = None,
    started: Callable[[int], str | None] = process_start,
) -> list[Reaped]:
    """Find the orphaned chambers, networks and scratch directories, and remove them.

    Scratch directories are judged first, each orphan's lock taken and held until it is
    removed; a run whose scratch directory is held keeps its containers and networks too.
    Containers go first (a network in use cannot be removed), then networks (with the
    host's firewall rules for their bridge, `unguard_interface`), then scratch directories.

    Args:
        engine: the Docker engine.
        dry_run: only list them.
        root: the scratch root (default `caisson.chamber.scratch.scratch_root`).
        started: pid -> start time (default `process_start`; tests pass their own).

    Returns:
        One `Reaped` per orphan, removed or not (`error` says why not).

    Raises:
        ChamberError: the engine cannot list containers or networks.
    """
    here = recorder_identity()
    held_runs: set[str] = set()
    orphans: list[tuple[Path, dict[str, str], str, int]] = []
    try:
        for path, labels in _scratch_dirs(Path(root or scratch_root())):
            reason = orphan_reason(labels, here=here, started=started)
            fd = None if reason is None else claim(path)
            if reason is None or fd is None:  # alive, or its holder still holds it
                if labels.get(RUN_LABEL):
                    held_runs.add(labels[RUN_LABEL])
            else:
                orphans.append((path, labels, reason, fd))
        containers, networks = await engine.labelled()
        found: list[Reaped] = []
        for kind, items in (("container", containers), ("network", networks)):
            for item in items:
                reason = orphan_reason(item["labels"], here=here, started=started)
                run_id = item["labels"].get(RUN_LABEL, "")
                if reason is None or run_id in held_runs:
                    continue
                entry = Reaped(kind=kind, name=item["name"], id=item["id"], run_id=run_id, reason=reason,
                               state=item["state"])
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
        for path, labels, reason, _ in orphans:
            entry = Reaped(kind="scratch", name=str(path), id=str(path), run_id=labels.get(RUN_LABEL, ""),
                           reason=reason)
            if not dry_run:
                try:
                    with trio.CancelScope(shield=True):
                        await trio.to_thread.run_sync(remove_tree, path)
                    entry = msgspec.structs.replace(entry, removed=True)
                except OSError as exc:
                    entry = msgspec.structs.replace(entry, error=str(exc))
            found.append(entry)
        return found
    finally:
        for *_, fd in orphans:
            os.close(fd)
