"""The network witnesses with the chamber: LLM calls seen first-hand, egress policed, nothing secret kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from caisson.cli import main
from caisson.detectors import VOID
from caisson.home import ensure_operator_key
from caisson.probes.selftest import PROBES
from caisson.replay import replay_runs
from caisson.run.record import RecordOptions, record
from caisson.run.witnesses import default_witnesses
from collectors.llm import LlmCallBuilder
from ledger import read_records
from ledger.events import DnsQuery, HttpExchange, LlmCall, NetConnect, NetFlow, ProxyTunnel
from tests.caisson.conftest import require
from tests.collectors.llm_server import FIXTURES, LlmServer
from tests.helpers import HostListener, commit_all

SECRETS = ("sk-ant-chamber-secret-1234", "Bearer sk-openai-chamber-5678", "session=chamber-cookie-9012")


@pytest.fixture
def llm_server(tmp_path):
    with LlmServer(tmp_path, cookie="server-set-cookie-3456") as server:
        yield server


def scenario(tmp_path: Path, server: LlmServer) -> Path:
    path = tmp_path / "net.toml"
    path.write_text(f'''
name = "network"
[egress]
allow_hosts = ["api.anthropic.com", "api.openai.com"]
upstream = {{ "api.anthropic.com" = "127.0.0.1:{server.port}", "api.openai.com" = "127.0.0.1:{server.port}" }}
upstream_ca = "{server.cert}"
''')
    return path


def expected(request: str, response: str, provider: str, endpoint: str) -> LlmCall:
    builder = LlmCallBuilder(provider, endpoint)
    builder.request((FIXTURES / request).read_bytes())
    sse = response.endswith(".sse")
    builder.response_start(200, [("content-type", "text/event-stream" if sse else "application/json")])
    builder.response_data((FIXTURES / response).read_bytes())
    return builder.finish()


CLIENT = r"""
set -e
for pair in "anthropic_request.json /v1/messages api.anthropic.com" \
            "anthropic_request_stream.json /v1/messages api.anthropic.com" \
            "openai_chat_request.json /v1/chat/completions api.openai.com" \
            "openai_responses_request_stream.json /v1/responses api.openai.com"; do
  set -- $pair
  curl -sS -m 20 "https://$3$2" -H 'content-type: application/json' -H "x-api-key: sk-ant-chamber-secret-1234" \
       -H "authorization: Bearer sk-openai-chamber-5678" -H "cookie: session=chamber-cookie-9012" \
       --data-binary "@fixtures/$1" -o /dev/null -w "%{http_code}\n"
done
curl -s -m 5 -o /dev/null -w "%{http_connect}\n" https://example.com/ || true
getent hosts api.anthropic.com > /dev/null
getent hosts evil.example.com > /dev/null || true
python3 -c "import socket; s=socket.socket(); s.settimeout(1)
try: s.connect(('1.1.1.1', 443))
except OSError: pass"
"""


def test_llm_calls_through_the_chamber_proxy(chamber_image, llm_server, tmp_path):
    repo = tmp_path / "repo"
    (repo / "fixtures").mkdir(parents=True)
    for name in ("anthropic_request.json", "anthropic_request_stream.json", "openai_chat_request.json",
                 "openai_responses_request_stream.json"):
        (repo / "fixtures" / name).write_bytes((FIXTURES / name).read_bytes())
    commit_all(repo, "fixtures")
    run_dir = tmp_path / "run"
    assert main(["record", "--scenario", str(scenario(tmp_path, llm_server)), "--repo", str(repo),
                 "--out", str(run_dir), "--", "sh", "-c", CLIENT]) == 0
    events = [r.event for r in read_records(run_dir)]
    stdout = next(e for e in events if getattr(e, "role", None) == "stdout")
    assert (run_dir / "blobs" / stdout.sha256[:2] / stdout.sha256).read_text().split() == ["200"] * 4 + ["403"]
    calls = [e for e in events if isinstance(e, LlmCall)]
    assert [(c.provider, c.endpoint, c.streamed) for c in calls] == [
        ("anthropic", "messages", False), ("anthropic", "messages", True),
        ("openai", "chat.completions", False), ("openai", "responses", True)]
    want = [expected("anthropic_request.json", "anthropic_response.json", "anthropic", "messages"),
            expected("anthropic_request_stream.json", "anthropic_stream.sse", "anthropic", "messages"),
            expected("openai_chat_request.json", "openai_chat_response.json", "openai", "chat.completions"),
            expected("openai_responses_request_stream.json", "openai_responses_stream.sse", "openai", "responses")]
    for got, exp in zip(calls, want):
        assert (got.requested_model, got.served_model, got.stop_reason, got.usage, got.normalized) == \
               (exp.requested_model, exp.served_model, exp.stop_reason, exp.usage, exp.normalized)
        assert got.usage is not None and got.normalized.total_tokens is not None
    exchanges = [e for e in events if isinstance(e, HttpExchange)]
    assert not [e for e in exchanges if e.denied]
    denied = [e for e in events if isinstance(e, ProxyTunnel) and e.denied]  # refused at its CONNECT
    assert [(e.host, e.port) for e in denied] == [("example.com", 443)]
    assert [(e.host, e.protocol, e.exchanges) for e in events if isinstance(e, ProxyTunnel) and not e.denied] == [
        ("api.anthropic.com", "tls/http", 1), ("api.anthropic.com", "tls/http", 1),
        ("api.openai.com", "tls/http", 1), ("api.openai.com", "tls/http", 1)]
    queries = {(e.name, e.qtype): e for e in events if isinstance(e, DnsQuery)}
    assert queries[("api.anthropic.com", "A")].answers and not queries[("api.anthropic.com", "A")].refused
    assert queries[("evil.example.com", "A")].refused and queries[("evil.example.com", "A")].rcode == "REFUSED"
    flows = [e for e in events if isinstance(e, NetFlow)]
    assert any(f.dst == "1.1.1.1" and f.dport == 443 and f.proto == "tcp" for f in flows)  # in the capture too
    assert any(isinstance(e, NetConnect) and e.address == "1.1.1.1" for e in events)
    pcap = next(e for e in events if getattr(e, "role", None) == "pcap")
    assert (run_dir / "blobs" / pcap.sha256[:2] / pcap.sha256).stat().st_size == pcap.size_bytes
    everything = b"".join(p.read_bytes() for p in run_dir.rglob("*") if p.is_file())
    for secret in SECRETS + ("server-set-cookie-3456",):
        assert secret.encode() not in everything, secret
    for secret in ("sk-ant-chamber-secret-1234", "sk-openai-chamber-5678", "chamber-cookie-9012"):
        assert secret.encode() not in everything, secret


def test_a_direct_connection_around_the_witnesses_fails_and_is_visible(chamber_image, tmp_path):
    run_dir = tmp_path / "run"
    script = ("python3 -c \"import socket\ns=socket.socket(); s.settimeout(3)\n"
              "try:\n    s.connect(('1.1.1.1', 443)); print('connected')\nexcept OSError as e:\n    print('failed', e)\"")
    assert main(["record", "--out", str(run_dir), "--", "sh", "-c", script]) == 0
    events = [r.event for r in read_records(run_dir)]
    attempts = [e for e in events if isinstance(e, NetConnect) and e.address == "1.1.1.1"]
    assert attempts and attempts[0].port == 443 and attempts[0].result != 0


# --- tunnels through the proxy: caisson#28, from the chamber ------------------------------

RAW_AFTER_AN_ALLOWED_CONNECT = r"""
python3 - <<'PY'
import os, socket
host, _, port = os.environ["HTTPS_PROXY"].split("//", 1)[1].rstrip("/").rpartition(":")
sock = socket.create_connection((host, int(port)), timeout=5)
sock.sendall(b"CONNECT api.anthropic.com:443 HTTP/1.1\r\nHost: api.anthropic.com:443\r\n\r\n")
print("allowed CONNECT", sock.recv(100).split(b" ")[1].decode())
sock.sendall(b"\x00\x01 raw TCP, not HTTP\r\n")
sock.settimeout(3)
print("after raw bytes", sock.recv(100) or b"closed")
PY
"""


def _tunneler(tmp_path: Path, server: LlmServer, listener: HostListener, weaken: tuple[str, ...] = (),
              extra: str = "") -> tuple[list, list, str]:
    """The selftest's proxy tunneler (and ``extra``) recorded in a chamber aiming at
    ``listener``: the run's events, its replayed findings and its stdout."""
    run_dir = tmp_path / "run"
    options = RecordOptions(command=["sh", "-c", (PROBES / "proxy_tunneler.sh").read_text() + extra],
                            scenario=scenario(tmp_path, server), out=run_dir, timeout_s=60, weaken=list(weaken),
                            env={"PROBE_LISTENER_PORT": str(listener.port)})
    record(options, witnesses=default_witnesses(weaken=weaken))
    events = [r.event for r in read_records(run_dir)]
    stdout = next(e for e in events if getattr(e, "role", None) == "stdout")
    [replayed] = replay_runs([run_dir], ensure_operator_key().verify_key)
    return events, replayed.findings, (run_dir / "blobs" / stdout.sha256[:2] / stdout.sha256).read_text()


def test_a_chamber_cannot_tunnel_through_the_proxy_to_the_hosts_loopback(chamber_image, llm_server, tmp_path):
    with HostListener("127.0.0.1") as listener:
        events, findings, stdout = _tunneler(tmp_path, llm_server, listener, extra=RAW_AFTER_AN_ALLOWED_CONNECT)
    assert listener.accepted == 0 and not listener.received, stdout  # nothing reached the host's loopback
    assert [line.split()[2] for line in stdout.splitlines() if line.startswith("CONNECT")] == ["403"] * 3, stdout
    assert "allowed CONNECT 200" in stdout and "after raw bytes b'closed'" in stdout, stdout
    tunnels = [e for e in events if isinstance(e, ProxyTunnel)]
    assert sorted((t.host, t.port) for t in tunnels if "not in the allow list" in (t.denied or "")) == sorted(
        [("127.0.0.1", listener.port), ("0x7f.1", listener.port), ("::ffff:127.0.0.1", listener.port)])
    [raw] = [t for t in tunnels if t.host == "api.anthropic.com"]
    assert raw.protocol == "tcp" and "raw TCP is not relayed" in raw.denied and raw.client_bytes == 0
    chamber = {f.src for f in events if isinstance(f, NetFlow) and f.proto == "tcp"}
    assert {t.client.rpartition(":")[0] for t in tunnels} <= chamber  # the chamber's end, as captured
    shown = [f for f in findings if f.detector == "network.denied_egress@2" and "CONNECT" in f.message]
    assert len(shown) == 4
    assert not [f for f in findings if f.effect == VOID], [f.message for f in findings if f.effect == VOID]


def test_with_the_proxys_tunnels_weakened_the_bytes_reach_the_host_and_the_run_is_void(chamber_image, llm_server,
                                                                                       tmp_path):
    with HostListener("127.0.0.1") as listener:
        events, findings, stdout = _tunneler(tmp_path, llm_server, listener, weaken=("proxy_tunnels",))
    assert listener.accepted >= 1 and b"not HTTP: raw TCP to the host" in listener.received, stdout  # main's behaviour
    relayed = [e for e in events if isinstance(e, ProxyTunnel) and e.protocol == "tcp" and e.denied is None]
    assert relayed and all(t.port == listener.port for t in relayed)
    voids = [f for f in findings if f.detector == "network.unpoliced_tunnel@1" and f.effect == VOID]
    assert len(voids) == len(relayed) and "relayed raw TCP" in voids[0].message


def _another_host_address() -> str:
    """An IPv4 address of the host's other than loopback (docker0's, eth0's): not the
    gateway of the network a run is about to get."""
    import subprocess

    out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True).stdout
    addresses = [line.split()[3].split("/")[0] for line in out.splitlines() if " inet " in f" {line} "]
    others = [a for a in addresses if not a.startswith("127.")]
    require(None if others else "the host has no IPv4 address but loopback")
    return others[0]


def test_a_chamber_reaches_no_other_address_of_the_host_on_a_witness_port(chamber_image, llm_server, tmp_path):
    """Port 53 is the chamber's resolver on its own gateway, and another run's on that
    run's gateway: a datagram to port 53 of another of the host's addresses is rejected."""
    other = _another_host_address()
    script = ("python3 -c \"import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2)\n"
              f"s.sendto(b'\\xab\\xcd dns-shaped', ('{other}', 53))\n"
              "try:\n    print('answered', s.recv(100))\nexcept OSError as e:\n    print('no answer', e)\"")
    with HostListener(other, 53, udp=True) as elsewhere:
        assert main(["record", "--scenario", str(scenario(tmp_path, llm_server)), "--out", str(tmp_path / "run"),
                     "--", "sh", "-c", script]) == 0
    assert elsewhere.accepted == 0 and not elsewhere.received
