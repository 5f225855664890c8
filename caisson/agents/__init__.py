"""Agent adapters: how each real agent CLI is invoked, gated, and read back.

Each adapter names its gating capability as docs/architecture.md defines it: ``enforced`` (its real
flags restrict tools, verified against the CLI), ``not_enforced`` (it could gate, no
verified mapping yet) or ``ungated`` (it cannot gate). `deny_list` is the arm's deny list:
every tool the adapter knows (its static list, unioned with what sessions discovered)
minus the grant, plus what the arm withholds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Literal

import msgspec

from caisson.agents import claude_code, codex, copilot, mini_swe_agent, opencode
from caisson.errors import UsageError
from caisson.grants import granted_by, grants_by_tool
from ledger.events import Gating

Elicitation = Literal["stream", "answer_file"]
"""How an adapter gets the agent's answer back: ``stream`` (a structured transcript on
stdout as the agent works: Claude Code's stream-json, Codex's JSON lines) or
``answer_file`` (a file the agent writes, printed once it exits: mini-swe-agent's
trajectory)."""

__all__ = ["Adapter", "Elicitation", "ADAPTERS", "adapter", "deny_list"]


class Adapter(msgspec.Struct, frozen=True, kw_only=True):
    """One agent CLI as the recorder drives it."""

    name: str
    version: str  # the CLI version the agent image installs (images/agent/npm-packages.txt)
    gating: Gating
    image: str  # the image recipe it runs in
    static_tools: tuple[str, ...]
    env: dict[str, str]  # variables it needs in the chamber (no secrets)
    command: Callable[..., list[str]]  # (prompt, *, allowed, denied, model, max_turns) -> argv
    transcript: Callable[..., object] | None  # a sans-IO parser factory (version=...) -> (feed, close, events)
    elicitation: Elicitation = "stream"  # how the answer comes back: a streamed structured transcript, or an answer file


ADAPTERS: dict[str, Adapter] = {
    claude_code.NAME: Adapter(
        name=claude_code.NAME, version=claude_code.VERSION, gating=claude_code.GATING, image="agent", static_tools=claude_code.STATIC_TOOLS,
        env={"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1",
             "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1"},
        command=claude_code.command, transcript=claude_code.TranscriptParser),
    codex.NAME: Adapter(
        name=codex.NAME, version=codex.VERSION, gating=codex.GATING, image="agent", static_tools=codex.STATIC_TOOLS, env={},
        command=codex.command, transcript=codex.TranscriptParser),
    mini_swe_agent.NAME: Adapter(
        name=mini_swe_agent.NAME, version=mini_swe_agent.VERSION, gating=mini_swe_agent.GATING, image="agent",
        static_tools=mini_swe_agent.STATIC_TOOLS, env=mini_swe_agent.ENV, command=mini_swe_agent.command,
        transcript=mini_swe_agent.TranscriptParser, elicitation=mini_swe_agent.ELICITATION),
    opencode.NAME: Adapter(
        name=opencode.NAME, version=opencode.VERSION, gating=opencode.GATING, image="agent",
        static_tools=opencode.STATIC_TOOLS, env=opencode.ENV, command=opencode.command,
        transcript=opencode.TranscriptParser, elicitation=opencode.ELICITATION),
    copilot.NAME: Adapter(
        name=copilot.NAME, version=copilot.VERSION, gating=copilot.GATING, image="agent",
        static_tools=copilot.STATIC_TOOLS, env=copilot.ENV, command=copilot.command,
        transcript=copilot.TranscriptParser, elicitation=copilot.ELICITATION),
}


def adapter(name: str) -> Adapter:
    """The adapter called ``name``.

    Raises:
        UsageError: no such adapter (the message lists the known ones).
    """
    try:
        return ADAPTERS[name]
    except KeyError:
        raise UsageError(f"--agent {name}: unknown agent; known: {', '.join(sorted(ADAPTERS))}") from None


def deny_list(known: Iterable[str], grant: Iterable[str], withhold: Iterable[str]) -> list[str]:
    """Every known tool minus the grant, plus the withheld ones; sorted, no duplicates.

    A scoped grant (``Bash(git log:*)``, caisson/grants.py) grants its tool for some
    commands: the tool is not denied (denying it would refuse the granted commands too); the
    agent is handed the pattern and the audit reads what executed. A grant ``mcp__SERVER``
    grants every tool of that MCP server (``mcp__SERVER__*``), as in Claude Code's rules.

    Raises:
        ValueError: a malformed grant entry.
    """
    granted = set(grants_by_tool(grant))
    return sorted({tool for tool in known if not granted_by(tool, granted)} | set(withhold))
