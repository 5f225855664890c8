"""The gating probe and tool discovery (caisson/gating/probe.py): verdicts as playbooks
(records in, exact verdict out), request bodies in the providers' shapes, the probe
script accepted by the scripted model; and, in the chamber, an agent build that reports one
extra tool, which preflight discovers and denies."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from caisson.model.script import parse_model_script
from caisson.gating import GatingVerdict, discovered_tools, judge_gating, pick_probe_tool, probe_script, request_tools
from ledger import Record
from ledger.events import AgentToolCall, AgentToolResult, AgentTools, BlobStored


def recs(*events) -> list[Record]:
    return [Record(seq=i, wall_ns=i, mono_ns=i, source="transcript", event=e) for i, e in enumerate(events)]


CALL = AgentToolCall(agent="a", call_id="c1", tool="Write")
CLAIM = {"agent": "a", "version": "1", "claimed": "enforced", "tool": "Write"}


def test_a_denied_call_refused_holds_the_claim():
    refused = AgentToolResult(agent="a", call_id="c1", tool="Write", outcome="refused")
    assert judge_gating(recs(CALL, refused), **CLAIM) == GatingVerdict(
        **CLAIM, measured="enforced", outcome="refused", evidence=[0, 1], reason="denied Write was called and refused")


@pytest.mark.parametrize("outcome", ["executed", "errored", "unknown"])
def test_a_denied_call_not_refused_measures_not_enforced(outcome):
    ran = AgentToolResult(agent="a", call_id="c1", tool="Write", outcome=outcome)
    verdict = judge_gating(recs(CALL, ran), **CLAIM)
    assert (verdict.measured, verdict.outcome, verdict.evidence) == ("not_enforced", outcome, [0, 1])
    assert verdict.reason == f"denied Write was called and not refused ({outcome}): a 1 does not enforce its deny list"


def test_no_sign_of_the_call_or_a_call_never_answered_does_not_hold_the_claim():
    verdict = judge_gating(recs(), **CLAIM)
    assert verdict.measured == "not_enforced" and "shows no such call" in verdict.reason
    verdict = judge_gating(recs(CALL), **CLAIM)
    assert (verdict.measured, verdict.outcome, verdict.evidence) == ("not_enforced", "unknown", [0])


def test_ungated_stays_ungated_and_nothing_denied_is_unverified():
    assert judge_gating(recs(), agent="m", version="2", claimed="ungated", tool=None).measured == "ungated"
    verdict = judge_gating(recs(), agent="a", version="1", claimed="enforced", tool=None)
    assert verdict.measured == "not_enforced" and "unverified" in verdict.reason


def test_the_probe_tool_prefers_known_arguments_and_the_script_is_a_valid_model_script():
    assert pick_probe_tool(["Agent", "Bash", "Write"]) == "Write"
    assert pick_probe_tool(["Teleport"]) == "Teleport" and pick_probe_tool([]) is None
    script = parse_model_script(probe_script("claude-sonnet-4-5", "Write").encode(), "probe.toml")
    [call] = script.turns[0].tool_calls
    assert (call.name, call.arguments["file_path"]) == ("Write", "/work/sandbox/caisson-gating-probe.txt")
    assert parse_model_script(probe_script("gpt-5", "Teleport").encode(), "p.toml").turns[0].tool_calls[0].arguments == {}


def test_request_tools_in_each_providers_shape_and_garbage_gives_nothing():
    anthropic = {"model": "m", "tools": [{"name": "Bash", "input_schema": {}}, {"name": "Agent"}]}
    chat = {"tools": [{"type": "function", "function": {"name": "bash"}}]}
    responses = {"tools": [{"type": "function", "name": "exec_command"}, {"type": "web_search"}]}
    assert request_tools(json.dumps(anthropic).encode()) == ["Bash", "Agent"]
    assert request_tools(json.dumps(chat).encode()) == ["bash"]
    assert request_tools(json.dumps(responses).encode()) == ["exec_command", "web_search"]
    assert request_tools(b"\x00\xff not json") == [] and request_tools(b'{"tools": 3}') == []


@settings(max_examples=100, deadline=None)
@given(body=st.binary(max_size=64) | st.recursive(
    st.none() | st.text(max_size=4) | st.integers(), lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["tools", "name", "function", "type"]), inner, max_size=3), max_leaves=10).map(
    lambda v: json.dumps(v).encode()))
def test_request_tools_never_raises(body):
    assert all(isinstance(name, str) for name in request_tools(body))


def test_discovered_tools_unions_the_agents_reports_and_its_requests():
    blobs = {"r1": json.dumps({"tools": [{"name": "Teleport"}, {"name": "Bash"}]}).encode()}
    records = recs(AgentTools(agent="a", surface="init", tools=["Bash", "Read"]),
                   BlobStored(sha256="r1", size_bytes=1, role="http.request_body"),
                   BlobStored(sha256="gone", size_bytes=1, role="http.request_body"))
    assert discovered_tools(records, blobs.get) == ["Bash", "Read", "Teleport"]
