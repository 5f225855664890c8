"""Tests for collectors/dns.py: the sans-IO answerer on built and broken queries, and the
trio server on 127.0.0.1 queried with dnspython over UDP and TCP (and forwarding)."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess

import dns.edns
import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from ledger import Submission
from ledger.events import DnsQuery, WitnessGap, WitnessRaw, WitnessStarted, WitnessStopped
from collectors import dns as dns_witness
from collectors.dns import DnsPolicy, answer, answer_from_upstream, run_dns_witness

POLICY = DnsPolicy(
    allow=["*.pypi.org", "files.example"],
    static={"api.anthropic.com": ["10.0.0.2", "fd00::2"], "files.example": ["10.0.0.3"]},
)


def query(name: str, rdtype: str = "A", *, edns: bool = False, **kw) -> dns.message.Message:
    return dns.message.make_query(name, rdtype, use_edns=0 if edns else None, **kw)


def ask(name: str, rdtype: str = "A", policy: DnsPolicy = POLICY, *, edns: bool = False):
    q = query(name, rdtype, edns=edns)
    result = answer(q.to_wire(), policy)
    reply = None if result.response is None else dns.message.from_wire(result.response)
    if reply is not None:
        assert reply.id == q.id and reply.flags & dns.flags.QR
    return result, reply


def addresses(reply: dns.message.Message) -> list[str]:
    return [r.to_text() for rrset in reply.answer for r in rrset]


# --- sans-IO: policy outcomes ----------------------------------------------------------------


def test_static_a_answer():
    result, reply = ask("api.anthropic.com")
    assert result.event == DnsQuery(name="api.anthropic.com", qtype="A", answers=["10.0.0.2"])
    assert (result.forward_needed, result.error) == (False, None)
    assert dns.rcode.to_text(reply.rcode()) == "NOERROR" and addresses(reply) == ["10.0.0.2"]
    assert reply.answer[0].ttl == 60


def test_static_aaaa_answer_and_case_insensitive_names():
    result, reply = ask("API.Anthropic.COM.", "AAAA")
    assert result.event == DnsQuery(name="api.anthropic.com", qtype="AAAA", answers=["fd00::2"])
    assert addresses(reply) == ["fd00::2"]
    assert reply.answer[0].name.to_text() == "API.Anthropic.COM."  # the client's case, echoed


def test_static_name_other_type_is_nodata():
    result, reply = ask("files.example", "AAAA")  # no IPv6 address in the map
    assert result.event == DnsQuery(name="files.example", qtype="AAAA")
    assert reply.rcode() == dns.rcode.NOERROR and reply.answer == []
    result, _ = ask("files.example", "HTTPS")
    assert result.event.qtype == "HTTPS" and result.event.rcode == "NOERROR"


def test_name_outside_policy_is_refused_without_edns():
    result, reply = ask("evil.example")
    assert result.event == DnsQuery(name="evil.example", qtype="A", rcode="REFUSED", refused=True)
    assert reply.rcode() == dns.rcode.REFUSED and reply.edns == -1  # no OPT: the query had none


def test_refusal_carries_extended_dns_error_when_query_used_edns():
    _, reply = ask("evil.example", edns=True)
    (option,) = reply.options
    assert isinstance(option, dns.edns.EDEOption) and option.code == dns.edns.EDECode.PROHIBITED


def test_wildcard_suffix_matches_below_not_the_apex():
    for name in ("files.pypi.org", "a.b.pypi.org"):
        event = ask(name)[0].event
        assert event.rcode == "SERVFAIL" and not event.refused  # allowed, but no forwarder
    assert ask("pypi.org")[0].event.refused
    assert ask("xpypi.org")[0].event.refused


def test_allowed_name_is_forwarded_when_a_forwarder_is_set():
    policy = DnsPolicy(allow=["*.pypi.org"], forward=("127.0.0.1", 5353))
    result, reply = ask("files.pypi.org", "AAAA", policy)
    assert reply is None and result.forward_needed
    assert result.event == DnsQuery(name="files.pypi.org", qtype="AAAA")


def test_unknown_type_is_spelled_as_the_rfcs_do():
    result, _ = ask("evil.example", "TYPE65280")
    assert result.event.qtype == "TYPE65280"


def test_big_static_answer_truncates_over_udp_not_tcp():
    policy = DnsPolicy(static={"many.example": [f"10.0.{i // 256}.{i % 256}" for i in range(100)]})
    wire = query("many.example").to_wire()
    udp = dns.message.from_wire(answer(wire, policy).response)
    assert udp.flags & dns.flags.TC and len(answer(wire, policy).response) <= 512
    tcp = dns.message.from_wire(answer(wire, policy, max_size=65535).response)
    assert not tcp.flags & dns.flags.TC and len(addresses(tcp)) == 100


# --- sans-IO: malformed input ---------------------------------------------------------------


def test_short_header_gets_no_reply():
    result = answer(b"\x12\x34\x01", POLICY)
    assert result.response is None and result.event == DnsQuery(name="", qtype="", rcode="FORMERR")
    assert result.error == "short header: 3 bytes"


def test_truncated_question_gets_formerr_with_the_query_id():
    wire = query("api.anthropic.com").to_wire()
    result = answer(wire[:20], POLICY)
    assert result.event == DnsQuery(name="", qtype="", rcode="FORMERR") and "unparseable" in result.error
    qid, flags, *counts = struct.unpack("!6H", result.response)
    assert qid == int.from_bytes(wire[:2], "big") and flags & 0x8000 and flags & 0xF == 1
    assert counts == [0, 0, 0, 0] and flags & 0x0100  # RD copied


def test_garbage_after_header_and_trailing_junk_are_formerr():
    assert answer(b"\xab\xcd\x01\x00\x00\x01" + b"\xff" * 30, POLICY).event.rcode == "FORMERR"
    assert answer(query("api.anthropic.com").to_wire() + b"junk", POLICY).event.rcode == "FORMERR"


def test_responses_are_never_answered():
    reply = answer(query("api.anthropic.com").to_wire(), POLICY).response
    result = answer(reply, POLICY)
    assert result.response is None and "QR=1" in result.error


def test_other_opcodes_get_notimp_and_two_questions_formerr():
    notify = query("api.anthropic.com")
    notify.set_opcode(dns.opcode.NOTIFY)
    result = answer(notify.to_wire(), POLICY)
    assert result.event.rcode == "NOTIMP" and dns.message.from_wire(result.response).rcode() == dns.rcode.NOTIMP
    two = bytearray(query("api.anthropic.com").to_wire())
    question = bytes(two[12:])
    two[4:6] = b"\x00\x02"
    assert answer(bytes(two) + question, POLICY).event.rcode == "FORMERR"


def test_class_other_than_in_is_refused():
    q = dns.message.make_query("version.bind", "TXT", rdclass="CH")
    result = answer(q.to_wire(), POLICY)
    assert result.event == DnsQuery(name="version.bind", qtype="TXT", rcode="REFUSED", refused=True)
    assert result.error == "class CH"


@given(st.binary(max_size=600))
def test_arbitrary_bytes_never_raise(data):
    result = answer(data, POLICY)
    assert isinstance(result.event, DnsQuery)
    if result.response is not None:
        assert len(result.response) >= 12


@given(st.binary(max_size=300))
def test_a_query_header_then_arbitrary_bytes_never_raise(tail):
    result = answer(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x01" + tail, POLICY)
    assert result.response is None or result.response[:2] == b"\x12\x34"


# --- sans-IO: forwarded replies ---------------------------------------------------------------


def test_upstream_reply_is_relayed_and_recorded():
    q = query("files.pypi.org")
    upstream = dns.message.make_response(q)
    upstream.answer.append(dns.rrset.from_text("files.pypi.org.", 30, "IN", "CNAME", "cdn.example."))
    upstream.answer.append(dns.rrset.from_text("cdn.example.", 30, "IN", "A", "192.0.2.7"))
    result = answer_from_upstream(q.to_wire(), upstream.to_wire())
    assert result.event == DnsQuery(name="files.pypi.org", qtype="A", answers=["cdn.example.", "192.0.2.7"])
    assert addresses(dns.message.from_wire(result.response)) == ["cdn.example.", "192.0.2.7"]


def test_missing_or_mismatched_upstream_reply_is_servfail():
    q = query("files.pypi.org")
    assert answer_from_upstream(q.to_wire(), None).event.rcode == "SERVFAIL"
    other = dns.message.make_response(query("files.pypi.org"))  # another id
    result = answer_from_upstream(q.to_wire(), other.to_wire())
    assert result.event.rcode == "SERVFAIL" and "does not match" in result.error
    assert answer_from_upstream(q.to_wire(), b"\x00").event.rcode == "SERVFAIL"


# --- the trio server on 127.0.0.1 -------------------------------------------------------------


async def serve(policy: DnsPolicy, client, **kw) -> list:
    """Run the witness, call ``client(port)`` in a thread, stop it; the events sent."""
    send, receive = trio.open_memory_channel[Submission](100)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(lambda task_status: run_dns_witness(
            send, listen_host="127.0.0.1", listen_port=0, policy=policy, task_status=task_status, **kw))
        await trio.to_thread.run_sync(client, port)
        await trio.sleep(0.05)  # let the last query's events through
        nursery.cancel_scope.cancel()
    return [s.event async for s in receive]


def test_server_answers_udp_and_tcp_and_records_each_query():
    def client(port: int) -> None:
        r = dns.query.udp(query("api.anthropic.com"), "127.0.0.1", port=port, timeout=5)
        assert addresses(r) == ["10.0.0.2"]
        r = dns.query.tcp(query("api.anthropic.com", "AAAA"), "127.0.0.1", port=port, timeout=5)
        assert addresses(r) == ["fd00::2"]
        r = dns.query.udp(query("evil.example", edns=True), "127.0.0.1", port=port, timeout=5)
        assert r.rcode() == dns.rcode.REFUSED

    events = trio.run(serve, POLICY, client)
    started, *queries, stopped = events
    assert isinstance(started, WitnessStarted) and started.detail["transports"] == ["udp", "tcp"]
    assert [(q.name, q.qtype, q.rcode, q.refused) for q in queries] == [
        ("api.anthropic.com", "A", "NOERROR", False), ("api.anthropic.com", "AAAA", "NOERROR", False),
        ("evil.example", "A", "REFUSED", True)]
    assert all(0 < q.duration_ns < 5_000_000_000 for q in queries)
    assert isinstance(stopped, WitnessStopped) and (stopped.lines, stopped.events, stopped.parse_failures) == (3, 3, 0)


def test_server_records_malformed_datagrams_with_a_raw_line():
    def client(port: int) -> None:
        import socket
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(5)
            s.sendto(b"\xbe\xef\x01\x00\x00\x01\xff\xff", ("127.0.0.1", port))  # 8 bytes: no reply
            s.sendto(b"\xbe\xef\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x05ab", ("127.0.0.1", port))
            assert s.recv(512)[:4] == b"\xbe\xef\x81\x01"  # FORMERR, id kept

    events = trio.run(serve, POLICY, client)
    queries = [e for e in events if isinstance(e, DnsQuery)]
    raws = [e for e in events if isinstance(e, WitnessRaw)]
    assert [q.rcode for q in queries] == ["FORMERR", "FORMERR"]
    assert raws[0].line.startswith("FORMERR short header: 8 bytes: beef")
    assert events[-1].parse_failures == 2 and events[-1].bytes == 8 + 15


def test_server_forwards_allowed_names_and_times_out_to_servfail():
    upstream_policy = DnsPolicy(static={"files.pypi.org": ["192.0.2.9"]})

    async def main() -> list:
        send, receive = trio.open_memory_channel[Submission](100)
        silent = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
        await silent.bind(("127.0.0.1", 0))  # a forwarder that never answers
        async with trio.open_nursery() as nursery:
            up = await nursery.start(lambda task_status: run_dns_witness(
                send.clone(), listen_host="127.0.0.1", listen_port=0, policy=upstream_policy,
                tcp=False, task_status=task_status))
            for forward, name in ((("127.0.0.1", up), "files.pypi.org"),
                                  (("127.0.0.1", silent.getsockname()[1]), "x.pypi.org")):
                policy = DnsPolicy(allow=["*.pypi.org"], forward=forward, forward_timeout_s=0.3)
                port = await nursery.start(lambda task_status, p=policy: run_dns_witness(
                    send.clone(), listen_host="127.0.0.1", listen_port=0, policy=p, tcp=False,
                    task_status=task_status))
                reply = await trio.to_thread.run_sync(
                    lambda: dns.query.udp(query(name), "127.0.0.1", port=port, timeout=5))
                assert [reply.rcode(), addresses(reply)] == (
                    [0, ["192.0.2.9"]] if name == "files.pypi.org" else [dns.rcode.SERVFAIL, []])
            await trio.sleep(0.05)
            nursery.cancel_scope.cancel()
        send.close()
        silent.close()
        return [s.event async for s in receive]

    events = trio.run(main)
    queries = [e for e in events if isinstance(e, DnsQuery)]
    assert sorted((q.name, q.rcode, tuple(q.answers)) for q in queries) == [
        ("files.pypi.org", "NOERROR", ("192.0.2.9",)), ("files.pypi.org", "NOERROR", ("192.0.2.9",)),
        ("x.pypi.org", "SERVFAIL", ())]
    timed_out = next(q for q in queries if q.name == "x.pypi.org")
    assert timed_out.duration_ns >= 300_000_000
    assert sum(isinstance(e, WitnessStopped) for e in events) == 3


def test_a_crashing_handler_is_a_gap_and_the_task_returns(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(dns_witness, "answer", broken)

    async def main() -> list:
        send, receive = trio.open_memory_channel[Submission](100)
        async with trio.open_nursery() as nursery:
            port = await nursery.start(lambda task_status: run_dns_witness(
                send, listen_host="127.0.0.1", listen_port=0, policy=POLICY, task_status=task_status))
            with trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM) as s:
                await s.sendto(query("api.anthropic.com").to_wire(), ("127.0.0.1", port))
        return [s.event async for s in receive]  # the nursery ended by itself

    started, gap = trio.run(main)
    assert isinstance(started, WitnessStarted)
    assert isinstance(gap, WitnessGap) and "boom" in gap.reason


def test_dig_against_the_server():
    if shutil.which("dig") is None:  # CI installs dnsutils: there a missing dig is a failure
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true and dig is not installed (apt-get install dnsutils)")
        pytest.skip("dig not installed (apt-get install dnsutils)")
    def client(port: int) -> None:
        out = subprocess.run(["dig", "+short", "+tries=1", "+time=3", "-p", str(port), "@127.0.0.1",
                              "api.anthropic.com", "A"], capture_output=True, text=True, timeout=10)
        assert out.stdout.split() == ["10.0.0.2"]

    events = trio.run(serve, POLICY, client)
    assert [e.name for e in events if isinstance(e, DnsQuery)] == ["api.anthropic.com"]
