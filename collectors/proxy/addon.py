"""The mitmproxy addon of the proxy witness, loaded by ``mitmdump -s addon.py``.

It runs inside mitmdump (its own process) and stays thin: it enforces the egress policy,
rewrites chosen hosts to local upstreams, and copies every exchange and every tunnel into
frames (a u32 big-endian length, then a msgpack map; times in ns) sent to the recorder over
a unix socket; parsing, decoding, redaction and events are the recorder's
(`collectors.proxy`). Options: ``caisson_socket``, ``caisson_allow``, ``caisson_upstream``,
``caisson_tunnels`` (``--set name=value``). Sending never blocks the proxy: past
`MAX_QUEUED_BYTES` frames are dropped and counted (a ``dropped`` frame). The policy, the
options and every frame's fields: docs/witnesses.md, "The proxy addon".
"""

from __future__ import annotations

import asyncio  # the addon runs in mitmdump's asyncio loop: its resolver hook awaits getaddrinfo
import collections
import importlib.util
import os
import re
import socket
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Any

import msgpack
from mitmproxy import ctx, http, version
from mitmproxy.proxy import commands, events, layer, layers

__all__ = [
    "CaissonWitness", "MAX_QUEUED_BYTES", "POLICY", "REFUSED", "addons", "canonical_host", "egress",
    "own_address", "parse_upstream", "unreachable_address",
]


def _load_egress() -> Any:
    """`collectors.egress`: imported as such when this file is imported as
    ``collectors.proxy.addon`` (tests, tools), else (mitmdump runs this file as a script)
    loaded from ``../egress.py`` beside it: the same file, never another tree's copy."""
    if __name__ == "collectors.proxy.addon":
        from collectors import egress
        return egress
    path = Path(__file__).resolve().parent.parent / "egress.py"
    spec = importlib.util.spec_from_file_location("caisson_egress", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


egress = _load_egress()
canonical_host = egress.canonical_host

MAX_QUEUED_BYTES = 256 << 20
"""Frames waiting for the writer thread, bytes; past it new frames are dropped."""
POLICY = "egress-allow-list"
REFUSED = "caisson egress policy"  # how every refusal's reason begins
_RECONNECT_S = 0.2  # wait between reconnection attempts, seconds
_DONE_FLUSH_S = 3.0  # how long shutdown waits for queued frames, seconds
_header = struct.Struct(">I")
# The start of an HTTP/1 request line or the HTTP/2 preface (RFC 9112 §3: method SP ...;
# RFC 9113 §3.4: "PRI * HTTP/2.0"): an upper-case method token, then a space, or still
# arriving. Anything else in a tunnel is not HTTP.
_HTTP_START = re.compile(rb"[A-Z][A-Z_-]{0,23}(?: |\Z)")
_PARSED_LAYERS = (layers.HttpLayer, layers.ClientTLSLayer, layers.ServerTLSLayer)


def _now() -> tuple[int, int]:
    return time.time_ns(), time.monotonic_ns()


def _headers(headers: http.Headers) -> list[list[str]]:
    return [[k.decode("latin-1"), v.decode("latin-1")] for k, v in headers.fields]


def _peer(conn: Any) -> str | None:
    peer = conn.peername
    return f"{peer[0]}:{peer[1]}" if peer else None


def parse_upstream(spec: str) -> dict[str, tuple[str | None, str, int]]:
    """``"a=1.2.3.4:80,b=http://127.0.0.1:9"`` -> {canonical host: (scheme or None, ip, port)}.

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
        out[canonical_host(host.strip())] = (scheme or None, ip.strip("[]"), int(port))
    return out


def own_address(ip: str) -> bool:
    """Whether ``ip`` is one of this host's own addresses: the kernel lets a socket bind
    only to those (without IP_FREEBIND, and with net.ipv4.ip_nonlocal_bind 0, its default)."""
    with socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.bind((ip, 0))
        except OSError:
            return False
    return True


def unreachable_address(ip: str) -> str | None:
    """Why the proxy must not connect to ``ip`` (an address, any spelling), or None."""
    return egress.forbidden_address(ip) or ("one of the host's own addresses" if own_address(canonical_host(ip))
                                            else None)


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
            if self._sock is not None:
                self._sock.close()
            self._sock = None
            return False
        return True


class _Refusal(layer.Layer):
    """Put by `CaissonWitness.next_layer` where mitmproxy would relay bytes it does not
    parse: closes the chamber's connection at the first event."""

    def _handle_event(self, event: events.Event) -> layer.CommandGenerator[None]:
        self._handle_event = self._closed  # type: ignore[method-assign]
        yield commands.CloseConnection(self.context.client)

    def _closed(self, event: events.Event) -> layer.CommandGenerator[None]:
        yield from ()


class _Tunnel:
    """What the addon counts of one open tunnel until it ends."""

    __slots__ = ("id", "protocol", "exchanges", "client_bytes", "server_bytes", "denied")

    def __init__(self, tunnel_id: str, protocol: str = ""):
        self.id = tunnel_id
        self.protocol = [protocol] if protocol else []
        self.exchanges = self.client_bytes = self.server_bytes = 0
        self.denied: str | None = None

    def saw(self, protocol: str) -> None:
        if not self.protocol or self.protocol[-1] != protocol:
            self.protocol.append(protocol)


class CaissonWitness:
    """The addon: policy, upstream rewrites, and frames for the recorder."""

    def __init__(self) -> None:
        self.sender: _Sender | None = None
        self.allow: tuple[Any, ...] = ()  # collectors.egress.AllowEntry
        self.allow_spec: list[str] = []
        self.upstream: dict[str, tuple[str | None, str, int]] = {}
        self.upstream_targets: set[tuple[str, int]] = set()  # (canonical ip, port) of the rewrites
        self.policed = True
        self._conns_with_flows: set[str] = set()
        self._conn_errors: set[str] = set()
        self._connects: dict[str, _Tunnel] = {}  # client connection id -> its CONNECT tunnel
        self._upgrades: dict[str, _Tunnel] = {}  # client connection id -> its upgraded connection
        self._refused_connects: dict[tuple[str, int], str] = {}  # (host, port) -> why server_connect refused it

    def load(self, loader: Any) -> None:
        loader.add_option("caisson_socket", str, "", "Unix socket of the caisson recorder.")
        loader.add_option("caisson_allow", str, "", "Comma-separated allow entries (name or *.suffix, [:port]).")
        loader.add_option("caisson_upstream", str, "", "Comma-separated host=[scheme://]ip:port rewrites.")
        loader.add_option("caisson_tunnels", str, "policed", "policed (the egress policy) or open (mitmproxy's).")

    def configure(self, updated: set[str]) -> None:
        if "caisson_allow" in updated:
            self.allow_spec = [e.strip() for e in ctx.options.caisson_allow.split(",") if e.strip()]
            self.allow = egress.parse_allow(self.allow_spec)
        if "caisson_upstream" in updated:
            self.upstream = parse_upstream(ctx.options.caisson_upstream)
            self.upstream_targets = {(canonical_host(ip), port) for _, ip, port in self.upstream.values()}
        if "caisson_tunnels" in updated:
            if ctx.options.caisson_tunnels not in ("policed", "open"):
                raise ValueError(f"caisson_tunnels={ctx.options.caisson_tunnels!r}: policed or open")
            self.policed = ctx.options.caisson_tunnels == "policed"
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
                    "allow": self.allow_spec, "upstream": upstream,
                    "tunnels": "policed" if self.policed else "open", "rawtcp": bool(ctx.options.rawtcp),
                    "egress": str(Path(egress.__file__).resolve())})

    def done(self) -> None:
        if self.sender is not None:
            self.sender.close(_DONE_FLUSH_S)

    # --- policy --------------------------------------------------------------------------

    def refusal(self, host: str, port: int, says: dict[str, str | None]) -> str | None:
        """Why the proxy refuses to reach ``host``:``port``, or None.

        Args:
            host, port: where the request or tunnel goes, as the client named it.
            says: what else names the host ({"Host header": "a.example:443", ...}); each
                present one must be the same host (and, when it has one, port).
        """
        if not egress.target_allowed(host, port, self.allow):
            if egress.host_allowed(host, self.allow):
                return f"{REFUSED}: port {port} of host {host} is not in the allow list"
            return f"{REFUSED}: host {host} is not in the allow list"
        name = canonical_host(host)
        for what, value in says.items():
            if not value:
                continue
            try:
                other, other_port = egress.split_authority(value)
            except ValueError:
                return f"{REFUSED}: {what} {value!r} is not a host"
            if canonical_host(other) != name or other_port not in (None, port):
                return f"{REFUSED}: {what} {value!r} disagrees with the target {host}:{port}"
        return None

    async def _unreachable(self, address: tuple[str, int]) -> str | None:
        """Why the proxy must not open a connection to ``address``, after resolving it."""
        host, port = address[0], address[1]
        if (canonical_host(host), port) in self.upstream_targets:
            return None
        literal = egress.ip_literal(host)
        if literal is not None:
            ips = [literal]
        else:
            try:
                infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
            except OSError:
                return None  # mitmproxy's own connect fails alike, and says so
            ips = sorted({str(info[4][0]) for info in infos})
        for ip in ips:
            why = unreachable_address(ip)
            if why is not None:
                return f"{REFUSED}: {host} is {ip}, {why}: never reached through the proxy"
        return None

    # --- HTTP hooks --------------------------------------------------------------------

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        req = flow.request
        client = flow.client_conn
        self._conns_with_flows.add(client.id)
        if (tunnel := self._connects.get(client.id)) is not None:
            tunnel.exchanges += 1
        ts, mono = _now()
        self._send({"t": "request", "id": flow.id, "ts_ns": ts, "mono_ns": mono,
                    "method": req.method, "scheme": req.scheme, "host": req.host, "port": req.port,
                    "path": req.path, "http_version": req.http_version, "headers": _headers(req.headers),
                    "client": _peer(client), "conn": client.id})
        hosts = req.headers.get_all("host")
        says = {"Host header": hosts[0] if len(hosts) == 1 else ",".join(hosts) or None,
                "request target": req.authority, "TLS SNI": client.sni}
        reason = self.refusal(req.host, req.port, says)
        if reason is None:
            flow.metadata["caisson_target"] = (req.host, req.port)  # before an upstream rewrite
            return
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
        target = self.upstream.get(canonical_host(req.host))
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
        if flow.response.status_code == 101:
            self._upgraded(flow)

    def _upgraded(self, flow: http.HTTPFlow) -> None:
        """A 101 Switching Protocols: a WebSocket becomes a recorded tunnel; any other
        protocol would be relayed as raw TCP, so (policed) the flow is killed."""
        assert flow.response is not None  # called from `responseheaders` with a 101
        token = (flow.response.headers.get("upgrade", "") or "?").strip().lower()
        protocol = "websocket" if flow.websocket is not None else token
        denied = None
        if flow.websocket is None and self.policed:
            denied = f"{REFUSED}: an upgrade to {token!r} would be relayed as raw TCP, unread"
            flow.kill()
        host, port = flow.metadata.get("caisson_target", (flow.request.host, flow.request.port))
        ts, mono = _now()
        self._send({"t": "tunnel", "id": flow.id, "ts_ns": ts, "mono_ns": mono, "via": "upgrade",
                    "host": host, "port": port, "client": _peer(flow.client_conn),
                    "protocol": protocol, "denied": denied})
        if denied is None:
            self._upgrades[flow.client_conn.id] = _Tunnel(flow.id, protocol)

    def error(self, flow: http.HTTPFlow) -> None:
        if flow.metadata.get("caisson_denied"):
            return
        ts, mono = _now()
        message = flow.error.msg if flow.error else "unknown proxy error"
        refused = self._refused_connects.pop((flow.request.host, flow.request.port), None)
        if refused is not None and message.endswith(refused):  # server_connect refused; mitmproxy answered 502
            self._send({"t": "denied", "id": flow.id, "ts_ns": ts, "mono_ns": mono, "status": 502,
                        "policy": POLICY, "reason": refused})
            return
        self._send({"t": "error", "id": flow.id, "ts_ns": ts, "mono_ns": mono, "message": message})

    # --- tunnels -----------------------------------------------------------------------

    def http_connect(self, flow: http.HTTPFlow) -> None:
        client, req = flow.client_conn, flow.request
        self._conns_with_flows.add(client.id)
        denied = None
        if self.policed:
            hosts = req.headers.get_all("host")
            denied = self.refusal(req.host, req.port, {"Host header": ",".join(hosts) or None})
        if denied is not None:
            flow.response = http.Response.make(
                403, denied.encode() + b"\n",
                {"Content-Type": "text/plain; charset=utf-8", "X-Caisson-Policy": POLICY})
        ts, mono = _now()
        self._send({"t": "tunnel", "id": flow.id, "ts_ns": ts, "mono_ns": mono, "via": "connect",
                    "host": req.host, "port": req.port, "client": _peer(client), "protocol": "",
                    "denied": denied})
        if denied is None:
            self._connects[client.id] = _Tunnel(flow.id)

    def next_layer(self, nextlayer: layer.NextLayer) -> None:
        """Records what a tunnel carries, and (policed) puts `_Refusal` in place of any
        layer that would relay bytes unparsed. Script addons run before mitmproxy's own
        `next_layer` (mitmproxy/addons/__init__.py, 11.0.2), so its choice is made here
        first, to be checked."""
        if nextlayer.layer is None and (builtin := ctx.master.addons.get("nextlayer")) is not None:
            builtin.next_layer(nextlayer)
        chosen = nextlayer.layer
        if chosen is None:  # mitmproxy waits for more bytes
            return
        tunnel = self._connects.get(nextlayer.context.client.id)
        refuse = None
        if self.policed and not isinstance(chosen, _PARSED_LAYERS):
            refuse = f"{type(chosen).__name__} would relay the bytes unread"
        elif (self.policed and tunnel is not None and isinstance(chosen, layers.HttpLayer)
              and not _HTTP_START.match(nextlayer.data_client())):
            refuse = "the bytes are neither TLS nor HTTP"
        if tunnel is not None:
            if isinstance(chosen, (layers.ClientTLSLayer, layers.ServerTLSLayer)):
                tunnel.saw("tls")
            elif isinstance(chosen, layers.HttpLayer) and refuse is None:
                tunnel.saw("http")
            else:
                tunnel.saw("tcp")
        if refuse is None:
            return
        if tunnel is not None:
            tunnel.denied = f"{REFUSED}: {refuse}: raw TCP is not relayed"
        stale: object = chosen
        while stale is not None:  # the layers mitmproxy made for its choice leave the stack
            if stale in nextlayer.context.layers:
                nextlayer.context.layers.remove(stale)
            stale = getattr(stale, "child_layer", None)
        nextlayer.layer = _Refusal(nextlayer.context)

    async def server_connect(self, data: Any) -> None:
        """Refuse, before connecting, an address the proxy must never reach (policed)."""
        if not self.policed or data.server.address is None or data.server.error:
            return
        reason = await self._unreachable(data.server.address)
        if reason is not None:
            data.server.error = reason
            self._refused_connects[tuple(data.server.address[:2])] = reason

    def server_connected(self, data: Any) -> None:
        """Cut a connection whose peer is an address the proxy must never reach: a name
        that resolved elsewhere when `server_connect` asked (policed)."""
        peer, address = data.server.peername, data.server.address
        if not self.policed or not peer or (canonical_host(address[0]), address[1]) in self.upstream_targets:
            return
        if unreachable_address(str(peer[0])) is None:
            return
        handler = ctx.master.addons.get("proxyserver").connections.get(data.client.id)
        io = handler.transports.get(data.server) if handler is not None else None
        writer = getattr(io, "writer", None)
        if writer is not None and hasattr(writer, "transport"):
            writer.transport.abort()  # asyncio: nothing written after this leaves the socket

    def websocket_message(self, flow: http.HTTPFlow) -> None:
        tunnel = self._upgrades.get(flow.client_conn.id)
        if tunnel is not None and flow.websocket is not None and flow.websocket.messages:
            message = flow.websocket.messages[-1]
            if message.from_client:
                tunnel.client_bytes += len(message.content)
            else:
                tunnel.server_bytes += len(message.content)

    def websocket_end(self, flow: http.HTTPFlow) -> None:
        self._end(self._upgrades.pop(flow.client_conn.id, None))

    def tcp_start(self, flow: Any) -> None:
        """A raw TCP relay (only ``open``; policed, none is ever set up, and one that was
        would be refused here, before its server connection opens)."""
        cid = flow.client_conn.id
        tunnel = self._upgrades.get(cid) or self._connects.get(cid)
        if tunnel is None:
            tunnel = self._connects[cid] = _Tunnel(flow.id)
            ts, mono = _now()
            self._send({"t": "tunnel", "id": flow.id, "ts_ns": ts, "mono_ns": mono, "via": "connect",
                        "host": flow.server_conn.address[0] if flow.server_conn.address else "",
                        "port": flow.server_conn.address[1] if flow.server_conn.address else 0,
                        "client": _peer(flow.client_conn), "protocol": "", "denied": None})
        tunnel.saw("tcp")
        if self.policed:
            tunnel.denied = f"{REFUSED}: raw TCP is not relayed"
            flow.server_conn.error = tunnel.denied
            flow.kill()

    def tcp_message(self, flow: Any) -> None:
        cid = flow.client_conn.id
        tunnel = self._upgrades.get(cid) or self._connects.get(cid)
        message = flow.messages[-1]
        if self.policed:
            message.content = b""
        elif tunnel is not None:
            if message.from_client:
                tunnel.client_bytes += len(message.content)
            else:
                tunnel.server_bytes += len(message.content)

    def _end(self, tunnel: _Tunnel | None, error: str | None = None) -> None:
        if tunnel is None:
            return
        ts, mono = _now()
        self._send({"t": "tunnel_end", "id": tunnel.id, "ts_ns": ts, "mono_ns": mono,
                    "protocol": "/".join(tunnel.protocol), "exchanges": tunnel.exchanges,
                    "client_bytes": tunnel.client_bytes, "server_bytes": tunnel.server_bytes,
                    "denied": tunnel.denied, "error": error})

    # --- connection hooks --------------------------------------------------------------

    def client_connected(self, client: Any) -> None:
        ts, mono = _now()
        self._send({"t": "connected", "id": client.id, "ts_ns": ts, "mono_ns": mono, "client": _peer(client)})

    def tls_failed_client(self, data: Any) -> None:
        client = data.context.client
        self._conn_error(client, f"client TLS handshake failed: {data.conn.error or 'unknown'}")

    def client_disconnected(self, client: Any) -> None:
        self._end(self._upgrades.pop(client.id, None))
        self._end(self._connects.pop(client.id, None))
        had_flows = client.id in self._conns_with_flows
        self._conns_with_flows.discard(client.id)
        if client.id in self._conn_errors:
            self._conn_errors.discard(client.id)
        elif not had_flows:
            detail = f": {client.error}" if client.error else ""
            self._conn_error(client, f"connection closed without an HTTP request{detail}")

    def _conn_error(self, client: Any, message: str) -> None:
        self._conn_errors.add(client.id)
        ts, mono = _now()
        self._send({"t": "conn_error", "id": client.id, "ts_ns": ts, "mono_ns": mono,
                    "client": _peer(client), "sni": client.sni, "message": message})


addons = [CaissonWitness()]
