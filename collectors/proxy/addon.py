"""The mitmproxy addon of the proxy witness, loaded by ``mitmdump -s addon.py``.

It runs inside mitmdump (its own process) and stays thin: it enforces the egress allow
list, rewrites chosen hosts to local upstreams, and copies every exchange, as it passes,
into frames sent to the recorder over a unix socket. Parsing, decoding, redaction and
events are the recorder's job (`collectors.proxy`). Imports: mitmproxy, msgpack (a
mitmproxy dependency) and the standard library only.

Options (``--set name=value``):
    caisson_socket: unix socket path of the recorder ("" sends nothing).
    caisson_allow: comma-separated hosts the chamber may reach: exact names, or
        ``*.suffix`` for any name below ``suffix`` (not ``suffix`` itself). Default: none,
        every request is refused.
    caisson_upstream: comma-separated ``host=ip:port`` (keep the request's scheme) or
        ``host=http://ip:port`` / ``host=https://ip:port`` rewrites: a request for
        ``host`` is sent to that address; its Host header and the recorded host stay
        ``host`` (e.g. the scripted model endpoint playing ``api.anthropic.com``).

Wire format: each frame is a u32 big-endian length, then a msgpack map of that many
bytes. ``id`` is the flow id (a uuid string), or the client connection id for
``conn_error``. ``ts_ns`` is wall time (ns since the Unix epoch), ``mono_ns`` is
CLOCK_MONOTONIC (ns; the same clock as the recorder's `time.monotonic_ns`). Headers are
``[[name, value], ...]`` in wire order, values as str (latin-1 for non-UTF-8 bytes). Bodies
are bytes as on the wire after transfer decoding (HTTP/1 chunking removed) but still
content-encoded (gzip, br, deflate, zstd): the recorder decodes them.

- ``hello``: pid, mitmproxy_version, listen ([[host, port], ...]), confdir, allow,
  upstream ({host: "scheme://ip:port"}); sent once, when the proxy listens.
- ``request``: id, ts_ns, mono_ns, method, scheme, host, port, path, http_version,
  headers, client ("ip:port"); at request headers, before the policy check.
- ``request_body``: id, ts_ns, mono_ns, body, upstream ("ip:port" when rewritten, else
  null); when the whole request body arrived (mitmproxy buffers request bodies).
- ``denied``: id, ts_ns, mono_ns, status (403), policy, reason. Terminal.
- ``response_start``: id, ts_ns, mono_ns, status, reason, http_version, headers.
- ``chunk``: id, data. Every response body is streamed (decided here, always: one code
  path, SSE passes through at once, and a streamed body is never buffered whole).
- ``response_end``: id, ts_ns, mono_ns. Terminal.
- ``error``: id, ts_ns, mono_ns, message. Terminal (cut stream, upstream refused, ...).
- ``conn_error``: id, ts_ns, mono_ns, client, sni, message: a client connection that
  failed TLS or closed without one HTTP request (e.g. a non-HTTP protocol on the port).
- ``dropped``: ts_ns, count: frames lost since the last such frame (socket gone, queue
  full); sent as soon as the socket works again, and at shutdown if it does.

Sending never blocks the proxy: hooks queue frames for a writer thread (at most
``MAX_QUEUED_BYTES``); when the queue is full or the socket is gone, frames are dropped
and counted, and proxying goes on.
"""

from __future__ import annotations

import collections
import os
import socket
import struct
import threading
import time
from typing import Any

import msgpack
from mitmproxy import ctx, http, version

MAX_QUEUED_BYTES = 256 << 20
"""Frames waiting for the writer thread, bytes; past it new frames are dropped."""
POLICY = "egress-allow-list"
_RECONNECT_S = 0.2  # wait between reconnection attempts, seconds
_DONE_FLUSH_S = 3.0  # how long shutdown waits for queued frames, seconds
_header = struct.Struct(">I")


def _now() -> tuple[int, int]:
    return time.time_ns(), time.monotonic_ns()


def _headers(headers: http.Headers) -> list[list[str]]:
    return [[k.decode("latin-1"), v.decode("latin-1")] for k, v in headers.fields]


def host_allowed(host: str, allow: tuple[str, ...]) -> bool:
    """True when ``host`` matches an allow entry (exact, or ``*.suffix`` for subdomains)."""
    host = host.lower().rstrip(".")
    for entry in allow:
        if entry.startswith("*."):
            if host.endswith(entry[1:]) and len(host) > len(entry) - 1:
                return True
        elif host == entry:
            return True
    return False


def parse_upstream(spec: str) -> dict[str, tuple[str | None, str, int]]:
    """``"a=1.2.3.4:80,b=http://127.0.0.1:9"`` -> {host: (scheme or None, ip, port)}.

    Raises:
        ValueError: an entry without ``=`` or without a port.
    """
    out: dict[str, tuple[str | None, str, int]] = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        host, sep, target = item.partition("=")
        scheme, _, rest = target.rpartition("://")
        ip, colon, port = rest.rpartition(":")
        if not sep or not colon or not port.isdigit() or scheme not in ("", "http", "https"):
            raise ValueError(f"caisson_upstream entry {item!r}: expected host=[scheme://]ip:port")
        out[host.strip().lower()] = (scheme or None, ip.strip("[]"), int(port))
    return out


class _Sender:
    """Queues frames and writes them to a unix socket from a thread; never blocks."""

    def __init__(self, path: str):
        self.path = path
        self.sent = 0
        self.dropped = 0  # total, for the final count
        self._unreported = 0  # dropped since the last ``dropped`` frame
        self._queue: collections.deque[bytes] = collections.deque()
        self._queued = 0
        self._cond = threading.Condition()
        self._closing = False
        self._sock: socket.socket | None = None
        self._thread = threading.Thread(target=self._run, name="caisson-frames", daemon=True)
        self._thread.start()

    def send(self, frame: dict[str, Any]) -> None:
        try:  # str with lone surrogates (undecodable paths) is escaped, never lost
            data = msgpack.packb(frame, use_bin_type=True, unicode_errors="backslashreplace")
        except (TypeError, ValueError, OverflowError):
            data = None
        with self._cond:
            if data is None:
                self.dropped += 1
                self._unreported += 1
                return
            if self._queued + len(data) > MAX_QUEUED_BYTES or self._closing:
                self.dropped += 1
                self._unreported += 1
                return
            self._queue.append(_header.pack(len(data)) + data)
            self._queued += len(data)
            self._cond.notify()

    def close(self, timeout_s: float) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join(timeout_s)

    def _connect(self) -> bool:
        if self._sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(self.path)
            except OSError:
                sock.close()
                return False
            self._sock = sock
        return True

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                batch = list(self._queue)
                self._queue.clear()
                self._queued = 0
                closing = self._closing
                unreported, self._unreported = self._unreported, 0
            if unreported:
                frame = msgpack.packb({"t": "dropped", "ts_ns": time.time_ns(), "count": unreported})
                batch.insert(0, _header.pack(len(frame)) + frame)
            if not self._write(batch):
                with self._cond:
                    self.dropped += len(batch) - (1 if unreported else 0)
                    self._unreported += len(batch) - (1 if unreported else 0) + unreported
                if closing:
                    return
                time.sleep(_RECONNECT_S)
                continue
            self.sent += len(batch)
            if closing and not self._queue:
                if self._sock is not None:
                    self._sock.close()
                return

    def _write(self, batch: list[bytes]) -> bool:
        if not batch:
            return True
        if not self._connect():
            return False
        try:
            assert self._sock is not None
            self._sock.sendall(b"".join(batch))
        except OSError:
            self._sock.close()
            self._sock = None
            return False
        return True


class CaissonWitness:
    """The addon: policy, upstream rewrites, and frames for the recorder."""

    def __init__(self) -> None:
        self.sender: _Sender | None = None
        self.allow: tuple[str, ...] = ()
        self.upstream: dict[str, tuple[str | None, str, int]] = {}
        self._conns_with_flows: set[str] = set()
        self._conn_errors: set[str] = set()

    def load(self, loader: Any) -> None:
        loader.add_option("caisson_socket", str, "", "Unix socket of the caisson recorder.")
        loader.add_option("caisson_allow", str, "", "Comma-separated allowed hosts (name or *.suffix).")
        loader.add_option("caisson_upstream", str, "", "Comma-separated host=[scheme://]ip:port rewrites.")

    def configure(self, updated: set[str]) -> None:
        if "caisson_allow" in updated:
            entries = (s.strip().lower().rstrip(".") for s in ctx.options.caisson_allow.split(","))
            self.allow = tuple(e for e in entries if e)
        if "caisson_upstream" in updated:
            self.upstream = parse_upstream(ctx.options.caisson_upstream)
        if "caisson_socket" in updated and ctx.options.caisson_socket and self.sender is None:
            self.sender = _Sender(ctx.options.caisson_socket)

    def _send(self, frame: dict[str, Any]) -> None:
        if self.sender is not None:
            self.sender.send(frame)

    def running(self) -> None:
        server = ctx.master.addons.get("proxyserver")
        listen = [[a[0], a[1]] for a in server.listen_addrs()] if server else []
        upstream = {h: f"{s or '*'}://{ip}:{port}" for h, (s, ip, port) in self.upstream.items()}
        self._send({"t": "hello", "pid": os.getpid(), "mitmproxy_version": version.VERSION,
                    "listen": listen, "confdir": os.path.expanduser(ctx.options.confdir),
                    "allow": list(self.allow), "upstream": upstream})

    def done(self) -> None:
        if self.sender is not None:
            self.sender.close(_DONE_FLUSH_S)

    # --- HTTP hooks --------------------------------------------------------------------

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        req = flow.request
        self._conns_with_flows.add(flow.client_conn.id)
        ts, mono = _now()
        peer = flow.client_conn.peername
        self._send({"t": "request", "id": flow.id, "ts_ns": ts, "mono_ns": mono,
                    "method": req.method, "scheme": req.scheme, "host": req.host, "port": req.port,
                    "path": req.path, "http_version": req.http_version, "headers": _headers(req.headers),
                    "client": f"{peer[0]}:{peer[1]}" if peer else None})
        if host_allowed(req.host, self.allow):
            return
        reason = f"caisson egress policy: host {req.host} is not in the allow list"
        flow.response = http.Response.make(
            403, reason.encode() + b"\n",
            {"Content-Type": "text/plain; charset=utf-8", "X-Caisson-Policy": POLICY},
        )
        flow.metadata["caisson_denied"] = True
        ts, mono = _now()
        self._send({"t": "denied", "id": flow.id, "ts_ns": ts, "mono_ns": mono, "status": 403,
                    "policy": POLICY, "reason": reason})

    def request(self, flow: http.HTTPFlow) -> None:
        if flow.metadata.get("caisson_denied"):
            return
        req = flow.request
        target = self.upstream.get(req.host.lower())
        upstream = None
        if target is not None:
            scheme, ip, port = target
            if scheme is not None:
                req.scheme = scheme
            req.data.host, req.data.port = ip, port  # keeps the Host header as the client sent it
            upstream = f"{ip}:{port}"
        ts, mono = _now()
        self._send({"t": "request_body", "id": flow.id, "ts_ns": ts, "mono_ns": mono,
                    "body": req.raw_content or b"", "upstream": upstream})

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        if flow.metadata.get("caisson_denied") or flow.response is None:
            return
        resp = flow.response
        ts, mono = _now()
        self._send({"t": "response_start", "id": flow.id, "ts_ns": ts, "mono_ns": mono,
                    "status": resp.status_code, "reason": resp.reason,
                    "http_version": resp.http_version, "headers": _headers(resp.headers)})
        flow_id, send = flow.id, self._send

        def copy_chunk(data: bytes) -> bytes:
            if data:
                send({"t": "chunk", "id": flow_id, "data": data})
            return data

        resp.stream = copy_chunk
        flow.metadata["caisson_streamed"] = True

    def response(self, flow: http.HTTPFlow) -> None:
        if flow.metadata.get("caisson_denied") or flow.response is None:
            return
        if not flow.metadata.get("caisson_streamed"):  # a response no responseheaders saw
            self._send({"t": "response_start", "id": flow.id, "ts_ns": time.time_ns(),
                        "mono_ns": time.monotonic_ns(), "status": flow.response.status_code,
                        "reason": flow.response.reason, "http_version": flow.response.http_version,
                        "headers": _headers(flow.response.headers)})
            if flow.response.raw_content:
                self._send({"t": "chunk", "id": flow.id, "data": flow.response.raw_content})
        ts, mono = _now()
        self._send({"t": "response_end", "id": flow.id, "ts_ns": ts, "mono_ns": mono})

    def error(self, flow: http.HTTPFlow) -> None:
        if flow.metadata.get("caisson_denied"):
            return
        ts, mono = _now()
        message = flow.error.msg if flow.error else "unknown proxy error"
        self._send({"t": "error", "id": flow.id, "ts_ns": ts, "mono_ns": mono, "message": message})

    # --- connection hooks --------------------------------------------------------------

    def http_connect(self, flow: http.HTTPFlow) -> None:
        self._conns_with_flows.add(flow.client_conn.id)

    def tls_failed_client(self, data: Any) -> None:
        client = data.context.client
        self._conn_error(client, f"client TLS handshake failed: {data.conn.error or 'unknown'}")

    def client_disconnected(self, client: Any) -> None:
        had_flows = client.id in self._conns_with_flows
        self._conns_with_flows.discard(client.id)
        if client.id in self._conn_errors:
            self._conn_errors.discard(client.id)
        elif not had_flows:
            detail = f": {client.error}" if client.error else ""
            self._conn_error(client, f"connection closed without an HTTP request{detail}")

    def _conn_error(self, client: Any, message: str) -> None:
        self._conn_errors.add(client.id)
        peer = client.peername
        ts, mono = _now()
        self._send({"t": "conn_error", "id": client.id, "ts_ns": ts, "mono_ns": mono,
                    "client": f"{peer[0]}:{peer[1]}" if peer else None, "sni": client.sni,
                    "message": message})


addons = [CaissonWitness()]
