"""The event vocabulary: renamed fields stay readable, closed vocabularies stay closed."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from ledger import read_records
from ledger.events import (SCHEMA_VERSION, AgentToolResult, ExcludedPath, FileOpen, LlmCall, RunEnded,
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
