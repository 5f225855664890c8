"""A local HTTPS server speaking recorded-shape LLM API responses, for proxy tests.

It serves the fixtures of ``tests/collectors/test_llm/`` (Anthropic Messages, OpenAI Chat
Completions and Responses, streamed as SSE or not) on 127.0.0.1 with its own self-signed
certificate (made with `cryptography`). Query parameters of the request steer it:

- ``gzip=1``: gzip the body (``Content-Encoding: gzip``; streamed bodies compressed
  incrementally with a flush per event, as real servers do).
- ``pause=S``: after the first SSE event, wait S seconds before the rest.
- ``cut=1``: close the connection mid-stream (no terminal chunk).
- ``body=badjson`` / ``body=badutf8``: send a malformed JSON / invalid UTF-8 body.

`LlmServer.last_chunk_sent` records, per request path+query, when the last body chunk
left the server (``time.monotonic_ns``), for the streaming test.
"""

from __future__ import annotations

import datetime
import gzip
import ipaddress
import json
import socket
import ssl
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

FIXTURES = Path(__file__).parent / "test_llm"
ROUTES = {
    "/v1/messages": ("anthropic_response.json", "anthropic_stream.sse"),
    "/v1/chat/completions": ("openai_chat_response.json", "openai_chat_stream_usage.sse"),
    "/v1/responses": ("openai_responses_response.json", "openai_responses_stream.sse"),
}


def make_cert(directory: Path, names: tuple[str, ...] = ("localhost", "api.anthropic.com", "api.openai.com")) -> tuple[Path, Path]:
    """A self-signed certificate for ``names`` and 127.0.0.1; returns (cert, key) PEM paths."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "caisson test llm server")])
    now = datetime.datetime.now(datetime.timezone.utc)
    san = [x509.DNSName(n) for n in names] + [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName(san), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "server-cert.pem", directory / "server-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def sse_events(data: bytes) -> list[bytes]:
    """An SSE fixture split into its events (each with its blank line)."""
    return [block + b"\n\n" for block in data.split(b"\n\n") if block.strip()]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "LlmServer._Server"

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self._send_whole(200, b'{"ok":true}', {"Content-Type": "application/json"})

    def do_POST(self) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.owner.requests.append((self.path, dict(self.headers), body))
        route = ROUTES.get(url.path)
        if route is None:
            self._send_whole(404, b'{"error":"no route"}', {"Content-Type": "application/json"})
            return
        try:
            stream = json.loads(body).get("stream") is True
        except ValueError:
            stream = False
        if query.get("body") == "badjson":
            self._send_whole(200, b'{"id": "msg_1", "usage": {"input_tokens": 3,', {"Content-Type": "application/json"})
        elif query.get("body") == "badutf8":
            self._send_whole(200, b'{"model": "bad\xff\xfe", "usage": {}}', {"Content-Type": "application/json"})
        elif stream:
            self._send_stream(sse_events((FIXTURES / route[1]).read_bytes()), query)
        else:
            self._send_whole(200, (FIXTURES / route[0]).read_bytes(), {"Content-Type": "application/json"}, query)

    def _send_whole(self, status: int, data: bytes, headers: dict[str, str], query: dict | None = None) -> None:
        if query and query.get("gzip") == "1":
            data = gzip.compress(data)
            headers = dict(headers, **{"Content-Encoding": "gzip"})
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Set-Cookie", f"session={self.server.owner.cookie}; Path=/; HttpOnly")
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _send_stream(self, events: list[bytes], query: dict) -> None:
        compress = query.get("gzip") == "1"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache")
        if compress:
            self.send_header("Content-Encoding", "gzip")
        self.end_headers()
        z = zlib.compressobj(wbits=31) if compress else None
        cut = query.get("cut") == "1"
        if cut:
            events = events[: max(1, len(events) // 2)]
        for i, event in enumerate(events):
            if i == 1 and "pause" in query:
                time.sleep(float(query["pause"]))
            data = z.compress(event) + z.flush(zlib.Z_SYNC_FLUSH) if z else event
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        self.server.owner.last_chunk_sent[self.path] = time.monotonic_ns()
        if cut:
            self.close_connection = True
            return
        if z:
            tail = z.flush()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(tail), tail))
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class LlmServer:
    """The server, run in a thread. Use as a context manager; ``port`` once entered.

    Args:
        directory: where the certificate is written.
        cookie: the session cookie value every non-streamed response sets.
    """

    class _Server(ThreadingHTTPServer):
        daemon_threads = True
        owner: "LlmServer"

        def get_request(self):  # no Nagle: headers and body writes must not wait for ACKs
            sock, addr = super().get_request()
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock, addr

    def __init__(self, directory: Path, cookie: str = "cookie-value-not-for-ledgers"):
        self.cert, self.key = make_cert(directory)
        self.cookie = cookie
        self.requests: list[tuple[str, dict, bytes]] = []
        self.last_chunk_sent: dict[str, int] = {}
        self._httpd = self._Server(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(self.cert, self.key)
        self._httpd.socket = ctx.wrap_socket(self._httpd.socket, server_side=True)
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> "LlmServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
