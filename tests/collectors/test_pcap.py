"""Tests for collectors/pcap.py: the flow summariser on golden pcaps captured on loopback
(tests/collectors/test_pcap/record_golden.sh) and on pcaps built with dpkt, torn and
garbage files, tcpdump's counters, and the trio task capturing ``lo`` for real.

Without tcpdump or capture permission the end-to-end tests skip locally and FAIL when
``CI=true``: a missing capture must never turn into a green run."""

from __future__ import annotations

import io
import os
import shutil
import signal
import socket
import struct
from pathlib import Path

import dpkt
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from ledger import BlobStore, Submission
from ledger.events import BlobStored, NetFlow, WitnessGap, WitnessStarted, WitnessStopped
from collectors.pcap import PcapParseError, parse_tcpdump_stats, run_pcap_witness, summarize_flows, tcpdump_argv

GOLDEN = Path(__file__).parent / "test_pcap"


def golden(name: str) -> bytes:
    return (GOLDEN / name).read_bytes()


# --- golden pcaps, captured for real ----------------------------------------------------------


def test_tcp_connection_on_lo_is_one_flow():
    flows, stats = summarize_flows(golden("tcp_lo.pcap"))
    # SYN, SYN-ACK, ACK, 5 bytes, ACK, 5 bytes, ACK, FIN, FIN, ACK: 10 IPv4 datagrams
    # each side: 60 (SYN with options) + 4 x 52, one of them with 5 bytes of data; flags S|P|F|A each
    assert flows == [NetFlow(proto="tcp", src="127.0.0.1", sport=40744, dst="127.0.0.1", dport=47001,
                             packets=10, bytes=546, first_ns=1796003075376613086, last_ns=1796003075376986992,
                             initiator_packets=5, initiator_bytes=273, initiator_tcp_flags=0x1B,
                             responder_packets=5, responder_bytes=273, responder_tcp_flags=0x1B)]
    assert (stats.link_type, stats.packets, stats.captured_bytes) == (1, 10, 686)
    assert (stats.non_ip, stats.undecodable, stats.truncated, stats.error) == (0, 0, False, None)


def test_udp_exchange_on_lo_is_one_flow_with_ip_sizes():
    flows, stats = summarize_flows(golden("udp_lo.pcap"))
    assert flows == [NetFlow(proto="udp", src="127.0.0.1", sport=47102, dst="127.0.0.1", dport=47002,
                             packets=2, bytes=2 * (20 + 8 + 4), first_ns=1796003077620558259,
                             last_ns=1796003077620607962, initiator_packets=1, initiator_bytes=32,
                             responder_packets=1, responder_bytes=32)]
    assert stats.captured_bytes == 2 * (14 + 20 + 8 + 4)  # Ethernet headers are not flow bytes


def test_any_interface_writes_sll2_and_decodes():
    flows, stats = summarize_flows(golden("tcp_any.pcap"))
    # tcpdump reported 2 packets dropped by kernel for this capture: 9 of 10 made it
    assert stats.link_type == 276 and stats.packets == 9
    assert [(f.proto, f.sport, f.dport, f.packets) for f in flows] == [("tcp", 50038, 47001, 9)]
    assert flows[0].initiator_packets + flows[0].responder_packets == 9


def test_every_cut_of_a_golden_file_is_tolerated():
    data = golden("tcp_lo.pcap")
    previous = 0
    for cut in range(24, len(data) + 1):
        flows, stats = summarize_flows(data[:cut])
        assert stats.truncated == (cut not in _record_ends(data))
        assert previous <= stats.packets == sum(f.packets for f in flows)
        assert all(f.initiator_packets + f.responder_packets == f.packets
                   and f.initiator_bytes + f.responder_bytes == f.bytes for f in flows)
        previous = stats.packets
    assert previous == 10


def _record_ends(data: bytes) -> set[int]:
    ends, offset = {24}, 24
    while offset < len(data):
        offset += 16 + struct.unpack_from("<I", data, offset + 8)[0]
        ends.add(offset)
    return ends


# --- hand-built pcaps ------------------------------------------------------------------------


def build(packets: list[tuple[float, bytes]], *, linktype: int = 1, nano: bool = False) -> bytes:
    out = io.BytesIO()
    writer = dpkt.pcap.Writer(out, linktype=linktype, nano=nano, snaplen=65535)
    for ts, frame in packets:
        writer.writepkt(frame, ts=ts)
    return out.getvalue()


def eth(ip: dpkt.Packet, ethertype: int = dpkt.ethernet.ETH_TYPE_IP) -> bytes:
    return bytes(dpkt.ethernet.Ethernet(src=b"\x02" * 6, dst=b"\x04" * 6, type=ethertype, data=ip))


def ip4(src: str, dst: str, l4: dpkt.Packet) -> dpkt.ip.IP:
    proto = {dpkt.tcp.TCP: 6, dpkt.udp.UDP: 17, dpkt.icmp.ICMP: 1}[type(l4)]
    packet = dpkt.ip.IP(src=socket.inet_aton(src), dst=socket.inet_aton(dst), p=proto, data=l4)
    packet.len = 20 + len(l4)
    return packet


def ip6(src: str, dst: str, l4: dpkt.Packet) -> dpkt.ip6.IP6:
    packet = dpkt.ip6.IP6(src=socket.inet_pton(socket.AF_INET6, src), dst=socket.inet_pton(socket.AF_INET6, dst),
                          nxt=17, hlim=64, data=l4)
    packet.plen = len(l4)
    return packet


def udp(sport: int, dport: int, payload: bytes) -> dpkt.udp.UDP:
    return dpkt.udp.UDP(sport=sport, dport=dport, ulen=8 + len(payload), data=payload)


def test_ipv6_udp_arp_and_icmp_flows():
    arp = bytes(dpkt.ethernet.Ethernet(type=dpkt.ethernet.ETH_TYPE_ARP, data=dpkt.arp.ARP()))
    echo = dpkt.icmp.ICMP(type=8, data=dpkt.icmp.ICMP.Echo(id=1, seq=1, data=b"x" * 8))
    reply = dpkt.icmp.ICMP(type=0, data=dpkt.icmp.ICMP.Echo(id=1, seq=1, data=b"x" * 8))
    data = build([
        (1.0, eth(ip6("fd00::5", "fd00::1", udp(40000, 53, b"q" * 30)), dpkt.ethernet.ETH_TYPE_IP6)),
        (1.5, arp),
        (2.0, eth(ip6("fd00::1", "fd00::5", udp(53, 40000, b"a" * 50)), dpkt.ethernet.ETH_TYPE_IP6)),
        (3.0, eth(ip4("10.0.0.5", "10.0.0.1", echo))),
        (3.25, eth(ip4("10.0.0.1", "10.0.0.5", reply))),
    ])
    flows, stats = summarize_flows(data)
    assert flows == [
        NetFlow(proto="udp", src="fd00::5", sport=40000, dst="fd00::1", dport=53, packets=2,
                bytes=40 + 38 + 40 + 58, first_ns=1_000_000_000, last_ns=2_000_000_000,
                initiator_packets=1, initiator_bytes=40 + 38, responder_packets=1, responder_bytes=40 + 58),
        NetFlow(proto="icmp", src="10.0.0.5", dst="10.0.0.1", packets=2, bytes=2 * (20 + 16),
                first_ns=3_000_000_000, last_ns=3_250_000_000, initiator_packets=1, initiator_bytes=36,
                responder_packets=1, responder_bytes=36),
    ]
    assert (stats.packets, stats.non_ip, stats.undecodable) == (5, 1, 0)


def test_a_syn_ack_seen_first_makes_its_receiver_the_initiator():
    syn_ack = dpkt.tcp.TCP(sport=443, dport=51000, flags=dpkt.tcp.TH_SYN | dpkt.tcp.TH_ACK)
    ack = dpkt.tcp.TCP(sport=51000, dport=443, flags=dpkt.tcp.TH_ACK)
    flows, _ = summarize_flows(build([(5.0, eth(ip4("10.0.0.1", "10.0.0.5", syn_ack))),
                                      (5.1, eth(ip4("10.0.0.5", "10.0.0.1", ack)))]))
    assert [(f.src, f.sport, f.dst, f.dport, f.packets) for f in flows] == [("10.0.0.5", 51000, "10.0.0.1", 443, 2)]
    assert (flows[0].initiator_packets, flows[0].initiator_tcp_flags) == (1, dpkt.tcp.TH_ACK)
    assert (flows[0].responder_packets, flows[0].responder_tcp_flags) == (1, dpkt.tcp.TH_SYN | dpkt.tcp.TH_ACK)


def test_an_unanswered_send_and_a_refused_connect_count_nothing_back_but_the_reset():
    syn = dpkt.tcp.TCP(sport=40000, dport=18080, flags=dpkt.tcp.TH_SYN)
    rst = dpkt.tcp.TCP(sport=18080, dport=40000, flags=dpkt.tcp.TH_RST | dpkt.tcp.TH_ACK)
    flows, _ = summarize_flows(build([(1.0, eth(ip4("172.19.0.2", "1.1.1.1", udp(40001, 53, b"q" * 29)))),
                                      (2.0, eth(ip4("172.19.0.2", "172.19.0.1", syn))),
                                      (2.1, eth(ip4("172.19.0.1", "172.19.0.2", rst))),
                                      (3.0, eth(ip4("172.19.0.2", "1.1.1.1", udp(40001, 53, b"q" * 29))))]))
    sent, refused = flows
    assert (sent.initiator_packets, sent.initiator_bytes, sent.responder_packets, sent.responder_bytes) == (2, 114, 0, 0)
    assert sent.initiator_tcp_flags is None and sent.responder_tcp_flags is None  # not TCP
    assert (refused.src, refused.initiator_packets, refused.initiator_tcp_flags) == ("172.19.0.2", 1, dpkt.tcp.TH_SYN)
    assert (refused.responder_packets, refused.responder_tcp_flags) == (1, dpkt.tcp.TH_RST | dpkt.tcp.TH_ACK)


def test_nanosecond_stamps_are_exact_and_big_endian_files_read():
    frame = eth(ip4("10.0.0.5", "10.0.0.1", udp(1, 2, b"")))
    nano = bytearray(build([(0.0, frame)], nano=True))
    struct.pack_into("<II", nano, 24, 1_700_000_000, 123_456_789)  # set the stamp exactly
    assert summarize_flows(bytes(nano))[0][0].first_ns == 1_700_000_000_123_456_789
    little = build([(1_700_000_000.25, frame)])
    big = bytearray(little[:24])
    big[:24] = struct.pack(">IHHiIII", *struct.unpack("<IHHiIII", little[:24]))
    big += struct.pack(">IIII", *struct.unpack_from("<IIII", little, 24)) + little[40:]
    assert summarize_flows(bytes(big))[0] == summarize_flows(little)[0]
    assert summarize_flows(little)[0][0].first_ns == 1_700_000_000_250_000_000


def test_cooked_and_raw_link_types():
    packet = bytes(ip4("10.0.0.5", "10.0.0.1", udp(1000, 2000, b"abc")))
    sll = bytes(dpkt.sll.SLL(type=4, ethtype=dpkt.ethernet.ETH_TYPE_IP)) + packet
    raw_flows, _ = summarize_flows(build([(1.0, packet)], linktype=101))
    sll_flows, _ = summarize_flows(build([(1.0, sll)], linktype=113))
    assert raw_flows == sll_flows == [NetFlow(proto="udp", src="10.0.0.5", sport=1000, dst="10.0.0.1",
                                              dport=2000, packets=1, bytes=31, first_ns=1_000_000_000,
                                              last_ns=1_000_000_000, initiator_packets=1, initiator_bytes=31,
                                              responder_packets=0, responder_bytes=0)]


def test_undecodable_ip_is_counted_not_summarised():
    flows, stats = summarize_flows(build([(1.0, b"\x04" * 12 + b"\x08\x00" + b"\x45\x00\x00")]))
    assert flows == [] and (stats.packets, stats.undecodable) == (1, 1)


def test_bad_headers_raise_the_parsers_error():
    with pytest.raises(PcapParseError, match="24 bytes"):
        summarize_flows(b"\xd4\xc3\xb2\xa1")
    with pytest.raises(PcapParseError, match="pcapng"):
        summarize_flows(b"\x0a\x0d\x0d\x0a" + b"\x00" * 40)
    with pytest.raises(PcapParseError, match="link type 127"):
        summarize_flows(build([], linktype=127))


def test_a_corrupt_record_length_stops_reading_with_an_error():
    data = bytearray(golden("udp_lo.pcap"))
    struct.pack_into("<I", data, 24 + 16 + 46 + 8, 0x7FFFFFFF)  # second record's caplen
    flows, stats = summarize_flows(bytes(data))
    assert stats.packets == 1 and "corrupt" in stats.error and flows[0].packets == 1


@given(st.binary(max_size=400))
def test_arbitrary_bytes_raise_only_the_parsers_error(data):
    try:
        summarize_flows(data)
    except PcapParseError:
        pass


@given(st.binary(max_size=2000), st.sampled_from([1, 101, 113, 276]))
def test_a_valid_header_then_arbitrary_records_never_raise(body, linktype):
    flows, stats = summarize_flows(build([], linktype=linktype) + body)
    assert sum(f.packets for f in flows) + stats.non_ip + stats.undecodable == stats.packets


def test_tcpdump_counters():
    text = ("tcpdump: listening on lo, link-type EN10MB (Ethernet), snapshot length 262144 bytes\n"
            "10 packets captured\n20 packets received by filter\n2 packets dropped by kernel\n")
    assert parse_tcpdump_stats(text) == {"captured": 10, "received_by_filter": 20, "dropped_by_kernel": 2}
    assert parse_tcpdump_stats("1 packet captured\n") == {"captured": 1}
    assert parse_tcpdump_stats("") == {}


def test_tcpdump_argv_pins_the_capture_options(tmp_path):
    argv = tcpdump_argv("br-x", tmp_path / "c.pcap", "not arp")
    assert argv[:10] == ["tcpdump", "-i", "br-x", "-U", "-n", "-s", "0", "--immediate-mode",
                         "--time-stamp-precision=nano", "-w"]
    assert argv[-1] == "not arp"


# --- the trio task, capturing lo ---------------------------------------------------------------


def require_capture() -> None:
    """Skip (locally) or fail (CI=true) unless tcpdump can capture here."""
    problem = None
    if shutil.which("tcpdump") is None:
        problem = "tcpdump not installed: apt-get install tcpdump"
    elif os.geteuid() != 0:
        problem = "capturing needs root (or CAP_NET_RAW on tcpdump)"
    if problem is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and {problem}", pytrace=False)
    pytest.skip(problem)


async def capture(tmp_path: Path, traffic, **kw) -> tuple[list, object]:
    send, receive = trio.open_memory_channel[Submission](1000)
    result = {}
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            result["ok"] = await nursery.start(lambda task_status: run_pcap_witness(
                send, pcap_path=tmp_path / "c.pcap", blobs=BlobStore(tmp_path / "blobs"),
                task_status=task_status, **kw))
            await traffic()
            nursery.cancel_scope.cancel()
    return [s.event async for s in receive], result["ok"]


def test_capture_on_lo_stores_the_pcap_and_sends_flows(tmp_path):
    require_capture()

    async def traffic() -> None:
        server = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
        await server.bind(("127.0.0.1", 0))
        port = server.getsockname()[1]
        with server, trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM) as client:
            await client.bind(("127.0.0.1", 0))
            traffic.ports = (client.getsockname()[1], port)
            for i in range(3):
                await client.sendto(b"ping%d" % i, ("127.0.0.1", port))
                data, peer = await server.recvfrom(100)
                await server.sendto(b"pong", peer)
                await client.recv(100)

    events, ok = trio.run(lambda: capture(tmp_path, traffic, interface="lo", bpf_filter="udp and host 127.0.0.1"))
    assert ok is True
    started, blob, *flows, stopped = events
    assert isinstance(started, WitnessStarted) and "listening on lo" in started.detail["listening"]
    assert isinstance(blob, BlobStored) and blob.role == "pcap"
    stored = BlobStore(tmp_path / "blobs").get(blob.sha256)
    assert len(stored) == blob.size_bytes == (tmp_path / "c.pcap").stat().st_size
    sport, dport = traffic.ports
    mine = [f for f in flows if (f.sport, f.dport) == (sport, dport)]
    assert [(f.packets, f.bytes) for f in mine] == [(6, 3 * (28 + 5) + 3 * (28 + 4))], events
    assert summarize_flows(stored)[0] == flows
    assert isinstance(stopped, WitnessStopped) and stopped.lines == summarize_flows(stored)[1].packets >= 6
    assert stopped.bytes == blob.size_bytes and stopped.parse_failures == 0


def test_an_interface_that_does_not_exist_is_a_gap(tmp_path):
    require_capture()

    async def nothing() -> None:
        pass

    events, ok = trio.run(lambda: capture(tmp_path, nothing, interface="caisson-nope0"))
    assert ok is False
    (gap,) = events
    assert isinstance(gap, WitnessGap) and "did not start" in gap.reason and "caisson-nope0" in gap.reason


def test_a_missing_tcpdump_is_a_gap(tmp_path):
    async def nothing() -> None:
        pass

    events, ok = trio.run(lambda: capture(tmp_path, nothing, interface="lo", tcpdump="/nonexistent/tcpdump"))
    assert ok is False and isinstance(events[0], WitnessGap) and "cannot run tcpdump" in events[0].reason


def test_tcpdump_dying_mid_run_is_a_gap_and_keeps_what_it_captured(tmp_path):
    require_capture()
    import psutil

    async def kill_tcpdump() -> None:
        children = [p for p in psutil.Process().children() if p.name() == "tcpdump"]
        assert len(children) == 1
        children[0].kill()
        await trio.sleep(0.5)

    events, ok = trio.run(lambda: capture(tmp_path, kill_tcpdump, interface="lo", bpf_filter="udp port 9"))
    assert ok is True
    kinds = [type(e) for e in events]
    assert kinds[:3] == [WitnessStarted, WitnessGap, BlobStored] and WitnessStopped not in kinds
    assert "exited by itself (-9)" in events[1].reason


def test_a_recorder_thread_with_sigint_blocked_still_stops_tcpdump_with_sigint(tmp_path):
    """A child inherits its forking thread's signal mask across exec, and a Ray actor's
    threads block SIGINT: tcpdump started there ignored the SIGINT that stops it and was
    killed after the stop timeout (5 s a run; its counters, printed on SIGINT, lost)."""
    import threading
    import time

    require_capture()

    async def traffic() -> None:
        await trio.sleep(0.1)

    out: dict = {}

    def recorder_thread() -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        started = time.monotonic()
        out["events"], _ = trio.run(lambda: capture(tmp_path, traffic, interface="lo", bpf_filter="udp port 9",
                                                    stop_timeout_s=20.0))
        out["took"] = time.monotonic() - started

    thread = threading.Thread(target=recorder_thread)
    thread.start()
    thread.join()
    assert isinstance(out["events"][-1], WitnessStopped), out["events"]
    assert not [e for e in out["events"] if isinstance(e, WitnessGap)], out["events"]  # not killed
    assert out["took"] < 10, out  # stopped by its SIGINT, not at the 20 s timeout


def test_a_tcpdump_that_has_to_be_killed_is_a_gap(tmp_path, monkeypatch):
    """What tcpdump had not written when it was killed is lost: a gap, not a quiet stop."""
    from collectors import children

    require_capture()
    monkeypatch.setattr(children, "clear_signal_mask",  # a tcpdump that ignores SIGINT
                        lambda: signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}))

    async def traffic() -> None:
        await trio.sleep(0.1)

    events, _ = trio.run(lambda: capture(tmp_path, traffic, interface="lo", bpf_filter="udp port 9",
                                         stop_timeout_s=0.5))
    [gap] = [e for e in events if isinstance(e, WitnessGap)]
    assert "tcpdump did not stop on SIGINT within 0.5 s and was killed" in gap.reason
