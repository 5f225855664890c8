"""The eBPF parser's model of each process's fd table, for the backend whose kernel side gives
no paths (bpftrace): which path each fd was opened at, so a name relative to a dirfd, or
through ``/proc/self/fd/N/``, is placed where the kernel resolved it; sans-IO.

An fd is known from the successful open that returned it; it follows ``dup``, ``dup2``,
``dup3``, ``fcntl`` (``F_DUPFD``, ``F_DUPFD_CLOEXEC``, ``F_SETFD``), ``ioctl``
(``FIOCLEX``, ``FIONCLEX``), ``close`` and ``close_range``; a fork copies the table, a clone
with ``CLONE_FILES`` shares it, a successful exec unshares it and closes its close-on-exec
fds. An fd the model did not see made (received over a unix socket, inherited from before
the witness, made by a call it does not follow) is not in it: `FdTables.path` says None, and
the name is unresolved, never guessed. Flag values: include/uapi/asm-generic/fcntl.h,
include/uapi/linux/close_range.h, include/uapi/linux/sched.h, include/uapi/asm-generic/ioctls.h
(x86_64 and arm64 share them).
"""

from __future__ import annotations

__all__ = ["FdTables", "O_CLOEXEC"]

O_CLOEXEC = 0o2000000
_F_DUPFD, _F_SETFD, _F_DUPFD_CLOEXEC = 0, 2, 1030
_FD_CLOEXEC = 1
_FIONCLEX, _FIOCLEX = 0x5450, 0x5451
_CLOSE_RANGE_UNSHARE, _CLOSE_RANGE_CLOEXEC = 2, 4
_CLONE_FILES, _CLONE_THREAD = 0x400, 0x10000

_Table = dict[int, tuple[str, bool]]  # fd -> (path it was opened at, close-on-exec)


class FdTables:
    """Each process's fds (by host tgid) and the paths they were opened at."""

    def __init__(self) -> None:
        self._tables: dict[int, _Table] = {}

    def path(self, tgid: int, fd: int) -> str | None:
        """The path ``fd`` of process ``tgid`` was opened at, or None when not known."""
        entry = self._tables.get(tgid, {}).get(fd)
        return entry[0] if entry else None

    def opened(self, tgid: int, fd: int, path: str | None, cloexec: bool) -> None:
        """A call returned ``fd``, a file at ``path`` (None: at a path not known)."""
        table = self._tables.setdefault(tgid, {})
        if path is None:
            table.pop(fd, None)
        else:
            table[fd] = (path, cloexec)

    def called(self, tgid: int, name: str, ret: int, a0: int, a1: int, a2: int) -> None:
        """A call that changes the table returned ``ret`` (a -errno leaves it as it was).

        ``close``, ``close_range`` and ``ioctl`` are read at their entry (``ret`` 0): a close
        frees its fd whatever it returns, and an ioctl of a closed fd changes nothing known.

        Args:
            name: ``dup``, ``dup2``, ``dup3``, ``fcntl``, ``ioctl``, ``close`` or ``close_range``.
            a0, a1, a2: its arguments (dup3: oldfd, newfd, flags; fcntl: fd, cmd, arg;
                close_range: first, last, flags; ioctl: fd, request).
        """
        if ret < 0:
            return
        table = self._tables.setdefault(tgid, {})
        if name == "close":
            table.pop(a0, None)
        elif name in ("dup", "dup2", "dup3") or name == "fcntl" and a1 in (_F_DUPFD, _F_DUPFD_CLOEXEC):
            cloexec = name == "dup3" and bool(a2 & O_CLOEXEC) or name == "fcntl" and a1 == _F_DUPFD_CLOEXEC
            if name in ("dup2", "dup3") and a0 == a1:  # dup2(fd, fd) changes nothing
                return
            old = table.get(a0)
            self.opened(tgid, ret, old[0] if old else None, cloexec)
        elif name == "fcntl" and a1 == _F_SETFD or name == "ioctl" and a1 in (_FIOCLEX, _FIONCLEX):
            entry = table.get(a0)
            if entry is not None:
                table[a0] = (entry[0], bool(a2 & _FD_CLOEXEC) if name == "fcntl" else a1 == _FIOCLEX)
        elif name == "close_range":
            if a2 & _CLOSE_RANGE_UNSHARE:
                table = self._tables[tgid] = dict(table)
            last = a1 & 0xFFFFFFFF  # ~0U: every fd
            for fd in [fd for fd in table if a0 <= fd <= last]:
                if a2 & _CLOSE_RANGE_CLOEXEC:
                    table[fd] = (table[fd][0], True)
                else:
                    del table[fd]

    def forked(self, parent: int, child: int, flags: int | None) -> None:
        """``child`` was made by ``parent``: a copy of its table, or the same table with
        ``CLONE_FILES`` (``flags`` None: not known, a copy); a thread has its group's."""
        table = self._tables.setdefault(parent, {})
        if flags is not None and flags & _CLONE_THREAD:
            return
        self._tables[child] = table if flags is not None and flags & _CLONE_FILES else dict(table)

    def has(self, tgid: int) -> bool:
        return tgid in self._tables

    def executed(self, tgid: int) -> None:
        """A successful exec: the table is the process's own, less its close-on-exec fds."""
        self._tables[tgid] = {fd: e for fd, e in self._tables.get(tgid, {}).items() if not e[1]}

    def exited(self, tgid: int) -> None:
        self._tables.pop(tgid, None)
