"""The network witnesses with the chamber: LLM calls seen first-hand, egress policed, nothing secret kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from caisson.cli import main
from collectors.llm import LlmCallBuilder
from ledger import read_records
from ledger.events import DnsQuery, HttpExchange, LlmCall, NetConnect, NetFlow
from tests.collectors.llm_server import FIXTURES, LlmServer
from tests.helpers import commit_all

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
curl -s -m 5 -o /dev/null -w "%{http_code}\n" https://example.com/
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
    denied = [e for e in exchanges if e.denied]
    assert [e.host for e in denied] == ["example.com"] and denied[0].status == 403
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
