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
  `ToolOutcome`, `ToolSurface`, `TunnelVia`, `Provider`, `LlmEndpoint`, `Gating`, `Elicitation`,
  `NetworkMode`): a value outside one does not decode, and the reader keeps such a record as a
  ``witness.raw`` describing it.
- What caisson records of its own is a nested Struct, never a map read back by key
  (`RunAgent`, `RunLimits`, ...).
- Processes carry both identities: ``pid`` as the chamber saw it and ``host_pid`` as the
  host did (a pid alone is not unique across namespaces).
"""

from __future__ import annotations

from typing import Union

import msgspec

from ledger.events._base import (  # noqa: F401
    RunStatus,
    Category,
    FileAccess,
    ToolOutcome,
    ToolSurface,
    Provider,
    LlmEndpoint,
    Gating,
    Elicitation,
    NetworkMode,
    _Event,
)
from ledger.events._run import (  # noqa: F401
    RunStarted,
    RunLimits,
    HostFacts,
    Caller,
    RunAgent,
    RunArm,
    SeccompFacts,
    SyscallWitnessChoice,
    RunEnded,
    ExcludedPath,
    AgentConfigFound,
    SandboxBuilt,
    BlobStored,
    Note,
    ChamberReaped,
)
from ledger.events._process import (  # noqa: F401
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
)
from ledger.events._witness import (  # noqa: F401
    WitnessStarted,
    WitnessStopped,
    WitnessGap,
    WitnessRaw,
)
from ledger.events._network import (  # noqa: F401
    ClientProcess,
    HttpExchange,
    ProxyTunnel,
    LlmUsage,
    LlmCall,
    DnsQuery,
    NetFlow,
    TunnelVia,
)
from ledger.events._agent import (  # noqa: F401
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
)
from ledger.events._study import (  # noqa: F401
    AbortRules,
    Combo,
    ElicitationSettings,
    Endpoint,
    GraderCheck,
    HostKey,
    PlannedCell,
    Price,
    Refusal,
    StudyPlanned,
    StudyResumed,
    BaselineMeasured,
    CellStarted,
    CellEnded,
    AttemptStatus,
    Effect,
    Finding,
    Verdict,
    VerdictStatus,
    StudyAborted,
    StudyEnded,
    BackfillStarted,
    TokenBackfilled,
)
from ledger.events._judge import (  # noqa: F401
    JudgeStarted,
    JudgeVerdict,
    JudgeAlarm,
    JudgeEnded,
    JudgeRecorded,
    BackfillRecorded,
    HostDrained,
    JudgeVerdictKind,
)

__all__ = [
    "SCHEMA_VERSION",
    "Category",
    "Elicitation",
    "FileAccess",
    "Gating",
    "JudgeVerdictKind",
    "LlmEndpoint",
    "NetworkMode",
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
    "RunLimits",
    "HostFacts",
    "Caller",
    "RunAgent",
    "RunArm",
    "SeccompFacts",
    "SyscallWitnessChoice",
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
    "PlannedCell",
    "Combo",
    "ElicitationSettings",
    "Endpoint",
    "Refusal",
    "Price",
    "AbortRules",
    "GraderCheck",
    "HostKey",
    "StudyResumed",
    "BaselineMeasured",
    "CellStarted",
    "CellEnded",
    "AttemptStatus",
    "Effect",
    "Finding",
    "Verdict",
    "VerdictStatus",
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

SCHEMA_VERSION = 16
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
``client_processes`` and ``client_unresolved`` (which chamber process made the exchange); 15:
``run.started``'s ``agent``, ``arm``, ``limits``, ``host``, ``seccomp``, ``syscall_witness`` and
``caller`` are typed Structs (`RunAgent`, `RunArm`, `RunLimits`, `HostFacts`, `SeccompFacts`,
`SyscallWitnessChoice`, `Caller`; same keys, same values; absent, not an empty map, when there
is none); ``study.planned``'s ``cells``, ``combos``, ``refusals``, ``prices``, ``abort``,
``grader`` and ``host_keys`` are typed Structs (`PlannedCell`, `Combo`, `Refusal`, `Price`,
`AbortRules`, `GraderCheck`, `HostKey`; same keys); 16: ``cell.ended`` carries its attempt's
`Verdict` (status, score, the voiding `Finding`s, the detector versions) and ``reason`` for an
attempt without one, in place of ``score`` and the text ``void_reason`` (both still read from
older ledgers); its ``status`` is a closed vocabulary (`AttemptStatus`)."""

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

_decoder = msgspec.msgpack.Decoder(Event)


def decode_event(data: bytes) -> Event:
    """Decode one event from its msgpack bytes.

    Raises:
        msgspec.DecodeError: the bytes are not a valid event (callers wrap it).
    """
    return _decoder.decode(data)


def event_kind(event: _Event | type[_Event]) -> str:
    """The dotted kind of an event (or event type), e.g. ``"process.exec"``."""
    return str(event.__struct_config__.tag)


EVENT_KINDS: frozenset[str] = frozenset(event_kind(t) for t in EVENT_TYPES)
