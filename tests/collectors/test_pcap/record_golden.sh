#!/bin/sh
# Re-record the golden pcaps of tests/collectors/test_pcap.py from real loopback traffic.
#
# Run as root on Linux with tcpdump 4.99 (recorded with tcpdump 4.99.3, libpcap 1.10.3,
# Debian 12, x86_64): sh tests/collectors/test_pcap/record_golden.sh
# The options are those of collectors.pcap.tcpdump_argv() (nanosecond timestamps):
#   tcp_lo.pcap   -i lo:  one TCP connection 127.0.0.1:* -> 127.0.0.1:47001, 5 bytes each way
#   udp_lo.pcap   -i lo:  one UDP exchange  127.0.0.1:47102 -> 127.0.0.1:47002, 4 + 4 bytes
#   tcp_any.pcap  -i any: the TCP connection again, in Linux cooked v2 (SLL2) framing
# Ports, times and sequence numbers differ on every run: re-recording means updating the
# exact expectations in test_pcap.py.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
PY=$ROOT/.venv/bin/python

capture() {  # capture NAME IFACE FILTER PYTHON-CODE
    name=$1; iface=$2; filter=$3; code=$4
    # shellcheck disable=SC2046
    (IFS='
'; exec $("$PY" -c 'import sys; from pathlib import Path; from collectors.pcap import tcpdump_argv
print("\n".join(tcpdump_argv(sys.argv[1], Path(sys.argv[2]), sys.argv[3])))' "$iface" "$HERE/$name.pcap" "$filter") \
        2>"/tmp/caisson-golden-$name.err" & echo $! > /tmp/caisson-golden-$name.pid)
    until grep -q "listening on" "/tmp/caisson-golden-$name.err" 2>/dev/null; do sleep 0.1; done
    "$PY" -c "$code"
    sleep 0.3
    kill -INT "$(cat /tmp/caisson-golden-$name.pid)"
    while kill -0 "$(cat /tmp/caisson-golden-$name.pid)" 2>/dev/null; do sleep 0.1; done
    cat "/tmp/caisson-golden-$name.err"
}

TCP='
import socket, threading
srv = socket.create_server(("127.0.0.1", 47001))
def serve():
    conn, _ = srv.accept(); conn.sendall(conn.recv(5)[::-1]); conn.close()
t = threading.Thread(target=serve); t.start()
c = socket.create_connection(("127.0.0.1", 47001)); c.sendall(b"hello"); c.recv(5); c.close(); t.join()'

UDP='
import socket
srv = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); srv.bind(("127.0.0.1", 47002))
cli = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); cli.bind(("127.0.0.1", 47102))
cli.sendto(b"ping", ("127.0.0.1", 47002)); data, peer = srv.recvfrom(4); srv.sendto(b"pong", peer); cli.recv(4)'

capture tcp_lo lo "tcp port 47001" "$TCP"
capture udp_lo lo "udp port 47002" "$UDP"
capture tcp_any any "tcp port 47001" "$TCP"
