"""What the run page shows, read from a run directory (no web framework here).

The page opens on what is cheap for any run size: the ledger's verification (frames,
chain, seals, signatures against the trusted key), ``findings.json`` when
`caisson replay` wrote one, and one page of records. Records are read in order with
`ledger.read_records`, which decodes frame by frame, so a page near the start of a
1,000,000-record ledger costs a few frames, not the whole file. Nothing here writes.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import msgspec

from caisson.replay import FINDINGS_FILE
from ledger import LedgerError, Record, VerifyKey, VerifyReport, read_records, verify_ledger
from ledger.events import (
    AgentAnswer,
    AgentToolCall,
    AgentToolResult,
    AgentUsage,
    BlobStored,
    DnsQuery,
    FileChange,
    FileOpen,
    HostSample,
    HttpExchange,
    LlmCall,
    NetConnect,
    NetFlow,
    ProcessExec,
    ProcessExit,
    ProcSample,
    ProxyTunnel,
    RunAgent,
    RunEnded,
    RunStarted,
    SandboxBuilt,
    WitnessGap,
    event_kind,
)

__all__ = ["PAGE_SIZE", "WITNESSES", "EventRow", "RunView", "open_run", "page", "process_tree"]

PAGE_SIZE = 200  # records per page of the timeline
HEAD_RECORDS = 2000  # records read at open for the run's facts (run.started, sandbox.built come first)
WITNESSES = ("recorder", "strace", "proxy", "dns", "pcap", "procfs", "agent")


class EventRow(msgspec.Struct, frozen=True, kw_only=True):
    """One record as a timeline row."""

    seq: int
    wall_ns: int  # ns since the Unix epoch
    source: str  # the witness
    kind: str
    summary: str  # one line for humans; secrets stay fingerprinted as recorded
    mark: str = ""  # a CSS class: excluded (an excluded path), refused, errored, denied, gap
    detail: str = ""  # the whole event as JSON


class RunView(msgspec.Struct, kw_only=True):
    """The run page's header facts.

    ``status`` is the ledger's verification (ok, tampered, unclosed, unreadable); when
    it is not ``ok`` every row is shown as unverified.
    """

    path: str
    status: str
    verify_lines: list[str]
    report: VerifyReport | None = None
    run_id: str | None = None
    command: list[str] = []
    question_id: str | None = None
    agent: RunAgent | None = None  # the agent under test, None for a plain command
    excluded: list[str] = []  # sandbox paths of the exclusion set, as the chamber sees them
    findings: dict[str, Any] | None = None  # findings.json as `caisson replay` wrote it
    findings_error: str | None = None
    answer: str | None = None  # the agent's answer, when it is among the first records


def _verify_lines(report: VerifyReport) -> list[str]:
    return report.describe().splitlines()


def open_run(run_dir: Path, trusted: VerifyKey) -> RunView:
    """Verify a run's ledger and read its header facts and findings.

    Args:
        run_dir: a run directory (holding ``ledger``).
        trusted: the key the ledger must be signed with.

    Returns:
        The `RunView`; an unreadable ledger gives status ``unreadable`` with the reason.
    """
    try:
        report = verify_ledger(run_dir, trusted)
    except LedgerError as exc:
        return RunView(path=str(run_dir), status="unreadable", verify_lines=[f"UNREADABLE {run_dir}: {exc}"])
    view = RunView(path=str(run_dir), status=report.status, verify_lines=_verify_lines(report), report=report,
                   run_id=report.run_id)
    try:
        for record in itertools.islice(read_records(run_dir), HEAD_RECORDS):
            event = record.event
            if isinstance(event, RunStarted):
                view.command, view.question_id, view.agent = event.command, event.question_id, event.agent
            elif isinstance(event, SandboxBuilt):
                view.excluded = [f"{event.path.rstrip('/')}/{e.path}" for e in event.excluded]
            elif isinstance(event, AgentAnswer):
                view.answer = event.text
    except LedgerError:
        pass  # the verification above already says what is wrong
    findings = run_dir / FINDINGS_FILE
    if findings.is_file():
        try:
            view.findings = msgspec.json.decode(findings.read_bytes())
        except msgspec.DecodeError as exc:
            view.findings_error = f"{findings}: not valid JSON: {exc}"
    return view


def _excluded(path: str, excluded: list[str]) -> bool:
    return any(path == e or path.startswith(e.rstrip("/") + "/") for e in excluded)


def summarize(record: Record, excluded: list[str]) -> tuple[str, str]:
    """(summary line, mark) of one record for the timeline."""
    e = record.event
    if isinstance(e, ProcessExec):
        fail = f" -> {e.errno}" if e.result else ""
        return f"pid {e.pid} (parent {e.ppid}) exec {e.path} {' '.join(e.argv)}{fail}", "errored" if e.result else ""
    if isinstance(e, ProcessExit):
        return f"pid {e.pid} exit {e.code if e.signal is None else e.signal}", ""
    if isinstance(e, FileOpen):
        path = e.real_path or e.path
        mark = "excluded" if _excluded(path, excluded) or _excluded(e.path, excluded) else ""
        tail = f" -> {e.errno}" if e.errno else ""
        return f"pid {e.pid} {e.syscall} {e.path} [{e.access}]{tail}" + (" (EXCLUDED PATH)" if mark else ""), mark
    if isinstance(e, FileChange):
        target = f" -> {e.target}" if e.target else ""
        return f"pid {e.pid} {e.syscall} {e.path}{target}", "excluded" if _excluded(e.path, excluded) else ""
    if isinstance(e, NetConnect):
        return f"pid {e.pid} connect {e.family} {e.address}:{e.port}" + (f" -> {e.errno}" if e.errno else ""), ""
    if isinstance(e, HttpExchange):
        mark = "denied" if e.denied else ("errored" if e.error else "")
        return (f"{e.method} {e.scheme}://{e.host}:{e.port}{e.path} -> {e.status}"
                f" ({e.request_bytes} B sent, {e.response_bytes} B received)"
                + (f" denied by {e.denied}" if e.denied else "") + (f" error {e.error}" if e.error else "")), mark
    if isinstance(e, ProxyTunnel):
        inside = f" carrying {e.protocol}" if e.protocol else ""
        return (f"{'CONNECT' if e.via == 'connect' else 'upgrade'} {e.host}:{e.port}{inside}, {e.exchanges} exchanges,"
                f" {e.client_bytes} B out, {e.server_bytes} B back unread"
                + (f" denied by {e.denied}" if e.denied else "") + (f" error {e.error}" if e.error else "")), (
            "denied" if e.denied else ("errored" if e.error else ""))
    if isinstance(e, LlmCall):
        usage = msgspec.json.encode(e.usage).decode() if e.usage is not None else f"none ({e.usage_missing_reason})"
        return (f"{e.provider} {e.endpoint}: requested {e.requested_model}, served {e.served_model};"
                f" usage as sent {usage}"), ""
    if isinstance(e, DnsQuery):
        return f"{e.qtype} {e.name} -> {e.rcode} {', '.join(e.answers)}" + (" REFUSED" if e.refused else ""), (
            "refused" if e.refused else "")
    if isinstance(e, NetFlow):
        ways = ("" if e.responder_packets is None else f": {e.initiator_packets} packets {e.initiator_bytes} B out,"
                f" {e.responder_packets} packets {e.responder_bytes} B back")
        return f"{e.proto} {e.src}:{e.sport} -> {e.dst}:{e.dport} {e.packets} packets {e.bytes} B{ways}", ""
    if isinstance(e, AgentToolCall):
        return f"{e.agent} calls {e.tool} ({e.call_id}) {msgspec.json.encode(e.input).decode()[:300]}", ""
    if isinstance(e, AgentToolResult):
        mark = {"refused": "refused", "errored": "errored"}.get(e.outcome, "")
        return f"{e.agent} {e.tool or e.call_id}: {e.outcome.upper()} {e.excerpt[:200]}", mark
    if isinstance(e, AgentUsage):
        return f"{e.agent} usage as reported ({e.token_source}): {msgspec.json.encode(e.usage).decode()}", ""
    if isinstance(e, HostSample):
        steal = "n/a" if e.cpu_steal_ratio is None else f"{e.cpu_steal_ratio:.3f}"
        stall = f", stalled {e.stall_ns / 1e6:.0f} ms" if e.stall_ns else ""
        return f"host: timer late {e.timer_lateness_ns / 1e6:.1f} ms{stall}, steal {steal}", ""
    if isinstance(e, ProcSample):
        return f"pid {e.pid} {e.name}: cpu {e.cpu_ns / 1e6:.0f} ms, rss {e.rss_bytes} B", ""
    if isinstance(e, WitnessGap):
        return f"{e.witness} GAP: {e.reason} {e.missing}", "gap"
    if isinstance(e, BlobStored):
        return f"blob {e.role} {e.sha256[:16]}... {e.size_bytes} B", ""
    if isinstance(e, AgentAnswer):
        return f"{e.agent} answers: {e.text[:300]}", ""
    if isinstance(e, RunEnded):
        return f"run ended: {e.status}, exit {e.exit_code}, {e.duration_ns / 1e9:.2f} s {e.reason}", ""
    if isinstance(e, RunStarted):
        return f"run {e.run_id} started: {' '.join(e.command)}", ""
    return "", ""


def _row(record: Record, excluded: list[str]) -> EventRow:
    summary, mark = summarize(record, excluded)
    detail = msgspec.json.encode(record.event).decode()
    return EventRow(seq=record.seq, wall_ns=record.wall_ns, source=record.source, kind=event_kind(record.event),
                    summary=summary or detail[:300], mark=mark, detail=detail)


def page(run_dir: Path, *, start: int = 0, limit: int = PAGE_SIZE, source: str | None = None,
         excluded: list[str] | None = None) -> tuple[list[EventRow], int | None, str | None]:
    """One page of the timeline: up to ``limit`` records from seq ``start`` on.

    Args:
        run_dir: the run directory.
        start: the first sequence number wanted.
        limit: rows per page.
        source: only records of this witness, or all.
        excluded: exclusion-set paths to mark.

    Returns:
        (rows, the seq to start the next page at or None at the end, the reader's error
        when the ledger stops being readable before the page is full).
    """
    rows: list[EventRow] = []
    try:
        for record in read_records(run_dir, start=start):
            if source and record.source != source:
                continue
            if len(rows) == limit:
                return rows, record.seq, None
            rows.append(_row(record, excluded or []))
    except LedgerError as exc:
        return rows, None, str(exc)
    return rows, None, None


def process_tree(run_dir: Path) -> tuple[list[tuple[int, EventRow]], str | None]:
    """The strace witness's process tree: each exec as (depth, row), children under parents.

    Reads the whole ledger (opened on demand, not with the page).
    """
    execs: list[tuple[int, int | None, EventRow]] = []
    error = None
    try:
        for record in read_records(run_dir):
            if isinstance(record.event, ProcessExec):
                execs.append((record.event.pid, record.event.ppid, _row(record, [])))
    except LedgerError as exc:
        error = str(exc)
    children: dict[int | None, list[tuple[int, EventRow]]] = {}
    pids = {pid for pid, _, _ in execs}
    for pid, ppid, row in execs:
        children.setdefault(ppid if ppid in pids and ppid != pid else None, []).append((pid, row))
    out: list[tuple[int, EventRow]] = []
    seen: set[int] = set()

    def walk(parent: int | None, depth: int) -> None:
        for pid, row in children.get(parent, []):
            out.append((depth, row))
            if pid not in seen:
                seen.add(pid)
                walk(pid, depth + 1)

    walk(None, 0)
    return out, error
