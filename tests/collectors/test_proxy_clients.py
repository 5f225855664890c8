"""Who held a proxied connection's client end (collectors/proxy/_clients.py): the lookup on a
fake /proc (the TCP table path, every way it finds nothing), then on this host's kernel
(NETLINK_SOCK_DIAG and the table alike): one process, an inherited socket, one passed with
SCM_RIGHTS, and a socket closed before the lookup."""

from __future__ import annotations

import array
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from collectors.proxy import ClientOwner, ClientResolver
from ledger.events import ClientProcess

CLK_TCK = os.sysconf("SC_CLK_TCK")
NS = "4026532001"  # the fake chamber's pid namespace
TABLE = ("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
         # 172.30.0.2:40634 -> 172.30.0.1:8080, established, inode 5001; :40640 in time-wait
         "   0: 02001EAC:9EBA 01001EAC:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 5001 1\n"
         "   1: 02001EAC:9EC0 01001EAC:1F90 06 00000000:00000000 03:0000176F 00000000     0        0 0 3\n"
         # the same local port to another remote: not the proxy's socket
         "   2: 02001EAC:9EC6 0800000A:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 5003 1\n")


def _proc(root: Path, host: int, nspid: int, *, fds: dict[int, str] = {}, ns: str = NS, start: int = 100,
          exe: str = "/usr/bin/x") -> None:
    """A fake /proc/HOST: its pid namespace, NSpid, stat (start time in ticks), fds and exe."""
    d = root / str(host)
    (d / "ns").mkdir(parents=True, exist_ok=True)
    (d / "fd").mkdir(exist_ok=True)
    for link in (d / "ns" / "pid", d / "exe"):
        link.unlink(missing_ok=True)
    (d / "ns" / "pid").symlink_to(f"pid:[{ns}]")
    (d / "exe").symlink_to(exe)
    (d / "status").write_text(f"Name:\tx\nNSpid:\t{host}\t{nspid}\n")
    (d / "stat").write_text(f"{host} (x) S 1 " + " ".join(["0"] * 17 + [str(start)] + ["0"] * 30) + "\n")
    for fd, target in fds.items():
        (d / "fd" / str(fd)).unlink(missing_ok=True)
        (d / "fd" / str(fd)).symlink_to(target)


@pytest.fixture
def chamber(tmp_path):
    """A fake /proc: the chamber's init (host 100) with its TCP table, its pid 7 (host 200)
    holding socket 5001, and a process of another container (host 300) holding one too."""
    _proc(tmp_path, 100, 1)
    (tmp_path / "100" / "net").mkdir()
    (tmp_path / "100" / "net" / "tcp").write_text(TABLE)
    (tmp_path / "100" / "net" / "tcp6").write_text(TABLE.splitlines()[0] + "\n")
    _proc(tmp_path, 200, 7, fds={0: "/dev/null", 3: "pipe:[9]", 4: "socket:[5001]"}, start=250, exe="/usr/bin/curl")
    _proc(tmp_path, 300, 7, fds={4: "socket:[5001]"}, ns="4026539999")
    return tmp_path


def resolver(root: Path, init: int | None = 100) -> ClientResolver:
    return ClientResolver(lambda: init, proxy=lambda: "172.30.0.1:8080", proc_root=str(root), sock_diag=False)


def test_the_holder_of_the_socket_from_the_client_to_the_proxy(chamber):
    curl = ClientProcess(pid=7, host_pid=200, start_time_ns=250 * 1_000_000_000 // CLK_TCK, exe="/usr/bin/curl")
    assert resolver(chamber)("172.30.0.2:40634") == ClientOwner([curl])
    assert resolver(chamber)("[::ffff:172.30.0.2]:40634") == ClientOwner([curl])  # as a dual-stack proxy sees it


def test_every_holder_in_pid_order_an_inherited_socket(chamber):
    _proc(chamber, 150, 3, fds={9: "socket:[5001]"}, exe="/usr/bin/sh")  # the parent, fd inherited by 7
    owner = resolver(chamber)("172.30.0.2:40634")
    assert [(p.pid, p.host_pid, p.exe) for p in owner.processes] == [(3, 150, "/usr/bin/sh"), (7, 200, "/usr/bin/curl")]


def test_nothing_found_says_why(chamber):
    assert resolver(chamber)("172.30.0.2:40640").unresolved == (
        "the socket from 172.30.0.2:40640 was closed (TIME_WAIT)")
    assert resolver(chamber)("172.30.0.2:40646").unresolved == (  # its socket goes elsewhere
        "no socket from 172.30.0.2:40646 to the proxy in the chamber's TCP table (gone)")
    assert resolver(chamber)("nonsense").unresolved == "the client address 'nonsense' is not ip:port"
    assert resolver(chamber, init=None)("172.30.0.2:40634").unresolved == "the chamber was not running"
    assert resolver(chamber, init=999)("172.30.0.2:40634").unresolved.startswith("cannot read ")
    (chamber / "200" / "fd" / "4").unlink()  # curl exited between the table and the walk
    assert resolver(chamber)("172.30.0.2:40634").unresolved == (
        "no process of the chamber holds socket inode 5001 (it exited, or it is outside the chamber's pid namespace)")


def test_a_host_pid_reused_outside_the_chamber_is_no_holder(chamber):
    lookup = resolver(chamber)
    assert lookup("172.30.0.2:40634").processes[0].host_pid == 200
    _proc(chamber, 200, 7, fds={4: "socket:[5001]"}, ns="4026539999")  # 200 is now another container's
    assert lookup("172.30.0.2:40634").processes == []


def test_the_table_with_garbage_or_a_failing_lookup_is_a_reason_not_a_crash(chamber):
    (chamber / "100" / "net" / "tcp").write_text(TABLE + "   3: garbage\n")
    assert "bad socket line" in resolver(chamber)("172.30.0.2:40634").unresolved

    def broken() -> int:
        raise RuntimeError("no init")

    lookup = ClientResolver(broken, proxy=lambda: "172.30.0.1:8080", proc_root=str(chamber), sock_diag=False)
    assert lookup("172.30.0.2:40634") == ClientOwner([], "the lookup failed: RuntimeError('no init')")


# --- on this host's kernel: the namespace is the host's own (init: this process) -------------

HOLD = r"""
import os, socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
forked = os.fork() if sys.argv[2] == "fork" else -1
if forked == 0:
    time.sleep(30)
    os._exit(0)
print(s.getsockname()[1], forked, flush=True)
time.sleep(30)
"""


@pytest.fixture
def listener():
    with socket.create_server(("127.0.0.1", 0)) as sock:
        yield sock


def _hold(port: int, mode: str = "one") -> tuple[subprocess.Popen, int, int]:
    """A child holding a connection to ``port`` (``fork``: and its own fork): (child, the
    connection's local port, the fork's pid or -1)."""
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(port), mode], stdout=subprocess.PIPE, text=True)
    client, forked = child.stdout.readline().split()
    return child, int(client), int(forked)


def _resolvers(port: int) -> list[ClientResolver]:
    return [ClientResolver(os.getpid, proxy=lambda: f"127.0.0.1:{port}", sock_diag=diag) for diag in (True, False)]


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="NETLINK_SOCK_DIAG in a namespace (setns) needs root")


@needs_root
def test_a_process_holding_a_connection_is_found_by_either_lookup(listener):
    port = listener.getsockname()[1]
    child, client, _ = _hold(port)
    try:
        for lookup in _resolvers(port):
            owner = lookup(f"127.0.0.1:{client}")
            assert [(p.pid, p.host_pid) for p in owner.processes] == [(child.pid, child.pid)], (lookup.table, owner)
            assert owner.processes[0].exe == os.path.realpath(sys.executable)
            lookup.close()
    finally:
        child.kill()
        child.wait()


@needs_root
def test_an_inherited_socket_has_both_holders(listener):
    port = listener.getsockname()[1]
    child, client, forked = _hold(port, "fork")
    try:
        [lookup, _] = _resolvers(port)
        assert [p.pid for p in lookup(f"127.0.0.1:{client}").processes] == sorted([child.pid, forked])
    finally:
        os.kill(forked, 9)
        child.kill()
        child.wait()


@needs_root
def test_a_socket_passed_with_scm_rights_has_its_receiver_as_a_holder(listener):
    port = listener.getsockname()[1]
    receiver = subprocess.Popen([sys.executable, "-c", RECEIVE], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        path = receiver.stdout.readline().decode().strip()
        client = socket.create_connection(("127.0.0.1", port))
        with socket.socket(socket.AF_UNIX) as unix:
            unix.connect(path)
            unix.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [client.fileno()]))])
            assert receiver.stdout.readline() == b"got\n"
        [lookup, _] = _resolvers(port)
        name = f"127.0.0.1:{client.getsockname()[1]}"
        assert sorted(p.pid for p in lookup(name).processes) == sorted([os.getpid(), receiver.pid])
        client.close()  # the sender lets go: the receiver alone holds it
        assert [p.pid for p in lookup(name).processes] == [receiver.pid]
    finally:
        receiver.kill()
        receiver.wait()


RECEIVE = r"""
import os, socket, sys, tempfile, time
path = os.path.join(tempfile.mkdtemp(), "s")
server = socket.socket(socket.AF_UNIX)
server.bind(path)
server.listen()
print(path, flush=True)
conn, _ = server.accept()
msg, fds, flags, addr = socket.recv_fds(conn, 1, 1)
print("got", flush=True)
time.sleep(30)
"""


@needs_root
def test_a_socket_closed_before_the_lookup_is_not_found(listener):
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    name = f"127.0.0.1:{client.getsockname()[1]}"
    server, _ = listener.accept()
    client.close()  # the client closes first: its end waits in FIN_WAIT2 or TIME_WAIT, no file holds it
    server.close()
    time.sleep(0.1)
    for lookup in _resolvers(port):
        assert lookup(name).unresolved in (f"the socket from {name} was closed (TIME_WAIT)",
                                           f"the socket from {name} was closed (FIN_WAIT2)"), lookup.table
