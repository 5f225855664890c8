"""What a chamber sees of the host: its own /etc network files, and its mount table.

Docker bind-mounts /etc/resolv.conf, /etc/hostname and /etc/hosts from
``/var/lib/docker/containers/<id>/`` (so the chamber's mountinfo names its container id),
names the host after the container id, and copies the host's resolver into a chamber that
has no network. A bind of the container's own at one of these paths replaces Docker's:
moby's `setupMounts` (daemon/volumes_unix.go) hands it to `Container.TrySetNetworkMount`
(container/container_unix.go), which makes it the file `NetworkMounts` mounts there,
read-only when the bind is (moby 20.10). `etc_files` makes those files.

`mountinfo_seen` reads the chamber's mount table as the chamber reads it, for the ledger.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Sequence
from pathlib import Path

__all__ = ["CHAMBER_HOSTNAME", "ETC_FILES", "etc_files", "mountinfo_seen"]

CHAMBER_HOSTNAME = "chamber"
"""The chamber's host name (its UTS name, ``$HOSTNAME`` and /etc/hostname)."""

ETC_FILES = ("resolv.conf", "hostname", "hosts")
"""The files `etc_files` makes, each mounted at ``/etc/<name>``."""

_CLONE_NEWCGROUP = 0x02000000  # linux/sched.h


def etc_files(hostname: str, nameservers: Sequence[str]) -> dict[str, bytes]:
    """The contents of `ETC_FILES` for a chamber (pure).

    Args:
        hostname: its host name.
        nameservers: its resolvers' IP addresses; none gives a resolv.conf without a
            nameserver line (resolv.conf(5): the resolver then asks the chamber's own
            loopback, where nothing answers unless the chamber runs one).
    """
    resolv = "".join(f"nameserver {ns}\n" for ns in nameservers)
    hosts = f"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t{hostname}\n"
    return {"resolv.conf": resolv.encode(), "hostname": f"{hostname}\n".encode(), "hosts": hosts.encode()}


def mountinfo_seen(host_pid: int) -> tuple[bytes, bool]:
    """``/proc/<host_pid>/mountinfo`` as that process reads it, and whether it is.

    A cgroup mount's root field (the fourth) is relative to the *reader's* cgroup namespace
    (cgroup_namespaces(7)): read from the host, a chamber in its own shows the host's
    cgroup path there. So the file is read by a thread of its own that first joins the
    process's cgroup namespace (setns(2) changes only the calling thread; it needs
    CAP_SYS_ADMIN), and then ends.

    Returns:
        (the file's bytes, True when read from the process's cgroup namespace; False: as
        the host sees it).

    Raises:
        OSError: the process is gone (or its mount table cannot be read).
    """
    out: list[tuple[bytes, bool] | OSError] = []

    def read() -> None:
        joined = False
        try:
            fd = os.open(f"/proc/{host_pid}/ns/cgroup", os.O_RDONLY | os.O_CLOEXEC)
            try:
                joined = ctypes.CDLL(None, use_errno=True).setns(fd, _CLONE_NEWCGROUP) == 0
            finally:
                os.close(fd)
        except OSError:
            pass
        try:
            out.append((Path(f"/proc/{host_pid}/mountinfo").read_bytes(), joined))
        except OSError as exc:
            out.append(exc)

    thread = threading.Thread(target=read, name="caisson-mountinfo")
    thread.start()
    thread.join()
    if isinstance(out[0], OSError):
        raise out[0]
    return out[0]
