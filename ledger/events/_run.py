"""The run lifecycle: a run's manifest, end, sandbox, blobs, notes and reaped chambers."""

from __future__ import annotations

from typing import Any

import msgspec

from ledger.events._base import Category, RunStatus, _Event


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
    limits: dict[str, Any] = {}  # wall_seconds, pids, memory_bytes, cpus
    image_id: str | None = None  # chamber image id (sha256:...)
    host: dict[str, Any] = {}  # host facts: kernel, cpus, engine version, ...
    question_id: str | None = None  # the scenario question this run answers
    caller: dict[str, str] = {}  # the caller's cwd and home on the host (the PWD trap's targets)
    witnesses: list[str] = []  # witnesses the recorder started; each must report
    agent: dict[str, Any] = {}  # adapter name, version, gating (enforced | not_enforced | ungated)
    arm: dict[str, Any] = {}  # arm name, granted tools, withheld tools, the deny list handed to the agent
    weakened: list[str] = []  # controls deliberately weakened (selftest only): never a clean run
    # The chamber's seccomp profile: sha256 (hex of the JSON bytes the engine was given),
    # base (where its default part comes from), denied (syscalls it refuses on top),
    # action (trace: the tracer refuses them, visibly; errno: the kernel does, EPERM).
    seccomp: dict[str, Any] = {}
    # Which syscall witness ran and why: ran (strace | ebpf | both | none, from the witnesses
    # started) and why (the flag that chose it, or the problem that made eBPF fall back to strace);
    # with eBPF, ebpf_backend (libbpf | bpftrace) and ebpf_program_sha256 (of what it loaded).
    syscall_witness: dict[str, str] = {}


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
