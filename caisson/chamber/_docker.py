"""The Docker engine as trio code sees it: aiodocker under trio-asyncio.

This is the ONE module that touches asyncio. Callers are trio code: they open an engine
with `async with open_engine() as engine:` and await its methods; every aiodocker call is
wrapped with `trio_asyncio.aio_as_trio`, so trio cancellation cancels the asyncio side and
callers only ever see `trio.Cancelled` and `ChamberError`.

`Engine.run` owns a container's whole life: create, start, report (id, host pid), wait
until exit or deadline, collect stdout and stderr separately, and always remove it, also
after a failure or a cancellation (Ctrl-C), in a shielded cleanup. Every container carries
the label `caisson.run=<run id>`, so leftovers of a killed caisson can be found with
`docker ps -a --filter label=caisson.run`.
"""

from __future__ import annotations

import json
import math
import os
import ssl
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import trio
import trio_asyncio

from caisson.chamber._view import CHAMBER_HOSTNAME, ETC_FILES, etc_files
from caisson.errors import ChamberError


def _import_aiohttp() -> None:
    """Import aiohttp without parsing the system's CA bundle twice.

    aiohttp builds two default SSL contexts when imported (``aiohttp/connector.py``), each
    loading the system trust store (its cost: docs/benchmarks.md, "Figures behind the code").
    caisson reaches the engine over its unix socket, or over TLS with the context aiodocker
    builds from ``DOCKER_CERT_PATH``, or for a plain ``https://`` engine one `_connect`
    builds with the system trust store; it never uses those defaults. So OpenSSL's
    ``SSL_CERT_FILE`` and ``SSL_CERT_DIR`` point nowhere while aiohttp loads: its default
    contexts trust no CA, and a request through them fails verification, never passes
    it. The caller's values of both variables are back once aiohttp is imported.
    """
    if "aiohttp" in sys.modules:
        return
    names = ("SSL_CERT_FILE", "SSL_CERT_DIR")
    saved = {name: os.environ.get(name) for name in names}
    for name in names:
        os.environ[name] = "/nonexistent/caisson-no-default-trust-store"
    try:
        import aiohttp  # noqa: F401
    finally:
        for name, value in saved.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value


_import_aiohttp()
import aiodocker  # noqa: E402
import aiohttp  # noqa: E402
from aiodocker.exceptions import DockerError  # noqa: E402

__all__ = [
    "RUN_LABEL",
    "LOG_CAP_BYTES",
    "demux_stdcopy",
    "ContainerLimits",
    "ContainerSpec",
    "ContainerStarted",
    "ContainerResult",
    "ChamberNetwork",
    "Engine",
    "open_engine",
]

RUN_LABEL = "caisson.run"
"""Label key set on every container; its value is the run id."""

_CLEANUP_S = 30.0
_LOG_FILE_BYTES = 64 * 2**20
_LOG_FILES = 4
LOG_CAP_BYTES = _LOG_FILE_BYTES * _LOG_FILES
"""The most stdout and stderr (together) the engine keeps for one container, bytes."""
_DEFAULT_URL = "unix:///var/run/docker.sock"


class ContainerLimits(msgspec.Struct, frozen=True, kw_only=True):
    """Resource limits of one container, in the engine's units; None means the engine's default (unlimited).

    Not `caisson.scenario.Limits` (what a scenario's author asks for, with defaults) nor
    `ledger.events.RunLimits` (what ``run.started`` records the chamber ran under): this is
    what the engine is handed (``PidsLimit``, ``Memory``, ``NanoCpus``), and is never persisted.
    """

    pids_limit: int | None = 512
    """Maximum number of processes and threads in the container."""
    memory_bytes: int | None = None
    """Memory limit in bytes (cgroup memory.limit_in_bytes)."""
    nano_cpus: int | None = None
    """CPU quota in units of 1e-9 CPUs (1_000_000_000 = one full CPU)."""


class ContainerSpec(msgspec.Struct, frozen=True, kw_only=True):
    """What to run in a chamber container."""

    image: str
    """Image reference or id, e.g. `caisson/chamber:0123456789abcdef`."""
    cmd: list[str]
    """argv of the container's main process (run without a shell)."""
    env: dict[str, str] = msgspec.field(default_factory=dict)
    """Environment added to the image's (which sets PATH and LANG)."""
    workdir: str | None = None
    """Working directory in the container; None keeps the image's (/home/agent)."""
    user: str | None = None
    """`name`, `uid` or `uid:gid`; None keeps the image's default user (`agent`)."""
    binds: list[tuple[str, str, bool]] = msgspec.field(default_factory=list)
    """Bind mounts as (absolute host path, container path, read_only)."""
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    """Extra container labels; `caisson.run` is always set by `Engine.run`."""
    limits: ContainerLimits = ContainerLimits()
    """Resource limits."""
    network_mode: str = "none"
    """Docker network mode; "none" leaves only the loopback interface."""
    deadline_s: float | None = None
    """Seconds after start before the container is killed (timed_out); None: no limit."""
    self_deadline_s: float | None = None
    """Seconds after start when the chamber kills itself, with or without a caller alive to
    do it (a recorder killed with SIGKILL); None: never. The command is wrapped in
    `timeout -s KILL N` (GNU coreutils or busybox, which the image must have), the
    container's pid 1 when `init` is off: signals from inside its PID namespace cannot
    kill it (pid_namespaces(7)), and when it kills its child and exits, the kernel kills
    every process left in the namespace. Set it past `deadline_s`, so that a live caller
    ends the run first and records a timeout."""
    init: bool = False
    """Run Docker's init (tini) as pid 1, so signals reach the command and zombies are
    reaped; without it the command is pid 1 and ignores signals it has no handler for."""
    dns: list[str] = msgspec.field(default_factory=list)
    """Resolver addresses for the container (the DNS witness); with `etc_dir`, the only
    nameservers of its resolv.conf (none when empty)."""
    etc_dir: str | None = None
    """Absolute host directory where `Engine.run` writes the chamber's own /etc/resolv.conf,
    /etc/hostname and /etc/hosts (`caisson.chamber._view`), bound read-only over the
    engine's, which name the container id and copy the host's resolver; None: the engine's."""
    hostname: str = CHAMBER_HOSTNAME
    """The chamber's host name; empty: the engine's (the container id's first 12 hex)."""
    read_only_root: bool = False
    """Mount the image's own filesystem read-only (``HostConfig.ReadonlyRootfs``): the chamber
    writes only where it is given room (binds, `tmpfs`), never the container's layer on the
    host's disk."""
    tmpfs: dict[str, str] = msgspec.field(default_factory=dict)
    """Paths in the container mounted as a tmpfs of their own, with their mount options
    (``HostConfig.Tmpfs``): what the chamber writes there (its /tmp) is bounded and never
    reaches the host's disk through the container's writable layer."""
    cap_add: list[str] = msgspec.field(default_factory=list)
    """Extra capabilities for the container's root (e.g. SYS_PTRACE for an in-chamber tracer);
    a process that drops to an unprivileged user loses them."""
    run_id: str = ""
    """Value of the `caisson.run` label; empty: a fresh uuid4 hex per run."""
    seccomp: str | None = None
    """The seccomp profile's JSON text (`caisson.chamber.seccomp_profile`); None keeps the
    engine's built-in default, whatever its version makes of it."""


class ChamberNetwork(msgspec.Struct, frozen=True, kw_only=True):
    """A run's internal network: its name, id, host bridge interface, gateway and subnet."""

    name: str
    id: str
    bridge: str  # the host's interface for the network (where the pcap witness listens)
    gateway: str  # the host's address on it (where the proxy and DNS witnesses listen)
    subnet: str


class ContainerStarted(msgspec.Struct, frozen=True, kw_only=True):
    """Passed to `Engine.run`'s `on_start` callback right after the container starts."""

    run_id: str
    container_id: str
    """Full 64-hex container id."""
    host_pid: int
    """Host pid of the container's main process (pid 1 in its namespace)."""
    started_ns: int
    """Wall clock when start returned, ns since the Unix epoch."""


class ContainerResult(msgspec.Struct, frozen=True, kw_only=True):
    """How a container ended and what it printed."""

    run_id: str
    container_id: str
    exit_code: int | None
    """Exit status as Docker reports it; None when the engine failed before the end."""
    signal: int | None
    """A signal caisson sent: 9 after the deadline kill, else None. Never inferred from the
    exit status (``exit 130`` and death by SIGINT look the same to the engine: the strace
    witness tells them apart)."""
    oom_killed: bool
    """The engine's ``State.OOMKilled``: the OOM killer killed a process of the container
    (any, not only the main one, which may still exit 0)."""
    timed_out: bool
    """True when the deadline passed and caisson killed the container."""
    stdout: bytes
    stderr: bytes
    """Captured separately, byte for byte (the engine's ``local`` log driver keeps raw
    bytes; its cap is `LOG_CAP_BYTES` for both together, the oldest output dropped first)."""
    output_truncated: bool = False
    """True when stdout and stderr together reached the log driver's rotation threshold,
    so the engine may have dropped the oldest output."""
    started_ns: int
    """Wall clock when start returned, ns since the Unix epoch."""
    ended_ns: int
    """Wall clock when the exit (or the engine failure) was seen, ns since the epoch."""
    error: str | None = None
    """Set when the engine failed mid-run (the run is then an infrastructure failure)."""
    cleanup_error: str | None = None
    """Set when the container could not be removed after it ended (e.g. a writable layer
    the chamber filled with files outlasted the removal's time): the run stands as it
    ended, and the container, labelled, is reaped later."""


class _EngineFailure(ChamberError):
    """An engine call failed; `status` is the HTTP status, or None for a transport error."""

    def __init__(self, message: str, *, status: int | None):
        super().__init__(message)
        self.status = status


class Engine:
    """A connected Docker engine; obtain one with `open_engine`, never directly."""

    def __init__(self, docker: aiodocker.Docker, url: str):
        self._docker = docker
        self.url = url
        """Engine address, e.g. `unix:///var/run/docker.sock`."""
        self.version: dict[str, Any] = {}  # the engine's answer to /version, set by open_engine

    async def _call(self, fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Any:
        try:
            return await trio_asyncio.aio_as_trio(fn)(*args, **kwargs)
        except DockerError as exc:
            raise _EngineFailure(f"HTTP {exc.status}: {exc.message}", status=exc.status) from exc
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise _EngineFailure(f"{type(exc).__name__}: {exc}", status=None) from exc

    async def create_network(self, run_id: str, *, internal: bool = True,
                             labels: dict[str, str] | None = None) -> "ChamberNetwork":
        """Create the run's internal bridge network: no route out, the host at its gateway.

        ``internal=False`` (selftest only) gives the network a route out. ``labels`` are
        added to `caisson.run` (e.g. the recorder's identity, for reaping).

        Containers on it reach the host only at the gateway address, where the network
        witnesses listen; Docker drops everything they send further (``Internal``).

        Raises:
            ChamberError: the engine failed.
        """
        name = f"caisson-{run_id}"
        bridge = f"cai{run_id[-8:]}"[:15]  # Linux interface names have at most 15 characters
        config = {"Name": name, "Driver": "bridge", "Internal": internal, "CheckDuplicate": True,
                  "Labels": {**(labels or {}), RUN_LABEL: run_id}, "Options": {"com.docker.network.bridge.name": bridge}}
        try:
            network = await self._call(self._docker.networks.create, config)
            details = await self._call(network.show)
        except _EngineFailure as exc:
            raise ChamberError(f"cannot create the chamber network {name}: {exc}") from exc
        ipam = (details.get("IPAM") or {}).get("Config") or [{}]
        return ChamberNetwork(name=name, id=details["Id"], bridge=bridge, gateway=ipam[0].get("Gateway", ""),
                              subnet=ipam[0].get("Subnet", ""))

    async def remove_network(self, network: "ChamberNetwork") -> str | None:
        """Remove a run's network; returns why it failed, or None (also when already gone)."""
        try:
            net = await self._call(self._docker.networks.get, network.id)
            await self._call(net.delete)
        except _EngineFailure as exc:
            if exc.status != 404:
                return str(exc)
        return None

    async def info(self) -> dict[str, Any]:
        """Return host facts about the engine, for the ledger's run header.

        Returns:
            A flat dict: server_version, api_version, os, kernel_version, arch,
            cgroup_version, cgroup_driver, storage_driver, runtime, ncpu, mem_total_bytes.

        Raises:
            ChamberError: the engine failed.
        """
        version = self.version  # asked once, when the engine was opened
        info = await self._call(self._docker.system.info)
        return {
            "server_version": version.get("Version"),
            "api_version": version.get("ApiVersion"),
            "os": info.get("OperatingSystem"),
            "kernel_version": version.get("KernelVersion"),
            "arch": version.get("Arch"),
            "cgroup_version": info.get("CgroupVersion"),
            "cgroup_driver": info.get("CgroupDriver"),
            "storage_driver": info.get("Driver"),
            "runtime": info.get("DefaultRuntime"),
            "ncpu": info.get("NCPU"),
            "mem_total_bytes": info.get("MemTotal"),
        }

    async def image_id(self, tag: str) -> str | None:
        """Return the id (`sha256:<64 hex>`) of image `tag`, or None if the engine lacks it.

        Raises:
            ChamberError: the engine failed.
        """
        try:
            return (await self._call(self._docker.images.inspect, tag))["Id"]
        except _EngineFailure as exc:
            if exc.status == 404:
                return None
            raise

    async def containers(self, run_id: str) -> list[str]:
        """Return the ids of all containers (running or not) labelled `caisson.run=run_id`.

        Raises:
            ChamberError: the engine failed.
        """
        filters = json.dumps({"label": [f"{RUN_LABEL}={run_id}"]})
        found = await self._call(self._docker.containers.list, all=True, filters=filters)
        return [c.id for c in found]

    async def labelled(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Every container and network carrying the `caisson.run` label, of any run.

        Returns:
            (containers, networks), each a list of `{"id", "name", "labels", "state"}`;
            a container's state is Docker's (`running`, `exited`, `created`, ...), a
            network's is empty; a network also has `bridge`, its host interface.

        Raises:
            ChamberError: the engine failed.
        """
        filters = json.dumps({"label": [RUN_LABEL]})
        try:
            found = await self._call(self._docker.containers.list, all=True, filters=filters)
            nets = await self._call(self._docker.networks.list, filters={"label": [RUN_LABEL]})
        except _EngineFailure as exc:
            raise ChamberError(f"cannot list caisson's containers and networks: {exc}") from exc
        containers = [{"id": c.id, "name": ((c["Names"] or ["?"])[0]).lstrip("/"),
                       "labels": dict(c["Labels"] or {}), "state": c["State"] or ""} for c in found]
        networks = [{"id": n["Id"], "name": n.get("Name", ""), "labels": dict(n.get("Labels") or {}), "state": "",
                     "bridge": (n.get("Options") or {}).get("com.docker.network.bridge.name", "")}
                    for n in nets if RUN_LABEL in (n.get("Labels") or {})]
        return containers, networks

    async def remove_container(self, container_id: str) -> str | None:
        """Kill and remove a container by id; return why it failed, or None (also if gone)."""
        try:
            container = await self._call(self._docker.containers.get, container_id)
        except _EngineFailure as exc:
            return None if exc.status == 404 else str(exc)
        return await self._remove(container)

    async def remove_network_id(self, network_id: str) -> str | None:
        """Remove a network by id; return why it failed, or None (also when already gone)."""
        return await self.remove_network(ChamberNetwork(name="", id=network_id, bridge="", gateway="", subnet=""))

    async def run(
        self,
        spec: ContainerSpec,
        *,
        on_start: Callable[[ContainerStarted], Awaitable[None]] | None = None,
    ) -> ContainerResult:
        """Run one container to its end and remove it.

        Args:
            spec: what to run.
            on_start: awaited right after the container started, with its id and host
                pid (e.g. to attach witnesses); the deadline already runs meanwhile.

        Returns:
            The result. An engine failure after the start is reported in `error` (with
            `exit_code` None), not raised, so the caller can still record the run.

        Raises:
            ChamberError: the container could not be created (image missing, bad spec)
                or the engine could not start it (e.g. its executable not found). Under
                the chamber's own deadline (``self_deadline_s``) the engine starts
                ``timeout``, and a command ``timeout`` cannot execute is a result like any
                other (exit 126 or 127): whether the command started is the witnesses'
                to say, never the output's, which the command controls.
            trio.Cancelled: the caller was cancelled; the container was killed and
                removed first.
        """
        run_id = spec.run_id or uuid.uuid4().hex
        config = _create_config(spec, run_id)
        _write_etc(spec)
        # Shielded: a cancellation between the engine creating the container and us
        # learning its id would leave it behind; it lands at the next checkpoint instead.
        with trio.move_on_after(_CLEANUP_S, shield=True) as create_scope:
            try:
                container = await self._call(self._docker.containers.create, config=config)
            except _EngineFailure as exc:
                fix = (
                    "build it with `caisson image build`" if exc.status == 404 else "check the spec"
                )
                raise ChamberError(
                    f"cannot create a container of {spec.image}: {exc}: {fix}"
                ) from exc
        if create_scope.cancelled_caught:
            raise ChamberError(f"creating a container took over {_CLEANUP_S:.0f} s: check dockerd")
        result: ContainerResult | None = None
        try:
            try:
                await self._call(container.start)
            except _EngineFailure as exc:
                raise ChamberError(f"container of {spec.image} failed to start: {exc}") from exc
            result = await self._supervise(container, spec, run_id, on_start)
        finally:
            removal_error: str | None = f"removal took over {_CLEANUP_S:.0f} s"
            with trio.move_on_after(_CLEANUP_S, shield=True):
                removal_error = await self._remove(container)
        if removal_error is not None:  # the run is over whatever its removal does: the reaper takes it later
            result = msgspec.structs.replace(
                result, cleanup_error=f"container {container.id[:12]} not removed ({removal_error})")
        return result

    async def _supervise(
        self,
        container: Any,
        spec: ContainerSpec,
        run_id: str,
        on_start: Callable[[ContainerStarted], Awaitable[None]] | None,
    ) -> ContainerResult:
        started_ns = time.time_ns()
        deadline = math.inf if spec.deadline_s is None else trio.current_time() + spec.deadline_s
        exit_code = signal = None
        oom_killed = timed_out = False
        stdout = stderr = b""
        error = None
        try:
            state = (await self._call(container.show))["State"]
            if on_start is not None:
                await on_start(
                    ContainerStarted(
                        run_id=run_id,
                        container_id=container.id,
                        host_pid=int(state.get("Pid") or 0),
                        started_ns=started_ns,
                    )
                )
            with trio.move_on_at(deadline) as scope:
                await self._call(container.wait)
            if scope.cancelled_caught:
                timed_out = True
                await self._kill(container)
                await self._call(container.wait)
            ended_ns = time.time_ns()
            state = (await self._call(container.show))["State"]
            exit_code = int(state["ExitCode"])
            oom_killed = bool(state.get("OOMKilled"))
            if timed_out:
                signal = 9
            stdout, stderr = await self._output(container)
        except _EngineFailure as exc:
            ended_ns = time.time_ns()
            exit_code = signal = None
            error = f"engine failed mid-run: {exc}"
        return ContainerResult(
            run_id=run_id,
            container_id=container.id,
            exit_code=exit_code,
            signal=signal,
            oom_killed=oom_killed,
            timed_out=timed_out,
            stdout=stdout,
            stderr=stderr,
            output_truncated=_may_be_truncated(stdout, stderr),
            started_ns=started_ns,
            ended_ns=ended_ns,
            error=error,
        )

    async def _output(self, container: Any) -> tuple[bytes, bytes]:
        """stdout and stderr as the container wrote them: one logs request, demultiplexed.

        aiodocker's public ``log()`` decodes the output as UTF-8 (and asks for the
        container's state first); its ``_query`` is the transport its public methods use.
        """
        async def fetch() -> bytes:
            async with self._docker._query(f"containers/{container.id}/logs",
                                           params={"stdout": True, "stderr": True, "follow": False}) as response:
                return await response.read()

        data = await self._call(fetch)
        try:
            return demux_stdcopy(data)
        except ValueError as exc:
            raise _EngineFailure(f"unreadable logs stream: {exc}", status=None) from exc

    async def _kill(self, container: Any) -> None:
        try:
            await self._call(container.kill, signal="SIGKILL")
        except _EngineFailure as exc:
            if exc.status != 409:  # 409: it exited in the meantime
                raise

    async def _remove(self, container: Any) -> str | None:
        """Kill and remove `container`; return why it failed, or None (also if gone)."""
        try:
            await self._call(container.delete, force=True, v=True)
        except _EngineFailure as exc:
            if exc.status != 404:
                return str(exc)
        return None


def _may_be_truncated(stdout: bytes, stderr: bytes) -> bool:
    """Whether the ``local`` log driver may have rotated output away.

    It stores one protobuf entry per line (lines split at 16 KiB), about 27 bytes of
    overhead each (measured on dockerd 20.10; 32 assumed), and rotates a file before it
    exceeds ``max-size``. Output is lost only after ``max-file`` files filled, and then at
    least ``max-file - 1`` nearly full files remain: an estimate of the stored size at
    that level says "maybe". Never a false "no"; a "maybe" just under the cap is possible.
    """
    entries = sum(data.count(b"\n") + len(data) // 16384 + 1 for data in (stdout, stderr))
    stored = len(stdout) + len(stderr) + 32 * entries
    return stored >= (_LOG_FILES - 1) * (_LOG_FILE_BYTES - 32 * 1024)


def demux_stdcopy(data: bytes) -> tuple[bytes, bytes]:
    """Split a multiplexed engine stream into (stdout, stderr), bytes exactly as written.

    The stream is a sequence of frames: an 8-byte header ``[stream, 0, 0, 0, size (u32
    BE)]`` and ``size`` bytes, where stream 1 is stdout and 2 stderr (Docker Engine API,
    "Attach to a container", Stream format; a container without a TTY).

    Raises:
        ValueError: a frame with an unknown stream, or the data ends inside a frame.
    """
    out = {1: bytearray(), 2: bytearray()}
    view = memoryview(data)
    pos = 0
    while pos < len(view):
        if len(view) - pos < 8:
            raise ValueError(f"{len(view) - pos} bytes left at offset {pos}, a frame header is 8")
        stream, size = view[pos], int.from_bytes(view[pos + 4 : pos + 8], "big")
        if stream not in out:
            raise ValueError(f"frame at offset {pos} is for stream {stream}, not stdout (1) or stderr (2)")
        end = pos + 8 + size
        if end > len(view):
            raise ValueError(f"frame at offset {pos} declares {size} bytes, {len(view) - pos - 8} follow")
        out[stream] += view[pos + 8 : end]
        pos = end
    return bytes(out[1]), bytes(out[2])


def _etc_binds(spec: ContainerSpec) -> list[tuple[str, str, bool]]:
    """The binds of `ContainerSpec.etc_dir`'s files over the engine's (none without one)."""
    if spec.etc_dir is None:
        return []
    return [(os.path.join(spec.etc_dir, name), f"/etc/{name}", True) for name in ETC_FILES]


def _write_etc(spec: ContainerSpec) -> None:
    """Write `ContainerSpec.etc_dir`'s files (`caisson.chamber._view.etc_files`), world-readable."""
    if spec.etc_dir is None:
        return
    os.makedirs(spec.etc_dir, mode=0o755, exist_ok=True)
    for name, data in etc_files(spec.hostname, spec.dns).items():
        path = os.path.join(spec.etc_dir, name)
        with open(path, "wb") as f:
            f.write(data)
        os.chmod(path, 0o644)


_ENGINE_MASKED = ("/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                  "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware",
                  "/sys/devices/virtual/powercap")
MASKED_HOST_FACTS = ("/proc/cmdline", "/proc/sys/kernel/random/boot_id")
"""Host facts the chamber reads as empty: the host kernel's command line and boot id (the
recorder's labels name the host by it)."""


def _create_config(spec: ContainerSpec, run_id: str) -> dict[str, Any]:
    binds = [*spec.binds, *_etc_binds(spec)]
    for host, inside, _ in binds:
        if not os.path.isabs(host) or not os.path.isabs(inside):
            raise ChamberError(f"bind {host}:{inside} is not absolute on both sides: fix the spec")
    host_config: dict[str, Any] = {
        "NetworkMode": spec.network_mode,
        "Binds": [f"{h}:{c}:{'ro' if ro else 'rw'}" for h, c, ro in binds],
        "AutoRemove": False,
        "Init": spec.init,
        # Its own cgroup namespace: /proc/self/cgroup and the cgroup mounts' roots are "/",
        # not /docker/<container id> (cgroup_namespaces(7); the engine's default on cgroup v1
        # is the host's). Docker API 1.41.
        "CgroupnsMode": "private",
        # json-file stores lines as JSON strings, replacing invalid UTF-8: evidence lost.
        "LogConfig": {"Type": "local", "Config": {"max-size": str(_LOG_FILE_BYTES), "max-file": str(_LOG_FILES),
                                                  "compress": "false"}},
        "CapAdd": list(spec.cap_add),
    }
    # the engine's default masked paths (moby oci/defaults.go DefaultLinuxSpec) and the host
    # kernel's identity: its command line and boot id name the host, the same in every chamber
    host_config["MaskedPaths"] = [*_ENGINE_MASKED, *MASKED_HOST_FACTS]
    if spec.tmpfs:
        host_config["Tmpfs"] = dict(spec.tmpfs)
    if spec.read_only_root:
        host_config["ReadonlyRootfs"] = True
    if spec.dns and spec.etc_dir is None:
        host_config["Dns"] = list(spec.dns)
    if spec.seccomp is not None:
        host_config["SecurityOpt"] = [f"seccomp={spec.seccomp}"]
    if spec.limits.pids_limit is not None:
        host_config["PidsLimit"] = spec.limits.pids_limit
    if spec.limits.memory_bytes is not None:
        host_config["Memory"] = spec.limits.memory_bytes
        host_config["MemorySwap"] = spec.limits.memory_bytes
    if spec.limits.nano_cpus is not None:
        host_config["NanoCpus"] = spec.limits.nano_cpus
    cmd = list(spec.cmd)
    if spec.self_deadline_s is not None:
        cmd = ["timeout", "-s", "KILL", str(max(1, math.ceil(spec.self_deadline_s))), *cmd]
    config: dict[str, Any] = {
        "Image": spec.image,
        "Hostname": spec.hostname,
        "Cmd": cmd,
        "Env": [f"{k}={v}" for k, v in spec.env.items()],
        "Labels": {**spec.labels, RUN_LABEL: run_id},
        "AttachStdin": False,
        "AttachStdout": False,
        "AttachStderr": False,
        "Tty": False,
        "OpenStdin": False,
        "HostConfig": host_config,
    }
    if spec.workdir is not None:
        config["WorkingDir"] = spec.workdir
    if spec.user is not None:
        config["User"] = spec.user
    return config


async def _connect(url: str) -> aiodocker.Docker:
    # aiohttp connectors need a running asyncio loop, so build the client inside one.
    ssl_context = None
    if url.startswith("https://") and os.environ.get("DOCKER_TLS_VERIFY", "0") != "1":
        # aiodocker would use aiohttp's default context, which trusts no CA here
        # (`_import_aiohttp`): verify against the system trust store, as it would have.
        ssl_context = ssl.create_default_context()
    return aiodocker.Docker(url=url, ssl_context=ssl_context)


@asynccontextmanager
async def open_engine(url: str | None = None) -> AsyncIterator[Engine]:
    """Open a trio-asyncio loop and a connection to the Docker engine.

    Args:
        url: engine address; default `$DOCKER_HOST`, else `unix:///var/run/docker.sock`.

    Yields:
        The connected `Engine`, valid inside the `async with` block (same trio task).

    Raises:
        ChamberError: the engine did not answer a version request.
    """
    url = url or os.environ.get("DOCKER_HOST") or _DEFAULT_URL
    try:
        async with trio_asyncio.open_loop():
            try:
                docker = await trio_asyncio.aio_as_trio(_connect)(url)
            except ValueError as exc:
                raise ChamberError(
                    f"bad Docker engine address {url!r}: {exc}: fix DOCKER_HOST"
                ) from exc
            try:
                engine = Engine(docker, url)
                try:
                    engine.version = await engine._call(docker.version)
                except _EngineFailure as exc:
                    raise ChamberError(
                        f"Docker engine not reachable at {url} ({exc}): start dockerd"
                    ) from exc
                yield engine
            finally:
                with trio.CancelScope(shield=True):
                    await trio_asyncio.aio_as_trio(docker.close)()
    except BaseExceptionGroup as group:
        # open_loop runs a strict nursery that wraps whatever crosses it (our errors, the
        # body's, trio.Cancelled) in a group; hand a lone exception back unwrapped so
        # callers see ChamberError or Cancelled as raised.
        leaves = _leaves(group)
        if len(leaves) == 1:
            raise leaves[0] from None
        raise


def _leaves(group: BaseExceptionGroup) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out
