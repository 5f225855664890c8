"""Scoped grants: a tool granted only for some commands, e.g. ``Bash(git log:*)``.

An arm's grant entry is either a bare tool name (``Bash``: every call) or a tool with a
rule in parentheses, in Claude Code's permission-rule syntax (Claude Code docs, "Identity
and Access Management", tool-specific permission rules,
https://docs.claude.com/en/docs/claude-code/iam#tool-specific-permission-rules):

- ``Bash(npm run build)``: exactly that command;
- ``Bash(git log:*)``: any command that starts with the words ``git log``;
- ``Bash(git * main)``: a ``*`` matches any run of characters (newer CLIs' wildcard form).

The tool of a scoped grant is not denied (its calls are pre-approved for the pattern only,
where the agent enforces rules), and the audit reads what actually executed: every program
a call's shell started must match a rule of the grant (`command_matches`).
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from collections.abc import Iterable

import msgspec

__all__ = ["Grant", "parse_grant", "grants_by_tool", "command_matches", "command_words", "granted_by", "SHELLS"]

_RULE = re.compile(r"^(?P<tool>[^()\s]+)\((?P<rule>[^()]*)\)$")

SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ash", "ksh", "mksh", "busybox"})
"""Programs that are a shell tool's own interpreter: running one is the tool, not a command."""


class Grant(msgspec.Struct, frozen=True, kw_only=True):
    """One entry of an arm's grant, parsed.

    Attributes:
        tool: the agent's tool name, e.g. ``Bash``.
        rule: the command rule, e.g. ``git log:*``; None: the whole tool is granted.
    """

    tool: str
    rule: str | None = None


def parse_grant(entry: str) -> Grant:
    """Parse one grant entry (``Bash`` or ``Bash(git log:*)``).

    Raises:
        ValueError: unbalanced parentheses or an empty rule (the message quotes the entry).
    """
    if "(" not in entry and ")" not in entry:
        return Grant(tool=entry)
    found = _RULE.match(entry)
    if found is None or not found["rule"].strip():
        raise ValueError(f"grant {entry!r}: expected TOOL or TOOL(RULE), e.g. Bash(git log:*)")
    return Grant(tool=found["tool"], rule=found["rule"].strip())


def grants_by_tool(entries: Iterable[str], *, strict: bool = True) -> dict[str, tuple[str, ...] | None]:
    """Each granted tool and its rules; None when some entry grants the whole tool.

    Args:
        entries: an arm's grant.
        strict: raise on a malformed entry; otherwise keep it as a bare tool name (a
            recorded grant is read as it was, never refused: detectors over old ledgers).

    Raises:
        ValueError: a malformed entry (see `parse_grant`), when ``strict``.
    """
    out: dict[str, tuple[str, ...] | None] = {}
    for entry in entries:
        try:
            grant = parse_grant(entry)
        except ValueError:
            if strict:
                raise
            grant = Grant(tool=entry)
        if grant.rule is None or out.get(grant.tool, ()) is None:
            out[grant.tool] = None
        else:
            out[grant.tool] = (*out.get(grant.tool, ()), grant.rule)
    return out


def granted_by(tool: str, granted: Iterable[str]) -> bool:
    """True when ``tool`` is one of the ``granted`` tool names, or an MCP server's tool
    (``mcp__SERVER__NAME``) whose server ``mcp__SERVER`` is granted (Claude Code's rule for
    MCP servers, same reference as the module's)."""
    granted = set(granted)
    if tool in granted:
        return True
    server, sep, _ = tool.rpartition("__")
    return bool(sep) and tool.startswith("mcp__") and server.count("__") == 1 and server in granted


def command_words(argv: list[str]) -> str:
    """The command line an exec ran, as a rule sees it: the program's base name, then its
    arguments, joined by single spaces (``/usr/bin/git log -1`` -> ``git log -1``)."""
    if not argv:
        return ""
    return " ".join([posixpath.basename(argv[0]), *argv[1:]])


def command_matches(rule: str, argv: list[str]) -> bool:
    """True when an executed program's argv is within a grant rule.

    Args:
        rule: ``PREFIX:*`` (the words of PREFIX, then anything), a pattern with ``*``, or an
            exact command.
        argv: the argv of a ``process.exec``.
    """
    line = command_words(argv)
    if rule.endswith(":*"):
        prefix = rule[:-2].strip()
        return line == prefix or line.startswith(prefix + " ")
    if "*" in rule:
        return fnmatch.fnmatchcase(line, rule)
    return line == rule.strip()
