"""The event vocabulary: renamed fields stay readable, closed vocabularies stay closed."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from ledger import read_records
from ledger.events import (SCHEMA_VERSION, AbortRules, AgentToolResult, Combo, Endpoint, ExcludedPath, FileOpen,
                           GraderCheck, HostKey, LlmCall, PlannedCell, Price, Refusal, RunEnded, StudyPlanned,
                           decode_event)

GOLDEN_V1 = Path(__file__).parent / "test_golden" / "v1"


def test_schema_version_3_names_the_duration_duration_ns():
    assert SCHEMA_VERSION >= 3  # 3 renamed it; later versions only add kinds and fields
    encoded = msgspec.msgpack.encode(RunEnded(exit_code=0, duration_ns=4000))
    assert msgspec.msgpack.decode(encoded) == {"kind": "run.ended", "exit_code": 0, "duration_ns": 4000}


def test_the_old_name_wall_ns_is_read_as_duration_ns():
    old = msgspec.msgpack.encode({"kind": "run.ended", "exit_code": 0, "wall_ns": 4000, "status": "timeout"})
    event = decode_event(old)
    assert (event.duration_ns, event.legacy_wall_ns, event.status) == (4000, None, "timeout")
    assert event == RunEnded(exit_code=0, duration_ns=4000, status="timeout")
    assert b"wall_ns" not in msgspec.msgpack.encode(event)  # re-encoded under the new name only


def test_the_committed_schema_2_ledger_reads_its_duration_under_the_new_name():
    """tests/ledger/test_golden/v1 was written before duration_ns existed: its run.ended says wall_ns."""
    [end] = [r.event for r in read_records(GOLDEN_V1) if isinstance(r.event, RunEnded)]
    assert end.duration_ns == 4000 and end.legacy_wall_ns is None


@pytest.mark.parametrize("event", [
    {"kind": "run.ended", "status": "finished"},
    {"kind": "file.open", "pid": 1, "path": "/x", "access": "x"},
    {"kind": "agent.tool_result", "agent": "a", "call_id": "c", "outcome": "maybe"},
    {"kind": "agent.tools", "agent": "a", "surface": "guess"},
    {"kind": "llm.call", "provider": "acme", "endpoint": "messages"},
    {"kind": "llm.call", "provider": "openai", "endpoint": "completions"},
    {"kind": "sandbox.built", "path": "/s", "commit": "c", "tree_digest": "d",
     "excluded": [{"path": "a", "category": "secrets"}]},
])
def test_a_value_outside_a_closed_vocabulary_does_not_decode(event):
    with pytest.raises(msgspec.ValidationError):
        decode_event(msgspec.msgpack.encode(event))


def test_closed_vocabularies_decode_their_own_values():
    for status in ("completed", "timeout", "interrupted", "infra_failure"):
        assert decode_event(msgspec.msgpack.encode(RunEnded(status=status))).status == status
    for access in ("r", "w", "rw"):
        assert decode_event(msgspec.msgpack.encode(FileOpen(pid=1, path="/x", access=access))).access == access
    for outcome in ("executed", "refused", "errored", "unknown"):
        event = AgentToolResult(agent="a", call_id="c", outcome=outcome)
        assert decode_event(msgspec.msgpack.encode(event)) == event
    for provider, endpoint in (("anthropic", "messages"), ("openai", "chat.completions"), ("openai", "responses")):
        event = LlmCall(provider=provider, endpoint=endpoint)
        assert decode_event(msgspec.msgpack.encode(event)) == event
    assert ExcludedPath(path="a", category="grading").category == "grading"


def test_a_net_flow_from_before_schema_8_reads_without_per_direction_counts():
    old = msgspec.msgpack.encode({"kind": "net.flow", "proto": "udp", "src": "10.0.0.2", "sport": 4000,
                                  "dst": "1.1.1.1", "dport": 53, "packets": 1, "bytes": 57})
    event = decode_event(old)
    assert (event.packets, event.bytes, event.initiator_packets, event.responder_packets) == (1, 57, None, None)
    assert (event.initiator_bytes, event.responder_bytes, event.responder_tcp_flags) == (None, None, None)


GOLDEN_SCHEMA14 = Path(__file__).parent / "test_golden" / "schema14" / "expected.json"


def _schema14_planned() -> dict:
    """The study.planned the demo study's ledger holds, as main wrote it (schema 14: dicts)."""
    import json

    return json.loads(GOLDEN_SCHEMA14.read_text())["study"][0]


def test_a_schema_14_study_planned_decodes_into_the_typed_plan():
    old = _schema14_planned()
    event = decode_event(msgspec.msgpack.encode(old))
    assert isinstance(event, StudyPlanned)
    assert all(isinstance(c, PlannedCell) for c in event.cells) and len(event.cells) == len(old["cells"])
    first = old["cells"][0]
    assert event.cells[0] == PlannedCell(**first)
    combo = event.combos[0]
    assert isinstance(combo, Combo) and combo.endpoint == Endpoint(script=old["combos"][0]["endpoint"]["script"])
    assert (combo.gating, combo.elicitation, combo.cells) == ("enforced", {"max_turns": 4}, 8)
    assert event.refusals == [Refusal(**old["refusals"][0])] and event.refusals[0].kind == "cannot"
    assert event.prices == {m: Price(**p) for m, p in old["prices"].items()}
    assert event.abort == AbortRules(host_stalled_in_a_row=3)
    assert event.grader == [GraderCheck(**g) for g in old["grader"]]
    for name in ("cells", "combos", "refusals", "prices", "abort", "grader"):  # every key, as main wrote it
        assert msgspec.to_builtins(getattr(event, name)) == old[name], name


def test_study_planned_keys_an_older_ledger_left_out_read_as_their_defaults():
    old = {"kind": "study.planned", "study": "s", "study_sha256": "0" * 64,
           "cells": [{"cell_id": "c", "arm": "a", "agent": "probe", "question_id": "q", "repetition": 1}],
           "combos": [{"arm": "a", "agent": "probe", "endpoint": {}}],
           "refusals": [{"arm": "b", "agent": "probe", "kind": "cannot"}],
           "host_keys": [{"host": "h1/n", "public_key": "ab" * 32}], "abort": {}}
    event = decode_event(msgspec.msgpack.encode(old))
    assert isinstance(event, StudyPlanned)
    assert event.cells == [PlannedCell(cell_id="c", arm="a", agent="probe", model=None, question_id="q",
                                       repetition=1)]
    assert event.combos == [Combo(arm="a", agent="probe", adapter=None, model=None, gating="ungated",
                                  endpoint=Endpoint(), cells=0)]
    assert event.refusals == [Refusal(arm="b", agent="probe", gating="ungated", kind="cannot", reason="", cells=0)]
    assert event.host_keys == [HostKey(host="h1/n", public_key="ab" * 32)]
    assert (event.abort, event.prices, event.grader) == (AbortRules(), {}, [])


@pytest.mark.parametrize("member", [
    {"cells": [{"arm": "a", "agent": "probe", "question_id": "q", "repetition": 1}]},  # no cell_id
    {"refusals": [{"arm": "a", "agent": "probe", "kind": "maybe"}]},  # kind outside cannot | not_yet
    {"combos": [{"arm": "a", "agent": "probe", "gating": "sometimes"}]},  # gating outside Gating
    {"prices": {"m": {"input_usd_per_mtok": "3"}}},  # a price that is not a number
])
def test_a_study_planned_member_outside_its_type_does_not_decode(member):
    with pytest.raises(msgspec.ValidationError):
        decode_event(msgspec.msgpack.encode({"kind": "study.planned", "study": "s", "study_sha256": "0", **member}))
