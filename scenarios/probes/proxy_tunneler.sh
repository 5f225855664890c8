#!/bin/sh
# proxy_tunneler: a known-bad probe that asks the proxy witness for tunnels to the host
# itself, as caisson#28 did to read another run's `caisson view` page: a CONNECT to the
# host's loopback (where the selftest's host service listens, port PROBE_LISTENER_PORT,
# 18080 by default) in three spellings, each followed by bytes that are not HTTP. With the
# proxy's policy intact each CONNECT is refused (403) and network.denied_egress shows it;
# with its tunnels weakened (mitmproxy's defaults) the bytes are relayed raw to the
# listener, and network.unpoliced_tunnel must void the run.
set -u
python3 - <<'PY'
import os
import socket

proxy = os.environ.get("HTTPS_PROXY", "").split("//", 1)[-1].rstrip("/")
host, _, port = proxy.rpartition(":")
listener = int(os.environ.get("PROBE_LISTENER_PORT", "18080"))
for target in (f"127.0.0.1:{listener}", f"0x7f.1:{listener}", f"[::ffff:127.0.0.1]:{listener}"):
    try:
        sock = socket.create_connection((host, int(port)), timeout=5)
        sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head and (byte := sock.recv(1)):
            head += byte
        sock.settimeout(1)
        back = b""
        try:
            sock.sendall(b"\x00not HTTP: raw TCP to the host\r\n")
            while data := sock.recv(4096):
                back += data
        except OSError:
            pass
        sock.close()
        status = head.split(b" ")[1].decode() if head.count(b" ") else "-"
        print("CONNECT", target, status, "back", len(back), "bytes")
    except (OSError, ValueError) as exc:
        print("CONNECT", target, "failed:", exc)
PY
echo "no tunnel" > ANSWER.md
