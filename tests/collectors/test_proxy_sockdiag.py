"""The NETLINK_SOCK_DIAG codec (collectors/proxy/_sockdiag.py): the request's bytes, the
kernel's answers as captured from a real kernel (x86-64, 6.18), errors, and garbage."""

from __future__ import annotations

import os
import socket
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collectors.proxy._sockdiag import (NETLINK_SOCK_DIAG, DiagError, DiagSocket, inet_diag_request,
                                        parse_inet_diag_reply)

# 127.0.0.1:35356 -> 127.0.0.1:35475, seq 7: the request this module makes, and the kernel's
# answer (inet_diag_msg and its attributes), captured on the machine of the tests
REQUEST = bytes.fromhex(
    "4800000014000100070000000000000002060000ffffffff8a1c8a937f0000010000000000000000000000007f00000100000000"
    "000000000000000000000000ffffffffffffffff")
FOUND = bytes.fromhex(
    "7c000000140000000700000069020000020100008a1c8a937f0000010000000000000000000000007f00000100000000000000000"
    "000000000000000d509000000000000000000000000000000000000000000008be51400050008000000000008000f000000000"
    "00c00150001000000000000000600160052000000")
# the answer to a request (seq 8) naming no socket: NLMSG_ERROR, -ENOENT, the request's header
NOT_FOUND = bytes.fromhex(
    "5c000000020000000800000069020000feffffff4800000014000100080000000000000002060000ffffffff00018a937f000001"
    "0000000000000000000000007f00000100000000000000000000000000000000ffffffffffffffff")


def test_the_request_is_the_kernels_layout_little_endian_host():
    if sys.byteorder != "little":
        pytest.skip("captured on a little-endian host")
    assert inet_diag_request(("127.0.0.1", 35356), ("127.0.0.1", 35475), seq=7) == REQUEST
    six = inet_diag_request(("::1", 1), ("::1", 2), seq=1)
    assert len(six) == 72 and six[16] == socket.AF_INET6 and six[24:28] == b"\0\x01\0\x02"
    assert six[28:44] == socket.inet_pton(socket.AF_INET6, "::1")


def test_a_found_socket_and_a_missing_one():
    assert parse_inet_diag_reply(FOUND, seq=7) == DiagSocket(inode=1369483, state=1, uid=0)
    assert parse_inet_diag_reply(NOT_FOUND, seq=8) is None


def test_errors_and_mismatches_raise_diag_error():
    eperm = NOT_FOUND[:16] + (-1).to_bytes(4, "little", signed=True) + NOT_FOUND[20:]
    with pytest.raises(DiagError) as info:
        parse_inet_diag_reply(eperm, seq=8)
    assert info.value.errno == 1
    for data, seq in ((FOUND, 8), (FOUND[:40], 7), (FOUND[:10], 7), (b"", 7)):
        with pytest.raises(DiagError):
            parse_inet_diag_reply(data, seq=seq)
    with pytest.raises(ValueError):
        inet_diag_request(("127.0.0.1", 1), ("::1", 2))
    with pytest.raises(ValueError):
        inet_diag_request(("localhost", 1), ("127.0.0.1", 2))


@given(st.binary(max_size=200), st.integers(0, 2**32 - 1))
def test_any_bytes_give_a_socket_none_or_diag_error(data, seq):
    try:
        parse_inet_diag_reply(data, seq=seq)
    except DiagError:
        pass


def test_against_the_running_kernel():
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    try:
        diag = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG)
    except OSError as exc:
        pytest.skip(f"no NETLINK_SOCK_DIAG here: {exc}")
    with diag, listener, client, server:
        diag.send(inet_diag_request(client.getsockname(), listener.getsockname(), seq=3))
        found = parse_inet_diag_reply(diag.recv(1 << 16), seq=3)
        assert found == DiagSocket(inode=os.fstat(client.fileno()).st_ino, state=1, uid=os.geteuid())
        diag.send(inet_diag_request(("127.0.0.1", 1), listener.getsockname(), seq=4))
        assert parse_inet_diag_reply(diag.recv(1 << 16), seq=4) is None
