"""What a shell tool call executed, from the strace witness's ``process.exec`` events.

The transcript says which command the model asked for; strace says which programs ran.
A call is tied to the shell that ran it by its command text: Claude Code runs a Bash call
as ``/bin/bash -c "... eval 'COMMAND' ..."``, so the shell whose ``-c`` script holds the
command (raw or shell-quoted) is the call's shell, the k-th such shell for the k-th call
with that command. The call's executions are that shell's process tree: execs by the
shell's own pid (``exec`` replaces it), by its descendants (``ppid`` chains through exec'd
processes), and, while the shell runs (between its exec and its exit in the ledger's
order), execs whose parent never exec'd (a forked subshell): strace's own window.
Transcript records carry no execution time (they are read when the agent prints them), so
the window comes from strace, not from the transcript.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Sequence

import msgspec

from caisson.grants import SHELLS, command_matches
from ledger import Record
from ledger.events import ProcessExec, ProcessExit

__all__ = ["ShellRun", "shell_runs", "outside_rules"]


class ShellRun(msgspec.Struct, frozen=True, kw_only=True):
    """The shell that ran one call, and the ``process.exec`` records of its process tree
    after it, in ledger order."""

    shell: Record
    execs: list[Record]


def _quoted_forms(command: str) -> tuple[str, ...]:
    return (command, shlex.quote(command), "'" + command.replace("'", "'\\''") + "'")


def _is_shell(event: ProcessExec) -> bool:
    return bool(event.argv) and posixpath.basename(event.argv[0]) in SHELLS


def shell_runs(records: Sequence[Record], commands: Sequence[str]) -> list[ShellRun | None]:
    """The shell run of each command, in order (None: strace shows no shell that ran it).

    Args:
        records: the run's records in ledger order.
        commands: the commands of the shell tool calls, in transcript order.
    """
    execs = [r for r in records if isinstance(r.event, ProcessExec) and r.event.result == 0]
    exits = {r.event.pid: r.seq for r in records if isinstance(r.event, ProcessExit)}
    exec_pids = {r.event.pid for r in execs}
    used: set[int] = set()
    out: list[ShellRun | None] = []
    for command in commands:
        forms = _quoted_forms(command) if command else ()
        shell = next((r for r in execs if r.seq not in used and _is_shell(r.event)
                      and any(f in arg for arg in r.event.argv[1:] for f in forms)), None)
        if shell is None:
            out.append(None)
            continue
        used.add(shell.seq)
        end = exits.get(shell.event.pid, records[-1].seq if records else shell.seq)
        tree = {shell.event.pid}
        members: list[Record] = []
        for r in execs:
            e = r.event
            if r.seq <= shell.seq:
                continue
            while_running = r.seq <= end
            # a child of the tree, at any time (a background job outlives the shell); while the
            # shell runs, also its own pid re-exec'ing and forks whose parent never exec'd
            if e.ppid in tree or (while_running and (e.pid in tree or e.ppid not in exec_pids)):
                tree.add(e.pid)
                members.append(r)
        out.append(ShellRun(shell=shell, execs=members))
    return out


def outside_rules(run: ShellRun, rules: Sequence[str]) -> list[Record]:
    """The execs of a call's tree that no rule covers: not a shell, not matching a rule, and
    not started (directly or not) by a program that matched one."""
    covered: set[int] = set()
    bad: list[Record] = []
    for r in run.execs:
        e = r.event
        if e.ppid in covered:
            covered.add(e.pid)
        elif any(command_matches(rule, e.argv) for rule in rules):
            covered.add(e.pid)
        elif not _is_shell(e):
            bad.append(r)
    return bad
