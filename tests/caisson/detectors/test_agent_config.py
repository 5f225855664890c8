"""`containment.agent_config`: playbooks (records in, exact findings out)."""

from __future__ import annotations

from caisson.detectors import DEFAULT_DETECTORS, DetectorConfig, Finding
from caisson.detectors.containment import AGENT_CONFIG, agent_config
from ledger import Record
from ledger.events import AgentConfigFound, ProcessExec, SandboxBuilt

HOOK = "echo hi > /tmp/x"


def play(*events) -> list[Record]:
    return [Record(seq=i, wall_ns=i, mono_ns=i, source="test", event=e) for i, e in enumerate(events)]


def built(*found: AgentConfigFound) -> SandboxBuilt:
    return SandboxBuilt(path="/work/sandbox", commit="c" * 40, tree_digest="d" * 64, agent_config=list(found))


def exec_(pid: int, argv: list[str], result: int = 0) -> ProcessExec:
    return ProcessExec(pid=pid, path=argv[0], argv=argv, result=result)


def test_found_and_executed_hook_and_mcp_server() -> None:
    records = play(
        built(AgentConfigFound(path=".claude/settings.json", agent="claude-code", commands=[HOOK]),
              AgentConfigFound(path=".mcp.json", agent="claude-code", commands=["node server.js --stdio"]),
              AgentConfigFound(path="AGENTS.md", agent="codex")),
        exec_(10, ["claude", "-p", "q"]),
        exec_(11, ["/bin/sh", "-c", HOOK]),
        exec_(12, ["node", "server.js", "--stdio"]),
        exec_(13, ["/bin/sh", "-c", HOOK], result=-1),  # a failed exec ran nothing
        exec_(14, ["/bin/sh", "-c", HOOK]),
    )
    assert list(agent_config(records, DetectorConfig())) == [
        Finding(detector=AGENT_CONFIG, kind="agent_config", effect="void", evidence=[0],
                message=".claude/settings.json in the tree configures claude-code, 1 command(s)"),
        Finding(detector=AGENT_CONFIG, kind="agent_config", effect="void", evidence=[0],
                message=".mcp.json in the tree configures claude-code, 1 command(s)"),
        Finding(detector=AGENT_CONFIG, kind="agent_config", effect="void", evidence=[0],
                message="AGENTS.md in the tree configures codex"),
        Finding(detector=AGENT_CONFIG, kind="agent_config_executed", effect="void", evidence=[2, 5],
                message=f".claude/settings.json's command ran 2 time(s): {HOOK}"),
        Finding(detector=AGENT_CONFIG, kind="agent_config_executed", effect="void", evidence=[3],
                message=".mcp.json's command ran 1 time(s): node server.js --stdio"),
    ]


def test_silent_when_the_config_was_withheld() -> None:
    # The default exclusions withheld it: sandbox.built lists nothing, so the same shell
    # line run by the agent itself (its own business) is no finding.
    records = play(built(), exec_(10, ["claude", "-p", "q"]), exec_(11, ["/bin/sh", "-c", HOOK]))
    assert list(agent_config(records, DetectorConfig())) == []


def test_registered() -> None:
    assert (AGENT_CONFIG, agent_config) in DEFAULT_DETECTORS
