"""Files in a repository that an agent reads as its own configuration (sans-IO).

A repository under test can configure the agent that works on it: project settings with
hooks that run shell commands when a session starts (Claude Code's `.claude/settings.json`
`SessionStart` hook runs even under an arm that grants no shell), MCP servers the agent
spawns (`.mcp.json`, `.codex/config.toml`, `opencode.json`), permissions, rules and
instructions. Such a run measures an agent configured by the tree, not by the arm, so
these paths are withheld by default under the `agent_config` exclusion category
(`DEFAULT_EXCLUSIONS`), after the scenario's own categories.

`AGENT_CONFIG_GLOBS` are the paths each agent documents reading from a project:
- Claude Code (docs.anthropic.com/en/docs/claude-code/settings, /hooks, /mcp, /memory):
  `.claude/` (settings.json, settings.local.json, hooks, commands, agents, skills),
  `CLAUDE.md`, `CLAUDE.local.md`, `.mcp.json`.
- Codex CLI (github.com/openai/codex, docs/config.md, AGENTS.md): `.codex/`, `AGENTS.md`,
  `AGENTS.override.md`.
- Cursor (docs.cursor.com/context/rules): `.cursor/`, `.cursorrules`.
- GitHub Copilot (docs.github.com, "Adding repository custom instructions"):
  `.github/copilot-instructions.md`, `.github/instructions/`.
- OpenCode (opencode.ai/docs/config, /rules): `.opencode/`, `opencode.json`,
  `opencode.jsonc`.
- aider (aider.chat/docs/config): `.aider*` (`.aider.conf.yml`, `.aiderignore`, its
  chat and input histories).
- Gemini CLI (`.gemini/`, `GEMINI.md`), Windsurf (`.windsurfrules`), Cline (`.clinerules`).

`config_commands` reads the commands a configuration file would make the agent run
(hooks, status lines, MCP servers, notifications), so the `containment.agent_config`
detector can tell when one of them was executed.
"""

from __future__ import annotations

import json
import shlex
import tomllib
from pathlib import PurePosixPath

from caisson.scenario import ExclusionCategory
from ledger.events import AgentConfigFound

__all__ = [
    "AGENT_CONFIG_GLOBS",
    "DEFAULT_EXCLUSIONS",
    "agent_of",
    "config_commands",
]

AGENT_CONFIG_GLOBS: tuple[str, ...] = (
    "**/.claude",
    "**/CLAUDE.md",
    "**/CLAUDE.local.md",
    "**/.mcp.json",
    "**/.codex",
    "**/AGENTS.md",
    "**/AGENTS.override.md",
    "**/.cursor",
    "**/.cursorrules",
    ".github/copilot-instructions.md",
    ".github/instructions",
    "**/.opencode",
    "**/opencode.json",
    "**/opencode.jsonc",
    "**/.aider*",
    "**/.gemini",
    "**/GEMINI.md",
    "**/.windsurfrules",
    "**/.clinerules",
)
"""Globs (see `caisson._glob.glob_to_regex`) of what agents read from a project."""

DEFAULT_EXCLUSIONS: tuple[ExclusionCategory, ...] = (
    ExclusionCategory(category="agent_config", globs=list(AGENT_CONFIG_GLOBS),
                      description="Files the agent reads as its own configuration: settings, hooks, "
                                  "MCP servers, rules and instructions (withheld by default)."),
)
"""Exclusions every sandbox applies after the scenario's own (so a scenario's category wins)."""

_AGENTS: tuple[tuple[tuple[str, ...], str], ...] = (  # a path component (or its prefix*) -> agent
    ((".claude", "CLAUDE.md", "CLAUDE.local.md", ".mcp.json"), "claude-code"),
    ((".codex", "AGENTS.md", "AGENTS.override.md"), "codex"),
    ((".cursor", ".cursorrules"), "cursor"),
    (("copilot-instructions.md", "instructions"), "copilot"),
    ((".opencode", "opencode.json", "opencode.jsonc"), "opencode"),
    ((".aider*",), "aider"),
    ((".gemini", "GEMINI.md"), "gemini"),
    ((".windsurfrules",), "windsurf"),
    ((".clinerules",), "cline"),
)


def agent_of(path: str) -> str:
    """The agent whose configuration a path is (the first component that names one).

    Args:
        path: a repo-relative POSIX path matched by `AGENT_CONFIG_GLOBS`.

    Returns:
        e.g. `claude-code` for `.claude/settings.json`; `unknown` when none matches.
    """
    for part in PurePosixPath(path).parts:
        for names, agent in _AGENTS:
            if any(part == n or (n.endswith("*") and part.startswith(n[:-1])) for n in names):
                return agent
    return "unknown"


def _command_line(command: object, args: object = ()) -> str | None:
    """One shell line from a command (a string or argv list) and optional arguments."""
    if isinstance(command, str) and command:
        argv = [command]
    elif isinstance(command, list) and command and all(isinstance(a, str) for a in command):
        argv = list(command)
    else:
        return None
    if isinstance(args, list) and all(isinstance(a, str) for a in args):
        argv += args
    return argv[0] if len(argv) == 1 else shlex.join(argv)


def _claude_settings(doc: dict) -> list[str]:
    """Hook commands (`hooks.<Event>[].hooks[].command`) and the status line command."""
    out = []
    hooks = doc.get("hooks")
    if isinstance(hooks, dict):
        for groups in hooks.values():
            for group in groups if isinstance(groups, list) else ():
                for hook in (group.get("hooks") or []) if isinstance(group, dict) else ():
                    if isinstance(hook, dict) and (line := _command_line(hook.get("command"))):
                        out.append(line)
    status = doc.get("statusLine")
    if isinstance(status, dict) and (line := _command_line(status.get("command"))):
        out.append(line)
    return out


def _mcp_servers(servers: object) -> list[str]:
    """`{name: {command, args}}` (Claude Code, Codex) or `{name: {command: [argv]}}` (OpenCode)."""
    out = []
    if isinstance(servers, dict):
        for server in servers.values():
            if isinstance(server, dict) and (line := _command_line(server.get("command"), server.get("args", []))):
                out.append(line)
    return out


def config_commands(path: str, data: bytes) -> AgentConfigFound:
    """What an agent configuration file is and which commands it would make the agent run.

    Args:
        path: its repo-relative POSIX path (decides the format).
        data: its bytes.

    Returns:
        The file with its agent and commands: Claude Code settings (`.claude/settings*.json`:
        hooks, statusLine), MCP server commands (`.mcp.json` and `mcpServers` in Claude
        settings, `.codex/config.toml` `mcp_servers`, `opencode.json(c)` `mcp`), Codex's
        `notify` command. Other files (instructions, rules) have no commands. A file that
        does not parse has `error` set and no commands.
    """
    name = PurePosixPath(path).name
    agent = agent_of(path)
    commands: list[str] = []
    try:
        if name.endswith((".json", ".jsonc")):
            text = data.decode("utf-8")
            doc = json.loads(_strip_jsonc(text) if name.endswith(".jsonc") else text)
            if not isinstance(doc, dict):
                return AgentConfigFound(path=path, agent=agent)
            if agent == "claude-code":
                commands = _claude_settings(doc) + _mcp_servers(doc.get("mcpServers"))
            elif agent == "opencode":
                commands = _mcp_servers(doc.get("mcp"))
        elif name == "config.toml" and agent == "codex":
            doc = tomllib.loads(data.decode("utf-8"))
            commands = _mcp_servers(doc.get("mcp_servers"))
            if line := _command_line(doc.get("notify")):
                commands.append(line)
    except (UnicodeDecodeError, ValueError, tomllib.TOMLDecodeError) as exc:
        return AgentConfigFound(path=path, agent=agent, error=f"{type(exc).__name__}: {exc}")
    return AgentConfigFound(path=path, agent=agent, commands=commands)


def _strip_jsonc(text: str) -> str:
    """JSON with `//` and `/* */` comments (outside strings) turned into JSON."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        elif text.startswith("//", i):
            i = text.find("\n", i)
            i = n if i < 0 else i
        elif text.startswith("/*", i):
            i = text.find("*/", i + 2)
            i = n if i < 0 else i + 2
        else:
            out.append(c)
            i += 1
    return "".join(out)
