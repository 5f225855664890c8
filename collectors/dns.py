"""The dns witness: the chamber's only resolver; it logs every query and refuses names
outside policy.

- Sans-IO core: `answer` turns one query's bytes into a response, a ``dns.query`` event
  and whether the query must be forwarded; `answer_from_upstream` does the same with the
  forwarder's reply. No sockets, no clock: ``duration_ns`` is filled in by the task.
- `run_dns_witness`, the trio task serving UDP (and TCP, RFC 7766) on one port.

Policy (`DnsPolicy`): a name in ``static`` or matching ``allow`` is allowed; static names
are answered from the map (A and AAAA; other types get an empty NOERROR answer, the
"NODATA" of RFC 2308 §2.2), other allowed names are forwarded when a forwarder is set and
get SERVFAIL when not. Any other name gets **REFUSED** (RFC 1035 §4.1.1: "refuses to
perform the specified operation for policy reasons"), not NXDOMAIN: NXDOMAIN would assert
the name does not exist, which is a lie a client may cache (RFC 2308). When the query
carried EDNS (RFC 6891), the refusal also carries Extended DNS Error 18 "Prohibited"
(RFC 8914 §4.19). Names compare as `collectors.egress.canonical_host` spells them, the one
function the proxy's policy and upstream rewrites use too (case-insensitive, RFC 4343; one
trailing dot dropped); ``*.suffix`` matches names strictly below ``suffix``, not ``suffix``
itself (as a wildcard does, RFC 4592 §2.1.1).

Malformed input never raises. Fewer than 12 bytes (no header, RFC 1035 §4.1.1) or a
response (QR=1) get no reply; any other unparseable query gets FORMERR with its id; an
opcode other than QUERY gets NOTIMP; a class other than IN gets REFUSED. The event of a
malformed query has ``name=""``, ``qtype=""``, ``rcode="FORMERR"``; its reason is in
`DnsAnswer.error` (the task records it as a ``witness.raw`` line).
"""

from __future__ import annotations

import functools
import ipaddress
import struct
import time
from collections.abc import Sequence
from typing import NamedTuple

import dns.edns
import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.opcode
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset
import msgspec
import trio

from collectors._witness import WitnessFailed, Witnessing, witness_life
from collectors.egress import canonical_host, host_allowed, parse_allow
from ledger import Submission
from ledger.events import DnsQuery, WitnessRaw

__all__ = ["DnsAnswer", "DnsPolicy", "answer", "answer_from_upstream", "run_dns_witness"]

WITNESS = "dns"
_UDP_PAYLOAD = 1232  # EDNS payload we advertise and honour, bytes (DNS flag day 2020)
_CLASSIC_UDP = 512  # RFC 1035 §4.2.1 limit without EDNS, bytes
_TCP_MAX = 65535  # RFC 1035 §4.2.2 two-byte length prefix, bytes
_HEADER = struct.Struct("!HHHHHH")  # id, flags, qd, an, ns, ar counts (RFC 1035 §4.1.1)
_PARSE_ERRORS = (dns.exception.DNSException, ValueError, UnicodeError, struct.error, IndexError)


class DnsPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """What the chamber may resolve.

    Attributes:
        allow: the egress allow entries (`collectors.egress.parse_allow`: ``pypi.org``,
            ``*.suffix``, either with a ``:port``, which names ignore).
        static: name -> IPv4/IPv6 addresses answered locally (such names are allowed).
        forward: ``(host, port)`` of an upstream resolver for allowed non-static names.
        ttl_s: TTL of static answers, seconds.
        forward_timeout_s: how long a forwarded query may take, seconds.
    """

    allow: list[str] = []
    static: dict[str, list[str]] = {}
    forward: tuple[str, int] | None = None
    ttl_s: int = 60
    forward_timeout_s: float = 2.0

    def allows(self, name: str) -> bool:
        """Whether ``name`` (any spelling: `collectors.egress.canonical_host`) is allowed."""
        name = canonical_host(name)
        return name in {canonical_host(n) for n in self.static} or host_allowed(name, parse_allow(self.allow))

    def addresses(self, name: str) -> list[str] | None:
        """The static addresses of ``name``, or None when it is not in the map."""
        name = canonical_host(name)
        for key, values in self.static.items():
            if canonical_host(key) == name:
                return values
        return None


class DnsAnswer(NamedTuple):
    """The outcome of one query.

    Attributes:
        response: the bytes to send back, or None when nothing must be sent.
        event: the ``dns.query`` event (``duration_ns`` 0; the task measures it).
        forward_needed: the query's bytes must go to the forwarder, then
            `answer_from_upstream` builds the response.
        error: why the query was malformed or not answered, else None.
    """

    response: bytes | None
    event: DnsQuery
    forward_needed: bool = False
    error: str | None = None


def _name_text(name: dns.name.Name) -> str:
    return "." if name == dns.name.root else name.to_text(omit_final_dot=True).lower()


def _max_size(query: dns.message.Message, max_size: int | None) -> int:
    if max_size is not None:
        return max_size
    if query.edns >= 0:
        return max(_CLASSIC_UDP, min(query.payload, _UDP_PAYLOAD))
    return _CLASSIC_UDP


def _header_only(wire: bytes, rcode: int) -> bytes:
    """A bare response keeping the query's id, opcode and RD bit (RFC 1035 §4.1.1)."""
    qid, flags = struct.unpack_from("!HH", wire)
    flags = dns.flags.QR | (flags & (0x7800 | dns.flags.RD)) | (rcode & 0xF)
    return _HEADER.pack(qid, flags, 0, 0, 0, 0)


def _malformed(wire: bytes, reason: str) -> DnsAnswer:
    event = DnsQuery(name="", qtype="", rcode="FORMERR")
    reply = _header_only(wire, dns.rcode.FORMERR) if len(wire) >= _HEADER.size else None
    return DnsAnswer(reply, event, False, reason)


def _reply(query: dns.message.Message, rcode: dns.rcode.Rcode, *, ede: dns.edns.EDECode | None = None,
           text: str = "", rrsets: Sequence[dns.rrset.RRset] = (), max_size: int | None = None) -> bytes:
    response = dns.message.make_response(query, recursion_available=True, our_payload=_UDP_PAYLOAD)
    response.set_rcode(rcode)
    if ede is not None and query.edns >= 0:
        response.use_edns(0, 0, _UDP_PAYLOAD, query.payload, options=[dns.edns.EDEOption(ede, text)])
    response.answer.extend(rrsets)
    return response.to_wire(max_size=_max_size(query, max_size), prefer_truncation=True)


def answer(query_bytes: bytes, policy: DnsPolicy, *, max_size: int | None = None) -> DnsAnswer:
    """Answer one DNS query under ``policy``. Never raises.

    Args:
        query_bytes: one DNS message as received (UDP payload, or TCP without its
            two-byte length prefix).
        policy: what may be resolved.
        max_size: the largest response, bytes: None for UDP rules (512, or the client's
            EDNS payload capped at 1232), 65535 for TCP. A larger answer is truncated
            with TC set (RFC 1035 §4.2.1), so the client retries over TCP.

    Returns:
        `DnsAnswer`: rcode and qtype spelled as `dns.rcode.to_text` and
        `dns.rdatatype.to_text` spell them (``TYPE65280`` for unknown types).
    """
    if len(query_bytes) < _HEADER.size:
        return DnsAnswer(None, DnsQuery(name="", qtype="", rcode="FORMERR"), False,
                         f"short header: {len(query_bytes)} bytes")
    if query_bytes[2] & 0x80:
        return DnsAnswer(None, DnsQuery(name="", qtype="", rcode="FORMERR"), False,
                         "a response (QR=1), not a query: not answered")
    try:
        query = dns.message.from_wire(query_bytes)
    except _PARSE_ERRORS as exc:
        return _malformed(query_bytes, f"unparseable: {type(exc).__name__}: {exc}"[:300])
    if query.opcode() != dns.opcode.QUERY:
        opcode = dns.opcode.to_text(query.opcode())
        event = DnsQuery(name="", qtype="", rcode="NOTIMP")
        return DnsAnswer(_header_only(query_bytes, dns.rcode.NOTIMP), event, False, f"opcode {opcode}")
    if len(query.question) != 1:
        return _malformed(query_bytes, f"{len(query.question)} questions, expected 1")
    question = query.question[0]
    name, qtype = _name_text(question.name), dns.rdatatype.to_text(question.rdtype)
    try:
        if question.rdclass != dns.rdataclass.IN:
            qclass = dns.rdataclass.to_text(question.rdclass)
            wire = _reply(query, dns.rcode.REFUSED, ede=dns.edns.EDECode.NOT_SUPPORTED,
                          text=f"class {qclass}", max_size=max_size)
            return DnsAnswer(wire, DnsQuery(name=name, qtype=qtype, rcode="REFUSED", refused=True),
                             False, f"class {qclass}")
        if not policy.allows(name):
            wire = _reply(query, dns.rcode.REFUSED, ede=dns.edns.EDECode.PROHIBITED,
                          text="name outside the chamber's policy", max_size=max_size)
            return DnsAnswer(wire, DnsQuery(name=name, qtype=qtype, rcode="REFUSED", refused=True))
        static = policy.addresses(name)
        if static is None:
            if policy.forward is not None:
                return DnsAnswer(None, DnsQuery(name=name, qtype=qtype), True)
            wire = _reply(query, dns.rcode.SERVFAIL, ede=dns.edns.EDECode.NO_REACHABLE_AUTHORITY,
                          text="no forwarder configured", max_size=max_size)
            return DnsAnswer(wire, DnsQuery(name=name, qtype=qtype, rcode="SERVFAIL"), False,
                             "allowed but neither static nor forwarded")
        rrsets, answers = _static_rrsets(question.name, question.rdtype, static, policy.ttl_s)
        wire = _reply(query, dns.rcode.NOERROR, rrsets=rrsets, max_size=max_size)
        return DnsAnswer(wire, DnsQuery(name=name, qtype=qtype, answers=answers))
    except _PARSE_ERRORS as exc:  # a static address that is not an address (our misuse)
        wire = _reply(query, dns.rcode.SERVFAIL, max_size=max_size)
        return DnsAnswer(wire, DnsQuery(name=name, qtype=qtype, rcode="SERVFAIL"), False,
                         f"cannot answer: {type(exc).__name__}: {exc}"[:300])


def _static_rrsets(qname: dns.name.Name, rdtype: dns.rdatatype.RdataType, addresses: list[str],
                   ttl_s: int) -> tuple[list[dns.rrset.RRset], list[str]]:
    version = {dns.rdatatype.A: 4, dns.rdatatype.AAAA: 6}.get(rdtype)
    picked = [str(ipaddress.ip_address(a)) for a in addresses]
    picked = [a for a in picked if ipaddress.ip_address(a).version == version]
    if not picked:
        return [], []  # NODATA: the name exists, not with this type (RFC 2308 §2.2)
    rrset = dns.rrset.from_text_list(qname, ttl_s, dns.rdataclass.IN, rdtype, picked)
    return [rrset], picked


def answer_from_upstream(query_bytes: bytes, upstream: bytes | None, *,
                         max_size: int | None = None) -> DnsAnswer:
    """Relay the forwarder's reply to a query `answer` marked ``forward_needed``.

    Args:
        query_bytes: the client's query, as given to `answer`.
        upstream: the forwarder's reply, or None when it timed out or failed.
        max_size: as for `answer`.

    Returns:
        The upstream reply re-encoded under the client's size limit when it matches the
        query (same id and question, RFC 5452 §9.1); otherwise SERVFAIL. ``answers``
        holds the rdata text of every answer record in order (addresses, CNAME targets).
    """
    first = answer(query_bytes, DnsPolicy(), max_size=max_size)
    try:
        query = dns.message.from_wire(query_bytes)
        question = query.question[0]
    except (*_PARSE_ERRORS, IndexError):
        return first
    name, qtype = _name_text(question.name), dns.rdatatype.to_text(question.rdtype)
    reason = "forwarder did not answer"
    if upstream is not None:
        try:
            reply = dns.message.from_wire(upstream)
            if reply.id != query.id or list(reply.question) != list(query.question):
                raise dns.exception.FormError("reply does not match the query")
            reply.flags &= ~dns.flags.TC
            answers = [rdata.to_text() for rrset in reply.answer for rdata in rrset]
            wire = reply.to_wire(max_size=_max_size(query, max_size), prefer_truncation=True)
            event = DnsQuery(name=name, qtype=qtype, rcode=dns.rcode.to_text(reply.rcode()),
                             answers=answers)
            return DnsAnswer(wire, event)
        except _PARSE_ERRORS as exc:
            reason = f"bad forwarder reply: {type(exc).__name__}: {exc}"[:300]
    wire = _reply(query, dns.rcode.SERVFAIL, max_size=max_size)
    return DnsAnswer(wire, DnsQuery(name=name, qtype=qtype, rcode="SERVFAIL"), False, reason)


# --- the trio task -----------------------------------------------------------------------



async def _forward(query_bytes: bytes, policy: DnsPolicy) -> bytes | None:
    """Send the query to the forwarder over UDP from a fresh port; None on timeout/error."""
    assert policy.forward is not None
    host, port = policy.forward
    family = trio.socket.AF_INET6 if ":" in host else trio.socket.AF_INET
    with trio.move_on_after(policy.forward_timeout_s):
        try:
            with trio.socket.socket(family, trio.socket.SOCK_DGRAM) as sock:
                await sock.connect((host, port))
                await sock.send(query_bytes)
                while True:
                    data = await sock.recv(_TCP_MAX)
                    if data[:2] == query_bytes[:2]:
                        return data
        except OSError:
            return None
    return None


async def _resolve(query_bytes: bytes, policy: DnsPolicy, max_size: int | None) -> DnsAnswer:
    result = answer(query_bytes, policy, max_size=max_size)
    if result.forward_needed:
        upstream = await _forward(query_bytes, policy)
        result = answer_from_upstream(query_bytes, upstream, max_size=max_size)
    return result


async def run_dns_witness(
    send_channel: trio.MemorySendChannel[Submission],
    *,
    listen_host: str,
    listen_port: int = 53,
    policy: DnsPolicy,
    tcp: bool = True,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve DNS for the chamber on ``listen_host`` until cancelled.

    Sends ``witness.started``, then per query one ``dns.query`` (stamped when the query
    arrived; ``duration_ns``: arrival to reply sent, monotonic ns), plus one
    ``witness.raw`` line (rcode, reason, query hex) per malformed or unanswerable query.
    Each query is answered in its own task, so a slow forward never holds up others.
    Ends as `collectors._witness.witness_life` says: ``witness.stopped`` on cancellation
    (``lines``: queries received, ``parse_failures``: queries without a readable
    question, ``bytes``: query bytes received); ``witness.gap`` and a return when serving
    breaks (socket error, a bug in a handler): the run goes on, void.

    Args:
        send_channel: where submissions go; closed when this task ends, so pass a clone.
        listen_host: address to bind (the chamber network's gateway IP).
        listen_port: port to bind; 0 picks a free one (UDP, then TCP on the same number).
        policy: what may be resolved.
        tcp: also serve TCP (RFC 7766) on the same port; if TCP cannot bind it, UDP alone
            is served and ``witness.started`` says why in ``detail["tcp_error"]``.
        task_status: started with the bound port once ``witness.started`` is sent.

    Raises:
        OSError: the UDP socket cannot be bound (nothing was started, nothing sent).
    """
    udp, listeners, detail = await _bind(listen_host, listen_port, policy, tcp)
    port = udp.getsockname()[1]
    async with witness_life(send_channel, WITNESS, missing="dns.query; the chamber's name resolution") as w:
        with udp:
            await w.started(detail)
            task_status.started(port)
            async with trio.open_nursery() as nursery:
                for listener in listeners:
                    nursery.start_soon(trio.serve_listeners, functools.partial(_serve_tcp, w, policy), [listener])
                while True:
                    try:
                        data, peer = await udp.recvfrom(_TCP_MAX)
                    except OSError as exc:
                        raise WitnessFailed(f"udp socket failed: {exc!r}") from exc
                    w.lines, w.bytes = w.lines + 1, w.bytes + len(data)
                    nursery.start_soon(_respond, w, policy, data, None, lambda r, p=peer: udp.sendto(r, p), *w.now())


async def _bind(listen_host: str, listen_port: int, policy: DnsPolicy,
                tcp: bool) -> tuple[trio.socket.SocketType, list[trio.SocketListener], dict[str, object]]:
    """Bind UDP (raising OSError), then TCP on the same port when asked; ``witness.started``'s detail."""
    family = trio.socket.AF_INET6 if ":" in listen_host else trio.socket.AF_INET
    udp = trio.socket.socket(family, trio.socket.SOCK_DGRAM)
    try:
        await udp.bind((listen_host, listen_port))
    except OSError:
        udp.close()
        raise
    port = udp.getsockname()[1]
    listeners: list[trio.SocketListener] = []
    detail: dict[str, object] = {
        "listen": f"{listen_host}:{port}", "allow": list(policy.allow), "static": sorted(policy.static),
        "forward": None if policy.forward is None else f"{policy.forward[0]}:{policy.forward[1]}"}
    if tcp:
        try:
            listeners = await trio.open_tcp_listeners(port, host=listen_host)
        except OSError as exc:
            detail["tcp_error"] = f"{type(exc).__name__}: {exc}"
    detail["transports"] = ["udp"] + (["tcp"] if listeners else [])
    return udp, listeners, detail


async def _respond(w: Witnessing, policy: DnsPolicy, data: bytes, max_size: int | None, reply,
                   wall: int, mono: int) -> None:
    """Answer one query, send the reply with ``reply(bytes)``, then its events.

    Raises:
        WitnessFailed: the handler broke (a bug): the witness ends with a gap.
    """
    try:
        result = await _resolve(data, policy, max_size)
        if result.response is not None:
            try:
                await reply(result.response)
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                result = result._replace(error=f"reply not sent: {exc!r}")
        event = msgspec.structs.replace(result.event, duration_ns=time.monotonic_ns() - mono)
    except Exception as exc:
        raise WitnessFailed(f"query handler failed: {exc!r}") from exc
    w.parse_failures += not event.name
    await w.send(event, wall_ns=wall, mono_ns=mono)
    if result.error is not None:
        line = f"{event.rcode} {result.error}: {data[:512].hex()}"
        await w.send(WitnessRaw(witness=WITNESS, line=line), wall_ns=wall, mono_ns=mono)


async def _serve_tcp(w: Witnessing, policy: DnsPolicy, stream: trio.SocketStream) -> None:
    """Answer the queries of one TCP connection (two-byte length prefixes, RFC 1035 §4.2.2)."""
    buffer = bytearray()
    async with stream:
        while (data := await _tcp_query(stream, buffer)) is not None:
            w.lines, w.bytes = w.lines + 1, w.bytes + len(data)
            await _respond(w, policy, data, _TCP_MAX,
                           lambda r: stream.send_all(len(r).to_bytes(2, "big") + r), *w.now())


async def _tcp_query(stream: trio.SocketStream, buffer: bytearray) -> bytes | None:
    """The connection's next query (taken out of ``buffer``); None at its end or on a reset
    (a client that resets its connection is not a witness failure)."""
    try:
        while len(buffer) < 2 or len(buffer) < 2 + int.from_bytes(buffer[:2], "big"):
            chunk = await stream.receive_some(_TCP_MAX)
            if not chunk:
                return None
            buffer += chunk
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        return None
    size = int.from_bytes(buffer[:2], "big")
    data = bytes(buffer[2:2 + size])
    del buffer[:2 + size]
    return data
