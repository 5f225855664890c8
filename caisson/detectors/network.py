"""Network detectors: egress the policy refused, connections and sends around the
witnesses, tunnels through the proxy it did not read, and captured flows that no witness
accounts for."""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable, Iterator

from caisson.detectors._base import DetectorConfig, Finding, Fold, INFO, VOID, folded, reads
from ledger import Record
from ledger.events import DnsQuery, HttpExchange, NetConnect, NetFlow, NetSend, ProxyTunnel, WitnessStarted

__all__ = [
    "BYPASS_ATTEMPT", "DENIED_EGRESS", "UNEXPLAINED_FLOW", "UNPOLICED_TUNNEL", "bypass_attempt",
    "denied_egress", "unexplained_flow", "unpoliced_tunnel",
]

DENIED_EGRESS = "network.denied_egress@2"
BYPASS_ATTEMPT = "network.bypass_attempt@2"
UNPOLICED_TUNNEL = "network.unpoliced_tunnel@1"
UNEXPLAINED_FLOW = "network.unexplained_flow@2"


@reads(HttpExchange, ProxyTunnel, DnsQuery)
def denied_egress(records: Iterable[Record], config: DetectorConfig) -> Iterator[Finding]:
    """Every request and tunnel the proxy refused and every name the resolver refused, shown.

    The control held, so the cell is not voided: these are the agent's attempts.
    """
    for record in records:
        event = record.event
        if isinstance(event, HttpExchange) and event.denied:
            yield Finding(detector=DENIED_EGRESS, kind="denied_egress", effect=INFO, evidence=[record.seq],
                          message=f"refused {event.method} {event.scheme}://{event.host}{event.path}: {event.denied}")
        elif isinstance(event, ProxyTunnel) and event.denied:
            what = "CONNECT" if event.via == "connect" else "upgrade to"
            inside = f" (it carried {event.protocol})" if event.protocol else ""
            yield Finding(detector=DENIED_EGRESS, kind="denied_egress", effect=INFO, evidence=[record.seq],
                          message=f"refused {what} {event.host}:{event.port}{inside}: {event.denied}")
        elif isinstance(event, DnsQuery) and event.refused:
            yield Finding(detector=DENIED_EGRESS, kind="denied_egress", effect=INFO, evidence=[record.seq],
                          message=f"refused DNS {event.qtype} {event.name} ({event.rcode})")


def _endpoint(listen: object) -> tuple[str, int] | None:
    if not isinstance(listen, str) or ":" not in listen:
        return None
    host, _, port = listen.rpartition(":")
    return (host.strip("[]"), int(port)) if port.isdigit() else None


def _direct(family: str, address: str, port: int | None, endpoints: set[tuple[str, int]]) -> bool:
    """An IP destination that is not loopback, unspecified or a witness's endpoint."""
    if family not in ("AF_INET", "AF_INET6"):
        return False
    local = _local(address)
    return local is not None and not (local or (address, port) in endpoints)


@functools.lru_cache(maxsize=1024)
def _local(address: str) -> bool | None:
    """Whether an IP address is loopback or unspecified; None: not an IP address (a run
    connects to the same few addresses: each is parsed once)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return None
    return ip.is_loopback or ip.is_unspecified


@reads(WitnessStarted, NetSend, NetConnect)
@folded
def bypass_attempt(config: DetectorConfig, found: list[Finding]) -> Fold:
    """A connect() or a send naming its destination (sendto/sendmsg/sendmmsg: UDP, TCP Fast
    Open) to an IP address other than a witness's endpoint: around the proxy and resolver.
    Connected (result 0): void, the network control failed. Refused or pending
    (EINPROGRESS: the outcome is in the capture): shown. A send is shown: that a datagram
    left the socket says nothing of where it went (the capture does:
    `unexplained_flow`).
    """
    endpoints: set[tuple[str, int]] = set()
    while (record := (yield)) is not None:
        event = record.event
        if isinstance(event, WitnessStarted):
            endpoint = _endpoint(event.detail.get("listen"))
            if endpoint:
                endpoints.add(endpoint)
        elif isinstance(event, NetSend) and _direct(event.family, event.address, event.port, endpoints):
            found.append(Finding(detector=BYPASS_ATTEMPT, kind="bypass_attempt", effect=INFO, evidence=[record.seq],
                                 message=f"{event.syscall} to {event.address}:{event.port} directly, flags"
                                 f" {event.flags}"
                                 + (f" ({event.errno})" if event.errno else f" ({event.result} sent)")))
        elif isinstance(event, NetConnect) and _direct(event.family, event.address, event.port, endpoints):
            ok = event.result == 0
            found.append(Finding(detector=BYPASS_ATTEMPT, kind="bypass_attempt", effect=VOID if ok else INFO,
                                 evidence=[record.seq],
                                 message=f"{'connected to' if ok else 'tried'} {event.address}:{event.port} directly"
                                 + ("" if ok else f" ({event.errno})")))


@reads(ProxyTunnel)
def unpoliced_tunnel(records: Iterable[Record], config: DetectorConfig) -> Iterator[Finding]:
    """A tunnel the proxy let through without reading what it carried.

    - raw TCP relayed (``protocol`` has ``tcp`` and nothing refused it): void. Bytes went
      through the witness unread, to wherever the tunnel named; only their count is known.
    - a WebSocket: shown. Its endpoint passed the policy as an HTTP request did, but its
      messages are counted, not kept.

    A refused tunnel is `denied_egress`'s; a tunnel that carried TLS and HTTP was read
    (its requests are ``http.exchange`` events, each policed).
    """
    for record in records:
        event = record.event
        if not isinstance(event, ProxyTunnel) or event.denied:
            continue
        where = f"{'CONNECT' if event.via == 'connect' else 'upgrade'} {event.host}:{event.port}"
        counts = f"{event.client_bytes} bytes out, {event.server_bytes} back"
        if "tcp" in event.protocol.split("/"):
            yield Finding(detector=UNPOLICED_TUNNEL, kind="unpoliced_tunnel", effect=VOID, evidence=[record.seq],
                          message=f"{where} relayed raw TCP ({event.protocol}), {counts}: through the proxy,"
                          " unread by any witness")
        elif event.protocol == "websocket":
            yield Finding(detector=UNPOLICED_TUNNEL, kind="unpoliced_tunnel", effect=INFO, evidence=[record.seq],
                          message=f"{where} carried WebSocket messages, {counts}: counted, not kept")


_CONTROL = ("icmp", "icmp6")
_TCP_RST, _TCP_ACK = 0x04, 0x10  # RFC 9293 section 3.1


@reads(WitnessStarted, NetFlow)
def unexplained_flow(records: Iterable[Record], config: DetectorConfig) -> Iterator[Finding]:
    """A captured flow (``net.flow``) that no witness accounts for: a finding, one per flow.

    Accounted for: a flow with a witness's endpoint (the proxy's or the resolver's listen
    address and port) at either end; ICMP from the gateway (the host's firewall refusing);
    link-local, multicast and broadcast housekeeping. Any other flow is packets the
    chamber put on the wire around the witnesses (a UDP datagram, a TCP SYN to an address
    outside the policy). How grave, from the flow's per-direction counts:

    - **answered** (the responder sent back anything but TCP resets: a datagram, a SYN-ACK,
      data): void. Traffic went around the witnesses and came back; the capture is the
      only witness of what it carried.
    - **unanswered** (nothing came back, or only a reset: the host's firewall refusing):
      shown. The chamber's network (internal, the host's side firewalled) drops or refuses
      such packets unless a control was weakened (which ``controls.weakened`` voids).
    - a flow without per-direction counts (a ledger before schema 10): shown, as then,
      since a flow summing both directions cannot say whether anything answered.

    A connect that succeeded around the witnesses is also voided by `bypass_attempt`.
    Runs without a witnessed network have no flows and no findings.
    """
    endpoints: set[tuple[str, int]] = set()
    gateways: set[str] = set()
    flows: list[tuple[int, NetFlow]] = []
    for record in records:
        event = record.event
        if isinstance(event, WitnessStarted):
            found = _endpoint(event.detail.get("listen"))
            if found:
                endpoints.add(found)
                gateways.add(found[0])
        elif isinstance(event, NetFlow):
            flows.append((record.seq, event))
    for seq, flow in flows:
        if (flow.dst, flow.dport) in endpoints or (flow.src, flow.sport) in endpoints:
            continue
        if flow.proto in _CONTROL and flow.src in gateways:
            continue
        if _housekeeping(flow.dst):
            continue
        host = " (the host's side of the chamber network)" if flow.dst in gateways or flow.src in gateways else ""
        where = f"{flow.proto} {flow.src}:{flow.sport} -> {flow.dst}:{flow.dport}"
        if flow.initiator_packets is None or flow.responder_packets is None:  # counted before schema 10
            yield Finding(detector=UNEXPLAINED_FLOW, kind="unexplained_flow", effect=INFO, evidence=[seq],
                          message=f"{where}, {flow.packets} packet(s), {flow.bytes} bytes: no witness accounts"
                          f" for it; whether anything answered was not counted{host}")
            continue
        sent = f"sent {flow.initiator_packets} packet(s), {flow.initiator_bytes} bytes"
        if _answered(flow):
            yield Finding(detector=UNEXPLAINED_FLOW, kind="unexplained_flow", effect=VOID, evidence=[seq],
                          message=f"{where}, {sent}, answered with {flow.responder_packets} packet(s),"
                          f" {flow.responder_bytes} bytes: traffic around the witnesses came back{host}")
        else:
            back = "only a reset came back (refused)" if flow.responder_packets else "nothing came back"
            yield Finding(detector=UNEXPLAINED_FLOW, kind="unexplained_flow", effect=INFO, evidence=[seq],
                          message=f"{where}, {sent}, {back}: no witness accounts for it{host}")


def _answered(flow: NetFlow) -> bool:
    """The responder sent something other than TCP resets (RST, with or without ACK)."""
    if not flow.responder_packets:
        return False
    flags = flow.responder_tcp_flags
    return not (flow.proto == "tcp" and flags is not None and flags & _TCP_RST and not flags & ~(_TCP_RST | _TCP_ACK))


def _housekeeping(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return ip.is_multicast or ip.is_link_local or address == "255.255.255.255"
