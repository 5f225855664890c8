"""Sans-IO assembly of proxy frames into ledger events: `ExchangeAssembler`.

Frames in (`collectors.proxy._frames`), outputs out: for each finished exchange, in this
order, the request body blob and the response body blob (an `Output` whose ``blob`` is
the bytes to store before its ``blob.stored`` event is appended), the ``http.exchange``,
and for a model API (`collectors.llm.classify`) the ``llm.call``; for each tunnel, refused
at once or closed, its ``proxy.tunnel``. Anything odd (a frame
for an unknown exchange, an undecodable body, an LLM parsing problem, a client that spoke
no HTTP) becomes a ``witness.raw`` line; lost frames become a ``witness.gap``. Nothing
here raises on bad input, reads a clock or does I/O.

Bodies are decoded from their Content-Encoding (`BodyDecoder`) before they are stored and
measured; an undecodable body is stored raw with role ``http.*_body.encoded`` and a
``witness.raw`` line saying why, and the LLM call reads those raw bytes as the declared
type (a label that lies: `LlmCall.label_mismatch`). Bodies are kept whole, streamed ones
too, up to ``max_body_bytes``; a blob cut there has ``.truncated`` at the end of its role
(replay then keeps the live ``llm.call`` rather than re-derive it from a part). Bodies are stored as sent, except that secret values the
`Redactor` replaced in a header or query parameter are replaced in bodies too. Header
values and the request path in events are always redacted.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Callable
from typing import Final, NamedTuple

from collectors.proxy._bodies import BodyDecoder
from ledger import NeedData
from collectors.proxy._frames import (
    NEED_DATA, Chunk, ConnError, Connected, Denied, Dropped, Frame, FrameError, Hello, ProxyError,
    Request, RequestBody, ResponseEnd, ResponseStart, Tunnel, TunnelEnd,
)
from collectors.llm import LlmCallBuilder, classify, path_model
from ledger import Redactor
from ledger.events import BlobStored, ClientProcess, Event, HttpExchange, ProxyTunnel, WitnessGap, WitnessRaw

__all__ = ["DEFAULT_MAX_BODY_BYTES", "ClientOwner", "ExchangeAssembler", "Output"]

DEFAULT_MAX_BODY_BYTES: Final = 256 << 20
"""Body bytes kept per direction and exchange; past it the blob holds the first bytes."""
WITNESS: Final = "proxy"


class Output(NamedTuple):
    """One event to append, with the times the witness observed it.

    Attributes:
        event: the ledger event.
        wall_ns: ns since the Unix epoch (from the addon's frame), or None for "now".
        mono_ns: CLOCK_MONOTONIC ns, or None for "now".
        blob: for a ``blob.stored`` event, the bytes to store (under ``event.sha256``)
            before the event is appended; None otherwise.
    """

    event: Event
    wall_ns: int | None = None
    mono_ns: int | None = None
    blob: bytes | None = None


class ClientOwner(NamedTuple):
    """Who holds the client end of a connection (`collectors.proxy._clients.ClientResolver`):
    the chamber processes, by pid, or why none was found."""

    processes: list[ClientProcess]
    unresolved: str | None = None


def _header(headers: list[tuple[str, str]], name: str) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value
    return None


class _Body:
    """One direction's body as it arrives: decoded, with the raw kept while needed."""

    def __init__(self, headers: list[tuple[str, str]], max_bytes: int):
        self.decoder = BodyDecoder(_header(headers, "content-encoding"), max_bytes=max_bytes)
        self.media_type = (_header(headers, "content-type") or "application/octet-stream").split(";")[0].strip()
        self.max_bytes = max_bytes
        self.raw = bytearray()
        self.decoded = bytearray()
        self.raw_size = 0
        self.truncated = False

    def feed(self, data: bytes) -> bytes:
        """Add raw bytes; returns the newly decoded bytes (b"" once decoding failed)."""
        self.raw_size += len(data)
        if self.decoder.encoded or self.decoder.failed:
            room = self.max_bytes - len(self.raw)
            self.truncated |= len(data) > room
            self.raw += data[:max(room, 0)]
        out = self.decoder.feed(data)
        if not self.decoder.failed or self.decoder.over_cap:
            room = self.max_bytes - len(self.decoded)
            self.truncated |= len(out) > room or self.decoder.over_cap
            self.decoded += out[:max(room, 0)]
        return out

    @property
    def undecodable(self) -> bool:
        """The content coding could not be undone (not merely a body over the cap)."""
        return self.decoder.failed and not self.decoder.over_cap

    def result(self) -> tuple[bytes, int, str | None]:
        """(bytes to store, size in bytes as recorded, problem or None)."""
        self.decoder.finish()
        problem = self.decoder.problem
        if self.undecodable:
            data, size = bytes(self.raw), self.raw_size
        else:
            data, size = bytes(self.decoded), len(self.decoded)
        if self.truncated:
            problem = (problem + "; " if problem else "") + f"body over {self.max_bytes} bytes, blob truncated"
        return data, size, problem


class _Exchange:
    def __init__(self, request: Request, max_bytes: int):
        self.request = request
        self.owner: ClientOwner | None = None
        self.upstream: str | None = None
        self.request_body = _Body(request.headers, max_bytes)
        self.response: ResponseStart | None = None
        self.response_body: _Body | None = None
        kind = classify(request.method, request.host, request.path)
        self.builder = LlmCallBuilder(*kind, url_model=path_model(request.path)) if kind else None
        self.told_undecodable = False
        self.problems: list[str] = []


class ExchangeAssembler:
    """Turn proxy frames into blobs, ``http.exchange``, ``llm.call`` and health events.

    Args:
        fingerprint: secret value -> keyed fingerprint (``"fp:..."``).
        max_body_bytes: body bytes kept per direction of one exchange.
        calls_only: put out only the ``llm.call`` of each finished exchange, for a caller
            that re-derives calls from kept bodies (`rederive_llm_call`): no blobs, no
            ``http.exchange``, no ``witness.raw`` lines of its problems, so no redaction or
            hashing of the bodies. The calls are those of the full assembly (the same
            builder, fed the same bytes, told the same decoding problems).

    Attributes:
        hello: the addon's ``hello`` frame, once received.
        exchanges: ``http.exchange`` events produced.
        tunnels: ``proxy.tunnel`` events produced.
        llm_calls: ``llm.call`` events produced.
        problems: ``witness.raw`` lines produced (bad frames, bodies, LLM parsing).
        dropped: frames the addon reported lost.
        redactor: the `Redactor`, with its count of replaced secrets.
    """

    def __init__(self, fingerprint: Callable[[str], str], *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
                 calls_only: bool = False):
        self.redactor = Redactor(fingerprint)
        self.max_body_bytes = max_body_bytes
        self.calls_only = calls_only
        self.hello: Hello | None = None
        self.exchanges = 0
        self.tunnels = 0
        self.llm_calls = 0
        self.problems = 0
        self.dropped = 0
        self._open: dict[str, _Exchange] = {}
        self._tunnels: dict[str, Tunnel] = {}
        self._out: deque[Output] = deque()

    @property
    def open_exchanges(self) -> int:
        """Exchanges started and not yet finished."""
        return len(self._open)

    def next_event(self) -> Output | NeedData:
        """The next output, or `NEED_DATA` when none is ready (as `ledger.SansIOParser`'s;
        but `feed` takes decoded frames and `close` the time the stream ended)."""
        return self._out.popleft() if self._out else NEED_DATA

    def _raw(self, line: str, wall_ns: int | None = None, mono_ns: int | None = None) -> None:
        self.problems += 1
        self._out.append(Output(WitnessRaw(witness=WITNESS, line=line[:2000]), wall_ns, mono_ns))

    def bad_frame(self, error: FrameError, wall_ns: int | None = None) -> None:
        """Record a frame the decoder rejected; a fatal error is also a ``witness.gap``.

        Args:
            error: the decoder's error.
            wall_ns: when it was seen, ns since the Unix epoch (None: the writer's now).
        """
        self._raw(f"bad frame from the proxy addon: {error}", wall_ns)
        if error.fatal:
            self._out.append(Output(WitnessGap(
                witness=WITNESS, reason=f"frame stream lost sync: {error}",
                missing="frames until the addon reconnects", since_ns=wall_ns), wall_ns))

    def feed(self, frame: Frame) -> None:
        """Consume one frame; outputs become available through `next_event`."""
        if isinstance(frame, Hello):
            self.hello = frame
        elif isinstance(frame, Request):
            if frame.id in self._open:
                self._raw(f"{frame.id}: request frame for an exchange already open", frame.ts_ns, frame.mono_ns)
                self._finish(self._open[frame.id], frame.ts_ns, frame.mono_ns, error="superseded")
            self._open[frame.id] = _Exchange(frame, self.max_body_bytes)
        elif isinstance(frame, Dropped):
            self.dropped += frame.count
            self._out.append(Output(WitnessGap(
                witness=WITNESS, reason=f"the proxy addon dropped {frame.count} frames",
                missing="http.exchange, llm.call, body blobs", since_ns=frame.ts_ns, dropped=frame.count),
                frame.ts_ns, None))
        elif isinstance(frame, Tunnel):
            if frame.denied is not None:
                self._tunnel(frame, frame.ts_ns, frame.mono_ns)
            elif not self.calls_only:
                self._tunnels[frame.id] = frame
        elif isinstance(frame, TunnelEnd):
            if (opened := self._tunnels.pop(frame.id, None)) is not None:
                self._tunnel(opened, frame.ts_ns, frame.mono_ns, frame)
            elif not self.calls_only:
                self._raw(f"{frame.id}: tunnel_end frame for an unknown tunnel", frame.ts_ns, frame.mono_ns)
        elif isinstance(frame, Connected):
            pass  # who made the connection is the recorder's lookup (`attribute`)
        elif isinstance(frame, ConnError):
            self._raw(f"connection from {frame.client or '?'} (sni {frame.sni or '-'}): {frame.message}",
                      frame.ts_ns, frame.mono_ns)
        elif (ex := self._open.get(frame.id)) is None:
            self._raw(f"{frame.id}: {frame.__struct_config__.tag} frame for an unknown exchange")
        else:
            self._feed_exchange(ex, frame)

    def attribute(self, exchange_id: str, owner: ClientOwner) -> None:
        """Say which chamber processes held the client end of an open exchange's connection
        (`collectors.proxy._clients`): its ``http.exchange`` carries them. An exchange never
        attributed carries neither processes nor a reason (the witness did not look)."""
        if (ex := self._open.get(exchange_id)) is not None:
            ex.owner = owner

    def _feed_exchange(self, ex: _Exchange, frame: Frame) -> None:
        if isinstance(frame, RequestBody):
            ex.upstream = frame.upstream
            decoded = ex.request_body.feed(frame.body)
            if ex.builder is not None:
                ex.builder.request(decoded if not ex.request_body.decoder.failed else frame.body)
        elif isinstance(frame, ResponseStart):
            if ex.response is not None:
                ex.problems.append("second response_start frame ignored")
                return
            ex.response = frame
            ex.response_body = _Body(frame.headers, self.max_body_bytes)
            if ex.builder is not None:
                ex.builder.response_start(frame.status, frame.headers)
        elif isinstance(frame, Chunk):
            body = ex.response_body
            if body is None:
                ex.problems.append("response chunk before response headers ignored")
                return
            decoded = body.feed(frame.data)
            if ex.builder is None:
                return
            if not body.decoder.failed or body.decoder.over_cap:
                if decoded:
                    ex.builder.response_data(decoded)
            elif not ex.told_undecodable:  # the label lied: the builder reads the raw bytes
                ex.told_undecodable = True
                ex.builder.response_undecodable(body.decoder.problem or "content-encoding failed", bytes(body.raw))
            else:
                ex.builder.response_data(frame.data)
        elif isinstance(frame, ResponseEnd):
            self._finish(ex, frame.ts_ns, frame.mono_ns)
        elif isinstance(frame, ProxyError):
            self._finish(ex, frame.ts_ns, frame.mono_ns, error=frame.message or "proxy error")
        elif isinstance(frame, Denied):
            self._finish(ex, frame.ts_ns, frame.mono_ns, denied=frame.reason or frame.policy, status=frame.status)

    def close(self, wall_ns: int, mono_ns: int | None = None,
              reason: str = "the proxy stopped before the exchange finished") -> None:
        """Finish every open exchange and tunnel as cut (the proxy stopped or died).

        Args:
            wall_ns: when the stream of frames ended, ns since the Unix epoch.
            mono_ns: the same instant, CLOCK_MONOTONIC ns.
            reason: the ``error`` recorded on each open exchange and tunnel.
        """
        for ex in list(self._open.values()):
            self._finish(ex, wall_ns, mono_ns, error=reason)
        for tunnel in list(self._tunnels.values()):
            self._tunnel(tunnel, wall_ns, mono_ns, error=reason)
        self._tunnels.clear()

    def _tunnel(self, opened: Tunnel, wall_ns: int, mono_ns: int | None, end: TunnelEnd | None = None,
                error: str | None = None) -> None:
        if self.calls_only:
            return
        self._out.append(Output(ProxyTunnel(
            via=opened.via, host=opened.host, port=opened.port, client=opened.client,
            denied=opened.denied or (end.denied if end else None),
            protocol=end.protocol if end and end.protocol else opened.protocol,
            exchanges=end.exchanges if end else 0, client_bytes=end.client_bytes if end else 0,
            server_bytes=end.server_bytes if end else 0, started_ns=opened.ts_ns, ended_ns=wall_ns,
            error=end.error if end else error), wall_ns, mono_ns))
        self.tunnels += 1

    def _blob(self, body: _Body, direction: str, wall_ns: int, mono_ns: int | None) -> tuple[str | None, int, str | None]:
        data, size, problem = body.result()
        if not data:
            return None, size, problem
        data = self.redactor.scrub(data)
        digest = hashlib.sha256(data).hexdigest()
        role = f"http.{direction}_body" + (".encoded" if body.undecodable else "") + (
            ".truncated" if body.truncated else "")
        event = BlobStored(sha256=digest, size_bytes=len(data), role=role, media_type=body.media_type)
        self._out.append(Output(event, wall_ns, mono_ns, data))
        return digest, size, problem

    def _finish(self, ex: _Exchange, wall_ns: int, mono_ns: int | None, *, error: str | None = None,
                denied: str | None = None, status: int | None = None) -> None:
        self._open.pop(ex.request.id, None)
        if self.calls_only:
            ex.request_body.decoder.finish()  # what `_Body.result` does before the call is built
            if ex.response_body is not None:
                ex.response_body.decoder.finish()
            self._call(ex, wall_ns, mono_ns, error=error, denied=denied)
            return
        req, resp = ex.request, ex.response
        red = self.redactor
        path = red.path(req.path)  # headers and path first: their secrets are then scrubbed from bodies
        request_headers = red.headers(req.headers)
        response_headers = red.headers(resp.headers) if resp is not None else []
        req_sha, req_size, req_problem = self._blob(ex.request_body, "request", wall_ns, mono_ns)
        resp_sha = resp_problem = None
        resp_size = 0
        if ex.response_body is not None:
            resp_sha, resp_size, resp_problem = self._blob(ex.response_body, "response", wall_ns, mono_ns)
        exchange = HttpExchange(
            method=req.method, scheme=req.scheme, host=req.host, port=req.port, path=path,
            status=resp.status if resp is not None else status,
            request_bytes=req_size, response_bytes=resp_size,
            request_headers=request_headers, response_headers=response_headers,
            request_body_sha256=req_sha, response_body_sha256=resp_sha,
            started_ns=req.ts_ns, ended_ns=wall_ns, denied=denied, error=error, client=req.client,
            client_processes=ex.owner.processes if ex.owner is not None else [],
            client_unresolved=ex.owner.unresolved if ex.owner is not None else None,
        )
        self._out.append(Output(exchange, wall_ns, mono_ns))
        self.exchanges += 1
        problems = list(ex.problems)
        if req_problem:
            problems.append(f"request body: {req_problem}")
        if resp_problem:
            problems.append(f"response body: {resp_problem}")
        if self._call(ex, wall_ns, mono_ns, error=error, denied=denied):
            problems.extend(f"llm: {p}" for p in ex.builder.problems)  # type: ignore[union-attr]
        where = f"{req.id} {req.method} {req.host}{path}"
        for problem in problems:
            self._raw(f"{where}: {red.scrub(problem.encode()).decode('utf-8', 'replace')}", wall_ns, mono_ns)

    def _call(self, ex: _Exchange, wall_ns: int, mono_ns: int | None, *, error: str | None,
              denied: str | None) -> bool:
        """Put out the ``llm.call`` of a finished model-API exchange that was not denied (its
        bodies' decoders finished); returns whether there was one."""
        if ex.builder is None or denied is not None:
            return False
        body = ex.response_body
        if body is not None and body.decoder.problem and not body.decoder.over_cap and not ex.told_undecodable:
            ex.builder.response_undecodable(body.decoder.problem, b"")  # e.g. the encoded stream ended early
        call = ex.builder.finish(cut=error is not None)
        self._out.append(Output(call, wall_ns, mono_ns))
        self.llm_calls += 1
        return True
