"""Sans-IO codec of one exact socket lookup over NETLINK_SOCK_DIAG (inet_diag).

`inet_diag_request` encodes a ``SOCK_DIAG_BY_FAMILY`` request for one TCP socket named by
its four-tuple (no ``NLM_F_DUMP``: the kernel looks it up in its hash tables,
``inet_diag_find_one_icsk``, rather than walking them as ``/proc/net/tcp`` does);
`parse_inet_diag_reply` decodes the answer into the socket's inode, state and owner uid,
or None when no such socket exists. Layouts from the kernel's UAPI headers
(linux/netlink.h, linux/sock_diag.h, linux/inet_diag.h; unchanged since Linux 3.3):

- ``nlmsghdr``: u32 len, u16 type, u16 flags, u32 seq, u32 pid (host order);
- ``inet_diag_req_v2``: u8 family, u8 protocol, u8 ext, u8 pad, u32 states, sockid;
- ``inet_diag_sockid``: be16 sport, be16 dport, be32 src[4], be32 dst[4], u32 if,
  u32 cookie[2] (``INET_DIAG_NOCOOKIE``: all ones);
- ``inet_diag_msg``: u8 family, u8 state, u8 timer, u8 retrans, sockid, u32 expires,
  u32 rqueue, u32 wqueue, u32 uid, u32 inode;
- ``nlmsgerr`` (type ``NLMSG_ERROR``): s32 error (negative errno), the request's header.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from typing import Final, NamedTuple

from ledger import CaissonError

__all__ = ["NETLINK_SOCK_DIAG", "DiagError", "DiagSocket", "inet_diag_request", "parse_inet_diag_reply"]

NETLINK_SOCK_DIAG: Final = 4  # linux/netlink.h (NETLINK_INET_DIAG)
SOCK_DIAG_BY_FAMILY: Final = 20  # linux/sock_diag.h
NLMSG_ERROR: Final = 2
NLM_F_REQUEST: Final = 1
_NLMSGHDR = struct.Struct("=IHHII")
_REQ = struct.Struct("=BBBBI")  # inet_diag_req_v2 before its sockid
_SOCKID = struct.Struct(">HH16s16s")  # ports and addresses, network order; then if and cookie, host order
_SOCKID_TAIL = struct.Struct("=III")
_MSG_HEAD = struct.Struct("=BBBB")
_MSG_TAIL = struct.Struct("=IIIII")  # expires, rqueue, wqueue, uid, inode
_MSG_BYTES: Final = _MSG_HEAD.size + _SOCKID.size + _SOCKID_TAIL.size + _MSG_TAIL.size  # 72
_ALL_STATES: Final = 0xFFFFFFFF
_NOCOOKIE: Final = 0xFFFFFFFF


class DiagError(CaissonError, ValueError):
    """Raised by `parse_inet_diag_reply` on bytes that are not an answer to the request.

    Attributes:
        errno: the kernel's error (positive errno) when it answered one, else None.
    """

    def __init__(self, message: str, *, errno: int | None = None):
        super().__init__(message)
        self.errno = errno


class DiagSocket(NamedTuple):
    """What the kernel says of one socket."""

    inode: int  # 0 when no file holds it (time-wait, an orphan after close)
    state: int  # the kernel's TCP state (`collectors.procfs.TCP_STATES`)
    uid: int


def _packed(address: str) -> tuple[int, bytes]:
    ip = ipaddress.ip_address(address)
    family = socket.AF_INET if ip.version == 4 else socket.AF_INET6
    return family, ip.packed.ljust(16, b"\0")


def inet_diag_request(local: tuple[str, int], remote: tuple[str, int], *, seq: int = 1) -> bytes:
    """The request for the TCP socket whose local end is ``local`` and remote end ``remote``
    (both IPv4, or both IPv6). The kernel looks an IPv4 pair and its IPv4-mapped IPv6 form
    up alike, in its IPv4 table, where a dual-stack socket connected to an IPv4 address is.

    Raises:
        ValueError: an address that is not an IP address, or families that differ.
    """
    family, src = _packed(local[0])
    other, dst = _packed(remote[0])
    if family != other:
        raise ValueError(f"{local[0]} and {remote[0]} are of different families")
    body = (_REQ.pack(family, socket.IPPROTO_TCP, 0, 0, _ALL_STATES) + _SOCKID.pack(local[1], remote[1], src, dst)
            + _SOCKID_TAIL.pack(0, _NOCOOKIE, _NOCOOKIE))
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(body), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, seq, 0) + body


def parse_inet_diag_reply(data: bytes, *, seq: int = 1) -> DiagSocket | None:
    """The socket the kernel found, or None when it says there is none (``ENOENT``).

    Raises:
        DiagError: another error from the kernel (its ``errno``), a message of another
            type or sequence number, or bytes too short for the message they announce.
    """
    if len(data) < _NLMSGHDR.size:
        raise DiagError(f"{len(data)} bytes: no netlink header")
    length, kind, _, got_seq, _ = _NLMSGHDR.unpack_from(data)
    if length < _NLMSGHDR.size or length > len(data):
        raise DiagError(f"a netlink message of {length} bytes in {len(data)}")
    if got_seq != seq:
        raise DiagError(f"an answer to request {got_seq}, not {seq}")
    body = data[_NLMSGHDR.size:length]
    if kind == NLMSG_ERROR:
        if len(body) < 4:
            raise DiagError("a netlink error without its code")
        (error,) = struct.unpack_from("=i", body)
        if error == -2:  # ENOENT: no such socket
            return None
        raise DiagError(f"the kernel answered error {-error}", errno=-error)
    if kind != SOCK_DIAG_BY_FAMILY or len(body) < _MSG_BYTES:
        raise DiagError(f"a netlink message of type {kind} and {len(body)} bytes, not an inet_diag_msg")
    _, state, _, _ = _MSG_HEAD.unpack_from(body)
    _, _, _, uid, inode = _MSG_TAIL.unpack_from(body, _MSG_HEAD.size + _SOCKID.size + _SOCKID_TAIL.size)
    return DiagSocket(inode=inode, state=state, uid=uid)
