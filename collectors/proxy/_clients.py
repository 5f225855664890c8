"""Which chamber process made a proxied connection: the thin I/O behind the lookup.

The proxy sees a connection's client as ``ip:port`` on the chamber's network. In the
chamber's network namespace, the TCP socket whose local end that is and whose remote end
is the proxy has an inode; the chamber's processes holding that inode (a
``socket:[inode]`` link in ``/proc/PID/fd``, walked over
`collectors.procfs.HostPids.members`) made the connection, or were given it.

The socket is found by one exact NETLINK_SOCK_DIAG request (`collectors.proxy._sockdiag`)
on a netlink socket made inside the chamber's namespace (``setns`` in a short-lived
thread: root only), tens of microseconds; where that socket cannot be made, by the
namespace's TCP table, ``/proc/<init>/net/tcp`` and ``tcp6``
(`collectors.procfs.parse_proc_net_tcp`), whose every read walks the kernel's whole hash
table (milliseconds). A lookup is exact at the moment it is made, and the recorder makes
it as soon as the addon says the connection was accepted: a process that has closed the
socket by then is not found, and the lookup says so.
"""

from __future__ import annotations

import ctypes
import ipaddress
import os
import socket
import threading
from collections.abc import Callable

from collectors.procfs import (TCP_STATES, HostPids, ProcfsParseError, parse_pid_stat_starttime,
                               parse_proc_net_tcp, parse_socket_link)
from collectors.proxy._exchange import ClientOwner
from collectors.proxy._sockdiag import NETLINK_SOCK_DIAG, DiagError, inet_diag_request, parse_inet_diag_reply
from ledger.events import ClientProcess

__all__ = ["ClientResolver"]

_CLK_TCK = os.sysconf("SC_CLK_TCK")  # clock ticks per second of /proc/PID/stat times
_CLONE_NEWNET = 0x40000000  # linux/sched.h
Address = tuple[str, int]


class ClientResolver:
    """``resolver("172.30.0.2:40634") -> ClientOwner``: the chamber processes that hold the
    client end of a connection to the proxy, looked up now (blocking reads of procfs and
    one netlink request; about a millisecond for a chamber of a few processes).

    Args:
        init_host_pid: the chamber's init as a host pid, asked at each lookup (None: the
            chamber has not started).
        proxy: the proxy's listening ``ip:port``, the remote end of the client's socket
            (None: not listening yet).
        proc_root: where procfs is mounted.
        sock_diag: find sockets with NETLINK_SOCK_DIAG (False: only from the TCP table).

    Attributes:
        lookups: how many lookups were made.
        table: why the TCP table is read in place of NETLINK_SOCK_DIAG ("" when it is not).
    """

    def __init__(self, init_host_pid: Callable[[], int | None], *, proxy: Callable[[], str | None],
                 proc_root: str = "/proc", sock_diag: bool = True):
        self._init, self._proxy, self._proc = init_host_pid, proxy, proc_root
        self._pids: HostPids | None = None
        self._diag: socket.socket | None = None
        self._seq = 0
        self.table = "" if sock_diag else "NETLINK_SOCK_DIAG not asked for"
        self.lookups = 0

    def __call__(self, client: str | None) -> ClientOwner:
        self.lookups += 1
        try:
            return self._lookup(client)
        except Exception as exc:  # a lookup that fails is an unattributed exchange, never a dead witness
            return ClientOwner([], f"the lookup failed: {exc!r}")

    def _lookup(self, client: str | None) -> ClientOwner:
        init, proxy = self._init(), _address(self._proxy())
        if init is None or proxy is None:
            return ClientOwner([], "the chamber was not running")
        local = _address(client)
        if local is None:
            return ClientOwner([], f"the client address {client!r} is not ip:port")
        if self._pids is None:
            self._pids = HostPids(init, proc_root=self._proc)
            if not self.table:
                self._diag, self.table = _diag_socket(f"{self._proc}/{init}/ns/net")
        inode, problem = self._inode(init, local, proxy)
        if problem is not None:
            return ClientOwner([], problem)
        holders = [p for host, chamber in self._pids.members().items() if self._holds(host, inode)
                   if (p := self._process(host, chamber)) is not None]
        if not holders:
            return ClientOwner([], f"no process of the chamber holds socket inode {inode} (it exited, or it is"
                               " outside the chamber's pid namespace)")
        return ClientOwner(sorted(holders, key=lambda p: p.pid))

    def close(self) -> None:
        """Close the netlink socket, if one was made."""
        if self._diag is not None:
            self._diag.close()
            self._diag = None

    def _inode(self, init: int, local: Address, proxy: Address) -> tuple[int, str | None]:
        """The inode of the socket from ``local`` to ``proxy``, or (0, why there is none)."""
        if self._diag is not None:
            self._seq += 1  # an IPv4 four-tuple finds a dual-stack socket's too (its IPv4-mapped ends)
            try:
                self._diag.send(inet_diag_request(local, proxy, seq=self._seq))
                found = parse_inet_diag_reply(self._diag.recv(1 << 16), seq=self._seq)
            except (OSError, DiagError) as exc:
                return 0, f"NETLINK_SOCK_DIAG failed: {exc}"
            if found is None:
                return 0, f"no socket from {local[0]}:{local[1]} to the proxy in the chamber (gone)"
            if not found.inode:
                return 0, f"the socket from {local[0]}:{local[1]} was closed ({TCP_STATES.get(found.state, found.state)})"
            return found.inode, None
        ends = []
        for name in ("tcp", "tcp6"):
            path = f"{self._proc}/{init}/net/{name}"
            try:
                with open(path) as f:
                    ends += [s for s in parse_proc_net_tcp(f.read()) if s.local == local and s.remote == proxy]
            except (OSError, ProcfsParseError) as exc:
                return 0, f"cannot read {path}: {exc}"
            if ends:
                break
        if not ends:
            return 0, f"no socket from {local[0]}:{local[1]} to the proxy in the chamber's TCP table (gone)"
        inode = next((s.inode for s in ends if s.inode), 0)
        if not inode:
            return 0, f"the socket from {local[0]}:{local[1]} was closed ({TCP_STATES.get(ends[0].state, ends[0].state)})"
        return inode, None

    def _holds(self, host_pid: int, inode: int) -> bool:
        fds = f"{self._proc}/{host_pid}/fd"
        try:
            names = os.listdir(fds)
        except OSError:  # gone, or not ours to read
            return False
        for name in names:
            try:
                if parse_socket_link(os.readlink(f"{fds}/{name}")) == inode:
                    return True
            except OSError:
                continue
        return False

    def _process(self, host_pid: int, chamber_pid: int) -> ClientProcess | None:
        """The holder as it is now (its pid checked again: a host pid reused meanwhile is not it)."""
        assert self._pids is not None
        try:
            with open(f"{self._proc}/{host_pid}/stat") as f:
                start = parse_pid_stat_starttime(f.read())
        except (OSError, ProcfsParseError):
            return None
        if self._pids.identify(host_pid) != chamber_pid:
            return None
        try:
            exe: str | None = os.readlink(f"{self._proc}/{host_pid}/exe")
        except OSError:
            exe = None
        return ClientProcess(pid=chamber_pid, host_pid=host_pid, start_time_ns=start * 1_000_000_000 // _CLK_TCK,
                             exe=exe)


def _diag_socket(netns: str) -> tuple[socket.socket | None, str]:
    """A NETLINK_SOCK_DIAG socket of the network namespace ``netns`` (a socket answers for
    the namespace it was made in), made by a thread of its own that enters the namespace
    (``setns``, root only) and leaves it; (None, why) when it cannot be made."""
    made: list[socket.socket | str] = []

    def make() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        try:
            own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            target = os.open(netns, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            made.append(f"cannot open {netns}: {exc}")
            return
        try:
            if libc.setns(target, _CLONE_NEWNET) != 0:
                made.append(f"setns({netns}): {os.strerror(ctypes.get_errno())}")
                return
            try:
                made.append(socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC,
                                          NETLINK_SOCK_DIAG))
            except OSError as exc:
                made.append(f"NETLINK_SOCK_DIAG: {exc}")
            finally:
                libc.setns(own, _CLONE_NEWNET)  # if it failed, the thread ends in the chamber's namespace
        finally:
            os.close(own)
            os.close(target)

    thread = threading.Thread(target=make, name="caisson-sock-diag")
    thread.start()
    thread.join()
    sock = made[0] if made else "the thread made nothing"
    if isinstance(sock, str):
        return None, sock
    sock.settimeout(1.0)
    return sock, ""


def _address(client: str | None) -> Address | None:
    """``"172.30.0.2:40634"`` or ``"[::ffff:172.30.0.2]:40634"`` -> (address, port), an
    IPv4-mapped address as its IPv4 form; None when it is neither."""
    host, sep, port = (client or "").rpartition(":")
    if not sep or not port.isascii() or not port.isdigit():
        return None
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip), int(port)
