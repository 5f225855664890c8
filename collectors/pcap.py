"""The pcap witness: tcpdump on the chamber's network interface; the pcap is a blob and
flow summaries are ``net.flow`` events.

- Sans-IO: `summarize_flows` (pcap bytes in, flows and `PcapStats` out) and
  `parse_tcpdump_stats` (tcpdump's closing stderr lines in, its counters out).
- `run_pcap_witness`, the trio task that runs tcpdump, then stores and summarises.

Flows are **bidirectional**: both directions of a connection are one flow, keyed by
(proto, endpoint pair) with the endpoints sorted, so a TCP connection or a DNS
query/answer pair is one ``net.flow``. ``src``/``sport`` is the initiator: the sender of
the first packet seen, except that a first TCP segment with SYN+ACK (the capture began
mid-handshake) makes its receiver the initiator. ``packets`` counts both directions and
``bytes`` sums IP datagram sizes (IPv4 total length, RFC 791; IPv6 40 + payload length,
RFC 8200): link headers are left out, so a flow measures the same on any link type.
Each direction is also counted on its own, in IPFIX's terms for a bidirectional flow
(RFC 5103; IANA IPFIX elements initiatorPackets 298, responderPackets 299, initiatorOctets
231, responderOctets 232, tcpControlBits 6): ``initiator_*`` is what ``src`` sent, and
``responder_*`` what came back to it; for a flow the chamber opened, what it sent and what
it received. ``initiator_tcp_flags``/``responder_tcp_flags`` OR together the TCP flags of
each direction's segments (RFC 9293 bits: FIN 0x01, SYN 0x02, RST 0x04, PSH 0x08, ACK 0x10,
...), so a reset (a refusal) is told from an answer; None for other protocols.
``first_ns``/``last_ns`` are the pcap timestamps, ns since the Unix epoch, exact integers.
ICMP (``icmp``) and ICMPv6 (``icmp6``) flows have no ports; other IP protocols are
named ``sctp``/``gre``/... or by number. Non-first IPv4 fragments carry no ports and so
count under a port-less flow of their protocol.

The framing is read here rather than with `dpkt.pcap.Reader`, which turns timestamps into
floats and silently yields a short last packet; dpkt decodes the link and IP layers.
Link types (www.tcpdump.org/linktypes.html): Ethernet (1), Linux cooked SLL (113) and
SLL2 (276, what ``-i any`` writes), raw IP (101, 228, 229). Packets that are not IP (ARP,
LLDP, ...) are counted in `PcapStats.non_ip`; IP packets dpkt cannot decode in
``undecodable``. A torn last record (tcpdump killed mid-write) sets ``truncated`` and is
not counted as a packet.
"""

from __future__ import annotations

import ipaddress
import os
import re
import signal
import struct
import subprocess
import time
from pathlib import Path
from typing import NamedTuple

import dpkt
import trio

from collectors.children import open_child
from collectors._witness import WitnessFailed, Witnessing, witness_life
from ledger import BlobStore, CaissonError, Submission
from ledger.events import BlobStored, NetFlow

__all__ = ["LINK_TYPES", "PcapParseError", "PcapStats", "parse_tcpdump_stats", "run_pcap_witness",
           "summarize_flows", "tcpdump_argv"]

WITNESS = "pcap"
LINK_TYPES = {1: "EN10MB", 101: "RAW", 113: "LINUX_SLL", 228: "IPV4", 229: "IPV6", 276: "LINUX_SLL2"}
"""Link types `summarize_flows` decodes, by pcap LINKTYPE number."""

_MAGICS = {0xA1B2C3D4: 1000, 0xA1B23C4D: 1}  # magic -> ns per timestamp fraction unit
_PCAPNG_MAGIC = 0x0A0D0D0A
_MAX_RECORD = 1 << 18  # tcpdump's largest snapshot length, bytes: larger is corruption
_PROTOS = {1: "icmp", 6: "tcp", 17: "udp", 47: "gre", 50: "esp", 58: "icmp6", 132: "sctp"}
_DECODE_ERRORS = (dpkt.Error, struct.error, ValueError, IndexError, KeyError, TypeError)
_SETTLE_S = 0.2  # the pcap must stop growing this long before SIGINT, s (see `_settle`)
_FINAL_TIMEOUT_S = 30.0  # stop tcpdump, store, parse and send: at most this long, s


class PcapParseError(CaissonError, ValueError):
    """Raised by `summarize_flows` when the bytes are not a pcap file it can read.

    Attributes:
        offset: byte offset of the problem in the file.
    """

    def __init__(self, message: str, *, offset: int = 0):
        super().__init__(f"pcap at byte {offset}: {message}")
        self.offset = offset


class PcapStats(NamedTuple):
    """What `summarize_flows` read.

    Attributes:
        link_type: the file's LINKTYPE number.
        packets: complete packet records read.
        captured_bytes: captured bytes of those records (record headers excluded).
        non_ip: packets that are not IPv4/IPv6 (ARP, LLDP, ...), counted, not summarised.
        undecodable: IP packets dpkt could not decode, counted, not summarised.
        truncated: the last record was cut short (a crash tore the file).
        error: why reading stopped before the end of the bytes, or None.
    """

    link_type: int
    packets: int = 0
    captured_bytes: int = 0
    non_ip: int = 0
    undecodable: int = 0
    truncated: bool = False
    error: str | None = None


def _ip_layer(link_type: int, frame: bytes) -> dpkt.Packet | bytes | None:
    """The decoded IP packet, raw bytes when IP but undecodable, None when not IP."""
    if link_type in (101, 228, 229):
        version = frame[0] >> 4 if frame else 0
        cls = {4: dpkt.ip.IP, 6: dpkt.ip6.IP6}.get(version)
        return None if cls is None else cls(frame)
    if link_type == 1:
        link = dpkt.ethernet.Ethernet(frame)
        ethertype = link.type
    else:
        link = (dpkt.sll.SLL if link_type == 113 else dpkt.sll2.SLL2)(frame)
        ethertype = link.ethtype
    if ethertype not in (dpkt.ethernet.ETH_TYPE_IP, dpkt.ethernet.ETH_TYPE_IP6):
        return None
    return link.data


def _addr(raw: bytes) -> str:
    return str(ipaddress.ip_address(raw))


def summarize_flows(pcap_bytes: bytes) -> tuple[list[NetFlow], PcapStats]:
    """Summarise a pcap file into bidirectional flows (see the module docstring).

    Args:
        pcap_bytes: a whole classic pcap file (microsecond or nanosecond magic, either
            byte order), possibly torn at the end.

    Returns:
        Flows ordered by ``first_ns`` (then key), and the reading's `PcapStats`.

    Raises:
        PcapParseError: fewer than 24 bytes, an unknown magic (pcapng included: tcpdump
            writes classic pcap with ``-w``), or a link type not in `LINK_TYPES`.
            Damage after the file header never raises: it ends reading with
            ``PcapStats.error`` set.
    """
    if len(pcap_bytes) < 24:
        raise PcapParseError(f"file header needs 24 bytes, got {len(pcap_bytes)}")
    for order in ("<", ">"):
        magic = struct.unpack_from(order + "I", pcap_bytes)[0]
        if magic in _MAGICS:
            break
    else:
        what = "pcapng is not supported" if magic == _PCAPNG_MAGIC else f"unknown magic {pcap_bytes[:4].hex()}"
        raise PcapParseError(what)
    unit_ns = _MAGICS[magic]
    link_type = struct.unpack_from(order + "I", pcap_bytes, 20)[0] & 0xFFFF  # upper bits: FCS info
    if link_type not in LINK_TYPES:
        raise PcapParseError(f"unsupported link type {link_type}", offset=20)
    record = struct.Struct(order + "IIII")
    flows: dict[tuple, list] = {}  # key -> [src, sport, dst, dport, proto, packets, bytes, first, last,
    #                                        initiator packets, bytes, tcp flags, responder packets, bytes, tcp flags]
    packets = captured = non_ip = undecodable = 0
    truncated, error, offset = False, None, 24
    while offset < len(pcap_bytes):
        if len(pcap_bytes) - offset < record.size:
            truncated = True
            break
        sec, frac, caplen, _wirelen = record.unpack_from(pcap_bytes, offset)
        if caplen > _MAX_RECORD:
            error = f"record at byte {offset} claims {caplen} bytes: corrupt"
            break
        body = pcap_bytes[offset + record.size: offset + record.size + caplen]
        if len(body) < caplen:
            truncated = True
            break
        offset += record.size + caplen
        packets += 1
        captured += caplen
        try:
            ip = _ip_layer(link_type, body)
            if ip is None:
                non_ip += 1
                continue
            if not isinstance(ip, (dpkt.ip.IP, dpkt.ip6.IP6)):
                raise ValueError("IP payload did not decode")
            size = (ip.len or len(ip)) if isinstance(ip, dpkt.ip.IP) else 40 + ip.plen
            src, dst, l4 = _addr(ip.src), _addr(ip.dst), ip.data
        except _DECODE_ERRORS:
            undecodable += 1
            continue
        ts_ns = sec * 1_000_000_000 + frac * unit_ns
        proto = _PROTOS.get(ip.p, str(ip.p))
        sport = dport = flags = None
        if isinstance(l4, (dpkt.tcp.TCP, dpkt.udp.UDP)):
            sport, dport = l4.sport, l4.dport
        if isinstance(l4, dpkt.tcp.TCP):
            flags = l4.flags
        a, b = (src, sport), (dst, dport)
        key = (proto, *sorted([a, b], key=lambda e: (e[0], -1 if e[1] is None else e[1])))
        flow = flows.get(key)
        if flow is None:
            syn_ack = flags is not None and flags & dpkt.tcp.TH_SYN and flags & dpkt.tcp.TH_ACK
            (s, sp), (d, dp) = (b, a) if syn_ack else (a, b)
            none = None if flags is None else 0
            flow = flows[key] = [s, sp, d, dp, proto, 0, 0, ts_ns, ts_ns, 0, 0, none, 0, 0, none]
        flow[5] += 1
        flow[6] += size
        flow[7], flow[8] = min(flow[7], ts_ns), max(flow[8], ts_ns)
        side = 9 if a == (flow[0], flow[1]) else 12  # sent by the initiator, or back to it
        flow[side] += 1
        flow[side + 1] += size
        if flags is not None:
            flow[side + 2] |= flags
    events = [NetFlow(proto=f[4], src=f[0], sport=f[1], dst=f[2], dport=f[3], packets=f[5], bytes=f[6],
                      first_ns=f[7], last_ns=f[8], initiator_packets=f[9], initiator_bytes=f[10],
                      initiator_tcp_flags=f[11], responder_packets=f[12], responder_bytes=f[13],
                      responder_tcp_flags=f[14])
              for f in sorted(flows.values(), key=lambda f: (f[7], f[4], f[0], f[1] or 0, f[2], f[3] or 0))]
    stats = PcapStats(link_type=link_type, packets=packets, captured_bytes=captured, non_ip=non_ip,
                      undecodable=undecodable, truncated=truncated, error=error)
    return events, stats


_STATS_LINE = re.compile(r"^(\d+) packets? (captured|received by filter|dropped by kernel|dropped by interface)$")


def parse_tcpdump_stats(stderr_text: str) -> dict[str, int]:
    """tcpdump's closing counters, from its stderr.

    Args:
        stderr_text: everything tcpdump wrote to stderr.

    Returns:
        ``{"captured": N, "received_by_filter": N, "dropped_by_kernel": N,
        "dropped_by_interface": N}`` with the keys tcpdump printed (none when it was
        killed before printing them).
    """
    out: dict[str, int] = {}
    for line in stderr_text.splitlines():
        if match := _STATS_LINE.match(line.strip()):
            out[match.group(2).replace(" ", "_")] = int(match.group(1))
    return out


def tcpdump_argv(interface: str, pcap_path: Path, bpf_filter: str = "", *, tcpdump: str = "tcpdump",
                 snaplen: int = 0) -> list[str]:
    """The tcpdump command line: unbuffered (``-U``), immediate, whole packets, ns stamps.

    ``-Z root`` (only when running as root) keeps tcpdump from dropping to its own user
    before opening the output file, which may sit in a directory only root can write.

    Args:
        interface: the interface to capture (``any`` for all).
        pcap_path: where tcpdump writes the pcap.
        bpf_filter: a pcap-filter(7) expression; empty captures everything.
        tcpdump: the tcpdump executable.
        snaplen: bytes kept of each packet; 0: tcpdump's default (whole packets).
    """
    argv = [tcpdump, "-i", interface, "-U", "-n", "-s", str(snaplen), "--immediate-mode",
            "--time-stamp-precision=nano", "-w", str(pcap_path)]
    if os.geteuid() == 0:
        argv += ["-Z", "root"]
    return argv + ([bpf_filter] if bpf_filter else [])


# --- the trio task -----------------------------------------------------------------------


async def run_pcap_witness(
    send_channel: trio.MemorySendChannel[Submission],
    *,
    interface: str,
    pcap_path: Path,
    blobs: BlobStore,
    bpf_filter: str = "",
    tcpdump: str = "tcpdump",
    start_timeout_s: float = 10.0,
    stop_timeout_s: float = 5.0,
    snaplen: int = 0,
    task_status: trio.TaskStatus[bool] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Capture ``interface`` with tcpdump until cancelled, then file the evidence.

    Starts `tcpdump_argv` and waits for its ``listening on`` line (stderr) before
    ``witness.started`` and ``task_status.started(True)``. On cancellation it stops
    tcpdump (SIGINT, then SIGKILL after ``stop_timeout_s``), stores the pcap
    (``blob.stored``, role ``pcap``), sends one ``net.flow`` per flow, then
    ``witness.stopped`` (``lines``: packets in the file, ``parse_failures``: undecodable
    packets + 1 for a torn tail, ``bytes``: pcap file size) and re-raises; all of that
    shielded, bounded by 30 s. ``witness.gap`` (the run goes on, void) when tcpdump
    cannot start (then ``task_status.started(False)``), exits by itself (what it captured
    is still filed), the kernel dropped packets, the file holds fewer packets than
    tcpdump captured, or the file cannot be read or summarised.

    Args:
        send_channel: where submissions go; closed when this task ends, so pass a clone.
        interface: the interface to capture (the chamber network's bridge; ``any``).
        pcap_path: where tcpdump writes; must not be read by anyone else meanwhile.
        blobs: the run's blob store.
        bpf_filter, tcpdump, snaplen: as `tcpdump_argv` takes them.
        start_timeout_s: how long to wait for ``listening on``, seconds.
        stop_timeout_s: how long tcpdump may take to exit after SIGINT, seconds.
        task_status: started with True when capturing, False when capture failed.
    """
    argv = tcpdump_argv(interface, pcap_path, bpf_filter, tcpdump=tcpdump, snaplen=snaplen)
    stderr = bytearray()
    async with witness_life(send_channel, WITNESS, missing="pcap, net.flow") as w:
        try:
            proc, listening = await _start(argv, stderr, start_timeout_s)
        except WitnessFailed:
            task_status.started(False)
            raise
        exited_by_itself = False
        try:
            await w.started({"argv": argv, "interface": interface, "listening": listening})
            task_status.started(True)
            assert proc.stderr is not None  # stderr=PIPE
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_drain, proc.stderr, stderr)
                await proc.wait()
                exited_by_itself = True
        finally:
            with trio.move_on_after(_FINAL_TIMEOUT_S, shield=True):
                await _finish(w, proc, pcap_path, blobs, stderr, stop_timeout_s, exited_by_itself=exited_by_itself)


async def _finish(w: Witnessing, proc: trio.Process, pcap_path: Path, blobs: BlobStore, stderr: bytearray,
                  stop_timeout_s: float, *, exited_by_itself: bool) -> None:
    """Stop tcpdump; once started, file what it captured (called shielded)."""
    since = w.now()[0]
    killed = await _stop(proc, pcap_path, stderr, stop_timeout_s)
    if not w.has_started:  # the writer went away before: nobody to file it for
        return
    if killed:
        await w.gap(f"tcpdump did not stop on SIGINT within {stop_timeout_s:g} s and was killed: packets it"
                    " had not written, and its counters, are lost", missing="packets after this time",
                    since_ns=since)
    if exited_by_itself:
        await w.gap(f"tcpdump exited by itself ({proc.returncode}): {_tail(stderr)}",
                    missing="packets after this time", since_ns=since)
    await _file_capture(w, pcap_path, blobs, parse_tcpdump_stats(stderr.decode(errors="replace")))


def _tail(stderr: bytearray) -> str:
    return stderr.decode(errors="replace").strip()[-500:]


async def _start(argv: list[str], stderr: bytearray, timeout_s: float) -> tuple[trio.Process, str]:
    """Start tcpdump and wait for its ``listening on`` line; the process and that line.

    Raises:
        WitnessFailed: tcpdump cannot run or did not start listening (it is reaped).
    """
    try:
        proc = await open_child(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        assert proc.stderr is not None
    except OSError as exc:
        raise WitnessFailed(f"cannot run tcpdump: {exc}") from exc
    listening = None
    try:
        with trio.move_on_after(timeout_s):
            while listening is None:
                chunk = await proc.stderr.receive_some(4096)
                if not chunk:
                    break
                stderr += chunk
                listening = next((line for line in stderr.decode(errors="replace").splitlines()
                                  if "listening on" in line), None)
    except BaseException:  # cancelled while starting: leave no tcpdump behind
        with trio.CancelScope(shield=True):
            await _reap(proc)
        raise
    if listening is None:
        with trio.CancelScope(shield=True):
            await _reap(proc)
        raise WitnessFailed(f"tcpdump did not start (exit {proc.returncode}): {_tail(stderr)}")
    return proc, listening.strip()


async def _stop(proc: trio.Process, pcap_path: Path, stderr: bytearray, timeout_s: float) -> bool:
    """Stop tcpdump once the pcap settled (SIGINT, SIGKILL after ``timeout_s``); keep its last
    words. True when it had to be killed (what it had not written yet is lost)."""
    killed = False
    if proc.returncode is None:
        with trio.move_on_after(timeout_s):
            await _settle(pcap_path, _SETTLE_S)
        proc.send_signal(signal.SIGINT)  # tcpdump flushes, prints its counters
        with trio.move_on_after(timeout_s):
            await proc.wait()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
            killed = True
    assert proc.stderr is not None  # stderr=PIPE (`_start`)
    with trio.move_on_after(1.0):
        await _drain(proc.stderr, stderr)
    await _reap(proc)
    return killed


async def _settle(pcap_path: Path, quiet_s: float) -> None:
    """Wait until the pcap file has not grown for ``quiet_s`` seconds.

    On SIGINT tcpdump breaks its loop at once: packets still in the kernel ring and not
    yet read are lost without being counted as dropped (seen with libpcap 1.10.3: "0
    packets captured, 12 packets received by filter" when stopped within a millisecond
    of the traffic). Letting tcpdump catch up first closes that window in practice.
    """
    size, quiet_since = -1, time.monotonic_ns()
    while True:
        try:
            now_size = os.stat(pcap_path).st_size
        except OSError:
            now_size = -1
        if now_size != size:
            size, quiet_since = now_size, time.monotonic_ns()
        elif time.monotonic_ns() - quiet_since >= quiet_s * 1e9:
            return
        await trio.sleep(quiet_s / 4)


async def _reap(proc: trio.Process) -> None:
    """Kill ``proc`` if it still runs, wait for it and close its stderr pipe."""
    if proc.returncode is None:
        proc.kill()
    await proc.wait()
    assert proc.stderr is not None  # stderr=PIPE (`_start`)
    await proc.stderr.aclose()


async def _drain(stream: trio.abc.ReceiveStream, into: bytearray) -> None:
    """Read ``stream`` until EOF, keeping the last 64 KiB (tcpdump's messages)."""
    while chunk := await stream.receive_some(4096):
        into += chunk
        del into[:-65536]


async def _file_capture(w: Witnessing, pcap_path: Path, blobs: BlobStore, counters: dict[str, int]) -> None:
    """Store the pcap, send its flows and the gaps it shows (called shielded).

    Raises:
        WitnessFailed: the pcap cannot be read or summarised (no ``witness.stopped`` follows).
    """
    try:
        data = await trio.to_thread.run_sync(Path(pcap_path).read_bytes)
    except OSError as exc:
        raise WitnessFailed(f"pcap unreadable: {exc}", missing="pcap, net.flow") from exc
    digest = await trio.to_thread.run_sync(blobs.put, data)
    await w.send(BlobStored(sha256=digest, size_bytes=len(data), role="pcap", media_type="application/vnd.tcpdump.pcap"))
    try:
        flows, stats = await trio.to_thread.run_sync(summarize_flows, data)
    except PcapParseError as exc:
        raise WitnessFailed(f"pcap not summarised: {exc}", missing="net.flow") from exc
    for flow in flows:
        await w.send(flow)
    dropped = counters.get("dropped_by_kernel", 0) + counters.get("dropped_by_interface", 0)
    if dropped:
        await w.gap(f"the kernel dropped {dropped} packets", missing="dropped packets", dropped=dropped)
    if stats.packets < counters.get("captured", 0):
        await w.gap(f"pcap holds {stats.packets} packets, tcpdump captured {counters['captured']}",
                    missing="packets absent from the pcap", dropped=counters["captured"] - stats.packets)
    if stats.error:
        await w.gap(f"pcap damaged: {stats.error}", missing="net.flow")
    w.lines, w.parse_failures, w.bytes = stats.packets, stats.undecodable + stats.truncated, len(data)
