"""Playbooks for enforcement.tool_audit: a run with no tool trace says its audit is
unavailable (weaker than an empty violation list), never silence; and against a known-bad
run: the cut-off mini-swe-agent trajectory recorded from the real agent."""

from __future__ import annotations

from pathlib import Path

from caisson.agents import mini_swe_agent
from caisson.detectors import DetectorConfig, Finding, run_detectors
from caisson.detectors.tool_audit import TOOL_AUDIT, tool_audit, tool_audit_status
from ledger import Record, drain
from ledger.events import AgentToolCall, AgentToolResult, AgentUsage, RunAgent, RunStarted

GOLDEN = Path(__file__).resolve().parents[1] / "test_transcripts_mini"
ARM = DetectorConfig(granted_tools=("bash",), denied_tools=())
STARTED = RunStarted(run_id="r", caisson_version="0", agent=RunAgent(name="mini-swe-agent", gating="ungated"))


def recs(*events) -> list[Record]:
    return [Record(seq=i, wall_ns=i, mono_ns=i, source="t", event=e) for i, e in enumerate(events)]


def transcript(data: bytes) -> list:
    parser = mini_swe_agent.TranscriptParser()
    parser.feed(data)
    parser.close()
    return list(drain(parser))


def test_no_transcript_at_all_is_unavailable():
    assert list(tool_audit(recs(STARTED), ARM)) == [Finding(
        detector=TOOL_AUDIT, kind="tool_audit_unavailable", effect="info", evidence=[],
        message="mini-swe-agent left no transcript the recorder could read: no tool call was seen, so none could"
                " be audited (not the same as none made)")]


def test_an_incomplete_transcript_without_calls_is_unavailable_with_calls_partial():
    cut = AgentUsage(agent="a", token_source="s", incomplete="cut")
    [finding] = tool_audit(recs(STARTED, cut), ARM)
    assert (finding.kind, finding.evidence) == ("tool_audit_unavailable", [1])
    call = AgentToolCall(agent="a", call_id="1", tool="bash")
    [finding] = tool_audit(recs(STARTED, call, cut), ARM)
    assert (finding.kind, finding.evidence) == ("tool_audit_partial", [2, 1])
    assert tool_audit_status([finding]) == "partial"


def test_a_whole_transcript_even_without_calls_is_audited_and_a_plain_command_has_no_audit():
    whole = AgentUsage(agent="a", token_source="s")
    assert list(tool_audit(recs(STARTED, whole), ARM)) == []
    assert tool_audit_status([]) == "audited"
    plain = RunStarted(run_id="r", caisson_version="0")
    assert list(tool_audit(recs(plain), DetectorConfig())) == []


def test_known_bad_a_real_run_cut_before_the_agent_printed_its_trajectory():
    events = transcript(b"")  # the chamber's deadline killed mini before it printed the trajectory
    findings = [f for f in run_detectors(recs(STARTED, *events), ARM) if f.detector == TOOL_AUDIT]
    assert [f.kind for f in findings] == ["tool_audit_unavailable"]
    # the same agent's whole trajectory is audited, its executed bash calls in the grant
    events = transcript((GOLDEN / "submitted.json").read_bytes())
    assert any(isinstance(e, AgentToolResult) for e in events)
    assert [f for f in run_detectors(recs(STARTED, *events), ARM) if f.detector == TOOL_AUDIT] == []
