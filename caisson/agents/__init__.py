"""Agent adapters: how each real agent CLI is invoked, gated, and read back.

Each adapter names its gating capability as docs/architecture.md defines it: ``enforced`` (its real
flags restrict tools, verified against the CLI), ``not_enforced`` (it could gate, no
verified mapping yet) or ``ungated`` (it cannot gate). `deny_list` is the arm's deny list:
every tool the adapter knows (its static list, unioned with what sessions discovered)
minus the grant, plus what the arm withholds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

import msgspec

from ledger.lazy import lazy_face
from caisson.agents import claude_code, codex, copilot, mini_swe_agent, opencode
from caisson.errors import ScenarioError, UsageError
from caisson.grants import granted_by, grants_by_tool, parse_grant
from ledger import SansIOParser
from ledger.events import Elicitation, Event, Gating

if TYPE_CHECKING:
    from caisson.agents.sessionfiles import SESSION_PARSERS, agent_of_file, session_usage

__all__ = ["Adapter", "Elicitation", "ADAPTERS", "SESSION_PARSERS", "adapter", "agent_of_file", "arm_grant", "check_arm",
           "deny_list", "known_tools", "own_arm", "session_usage"]

# The session files' parsers import the sandbox's globbing (and so the chamber): only their readers pay.
__getattr__, __dir__ = lazy_face(__name__, {"sessionfiles": ("SESSION_PARSERS", "agent_of_file", "session_usage")},
                                 globals())


class Adapter(msgspec.Struct, frozen=True, kw_only=True):
    """One agent CLI as the recorder drives it."""

    name: str
    version: str  # the CLI version the agent image installs (images/agent/npm-packages.txt)
    gating: Gating
    image: str  # the image recipe it runs in
    static_tools: tuple[str, ...]
    env: dict[str, str]  # variables it needs in the chamber (no secrets)
    command: Callable[..., list[str]]  # (prompt, *, allowed, denied, model, max_turns) -> argv
    transcript: Callable[..., SansIOParser[Event]] | None  # a sans-IO parser factory (version=...)
    elicitation: Elicitation = "stream"  # how the answer comes back: a streamed structured transcript, or an answer file
    # The CLI's own programs: exec paths (fnmatch patterns) its command's descendants may run
    # and still be the CLI (a launcher's platform binary); what else they run is not the CLI
    # (`caisson.detectors.attribution`).
    programs: tuple[str, ...] = ()


ADAPTERS: dict[str, Adapter] = {
    claude_code.NAME: Adapter(
        name=claude_code.NAME, version=claude_code.VERSION, gating=claude_code.GATING, image="agent", static_tools=claude_code.STATIC_TOOLS,
        env={"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1",
             "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1"},
        command=claude_code.command, transcript=claude_code.TranscriptParser, programs=claude_code.PROGRAMS),
    codex.NAME: Adapter(
        name=codex.NAME, version=codex.VERSION, gating=codex.GATING, image="agent", static_tools=codex.STATIC_TOOLS, env={},
        command=codex.command, transcript=codex.TranscriptParser, programs=codex.PROGRAMS),
    mini_swe_agent.NAME: Adapter(
        name=mini_swe_agent.NAME, version=mini_swe_agent.VERSION, gating=mini_swe_agent.GATING, image="agent",
        static_tools=mini_swe_agent.STATIC_TOOLS, env=mini_swe_agent.ENV, command=mini_swe_agent.command,
        transcript=mini_swe_agent.TranscriptParser, elicitation=mini_swe_agent.ELICITATION,
        programs=mini_swe_agent.PROGRAMS),
    opencode.NAME: Adapter(
        name=opencode.NAME, version=opencode.VERSION, gating=opencode.GATING, image="agent",
        static_tools=opencode.STATIC_TOOLS, env=opencode.ENV, command=opencode.command,
        transcript=opencode.TranscriptParser, elicitation=opencode.ELICITATION, programs=opencode.PROGRAMS),
    copilot.NAME: Adapter(
        name=copilot.NAME, version=copilot.VERSION, gating=copilot.GATING, image="agent",
        static_tools=copilot.STATIC_TOOLS, env=copilot.ENV, command=copilot.command,
        transcript=copilot.TranscriptParser, elicitation=copilot.ELICITATION, programs=copilot.PROGRAMS),
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


def known_tools() -> frozenset[str]:
    """Every tool some adapter knows (their static lists): the names a shared arm may use."""
    return frozenset(t for spec in ADAPTERS.values() for t in spec.static_tools)


def arm_grant(arm, scenario) -> list[str]:
    """An arm's grant as its agent is handed it: its ``grant`` entries, then the members of
    the scenario strategies it grants (`caisson.scenario.Strategy.members`) not already there."""
    members = [m for name in arm.strategies for m in (scenario.strategy(name).members() if scenario.strategy(name)
                                                     else ())]
    return [*arm.grant, *(m for m in dict.fromkeys(members) if m not in arm.grant)]


def own_arm(arm, scenario, agent: Adapter, *, shared_with: Sequence[Adapter] = (),
            discovered: Iterable[str] = ()) -> tuple[list[str], list[str]]:
    """The grant (as `arm_grant`) and withhold of ``arm`` as ``agent`` is handed them: less
    the entries naming only a tool of another agent sharing the arm (``shared_with``, a
    study's other adapters), which configure nothing for this one; both the study's plan
    and the cell's record derive the deny list from these."""
    members = {m for s in scenario.strategies for m in s.members()}
    mine = {*agent.static_tools, *discovered, *members}
    foreign = {t for other in shared_with if other.name != agent.name for t in other.static_tools} - mine
    grant = [g for g in arm_grant(arm, scenario) if parse_grant(g).tool not in foreign]
    return grant, [w for w in arm.withhold if w not in foreign]


def check_arm(arm, scenario, *, agents: Sequence[Adapter], discovered: Iterable[str] = (), path: str = "") -> None:
    """That every ``grant`` and ``withhold`` entry of ``arm`` names something.

    An entry names a tool of one of the ``agents`` that play the arm (their static lists
    and the ``discovered`` tools: a study's arm may be shared by its agents, each naming its
    own), a member of a scenario strategy, or an MCP server (``mcp__SERVER``) a strategy
    lists as a backend or a discovered tool belongs to. Anything else (``*``, a misspelt
    ``Bsah``, another agent's ``bash`` for Claude Code's ``Bash``) would silently deny or
    withhold something other than what was written, so it is refused. With no adapter (a
    plain command plays it) the names of every adapter count.

    Args:
        arm: the scenario's arm (`caisson.scenario.Arm`).
        scenario: its scenario. agents: the adapters that play it.
        discovered: tools sessions of these agents showed (preflight, baseline).
        path: the scenario file, for the message.

    Raises:
        ScenarioError: the first entry that names nothing, with its field, the agents'
            tools and the closest names.
    """
    import difflib

    discovered = tuple(discovered)
    names = " and ".join(a.name for a in agents) or "any agent caisson knows"
    own = tuple(sorted({*(t for a in agents for t in a.static_tools), *discovered} or known_tools()))
    members = {m for s in scenario.strategies for m in s.members()}
    valid = {*own, *members}
    servers = {m for m in members if m.startswith("mcp__")} | {
        t.rsplit("__", 1)[0] for t in discovered if t.startswith("mcp__") and t.count("__") >= 2}
    index = next((i for i, a in enumerate(scenario.arms) if a.name == arm.name), 0)
    for field, entries in (("grant", arm.grant), ("withhold", arm.withhold)):
        for j, entry in enumerate(entries):
            tool = parse_grant(entry).tool if field == "grant" else entry
            if tool in valid or tool in servers:
                continue
            hint = difflib.get_close_matches(tool, sorted(valid), n=3, cutoff=0.6)
            why = ("is not a tool name: an arm lists tools by name (a pattern goes only inside a scoped grant's"
                   " rule, Bash(git *)); to grant an agent everything, list its tools or a strategy")
            if "*" not in tool:
                why = f"names no tool of {names}, nor a scenario strategy's: it would configure nothing"
            raise ScenarioError(
                f"{entry!r} {why}" + (f"; did you mean {', '.join(hint)}?" if hint else "")
                + f"; the tools of {names}: {', '.join(own)}"
                + (f"; strategies: {', '.join(s.name for s in scenario.strategies)}" if scenario.strategies else ""),
                path=path or "the scenario", field=f"$.arms[{index}].{field}[{j}]")
