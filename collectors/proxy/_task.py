"""The proxy witness: mitmdump with our addon, its frames turned into ledger events.

- `collectors.proxy.addon` runs inside mitmdump (its own process): egress allow list,
  upstream rewrites, and frames copied from every exchange as it passes.
- Sans-IO: `FrameDecoder` (bytes -> frames) and `ExchangeAssembler` (frames -> blobs,
  ``http.exchange``, ``llm.call``, ``witness.raw``, ``witness.gap``).
- `run_proxy_witness`, the trio task: starts mitmdump, reports where it listens and its
  CA (`ProxyInfo`), and moves frames into the ledger until cancelled.

The chamber must trust mitmproxy's CA before it starts: `ensure_ca` creates it in
``confdir`` (the files mitmdump itself would create there, and then reuses), so the CA
path is known before the proxy runs; `run_proxy_witness` calls it too.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import NamedTuple

import trio

from collectors._witness import FINAL_SEND_TIMEOUT_S, WitnessFailed, Witnessing, witness_life
from collectors.proxy._bodies import BodyDecoder
from collectors.children import open_child
from collectors.proxy._exchange import DEFAULT_MAX_BODY_BYTES, ClientOwner, ExchangeAssembler, Output
from collectors.proxy._frames import NEED_DATA, Connected, Frame, FrameDecoder, FrameError, Hello, Request, encode_frame
from ledger import BlobStore, CaissonError, NeedData, Submission, keyed_fingerprint
from ledger.events import Event, WitnessRaw

__all__ = [
    "ADDON_PATH", "CA_CERT_FILE", "NEED_DATA", "BodyDecoder", "ExchangeAssembler", "Frame",
    "FrameDecoder", "FrameError", "Output", "ProxyInfo", "ProxyStartError",
    "encode_frame", "ensure_ca", "mitmdump_command", "run_proxy_witness",
]

WITNESS = "proxy"
ADDON_PATH = Path(__file__).with_name("addon.py")
CA_CERT_FILE = "mitmproxy-ca-cert.pem"
"""The CA certificate (PEM) in ``confdir`` that the chamber must trust."""
_DRAIN_S = 5.0  # how long shutdown waits for mitmdump to exit and its frames to drain
_READ_BYTES = 1 << 16
_OWNERS_KEPT = 4096  # client connections whose owner is remembered


class ProxyStartError(CaissonError):
    """Raised by `run_proxy_witness` when mitmdump does not come up (before ``started``).

    Attributes:
        stderr: the tail of mitmdump's output, for the operator.
    """

    def __init__(self, message: str, *, stderr: str = ""):
        super().__init__(message + (f"; mitmdump said: {stderr}" if stderr else ""))
        self.stderr = stderr


class ProxyInfo(NamedTuple):
    """Where the proxy listens and what the chamber must trust."""

    host: str  # listen address, as given
    port: int  # TCP port actually bound (chosen by the kernel when 0 was asked)
    ca_cert_path: Path  # PEM of mitmproxy's CA: install it in the chamber's trust store
    pid: int  # mitmdump's host pid


def ensure_ca(confdir: Path) -> Path:
    """Create mitmproxy's CA in ``confdir`` unless it exists; returns the CA cert path (PEM)."""
    from mitmproxy.certs import CertStore  # heavy import, only where needed

    confdir = Path(confdir).expanduser()
    confdir.mkdir(parents=True, exist_ok=True)
    CertStore.from_store(confdir, "mitmproxy", 2048)
    return confdir / CA_CERT_FILE


def _find_mitmdump() -> str:
    beside = Path(sys.executable).with_name("mitmdump")
    found = str(beside) if beside.exists() else shutil.which("mitmdump")
    if found is None:
        raise ProxyStartError("mitmdump not found (pip install mitmproxy==11.0.2)")
    return found


def mitmdump_command(
    *, socket_path: str, listen_host: str, listen_port: int, confdir: Path,
    allow_hosts: Sequence[str] = (), upstream: Mapping[str, str] = {},
    ssl_insecure_upstream: bool = False, upstream_trusted_ca: Path | None = None,
    open_tunnels: bool = False, mitmdump: str | None = None,
) -> list[str]:
    """The mitmdump command line of the witness.

    Args:
        socket_path: the Unix socket where the addon sends its frames.
        listen_host: address to listen on (the chamber's bridge gateway, or 127.0.0.1).
        listen_port: TCP port; 0 lets the kernel choose.
        confdir: mitmproxy's directory: its CA (created if absent) and generated certs.
        allow_hosts: what the chamber may reach (`collectors.egress.parse_allow`: names
            or ``*.suffix``, either with ``:port``); empty: nothing.
        upstream: rewrites ``{host: "ip:port" | "http://ip:port" | "https://ip:port"}``.
        ssl_insecure_upstream: do not verify upstream TLS certificates.
        upstream_trusted_ca: PEM file of CAs trusted for upstream TLS, besides the
            system's (e.g. a local test server's).
        open_tunnels: answer every CONNECT and relay what is not HTTP as raw TCP, to any
            address, as mitmproxy does by default (the selftest's weakened control); the
            tunnels are still recorded.
        mitmdump: the executable (default: beside the running Python, else on PATH).

    Raises:
        ProxyStartError: no ``mitmdump`` was given or found.
    """
    cmd = [
        mitmdump or _find_mitmdump(), "--listen-host", listen_host, "--listen-port", str(listen_port),
        "--set", f"confdir={confdir}", "--set", "connection_strategy=lazy",
        "--set", f"rawtcp={'true' if open_tunnels else 'false'}",
        "--set", "termlog_verbosity=warn", "--set", "flow_detail=0",
        "-s", str(ADDON_PATH), "--set", f"caisson_socket={socket_path}",
        "--set", f"caisson_allow={','.join(allow_hosts)}",
        "--set", "caisson_upstream=" + ",".join(f"{h}={t}" for h, t in upstream.items()),
        "--set", f"caisson_tunnels={'open' if open_tunnels else 'policed'}",
    ]
    if ssl_insecure_upstream:
        cmd += ["--set", "ssl_insecure=true"]
    if upstream_trusted_ca is not None:
        cmd += ["--set", f"ssl_verify_upstream_trusted_ca={upstream_trusted_ca}"]
    return cmd


class _Pump:
    """Frames from the addon's connection into the ledger: decoder, assembler, blobs, and
    the owner of each client connection, looked up as soon as the addon says it was
    accepted (else at its first request) and kept for its requests. The lookup runs in
    this task, not a worker thread, so it is done before a fast exchange's client has
    closed its socket (the figures: docs/benchmarks.md, "Figures behind the code").

    Counts into the `Witnessing`: ``lines`` frames, ``parse_failures`` bad frames,
    ``bytes`` frame bytes.
    """

    def __init__(self, w: Witnessing, blobs: BlobStore, assembler: ExchangeAssembler,
                 resolve_client: Callable[[str | None], ClientOwner] | None = None):
        self.w, self.blobs, self.assembler = w, blobs, assembler
        self.decoder = FrameDecoder()
        self.resolve_client = resolve_client
        self.owners: dict[str, ClientOwner] = {}  # client connection id (or "ip:port") -> its owner

    def owner(self, conn: str, client: str | None) -> ClientOwner | None:
        """Who holds the client end of connection ``conn``: looked up once per connection."""
        if self.resolve_client is None:
            return None
        owner = self.owners.get(conn)
        if owner is None:
            owner = self.resolve_client(client)
            if len(self.owners) >= _OWNERS_KEPT:  # the oldest connections are long closed
                for old in list(self.owners)[:_OWNERS_KEPT // 2]:
                    del self.owners[old]
            if conn:
                self.owners[conn] = owner
        return owner

    async def emit(self, event: Event, wall_ns: int | None = None, mono_ns: int | None = None) -> None:
        await self.w.send(event, wall_ns=wall_ns, mono_ns=mono_ns)

    async def flush(self) -> None:
        while (out := self.assembler.next_event()) is not NEED_DATA:
            assert isinstance(out, Output)
            if out.blob is not None:
                await trio.to_thread.run_sync(self.blobs.put, out.blob)
            await self.emit(out.event, out.wall_ns, out.mono_ns)

    async def read(self, stream: trio.SocketStream, until_hello: bool = False) -> Hello | None:
        """Read one connection's frames until EOF or sync loss (or, with ``until_hello``,
        until the hello frame; frames already buffered are read by the next call)."""
        while True:
            while (frame := self._next()) is not NEED_DATA:
                if frame is None:  # sync lost: drop this connection, the addon reconnects
                    return None
                self.w.lines += 1
                self.assembler.feed(frame)
                if isinstance(frame, Connected):
                    self.owner(frame.id, frame.client)
                elif isinstance(frame, Request) and (
                        owner := self.owner(frame.conn or frame.client or "", frame.client)) is not None:
                    self.assembler.attribute(frame.id, owner)
                if until_hello and isinstance(frame, Hello):
                    await self.flush()
                    return frame
            await self.flush()
            try:
                data = await stream.receive_some(_READ_BYTES)
            except trio.BrokenResourceError:  # connection reset: as EOF, the addon reconnects
                data = b""
            if not data:
                if self.decoder.buffered:
                    offset = self.decoder.bytes_fed - self.decoder.buffered
                    self.w.parse_failures += 1
                    self.assembler.bad_frame(FrameError("connection ended inside a frame", fatal=False, offset=offset))
                self.decoder = FrameDecoder()  # a new connection starts a new stream
                await self.flush()
                return None
            self.w.bytes += len(data)
            self.decoder.feed(data)

    def _next(self) -> Frame | NeedData | None:
        """The next decoded frame, `NEED_DATA`, or None when the stream lost sync."""
        while True:
            try:
                return self.decoder.next_event()
            except FrameError as exc:
                self.w.parse_failures += 1
                self.assembler.bad_frame(exc, self.w.now()[0])
                if exc.fatal:
                    self.decoder = FrameDecoder()
                    return None


async def _accept(listener: trio.SocketListener, proc: trio.Process, timeout_s: float) -> trio.SocketStream | None:
    """The addon's next connection, or None if mitmdump exits or ``timeout_s`` passes."""
    result: list[trio.SocketStream] = []
    with trio.move_on_after(timeout_s):
        async with trio.open_nursery() as nursery:
            async def accept() -> None:
                result.append(await listener.accept())
                nursery.cancel_scope.cancel()

            async def watch() -> None:
                await proc.wait()
                nursery.cancel_scope.cancel()

            nursery.start_soon(accept)
            nursery.start_soon(watch)
    return result[0] if result else None


def _tail(path: Path, chars: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:].strip()
    except OSError:
        return ""


async def run_proxy_witness(
    send: trio.MemorySendChannel[Submission],
    *,
    blobs: BlobStore,
    fingerprint_key: bytes,
    confdir: Path,
    listen_host: str = "127.0.0.1",
    listen_port: int = 0,
    allow_hosts: Sequence[str] = (),
    upstream: Mapping[str, str] = {},
    ssl_insecure_upstream: bool = False,
    upstream_trusted_ca: Path | None = None,
    open_tunnels: bool = False,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    start_timeout_s: float = 30.0,
    mitmdump: str | None = None, resolve_client: Callable[[str | None], ClientOwner] | None = None,
    task_status: trio.TaskStatus[ProxyInfo] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run mitmdump with the witness addon and record every exchange until cancelled.

    Sends ``witness.started`` (command, listen address, CA, `_policy`), then per exchange its body
    blobs, ``http.exchange`` and, for model APIs, ``llm.call``; per tunnel its ``proxy.tunnel``; odd
    input as ``witness.raw``. mitmdump exiting on its own is a ``witness.gap`` and a return (the run
    goes on, void). Cancelled, it stops mitmdump (SIGTERM, SIGKILL after 5 s), drains its last frames,
    finishes open exchanges and tunnels as cut, then ``witness.stopped`` (``lines``: frames,
    ``parse_failures``: bad frames, ``bytes``: frame bytes).

    Args:
        send: where submissions go; closed when this task ends, so pass a clone.
        blobs: the run's blob store (bodies are stored before their events are sent).
        fingerprint_key: the operator's fingerprint key (secrets -> keyed fingerprints).
        confdir, listen_host, listen_port, allow_hosts, upstream, ssl_insecure_upstream, upstream_trusted_ca,
            open_tunnels, mitmdump: as `mitmdump_command` takes them (port 0: reported in `ProxyInfo`).
        max_body_bytes: body bytes kept per direction of one exchange.
        start_timeout_s: how long mitmdump may take to listen, seconds.
        resolve_client: who holds a client ``ip:port`` (`ClientResolver`), asked once per connection.
        task_status: started with `ProxyInfo` once mitmdump listens.

    Raises:
        ProxyStartError: mitmdump is missing, exits or does not listen in time (nothing sent).
    """
    ca_cert = await trio.to_thread.run_sync(ensure_ca, confdir)
    with tempfile.TemporaryDirectory(prefix="caisson-proxy-", ignore_cleanup_errors=True) as tmp:
        socket_path, log_path = f"{tmp}/frames.sock", Path(tmp, "mitmdump.log")
        cmd = mitmdump_command(socket_path=socket_path, listen_host=listen_host, listen_port=listen_port,
                               confdir=confdir, allow_hosts=allow_hosts, upstream=upstream,
                               ssl_insecure_upstream=ssl_insecure_upstream, upstream_trusted_ca=upstream_trusted_ca,
                               open_tunnels=open_tunnels, mitmdump=mitmdump)
        assembler = ExchangeAssembler(keyed_fingerprint(fingerprint_key), max_body_bytes=max_body_bytes)
        with await _frames_listener(socket_path) as sock:
            async with (witness_life(send, WITNESS, missing="every HTTP(S) exchange after this point") as w,
                        _mitmdump(cmd, log_path) as proc):
                pump, listener = _Pump(w, blobs, assembler, resolve_client), trio.SocketListener(sock)
                stream, hello = await _hello(listener, proc, pump, start_timeout_s, log_path)
                info = ProxyInfo(host=listen_host, port=hello.listen[0][1], ca_cert_path=ca_cert, pid=proc.pid)
                await w.started({"command": cmd, "pid": proc.pid, "listen": f"{listen_host}:{info.port}",
                                 "ca_cert": str(ca_cert), **_policy(hello, allow_hosts, upstream)})
                task_status.started(info)
                await _serve(listener, proc, stream, pump, log_path)


def _policy(hello: Hello, allow_hosts: Sequence[str], upstream: Mapping[str, str]) -> dict[str, object]:
    """What ``witness.started`` says of the proxy and its policy: mitmproxy's version, the
    allow list and rewrites, the tunnel policy and ``rawtcp`` as the addon saw them, and
    the egress module it loaded."""
    return {"mitmproxy_version": hello.mitmproxy_version, "allow": list(allow_hosts), "upstream": dict(upstream),
            "tunnels": hello.tunnels, "rawtcp": hello.rawtcp, "egress": hello.egress}


@asynccontextmanager
async def _mitmdump(cmd: list[str], log_path: Path) -> AsyncIterator[trio.Process]:
    """mitmdump, its output in ``log_path``; killed on the way out if it still runs."""
    with open(log_path, "wb") as log:
        proc = await open_child(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
            with trio.CancelScope(shield=True):
                await proc.wait()


async def _frames_listener(socket_path: str) -> trio.socket.SocketType:
    """The Unix socket the addon connects to, bound and listening."""
    sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    await sock.bind(socket_path)
    sock.listen(4)
    return sock


async def _hello(listener: trio.SocketListener, proc: trio.Process, pump: _Pump, timeout_s: float,
                 log_path: Path) -> tuple[trio.SocketStream, Hello]:
    """The addon's first connection and its hello frame, once mitmdump listens.

    Raises:
        ProxyStartError: mitmdump exited or did not listen within ``timeout_s`` seconds.
    """
    stream = await _accept(listener, proc, timeout_s)
    hello = await pump.read(stream, until_hello=True) if stream is not None else None
    if stream is None or hello is None or not hello.listen:
        why = "exited" if proc.returncode is not None else "did not listen in time"
        raise ProxyStartError(f"mitmdump {why} (exit code {proc.returncode})", stderr=_tail(log_path))
    return stream, hello


async def _serve(listener: trio.SocketListener, proc: trio.Process, stream: trio.SocketStream | None,
                 pump: _Pump, log_path: Path) -> None:
    """Move frames until mitmdump exits (then finish its exchanges as cut and fail with a
    gap) or the task is cancelled (then stop mitmdump and drain it, shielded and bounded).

    Raises:
        WitnessFailed: mitmdump exited by itself.
    """
    w, assembler = pump.w, pump.assembler
    try:
        while stream is not None:
            await pump.read(stream)
            await stream.aclose()
            stream = await _accept(listener, proc, float("inf"))  # the addon reconnects
    finally:
        if proc.returncode is None:  # cancelled, or the writer is gone
            with trio.move_on_after(_DRAIN_S, shield=True):
                await _drain(proc, stream, pump)
            assembler.close(*w.now())
            with trio.move_on_after(FINAL_SEND_TIMEOUT_S * 4, shield=True):
                try:
                    await pump.flush()
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass
            if proc.returncode not in (0, None, -15):
                await w.send_last(WitnessRaw(witness=WITNESS, line=f"mitmdump exit code {proc.returncode}: "
                                             f"{_tail(log_path, 300)}"))
    since, mono = w.now()
    assembler.close(since, mono, reason="mitmdump exited before the exchange finished")
    await pump.flush()
    raise WitnessFailed(f"mitmdump exited with code {proc.returncode}: {_tail(log_path, 300)}", since_ns=since,
                        dropped=assembler.dropped)


async def _drain(proc: trio.Process, stream: trio.SocketStream | None, pump: _Pump) -> None:
    """Stop mitmdump (SIGTERM; SIGKILL by the caller's deadline) and read its last frames."""
    proc.terminate()
    if stream is not None:
        try:
            await pump.read(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
    await proc.wait()
