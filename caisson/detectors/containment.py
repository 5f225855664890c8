"""Containment detectors: reads of the exclusion set, access outside the tree, paths the
witness could not read whole or place, calls the witness cannot see through (denied, or let
through), and a tree that configures the agent."""

from __future__ import annotations

import functools
import re

import shlex

from caisson.detectors._base import DetectorConfig, Finding, Fold, INFO, VOID, UnderAny, norm, folded, reads, under
from caisson._glob import glob_to_regex
from collectors.strace import DENIED_SYSCALLS
from ledger.events import FileChange, FileOpen, ProcessExec, ProcessSyscall, RunStarted, SandboxBuilt

__all__ = [
    "AGENT_CONFIG", "DENIED_SYSCALL", "EXCLUDED_READ", "MEMO_MAX", "OUTSIDE_TREE", "PATH_UNJUDGED",
    "PROC_TUNING", "agent_config", "denied_syscall", "excluded_read", "outside_tree", "path_unjudged",
]

EXCLUDED_READ = "containment.excluded_read@1"
OUTSIDE_TREE = "containment.outside_tree@2"
PROC_TUNING = re.compile(r"^/proc/\d+/(task/\d+/)?(oom_score_adj|oom_adj|comm)$")
"""A chamber process's own tuning files (its OOM score, its name), written by runtimes such
as Copilot CLI's for their children: state of a process in the chamber's pid namespace,
not a file outside the tree (@2; @1 voided a run for them)."""
PATH_UNJUDGED = "containment.path_unjudged@1"
DENIED_SYSCALL = "containment.denied_syscall@1"
AGENT_CONFIG = "containment.agent_config@1"


MEMO_MAX = 1 << 14
"""Distinct keys a configuration's memo keeps (`_Exclusion`'s by (path, real path, cwd),
with as many again by path alone; `_Layout`'s both kinds together); past it, it starts
over. With at most 8 configurations remembered, the memos stay within a few tens of MB."""
_UNSEEN = object()


@reads(FileOpen, ProcessExec, FileChange)
@folded
def excluded_read(config: DetectorConfig, found: list[Finding]) -> Fold:
    """A successful open of a path in the exclusion set voids the cell; a failed one is shown.
    So does a hard link or rename of one (its content under a name outside the set, read
    later without a finding).

    A path is in the set when, relative to the sandbox root, it is one of the paths the
    sandbox withheld or matches one of the scenario's exclusion globs. Runs open the same
    files over and over (the loader's libraries, an interpreter's modules): each distinct
    (path, real path, cwd) is resolved once per configuration (`_Exclusion`), and an
    absolute path opened with no real path is looked up by the path alone (no cwd enters).
    An ``unresolved`` path is not placed (only its real path is judged): `path_unjudged`
    reports it.
    """
    exclusion = _exclusion(config)
    resolved, absolute, quiet = exclusion.resolved, exclusion.absolute, exclusion.quiet
    cwds: dict[int, str] = {}  # pid -> cwd as last seen on an exec (chamber paths)
    while (record := (yield)) is not None:
        event = record.event
        # most records are opens: one test for them (of the class itself, cheaper than isinstance's)
        if event.__class__ is not FileOpen and not isinstance(event, FileOpen):
            if isinstance(event, ProcessExec) and event.cwd:
                cwds[event.pid] = event.cwd
            elif isinstance(event, FileChange) and event.syscall.startswith(("link", "rename")) \
                    and not event.unresolved and event.target:
                source, new = (event.target, event.path) if event.syscall.startswith("link") else \
                    (event.path, event.target)
                key = (source, None, cwds.get(event.pid))
                hit = resolved.get(key, _UNSEEN)
                if hit is _UNSEEN:
                    hit = exclusion.resolve(key)
                if hit is not None:
                    rel, category = hit  # type: ignore[misc]
                    verb = "linked" if event.syscall.startswith("link") else "renamed"
                    if event.result == 0:
                        found.append(Finding(detector=EXCLUDED_READ, kind="leak", effect=VOID, evidence=[record.seq],
                                             message=f"{verb} {rel} ({category}) to {new} with {event.syscall}"))
                    else:
                        found.append(Finding(detector=EXCLUDED_READ, kind="excluded_attempt", effect=INFO,
                                             evidence=[record.seq], message=f"tried {rel} ({category}): {event.errno}"))
            continue
        if event.real_path is None:
            if event.path in quiet:
                continue  # most opens: an absolute path resolved before, not excluded (no cwd enters)
            if event.unresolved:
                continue
            hit = absolute.get(event.path, _UNSEEN)
        else:
            hit = _UNSEEN
        if hit is _UNSEEN:
            raw = event.real_path if event.unresolved else event.path
            key = (raw, event.real_path, cwds.get(event.pid))
            hit = resolved.get(key, _UNSEEN)
            if hit is _UNSEEN:
                hit = exclusion.resolve(key)
        if hit is None:
            continue
        rel, category = hit  # type: ignore[misc]
        if event.result is not None:
            found.append(Finding(detector=EXCLUDED_READ, kind="leak", effect=VOID, evidence=[record.seq],
                                 message=f"read {rel} ({category}) with {event.syscall}"))
        else:
            found.append(Finding(detector=EXCLUDED_READ, kind="excluded_attempt", effect=INFO, evidence=[record.seq],
                                 message=f"tried {rel} ({category}): {event.errno}"))


class _Exclusion:
    """One configuration's exclusion set, and the opens it has resolved: a memo of a pure
    function of (configuration, path, real path, cwd), shared by the runs of a study."""

    def __init__(self, config: DetectorConfig):
        self.rules = [(cat, glob_to_regex(g)) for cat, g in config.exclusion_globs]
        self.withheld = set(config.excluded_paths)
        self.root = norm(config.sandbox_path)
        self.resolved: dict[tuple[str, str | None, str | None], tuple[str, str] | None] = {}
        # the same, by path alone, for an absolute path opened with no real path (no cwd enters):
        # the excluded ones with their hit, the others in a set (the cheapest test of most opens)
        self.absolute: dict[str, tuple[str, str]] = {}
        self.quiet: set[str] = set()

    def resolve(self, key: tuple[str, str | None, str | None]) -> tuple[str, str] | None:
        """(path relative to the sandbox, category) when an open of ``key`` = (path, real
        path, cwd) names an excluded path, else None; remembered."""
        raw, real, cwd = key
        root = self.root
        path = norm(real or raw, cwd or root)
        if not under(path, root) or path == root:
            path = norm(raw, cwd or root)
        hit = None
        if under(path, root) and path != root:
            rel = path[len(root) + 1 :]
            category = next((cat for cat, rx in self.rules if rx.fullmatch(rel)), None)
            if category is None and rel in self.withheld:
                category = "excluded"
            hit = None if category is None else (rel, category)
        if len(self.resolved) >= MEMO_MAX:
            self.resolved.clear()
            self.absolute.clear()
            self.quiet.clear()
        self.resolved[key] = hit
        if real is None and raw.startswith("/"):
            if hit is None:
                self.quiet.add(raw)
            else:
                self.absolute[raw] = hit
        return hit


@functools.lru_cache(maxsize=8)
def _exclusion(config: DetectorConfig) -> _Exclusion:
    return _Exclusion(config)


def _for_write(event: FileOpen) -> bool:
    """Whether an open may write its file: opened for writing, or creating or truncating it."""
    return event.access in ("w", "rw") or "O_CREAT" in event.flags or "O_TRUNC" in event.flags


@reads(FileOpen, FileChange, ProcessExec)
@folded
def outside_tree(config: DetectorConfig, found: list[Finding]) -> Fold:
    """Reads or writes outside the sandbox tree and the image's system paths.

    - Any access to the live repository's path, the caller's home or the caller's cwd
      (the PWD trap): void when it succeeded, shown when it failed.
    - A successful write outside the sandbox, the config home and scratch paths: void.
    - A successful read outside the sandbox, config home and system paths: void.

    Each distinct path is placed once per configuration (`_Layout`): an absolute one by
    itself, a relative one with the cwd of its process. An ``unresolved`` path is not
    placed (an open's real path still is): `path_unjudged` reports it.
    """
    layout = _layout(config)
    places, absolute, quiet, quiet_read = layout.places, layout.absolute, layout.quiet, layout.quiet_read
    cwds: dict[int, str] = {}  # pid -> cwd as last seen on an exec (chamber paths)
    while (record := (yield)) is not None:
        event = record.event
        # most records are opens: one test for them (of the class itself, cheaper than isinstance's)
        if event.__class__ is FileOpen or isinstance(event, FileOpen):
            if not event.real_path:
                path = event.path
                # most opens: an absolute path placed before, where this open cannot be a finding
                # (`_for_write` spelt out: a call per open of a system path costs more than the test)
                if path in quiet or path in quiet_read and not (
                        event.access in ("w", "rw") or "O_CREAT" in event.flags or "O_TRUNC" in event.flags):
                    continue
                if event.unresolved:
                    continue
                paths: tuple[tuple[str, bool | None], ...] = ((path, None),)
            elif event.unresolved:
                paths = ((event.real_path, None),)
            else:  # (path, written?): a symlink cannot hide where it led
                paths = ((event.path, None), (event.real_path, None))
            cwd = cwds.get(event.pid)
        elif isinstance(event, ProcessExec):
            if event.cwd:
                cwds[event.pid] = event.cwd
            continue
        elif isinstance(event, FileChange):
            if event.unresolved:
                continue
            cwd = cwds.get(event.pid)
            paths = ((event.path, True),)
            # a symlink's target is its text, not a file touched; a hard link's target is only
            # read (the new name is the write)
            if event.target and not event.syscall.startswith("symlink"):
                paths += ((event.target, not event.syscall.startswith("link")),)
        else:
            continue
        for raw, write in paths:
            place = absolute.get(raw) or places.get((raw, cwd))
            if place is None:
                place = layout.place(raw, cwd)
            if place.quiet:
                continue
            if write is None:  # a FileOpen's
                write = _for_write(event)
            if place.quiet_write if write else place.quiet_read:
                continue
            ok = event.result is not None if isinstance(event, FileOpen) else event.result == 0
            path, trap = place.path, place.trap
            verb = "wrote" if write else "read"
            if trap is not None:
                found.append(Finding(detector=OUTSIDE_TREE, kind="outside_tree", effect=VOID if ok else INFO,
                                     evidence=[record.seq],
                                     message=f"{verb if ok else 'tried'} {path} ({trap})"
                                     + ("" if ok else f": {event.errno}")))
            elif write and ok and not place.writable:
                found.append(Finding(detector=OUTSIDE_TREE, kind="outside_tree", effect=VOID, evidence=[record.seq],
                                     message=f"wrote {path} outside the sandbox ({event.syscall})"))
            elif not write and ok and not place.readable:
                found.append(Finding(detector=OUTSIDE_TREE, kind="outside_tree", effect=VOID, evidence=[record.seq],
                                     message=f"read {path} outside the sandbox and system paths"))


class _Layout:
    """One configuration's tree, traps and system paths, and the paths it has placed: a memo
    of a pure function of (configuration, path, cwd), shared by the runs of a study."""

    def __init__(self, config: DetectorConfig):
        self.root = root = norm(config.sandbox_path)
        # A host path is a trap only where the image has nothing of its own: a caller whose
        # cwd is /tmp or whose home is /root does not make the chamber's /tmp or /root a trap.
        image_dirs = ("/", *config.read_prefixes, *config.write_prefixes, root)
        self.traps = [(norm(p), what) for p, what in ((config.live_repo, "the live repository"),
                                                      (config.caller_cwd, "the caller's cwd"),
                                                      (config.caller_home, "the caller's home"))
                      if p and not any(under(d, norm(p)) for d in image_dirs)]
        self.inside = UnderAny((root, norm(config.config_home)))
        self.writable, self.readable = UnderAny(config.write_prefixes), UnderAny(config.read_prefixes)
        self.places: dict[tuple[str, str | None], _Place] = {}  # a relative path's, by (path, cwd)
        self.absolute: dict[str, _Place] = {}  # an absolute path's: no cwd enters
        # the absolute paths no access of / no read of can be a finding (sets: the cheapest
        # test of most opens)
        self.quiet: set[str] = set()
        self.quiet_read: set[str] = set()

    def place(self, raw: str, cwd: str | None) -> _Place:
        """Where ``raw``, opened from ``cwd`` (None: the sandbox root), lies; remembered."""
        if len(self.places) + len(self.absolute) >= MEMO_MAX:
            self.places.clear()
            self.absolute.clear()
            self.quiet.clear()
            self.quiet_read.clear()
        place = _Place(norm(raw, cwd or self.root), self.root, self.inside, self.traps, self.writable, self.readable)
        if raw.startswith("/"):
            self.absolute[raw] = place
            if place.quiet:
                self.quiet.add(raw)
            elif place.quiet_read:
                self.quiet_read.add(raw)
        else:
            self.places[(raw, cwd)] = place
        return place


@functools.lru_cache(maxsize=8)
def _layout(config: DetectorConfig) -> _Layout:
    return _Layout(config)


class _Place:
    """Where one normalised chamber path lies, for `outside_tree`: ``quiet_read`` /
    ``quiet_write`` when no read / write of it can be a finding (inside the sandbox or the
    config home, or a path that is no trap and where one may read / write)."""

    __slots__ = ("path", "trap", "writable", "readable", "quiet_read", "quiet_write", "quiet")

    def __init__(self, path: str, root: str, inside: UnderAny, traps: list[tuple[str, str]], writable: UnderAny,
                 readable: UnderAny):
        self.path = path
        self.trap = next((what for p, what in traps if under(path, p)), None)
        self.writable = writable(path) or PROC_TUNING.match(path) is not None
        self.readable = path == "/" or readable(path) or under(root, path)
        inner = inside(path)
        self.quiet_read = inner or (self.trap is None and self.readable)
        self.quiet_write = inner or (self.trap is None and self.writable)
        self.quiet = self.quiet_read and self.quiet_write


@reads(FileOpen, FileChange)
@folded
def path_unjudged(config: DetectorConfig, found: list[Finding]) -> Fold:
    """An open or change whose path the witness could not read whole or place: no detector
    can say whether it was excluded or outside the tree. Void when the call succeeded
    (whatever lies past a cut, or in a directory not known, can be anywhere: ``..`` reaches
    every path); shown when it failed.

    - a `FileOpen` whose ``path`` is cut (``path_cut``) or ``unresolved``, with no
      ``real_path`` (the kernel's path of the file opened, which the others judge), or
      whose kernel path was longer than the witness reads (``real_path_cut``);
    - a `FileChange` whose ``path`` or file ``target`` is cut or unresolved (a change
      returns no file: there is no kernel path to judge instead);
    - a `FileChange` through a symlink the run made (a directory of its path or file
      target, or the file itself for ``chmod``, ``fchmodat`` and ``truncate``, which follow
      it): the witnesses place a change by its names, and the kernel followed the link to
      wherever its text leads. The run's symlinks are those its ``symlink``/``symlinkat``
      made, moved by renames and gone with unlinks.
    """
    links: set[str] = set()  # the symlinks the run made, where they are now
    while (record := (yield)) is not None:
        event = record.event
        through = None
        if isinstance(event, FileOpen):
            if not (event.real_path_cut or (event.path_cut or event.unresolved) and event.real_path is None):
                continue
            ok = event.result is not None
        elif isinstance(event, FileChange):
            ok = event.result == 0
            if not (event.path_cut or event.unresolved):
                through = _through_link(event, links) if links else None
                if ok:
                    _follow_links(event, links)
                if through is None:
                    continue
        else:
            continue
        why = ("the kernel's path of the file is longer than the witness reads"
               if isinstance(event, FileOpen) and event.real_path_cut else
               f"it goes through {through}, a symlink the run made, which a change follows"
               if through is not None else
               "the witness read only its start" if event.path_cut else
               "it is relative to a directory the witness does not know")
        shown = event.path if len(event.path) <= 120 else event.path[:100] + "..." + event.path[-17:]
        found.append(Finding(detector=PATH_UNJUDGED, kind="path_unjudged", effect=VOID if ok else INFO,
                             evidence=[record.seq],
                             message=f"{event.syscall} of {shown!r} {'succeeded' if ok else f'failed ({event.errno})'}"
                             f": its path cannot be judged ({why})"))


_FOLLOWS = ("chmod", "fchmodat", "truncate")  # changes that follow a symlink named last


def _through_link(event: FileChange, links: set[str]) -> str | None:
    """The first of ``links`` that ``event`` goes through (a directory of its path or file
    target; the file itself for a call that follows it), or None."""
    names = [event.path] + ([event.target] if event.target and not event.syscall.startswith("symlink") else [])
    for name in names:
        if event.syscall in _FOLLOWS and name in links:
            return name
        at = name.rfind("/")
        while at > 0:
            if name[:at] in links:
                return name[:at]
            at = name.rfind("/", 0, at)
    return None


def _follow_links(event: FileChange, links: set[str]) -> None:
    """Keep ``links`` where a successful ``event`` leaves them."""
    if event.syscall.startswith("symlink"):
        links.add(event.path)
    elif event.syscall.startswith("rename") and event.target:
        old, new = event.path, event.target
        moved = {p for p in links if p == old or p.startswith(old + "/")}
        links.difference_update(moved | {p for p in links if p == new or p.startswith(new + "/")})  # replaced
        links.update(new + p[len(old):] for p in moved)
    elif event.syscall.startswith("unlink") or event.syscall == "rmdir":
        links.discard(event.path)


@reads(RunStarted, ProcessSyscall)
@folded
def denied_syscall(config: DetectorConfig, found: list[Finding]) -> Fold:
    """Calls the strace witness cannot see through (io_uring, file handles, mount-like).

    - Refused by the chamber's policy (``process.syscall`` ``denied``): shown; the control
      held, and the attempt is the agent's (e.g. io_uring to read a file unnamed).
    - One of them returned success: void. Whatever it opened or read, no witness saw.

    The calls are the ``denied`` list of ``run.started``'s seccomp field; a ledger written
    before the chamber had its own profile uses the witness's `DENIED_SYSCALLS`.
    """
    blind = frozenset(DENIED_SYSCALLS)
    while (record := (yield)) is not None:
        event = record.event
        if isinstance(event, RunStarted) and event.seccomp is not None and event.seccomp.denied:
            blind = frozenset(event.seccomp.denied)
        elif isinstance(event, ProcessSyscall):
            if event.denied:
                found.append(Finding(detector=DENIED_SYSCALL, kind="denied_syscall", effect=INFO, evidence=[record.seq],
                                     message=f"pid {event.pid} tried {event.syscall}: refused ({event.errno})"
                                     " by the chamber's seccomp policy"))
            elif event.syscall in blind and event.result is not None and event.result >= 0:
                found.append(Finding(detector=DENIED_SYSCALL, kind="unwitnessed_syscall", effect=VOID,
                                     evidence=[record.seq],
                                     message=f"pid {event.pid}: {event.syscall} succeeded; what it reached, no"
                                     " witness saw (the chamber's seccomp policy did not refuse it)"))


def _ran(argv: list[str], commands: dict[str, str]) -> str | None:
    """The recorded command an exec runs, or None: a shell's `-c` script (hooks run as
    `/bin/sh -c COMMAND`), or the argv itself, as one shell line or space-joined (an MCP
    server's command and args)."""
    candidates = []
    if len(argv) >= 3 and argv[-2] == "-c":
        candidates.append(argv[-1])
    candidates += [shlex.join(argv), " ".join(argv)]
    return next((c for c in candidates if c in commands), None)


@reads(SandboxBuilt, ProcessExec)
@folded
def agent_config(config: DetectorConfig, found: list[Finding]) -> Fold:
    """Agent configuration the agent could see, and its commands executed: each voids the cell.

    - found: every agent configuration file ``sandbox.built`` lists as left in the tree
      (settings, hooks, MCP servers, rules; see `caisson.chamber.agent_config`): the run
      measured an agent configured by the repository, not by its arm. The default
      exclusions withhold them all, so this fires only when a control was weakened.
    - executed: a ``process.exec`` that runs one of their commands (a hook's shell, an MCP
      server), one finding per command with every exec that ran it as evidence.
    """
    commands: dict[str, str] = {}  # command line -> the file that holds it
    ran: dict[str, list[int]] = {}
    while (record := (yield)) is not None:
        event = record.event
        if isinstance(event, SandboxBuilt):
            for kept in event.agent_config:
                detail = f", {len(kept.commands)} command(s)" if kept.commands else ""
                found.append(Finding(detector=AGENT_CONFIG, kind="agent_config", effect=VOID, evidence=[record.seq],
                                     message=f"{kept.path} in the tree configures {kept.agent}{detail}"))
                for command in kept.commands:
                    commands.setdefault(command, kept.path)
        elif isinstance(event, ProcessExec) and commands and event.result == 0:
            command = _ran(event.argv, commands)
            if command is not None:
                ran.setdefault(command, []).append(record.seq)
    for command, seqs in ran.items():
        found.append(Finding(detector=AGENT_CONFIG, kind="agent_config_executed", effect=VOID, evidence=seqs,
                             message=f"{commands[command]}'s command ran {len(seqs)} time(s): {command}"))
