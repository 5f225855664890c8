"""Which process made each model call: the agent's CLI, or a program it ran.

The proxy witness records, on each ``http.exchange``, the chamber processes that held the
client end of its connection when it looked (``client_processes``, by pid and host pid),
or why it found none (``client_unresolved``). The syscall witness's ``process.fork`` and
``process.exec`` records give each of those processes its ancestry and its programs.
Together they say whose call it was, from evidence the agent does not control: the
headers an agent sends name a session (``X-Claude-Code-Session-Id``), which a tool that
reads the CLI's config home can forge; the socket that carried the call cannot be.

**The CLI** of an adapter run (``run.started.agent`` names one) is the run's root command
process (the process of the first successful exec, whatever it runs: ``claude``, ``env``
then ``opencode``) and its descendants in which every process below the root ran only the
adapter's own programs (`caisson.agents.Adapter.programs`: a launcher's platform binary,
Codex's and Copilot's; a fork that ran nothing is its parent's). A call whose connection a
descendant held that ran anything else (``bash``, ``curl``, ``python3``) is another
model helping outside the one measured. When several processes held the socket (an
inherited or passed descriptor, or a fork caught before its exec), the one of them that
is an ancestor of all the others opened it and owns the call; holders of which none is
an ancestor of all are the CLI's only when every one is. Where the processes cannot be
placed (no such pid in the syscall witness's records; a pid reused by processes that
disagree) or the proxy found none, the call is unattributed, and said so: never guessed.

`call_owners` is the pure projection; `cli_calls` the filter that ``infra.in_band``,
``model.switched`` and the cell's token figure (`caisson.report.cell_tokens`) apply to
``llm.call`` records (None: the ledger holds no attribution, every call is kept);
`foreign_model_call` the detector.
"""

from __future__ import annotations

import fnmatch
import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Literal

import msgspec

from caisson.detectors._base import INFO, VOID, DetectorConfig, Finding, Fold, FoldFunction, folded, reads
from ledger import Record
from ledger.events import ClientProcess, HttpExchange, LlmCall, ProcessExec, ProcessFork, RunStarted

__all__ = ["foreign_calls", "ATTRIBUTION_EVENTS", "FOREIGN_CALL", "Attribution", "CallOwner", "attributed",
           "call_owners", "cli_calls", "foreign_model_call", "split_owners"]

FOREIGN_CALL = "model.foreign_call@1"
ATTRIBUTION_EVENTS = (RunStarted, ProcessFork, ProcessExec, HttpExchange, LlmCall)
"""The events `call_owners` reads: a reader that filters by them (``reads``) adds these."""
Verdict = Literal["cli", "foreign", "unattributed"]


class CallOwner(msgspec.Struct, frozen=True, kw_only=True):
    """Whose one model call was.

    Attributes:
        verdict: ``cli``, ``foreign`` or ``unattributed``.
        exchange_seq: the seq of its ``http.exchange`` (None: not in the ledger).
        pid: the owning process's chamber pid (None when the proxy found none).
        program: what that process ran (its last exec, or its parent's for a fork that
            ran nothing); for a foreign call made below it, also the first program on
            the way down from the CLI that is not the CLI's.
        evidence: for a foreign call, the seq of that program's exec.
        reason: why it is unattributed ("" otherwise).
    """

    verdict: Verdict
    exchange_seq: int | None = None
    pid: int | None = None
    program: str = ""
    evidence: tuple[int, ...] = ()
    reason: str = ""


class _Process:
    """One process incarnation as the syscall witness reported it."""

    __slots__ = ("pid", "host_pid", "parent", "execs")

    def __init__(self, pid: int, host_pid: int | None, parent: _Process | None):
        self.pid, self.host_pid, self.parent = pid, host_pid, parent
        self.execs: list[tuple[int, str]] = []  # (seq, path) of its successful execs

    def below(self, other: _Process) -> bool:
        """Whether ``other`` is this process or one of its ancestors."""
        node: _Process | None = self
        while node is not None:
            if node is other:
                return True
            node = node.parent
        return False


class Attribution:
    """`call_owners` fed one record at a time: it keeps the syscall witness's process tree
    and the run's exchanges and calls, not the records. A projection that detectors share
    (`attributed`): it reads `READS` only, and `keeps` says which records are its alone."""

    READS = ATTRIBUTION_EVENTS

    def __init__(self) -> None:
        self.agent: str | None = None
        self.source: str | None = None  # the syscall witness whose processes are read: the first exec's
        self.root: _Process | None = None
        self.current: dict[int, _Process] = {}  # chamber pid -> its latest incarnation
        self.incarnations: dict[int, list[_Process]] = {}
        self.exchanges: dict[int, HttpExchange] = {}
        self.last_exchange: dict[str, int] = {}  # source -> seq of its latest http.exchange
        self.calls: list[tuple[int, int | None]] = []  # (llm.call seq, http.exchange seq)
        self.looked = False

    @staticmethod
    def keeps(record: Record) -> bool:
        """Whether ``record`` is a process's (a fork or an exec): the tree keeps all that
        matters of it, a detector over the owners need not hold it."""
        return isinstance(record.event, (ProcessFork, ProcessExec))

    def feed(self, record: Record) -> None:
        """Take one record (the next in ledger order; other kinds than `READS` are ignored)."""
        event = record.event
        if isinstance(event, (ProcessFork, ProcessExec)):
            if isinstance(event, ProcessExec) and event.result != 0:
                return
            if self.source is None:
                if not isinstance(event, ProcessExec):
                    return  # the witness's own forks before the command
                self.source = record.source
            elif record.source != self.source:
                return
            current = self.current
            proc = current.get(event.pid)
            if proc is None or isinstance(event, ProcessFork):
                parent = current.get(event.ppid) if event.ppid is not None else None
                proc = current[event.pid] = _Process(event.pid, event.host_pid, parent)
                self.incarnations.setdefault(event.pid, []).append(proc)
            if proc.host_pid is None:
                proc.host_pid = event.host_pid
            if isinstance(event, ProcessExec):
                proc.execs.append((record.seq, event.path))
                self.root = self.root or proc
        elif isinstance(event, RunStarted):
            self.agent = event.agent.name if event.agent else None
        elif isinstance(event, HttpExchange):
            self.exchanges[record.seq] = event
            self.last_exchange[record.source] = record.seq
            self.looked = self.looked or bool(event.client_processes) or event.client_unresolved is not None
        elif isinstance(event, LlmCall):
            self.calls.append((record.seq, event.exchange_seq if event.exchange_seq is not None
                               else self.last_exchange.pop(record.source, None)))

    def result(self) -> dict[int, CallOwner] | None:
        """`owners` (what a runner that shares the projection hands the detectors over it)."""
        return self.owners()

    def owners(self) -> dict[int, CallOwner] | None:
        """`call_owners` of the records fed."""
        if self.agent is None or self.root is None or not self.looked:
            return None
        from caisson.agents import ADAPTERS  # the adapters' own programs; agents import no detector

        spec = ADAPTERS.get(self.agent)
        tree = _Tree(self.root, self.incarnations, spec.programs if spec is not None else ())
        owners = {}
        for seq, exchange_seq in self.calls:
            exchange = self.exchanges.get(exchange_seq) if exchange_seq is not None else None
            if exchange is None:
                owners[seq] = CallOwner(verdict="unattributed", reason="its http.exchange is not in the ledger")
            elif not exchange.client_processes:
                owners[seq] = CallOwner(verdict="unattributed", exchange_seq=exchange_seq,
                                        reason=exchange.client_unresolved or "the proxy did not look up its client")
            else:
                owners[seq] = msgspec.structs.replace(tree.owner(exchange.client_processes), exchange_seq=exchange_seq)
        return owners


def call_owners(records: Iterable[Record]) -> dict[int, CallOwner] | None:
    """Whose each ``llm.call`` was (see the module docstring).

    Args:
        records: the run's records in ledger order (any that are not `ATTRIBUTION_EVENTS`
            are skipped).

    Returns:
        ``llm.call`` seq -> its owner; None when the ledger holds no attribution: not an
        adapter run, no ``http.exchange`` the proxy looked up, or no exec of the command
        in a syscall witness's records.
    """
    attribution = Attribution()
    for record in records:
        attribution.feed(record)
    return attribution.owners()


def attributed(body: Callable[[list[Record], dict[int, CallOwner] | None, DetectorConfig], Iterable[Finding]]
               ) -> FoldFunction:
    """A detector that reads whose each call was, and a few event types of its own, as a
    fold (a decorator, under `folded`): the processes' records go into the attribution's
    tree; ``body`` is handed the others (its own events, few) and the call owners. A runner
    that streams several such detectors may feed them one `Attribution` (the fold's
    ``projection`` and ``body``: `caisson.detectors.Streamed`)."""

    @functools.wraps(body)
    def fold(config: DetectorConfig, found: list[Finding]) -> Fold:
        attribution = Attribution()
        own: list[Record] = []
        while (record := (yield)) is not None:
            attribution.feed(record)
            if not Attribution.keeps(record):
                own.append(record)
        found.extend(body(own, attribution.owners(), config))

    fold.projection = Attribution  # type: ignore[attr-defined]
    fold.body = body  # type: ignore[attr-defined]
    return fold


def split_owners(owners: dict[int, CallOwner] | None) -> tuple[frozenset[int], frozenset[int]]:
    """`foreign_calls` of the call owners."""
    if owners is None:
        return frozenset(), frozenset()
    return (frozenset(seq for seq, o in owners.items() if o.verdict == "foreign"),
            frozenset(seq for seq, o in owners.items() if o.verdict == "unattributed"))


def cli_calls(records: Iterable[Record]) -> frozenset[int] | None:
    """The seqs of the ``llm.call`` records the agent's CLI made (`call_owners`'s ``cli``),
    or None when the ledger holds no attribution (then every call is the CLI's, as before)."""
    owners = call_owners(records)
    return None if owners is None else frozenset(seq for seq, owner in owners.items() if owner.verdict == "cli")


def foreign_calls(records: Iterable[Record]) -> tuple[frozenset[int], frozenset[int]]:
    """(the seqs of the ``llm.call`` records a process other than the agent's CLI made, those
    the proxy could not attribute): both empty when the ledger holds no attribution. A
    reader that asks whether the CLI reached a model, or which model it used, counts an
    unattributed call as possibly the CLI's (a lookup that lost a race with a closed socket
    must not void an honest run); one that sums a figure cannot (it may be a tool's)."""
    return split_owners(call_owners(records))


class _Tree:
    """The syscall witness's processes, and which of them are the CLI."""

    def __init__(self, root: _Process, incarnations: dict[int, list[_Process]], programs: Sequence[str]):
        self.root, self.incarnations, self.programs = root, incarnations, programs

    def _own(self, path: str) -> bool:
        return any(fnmatch.fnmatchcase(path, pattern) for pattern in self.programs)

    def classify(self, proc: _Process) -> CallOwner:
        """The CLI's (``cli``) or not (``foreign``: ``program`` is what ``proc`` ran, the
        evidence the first exec below the root of a program not the CLI's)."""
        chain = []
        node: _Process | None = proc
        while node is not None and node is not self.root:
            chain.append(node)
            node = node.parent
        if node is None:
            return CallOwner(verdict="unattributed", pid=proc.pid, reason=f"pid {proc.pid} does not descend from"
                             " the command's process in the syscall witness's records")
        ran = proc.execs[-1][1] if proc.execs else _ran(chain, self.root)
        for step in reversed(chain):  # from the CLI down
            other = next(((seq, path) for seq, path in step.execs if not self._own(path)), None)
            if other is not None:
                via = "" if step is proc else f", under {other[1]} (pid {step.pid})"
                return CallOwner(verdict="foreign", pid=proc.pid, program=ran + via, evidence=(other[0],))
        return CallOwner(verdict="cli", pid=proc.pid, program=ran)

    def place(self, held: ClientProcess) -> _Process | CallOwner:
        """The incarnation of a holder, or why it cannot be told."""
        found = [p for p in self.incarnations.get(held.pid, ()) if p.host_pid in (None, held.host_pid)]
        if not found:
            return CallOwner(verdict="unattributed", pid=held.pid,
                             reason=f"the syscall witness reported no process {held.pid} (host pid {held.host_pid})")
        if len(found) > 1 and len({self.classify(p).verdict for p in found}) > 1:
            return CallOwner(verdict="unattributed", pid=held.pid,
                             reason=f"pid {held.pid} was reused by processes of which some are the CLI and some not")
        return found[-1]

    def owner(self, holders: Sequence[ClientProcess]) -> CallOwner:
        placed = [self.place(h) for h in holders]
        procs = [p for p in placed if isinstance(p, _Process)]
        if len(procs) < len(placed):
            if not procs:
                return next(p for p in placed if isinstance(p, CallOwner))
            if all(self.classify(p).verdict == "cli" for p in procs):  # an unknown holder may have made it
                return next(p for p in placed if isinstance(p, CallOwner))
        top = next((p for p in procs if all(q.below(p) for q in procs)), None)
        if top is not None:  # it opened the socket; the others hold it by inheritance
            return self.classify(top)
        verdicts = [self.classify(p) for p in procs]
        return next((v for v in verdicts if v.verdict != "cli"), verdicts[0])


def _ran(chain: list[_Process], root: _Process) -> str:
    """What a process that exec'd nothing runs: its nearest ancestor's last program."""
    for node in [*chain, root]:
        if node.execs:
            return node.execs[-1][1]
    return ""


@reads(*ATTRIBUTION_EVENTS)
@folded
@attributed
def foreign_model_call(records: list[Record], owners: dict[int, CallOwner] | None,
                       config: DetectorConfig) -> Iterator[Finding]:
    """Model calls the agent's CLI did not make, in an adapter run with attribution.

    Yields:
        Per ``llm.call`` a process other than the CLI made, a void ``foreign_model_call``
        (its pid, program and model; evidence: the call, its exchange and the exec that
        made the process not the CLI); per call whose process could not be told, an info
        ``unattributed_model_call`` saying why.
    """
    if owners is None:
        return
    models = {r.seq: r.event.requested_model for r in records if isinstance(r.event, LlmCall)}
    for seq, owner in owners.items():
        evidence = sorted({seq, *(() if owner.exchange_seq is None else (owner.exchange_seq,)), *owner.evidence})
        model = models.get(seq) or "an unnamed model"
        if owner.verdict == "foreign":
            yield Finding(detector=FOREIGN_CALL, kind="foreign_model_call", effect=VOID, evidence=evidence,
                          message=f"a model call to {model} was made by pid {owner.pid} ({owner.program}), not by the"
                          " agent's CLI: a model helped outside the one measured")
        elif owner.verdict == "unattributed":
            yield Finding(detector=FOREIGN_CALL, kind="unattributed_model_call", effect=INFO, evidence=evidence,
                          message=f"a model call to {model} could not be attributed to a process: {owner.reason}")
