"""The addon's connection hooks, in-process (mitmproxy's test context, no mitmdump): the
address checks before and after connecting, and the raw TCP relay that policed mode never
lets through even where mitmproxy would set one up. The end-to-end behaviour through a real
mitmdump is in tests/collectors/test_proxy_tunnels.py."""

from __future__ import annotations

import asyncio

import pytest
from mitmproxy import connection
from mitmproxy.proxy.server_hooks import ServerConnectionHookData
from mitmproxy.test import taddons, tflow

from collectors.proxy.addon import CaissonWitness


class _Transport:
    def __init__(self) -> None:
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True


class _Writer:
    def __init__(self) -> None:
        self.transport = _Transport()


class _IO:
    def __init__(self) -> None:
        self.writer = _Writer()


class _Handler:
    def __init__(self) -> None:
        self.transports: dict = {}


class _Proxyserver:
    """Stands in for mitmproxy's proxyserver addon: its ``connections`` (client id ->
    connection handler, each with its ``transports``), which `server_connected` reaches."""

    name = "proxyserver"

    def __init__(self) -> None:
        self.connections: dict = {}


def _witness(tctx, **options) -> CaissonWitness:
    witness = CaissonWitness()
    tctx.master.addons.add(witness)
    tctx.configure(witness, caisson_allow="api.example.com,rebound.example", **options)
    return witness


def _data(address: tuple[str, int], peername: tuple[str, int] | None = None) -> ServerConnectionHookData:
    server = connection.Server(address=address)
    server.peername = peername
    return ServerConnectionHookData(server=server, client=tflow.tclient_conn())


@pytest.mark.parametrize(("address", "why"), [
    (("127.0.0.1", 8080), "127.0.0.1, loopback"), (("0x7f.1", 8080), "127.0.0.1, loopback"),
    (("::ffff:127.0.0.1", 80), "127.0.0.1, loopback"), (("localhost", 443), "loopback"),
    (("169.254.169.254", 80), "link-local"), (("0.0.0.0", 80), "unspecified"),
])
def test_an_address_the_proxy_must_never_reach_is_refused_before_connecting(address, why):
    with taddons.context() as tctx:
        witness = _witness(tctx)
        data = _data(address)
        asyncio.run(witness.server_connect(data))
    assert data.server.error and "caisson egress policy" in data.server.error and why in data.server.error


def _own_addresses() -> list[str]:
    import subprocess

    out = subprocess.run(["ip", "-o", "addr", "show"], capture_output=True, text=True).stdout
    found = [line.split()[3].split("/")[0] for line in out.splitlines() if line.split()[2] in ("inet", "inet6")]
    own = [a for a in found if not a.startswith(("127.", "::1", "fe80:"))]
    if not own:
        pytest.skip("the host has no address but loopback and link-local")
    return own


def test_the_hosts_own_addresses_are_refused_and_the_configured_upstreams_are_not():
    with taddons.context() as tctx:
        witness = _witness(tctx, caisson_upstream="api.example.com=127.0.0.1:9")
        owns = [_data((address, 443)) for address in _own_addresses()]
        for data in owns:
            asyncio.run(witness.server_connect(data))
        upstream = _data(("127.0.0.1", 9))
        elsewhere = _data(("198.51.100.7", 443))  # TEST-NET-2: no host has it
        for data in (upstream, elsewhere):
            asyncio.run(witness.server_connect(data))
    assert all("one of the host's own addresses" in (own.server.error or "") for own in owns), owns
    assert upstream.server.error is None and elsewhere.server.error is None


def test_open_tunnels_check_no_address():
    with taddons.context() as tctx:
        witness = _witness(tctx, caisson_tunnels="open")
        data = _data(("127.0.0.1", 8080))
        asyncio.run(witness.server_connect(data))
    assert data.server.error is None


def _connected(witness: CaissonWitness, proxyserver: _Proxyserver, address, peername) -> _IO:
    data = _data(address, peername)
    handler, io = _Handler(), _IO()
    handler.transports[data.server] = io
    proxyserver.connections[data.client.id] = handler
    witness.server_connected(data)
    return io


def test_a_name_that_resolved_elsewhere_when_connecting_is_cut_before_a_byte_is_sent():
    """DNS rebinding: `server_connect` resolved a public address, mitmproxy's own lookup got
    loopback; the connected peer is what counts."""
    with taddons.context() as tctx:
        proxyserver = _Proxyserver()
        tctx.master.addons.add(proxyserver)
        witness = _witness(tctx, caisson_upstream="api.example.com=127.0.0.1:9")
        rebound = _connected(witness, proxyserver, ("rebound.example", 443), ("127.0.0.1", 443))
        public = _connected(witness, proxyserver, ("rebound.example", 443), ("198.51.100.7", 443))
        upstream = _connected(witness, proxyserver, ("127.0.0.1", 9), ("127.0.0.1", 9))
    assert rebound.writer.transport.aborted
    assert not public.writer.transport.aborted and not upstream.writer.transport.aborted


def test_a_raw_tcp_relay_mitmproxy_sets_up_is_refused_and_relays_nothing():
    with taddons.context() as tctx:
        witness = _witness(tctx)
        flow = tflow.ttcpflow()
        witness.tcp_start(flow)
        witness.tcp_message(flow)
    assert flow.server_conn.error and "raw TCP is not relayed" in flow.server_conn.error
    assert flow.error and flow.error.msg == "Connection killed."
    assert flow.messages[-1].content == b""


def test_open_tunnels_relay_raw_tcp_and_count_it():
    with taddons.context() as tctx:
        witness = _witness(tctx, caisson_tunnels="open")
        flow = tflow.ttcpflow()
        witness.tcp_start(flow)
        witness.tcp_message(flow)
        tunnel = witness._connects[flow.client_conn.id]
    assert flow.server_conn.error is None and flow.messages[-1].content
    assert tunnel.protocol == ["tcp"] and tunnel.client_bytes + tunnel.server_bytes == len(flow.messages[-1].content)
