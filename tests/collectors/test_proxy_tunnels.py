"""The proxy witness relays only what it polices, and records every tunnel it is asked for.

Real mitmdump, a real listener on the host's loopback (what another run's `caisson view`
page or a host daemon is), raw sockets speaking CONNECT. Every route the chamber could take
through the proxy to somewhere the policy does not name is tried: CONNECT to loopback in
every spelling a resolver takes, to the host's own and to unlisted addresses, to an allowed
name on another port or that resolves to loopback; bytes that are not HTTP after an allowed
CONNECT; a Host header, absolute-form target, HTTP/2 ``:authority`` or TLS SNI that
disagrees with the target; a WebSocket or other upgrade. The listener must receive nothing
and each attempt must be in the witness's events.
"""

from __future__ import annotations

import base64
import hashlib
import socket
import ssl
import threading
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import pytest

from collectors.proxy import ProxyInfo
from ledger.events import HttpExchange, ProxyTunnel, WitnessStarted
from tests.collectors.llm_server import FIXTURES, LlmServer
from tests.collectors.test_proxy import Witness
from tests.helpers import HostListener

pytestmark = pytest.mark.xdist_group("proxy_witness")

ANTHROPIC = "api.anthropic.com"


@pytest.fixture(scope="module")
def listener():
    with HostListener("127.0.0.1") as lst:
        yield lst


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    with LlmServer(tmp_path_factory.mktemp("llm-server")) as srv:
        yield srv


class UpgradeServer:
    """Plain HTTP/1.1 on 127.0.0.1: a WebSocket endpoint (RFC 6455) that echoes one message,
    and any other ``Upgrade`` answered ``101`` and then echoed as raw bytes."""

    GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 §1.3

    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.1)
        self.port = self._sock.getsockname()[1]
        self.raw_received = bytearray()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._done.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(3)
                try:
                    self._one(conn)
                except OSError:
                    pass

    def _one(self, conn: socket.socket) -> None:
        head = _read_head(conn)
        headers = dict(line.split(": ", 1) for line in head.decode().split("\r\n")[1:] if ": " in line)
        lower = {k.lower(): v for k, v in headers.items()}
        if lower.get("upgrade", "").lower() == "websocket":
            accept = base64.b64encode(hashlib.sha1(lower["sec-websocket-key"].encode() + self.GUID).digest())
            conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                         b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n")
            payload = _read_ws_frame(conn)
            conn.sendall(bytes([0x81, len(payload)]) + payload)  # unmasked text frame, the echo
            conn.sendall(bytes([0x88, 0]))  # close
            return
        conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: " + lower.get("upgrade", "x").encode()
                     + b"\r\nConnection: Upgrade\r\n\r\n")
        while data := conn.recv(65536):
            self.raw_received += data
            conn.sendall(data)

    def close(self) -> None:
        self._done.set()
        self._thread.join()
        self._sock.close()


def _read_head(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(1)
        if not chunk:
            break
        data += chunk
    return data


def _read_ws_frame(sock: socket.socket) -> bytes:
    """One small client frame (masked, RFC 6455 §5.2): its payload."""
    first = sock.recv(2)
    length = first[1] & 0x7F
    mask = sock.recv(4)
    masked = b""
    while len(masked) < length:
        masked += sock.recv(length - len(masked))
    return bytes(b ^ mask[i % 4] for i, b in enumerate(masked))


@pytest.fixture(scope="module")
def upgrade_server():
    srv = UpgradeServer()
    yield srv
    srv.close()


@pytest.fixture(scope="module")
def witness(tmp_path_factory, server, listener, upgrade_server):
    w = Witness(tmp_path_factory.mktemp("proxy"), server,
                allow_hosts=(ANTHROPIC, f"localhost:{listener.port}", "ws.test", "*.fronted.test"),
                upstream={"ws.test": f"http://127.0.0.1:{upgrade_server.port}"})
    yield w
    w.stop()


def _connect(info: ProxyInfo, target: str, host_header: str | None = None) -> tuple[socket.socket, int]:
    """A CONNECT to ``target`` through the proxy: the socket and the proxy's status code."""
    sock = socket.create_connection((info.host, info.port), timeout=5)
    sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {host_header or target}\r\n\r\n".encode())
    head = _read_head(sock)
    return sock, int(head.split()[1])


def _after(sock: socket.socket, data: bytes, wait_s: float = 2.0) -> bytes:
    """Send ``data`` into the tunnel; what comes back before the proxy closes it (or ``wait_s``)."""
    sock.settimeout(wait_s)
    got = b""
    try:
        sock.sendall(data)
        while chunk := sock.recv(65536):
            got += chunk
    except OSError:
        pass
    sock.close()
    return got


def _tls(info: ProxyInfo, target: str, sni: str, alpn: list[str] | None = None) -> ssl.SSLSocket:
    sock, status = _connect(info, target)
    assert status == 200, status
    ctx = ssl.create_default_context(cafile=str(info.ca_cert_path))
    ctx.check_hostname = False  # the SNI under test may differ from the tunnel's name
    if alpn:
        ctx.set_alpn_protocols(alpn)
    return ctx.wrap_socket(sock, server_hostname=sni)


def _tunnel(witness: Witness, host: str, port: int | None = None) -> ProxyTunnel:
    [tunnel] = witness.wait_for(ProxyTunnel, lambda t: t.host == host and (port is None or t.port == port))
    return tunnel


# --- the example of caisson#28: a CONNECT to the host's loopback, then raw TCP ------------


def test_connect_to_the_hosts_loopback_is_refused_and_nothing_reaches_the_listener(witness, listener):
    target = f"127.0.0.1:{listener.port}"
    sock, status = _connect(witness.info, target)
    back = _after(sock, b"\x00raw bytes, not HTTP\r\n", wait_s=0.5)
    assert status == 403
    assert listener.accepted == 0 and not listener.received and HostListener.BANNER not in back
    tunnel = _tunnel(witness, "127.0.0.1", listener.port)
    assert tunnel.via == "connect" and tunnel.denied and "not in the allow list" in tunnel.denied
    assert tunnel.client and tunnel.client.startswith("127.0.0.1:") and tunnel.started_ns > 0


@pytest.mark.parametrize("spelling", ["2130706433", "0x7f.1", "0177.0.0.1", "127.1", "[::ffff:127.0.0.1]",
                                      "[::1]", "127.0.0.2", "0.0.0.0"])
def test_every_spelling_of_loopback_is_refused(witness, listener, spelling):
    sock, status = _connect(witness.info, f"{spelling}:{listener.port}")
    _after(sock, b"\x00raw", wait_s=0.5)
    assert status == 403
    assert listener.accepted == 0 and not listener.received
    assert _tunnel(witness, spelling.strip("[]"), listener.port).denied


@pytest.mark.parametrize("target", ["192.0.2.2:443", "10.255.255.1:443", "198.51.100.7:80", "example.com:443"])
def test_a_connect_to_an_address_or_name_outside_the_allow_list_is_refused(witness, target):
    sock, status = _connect(witness.info, target)
    _after(sock, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", wait_s=0.5)
    assert status == 403
    host, _, port = target.rpartition(":")
    assert "not in the allow list" in _tunnel(witness, host, int(port)).denied


def test_an_allowed_name_on_another_port_is_refused(witness):
    sock, status = _connect(witness.info, f"{ANTHROPIC}:22")
    _after(sock, b"SSH-2.0-client\r\n", wait_s=0.5)
    assert status == 403
    assert "port 22" in _tunnel(witness, ANTHROPIC, 22).denied


def test_a_connect_whose_host_header_names_another_host_is_refused(witness):
    sock, status = _connect(witness.info, f"{ANTHROPIC}:443", host_header="evil.example:443")
    sock.close()
    assert status == 403
    witness.wait_for(ProxyTunnel, lambda t: t.host == ANTHROPIC and t.denied is not None and "Host header" in t.denied)


def test_an_allowed_name_that_resolves_to_loopback_reaches_nothing(witness, listener):
    sock, status = _connect(witness.info, f"localhost:{listener.port}")
    assert status == 200  # the name and port are allowed; the address they resolve to is not
    back = _after(sock, f"GET /via-localhost HTTP/1.1\r\nHost: localhost:{listener.port}\r\n\r\n".encode())
    assert back.startswith(b"HTTP/1.1 502") and b"loopback" in back
    assert listener.accepted == 0 and not listener.received
    [ex] = witness.wait_for(HttpExchange, lambda e: e.path == "/via-localhost")
    assert ex.status == 502 and ex.denied and "127.0.0.1, loopback" in ex.denied


def test_raw_bytes_after_an_allowed_connect_are_not_relayed(witness, listener):
    for target, host in ((f"localhost:{listener.port}", "localhost"), (f"{ANTHROPIC}:443", ANTHROPIC)):
        sock, status = _connect(witness.info, target)
        assert status == 200
        assert _after(sock, b"\x00\x01raw TCP, not HTTP\r\n\r\n") == b""  # closed, nothing relayed back
        [tunnel] = witness.wait_for(ProxyTunnel, lambda t: t.host == host and t.protocol == "tcp")
        assert tunnel.denied and "raw TCP" in tunnel.denied and tunnel.client_bytes == tunnel.server_bytes == 0
    assert listener.accepted == 0 and not listener.received


# --- one spelling of a name: trailing dot and case reach the same upstream ----------------


@pytest.mark.parametrize("spelling", [f"{ANTHROPIC}.", ANTHROPIC.upper()])
def test_another_spelling_of_an_allowed_name_is_rewritten_like_it(witness, server, spelling):
    tls = _tls(witness.info, f"{spelling}:443", sni=spelling.rstrip(".").lower())
    body = (FIXTURES / "anthropic_request.json").read_bytes()
    tag = f"spelling-{spelling}"
    tls.sendall(f"POST /v1/messages?tag={tag} HTTP/1.1\r\nHost: {spelling}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
    reply = _after(tls, b"")
    assert reply.startswith(b"HTTP/1.1 200"), reply[:200]  # served by the rewrite, not the real host
    assert any(f"tag={tag}" in path for path, _, _ in server.requests)
    [ex] = witness.wait_for(HttpExchange, lambda e: f"tag={tag}" in e.path)
    assert ex.status == 200 and ex.denied is None


# --- what a request says of its host must agree with where it goes -----------------------


def _refused(witness: Witness, tag: str) -> HttpExchange:
    [ex] = witness.wait_for(HttpExchange, lambda e: f"tag={tag}" in e.path)
    assert ex.status == 403 and ex.denied
    return ex


def test_a_host_header_that_disagrees_with_the_tunnel_is_refused(witness, server):
    tls = _tls(witness.info, f"{ANTHROPIC}:443", sni=ANTHROPIC)
    reply = _after(tls, b"GET /?tag=host-header HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 403")
    assert "Host header" in _refused(witness, "host-header").denied
    assert not any("tag=host-header" in path for path, _, _ in server.requests)


def test_a_tls_sni_that_disagrees_with_the_tunnel_is_refused(witness, server):
    tls = _tls(witness.info, f"{ANTHROPIC}:443", sni="a.fronted.test")  # an allowed name, another host
    reply = _after(tls, f"GET /?tag=sni HTTP/1.1\r\nHost: {ANTHROPIC}\r\nConnection: close\r\n\r\n".encode())
    assert reply.startswith(b"HTTP/1.1 403")
    assert "SNI" in _refused(witness, "sni").denied


def test_an_absolute_form_target_naming_another_host_is_refused(witness, server):
    tls = _tls(witness.info, f"{ANTHROPIC}:443", sni=ANTHROPIC)
    reply = _after(tls, f"GET https://evil.example/?tag=absolute HTTP/1.1\r\nHost: {ANTHROPIC}\r\n"
                        "Connection: close\r\n\r\n".encode())
    assert reply.startswith(b"HTTP/1.1 403")
    assert "evil.example" in _refused(witness, "absolute").denied


def test_a_plain_proxy_request_whose_host_header_disagrees_is_refused(witness):
    sock = socket.create_connection((witness.info.host, witness.info.port), timeout=5)
    reply = _after(sock, f"GET http://{ANTHROPIC}/?tag=plain-host HTTP/1.1\r\nHost: evil.example\r\n"
                         "Connection: close\r\n\r\n".encode())
    assert reply.startswith(b"HTTP/1.1 403")
    assert "Host header" in _refused(witness, "plain-host").denied


def _h2_request(witness: Witness, authority: str, path: str) -> int:
    """One HTTP/2 GET through a CONNECT tunnel to api.anthropic.com; the response status."""
    tls = _tls(witness.info, f"{ANTHROPIC}:443", sni=ANTHROPIC, alpn=["h2"])
    assert tls.selected_alpn_protocol() == "h2"
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    conn.send_headers(1, [(":method", "GET"), (":scheme", "https"), (":authority", authority), (":path", path)],
                      end_stream=True)
    tls.sendall(conn.data_to_send())
    status = None
    while status is None:
        data = tls.recv(65536)
        assert data, "the proxy closed the HTTP/2 connection"
        for event in conn.receive_data(data):
            if isinstance(event, h2.events.ResponseReceived):
                status = int(dict(event.headers)[b":status"])
        tls.sendall(conn.data_to_send())
    tls.close()
    return status


def test_http2_inside_an_allowed_tunnel_is_policed_per_stream(witness):
    assert _h2_request(witness, "evil.example", "/?tag=h2-evil") == 403
    assert "evil.example" in _refused(witness, "h2-evil").denied
    assert _h2_request(witness, ANTHROPIC, "/?tag=h2-ok") == 200
    [ex] = witness.wait_for(HttpExchange, lambda e: "tag=h2-ok" in e.path)
    assert ex.status == 200 and ex.denied is None


# --- upgrades: a WebSocket is recorded as a tunnel; other protocols are not relayed -------


def _ws_key() -> str:
    return base64.b64encode(b"caisson-ws-key-1").decode()


def test_a_websocket_upgrade_is_a_recorded_tunnel(witness):
    sock = socket.create_connection((witness.info.host, witness.info.port), timeout=5)
    sock.sendall(f"GET http://ws.test/socket?tag=ws HTTP/1.1\r\nHost: ws.test\r\nUpgrade: websocket\r\n"
                 f"Connection: Upgrade\r\nSec-WebSocket-Key: {_ws_key()}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
    assert _read_head(sock).startswith(b"HTTP/1.1 101")
    payload, mask = b"hello over a websocket", b"\x01\x02\x03\x04"
    sock.sendall(bytes([0x81, 0x80 | len(payload)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
    echo = sock.recv(2 + len(payload))
    assert echo[2:] == payload
    sock.close()
    [tunnel] = witness.wait_for(ProxyTunnel, lambda t: t.host == "ws.test" and t.via == "upgrade" and t.ended_ns)
    assert tunnel.protocol == "websocket" and tunnel.denied is None
    assert tunnel.client_bytes == tunnel.server_bytes == len(payload)


def test_an_upgrade_to_another_protocol_is_not_relayed(witness, upgrade_server):
    sock = socket.create_connection((witness.info.host, witness.info.port), timeout=5)
    sock.sendall(b"GET http://ws.test/raw?tag=raw-upgrade HTTP/1.1\r\nHost: ws.test\r\nUpgrade: caisson-raw\r\n"
                 b"Connection: Upgrade\r\n\r\n")
    head = _read_head(sock)
    back = _after(sock, b"raw bytes after the upgrade")
    assert b"raw bytes after the upgrade" not in back and not upgrade_server.raw_received, (head, back)
    [tunnel] = witness.wait_for(ProxyTunnel, lambda t: t.host == "ws.test" and t.protocol == "caisson-raw")
    assert tunnel.via == "upgrade" and tunnel.denied and "caisson-raw" in tunnel.denied


# --- and still: the one normaliser, the policy recorded -----------------------------------


def test_the_addon_in_mitmdump_loaded_the_one_normaliser(witness):
    import collectors.egress

    [started] = witness.events(WitnessStarted)
    assert started.detail["egress"] == str(Path(collectors.egress.__file__).resolve())
    assert started.detail["tunnels"] == "policed" and started.detail["rawtcp"] is False
