"""Unit tests of the proxy witness's sans-IO parts: frames, bodies, secrets, assembly."""

from __future__ import annotations

import gzip
import hashlib
import zlib

import brotli
import msgspec
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.proxy._bodies import BodyDecoder
from ledger import Redactor
from collectors.proxy._frames import (
    Chunk, ConnError, Connected, Denied, Dropped, FrameDecoder, FrameError, Hello, ProxyError, Request,
    RequestBody, ResponseEnd, ResponseStart, Tunnel, TunnelEnd, encode_frame,
)
from collectors.proxy import NEED_DATA, ClientOwner, ExchangeAssembler, Output
from ledger import keyed_fingerprint
from ledger.events import BlobStored, ClientProcess, HttpExchange, LlmCall, ProxyTunnel, WitnessGap, WitnessRaw
from tests.collectors.llm_server import FIXTURES

FP = keyed_fingerprint(b"k")
T = dict(ts_ns=1_000, mono_ns=10)
SSE = (FIXTURES / "anthropic_stream.sse").read_bytes()
REQ = (FIXTURES / "anthropic_request_stream.json").read_bytes()


def exchange_frames(fid: str = "f1", *, body: bytes = SSE, encoding: str | None = None, split: int = 7):
    headers = [("content-type", "text/event-stream")] + ([("content-encoding", encoding)] if encoding else [])
    frames = [
        Request(id=fid, method="POST", scheme="https", host="api.anthropic.com", port=443,
                path="/v1/messages?key=abcdefgh12345", headers=[("x-api-key", "sk-secret-123456")], **T),
        RequestBody(id=fid, body=REQ, **T),
        ResponseStart(id=fid, status=200, headers=headers, **T),
    ]
    frames += [Chunk(id=fid, data=body[i:i + split]) for i in range(0, len(body), split)]
    return frames + [ResponseEnd(id=fid, ts_ns=2_000, mono_ns=20)]


def assemble(frames, assembler=None) -> list[Output]:
    assembler = assembler or ExchangeAssembler(FP)
    for frame in frames:
        assembler.feed(frame)
    out = []
    while (item := assembler.next_event()) is not NEED_DATA:
        out.append(item)
    return out


def stream_bytes(frames) -> bytes:
    return b"".join(encode_frame(f) for f in frames)


# --- FrameDecoder ------------------------------------------------------------------------


def decode_all(data: bytes, sizes=None) -> list:
    decoder, frames, pos = FrameDecoder(), [], 0
    for size in sizes or [len(data)]:
        decoder.feed(data[pos:pos + size])
        pos += size
        while (f := decoder.next_event()) is not NEED_DATA:
            frames.append(f)
    decoder.feed(data[pos:])
    while (f := decoder.next_event()) is not NEED_DATA:
        frames.append(f)
    return frames


def test_frames_whole_and_byte_at_a_time():
    frames = exchange_frames()
    data = stream_bytes(frames)
    assert decode_all(data) == frames
    assert decode_all(data, [1] * len(data)) == frames


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=300), max_size=40))
def test_frames_any_split(sizes):
    frames = exchange_frames()
    assert decode_all(stream_bytes(frames), sizes) == frames


def test_invalid_frame_is_skipped_not_fatal():
    bad = msgspec.msgpack.encode({"t": "chunk", "id": 3})  # id must be a str
    data = stream_bytes([Hello(pid=1)]) + len(bad).to_bytes(4, "big") + bad + stream_bytes([Dropped(ts_ns=1, count=2)])
    decoder = FrameDecoder()
    decoder.feed(data)
    assert decoder.next_event() == Hello(pid=1)
    with pytest.raises(FrameError) as info:
        decoder.next_event()
    assert not info.value.fatal
    assert decoder.next_event() == Dropped(ts_ns=1, count=2)
    assert decoder.next_event() is NEED_DATA and decoder.bad_frames == 1


def test_oversized_frame_is_fatal_and_stays_so():
    decoder = FrameDecoder(max_frame_bytes=100)
    decoder.feed((101).to_bytes(4, "big") + b"x" * 10)
    for _ in range(2):
        with pytest.raises(FrameError) as info:
            decoder.next_event()
        assert info.value.fatal


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_raises_only_frame_error(data):
    decoder = FrameDecoder()
    decoder.feed(data)
    for _ in range(50):
        try:
            if decoder.next_event() is NEED_DATA:
                break
        except FrameError as exc:
            if exc.fatal:
                break


# --- BodyDecoder -------------------------------------------------------------------------

PLAIN = SSE * 20
ENCODED = {
    "gzip": gzip.compress(PLAIN),
    "deflate": zlib.compress(PLAIN),
    "br": brotli.compress(PLAIN),
    "zstd": zstandard.ZstdCompressor().compress(PLAIN),
    "gzip, br": brotli.compress(gzip.compress(PLAIN)),
    "identity": PLAIN,
}


@pytest.mark.parametrize("coding", list(ENCODED))
@pytest.mark.parametrize("step", [1, 13, 1 << 20])
def test_body_decoder_incremental(coding, step):
    decoder, raw, out = BodyDecoder(coding, max_bytes=1 << 24), ENCODED[coding], bytearray()
    for i in range(0, len(raw), step):
        out += decoder.feed(raw[i:i + step])
    decoder.finish()
    assert bytes(out) == PLAIN and decoder.problem is None


def test_body_decoder_raw_deflate_and_multi_member_gzip():
    raw = zlib.compressobj(wbits=-15)
    data = raw.compress(PLAIN) + raw.flush()
    assert BodyDecoder("deflate", max_bytes=1 << 24).feed(data) == PLAIN
    assert BodyDecoder("gzip", max_bytes=1 << 24).feed(gzip.compress(b"ab") + gzip.compress(b"cd")) == b"abcd"


@pytest.mark.parametrize("coding, data, problem", [
    ("gzip", b"not gzip at all", "could not be decoded"),
    ("compress", b"x", "unsupported content-encoding compress"),
    ("gzip", gzip.compress(PLAIN)[:-30], "ended before"),
])
def test_body_decoder_problems(coding, data, problem):
    decoder = BodyDecoder(coding, max_bytes=1 << 24)
    decoder.feed(data)
    decoder.finish()
    assert problem in decoder.problem


def test_body_decoder_bomb_is_capped():
    decoder = BodyDecoder("gzip", max_bytes=1000)
    assert decoder.feed(gzip.compress(b"\0" * 100_000)) == b"\0" * 1000  # the body's start, up to the cap
    assert decoder.failed and decoder.over_cap and decoder.problem == "decoded body over 1000 bytes"
    assert decoder.feed(gzip.compress(b"\0" * 10)) == b""


# --- Redactor ----------------------------------------------------------------------------


def test_redactor_headers_path_and_bodies():
    red = Redactor(FP)
    assert red.header("Authorization", "Bearer sk-abcdefgh") == "Bearer " + FP("sk-abcdefgh")
    assert red.header("X-Api-Key", "sk-12345678") == FP("sk-12345678")
    assert red.header("Cookie", "a=longcookievalue; b=1") == f"a={FP('longcookievalue')}; b={FP('1')}"
    assert red.header("Set-Cookie", "s=v; Path=/") == f"s={FP('v')}; Path=/"
    assert red.header("Content-Type", "application/json") == "application/json"
    assert red.path("/x?a=1&api_key=q%2Fsecret12&token=") == f"/x?a=1&api_key={FP('q/secret12')}&token="
    assert red.path("/plain") == "/plain"
    body = b'{"k": "sk-12345678", "c": "longcookievalue", "q": "q%2Fsecret12", "one": "1"}'
    scrubbed = red.scrub(body)
    for secret in (b"sk-12345678", b"longcookievalue", b"q%2Fsecret12"):
        assert secret not in scrubbed
    assert b'"one": "1"' in scrubbed  # short values are not searched for


# --- ExchangeAssembler -------------------------------------------------------------------


@pytest.mark.parametrize("encoding", [None, "gzip", "br"])
def test_streamed_exchange(encoding):
    body = {None: SSE, "gzip": gzip.compress(SSE), "br": brotli.compress(SSE)}[encoding]
    out = assemble(exchange_frames(body=body, encoding=encoding))
    kinds = [type(o.event) for o in out]
    assert kinds == [BlobStored, BlobStored, HttpExchange, LlmCall]
    req_blob, resp_blob, ex, call = (o.event for o in out)
    assert out[1].blob == SSE and resp_blob.sha256 == hashlib.sha256(SSE).hexdigest()
    assert resp_blob.role == "http.response_body" and resp_blob.media_type == "text/event-stream"
    assert out[0].blob == REQ and req_blob.role == "http.request_body"
    assert ex.response_bytes == len(SSE) and ex.request_bytes == len(REQ)
    assert ex.path == f"/v1/messages?key={FP('abcdefgh12345')}"
    assert ex.request_headers == [("x-api-key", FP("sk-secret-123456"))]
    assert (ex.started_ns, ex.ended_ns, out[2].wall_ns, out[2].mono_ns) == (1_000, 2_000, 2_000, 20)
    assert call.served_model == "claude-sonnet-4-5-20250929" and call.usage["output_tokens"] == 15
    assert call.exchange_seq is None


def test_undecodable_body_stored_raw_and_said():
    out = assemble(exchange_frames(body=b"\x1f\x8b garbage", encoding="gzip"))
    blob = next(o for o in out if isinstance(o.event, BlobStored) and o.event.role.startswith("http.response"))
    assert blob.event.role == "http.response_body.encoded" and blob.blob == b"\x1f\x8b garbage"
    raws = [o.event.line for o in out if isinstance(o.event, WitnessRaw)]
    assert any("response body: content-encoding could not be decoded" in r for r in raws)
    call = next(o.event for o in out if isinstance(o.event, LlmCall))
    assert call.usage is None


def test_error_mid_stream_and_close_cut_open_exchanges():
    frames = exchange_frames()[:-3] + [ProxyError(id="f1", message="peer closed connection", **T)]
    out = assemble(frames)
    ex = next(o.event for o in out if isinstance(o.event, HttpExchange))
    call = next(o.event for o in out if isinstance(o.event, LlmCall))
    assert ex.error == "peer closed connection" and ex.status == 200
    assert call.usage is None and call.usage_missing_reason
    assembler = ExchangeAssembler(FP)
    assemble(exchange_frames("f2")[:3], assembler)
    assert assembler.open_exchanges == 1
    assembler.close(5_000)
    ex = next(o.event for o in assemble([], assembler) if isinstance(o.event, HttpExchange))
    assert ex.error == "the proxy stopped before the exchange finished" and ex.ended_ns == 5_000


def test_denied_dropped_conn_error_and_orphans():
    request = exchange_frames("d1")[0]
    out = assemble([
        request, Denied(id="d1", reason="caisson egress policy: host x is not in the allow list", **T),
        Dropped(ts_ns=7, count=3), ConnError(id="c", client="1.2.3.4:5", message="no HTTP", **T),
        Chunk(id="nobody", data=b"x"),
    ])
    ex, gap, conn, orphan = (o.event for o in out)
    assert isinstance(ex, HttpExchange) and ex.status == 403 and ex.denied.startswith("caisson egress policy")
    assert isinstance(gap, WitnessGap) and gap.dropped == 3 and gap.since_ns == 7
    assert isinstance(conn, WitnessRaw) and "1.2.3.4:5" in conn.line and "no HTTP" in conn.line
    assert isinstance(orphan, WitnessRaw) and "unknown exchange" in orphan.line


def test_an_attributed_exchange_carries_its_client_and_its_processes():
    curl = ClientProcess(pid=34, host_pid=5247, start_time_ns=9, exe="/usr/bin/curl")
    assembler = ExchangeAssembler(FP)
    frames = exchange_frames("a1")
    frames[0] = msgspec.structs.replace(frames[0], client="172.30.0.2:40634", conn="c1")
    assembler.feed(Connected(id="c1", client="172.30.0.2:40634", **T))  # no output of its own
    assembler.feed(frames[0])
    assembler.attribute("a1", ClientOwner([curl]))
    assembler.attribute("nobody", ClientOwner([], "ignored: no such exchange"))
    [ex] = [o.event for o in assemble(frames[1:], assembler) if isinstance(o.event, HttpExchange)]
    assert (ex.client, ex.client_processes, ex.client_unresolved) == ("172.30.0.2:40634", [curl], None)
    gone = exchange_frames("a2")
    assembler.feed(gone[0])
    assembler.attribute("a2", ClientOwner([], "the socket from 172.30.0.2:40640 was closed"))
    [ex] = [o.event for o in assemble(gone[1:], assembler) if isinstance(o.event, HttpExchange)]
    assert (ex.client_processes, ex.client_unresolved) == ([], "the socket from 172.30.0.2:40640 was closed")
    [ex] = [o.event for o in assemble(exchange_frames("a3")) if isinstance(o.event, HttpExchange)]
    assert (ex.client, ex.client_processes, ex.client_unresolved) == (None, [], None)  # never looked up


def test_secret_in_request_body_is_scrubbed():
    frames = exchange_frames()
    frames[1] = RequestBody(id="f1", body=b'{"model": "m", "key": "sk-secret-123456"}', **T)
    out = assemble(frames)
    assert b"sk-secret-123456" not in out[0].blob and FP("sk-secret-123456").encode() in out[0].blob


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=200), min_size=1, max_size=30))
def test_assembly_independent_of_chunking(sizes):
    body, chunks, pos = gzip.compress(SSE), [], 0
    for size in sizes:
        chunks.append(body[pos:pos + size])
        pos += size
    chunks.append(body[pos:])
    frames = exchange_frames(body=b"", encoding="gzip")[:-1]
    frames += [Chunk(id="f1", data=c) for c in chunks if c] + [ResponseEnd(id="f1", ts_ns=2_000, mono_ns=20)]
    assert assemble(frames) == assemble(exchange_frames(body=body, encoding="gzip"))


def test_fatal_frame_error_is_a_gap():
    assembler = ExchangeAssembler(FP)
    assembler.bad_frame(FrameError("frame of 9 bytes exceeds", fatal=True, offset=4), 123)
    raw, gap = (o.event for o in assemble([], assembler))
    assert isinstance(raw, WitnessRaw) and isinstance(gap, WitnessGap) and gap.since_ns == 123


# --- tunnels ------------------------------------------------------------------------------


def tunnel_frames():
    """A refused CONNECT, then an allowed one that carried TLS and HTTP, then one whose
    bytes were refused, then a WebSocket upgrade; the allowed ones interleaved."""
    return [
        Tunnel(id="t1", ts_ns=1, mono_ns=1, via="connect", host="127.0.0.1", port=8080, client="172.18.0.2:40000",
               denied="caisson egress policy: host 127.0.0.1 is not in the allow list"),
        Tunnel(id="t2", ts_ns=2, mono_ns=2, via="connect", host="api.anthropic.com", port=443, client="172.18.0.2:1"),
        Tunnel(id="t3", ts_ns=3, mono_ns=3, via="connect", host="api.anthropic.com", port=443, client="172.18.0.2:2"),
        *exchange_frames("e1"),
        TunnelEnd(id="t3", ts_ns=4, mono_ns=4, protocol="tcp",
                  denied="caisson egress policy: the bytes are neither TLS nor HTTP: raw TCP is not relayed"),
        TunnelEnd(id="t2", ts_ns=5, mono_ns=5, protocol="tls/http", exchanges=1),
        Tunnel(id="w1", ts_ns=6, mono_ns=6, via="upgrade", host="ws.test", port=80, protocol="websocket"),
        TunnelEnd(id="w1", ts_ns=7, mono_ns=7, protocol="websocket", client_bytes=5, server_bytes=9),
    ]


def test_every_tunnel_is_an_event_refused_at_once_the_others_when_they_close():
    tunnels = [(o.event, o.wall_ns) for o in assemble(tunnel_frames()) if isinstance(o.event, ProxyTunnel)]
    assert tunnels == [
        (ProxyTunnel(via="connect", host="127.0.0.1", port=8080, client="172.18.0.2:40000",
                     denied="caisson egress policy: host 127.0.0.1 is not in the allow list",
                     started_ns=1, ended_ns=1), 1),
        (ProxyTunnel(via="connect", host="api.anthropic.com", port=443, client="172.18.0.2:2", protocol="tcp",
                     denied="caisson egress policy: the bytes are neither TLS nor HTTP: raw TCP is not relayed",
                     started_ns=3, ended_ns=4), 4),
        (ProxyTunnel(via="connect", host="api.anthropic.com", port=443, client="172.18.0.2:1", protocol="tls/http",
                     exchanges=1, started_ns=2, ended_ns=5), 5),
        (ProxyTunnel(via="upgrade", host="ws.test", port=80, protocol="websocket", client_bytes=5, server_bytes=9,
                     started_ns=6, ended_ns=7), 7),
    ]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=300), max_size=40))
def test_tunnel_frames_any_split_give_the_same_events(sizes):
    frames = tunnel_frames()
    assert decode_all(stream_bytes(frames), sizes) == frames
    assert decode_all(stream_bytes(frames), [1] * len(stream_bytes(frames))) == frames


def test_a_tunnel_open_when_the_proxy_stops_is_recorded_as_cut():
    assembler = ExchangeAssembler(FP)
    assemble(tunnel_frames()[:2], assembler)
    assembler.close(9, 9)
    [cut] = [o.event for o in assemble([], assembler) if isinstance(o.event, ProxyTunnel)]
    assert cut.host == "api.anthropic.com" and cut.error == "the proxy stopped before the exchange finished"
    assert cut.ended_ns == 9 and assembler.tunnels == 2


def test_a_tunnel_frame_of_another_vocabulary_or_an_unknown_tunnel_is_kept_raw():
    bad = msgspec.msgpack.encode({"t": "tunnel", "id": "x", "ts_ns": 1, "mono_ns": 1, "via": "socks", "host": "h",
                                  "port": 1})
    decoder = FrameDecoder()
    decoder.feed(len(bad).to_bytes(4, "big") + bad)
    with pytest.raises(FrameError):
        decoder.next_event()
    [raw] = [o.event for o in assemble([TunnelEnd(id="nope", ts_ns=1, mono_ns=1)])]
    assert isinstance(raw, WitnessRaw) and "unknown tunnel" in raw.line


# --- the addon's pure helpers -------------------------------------------------------------


def test_addon_upstream_spec_is_keyed_by_the_one_spelling_of_a_host():
    from collectors.proxy.addon import parse_upstream

    assert parse_upstream("a=1.2.3.4:80, B.=http://[::1]:9") == {"a": (None, "1.2.3.4", 80), "b": ("http", "::1", 9)}
    with pytest.raises(ValueError):
        parse_upstream("a=1.2.3.4")


# --- calls_only: the llm.call of the full assembly, and nothing else ----------------------


def _calls(outputs: list[Output]) -> list[Output]:
    return [o for o in outputs if isinstance(o.event, LlmCall)]


def _cases():
    gz = gzip.compress(SSE)
    cut_gzip = exchange_frames(body=gz[: len(gz) // 2], encoding="gzip")  # the encoded stream ends early
    lying = exchange_frames(body=SSE, encoding="gzip")  # a label that lies: read raw
    garbage = exchange_frames(body=b"\x1f\x8b garbage", encoding="gzip")
    error = exchange_frames()[:-3] + [ProxyError(id="f1", message="peer closed connection", **T)]
    denied = [exchange_frames("d1")[0], Denied(id="d1", reason="not in the allow list", **T)]
    no_response = exchange_frames("n1")[:2] + [ResponseEnd(id="n1", ts_ns=3, mono_ns=4)]
    not_a_model = [Request(id="w", method="GET", scheme="https", host="example.com", port=443, path="/", headers=[],
                           **T), RequestBody(id="w", body=b"", **T), ResponseEnd(id="w", **T)]
    yield from ([*exchange_frames(body=b, encoding=e)] for b, e in ((SSE, None), (gz, "gzip"),
                                                                     (brotli.compress(SSE), "br"),
                                                                     (zstandard.compress(SSE), "zstd")))
    yield from (cut_gzip, lying, garbage, error, denied, no_response, not_a_model)
    yield exchange_frames("a") + exchange_frames("b", body=gz, encoding="gzip")  # two in one stream


@pytest.mark.parametrize("max_body_bytes", [None, 64])  # 64: every body over the cap
def test_calls_only_gives_the_calls_of_the_full_assembly(max_body_bytes):
    size = {} if max_body_bytes is None else {"max_body_bytes": max_body_bytes}
    for frames in _cases():
        full = assemble(frames, ExchangeAssembler(FP, **size))
        only = assemble(frames, ExchangeAssembler(FP, calls_only=True, **size))
        assert only == _calls(full)
    assert _calls(assemble(exchange_frames(), ExchangeAssembler(FP, calls_only=True)))  # not vacuous
    closed = ExchangeAssembler(FP, calls_only=True)
    assemble(exchange_frames("c")[:4], closed)
    closed.close(5_000)
    reference = ExchangeAssembler(FP)
    assemble(exchange_frames("c")[:4], reference)
    reference.close(5_000)
    assert assemble([], closed) == _calls(assemble([], reference)) != []
