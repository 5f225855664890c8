"""The event vocabulary of the ledger: frozen, tagged msgspec Structs in one union.

Every event is a frozen, keyword-only Struct whose ``kind`` tag is a dotted name
(``process.exec``). The union `Event` is built in one place, at the bottom of this
module, and decoded by one reused typed decoder (`decode_event`). Rules:

- Units are in the field names or comments: ``*_ns`` is nanoseconds (wall clock: since
  the Unix epoch; ``mono``: `time.monotonic_ns`), ``*_bytes`` is bytes, token counts are
  tokens as the provider sends them.
- Timestamps and ids are passed in by the witness that builds the event; nothing here
  reads a clock, so replay builds identical events.
- New fields get defaults; a kind is never renamed. `SCHEMA_VERSION` grows when kinds or
  fields are added or a field is renamed, and every older ledger stays readable
  (tests/ledger/test_golden/): a renamed field keeps its old name as a read-only alias
  that ``__post_init__`` folds into the new one (`RunEnded.duration_ns`).
- A ``*_ns`` field is either a point in time (``started_ns``, ``since_ns``: ns since the
  Unix epoch) or a duration (``duration_ns``, ``cpu_ns``, ``timer_lateness_ns``); the
  name ``wall_ns`` means a record's timestamp (`ledger.Record.wall_ns`), never a duration.
- Closed vocabularies are ``Literal`` types (`RunStatus`, `Category`, `FileAccess`,
  `ToolOutcome`, `ToolSurface`, `TunnelVia`, `Provider`, `LlmEndpoint`, `Gating`): a value outside one
  does not decode, and the reader keeps such a record as a ``witness.raw`` describing it.
- Processes carry both identities: ``pid`` as the chamber saw it and ``host_pid`` as the
  host did (a pid alone is not unique across namespaces).
"""

from __future__ import annotations

from typing import Any, Literal, Union

import msgspec

__all__ = [
    "SCHEMA_VERSION",
    "Category",
    "FileAccess",
    "Gating",
    "JudgeVerdictKind",
    "LlmEndpoint",
    "Provider",
    "RunStatus",
    "ToolOutcome",
    "ToolSurface",
    "TunnelVia",
    "Event",
    "EVENT_TYPES",
    "EVENT_KINDS",
    "decode_event",
    "event_kind",
    "RunStarted",
    "RunEnded",
    "SandboxBuilt",
    "ExcludedPath",
    "AgentConfigFound",
    "BlobStored",
    "ProcessExec",
    "ProcessFork",
    "ProcessExit",
    "FileOpen",
    "FileChange",
    "NetConnect",
    "NetSend",
    "ProcessSyscall",
    "ProcSample",
    "HostSample",
    "WitnessStarted",
    "WitnessStopped",
    "WitnessGap",
    "WitnessRaw",
    "HttpExchange",
    "ClientProcess",
    "ProxyTunnel",
    "LlmCall",
    "LlmUsage",
    "DnsQuery",
    "NetFlow",
    "Note",
    "ChamberReaped",
    "AgentTools",
    "AgentToolCall",
    "AgentToolResult",
    "AgentAnswer",
    "AgentUsage",
    "AgentError",
    "AgentRetry",
    "AgentCompaction",
    "AgentModelSwitch",
    "AgentSessionFile",
    "StudyPlanned",
    "StudyResumed",
    "BaselineMeasured",
    "CellStarted",
    "CellEnded",
    "StudyAborted",
    "StudyEnded",
    "BackfillStarted",
    "TokenBackfilled",
    "JudgeStarted",
    "JudgeVerdict",
    "JudgeAlarm",
    "JudgeEnded",
    "HostDrained",
    "JudgeRecorded",
    "BackfillRecorded",
]

SCHEMA_VERSION = 14
"""Version of the event vocabulary; bumped when kinds or fields are added or renamed.

1: the first; 2: ``agent.*``; 3: ``run.ended`` names the command's duration
``duration_ns`` (it was ``wall_ns``, still read from older ledgers); 4: ``net.send``,
``process.syscall``, ``run.started.seccomp``, ``run.ended.oom_killed``; 5: usage rules and
sources per figure, ``llm.call.label_mismatch``, ``agent.usage``'s ``incomplete``,
``usage_missing_reason`` and ``parser``; 6: ``study.*``, ``baseline.measured``, ``cell.*``;
7: ``llm.call.server_tools``, the Vertex AI, Azure OpenAI and Bedrock providers and endpoints;
8: ``agent.session_file`` (the agent's session files collected from its config home),
``backfill.started`` and ``token.backfilled`` (the backfill ledger of a study); 9:
``judge.*`` (the judge ledger of a study); 10: ``net.flow``'s per-direction counts
(``initiator_*``, ``responder_*``); 11: ``study.planned``'s ``executor`` and ``host_keys``,
``host`` on ``baseline.measured`` and ``cell.ended``, ``host.drained``; 12: ``judge.recorded``
and ``backfill.recorded`` (a judge run or backfill segment announced in a study ledger
segment of its own, once closed; study directories written before have none, and
`caisson verify` says it cannot tell whether one of their judges or backfill segments was
removed); 13: ``host.sample.stall_ns`` (the procfs witness's stall clock); 14: ``process.fork``
and ``proc.sample.ppid`` (the syscall witness's processes against procfs's); the Gemini API:
providers ``gemini`` (Google AI Studio) and ``code_assist`` (gemini-cli's Code Assist back
end), endpoints ``generateContent`` and ``streamGenerateContent`` (on ``vertex`` too);
``agent.error``, ``agent.retry``, ``agent.compaction``, ``agent.model_switch`` and
``agent.usage.cost_missing_reason`` (what the agent's transcript says went wrong);
``llm.call.failed`` (what the proxy saw go wrong); ``proxy.tunnel`` (a CONNECT or protocol
upgrade through the proxy witness, refused or relayed); ``file.open``'s
``path_cut``, ``unresolved`` and ``real_path_cut``, ``file.change``'s ``path_cut`` and
``unresolved``, ``process.exec``'s ``path_cut`` and ``argv_cut`` (what a syscall witness could
not read whole or place); ``http.exchange.client``,
``client_processes`` and ``client_unresolved`` (which chamber process made the exchange)."""

RunStatus = Literal["completed", "timeout", "interrupted", "infra_failure"]
"""How a run ended (``run.ended.status``)."""

Category = Literal["answer_key", "telemetry", "agent_instructions", "published_reports", "grading",
                   "agent_config"]
"""The exclusion categories: what a sandbox may withhold, and why. ``agent_config`` (files the
agent reads as its own configuration) is also withheld by default (`caisson.chamber.agent_config`)."""

FileAccess = Literal["r", "w", "rw"]
"""How a file was opened: read only, write only, or both (from ``O_RDONLY``/``O_WRONLY``/``O_RDWR``)."""

ToolOutcome = Literal["executed", "refused", "errored", "unknown"]
"""What became of an agent's tool call; ``unknown`` counts as executed."""

ToolSurface = Literal["init", "request"]
"""Where an agent's tool list comes from: what it reports (``init``), what it sends the model (``request``)."""

Provider = Literal["anthropic", "openai", "vertex", "azure", "bedrock", "gemini", "code_assist"]
"""The LLM API a model call went to (``llm.call.provider``): Anthropic, OpenAI, Google
Vertex AI (Anthropic and Gemini models), Azure OpenAI, AWS Bedrock (schema 7 added these
three), the Gemini API of Google AI Studio and Google's Code Assist (schema 14)."""

LlmEndpoint = Literal["messages", "chat.completions", "responses", "rawPredict", "streamRawPredict", "invoke",
                      "invoke-with-response-stream", "generateContent", "streamGenerateContent"]
"""The API endpoint of a model call: Anthropic Messages, OpenAI Chat Completions or
Responses; Vertex AI's ``rawPredict`` / ``streamRawPredict`` and Bedrock's ``invoke`` /
``invoke-with-response-stream`` (Anthropic Messages bodies; schema 7); the Gemini API's
``generateContent`` / ``streamGenerateContent`` (schema 14)."""

Gating = Literal["enforced", "not_enforced", "ungated"]
"""An agent's gating capability (``run.started.agent["gating"]``): its flags restrict tools
(verified), could restrict them (no verified mapping yet), or cannot."""


class _Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", omit_defaults=True):
    """Base of every event; ``kind`` is the tag, set by each subclass."""


# --- run lifecycle -------------------------------------------------------------------


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


# --- processes and files (strace witness) -----------------------------------------------


class ProcessExec(_Event, tag="process.exec", frozen=True, kw_only=True):
    """An execve/execveat, with its result."""

    pid: int  # pid in the chamber's namespace
    host_pid: int | None = None  # pid on the host
    ppid: int | None = None
    path: str = ""  # filename argument of execve
    argv: list[str] = []
    cwd: str | None = None
    env: dict[str, str] | None = None  # exec'd environment when the witness sees it
    result: int = 0  # 0 on success, -1 on failure
    errno: str | None = None  # e.g. "ENOENT"
    path_cut: bool = False  # the witness read only the start of ``path`` (it ends with "...")
    argv_cut: bool = False  # an argv or env string (it ends with "...") or the list (argv ends with "...") is cut


class ProcessFork(_Event, tag="process.fork", frozen=True, kw_only=True):
    """A new process (not a thread): a clone, clone3, fork or vfork that returned its pid
    to the parent (schema 14). With ``proc.sample`` it tells whether the syscall witness
    saw every process procfs saw (``witness.unseen_process``)."""

    pid: int  # the child's pid in the chamber's namespace
    host_pid: int | None = None  # the child's pid on the host
    ppid: int | None = None  # the parent's pid in the chamber's namespace
    syscall: str = ""  # clone | clone3 | fork | vfork; "" when the witness does not say
    flags: list[str] = []  # the CLONE_* flags as the kernel spells them (e.g. "CLONE_UNTRACED")


class ProcessExit(_Event, tag="process.exit", frozen=True, kw_only=True):
    """A process ended: ``+++ exited with N +++`` or ``+++ killed by SIG +++``."""

    pid: int
    host_pid: int | None = None
    code: int | None = None
    signal: str | None = None


class FileOpen(_Event, tag="file.open", frozen=True, kw_only=True):
    """An open/openat/creat, path as the chamber saw it (resolved against cwd)."""

    pid: int
    host_pid: int | None = None
    syscall: str = "openat"
    path: str
    flags: str = ""  # e.g. "O_RDONLY|O_CLOEXEC"
    access: FileAccess = "r"
    result: int | None = None  # the fd, or None on failure
    errno: str | None = None
    real_path: str | None = None  # the kernel's path of the opened file (-yy), symlinks followed; None: as path
    path_cut: bool = False  # the witness read only the start of the name: ``path`` stops there, with "..."
    # ``path`` is the name as given: relative to, or through (/proc/self/fd/N/...), a directory
    # the witness does not know
    unresolved: bool = False
    real_path_cut: bool = False  # the kernel's path of the opened file is longer than the witness reads


class FileChange(_Event, tag="file.change", frozen=True, kw_only=True):
    """unlink, rename, mkdir, chmod, truncate and similar calls that change the tree."""

    pid: int
    host_pid: int | None = None
    syscall: str
    path: str
    target: str | None = None  # second path (rename, link, symlink)
    result: int = 0
    errno: str | None = None
    path_cut: bool = False  # ``path`` or a file ``target`` (not a symlink's text) is cut, as `FileOpen`'s
    unresolved: bool = False  # ``path`` or a file ``target`` is unresolved, as `FileOpen`'s


class NetConnect(_Event, tag="net.connect", frozen=True, kw_only=True):
    """A connect() as the strace witness saw it."""

    pid: int
    host_pid: int | None = None
    family: str  # AF_INET | AF_INET6 | AF_UNIX
    address: str
    port: int | None = None
    result: int = 0
    errno: str | None = None


class NetSend(_Event, tag="net.send", frozen=True, kw_only=True):
    """A send to an explicit destination, no connect() needed: sendto, sendmsg or sendmmsg
    with an address (a UDP datagram, a TCP Fast Open SYN with data: ``MSG_FASTOPEN``).
    One event per message that names a destination (sendmmsg may name several)."""

    pid: int
    host_pid: int | None = None
    syscall: str = "sendto"  # sendto | sendmsg | sendmmsg
    family: str  # AF_INET | AF_INET6 | AF_UNIX | ...
    address: str  # IP text, sun_path, or "" for other families
    port: int | None = None
    flags: str = ""  # as strace printed them, e.g. "MSG_FASTOPEN"; "0" for none
    result: int = 0  # bytes (sendto, sendmsg) or messages (sendmmsg) sent; -1 on failure
    errno: str | None = None


class ProcessSyscall(_Event, tag="process.syscall", frozen=True, kw_only=True):
    """A traced syscall with no kind of its own: io_uring, file handles, mount-like
    calls, ptrace, process_vm_readv, memfd_create (the witness's audit, docs/architecture.md)."""

    pid: int
    host_pid: int | None = None
    syscall: str
    args: list[str] = []  # the arguments as the witness printed them (process_vm_*: buffer contents as sizes)
    result: int | None = None  # the return value; None when the call never returned
    errno: str | None = None
    denied: bool = False  # refused by the chamber's policy, not run by the kernel (strace's (INJECTED))


class ProcSample(_Event, tag="proc.sample", frozen=True, kw_only=True):
    """One process of the chamber's tree at one procfs tick."""

    pid: int
    host_pid: int | None = None
    start_time_ns: int = 0  # process start, ns since boot; with pid, a unique key
    ppid: int | None = None  # the parent's pid in the chamber's namespace (None before schema 14)
    name: str = ""
    cpu_ns: int = 0  # user + system CPU time, ns
    rss_bytes: int = 0


class HostSample(_Event, tag="host.sample", frozen=True, kw_only=True):
    """The host at one procfs tick: the evidence for ``host_stalled``."""

    load1: float = 0.0
    cpu_steal_ratio: float | None = None  # steal / total over the last interval
    psi: dict[str, float] = {}  # "cpu.some.avg10" -> percent, when /proc/pressure exists
    timer_lateness_ns: int = 0  # how late this tick fired after its deadline, ns
    # The worst a thread that only sleeps on its own 50 ms grid woke late since the previous
    # sample, ns: a stop or starvation of the recorder while a tick was being sampled or
    # sent, which the tick's lateness cannot show (0 before schema 13).
    stall_ns: int = 0
    interval_ns: int = 0  # the configured sampling interval, ns


# --- witness health --------------------------------------------------------------------


class WitnessStarted(_Event, tag="witness.started", frozen=True, kw_only=True):
    """A witness is running; ``detail`` says how (command line, version)."""

    witness: str
    detail: dict[str, Any] = {}


class WitnessStopped(_Event, tag="witness.stopped", frozen=True, kw_only=True):
    """A witness stopped normally, with its counts."""

    witness: str
    lines: int = 0
    events: int = 0
    parse_failures: int = 0
    bytes: int = 0


class WitnessGap(_Event, tag="witness.gap", frozen=True, kw_only=True):
    """A witness died, lagged or dropped: what is missing and from when."""

    witness: str
    reason: str
    missing: str = ""  # what the ledger lacks because of it
    since_ns: int | None = None  # wall ns from which evidence is missing
    dropped: int = 0  # events known to be lost


class WitnessRaw(_Event, tag="witness.raw", frozen=True, kw_only=True):
    """A line a witness's parser did not understand, kept raw, never dropped."""

    witness: str
    line: str


# --- network ---------------------------------------------------------------------------


class ClientProcess(msgspec.Struct, frozen=True, kw_only=True):
    """A chamber process that held the chamber's end of a proxied connection when the proxy
    witness looked it up, at the connection's first request (schema 14)."""

    pid: int  # pid in the chamber's namespace
    host_pid: int  # pid on the host
    start_time_ns: int  # process start, ns since boot (as proc.sample's): with pid, a unique key
    exe: str | None = None  # /proc/PID/exe as the recorder read it; None when unreadable


class HttpExchange(_Event, tag="http.exchange", frozen=True, kw_only=True):
    """One HTTP request/response through the proxy witness."""

    method: str
    scheme: str
    host: str
    port: int
    path: str
    status: int | None = None  # None when no response arrived
    request_bytes: int = 0  # decoded request body size
    response_bytes: int = 0
    request_headers: list[tuple[str, str]] = []  # secrets replaced by keyed fingerprints
    response_headers: list[tuple[str, str]] = []
    request_body_sha256: str | None = None  # blob hash
    response_body_sha256: str | None = None
    started_ns: int = 0  # wall ns, request start
    ended_ns: int = 0  # wall ns, response end
    denied: str | None = None  # the policy that refused it, when refused
    error: str | None = None
    # Who made it (schema 14): the chamber's end of its connection ("ip:port" as the proxy saw
    # it), and the chamber processes that held that socket when the witness looked (its
    # connection's first request; more than one when the socket was inherited or passed),
    # ordered by pid; or why none was found. Neither set: the witness did not look.
    client: str | None = None
    client_processes: list[ClientProcess] = []
    client_unresolved: str | None = None


TunnelVia = Literal["connect", "upgrade"]
"""How a tunnel was asked of the proxy: ``CONNECT`` (RFC 9110 §9.3.6), or an HTTP/1.1
``Upgrade`` its server answered ``101 Switching Protocols`` (RFC 9110 §7.8, §15.2.2)."""


class ProxyTunnel(_Event, tag="proxy.tunnel", frozen=True, kw_only=True):
    """A tunnel the chamber asked of the proxy witness, refused or relayed (schema 14).

    What a tunnel carries as HTTP is in its ``http.exchange`` events; what it carried
    otherwise is only counted here.
    """

    via: TunnelVia
    host: str  # the target as the chamber wrote it: CONNECT's authority, or the upgraded request's host
    port: int
    client: str | None = None  # "ip:port" of the chamber's end
    denied: str | None = None  # why the proxy refused the tunnel or what it carried; None: let through
    protocol: str = ""  # what the proxy found inside, outermost first, "/"-joined: "tls", "http",
    # "websocket", "tcp" (bytes neither TLS nor HTTP), or an upgrade's token; "": nothing arrived
    exchanges: int = 0  # HTTP requests it carried (each an http.exchange)
    client_bytes: int = 0  # bytes relayed from the chamber other than as HTTP: raw TCP, WebSocket payloads
    server_bytes: int = 0  # the same, relayed back to the chamber
    started_ns: int = 0  # wall ns since the Unix epoch: when the tunnel was asked for
    ended_ns: int = 0  # wall ns since the Unix epoch: when it closed (refused: when refused)
    error: str | None = None  # it did not end by a close (the proxy stopped, a connection failed)


class LlmUsage(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A normalised usage view; ``rule`` states how it was derived from the raw object."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None  # input + output; cache fields stay out of it
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None
    rule: str = ""
    rules: dict[str, str] = {}  # normalised figure -> "name@version" of the rule that produced it
    sources: dict[str, str] = {}  # raw usage field -> which event/turn it was taken from, and why


class LlmCall(_Event, tag="llm.call", frozen=True, kw_only=True):
    """A model call seen first-hand by the proxy witness."""

    provider: Provider
    endpoint: LlmEndpoint
    requested_model: str | None = None
    served_model: str | None = None  # as the response says
    stop_reason: str | None = None
    streamed: bool = False
    usage: dict[str, Any] | None = None  # exactly as sent; None when not sent
    usage_missing_reason: str | None = None  # why usage is None (cut stream, ...)
    normalized: LlmUsage | None = None
    exchange_seq: int | None = None  # seq of the http.exchange it belongs to
    label_mismatch: str | None = None  # the body's content-encoding failed; its raw bytes were read as sent
    # why the call failed, None when it succeeded (schema 14): an HTTP status outside 2xx with
    # the provider's error detail, a stream error event or a failed response, a stream cut
    # before its terminal event, no response at all
    failed: str | None = None
    server_tools: dict[str, int] = {}  # provider-side tool executions by name (e.g. "web_search": 2), from the
    # response: Anthropic server_tool_use blocks and usage.server_tool_use.*_requests, OpenAI Responses *_call
    # output items, Gemini's search queries, fetched URLs and executed code; the chamber never sees these run
    # (schema 7)


class DnsQuery(_Event, tag="dns.query", frozen=True, kw_only=True):
    """A query to the chamber's resolver, and what it answered."""

    name: str
    qtype: str  # A | AAAA | ...
    rcode: str = "NOERROR"  # as RFC 1035 names it
    answers: list[str] = []
    refused: bool = False
    duration_ns: int = 0


class NetFlow(_Event, tag="net.flow", frozen=True, kw_only=True):
    """A bidirectional flow summary from the packet capture (`collectors.pcap`).

    ``src``/``sport`` is the initiator. The per-direction counts follow IPFIX's
    bidirectional flows (RFC 5103; IANA elements initiatorPackets, responderPackets,
    initiatorOctets, responderOctets, tcpControlBits): ``initiator_*`` is what the
    initiator sent, ``responder_*`` what came back. None: not counted (schema < 10).
    """

    proto: str  # tcp | udp | icmp | icmp6 | sctp | ... | the IP protocol number
    src: str
    sport: int | None = None
    dst: str
    dport: int | None = None
    packets: int = 0  # both directions
    bytes: int = 0  # IP datagram bytes, both directions
    first_ns: int = 0  # ns since the Unix epoch
    last_ns: int = 0  # ns since the Unix epoch
    initiator_packets: int | None = None  # packets src -> dst
    initiator_bytes: int | None = None  # IP datagram bytes src -> dst
    initiator_tcp_flags: int | None = None  # OR of the TCP flags src -> dst (RFC 9293 bits); None: not TCP
    responder_packets: int | None = None  # packets dst -> src: 0 when nothing came back
    responder_bytes: int | None = None  # IP datagram bytes dst -> src
    responder_tcp_flags: int | None = None  # OR of the TCP flags dst -> src; 0x04 alone (+ ACK): a reset


# --- agents (transcript witness) -------------------------------------------------------


class AgentTools(_Event, tag="agent.tools", frozen=True, kw_only=True):
    """The tool surface an agent reported about itself (e.g. Claude Code's init event)."""

    agent: str  # adapter name: claude-code | codex | ...
    surface: ToolSurface
    tools: list[str] = []
    model: str | None = None


class AgentToolCall(_Event, tag="agent.tool_call", frozen=True, kw_only=True):
    """A tool call in the agent's own transcript."""

    agent: str
    call_id: str
    tool: str
    input: dict[str, Any] = {}  # as the model sent it (secrets are not expected here)


class AgentToolResult(_Event, tag="agent.tool_result", frozen=True, kw_only=True):
    """What became of a tool call: executed, refused by permission, errored, or unknown."""

    agent: str
    call_id: str
    tool: str = ""
    outcome: ToolOutcome
    excerpt: str = ""  # the start of the result text, for humans


class AgentAnswer(_Event, tag="agent.answer", frozen=True, kw_only=True):
    """The agent's final answer as its transcript states it."""

    agent: str
    text: str
    answer_sha256: str | None = None  # blob of the full text when it is long


class AgentUsage(_Event, tag="agent.usage", frozen=True, kw_only=True):
    """First-party usage and cost as the agent reports them (never a reconstruction)."""

    agent: str
    token_source: str  # where the counts come from, e.g. "claude-code result.usage"
    usage: dict[str, Any] | None = None  # as reported; None when the agent reported none
    normalized: LlmUsage | None = None
    cost_usd: float | None = None  # as reported
    by_model: dict[str, Any] = {}  # e.g. Claude Code's modelUsage, as reported
    usage_missing_reason: str | None = None  # why normalized is None (incomplete transcript, unknown shape, ...)
    incomplete: str | None = None  # why the transcript is incomplete: no terminal event, a last line cut
    parser: str = ""  # the transcript parser that read it, "name@version"
    # why cost_usd is None although the agent reported a cost field: a placeholder (OpenCode's 0
    # for a provider without prices, mini-swe-agent's 0.0 under ignore_errors, Claude Code's
    # costBasis "unknown": a guess at another model's price) is not a figure (schema 14)
    cost_missing_reason: str | None = None


class AgentError(_Event, tag="agent.error", frozen=True, kw_only=True):
    """An error the agent or its provider reported in the agent's own transcript (schema
    14): Claude Code's ``is_error`` result and its ``<synthetic>`` API-error message, Codex's
    ``turn.failed`` and ``error`` lines, OpenCode's ``error`` line, Copilot's
    ``session.error``, mini-swe-agent's exception exit. The agent's word, not evidence:
    detectors weigh it against what the proxy witness saw."""

    agent: str
    said: str  # where the transcript says it, e.g. "result.is_error", "turn.failed", "session.error"
    status: int | None = None  # the provider's HTTP status, as reported (e.g. 401, 529)
    code: str | None = None  # the agent's or provider's error code, e.g. "oauth_org_not_allowed", "APIError"
    message: str = ""  # as reported (cut to 2,000 characters)
    terminal: bool = True  # the session ended on it; False: it went on (e.g. a context overflow it compacted)
    # who failed, as the parser reads the CLI's vocabulary: "provider" (the model API failed or
    # refused: auth, quota, rate limit, overload, an HTTP error, a cut stream), "agent" (the CLI
    # itself: a crash, a setup failure), "limit" (a bound the run set: turns, budget, time,
    # output length; an outcome, not a failure); "" when the parser cannot tell
    cause: Literal["provider", "agent", "limit", ""] = ""


class AgentRetry(_Event, tag="agent.retry", frozen=True, kw_only=True):
    """A model call the agent retried, as its transcript says (schema 14): Claude Code's
    ``system``/``api_retry``, Codex's ``Reconnecting... N/M``, Copilot's turn retries."""

    agent: str
    said: str  # where, e.g. "system.api_retry", "error.reconnecting", "assistant.turn_retry"
    attempt: int | None = None  # which retry this is, 1-based, as reported
    max_attempts: int | None = None  # the agent's retry cap, as reported
    status: int | None = None  # the HTTP status that caused it, when reported
    delay_ns: int | None = None  # how long the agent waits before it, ns
    code: str | None = None  # the reported cause, e.g. "overloaded", "rate_limit"
    message: str = ""


class AgentCompaction(_Event, tag="agent.compaction", frozen=True, kw_only=True):
    """The agent compacted its context, as its transcript says (schema 14): Claude Code's
    ``system``/``compact_boundary``. A silent stretch before it is the agent's own work."""

    agent: str
    trigger: str | None = None  # "auto" | "manual", as reported
    tokens_before: int | None = None  # context tokens before, as reported (pre_tokens)
    tokens_after: int | None = None  # context tokens after, as reported (post_tokens)
    duration_ns: int | None = None  # how long it took, as reported


class AgentModelSwitch(_Event, tag="agent.model_switch", frozen=True, kw_only=True):
    """The agent answered with another model than it was asked to use, as its transcript
    says (schema 14): Claude Code's ``system``/``model_fallback``, Codex's ``model rerouted``."""

    agent: str
    said: str  # where, e.g. "system.model_fallback", "item.error.model_rerouted"
    requested: str | None = None  # the model the session was using
    used: str | None = None  # the model it switched to
    trigger: str | None = None  # why, as reported (e.g. "overloaded", "HighRiskCyberActivity")
    message: str = ""


class AgentSessionFile(_Event, tag="agent.session_file", frozen=True, kw_only=True):
    """A session or usage file the agent wrote into its config home, collected by the
    recorder when the agent exited (caisson/run/sessionfiles.py); its bytes are a blob."""

    agent: str  # the agent whose file layout the path matches: claude-code | codex
    path: str  # relative to the chamber's config home, e.g. ".claude/projects/-work-sandbox/<session>.jsonl"
    size_bytes: int  # the file's size when collected, bytes
    sha256: str | None = None  # hex digest of its bytes; None when they were not read (skipped)
    # The blob holding them (blobs are content-addressed: equal to sha256); None: not stored.
    blob_sha256: str | None = None
    skipped: str | None = None  # why it was not stored: over the per-file or total cap, not a regular file


# --- studies (the study ledger: caisson study run; docs/studies.md) -----------------------


class StudyPlanned(_Event, tag="study.planned", frozen=True, kw_only=True):
    """A study's plan, first event of its study ledger: what will run, and what will not."""

    study: str  # the study's name
    study_sha256: str  # blob of the study file's bytes (role "study")
    scenario_sha256: str = ""  # blob of the scenario file's bytes (role "scenario")
    scenario: str = ""  # the scenario path as the study file gives it
    repo: str | None = None  # live repository path on the host
    commit: str | None = None  # full commit hash under test
    order_seed: int | None = None  # seed of the shuffled cell order; None: the order as planned
    combos: list[dict[str, Any]] = []  # per (arm, agent, model): gating, elicitation, endpoint, deny list, cells
    cells: list[dict[str, Any]] = []  # the matrix in run order: cell_id, arm, agent, model, question_id, repetition
    refusals: list[dict[str, Any]] = []  # per refused (arm, agent, model): gating, kind (cannot | not_yet), reason, cells
    prices: dict[str, Any] = {}  # model -> {input_usd_per_mtok, output_usd_per_mtok}, as the study gives them
    abort: dict[str, Any] = {}  # abort rules, e.g. {"host_stalled_in_a_row": 3}
    infra_retries: int = 1  # attempts after an infra failure, per cell
    grader: list[dict[str, Any]] = []  # per question: the key, empty and bad answers' scores
    weakened: list[str] = []  # controls weakened on purpose (tests only): never a clean study
    executor: str = "local"  # local | ray (docs/studies.md, "Executors")
    # The host keys the operator enrolled (ray): {"host": label, "public_key": hex of the raw
    # 32-byte Ed25519 key}; every run of the study must be signed by one of them. []: the
    # runs are signed with the study ledger's own key (local).
    host_keys: list[dict[str, str]] = []


class StudyResumed(_Event, tag="study.resumed", frozen=True, kw_only=True):
    """First event of a continuation segment: names the last sealed state of the one before."""

    previous_run_id: str  # the previous segment's ledger run id
    previous_records: int  # records covered by its last seal
    previous_head: str  # hex chain head at its last seal
    previous_final: bool = False  # whether it had been closed cleanly


class BaselineMeasured(_Event, tag="baseline.measured", frozen=True, kw_only=True):
    """The preflight probe session of one (arm, agent, model), before any cell."""

    arm: str
    agent: str
    model: str | None = None
    run_id: str | None = None  # the probe run's id
    run_dir: str = ""  # relative to the study directory
    ledger_records: int = 0  # records covered by the probe ledger's last seal
    ledger_head: str = ""  # hex chain head at that seal
    status: str = ""  # ok | abort | refused (gating measured not_enforced: its cells do not run)
    reason: str = ""  # why the study aborts here, naming tool, arm and agent
    tools_discovered: list[str] = []  # the surface the agent reported (agent.tools)
    tools_requested: list[str] = []  # the tools its model requests offered (proxy witness: request bodies)
    deny: list[str] = []  # the deny list of this combination's cells (static union discovered, minus grant)
    floor_tokens: int | None = None  # the session's total tokens (input + output); None: not measured
    floor_source: str | None = None  # where floor_tokens comes from, e.g. "claude-code result.usage"
    # The gating probe (caisson/probes/gating.py), run when the agent claims ``enforced`` and the
    # arm denies something; status ``refused``: the claim was measured ``not_enforced``.
    gating_claimed: str | None = None  # the adapter's claim; None: no adapter
    gating_measured: str | None = None  # enforced | not_enforced | ungated; None: not probed
    gating_tool: str | None = None  # the denied tool the probe's model asked for
    gating_outcome: str | None = None  # what became of that call (refused | executed | unknown ...)
    gating_run_id: str | None = None  # the probe run's id
    gating_run_dir: str = ""  # relative to the study directory
    gating_ledger_records: int = 0  # records covered by the probe ledger's last seal
    gating_ledger_head: str = ""  # hex chain head at that seal
    gating_evidence: list[int] = []  # seqs of the probe run's records the verdict rests on
    gating_reason: str = ""  # the verdict in words
    host: str = ""  # where the probe ran ("host name/node id" under ray; "" local)


class CellStarted(_Event, tag="cell.started", frozen=True, kw_only=True):
    """An attempt of a cell is about to be dispatched (sealed before it is)."""

    cell_id: str
    attempt: int  # 1, 2, ... per cell
    run_dir: str = ""  # where the attempt's run goes, relative to the study directory


class CellEnded(_Event, tag="cell.ended", frozen=True, kw_only=True):
    """An attempt of a cell ended; binds its ledger's sealed state into the study ledger."""

    cell_id: str
    attempt: int
    run_id: str | None = None  # None: no ledger was written (the chamber never started)
    run_dir: str = ""  # relative to the study directory
    status: str = ""  # clean | void | unverified | unclosed | failed | refused (record refused the session)
    void_reason: str = ""  # the voiding findings, one per line
    infra_failure: bool = False  # void because the chamber or agent failed to start (retried)
    counting: bool = False  # this attempt is the cell's counting one (first sealed, not infra)
    score: float | None = None  # the checklist score as replayed (None: void or unscored)
    ledger_records: int = 0  # records covered by the cell ledger's last seal
    ledger_head: str = ""  # hex chain head at that seal
    ledger_final: bool = False  # whether that seal is the final one (a cleanly closed ledger)
    seal_signature: str = ""  # hex Ed25519 signature of that seal
    duration_ns: int = 0  # the attempt's duration as the runner saw it, ns
    host: str = ""  # where the attempt ran ("host name/node id" under ray; "" local or never placed)


class StudyAborted(_Event, tag="study.aborted", frozen=True, kw_only=True):
    """The study stopped before its matrix was done."""

    reason: str
    cells: list[str] = []  # the cells behind the reason (e.g. three stalled in a row)


class StudyEnded(_Event, tag="study.ended", frozen=True, kw_only=True):
    """The study's last event: counts over its cells."""

    cells: int = 0  # cells planned
    counted: int = 0  # cells with a counting attempt
    void: int = 0  # counting attempts that are void, plus cells with none
    aborted: bool = False


# --- backfill (the backfill ledger of a study: caisson study backfill; docs/studies.md) ----


class BackfillStarted(_Event, tag="backfill.started", frozen=True, kw_only=True):
    """First event of a backfill ledger segment: what it was computed from."""

    study_head: str  # hex chain head of the study ledger's last seal when the backfill read it
    previous_run_id: str = ""  # the previous backfill segment's ledger run id ("" for the first)
    previous_records: int = 0  # records covered by its last seal
    previous_head: str = ""  # hex chain head at that seal
    parsers: list[str] = []  # "name@version" of the session-file parsers this backfill ran
    caisson_version: str = ""


class TokenBackfilled(_Event, tag="token.backfilled", frozen=True, kw_only=True):
    """A first-party token figure derived offline from the session files a run collected,
    for a cell or baseline whose live figure was missing or only proxy-observed."""

    target: Literal["cell", "baseline"]
    cell_id: str = ""  # the cell (target cell)
    arm: str = ""  # the baseline's arm, agent and model (target baseline); also set for a cell
    agent: str = ""
    model: str | None = None
    run_id: str  # the run the files come from: a cell's counting attempt or a baseline probe
    run_dir: str  # relative to the study directory
    ledger_head: str  # hex chain head of that run's last seal, as the study ledger binds it
    token_source: str  # e.g. "claude-code session files (messages[].usage)"
    parser: str  # "name@version" of the parser that read the files
    usage: dict[str, Any] | None = None  # the summed usage as the files report it
    normalized: LlmUsage | None = None  # its normalised view: total = input + output (tokens)
    cost_usd: float | None = None  # as the files report it
    blobs: list[str] = []  # sha256 hex of the session-file blobs the figure was derived from
    previous_total: int | None = None  # the figure it stands in for (tokens), None: not measured
    previous_source: str = ""  # that figure's source, or why it was null
# --- the LLM judge (its own ledger beside a study: caisson study judge) ----------------


JudgeVerdictKind = Literal["pass", "fail", "unparseable", "error"]
"""What the judge said of one answer (``judge.verdict.verdict``): its first line read as
``PASS`` or ``FAIL``; ``unparseable`` when it is neither (never guessed); ``error`` when no
reply came (HTTP error, refused, timed out)."""


class JudgeStarted(_Event, tag="judge.started", frozen=True, kw_only=True):
    """First event of a judge ledger: which study state is judged, by which model, how."""

    study: str  # the study's name
    study_run_id: str  # run id of the study ledger's last segment
    study_head: str  # hex chain head of that segment's final seal: the closed study judged
    endpoint: str  # the judge's base URL, as given
    api: str  # anthropic (Messages) | openai (Chat Completions)
    requested_model: str  # the model the judge asks for on every call
    prompt: str  # name@version of the prompt and verdict format (caisson/study/judging.py)
    cells: int = 0  # scored cells to judge


class JudgeVerdict(_Event, tag="judge.verdict", frozen=True, kw_only=True):
    """The judge's reading of one scored cell's stored answer (never a change of its score)."""

    cell_id: str
    question_id: str
    run_id: str  # the cell's counting run, whose answer blob was judged
    request_id: str  # the x-caisson-judge-request header of the judge's call (pairs it with its http.exchange)
    score: float | None = None  # the deterministic checklist score, replayed when judged (0.0-1.0)
    verdict: JudgeVerdictKind
    reply_line: str = ""  # the reply's first non-empty line, at most 200 characters
    answer_sha256: str = ""  # sha256 hex of the answer bytes judged (the cell's answer or stdout blob)
    answer_excerpt: str = ""  # the answer's first 300 characters
    requested_model: str = ""
    served_model: str | None = None  # as the proxy witness's llm.call read it from the response; None: unknown
    error: str | None = None  # why there is no reply (verdict error)


class JudgeAlarm(_Event, tag="judge.alarm", frozen=True, kw_only=True):
    """Something the judge run must announce: an alarm, never a change of score.

    ``disagreement``: the judge's verdict and the deterministic score differ (about the key
    or the matcher); ``model_substituted``: a call was served by another model than requested.
    """

    alarm: str  # disagreement | model_substituted
    cell_id: str | None = None
    question_id: str | None = None
    message: str = ""
    evidence: list[int] = []  # seqs in the judge ledger it rests on (verdicts, llm.call records)


class JudgeEnded(_Event, tag="judge.ended", frozen=True, kw_only=True):
    """The judge run's last event: counts over its verdicts."""

    judged: int = 0  # verdicts written
    passed: int = 0
    failed: int = 0
    unparseable: int = 0
    errors: int = 0
    disagreements: int = 0
    served_models: list[str] = []  # every model the witness saw answer, sorted


class JudgeRecorded(_Event, tag="judge.recorded", frozen=True, kw_only=True):
    """A judge run's ledger (``DIR/judge/NNN/``), announced once closed in a study ledger
    segment of its own: the study ledger, closed before any judge, binds it this way, so
    a judge directory removed afterwards is seen (`caisson verify DIR`)."""

    run_dir: str  # the judge directory, relative to the study directory ("judge/003")
    run_id: str  # its ledger's run id
    ledger_records: int  # records covered by its final seal
    ledger_head: str  # hex chain head at that seal


class BackfillRecorded(_Event, tag="backfill.recorded", frozen=True, kw_only=True):
    """A backfill ledger segment (``DIR/backfill/NNN/``), announced once closed in a study
    ledger segment of its own, as `JudgeRecorded` announces a judge run."""

    run_dir: str  # the backfill segment, relative to the study directory ("backfill/001")
    run_id: str  # its ledger's run id
    ledger_records: int  # records covered by its final seal
    ledger_head: str  # hex chain head at that seal


class HostDrained(_Event, tag="host.drained", frozen=True, kw_only=True):
    """A host of a ray study gets no further sessions (its own ``host_stalled`` cells in a row)."""

    host: str  # "host name/node id"
    reason: str
    cells: list[str] = []  # the cells behind the reason


Event = Union[
    RunStarted,
    RunEnded,
    SandboxBuilt,
    BlobStored,
    Note,
    ChamberReaped,
    ProcessExec,
    ProcessFork,
    ProcessExit,
    FileOpen,
    FileChange,
    NetConnect,
    NetSend,
    ProcessSyscall,
    ProcSample,
    HostSample,
    WitnessStarted,
    WitnessStopped,
    WitnessGap,
    WitnessRaw,
    HttpExchange,
    ProxyTunnel,
    LlmCall,
    DnsQuery,
    NetFlow,
    AgentTools,
    AgentToolCall,
    AgentToolResult,
    AgentAnswer,
    AgentUsage,
    AgentError,
    AgentRetry,
    AgentCompaction,
    AgentModelSwitch,
    AgentSessionFile,
    StudyPlanned,
    StudyResumed,
    BaselineMeasured,
    CellStarted,
    CellEnded,
    StudyAborted,
    StudyEnded,
    BackfillStarted,
    TokenBackfilled,
    JudgeStarted,
    JudgeVerdict,
    JudgeAlarm,
    JudgeEnded,
    HostDrained,
    JudgeRecorded,
    BackfillRecorded,
]
"""The one tagged union of every event kind."""

EVENT_TYPES: tuple[type[_Event], ...] = Event.__args__  # type: ignore[attr-defined]
EVENT_KINDS: frozenset[str] = frozenset(t.__struct_config__.tag for t in EVENT_TYPES)

_decoder = msgspec.msgpack.Decoder(Event)


def decode_event(data: bytes) -> Event:
    """Decode one event from its msgpack bytes.

    Raises:
        msgspec.DecodeError: the bytes are not a valid event (callers wrap it).
    """
    return _decoder.decode(data)


def event_kind(event: _Event) -> str:
    """The dotted kind of an event, e.g. ``"process.exec"``."""
    return event.__struct_config__.tag  # type: ignore[return-value]
