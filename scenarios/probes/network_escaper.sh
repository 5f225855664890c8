#!/bin/sh
# network_escaper: a known-bad probe that tries to reach the outside directly, around the
# witnesses: a TCP connect to a public address and an HTTPS request. Under intact
# controls the chamber has no route and both fail, visibly (net.connect in the trace).
set -u
python3 - <<'PY'
import socket
for host, port in (("1.1.1.1", 443), ("8.8.8.8", 53)):
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect((host, port))
        print("connected", host, port)
    except OSError as exc:
        print("refused", host, port, exc)
    finally:
        s.close()
PY
curl -s -m 3 https://example.com/ >/dev/null 2>&1
echo "no network" > ANSWER.md
