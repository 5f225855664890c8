"""One run's session: the ledger writer, the witnesses and the chamber in one nursery.

The writer task starts first and signals readiness; every event, the recorder's own and
the witnesses', goes through one bounded channel. Witnesses have three hooks, called in
this order (each optional but ``start``):

1. ``before_start(ctx)``: tasks that must run before the chamber (the proxy, the DNS
   resolver, the packet capture listen on the chamber network's gateway);
2. ``prepare(spec, ctx) -> spec``: adjust the container (wrap the command, set the proxy);
3. ``start(ctx)``: once the chamber runs (``ctx.started`` holds its id and host pid).

When the command ends, ``ctx.stop`` is set: samplers stop, stream readers drain to EOF,
and each witness closes its channel clone. Only then are the transcript's events, the
agent's session files from its config home (`caisson.run.sessionfiles`), the artifacts
and ``run.ended`` written. Whatever happens, the ledger is closed with a final seal, and the network and
container are removed.
"""

from __future__ import annotations

import signal as _signal
from pathlib import Path
from typing import Any, Protocol

import msgspec
import trio

from caisson.chamber import LOG_CAP_BYTES, ChamberNetwork, ContainerResult, ContainerSpec, ContainerStarted, Engine
from caisson.chamber import ETC_FILES, guard_bridge, mountinfo_seen, unguard_bridge
from caisson._paths import SANDBOX_PATH
from caisson.errors import ChamberError
from caisson.chamber import Sandbox
from caisson.run.sessionfiles import collect_session_files
from caisson.run.stream import MonitorAddress
from caisson.scenario import Scenario
from ledger import LedgerWriter, Submission, drain, run_writer
from ledger.events import (AgentAnswer, BlobStored, ChamberReaped, Note, RunEnded,
                           RunStarted, RunStatus, SandboxBuilt, WitnessGap)

__all__ = ["EXIT_INFRA", "EXIT_INTERRUPTED", "EXIT_TIMEOUT", "PreparedRun", "RunOutcome", "Witness",
           "WitnessContext", "run_session", "WITNESS_GRACE_S"]

EXIT_TIMEOUT = 124
EXIT_INFRA = 125  # the chamber failed, as `docker run` reports its own errors
EXIT_INTERRUPTED = 130
WITNESS_GRACE_S = 12.0
"""How long witnesses may take to drain after the command ended before they are cancelled.
The eBPF witness's stop is the longest: each of its ~100 tracepoints waits an RCU grace
period to detach (perf_trace_event_unreg), and bpftrace 0.17 detaches them one by one
before it prints its last lines: 7.7 s at load 5 on 2 cores (the libbpf loader, which
detaches them concurrently after its output has ended, 4 s)."""


class RunOutcome(msgspec.Struct, kw_only=True):
    """What happened: the run directory and the status line of the CLI."""

    run_id: str
    run_dir: Path
    status: RunStatus
    exit_code: int  # the CLI's exit status: the command's, 124 timeout, 125 infra, 130 Ctrl-C
    command_exit: int | None = None
    signal: int | None = None  # a signal caisson sent (the deadline's SIGKILL), never inferred from 128+N
    duration_ns: int = 0  # how long the command ran, ns (run.ended's duration_ns)
    reason: str = ""


class WitnessContext(msgspec.Struct, kw_only=True):
    """What a witness gets from the session.

    Attributes:
        send: this witness's clone of the ledger channel; it closes it when done.
        stop: set when the command has ended.
        nursery: where the witness starts its long-running tasks.
        run_dir: the run directory. scratch: a private temp dir, removed after the run.
        blobs: the run's blob store (e.g. for a pcap or HTTP bodies).
        network: the chamber's witnessed network, or None when it has no network.
        scenario: the run's scenario (egress policy, user). fingerprint_key: for secrets.
        started: the container's id and host pid, from ``start`` on.
        end_status: how the chamber ended, set before ``stop``: completed | timeout |
            interrupted | infra_failure (a tracer killed by a deadline is not a gap).
        facts: what a witness tells the others (e.g. the proxy's address), by name.
    """

    send: trio.MemorySendChannel[Submission]
    stop: trio.Event
    nursery: trio.Nursery
    run_dir: Path
    scratch: Path
    blobs: Any
    network: ChamberNetwork | None
    scenario: Scenario
    fingerprint_key: bytes
    facts: dict[str, Any]
    started: ContainerStarted | None = None
    end_status: RunStatus | None = None


class Witness(Protocol):
    """A witness as the session drives it (see `caisson.run.witnesses`)."""

    name: str
    needs_network: bool

    async def before_start(self, ctx: WitnessContext) -> None:
        """Start what must run before the chamber (may be a no-op)."""

    def prepare(self, spec: ContainerSpec, ctx: WitnessContext) -> ContainerSpec:
        """Adjust the container before it starts (wrap the command, set variables)."""

    async def start(self, ctx: WitnessContext) -> None:
        """Start the witness's tasks in ``ctx.nursery`` once the chamber runs."""


class PreparedRun(msgspec.Struct, kw_only=True):
    """Everything `run_session` needs, prepared (and checked) by `caisson.run.record`.

    Live handles (the engine, the writer) and paths, never persisted; not a study's session
    (`caisson.study._dispatch.StudySession`, which names a run to record)."""

    engine: Engine
    writer: LedgerWriter
    spec: ContainerSpec
    manifest: RunStarted
    sandbox: Sandbox | None
    sandbox_dir: Path
    scenario: Scenario
    scenario_bytes: bytes | None
    run_dir: Path
    scratch: Path
    witnesses: list
    monitor: MonitorAddress | None  # parsed by the plan, so a bad address never reaches a run
    fingerprint_key: bytes
    network: bool = False  # weakened: a network with a route out and no firewall
    transcript: Any = None  # the agent adapter's transcript parser factory, or None
    labels: dict[str, str] = {}  # the recorder's identity, on the run's network too (for reaping)
    reaped: list = []  # orphans of other runs reaped before this one (caisson.chamber._reap.Reaped)
    config_home: Path | None = None  # the agent's config home on the host: its session files are collected


async def run_session(s: PreparedRun) -> RunOutcome:
    """Run the chamber with the writer and witnesses in one nursery; always seal."""
    manifest, writer = s.manifest, s.writer
    outcome = RunOutcome(run_id=manifest.run_id, run_dir=s.run_dir, status="interrupted", exit_code=EXIT_INTERRUPTED)
    ended = False
    send, receive = trio.open_memory_channel[Submission](4096)
    sink = None
    network: ChamberNetwork | None = None
    try:
        if any(getattr(w, "needs_network", False) for w in s.witnesses):
            network = await s.engine.create_network(manifest.run_id, internal=not s.network, labels=s.labels)
        async with trio.open_nursery() as nursery:
            await nursery.start(run_writer, writer, receive.clone())
            if s.monitor is not None:
                from caisson.run.stream import MonitorSink

                sink = MonitorSink(s.monitor)
                writer.add_listener(sink.offer)
                writer.add_seal_listener(sink.offer_head)
                await nursery.start(sink.run)
            async with send:
                await _lifecycle_start(s, send)
                outcome, end = await _chamber(s, send, network)
                await send.send(Submission(source="recorder", event=end))
                ended = True
            if sink is not None:
                await sink.aclose()
    finally:
        try:
            try:
                _drain(receive, writer)
                if not ended:
                    writer.append(RunEnded(status="interrupted", reason="interrupted (Ctrl-C, SIGTERM or cancellation)"),
                                  source="recorder")
            finally:
                writer.close()
        finally:
            if network is not None:
                with trio.CancelScope(shield=True), trio.move_on_after(30):
                    await s.engine.remove_network(network)
    return outcome


async def _lifecycle_start(s: PreparedRun, send: trio.MemorySendChannel[Submission]) -> None:
    await send.send(Submission(source="recorder", event=s.manifest))
    if s.spec.seccomp is not None:  # the chamber's filter, so the ledger's digest can be checked offline
        assert s.writer.blobs is not None
        data = s.spec.seccomp.encode()
        digest = s.writer.blobs.put(data)
        await send.send(Submission(source="recorder", event=BlobStored(
            sha256=digest, size_bytes=len(data), role="seccomp", media_type="application/json")))
    for r in s.reaped:
        await send.send(Submission(source="recorder", event=ChamberReaped(
            target=r.kind, name=r.name, object_id=r.id, run_id=r.run_id, reason=r.reason, state=r.state,
            removed=r.removed, error=r.error)))
    if s.scenario_bytes is not None:  # replay grades and configures detectors from it
        assert s.writer.blobs is not None
        digest = s.writer.blobs.put(s.scenario_bytes)
        await send.send(Submission(source="recorder", event=BlobStored(
            sha256=digest, size_bytes=len(s.scenario_bytes), role="scenario", media_type="application/toml")))
    if s.sandbox is not None:
        sb = s.sandbox
        await send.send(Submission(source="recorder", event=SandboxBuilt(
            path=SANDBOX_PATH, commit=sb.commit, tree_digest=sb.tree_digest, file_count=sb.file_count,
            excluded=list(sb.excluded), unscanned=list(sb.unscanned), agent_config=list(sb.agent_config))))


async def _chamber(s: PreparedRun, send: trio.MemorySendChannel[Submission],
                   network: ChamberNetwork | None) -> tuple[RunOutcome, RunEnded]:
    """Start the witnesses, run the container, stop the witnesses; the outcome and run.ended."""
    stop = trio.Event()
    contexts: list[WitnessContext] = []
    facts: dict[str, Any] = {}
    spec = s.spec
    guard: list[list[str]] = []
    if network is not None:
        spec = msgspec.structs.replace(spec, network_mode=network.name, dns=[network.gateway])
    async with trio.open_nursery() as witness_nursery:
        for witness in s.witnesses:
            guarded = _GuardedNursery(witness_nursery, witness.name, send)
            contexts.append(WitnessContext(send=send.clone(), stop=stop, nursery=guarded, run_dir=s.run_dir,
                                           scratch=s.scratch, blobs=s.writer.blobs, network=network,
                                           scenario=s.scenario, fingerprint_key=s.fingerprint_key, facts=facts))
        alive = [True] * len(s.witnesses)

        async def before(i: int) -> None:
            hook = getattr(s.witnesses[i], "before_start", None)
            if hook is not None and not await _guard(send, s.witnesses[i].name, hook(contexts[i])):
                alive[i] = False

        async with trio.open_nursery() as starting:  # the network witnesses start side by side
            for i in range(len(s.witnesses)):
                starting.start_soon(before, i)
        for i, (witness, ctx) in enumerate(zip(s.witnesses, contexts)):
            if alive[i]:
                try:
                    spec = witness.prepare(spec, ctx)
                except Exception as exc:  # a witness that cannot prepare is a gap, not a dead run
                    alive[i] = False
                    await _gap(send, witness.name, f"prepare failed: {exc!r}")
        result: ContainerResult | ChamberError | None = None
        if network is not None and not s.network:  # weakened: the host's services stay reachable
            ports = [p for w, ok in zip(s.witnesses, alive) if ok for p in getattr(w, "listen_ports", ())]
            try:
                guard = await trio.to_thread.run_sync(guard_bridge, network.bridge, network.gateway, ports)
            except ChamberError as exc:
                result = exc

        async def on_start(started: ContainerStarted) -> None:
            await _record_view(s, send, spec, started)
            for i, (witness, ctx) in enumerate(zip(s.witnesses, contexts)):
                ctx.started = started
                if alive[i]:
                    await _guard(send, witness.name, witness.start(ctx))

        end_status = "infra_failure"
        try:
            if result is None:
                end_status = "interrupted"
                result = await s.engine.run(spec, on_start=on_start)
                end_status = "infra_failure" if result.error else "timeout" if result.timed_out else "completed"
        except ChamberError as exc:
            result, end_status = exc, "infra_failure"
        finally:
            for ctx in contexts:
                ctx.end_status = end_status
            stop.set()
            if guard:
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(unguard_bridge, guard)
        witness_nursery.cancel_scope.deadline = trio.current_time() + WITNESS_GRACE_S
    for ctx in contexts:  # a witness that never started never closed its channel clone
        ctx.send.close()
    run_id = s.manifest.run_id
    if isinstance(result, ChamberError):
        return (RunOutcome(run_id=run_id, run_dir=s.run_dir, status="infra_failure", exit_code=EXIT_INFRA,
                           reason=str(result)),
                RunEnded(status="infra_failure", reason=str(result)))
    answer_text = None
    if s.transcript is not None:  # the agent's own account, from its stdout
        parser = s.transcript()
        parser.feed(result.stdout)
        parser.close()
        for event in drain(parser):
            if isinstance(event, AgentAnswer):
                answer_text = event.text
            await send.send(Submission(source="transcript", event=event))
    if s.config_home is not None:  # the agent's own session files, while the scratch space still exists
        assert s.writer.blobs is not None
        for event in await trio.to_thread.run_sync(collect_session_files, s.config_home, s.writer.blobs):
            await send.send(Submission(source="recorder", event=event))
    for event in _artifacts(s.writer, result, s.sandbox_dir, s.scenario, answer_text):
        await send.send(Submission(source="recorder", event=event))
    end, outcome = _ended(result, run_id, s.run_dir)
    return outcome, end


async def _record_view(s: PreparedRun, send: trio.MemorySendChannel[Submission], spec: ContainerSpec,
                       started: ContainerStarted) -> None:
    """What the chamber sees of the host, kept as blobs for a reviewer: its mount table
    (``chamber.mountinfo``: `caisson.chamber.mountinfo_seen` of its pid 1, right after the
    start) and the /etc files it was given (``chamber.etc.<name>``, `ContainerSpec.etc_dir`).
    A mount table that cannot be read (the chamber already gone), or only as the host sees
    it, is also a ``run.note``."""
    assert s.writer.blobs is not None
    found: list[tuple[str, bytes]] = []
    try:
        mountinfo, own_view = await trio.to_thread.run_sync(mountinfo_seen, started.host_pid)
        found.append(("chamber.mountinfo", mountinfo))
        if not own_view:
            await send.send(Submission(source="recorder", event=Note(
                text="chamber.mountinfo read as the host sees it: its cgroup mounts' roots are the host's paths")))
    except OSError as exc:
        await send.send(Submission(source="recorder", event=Note(text=f"chamber.mountinfo not kept: {exc}")))
    for name in ETC_FILES if spec.etc_dir else ():
        found.append((f"chamber.etc.{name}", (Path(spec.etc_dir) / name).read_bytes()))
    for role, data in found:
        await send.send(Submission(source="recorder", event=BlobStored(
            sha256=s.writer.blobs.put(data), size_bytes=len(data), role=role, media_type="text/plain")))


async def _gap(send: trio.MemorySendChannel[Submission], name: str, reason: str) -> None:
    await send.send(Submission(source=name, event=WitnessGap(witness=name, reason=reason, missing="its evidence")))


async def _guard(send: trio.MemorySendChannel[Submission], name: str, hook) -> bool:
    """Await a witness hook; an exception becomes a ``witness.gap`` (the cell is void, the
    run goes on and seals). Returns whether the hook succeeded."""
    try:
        await hook
    except Exception as exc:
        await _gap(send, name, f"failed: {exc!r}")
        return False
    return True


class _GuardedNursery:
    """The witness nursery as one witness sees it: a task that raises is recorded as that
    witness's gap instead of cancelling the chamber."""

    def __init__(self, nursery: trio.Nursery, name: str, send: trio.MemorySendChannel[Submission]):
        self._nursery, self._name, self._send = nursery, name, send

    def start_soon(self, fn, *args) -> None:
        self._nursery.start_soon(self._run, fn, args)

    async def start(self, fn, *args):
        return await self._nursery.start(self._run_started, fn, args)

    async def _run(self, fn, args) -> None:
        await _guard(self._send, self._name, fn(*args))

    async def _run_started(self, fn, args, task_status=trio.TASK_STATUS_IGNORED) -> None:
        await _guard(self._send, self._name, fn(*args, task_status=task_status))


def _drain(receive: trio.MemoryReceiveChannel[Submission], writer: LedgerWriter) -> None:
    """Append whatever is still buffered in the channel (after a cancellation)."""
    while True:
        try:
            item = receive.receive_nowait()
        except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
            return
        writer.append(item.event, source=item.source, wall_ns=item.wall_ns, mono_ns=item.mono_ns)


def _artifacts(writer: LedgerWriter, result: ContainerResult, sandbox_dir: Path, scenario: Scenario,
               answer_text: str | None = None):
    """Store stdout, stderr and the answer (the answer file, else the agent's final answer in
    its transcript) as blobs; yield their ``blob.stored`` events."""
    assert writer.blobs is not None
    found = [("stdout", result.stdout), ("stderr", result.stderr)]
    answer = sandbox_dir / scenario.answer_file if scenario.answer_file else None
    if answer is not None and not answer.resolve().is_relative_to(sandbox_dir.resolve()):
        answer = None  # the agent linked it (or a parent) outside its tree: the host does not follow
    if answer is not None and answer.is_file() and not answer.is_symlink():
        found.append(("answer", answer.read_bytes()))
    elif answer_text is not None:
        found.append(("answer", answer_text.encode()))
    for role, data in found:
        digest = writer.blobs.put(data)
        yield BlobStored(sha256=digest, size_bytes=len(data), role=role, media_type="text/plain")


def _ended(result: ContainerResult, run_id: str, run_dir: Path) -> tuple[RunEnded, RunOutcome]:
    wall = result.ended_ns - result.started_ns
    signame = None
    if result.signal:
        try:
            signame = _signal.Signals(result.signal).name
        except ValueError:
            signame = f"SIG{result.signal}"
    if result.error:
        status, code = "infra_failure", EXIT_INFRA
    elif result.timed_out:
        status, code = "timeout", EXIT_TIMEOUT
    else:
        status, code = "completed", result.exit_code if result.exit_code is not None else EXIT_INFRA
    reason = result.error or ("wall deadline reached; the chamber was killed" if result.timed_out else "")
    if result.oom_killed:  # a process of the chamber, maybe not the command itself (see process.exit)
        reason = (reason + "; " if reason else "") + "the kernel's OOM killer killed a process of the chamber"
    if result.cleanup_error:  # after the end: no verdict about the run
        reason = (reason + "; " if reason else "") + result.cleanup_error + " (it is reaped later)"
    if result.output_truncated:
        reason = (reason + "; " if reason else "") + (
            f"stdout and stderr reached the engine's log cap ({LOG_CAP_BYTES // 2**20} MiB): the oldest may be lost")
    end = RunEnded(exit_code=result.exit_code if not result.timed_out else None, signal=signame, duration_ns=wall,
                   timed_out=result.timed_out, status=status, reason=reason, oom_killed=result.oom_killed)
    return end, RunOutcome(run_id=run_id, run_dir=run_dir, status=status, exit_code=code,
                           command_exit=result.exit_code, signal=result.signal, duration_ns=wall, reason=reason)
