"""Re-derive a run's LLM usage and agent events from its raw evidence, with today's parsers.

The events a run wrote live (``llm.call``, the transcript's ``agent.*``) are derived from
raw bytes the run also kept as blobs: the proxy's request and response bodies, and the
agent's stdout. A parser or usage-rule fix must reach old runs, so replay does not trust
the derived fields written live: it rebuilds them from those blobs with the current code,
and the detectors and tables read the rebuilt events. The ledger is never written; what
changed, and with which parser and rule versions, goes to ``findings.json``.

What is rebuilt, and what is kept as written live (with the reason, in `Rederived`):

- Each ``llm.call`` is rebuilt from its ``http.exchange`` and body blobs
  (`collectors.proxy.rederive_llm_call`); kept live when a body blob is truncated or
  missing. It keeps the live record's seq, times and source.
- The transcript events (records whose source is ``transcript``) are rebuilt by the run's
  adapter parser from the ``stdout`` blob, told the agent version the run recorded
  (``run.started.agent.version``; for runs from before it was recorded, the version the
  agent image pins); kept live when the run names no known adapter or kept no stdout.
  Rebuilt events carry the seq of the stdout ``blob.stored`` record: that blob is their
  evidence.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from operator import attrgetter
from typing import Any

import msgspec

from caisson.agents import ADAPTERS
from collectors.llm import USAGE_RULES_VERSION
from collectors.proxy import rederive_llm_call
from ledger import Record, drain
from ledger.events import (
    AgentAnswer, AgentCompaction, AgentError, AgentModelSwitch, AgentRetry, AgentToolResult, AgentUsage, BlobStored,
    HttpExchange, LlmCall, LlmUsage, RunStarted,
)

__all__ = ["Hints", "Rebuild", "Rederived", "rederive", "rederive_kinds"]

TRANSCRIPT_SOURCE = "transcript"
_EVENT = attrgetter("event")
FIGURES = ("input_tokens", "output_tokens", "total_tokens", "cache_read_tokens", "cache_write_tokens",
           "reasoning_tokens")


class Rederived(msgspec.Struct, kw_only=True):
    """What replay rebuilt from raw evidence, as written to ``findings.json``.

    Attributes:
        versions: the parser and rule versions that rebuilt them (``name@version``).
        llm_calls: ``llm.call`` events rebuilt from body blobs.
        transcript: the adapter whose parser re-read the stdout blob, or None.
        kept_live: derived events kept as written live, one line each with why.
        changed: every figure or outcome the rebuild changed: ``seq N kind: what old -> new``.
        usage: the rebuilt ``llm.call`` and ``agent.usage`` events (the figures to report).
    """

    versions: dict[str, str] = {}
    llm_calls: int = 0
    transcript: str | None = None
    kept_live: list[str] = []
    changed: list[str] = []
    usage: list[LlmCall | AgentUsage] = []


def _fmt(value: Any) -> str:
    return "null" if value is None else str(value)


def _usage_changes(where: str, old: LlmUsage | None, new: LlmUsage | None,
                   old_reason: str | None, new_reason: str | None) -> list[str]:
    out = []
    for figure in FIGURES:
        a = getattr(old, figure) if old is not None else None
        b = getattr(new, figure) if new is not None else None
        if a != b:
            out.append(f"{where}: {figure} {_fmt(a)} -> {_fmt(b)}")
    if old_reason != new_reason:
        out.append(f"{where}: usage missing reason {_fmt(old_reason)} -> {_fmt(new_reason)}")
    return out


class Hints(msgspec.Struct, kw_only=True):
    """What a whole run tells its rebuild that a prefix may not: every blob's role (by
    sha256) and the adapter the run names (its manifest's, else its transcript events')."""

    roles: dict[str, str] = {}
    adapter: tuple[str | None, str | None] = (None, None)  # (adapter name, agent version)


class Rebuild:
    """The rebuild of one run's records, streamed: `records` yields them with the rebuilt
    events in place of the live ones, holding back only what a decision still waits for
    (the live transcript events until the ``stdout`` blob is seen; the records after that
    blob until the first live transcript event, when none came before it).

    The run's records are read once, in order: a blob's role is known once its
    ``blob.stored`` passed, the adapter once the manifest did. For a run where a later
    record would have changed a decision (a body blob stored after its exchange, an adapter
    named after the stdout blob), `exact` is False at the end, and `hints` holds what the
    whole run says: rebuild again with them (`rederive` does).

    Args:
        blob: sha256 hex -> the blob's bytes, or None when absent (pure but for it).
        hints: what a previous read of the whole run found (`hints`), or None.
    """

    def __init__(self, blob: Callable[[str], bytes | None], hints: Hints | None = None):
        self._blob = blob
        self._given = hints
        self.hints = Hints()
        self.out = Rederived(versions={"llm": USAGE_RULES_VERSION})
        self.exact = True
        self._used: tuple[str | None, str | None] | None = None  # the adapter the transcript decision used
        self._looked: dict[str, str] = {}  # body blob -> the role it was read with
        self._sourced = False  # a record came from the transcript
        self._manifest_adapter = False  # the adapter is the manifest's (final: the first one counts)

    def _learn(self, record: Record) -> None:
        event = record.event
        if isinstance(event, BlobStored):
            self.hints.roles[event.sha256] = event.role
        elif isinstance(event, RunStarted):
            agent = event.agent
            if agent is not None and agent.name in ADAPTERS and not self._manifest_adapter:
                self.hints.adapter, self._manifest_adapter = (agent.name, agent.version), True
        if record.source == TRANSCRIPT_SOURCE:
            self._sourced = True
        if record.source == TRANSCRIPT_SOURCE and self.hints.adapter[0] is None:
            name = getattr(event, "agent", None)
            if isinstance(name, str) and name in ADAPTERS:
                self.hints.adapter = (name, None)

    def _body(self, sha: str | None) -> tuple[bytes, str] | None:
        data = self._blob(sha) if sha is not None else None
        if data is None or sha is None:
            return None
        roles = self._given.roles if self._given is not None else self.hints.roles
        role = self._looked[sha] = roles.get(sha, "")
        return data, role

    def _transcript(self, stdout: Record | None) -> list[Record] | None:
        """The transcript rebuilt from the stdout blob, or None (then kept live)."""
        name, version = self._given.adapter if self._given is not None else self.hints.adapter
        self._used = (name, version)
        if name is None or stdout is None or (data := self._blob(stdout.event.sha256)) is None:
            return None
        out = self.out
        factory = ADAPTERS[name].transcript  # the version the run recorded; else the image's pinned one
        parser = factory(version=version) if version else factory()  # type: ignore[misc]
        parser.feed(data)
        parser.close()
        out.transcript = name
        out.versions[name] = getattr(parser, "PARSER", "")
        out.versions["agent"] = f"{name} {getattr(parser, 'version', None) or 'unknown'}"
        return [Record(seq=stdout.seq, wall_ns=stdout.wall_ns, mono_ns=stdout.mono_ns, source=TRANSCRIPT_SOURCE,
                       event=e) for e in drain(parser)]

    def records(self, records: Iterable[Record]) -> Iterator[Record]:
        """The run's records, rebuilt, in order (iterate once, to the end)."""
        out = self.out
        pending: list[tuple[Record, LlmCall | None, str | None]] = []  # the last model-call exchange, unanswered
        decided = False  # whether the transcript decision was made (at the first stdout blob)
        stdout: Record | None = None
        transcript: list[Record] | None = None
        live: list[Record] = []  # the live transcript records
        held: list[tuple[bool, Record]] | None = None  # (live transcript record?, record), while undecided
        after: list[Record] | None = None  # records after the stdout blob, before any live transcript one
        placed = False  # the rebuilt transcript was emitted
        plain: dict[type, bool] = {}  # event class -> whether the rebuild passes it through (unless transcribed)
        for record in records:
            event = record.event
            kind = event.__class__
            through = plain.get(kind)
            if through is None:
                through = plain[kind] = not issubclass(kind, (BlobStored, RunStarted, HttpExchange, LlmCall))
            if through and held is None and after is None and record.source != TRANSCRIPT_SOURCE:
                yield record  # most records: one test of the class (isinstance's misses on Structs are slow)
                continue
            self._learn(record)
            made: list[Record] = []  # what this record becomes, in order
            is_live = False
            if isinstance(event, HttpExchange):
                made += self._orphan(pending)
                call, why = rederive_llm_call(event, self._body(event.request_body_sha256),
                                              self._body(event.response_body_sha256))
                if call is not None or why is not None:
                    pending.append((record, call, why))
                made.append(record)
            elif isinstance(event, LlmCall):
                made.append(_replace_call(record, event, pending, out))
            elif record.source == TRANSCRIPT_SOURCE:
                is_live = True
            else:
                made.append(record)
            if is_live and decided and transcript is None:
                made.append(record)  # kept live
                is_live = False
            if is_live:
                live.append(record)
                if not decided:
                    held = held if held is not None else []
                    held.append((True, record))
                    continue
                if not placed:  # the rebuilt events take the first live one's place
                    placed = True
                    yield from after or ()  # the records between the stdout blob and this one
                    after = None
                    yield from transcript or ()
                continue
            if held is not None and not decided:
                held += [(False, r) for r in made]
                made = []
            elif after is not None:
                after += made
                made = []
            yield from made
            if not decided and isinstance(event, BlobStored) and event.role == "stdout":
                decided, stdout = True, record
                transcript = self._transcript(record)
                backlog, held = held or [], None
                for was_live, r in backlog:
                    if was_live and transcript is not None:
                        if not placed:
                            placed = True
                            yield from transcript
                    else:
                        yield r
                if transcript is not None and not placed:
                    after = []  # the stdout blob was emitted; rebuilt events go after it, or at a live one
        if not decided:
            transcript = self._transcript(None)
            for _, r in held or ():
                yield r
        tail = self._orphan(pending)
        if transcript is not None and not placed:  # the live run parsed nothing: after the stdout blob
            yield from transcript
        yield from after or ()
        yield from tail
        if transcript is None and self._sourced:
            name = self._used[0] if self._used else None
            out.kept_live.insert(0, "transcript events: " + ("no known adapter named by the run" if name is None
                                                              else "no stdout blob to re-read"))
        if transcript is not None:
            assert stdout is not None
            out.changed += _transcript_changes([r.event for r in live], [r.event for r in transcript], stdout.seq,
                                               out.versions[out.transcript or ""])
            out.usage += [r.event for r in transcript if isinstance(r.event, AgentUsage)]
        if self._given is None:
            roles = self.hints.roles
            self.exact = self._used == self.hints.adapter and all(
                roles.get(sha, "") == role for sha, role in self._looked.items())

    def _orphan(self, pending: list) -> list[Record]:
        """A model-call exchange whose live ``llm.call`` never came: the rebuilt call (it
        carries the exchange's seq, its evidence), or nothing."""
        if not pending:
            return []
        exchange, call, why = pending.pop()
        if call is None:
            self.out.kept_live.append(f"seq {exchange.seq} http.exchange: no llm.call live, none rebuilt: {why}")
            return []
        self.out.llm_calls += 1
        self.out.usage.append(call)
        self.out.changed.append(f"seq {exchange.seq} http.exchange: llm.call rebuilt where none was written live")
        return [msgspec.structs.replace(exchange, event=call)]


def rederive(records: Sequence[Record], blob: Callable[[str], bytes | None]) -> tuple[list[Record], Rederived]:
    """Rebuild a run's derived LLM and agent events from its blobs (pure but for ``blob``).

    Args:
        records: the run's verified records, in order.
        blob: sha256 hex -> the blob's bytes, or None when absent.

    Returns:
        The records with rebuilt events in place of the live ones, and what was done.
    """
    rebuild = Rebuild(blob)
    result = list(rebuild.records(records))
    if not rebuild.exact:
        rebuild = Rebuild(blob, rebuild.hints)
        result = list(rebuild.records(records))
    return result, rebuild.out


def rederive_kinds(records: Sequence[Record], blob: Callable[[str], bytes | None]
                   ) -> tuple[list[Record], list[type], Rederived]:
    """`rederive`, and the class of each returned record's event (in the same order)."""
    result, out = rederive(records, blob)
    return result, list(map(type, map(_EVENT, result))), out


def _replace_call(record: Record, live: LlmCall, pending: list, out: Rederived) -> Record:
    """The live call of the last model-call exchange (the proxy writes it right after)."""
    if not pending:
        out.kept_live.append(f"seq {record.seq} llm.call: no http.exchange before it")
        out.usage.append(live)
        return record
    _, call, why = pending.pop()
    if call is None:
        out.kept_live.append(f"seq {record.seq} llm.call: {why}")
        out.usage.append(live)
        return record
    out.llm_calls += 1
    out.usage.append(call)
    out.changed += _usage_changes(f"seq {record.seq} llm.call", live.normalized, call.normalized,
                                  live.usage_missing_reason, call.usage_missing_reason)
    return msgspec.structs.replace(record, event=call)


def _said(error: AgentError) -> str:
    status = f" status {error.status}" if error.status is not None else ""
    return f"{error.said}{f' {error.code}' if error.code else ''}{status}{' (terminal)' if error.terminal else ''}"


def _short(text: str | None) -> str:
    return "null" if text is None else repr(text if len(text) <= 80 else text[:77] + "...")


def _transcript_changes(live: list, rebuilt: list, seq: int, parser: str) -> list[str]:
    """What the rebuilt transcript events change, one line each; the first names the parser
    that read them and the one that read them live (``agent.usage.parser``)."""
    where = f"seq {seq} stdout"
    out: list[str] = []
    old = next((e for e in live if isinstance(e, AgentUsage)), None)
    new = next((e for e in rebuilt if isinstance(e, AgentUsage)), None)
    out += _usage_changes(f"{where} agent.usage", old.normalized if old else None, new.normalized if new else None,
                          old.usage_missing_reason if old else None, new.usage_missing_reason if new else None)
    if (old.incomplete if old else None) != (new.incomplete if new else None):
        out.append(f"{where} agent.usage: incomplete {_fmt(old.incomplete if old else None)}"
                   f" -> {_fmt(new.incomplete if new else None)}")
    if (old.cost_usd if old else None) != (new.cost_usd if new else None):
        out.append(f"{where} agent.usage: cost_usd {_fmt(old.cost_usd if old else None)}"
                   f" -> {_fmt(new.cost_usd if new else None)}")
    if (old.cost_missing_reason if old else None) != (new.cost_missing_reason if new else None):
        out.append(f"{where} agent.usage: cost missing reason {_fmt(old.cost_missing_reason if old else None)}"
                   f" -> {_fmt(new.cost_missing_reason if new else None)}")
    answer = [(e.text for e in events if isinstance(e, AgentAnswer)) for events in (live, rebuilt)]
    before_answer, after_answer = (next(texts, None) for texts in answer)
    if before_answer != after_answer:
        out.append(f"{where} agent.answer: {_short(before_answer)} -> {_short(after_answer)}")
    before = {e.call_id: e.outcome for e in live if isinstance(e, AgentToolResult)}
    after = {e.call_id: e.outcome for e in rebuilt if isinstance(e, AgentToolResult)}
    for call_id in sorted(before.keys() | after.keys()):
        if before.get(call_id) != after.get(call_id):
            out.append(f"{where} agent.tool_result {call_id}: {_fmt(before.get(call_id))}"
                       f" -> {_fmt(after.get(call_id))}")
    old_errors = [_said(e) for e in live if isinstance(e, AgentError)]
    new_errors = [_said(e) for e in rebuilt if isinstance(e, AgentError)]
    if old_errors != new_errors:
        out.append(f"{where} agent.error: {'; '.join(old_errors) or 'none'} -> {'; '.join(new_errors) or 'none'}")
    for kind, label in ((AgentRetry, "agent.retry"), (AgentCompaction, "agent.compaction"),
                        (AgentModelSwitch, "agent.model_switch")):
        counts = [sum(isinstance(e, kind) for e in events) for events in (live, rebuilt)]
        if counts[0] != counts[1]:
            out.append(f"{where} {label}: {counts[0]} live -> {counts[1]} rebuilt")
    kinds = lambda events: sorted(type(e).__name__ for e in events)  # noqa: E731
    if kinds(live) != kinds(rebuilt):
        out.append(f"{where} transcript events: {len(live)} live -> {len(rebuilt)} rebuilt")
    if out:
        out.insert(0, f"{where}: re-read by {parser} (live: {(old.parser if old else '') or 'unknown'})")
    return out
