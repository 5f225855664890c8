"""Agent detectors: tools executed outside the grant, denied tools still offered, and
first-party token usage against what the proxy saw."""

from __future__ import annotations

import functools
import shlex
from collections.abc import Iterable, Iterator

from caisson.detectors._base import DetectorConfig, Finding, Fold, INFO, VOID, folded, reads
from caisson.detectors._execs import ShellRun, outside_rules, shell_runs
from caisson.grants import command_words, granted_by, grants_by_tool
from ledger import Record
from ledger.events import AgentTools, AgentToolCall, AgentToolResult, AgentUsage, LlmCall, ProcessExec, ProcessExit

__all__ = [
    "ISOLATION", "STRATEGIES", "TOKENS", "TOOL_ESCAPE", "isolation", "strategy", "tokens_cross_check",
    "tool_escape",
]

TOOL_ESCAPE = "enforcement.tool_escape@1"
ISOLATION = "enforcement.isolation@1"
TOKENS = "tokens.cross_check@1"

STRATEGIES = {
    "shell": ("Bash", "BashOutput", "KillShell", "shell", "exec_command", "local_shell", "container.exec"),
    "read": ("Read", "Glob", "Grep", "LS", "read_file", "list_dir", "grep_files"),
    "write": ("Write", "Edit", "MultiEdit", "NotebookEdit", "apply_patch", "write_file"),
    "web": ("WebFetch", "WebSearch", "web_search", "web_fetch", "fetch", "google_search", "url_context"),
    "delegate": ("Task", "SlashCommand"),
}
"""What each tool lets an agent do. A violation is scoped to the strategy it breaks: a
shell under any name is the same escape."""


def strategy(tool: str, config: DetectorConfig | None = None) -> str:
    """The strategy a tool belongs to.

    A scenario strategy listing the tool (or its MCP server, ``mcp__SERVER``) comes first
    (``config.strategies``); then the built-in `STRATEGIES`; an MCP tool ``mcp__S__T`` is
    its server's (``backend:mcp__S``); any other tool is its own strategy (``tool:NAME``).
    """
    for name, members in config.strategies if config is not None else ():
        if granted_by(tool, members):
            return name
    for name, tools in STRATEGIES.items():
        if tool in tools or tool.lower() in (t.lower() for t in tools):
            return name
    server, sep, _ = tool.rpartition("__")
    if tool.startswith("mcp__") and sep and server.count("__") == 1:
        return f"backend:{server}"
    if tool.startswith("mcp__") and tool.count("__") == 1:
        return f"backend:{tool}"
    return f"tool:{tool}"


def _command(call: AgentToolCall | None) -> str:
    """The shell command a tool call asked for (Claude Code ``command``, Codex ``cmd``)."""
    if call is None:
        return ""
    value = call.input.get("command", call.input.get("cmd", ""))
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return shlex.join(value)
    return value if isinstance(value, str) else ""


@reads(AgentToolCall, AgentToolResult, LlmCall, ProcessExec, ProcessExit)
@folded
def tool_escape(config: DetectorConfig, found: list[Finding]) -> Fold:
    """A tool executed outside the arm's grant voids the cell: refusals are classified out,
    an outcome nobody recognised counts as executed. One finding per broken strategy.

    The grant is a set of strategies: those of the granted tools, and the scenario
    strategies the arm grants (``config.granted_strategies``). A tool of a granted strategy
    is fine even when the arm does not list it (e.g. another tool of a granted MCP server);
    a tool of any other strategy that executed is an escape. A tool the provider ran itself
    (``llm.call.server_tools``, e.g. Anthropic's web search) is an execution the chamber never
    sees: outside the grant (an arm that withholds web access), it is an escape too.

    A scoped grant (``Bash(git log:*)``, caisson/grants.py) is audited from what executed:
    every program the call's shell started (strace ``process.exec``, caisson/detectors/_execs.py)
    must match a rule, or descend from a program that did. A call whose shell strace does not
    show cannot be checked and counts as outside the grant."""
    if config.granted_tools is None:
        return
    grant = _grant(config)
    own: list[Record] = []  # the tools' records; the processes' only for a scoped grant (its shells)
    while (record := (yield)) is not None:
        if grant.scoped or not isinstance(record.event, (ProcessExec, ProcessExit)):
            own.append(record)
    found.extend(_escapes(own, grant))


def _escapes(records: list[Record], grant: _Grant) -> Iterator[Finding]:
    """`tool_escape`'s findings over its records."""
    scoped, granted, strategy_of = grant.scoped, grant.granted, grant.strategy
    audited = [r for r in records if isinstance(r.event, AgentToolResult) and r.event.outcome != "refused"
               and r.event.tool in scoped and strategy_of(r.event.tool) not in granted]
    runs: dict[int, ShellRun | None] = {}
    if audited:  # a scoped grant's calls: what their shells ran
        calls = {r.event.call_id: r.event for r in records if isinstance(r.event, AgentToolCall)}
        runs = dict(zip((r.seq for r in audited),
                        shell_runs(records, [_command(calls.get(r.event.call_id)) for r in audited])))
    escapes: dict[str, list[tuple[int, str, str]]] = {}
    for record in records:
        event = record.event
        if isinstance(event, LlmCall):
            for name, count in sorted(event.server_tools.items()):
                if strategy_of(name) not in granted:
                    escapes.setdefault(strategy_of(name), []).append(
                        (record.seq, name, f"run by the provider, {count}x"))
            continue
        if not isinstance(event, AgentToolResult) or strategy_of(event.tool) in granted:
            continue
        if event.outcome == "refused":
            yield Finding(detector=TOOL_ESCAPE, kind="tool_refused", effect=INFO, evidence=[record.seq],
                          message=f"{event.tool} ({strategy_of(event.tool)}) refused by the agent's permissions")
        elif event.tool in scoped:
            rules = scoped[event.tool]
            run = runs[record.seq]
            if run is None:
                escapes.setdefault(strategy_of(event.tool), []).append(
                    (record.seq, event.tool, f"{event.outcome}, no exec of its shell to check against"
                     f" {', '.join(rules)}"))
                continue
            for bad in outside_rules(run, rules):
                escapes.setdefault(strategy_of(event.tool), []).append(
                    (bad.seq, event.tool, f"ran {command_words(bad.event.argv)[:80]!r}, outside {', '.join(rules)}"))
        else:
            escapes.setdefault(strategy_of(event.tool), []).append((record.seq, event.tool, event.outcome))
    for name, hits in escapes.items():
        tools = ", ".join(sorted({f"{tool} ({outcome})" for _, tool, outcome in hits}))
        yield Finding(detector=TOOL_ESCAPE, kind="tool_escape", effect=VOID, evidence=sorted(s for s, _, _ in hits),
                      message=f"strategy {name} is outside the grant and ran: {tools}")


class _Grant:
    """One configuration's grant, for `tool_escape`: the tools granted with a scope (tool ->
    rules), the strategies granted whole, and each tool's strategy, remembered (a pure
    function of the tool and the configuration, asked for every tool result of every run)."""

    def __init__(self, config: DetectorConfig):
        assert config.granted_tools is not None
        self._config = config
        self._strategies: dict[str, str] = {}
        grants = grants_by_tool(config.granted_tools, strict=False)
        self.scoped = {tool: rules for tool, rules in grants.items() if rules is not None}
        self.granted = {self.strategy(tool) for tool, rules in grants.items() if rules is None} \
            | set(config.granted_strategies)

    def strategy(self, tool: str) -> str:
        """`strategy` of ``tool`` under this configuration."""
        found = self._strategies.get(tool)
        if found is None:
            if len(self._strategies) >= 4096:  # tool names come from the agent's output: bounded
                self._strategies.clear()
            found = self._strategies[tool] = strategy(tool, self._config)
        return found


@functools.lru_cache(maxsize=8)
def _grant(config: DetectorConfig) -> _Grant:
    return _Grant(config)


@reads(AgentTools)
def isolation(records: Iterable[Record], config: DetectorConfig) -> Iterator[Finding]:
    """A tool on the arm's deny list that the agent still reports having: the gating did not
    take, whatever the agent then did (void). A tool it reports that is neither granted nor
    denied was never discovered: the deny list missed it (shown, for the adapter's list)."""
    if config.granted_tools is None:
        return
    denied = set(config.denied_tools)
    members = {m for name, ms in config.strategies if name in config.granted_strategies for m in ms}
    granted = set(grants_by_tool(config.granted_tools, strict=False)) | members
    for record in records:
        event = record.event
        if not isinstance(event, AgentTools):
            continue
        present = sorted(denied & set(event.tools))
        if present:
            yield Finding(detector=ISOLATION, kind="isolation", effect=VOID, evidence=[record.seq],
                          message=f"denied tools still offered ({event.surface}): {', '.join(present)}")
        unknown = sorted(t for t in set(event.tools) - denied if not granted_by(t, granted))
        if unknown:
            yield Finding(detector=ISOLATION, kind="undiscovered_tool", effect=INFO, evidence=[record.seq],
                          message=f"tools offered ({event.surface}) that the deny list does not know:"
                          f" {', '.join(unknown)}")


def _fmt(value: int | None) -> str:
    return "null" if value is None else str(value)


@reads(LlmCall, AgentUsage)
def tokens_cross_check(records: Iterable[Record], config: DetectorConfig) -> Iterator[Finding]:
    """First-party ``agent.usage`` against the sum of ``llm.call`` usage seen by the proxy.

    A disagreement names both sources and figures; a source that measured nothing is
    null, never 0 (a call without usage makes the proxy's sum null)."""
    calls: list[int] = []
    proxy_in: int | None = 0
    proxy_out: int | None = 0
    reports: list[tuple[int, AgentUsage]] = []
    for record in records:
        event = record.event
        if isinstance(event, LlmCall):
            calls.append(record.seq)
            view = event.normalized
            if view is None or view.input_tokens is None or proxy_in is None:
                proxy_in = None
            else:
                proxy_in += view.input_tokens
            if view is None or view.output_tokens is None or proxy_out is None:
                proxy_out = None
            else:
                proxy_out += view.output_tokens
        elif isinstance(event, AgentUsage):
            reports.append((record.seq, event))
    if not calls and not reports:
        return
    for seq, report in reports or [(None, None)]:
        view = report.normalized if report is not None else None
        agent_in = view.input_tokens if view is not None else None
        agent_out = view.output_tokens if view is not None else None
        if calls and (agent_in, agent_out) == (proxy_in, proxy_out) and agent_in is not None:
            continue
        source = report.token_source if report is not None else "no agent.usage"
        yield Finding(detector=TOKENS, kind="token_ambiguous", effect=INFO,
                      evidence=([seq] if seq is not None else []) + calls,
                      message=f"{source}: input {_fmt(agent_in)}, output {_fmt(agent_out)}; proxy llm.call sum over"
                      f" {len(calls)} call(s): input {_fmt(proxy_in if calls else None)},"
                      f" output {_fmt(proxy_out if calls else None)}")
