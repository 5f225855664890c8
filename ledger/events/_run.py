"""The run lifecycle: a run's manifest, end, sandbox, blobs, notes and reaped chambers."""

from __future__ import annotations

from typing import Literal

import msgspec

from ledger.events._base import Category, Elicitation, Gating, NetworkMode, RunStatus, _Event

__all__ = [
    "AgentConfigFound", "BlobStored", "Caller", "ChamberReaped", "ExcludedPath", "HostFacts", "Note",
    "RunAgent", "RunArm", "RunEnded", "RunLimits", "RunStarted", "SandboxBuilt", "SeccompFacts",
    "SyscallWitnessChoice",
]


class RunLimits(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The limits the chamber ran under (``run.started.limits``); a field None: not recorded."""

    wall_seconds: float | None = None  # the wall deadline, seconds
    pids: int | None = None  # most processes and threads in the chamber
    memory_bytes: int | None = None  # memory limit, bytes
    cpus: float | None = None  # CPU quota, CPUs
    # space the chamber may write per place (tree and config home, /tmp, /var/tmp, /run/lock), bytes
    disk_bytes: int | None = None
    tree_fs: Literal["tmpfs", "host"] | None = None  # the tree's own tmpfs, or a plain directory on the host's disk
    network: NetworkMode | None = None
    user: str | None = None  # the chamber's user: a name (agent | root) or uid[:gid]


class HostFacts(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The machine and engine a run ran on (``run.started.host``).

    ``kernel``, ``machine``, ``cpus`` and ``python`` are the recorder's own
    (`platform.uname`, `os.cpu_count`); the others are the Docker engine's as its API
    (v1.41, ``GET /version`` and ``GET /info``) reports them. A field None: not recorded.
    """

    kernel: str | None = None  # the recorder's kernel release (uname -r)
    machine: str | None = None  # its machine (uname -m): x86_64 | aarch64 | ...
    cpus: int | None = None  # CPUs the recorder's OS counts (0: it could not tell)
    python: str | None = None  # the recorder's Python version
    mem_total_bytes: int | None = None  # the host's physical memory, bytes
    server_version: str | None = None  # the engine's Version
    api_version: str | None = None  # its ApiVersion
    os: str | None = None  # its OperatingSystem
    kernel_version: str | None = None  # its KernelVersion
    arch: str | None = None  # its Arch (amd64 | arm64 | ...)
    cgroup_version: str | None = None  # its CgroupVersion ("1" | "2")
    cgroup_driver: str | None = None  # its CgroupDriver (cgroupfs | systemd | none)
    storage_driver: str | None = None  # its Driver (overlay2 | ...)
    runtime: str | None = None  # its DefaultRuntime (runc | ...)
    ncpu: int | None = None  # its NCPU


class Caller(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Where ``caisson record`` was run from (``run.started.caller``): the targets of the PWD trap."""

    cwd: str | None = None  # the caller's working directory, a host path
    home: str | None = None  # the caller's home directory, a host path


class RunAgent(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The agent under test (``run.started.agent``), when the run drove an agent adapter; a
    field None: not recorded."""

    name: str  # the adapter's name: claude-code | codex | opencode | mini-swe-agent | ...
    gating: Gating | None = None  # what its flags can do to restrict its tools
    version: str | None = None  # the CLI version its image installs ("": not known)
    elicitation: Elicitation | None = None  # how its answer comes back (stream, when not recorded)
    model: str | None = None  # the model it was asked to use; None: its default


class RunArm(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The arm the run played (``run.started.arm``): the tools granted and the deny list handed to the agent."""

    name: str
    grant: list[str] = []  # tools the arm grants, by the agent's own names
    withhold: list[str] = []  # tools always denied, whatever the grant
    deny: list[str] = []  # the deny list handed to the agent: every tool it knows minus the grant, plus withhold
    strategies: list[str] = []  # the scenario strategies the arm grants, by name
    catalog: dict[str, list[str]] = {}  # every scenario strategy -> its tools and mcp__SERVER entries


class SeccompFacts(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The chamber's seccomp profile (``run.started.seccomp``; `caisson.chamber.seccomp_profile`);
    a field None: not recorded."""

    sha256: str | None = None  # hex digest of the profile's JSON bytes, as the engine was given them
    base: str | None = None  # where its default part comes from
    # trace: the tracer refuses the denied calls, visibly; errno: the kernel does (EPERM)
    action: Literal["trace", "errno"] | None = None
    denied: list[str] = []  # syscalls refused on top of the base, sorted
    refused_by_args: list[str] = []  # "syscall: FLAG", calls refused by their arguments


class SyscallWitnessChoice(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Which syscall witness ran and why (``run.started.syscall_witness``); a field None: not recorded."""

    ran: Literal["strace", "ebpf", "both", "none"] | None = None  # from the witnesses started
    why: str | None = None  # the flag that chose it, or the problem that made eBPF fall back to strace
    ebpf_backend: Literal["libbpf", "bpftrace"] | None = None  # with eBPF: the program's backend
    ebpf_program_sha256: str | None = None  # with eBPF: hex digest of what it loaded


class RunStarted(_Event, tag="run.started", frozen=True, kw_only=True):
    """The run's manifest, first event of every ledger written by `caisson record`."""

    run_id: str
    caisson_version: str
    command: list[str] = []
    repo: str | None = None  # live repository path on the host
    commit: str | None = None  # full commit hash under test
    scenario: str | None = None  # scenario file path as given
    scenario_digest: str | None = None  # sha256 hex of the scenario file bytes
    env: dict[str, str] = {}  # chamber environment, secrets fingerprinted
    limits: RunLimits | None = None
    image_id: str | None = None  # chamber image id (sha256:...)
    host: HostFacts | None = None
    question_id: str | None = None  # the scenario question this run answers
    caller: Caller | None = None
    witnesses: list[str] = []  # witnesses the recorder started; each must report
    agent: RunAgent | None = None  # None: a plain command, no agent adapter
    arm: RunArm | None = None  # None: no arm
    weakened: list[str] = []  # controls deliberately weakened (selftest only): never a clean run
    seccomp: SeccompFacts | None = None  # None: the chamber had the engine's own profile (weakened, or older)
    syscall_witness: SyscallWitnessChoice | None = None


class RunEnded(_Event, tag="run.ended", frozen=True, kw_only=True):
    """The command finished, timed out, or the chamber failed."""

    exit_code: int | None = None  # the chamber's exit status as the engine reports it; None: never ended
    # A signal caisson itself sent (SIGKILL at the deadline); never inferred from an exit
    # status of 128+N: how the command's processes ended is in the strace witness's process.exit.
    signal: str | None = None
    duration_ns: int = 0  # how long the command ran (container start to end), ns
    timed_out: bool = False
    status: RunStatus = "completed"
    reason: str = ""  # human-readable cause when status is not "completed"
    oom_killed: bool = False  # the kernel's OOM killer killed a process of the chamber (the engine's State.OOMKilled)
    legacy_wall_ns: int | None = msgspec.field(default=None, name="wall_ns")
    """Schema 1-2's name of ``duration_ns``, read from older ledgers and folded into it on
    decode; never written."""

    def __post_init__(self) -> None:
        if self.legacy_wall_ns is not None and not self.duration_ns:
            msgspec.structs.force_setattr(self, "duration_ns", self.legacy_wall_ns)
            msgspec.structs.force_setattr(self, "legacy_wall_ns", None)


class ExcludedPath(msgspec.Struct, frozen=True, kw_only=True):
    """One path removed from the sandbox, with the exclusion category that removed it."""

    path: str  # relative to the repository root
    category: Category


class AgentConfigFound(msgspec.Struct, frozen=True, kw_only=True):
    """A file the agent reads as its own configuration, left in the sandbox."""

    path: str  # relative to the repository root
    agent: str  # the agent that reads it: claude-code | codex | opencode | cursor | ...
    commands: list[str] = []  # commands it makes the agent run (hooks, MCP servers), one shell line each
    error: str | None = None  # why its commands could not be read


class SandboxBuilt(_Event, tag="sandbox.built", frozen=True, kw_only=True):
    """The tree the agent sees was exported, trimmed and scanned."""

    path: str  # sandbox path inside the chamber
    commit: str  # full hash of the exported commit
    tree_digest: str  # sha256 hex over (path, mode, content hash) of the tree
    file_count: int = 0
    excluded: list[ExcludedPath] = []
    unscanned: list[str] = []  # files the containment scan did not read to their end (too big)
    agent_config: list[AgentConfigFound] = []  # agent configuration files the agent can see


class BlobStored(_Event, tag="blob.stored", frozen=True, kw_only=True):
    """A large artifact was written to ``blobs/`` under its content hash."""

    sha256: str  # hex digest of the blob's bytes; its file name in blobs/
    size_bytes: int
    role: str  # stdout | stderr | answer | pcap | http.request_body | ...
    media_type: str = "application/octet-stream"


class Note(_Event, tag="run.note", frozen=True, kw_only=True):
    """Free text from the recorder (e.g. the demo's generated stream, a warning)."""

    text: str


class ChamberReaped(_Event, tag="chamber.reaped", frozen=True, kw_only=True):
    """Before this run started, the recorder found a chamber, network or scratch directory
    of another run whose recorder is gone, and removed it (or failed to)."""

    target: str  # what was found: container | network | scratch
    name: str  # container or network name, or the directory's path
    object_id: str  # container or network id (the path for a directory)
    run_id: str  # the orphan's run
    reason: str  # why it is an orphan, e.g. "its recorder (pid 4242) is gone"
    state: str = ""  # a container's state when found: running | exited | ...
    removed: bool = False
    error: str | None = None  # why it could not be removed
