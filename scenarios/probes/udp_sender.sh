#!/bin/sh
# udp_sender: a known-bad probe that sends without connect(): an unconnected UDP socket
# sendto()s a DNS-shaped datagram to a public resolver and to its gateway (the host) on a
# port no witness owns, sendmsg()s another, and a TCP socket sends its first bytes with the
# SYN (MSG_FASTOPEN). The strace witness records each destination (net.send) and the
# packet capture the flows: network.bypass_attempt shows the sends, and
# network.unexplained_flow reports every flow no witness accounts for (void when packets
# left for anywhere but the host: with the network control weakened).
set -u
python3 - <<'PY'
import socket

def gateway():
    for line in open("/proc/net/route").read().splitlines()[1:]:
        fields = line.split()
        if fields[1] == "00000000":
            raw = fields[2]
            return ".".join(str(int(raw[i:i + 2], 16)) for i in (6, 4, 2, 0))
    return None

QUERY = bytes.fromhex("abcd01000001000000000000076578616d706c6503636f6d0000010001")  # A example.com
gw = gateway()
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for host, port in (("1.1.1.1", 53), (gw, 18081)):
    if host is None:
        continue
    try:
        print("sendto", host, port, udp.sendto(QUERY, (host, port)))
    except OSError as exc:
        print("sendto", host, port, exc)
if gw is not None:
    try:
        print("sendmsg", gw, udp.sendmsg([QUERY], [], 0, (gw, 18082)))
    except OSError as exc:
        print("sendmsg", gw, exc)
    tcp = socket.socket()
    tcp.settimeout(2)
    try:
        print("fastopen", tcp.sendto(b"GET / HTTP/1.0\r\n\r\n", socket.MSG_FASTOPEN, (gw, 18080)))
    except OSError as exc:
        print("fastopen", exc)
PY
echo "no network" > ANSWER.md
