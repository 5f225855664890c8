"""The network: HTTP exchanges, tunnels, model calls, DNS queries and flows."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from ledger.events._base import LlmEndpoint, Provider, _Event

__all__ = [
    "ClientProcess", "DnsQuery", "HttpExchange", "LlmCall", "LlmUsage", "NetFlow", "ProxyTunnel",
    "TunnelVia",
]


class ClientProcess(msgspec.Struct, frozen=True, kw_only=True):
    """A chamber process that held the chamber's end of a proxied connection when the proxy
    witness looked it up, at the connection's first request (schema 14)."""

    pid: int  # pid in the chamber's namespace
    host_pid: int  # pid on the host
    start_time_ns: int  # process start, ns since boot (as proc.sample's): with pid, a unique key
    exe: str | None = None  # /proc/PID/exe as the recorder read it; None when unreadable


class HttpExchange(_Event, tag="http.exchange", frozen=True, kw_only=True):
    """One HTTP request/response through the proxy witness."""

    method: str
    scheme: str
    host: str
    port: int
    path: str
    status: int | None = None  # None when no response arrived
    request_bytes: int = 0  # decoded request body size
    response_bytes: int = 0
    request_headers: list[tuple[str, str]] = []  # secrets replaced by keyed fingerprints
    response_headers: list[tuple[str, str]] = []
    request_body_sha256: str | None = None  # blob hash
    response_body_sha256: str | None = None
    started_ns: int = 0  # wall ns, request start
    ended_ns: int = 0  # wall ns, response end
    denied: str | None = None  # the policy that refused it, when refused
    error: str | None = None
    # Who made it (schema 14): the chamber's end of its connection ("ip:port" as the proxy saw
    # it), and the chamber processes that held that socket when the witness looked (its
    # connection's first request; more than one when the socket was inherited or passed),
    # ordered by pid; or why none was found. Neither set: the witness did not look.
    client: str | None = None
    client_processes: list[ClientProcess] = []
    client_unresolved: str | None = None


TunnelVia = Literal["connect", "upgrade"]
"""How a tunnel was asked of the proxy: ``CONNECT`` (RFC 9110 §9.3.6), or an HTTP/1.1
``Upgrade`` its server answered ``101 Switching Protocols`` (RFC 9110 §7.8, §15.2.2)."""


class ProxyTunnel(_Event, tag="proxy.tunnel", frozen=True, kw_only=True):
    """A tunnel the chamber asked of the proxy witness, refused or relayed (schema 14).

    What a tunnel carries as HTTP is in its ``http.exchange`` events; what it carried
    otherwise is only counted here.
    """

    via: TunnelVia
    host: str  # the target as the chamber wrote it: CONNECT's authority, or the upgraded request's host
    port: int
    client: str | None = None  # "ip:port" of the chamber's end
    denied: str | None = None  # why the proxy refused the tunnel or what it carried; None: let through
    protocol: str = ""  # what the proxy found inside, outermost first, "/"-joined: "tls", "http",
    # "websocket", "tcp" (bytes neither TLS nor HTTP), or an upgrade's token; "": nothing arrived
    exchanges: int = 0  # HTTP requests it carried (each an http.exchange)
    client_bytes: int = 0  # bytes relayed from the chamber other than as HTTP: raw TCP, WebSocket payloads
    server_bytes: int = 0  # the same, relayed back to the chamber
    started_ns: int = 0  # wall ns since the Unix epoch: when the tunnel was asked for
    ended_ns: int = 0  # wall ns since the Unix epoch: when it closed (refused: when refused)
    error: str | None = None  # it did not end by a close (the proxy stopped, a connection failed)


class LlmUsage(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A normalised usage view; ``rule`` states how it was derived from the raw object."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None  # input + output; cache fields stay out of it
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None
    rule: str = ""
    rules: dict[str, str] = {}  # normalised figure -> "name@version" of the rule that produced it
    sources: dict[str, str] = {}  # raw usage field -> which event/turn it was taken from, and why


class LlmCall(_Event, tag="llm.call", frozen=True, kw_only=True):
    """A model call seen first-hand by the proxy witness."""

    provider: Provider
    endpoint: LlmEndpoint
    requested_model: str | None = None
    served_model: str | None = None  # as the response says
    stop_reason: str | None = None
    streamed: bool = False
    usage: dict[str, Any] | None = None  # exactly as sent; None when not sent
    usage_missing_reason: str | None = None  # why usage is None (cut stream, ...)
    normalized: LlmUsage | None = None
    exchange_seq: int | None = None  # seq of the http.exchange it belongs to
    label_mismatch: str | None = None  # the body's content-encoding failed; its raw bytes were read as sent
    # why the call failed, None when it succeeded (schema 14): an HTTP status outside 2xx with
    # the provider's error detail, a stream error event or a failed response, a stream cut
    # before its terminal event, no response at all
    failed: str | None = None
    server_tools: dict[str, int] = {}  # provider-side tool executions by name (e.g. "web_search": 2), from the
    # response: Anthropic server_tool_use blocks and usage.server_tool_use.*_requests, OpenAI Responses *_call
    # output items, Gemini's search queries, fetched URLs and executed code; the chamber never sees these run
    # (schema 7)


class DnsQuery(_Event, tag="dns.query", frozen=True, kw_only=True):
    """A query to the chamber's resolver, and what it answered."""

    name: str
    qtype: str  # A | AAAA | ...
    rcode: str = "NOERROR"  # as RFC 1035 names it
    answers: list[str] = []
    refused: bool = False
    duration_ns: int = 0


class NetFlow(_Event, tag="net.flow", frozen=True, kw_only=True):
    """A bidirectional flow summary from the packet capture (`collectors.pcap`).

    ``src``/``sport`` is the initiator. The per-direction counts follow IPFIX's
    bidirectional flows (RFC 5103; IANA elements initiatorPackets, responderPackets,
    initiatorOctets, responderOctets, tcpControlBits): ``initiator_*`` is what the
    initiator sent, ``responder_*`` what came back. None: not counted (schema < 10).
    """

    proto: str  # tcp | udp | icmp | icmp6 | sctp | ... | the IP protocol number
    src: str
    sport: int | None = None
    dst: str
    dport: int | None = None
    packets: int = 0  # both directions
    bytes: int = 0  # IP datagram bytes, both directions
    first_ns: int = 0  # ns since the Unix epoch
    last_ns: int = 0  # ns since the Unix epoch
    initiator_packets: int | None = None  # packets src -> dst
    initiator_bytes: int | None = None  # IP datagram bytes src -> dst
    initiator_tcp_flags: int | None = None  # OR of the TCP flags src -> dst (RFC 9293 bits); None: not TCP
    responder_packets: int | None = None  # packets dst -> src: 0 when nothing came back
    responder_bytes: int | None = None  # IP datagram bytes dst -> src
    responder_tcp_flags: int | None = None  # OR of the TCP flags dst -> src; 0x04 alone (+ ACK): a reset
