"""The list rebuild `caisson.replay._rederive.Rebuild` replaced (every record of a run held):
the oracle tests/caisson/test_replay_rederive.py compares the streamed rebuild with."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import compress
from operator import attrgetter

import msgspec

from caisson.agents import ADAPTERS
from collectors.llm import USAGE_RULES_VERSION
from collectors.proxy import rederive_llm_call
from ledger import Record, drain
from caisson.replay._rederive import Rederived, _transcript_changes, _usage_changes
from ledger.events import AgentUsage, BlobStored, HttpExchange, LlmCall, RunStarted

__all__ = ["rederive"]

TRANSCRIPT_SOURCE = "transcript"
_EVENT, _SOURCE = attrgetter("event"), attrgetter("source")
_READ: dict[type, bool] = {}  # event class -> whether rederive reads it (a blob, an exchange, a call)


def _adapter(records: Sequence[Record]) -> tuple[str | None, str | None]:
    """(adapter name, agent version) the run names: its manifest, else its transcript events."""
    for record in records:
        agent = record.event.agent if isinstance(record.event, RunStarted) else None
        if agent is not None and agent.name in ADAPTERS:
            return agent.name, agent.version
    for record in records:
        name = getattr(record.event, "agent", None)
        if record.source == TRANSCRIPT_SOURCE and isinstance(name, str) and name in ADAPTERS:
            return name, None
    return None, None


def _indexes(items: list, value: object) -> list[int]:
    """Every index of ``value`` in ``items`` (as `list.index` finds it: identity, then
    equality), each found by a scan at C speed: for values that are few in a long list."""
    out: list[int] = []
    at = -1
    try:
        while True:
            at = items.index(value, at + 1)
            out.append(at)
    except ValueError:
        return out


def _scan(records: Sequence[Record]) -> tuple[list[type], dict[str, str], Record | None, list[int], bool]:
    """One scan of a run's records for the rebuild: the class of each record's event, each
    blob's role by sha256, the first ``stdout`` blob record, the indexes of the records the
    rebuild reads or replaces (``http.exchange`` and ``llm.call`` not from the transcript,
    and every transcript record), in order, and whether any transcript record was written
    live.

    The classes and sources of all records are read at C speed (map, compress, `list.index`);
    only the few records of the classes the rebuild reads are looked at one by one.
    """
    kinds = list(map(type, map(_EVENT, records)))
    present = set(kinds)
    for kind in present.difference(_READ):  # learnt once per class: isinstance's misses on Structs are slow
        _READ[kind] = issubclass(kind, (BlobStored, HttpExchange, LlmCall))
    wanted = frozenset(kind for kind in present if _READ[kind])
    # (list.index would compare every class with each wanted one by rich comparison: slower here)
    read = list(compress(range(len(kinds)), map(wanted.__contains__, kinds))) if wanted else []
    transcribed = _indexes(list(map(_SOURCE, records)), TRANSCRIPT_SOURCE)
    roles: dict[str, str] = {}
    stdout_record: Record | None = None
    marks: list[int] = []
    for i in read:
        record = records[i]
        event = record.event
        if isinstance(event, BlobStored):
            roles[event.sha256] = event.role
            if stdout_record is None and event.role == "stdout":
                stdout_record = record
        elif record.source != TRANSCRIPT_SOURCE:
            marks.append(i)
    if transcribed:
        marks = sorted(marks + transcribed)
    return kinds, roles, stdout_record, marks, bool(transcribed)


def rederive(records: Sequence[Record], blob: Callable[[str], bytes | None]) -> tuple[list[Record], Rederived]:
    """Rebuild a run's derived LLM and agent events from its blobs (pure but for ``blob``).

    Args:
        records: the run's verified records, in order.
        blob: sha256 hex -> the blob's bytes, or None when absent.

    Returns:
        The records with rebuilt events in place of the live ones, and what was done.
    """
    result, _, out = rederive_kinds(records, blob)
    return result, out


def rederive_kinds(records: Sequence[Record], blob: Callable[[str], bytes | None]
                   ) -> tuple[list[Record], list[type], Rederived]:
    """`rederive`, and the class of each returned record's event (in the same order), for
    a caller that routes the records by class (`caisson.detectors.route_for`'s ``kinds``):
    the classes of the records the rebuild did not touch are those its scan read."""
    kinds, roles, stdout_record, marks, live_source = _scan(records)
    out = Rederived(versions={"llm": USAGE_RULES_VERSION})

    def body(sha: str | None) -> tuple[bytes, str] | None:
        data = blob(sha) if sha is not None else None
        return (data, roles.get(sha, "")) if data is not None and sha is not None else None

    name, version = _adapter(records)
    transcript: list[Record] | None = None
    if name is not None and stdout_record is not None and (data := blob(stdout_record.event.sha256)) is not None:
        factory = ADAPTERS[name].transcript  # the version the run recorded; else the image's pinned one
        parser = factory(version=version) if version else factory()  # type: ignore[misc]
        parser.feed(data)
        parser.close()
        out.transcript = name
        out.versions[name] = getattr(parser, "PARSER", "")
        out.versions["agent"] = f"{name} {getattr(parser, 'version', None) or 'unknown'}"
        transcript = [Record(seq=stdout_record.seq, wall_ns=stdout_record.wall_ns, mono_ns=stdout_record.mono_ns,
                             source=TRANSCRIPT_SOURCE, event=e) for e in drain(parser)]
    elif live_source:
        out.kept_live.append("transcript events: " + ("no known adapter named by the run" if name is None
                                                       else "no stdout blob to re-read"))
    pending: list[tuple[Record, LlmCall | None, str | None]] = []  # the last model-call exchange, unanswered
    result: list[Record] = []
    result_kinds: list[type] = []  # the class of each record of result
    live_transcript: list[Record] = []
    done = 0  # records before this index are in result, or replaced
    for i in marks:  # the records between marks go through unchanged
        result.extend(records[done:i])
        result_kinds.extend(kinds[done:i])
        done = i + 1
        record = records[i]
        event = record.event
        if isinstance(event, HttpExchange):
            _orphan(pending, result, result_kinds, out)
            call, why = rederive_llm_call(event, body(event.request_body_sha256), body(event.response_body_sha256))
            if call is not None or why is not None:
                pending.append((record, call, why))
        elif isinstance(event, LlmCall):
            record = _replace_call(record, event, pending, out)
        elif transcript is not None:  # a live transcript record
            if not live_transcript:
                result.extend(transcript)  # the rebuilt events take the live ones' place
                result_kinds.extend(map(type, map(_EVENT, transcript)))
            live_transcript.append(record)
            continue
        result.append(record)
        result_kinds.append(type(record.event))
    result.extend(records[done:])
    result_kinds.extend(kinds[done:])
    _orphan(pending, result, result_kinds, out)
    if transcript is not None:
        if not live_transcript:  # the live run parsed nothing: the rebuilt events go after the stdout blob
            at = next(i for i, r in enumerate(result) if r is stdout_record) + 1
            result[at:at] = transcript
            result_kinds[at:at] = map(type, map(_EVENT, transcript))
        out.changed += _transcript_changes([r.event for r in live_transcript], [r.event for r in transcript],
                                           stdout_record.seq if stdout_record else -1, out.versions[name])
        out.usage += [r.event for r in transcript if isinstance(r.event, AgentUsage)]
    return result, result_kinds, out


def _orphan(pending: list, result: list[Record], result_kinds: list[type], out: Rederived) -> None:
    """A model-call exchange whose live ``llm.call`` never came: the rebuilt call is added
    (it carries the exchange's seq, its evidence)."""
    if not pending:
        return
    exchange, call, why = pending.pop()
    if call is None:
        out.kept_live.append(f"seq {exchange.seq} http.exchange: no llm.call live, none rebuilt: {why}")
        return
    out.llm_calls += 1
    out.usage.append(call)
    out.changed.append(f"seq {exchange.seq} http.exchange: llm.call rebuilt where none was written live")
    result.append(msgspec.structs.replace(exchange, event=call))
    result_kinds.append(type(call))


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


