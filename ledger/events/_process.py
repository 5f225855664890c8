"""Processes and files (the syscall witness), and the procfs witness's samples."""

from __future__ import annotations

from ledger.events._base import FileAccess, _Event

__all__ = [
    "FileChange", "FileOpen", "HostSample", "NetConnect", "NetSend", "ProcSample", "ProcessExec",
    "ProcessExit", "ProcessFork", "ProcessSyscall",
]


class ProcessExec(_Event, tag="process.exec", frozen=True, kw_only=True):
    """An execve/execveat, with its result."""

    pid: int  # pid in the chamber's namespace
    host_pid: int | None = None  # pid on the host
    ppid: int | None = None
    path: str = ""  # filename argument of execve
    argv: list[str] = []
    cwd: str | None = None
    env: dict[str, str] | None = None  # exec'd environment when the witness sees it
    result: int = 0  # 0 on success, -1 on failure
    errno: str | None = None  # e.g. "ENOENT"
    path_cut: bool = False  # the witness read only the start of ``path`` (it ends with "...")
    argv_cut: bool = False  # an argv or env string (it ends with "...") or the list (argv ends with "...") is cut


class ProcessFork(_Event, tag="process.fork", frozen=True, kw_only=True):
    """A new process (not a thread): a clone, clone3, fork or vfork that returned its pid
    to the parent (schema 14). With ``proc.sample`` it tells whether the syscall witness
    saw every process procfs saw (``witness.unseen_process``)."""

    pid: int  # the child's pid in the chamber's namespace
    host_pid: int | None = None  # the child's pid on the host
    ppid: int | None = None  # the parent's pid in the chamber's namespace
    syscall: str = ""  # clone | clone3 | fork | vfork; "" when the witness does not say
    flags: list[str] = []  # the CLONE_* flags as the kernel spells them (e.g. "CLONE_UNTRACED")


class ProcessExit(_Event, tag="process.exit", frozen=True, kw_only=True):
    """A process ended: ``+++ exited with N +++`` or ``+++ killed by SIG +++``."""

    pid: int
    host_pid: int | None = None
    code: int | None = None
    signal: str | None = None


class FileOpen(_Event, tag="file.open", frozen=True, kw_only=True):
    """An open/openat/creat, path as the chamber saw it (resolved against cwd)."""

    pid: int
    host_pid: int | None = None
    syscall: str = "openat"
    path: str
    flags: str = ""  # e.g. "O_RDONLY|O_CLOEXEC"
    access: FileAccess = "r"
    result: int | None = None  # the fd, or None on failure
    errno: str | None = None
    real_path: str | None = None  # the kernel's path of the opened file (-yy), symlinks followed; None: as path
    path_cut: bool = False  # the witness read only the start of the name: ``path`` stops there, with "..."
    # ``path`` is the name as given: relative to, or through (/proc/self/fd/N/...), a directory
    # the witness does not know
    unresolved: bool = False
    real_path_cut: bool = False  # the kernel's path of the opened file is longer than the witness reads


class FileChange(_Event, tag="file.change", frozen=True, kw_only=True):
    """unlink, rename, mkdir, chmod, truncate and similar calls that change the tree."""

    pid: int
    host_pid: int | None = None
    syscall: str
    path: str
    target: str | None = None  # second path (rename, link, symlink)
    result: int = 0
    errno: str | None = None
    path_cut: bool = False  # ``path`` or a file ``target`` (not a symlink's text) is cut, as `FileOpen`'s
    unresolved: bool = False  # ``path`` or a file ``target`` is unresolved, as `FileOpen`'s


class NetConnect(_Event, tag="net.connect", frozen=True, kw_only=True):
    """A connect() as the strace witness saw it."""

    pid: int
    host_pid: int | None = None
    family: str  # AF_INET | AF_INET6 | AF_UNIX
    address: str
    port: int | None = None
    result: int = 0
    errno: str | None = None


class NetSend(_Event, tag="net.send", frozen=True, kw_only=True):
    """A send to an explicit destination, no connect() needed: sendto, sendmsg or sendmmsg
    with an address (a UDP datagram, a TCP Fast Open SYN with data: ``MSG_FASTOPEN``).
    One event per message that names a destination (sendmmsg may name several)."""

    pid: int
    host_pid: int | None = None
    syscall: str = "sendto"  # sendto | sendmsg | sendmmsg
    family: str  # AF_INET | AF_INET6 | AF_UNIX | ...
    address: str  # IP text, sun_path, or "" for other families
    port: int | None = None
    flags: str = ""  # as strace printed them, e.g. "MSG_FASTOPEN"; "0" for none
    result: int = 0  # bytes (sendto, sendmsg) or messages (sendmmsg) sent; -1 on failure
    errno: str | None = None


class ProcessSyscall(_Event, tag="process.syscall", frozen=True, kw_only=True):
    """A traced syscall with no kind of its own: io_uring, file handles, mount-like
    calls, ptrace, process_vm_readv, memfd_create (the witness's audit, docs/architecture.md)."""

    pid: int
    host_pid: int | None = None
    syscall: str
    args: list[str] = []  # the arguments as the witness printed them (process_vm_*: buffer contents as sizes)
    result: int | None = None  # the return value; None when the call never returned
    errno: str | None = None
    denied: bool = False  # refused by the chamber's policy, not run by the kernel (strace's (INJECTED))


class ProcSample(_Event, tag="proc.sample", frozen=True, kw_only=True):
    """One process of the chamber's tree at one procfs tick."""

    pid: int
    host_pid: int | None = None
    start_time_ns: int = 0  # process start, ns since boot; with pid, a unique key
    ppid: int | None = None  # the parent's pid in the chamber's namespace (None before schema 14)
    name: str = ""
    cpu_ns: int = 0  # user + system CPU time, ns
    rss_bytes: int = 0


class HostSample(_Event, tag="host.sample", frozen=True, kw_only=True):
    """The host at one procfs tick: the evidence for ``host_stalled``."""

    load1: float = 0.0
    cpu_steal_ratio: float | None = None  # steal / total over the last interval
    psi: dict[str, float] = {}  # "cpu.some.avg10" -> percent, when /proc/pressure exists
    timer_lateness_ns: int = 0  # how late this tick fired after its deadline, ns
    # The worst a thread that only sleeps on its own 50 ms grid woke late since the previous
    # sample, ns: a stop or starvation of the recorder while a tick was being sampled or
    # sent, which the tick's lateness cannot show (0 before schema 13).
    stall_ns: int = 0
    interval_ns: int = 0  # the configured sampling interval, ns
