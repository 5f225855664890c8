"""Whether an agent run's tool use could be audited at all.

A tool audit (`caisson.detectors.agents.tool_escape`) reads the agent's own account of its
tool calls. A run whose transcript gave no such account (no parser, nothing printed, a
transcript cut before any call) has no violations *because nothing was seen*: that is
weaker than an empty violation list, and it is said, never left silent.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Literal

from caisson.detectors._base import DetectorConfig, Finding, INFO, reads
from ledger import Record
from ledger.events import AgentToolCall, AgentToolResult, AgentUsage, RunStarted

__all__ = ["TOOL_AUDIT", "ToolAudit", "tool_audit", "tool_audit_status"]

TOOL_AUDIT = "enforcement.tool_audit@1"
ToolAudit = Literal["audited", "partial", "unavailable"]
"""How far a run's tool use was audited: from a whole transcript (``audited``), from a
transcript that ended early (``partial``: calls after the cut are unseen), or not at all
(``unavailable``: no tool trace)."""
KINDS: dict[str, ToolAudit] = {"tool_audit_partial": "partial", "tool_audit_unavailable": "unavailable"}


@reads(RunStarted, AgentToolCall, AgentToolResult, AgentUsage)
def tool_audit(records: Iterable[Record], config: DetectorConfig) -> Iterator[Finding]:
    """One ``tool_audit_unavailable`` (no tool call, no complete transcript) or
    ``tool_audit_partial`` (calls seen, transcript incomplete) finding for a run that drives
    an agent or plays an arm; nothing for a whole transcript or a plain command.

    Effect is ``info``: the cell is not voided for it, but its audit is shown as what it is.
    """
    agent = None
    calls: list[int] = []
    usages: list[tuple[int, AgentUsage]] = []
    for record in records:
        event = record.event
        if isinstance(event, RunStarted):
            agent = event.agent.name if event.agent is not None else None
        elif isinstance(event, (AgentToolCall, AgentToolResult)):
            calls.append(record.seq)
        elif isinstance(event, AgentUsage):
            usages.append((record.seq, event))
    if agent is None and config.granted_tools is None:
        return
    who = agent or "the command"
    if not usages:
        if not calls:
            yield Finding(detector=TOOL_AUDIT, kind="tool_audit_unavailable", effect=INFO, evidence=[],
                          message=f"{who} left no transcript the recorder could read: no tool call was seen,"
                                  " so none could be audited (not the same as none made)")
        return
    seq, usage = usages[-1]
    if usage.incomplete is None:
        return
    if not calls:
        yield Finding(detector=TOOL_AUDIT, kind="tool_audit_unavailable", effect=INFO, evidence=[seq],
                      message=f"{who}'s transcript is incomplete and shows no tool call ({usage.incomplete}):"
                              " no tool use could be audited (not the same as none made)")
    else:
        yield Finding(detector=TOOL_AUDIT, kind="tool_audit_partial", effect=INFO, evidence=[seq, *calls],
                      message=f"{who}'s transcript is incomplete ({usage.incomplete}): {len(calls)} tool event(s)"
                              " audited, any after the cut unseen")


def tool_audit_status(findings: Iterable[Finding]) -> ToolAudit:
    """The run's `ToolAudit` from its findings (``audited`` unless a finding says otherwise)."""
    for finding in findings:
        if finding.kind in KINDS:
            return KINDS[finding.kind]
    return "audited"
