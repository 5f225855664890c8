"""Re-derive a recorded exchange's ``llm.call`` from its kept body blobs (sans-IO).

A fix to the LLM parsers or usage rules must reach runs recorded before it: replay feeds
the bodies the proxy witness kept as blobs back through the same `ExchangeAssembler` the
live witness runs, so the call it rebuilds is the one the current code would have written.

What a recorded exchange keeps, and how it is fed back:

- ``http.exchange``: method, host, path (redacted; only its suffix classifies the call),
  status, response headers (redacted values; ``content-type`` and ``content-encoding`` as
  sent), ``error`` (a cut response) and ``denied``.
- ``blob.stored`` roles: ``http.{request,response}_body`` holds the decoded body, so it is
  fed with its ``content-encoding`` header removed; ``...body.encoded`` holds the raw bytes
  the decoder could not undo, fed with the header kept (the same failure, the same
  fallback); ``...body.truncated`` holds only the body's start: no re-derivation.

With no ``.encoded`` body (nearly every call) the assembly's body decoders are the
identity and pass each body through whole (up to its cap, `DEFAULT_MAX_BODY_BYTES`), so the bodies go straight to the
`LlmCallBuilder` the assembly would have made, in the order it would have fed them
(`_built`); tests/caisson/test_replay_rederive.py checks both paths give equal calls.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypedDict

from collectors.llm import LlmCallBuilder, classify, path_model
from collectors.proxy._exchange import DEFAULT_MAX_BODY_BYTES, ExchangeAssembler
from collectors.proxy._frames import NEED_DATA, Chunk, Frame, ProxyError, Request, RequestBody, ResponseEnd, ResponseStart
from ledger.events import HttpExchange, LlmCall, LlmEndpoint, Provider


class _Times(TypedDict):
    ts_ns: int  # wall clock of the frame, ns since the Unix epoch
    mono_ns: int

__all__ = ["Body", "rederive_llm_call"]

Body = tuple[bytes, str]
"""A kept body: (its blob's bytes, the blob's role)."""


def _headers(headers: list[tuple[str, str]], role: str | None) -> list[tuple[str, str]]:
    """The headers to feed: without content-encoding unless the blob holds the raw bytes."""
    if role is not None and ".encoded" in role:
        return list(headers)
    return [(k, v) for k, v in headers if k.lower() != "content-encoding"]


def rederive_llm_call(exchange: HttpExchange, request: Body | None, response: Body | None
                      ) -> tuple[LlmCall | None, str | None]:
    """Rebuild the ``llm.call`` of one recorded exchange with the current parsers and rules.

    Args:
        exchange: the recorded ``http.exchange``.
        request: its request body blob and role, or None when it kept none (an empty body).
        response: its response body blob and role, or None when it kept none.

    Returns:
        ``(call, None)``; ``(None, None)`` when the exchange is not a model call (or was
        denied: no call was made); ``(None, reason)`` when the kept evidence cannot give
        the call back (a truncated body blob, a body whose blob is missing).
    """
    kind = classify(exchange.method, exchange.host, exchange.path)
    if kind is None or exchange.denied is not None:
        return None, None
    for name, body, size, sha in (("request", request, exchange.request_bytes, exchange.request_body_sha256),
                                  ("response", response, exchange.response_bytes, exchange.response_body_sha256)):
        if body is None and (sha is not None or size):
            return None, f"the {name} body blob is missing"
        if body is not None and ".truncated" in body[1]:
            return None, f"the {name} body blob holds only the body's start (over the cap)"
    if not any(body is not None and (".encoded" in body[1] or len(body[0]) > DEFAULT_MAX_BODY_BYTES)
               for body in (request, response)):
        return _built(exchange, kind, request, response), None
    return _assembled(exchange, request, response)


def _built(exchange: HttpExchange, kind: tuple[Provider, LlmEndpoint], request: Body | None, response: Body | None) -> LlmCall:
    """The call of a model exchange whose kept bodies are decoded: the builder fed as the
    assembly feeds it through identity decoders (request body, response start, the body
    if any, the end; cut when the exchange recorded an error)."""
    builder = LlmCallBuilder(*kind, url_model=path_model(exchange.path))
    builder.request(request[0] if request else b"")
    if exchange.status is not None:  # a response arrived (denied exchanges never get here)
        builder.response_start(exchange.status, _headers(exchange.response_headers, response and response[1]))
        if response is not None and response[0]:
            builder.response_data(response[0])
    return builder.finish(cut=exchange.error is not None)


def _assembled(exchange: HttpExchange, request: Body | None, response: Body | None
               ) -> tuple[LlmCall | None, str | None]:
    """The call of a model exchange as the proxy's assembly builds it from frames (bodies
    that keep their content coding go through its decoders, failures and all)."""
    # headers and bodies were redacted when recorded; only the call is wanted
    assembler = ExchangeAssembler(lambda secret: secret, calls_only=True)
    for frame in _frames(exchange, request, response):
        assembler.feed(frame)
    while (out := assembler.next_event()) is not NEED_DATA:
        if isinstance(out.event, LlmCall):
            return out.event, None
    return None, "no llm.call came out of the exchange"


def _frames(exchange: HttpExchange, request: Body | None, response: Body | None) -> Iterator[Frame]:
    t = _Times(ts_ns=exchange.started_ns, mono_ns=0)
    fid = "replay"
    yield Request(id=fid, method=exchange.method, scheme=exchange.scheme, host=exchange.host, port=exchange.port,
                  path=exchange.path, headers=_headers(exchange.request_headers, request and request[1]), **t)
    yield RequestBody(id=fid, body=request[0] if request else b"", **t)
    if exchange.status is not None:  # a response arrived (denied exchanges never get here)
        yield ResponseStart(id=fid, status=exchange.status,
                            headers=_headers(exchange.response_headers, response and response[1]), **t)
        if response is not None and response[0]:
            yield Chunk(id=fid, data=response[0])
    end = _Times(ts_ns=exchange.ended_ns, mono_ns=0)
    if exchange.error is not None:
        yield ProxyError(id=fid, message=exchange.error, **end)
    else:
        yield ResponseEnd(id=fid, **end)
