"""The scripted model endpoint: plays a `ModelScript` over HTTP in the providers' API shapes.

`ScriptPlayer` is the sans-IO core: one request (method, target, headers, body bytes)
in, one `Reply` out; no sockets, no clock (the caller passes ``created``). `serve_model`
is the thin trio HTTP/1.1 server around it (h11; keep-alive; Content-Length or chunked
request bodies; optional TLS).

Routes (a base-URL prefix such as ``/api`` is tolerated; a query string is ignored):

- ``POST …/v1/messages`` (Anthropic), ``POST …/v1/chat/completions`` and
  ``POST …/v1/responses`` (OpenAI): the next turn, streamed when the body says
  ``"stream": true``.
- ``POST …/v1/messages/count_tokens``: ``{"input_tokens": N}`` with N an estimate,
  ceil(request body bytes / 4), consuming no turn.
- ``GET …/v1/models`` and ``GET …/v1/models/{id}``: the script's models, in a shape
  both the Anthropic and OpenAI clients accept.

Turn state: each conversation has one turn pointer for the whole server (not per TCP
connection). A request joins the conversation named by its ``x-caisson-conversation``
header, else ``default``. Before the pointer's turn, the script's ``background`` turns
are tried; one that matches answers without advancing. A turn with an ``error`` answers
its first ``error.times`` requests with the failure (a background turn's error answers every
request it matches), then its response; the pointer moves past it after the response (or
after the last failure, when it has none). A request that nothing expects
(no turns left, match failure, unknown conversation or path, bad JSON) gets a 4xx in the
provider's error shape, a line on the log, and an `Unexpected` in
`ScriptPlayer.unexpected`; the pointer does not move.
"""

from __future__ import annotations

import ssl
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any

import h11
import msgspec
import trio

from caisson.model._render import Reply, error_reply, json_reply, render_error, render_turn
from caisson.model.script import Match, ModelScript, Turn
from collectors.llm import ANTHROPIC, classify

__all__ = ["Reply", "ScriptPlayer", "Served", "Unexpected", "open_model_listeners", "serve_model",
           "server_ssl_context"]

MAX_REQUEST_BYTES = 64 << 20
"""Largest request body accepted, bytes (agents resend whole transcripts)."""
CONVERSATION_HEADER = "x-caisson-conversation"


class Unexpected(msgspec.Struct, frozen=True, kw_only=True):
    """A request the script did not expect."""

    method: str
    path: str
    conversation: str
    turn: int | None  # index of the turn it was checked against, or None
    reason: str


class Served(msgspec.Struct, frozen=True, kw_only=True):
    """A scripted turn that was played."""

    conversation: str
    turn: int  # index in the conversation; -1 - i for background turn i
    endpoint: str
    stream: bool
    model: str
    failed: bool = False  # the turn's scripted error was played, not its response


def _text(content: Any) -> str:
    """The text of a message ``content``: a string, or text parts joined by newlines."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = [p.get("text") for p in content if isinstance(p, dict)
             and p.get("type") in ("text", "input_text", "output_text")]
    return "\n".join(p for p in parts if isinstance(p, str))


def _items(endpoint: str, req: dict[str, Any]) -> list[dict[str, Any]]:
    key = "input" if endpoint == "responses" else "messages"
    value = req.get(key)
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    return [m for m in value if isinstance(m, dict)] if isinstance(value, list) else []


def last_user_text(endpoint: str, req: dict[str, Any]) -> str | None:
    """Text of the latest user message that has any (tool-result-only ones skipped)."""
    for item in reversed(_items(endpoint, req)):
        if item.get("role") == "user" and (text := _text(item.get("content"))):
            return text
    return None


def trailing_tool_results(endpoint: str, req: dict[str, Any]) -> list[str]:
    """The tool results sent since the last assistant turn, as text."""
    items = _items(endpoint, req)
    if endpoint == "messages":
        last = items[-1] if items else {}
        blocks = last.get("content") if last.get("role") == "user" else None
        return [_text(b.get("content")) for b in blocks or []
                if isinstance(b, dict) and b.get("type") == "tool_result"]
    out = []
    for item in reversed(items):
        if endpoint == "chat.completions" and item.get("role") == "tool":
            out.append(_text(item.get("content")))
        elif endpoint == "responses" and item.get("type") == "function_call_output":
            output = item.get("output")
            out.append(output if isinstance(output, str) else _text(output))
        else:
            break
    return out[::-1]


def mismatch(match: Match | None, endpoint: str, req: dict[str, Any]) -> str | None:
    """Why the request fails ``match``, or None when it matches."""
    if match is None:
        return None
    if match.endpoint is not None and match.endpoint != endpoint:
        return f"endpoint is {endpoint}, expected {match.endpoint}"
    model = req.get("model") if isinstance(req.get("model"), str) else ""
    if match.model_contains is not None and match.model_contains not in model:
        return f"model {model!r} lacks {match.model_contains!r}"
    if match.last_user_contains is not None:
        text = last_user_text(endpoint, req) or ""
        if match.last_user_contains not in text:
            return f"last user text lacks {match.last_user_contains!r} (got {text[:120]!r})"
    if match.tool_result_contains is not None:
        results = trailing_tool_results(endpoint, req)
        if not any(match.tool_result_contains in r for r in results):
            got = "no tool results" if not results else f"{len(results)} tool results"
            return f"no tool result contains {match.tool_result_contains!r} ({got})"
    return None


def _header(headers: Iterable[tuple[str, str]] | Mapping[str, str], name: str) -> str | None:
    items = headers.items() if isinstance(headers, Mapping) else headers
    return next((v for k, v in items if k.lower() == name), None)


class ScriptPlayer:
    """Answer model requests from a script, one turn per request (sans-IO).

    Args:
        script: the validated script.
        log: called with one line per unexpected request (default: stderr).

    Attributes:
        unexpected: every request nothing expected, in order.
        served: every turn played, in order.
    """

    def __init__(self, script: ModelScript, *, log: Callable[[str], None] | None = None) -> None:
        self.script = script
        self.turns = script.conversation_turns()
        self.next_turn = dict.fromkeys(self.turns, 0)
        self.failures = dict.fromkeys(self.turns, 0)  # failures played for each conversation's next turn
        self.unexpected: list[Unexpected] = []
        self.served: list[Served] = []
        self._log = log if log is not None else (lambda line: print(line, file=sys.stderr))
        self._seq = 0

    @property
    def finished(self) -> bool:
        """Every conversation's turns have all been played."""
        return all(self.next_turn[c] == len(t) for c, t in self.turns.items())

    def remaining(self) -> dict[str, int]:
        """Conversation -> turns not yet played."""
        return {c: len(t) - self.next_turn[c] for c, t in self.turns.items()}

    def handle(self, method: str, target: str, headers: Iterable[tuple[str, str]] | Mapping[str, str],
               body: bytes, *, created: int = 0) -> Reply:
        """Answer one HTTP request.

        Args:
            method: the HTTP method.
            target: the request target (path and query).
            headers: request headers, (name, value) pairs or a mapping.
            body: the whole (decoded) request body, bytes.
            created: Unix time stamped into the response, seconds.

        Returns:
            The reply; 4xx in the provider's error shape when nothing expected it.
        """
        self._seq += 1
        path = target.split("?", 1)[0]
        conversation = _header(headers, CONVERSATION_HEADER) or "default"
        anthropic = _header(headers, "anthropic-version") is not None or "/messages" in path
        provider = ANTHROPIC if anthropic else "openai"
        stripped = path.rstrip("/")
        if method == "GET" and (stripped.endswith("/v1/models") or "/v1/models/" in stripped):
            return self._models(stripped, provider)
        if method == "POST" and stripped.endswith("/v1/messages/count_tokens"):
            return json_reply(200, {"input_tokens": max(1, -(-len(body) // 4))})
        kind = classify(method, "", path)
        if kind is not None and kind[1] not in ("messages", "chat.completions", "responses"):
            kind = None  # a cloud provider's path (Vertex AI, Bedrock): not served here
        if kind is None:
            return self._refuse(provider, 404, "not_found_error", method, path, conversation,
                                None, f"no route for {method} {path}")
        provider, endpoint = kind
        try:
            req = msgspec.json.decode(body)
        except msgspec.DecodeError as e:
            req = e
        if not isinstance(req, dict):
            return self._refuse(provider, 400, "invalid_request_error", method, path, conversation,
                                None, "request body is not a JSON object")
        return self.respond(endpoint, req, conversation=conversation, created=created,
                            method=method, path=path)

    def respond(self, endpoint: str, req: dict[str, Any], *, conversation: str = "default",
                created: int = 0, method: str = "POST", path: str = "") -> Reply:
        """Play the turn that answers a decoded model request.

        Args:
            endpoint: ``"messages"``, ``"chat.completions"`` or ``"responses"``.
            req: the request JSON object.
            conversation: which conversation's turn pointer to use.
            created: Unix time stamped into the response, seconds.
            method: the HTTP method, for the log.
            path: the request path, for the log (default the API's own).

        Returns:
            The scripted reply, or a 400 in the provider's error shape.
        """
        provider = ANTHROPIC if endpoint == "messages" else "openai"
        path = path or {"messages": "/v1/messages", "chat.completions": "/v1/chat/completions",
                        "responses": "/v1/responses"}[endpoint]
        for i, turn in enumerate(self.script.background):
            if mismatch(turn.match, endpoint, req) is None:
                return self._play(turn, -1 - i, endpoint, req, conversation, created,
                                  failing=turn.error is not None)
        turns = self.turns.get(conversation)
        if turns is None:
            return self._refuse(provider, 400, "invalid_request_error", method, path, conversation,
                                None, f"unknown conversation {conversation!r}")
        index = self.next_turn[conversation]
        if index >= len(turns):
            return self._refuse(provider, 400, "invalid_request_error", method, path, conversation,
                                index, f"script exhausted: all {len(turns)} turns played")
        turn = turns[index]
        if (why := mismatch(turn.match, endpoint, req)) is not None:
            return self._refuse(provider, 400, "invalid_request_error", method, path, conversation,
                                index, f"turn {index} does not match: {why}")
        failing = turn.error is not None and self.failures[conversation] < turn.error.times
        if failing:
            self.failures[conversation] += 1
        if not failing or (not turn.responds and self.failures[conversation] == turn.error.times):
            self.next_turn[conversation] = index + 1
            self.failures[conversation] = 0
        return self._play(turn, index, endpoint, req, conversation, created, failing=failing)

    def _play(self, turn: Turn, index: int, endpoint: str, req: dict[str, Any],
              conversation: str, created: int, *, failing: bool) -> Reply:
        stream = req.get("stream") is True
        requested = req.get("model")
        model = turn.model or (requested if isinstance(requested, str) and requested else
                               self.script.model_ids()[0])
        self.served.append(Served(conversation=conversation, turn=index, endpoint=endpoint,
                                  stream=stream, model=model, failed=failing))
        if failing:
            assert turn.error is not None
            return render_error(endpoint, turn.error, model=model, stream=stream, seq=self._seq, created=created)
        options = req.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        return render_turn(endpoint, turn, model=model, stream=stream, include_usage=include_usage,
                           seq=self._seq, created=created)

    def _refuse(self, provider: str, status: int, kind: str, method: str, path: str,
                conversation: str, turn: int | None, reason: str) -> Reply:
        self.unexpected.append(Unexpected(method=method, path=path, conversation=conversation,
                                          turn=turn, reason=reason))
        self._log(f"caisson model: unexpected {method} {path} [{conversation}]: {reason}")
        return error_reply(provider, status, kind, f"caisson scripted model: {reason}",
                           f"req_caisson{self._seq:06d}")

    def _models(self, path: str, provider: str) -> Reply:
        entries = [{"id": m, "object": "model", "type": "model", "display_name": m,
                    "created": 0, "created_at": "1970-01-01T00:00:00Z", "owned_by": "caisson"}
                   for m in self.script.model_ids()]
        if not path.endswith("/v1/models"):
            wanted = path.rsplit("/v1/models/", 1)[1]
            found = [e for e in entries if e["id"] == wanted]
            if found:
                return json_reply(200, found[0])
            return self._refuse(provider, 404, "not_found_error", "GET", path, "-", None,
                                f"model {wanted!r} is not in the script")
        return json_reply(200, {"object": "list", "data": entries, "has_more": False,
                                "first_id": entries[0]["id"], "last_id": entries[-1]["id"]})


# --- the trio HTTP/1.1 server ---------------------------------------------------------


async def _next_event(conn: h11.Connection, stream: trio.abc.Stream) -> Any:
    while (event := conn.next_event()) is h11.NEED_DATA:
        if conn.they_are_waiting_for_100_continue:
            await stream.send_all(conn.send(h11.InformationalResponse(status_code=100, headers=[])))
        conn.receive_data(await stream.receive_some(65536))
    return event


async def _send(conn: h11.Connection, stream: trio.abc.Stream, reply: Reply) -> None:
    headers = [(k.encode(), v.encode()) for k, v in reply.headers]
    if reply.events is None:
        headers.append((b"content-length", str(len(reply.body)).encode()))
    headers.append((b"server", b"caisson-model"))
    await stream.send_all(conn.send(h11.Response(status_code=reply.status, headers=headers)))
    for chunk in reply.events if reply.events is not None else [reply.body]:
        await stream.send_all(conn.send(h11.Data(data=chunk)))
    if reply.cut:  # no last chunk: the caller closes the connection mid-body
        conn.send_failed()
        return
    await stream.send_all(conn.send(h11.EndOfMessage()))


async def _serve_connection(player: ScriptPlayer, stream: trio.abc.Stream) -> None:
    """One connection: requests in order until either side closes (keep-alive)."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=64 << 10)
    try:
        while True:
            event = await _next_event(conn, stream)
            if not isinstance(event, h11.Request):
                return  # ConnectionClosed
            body = bytearray()
            while isinstance(part := await _next_event(conn, stream), h11.Data):
                body += part.data
                if len(body) > MAX_REQUEST_BYTES:
                    reply = error_reply("openai", 413, "request_too_large",
                                        f"request body over {MAX_REQUEST_BYTES} bytes", "-")
                    await _send(conn, stream, reply)
                    return
            headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in event.headers]
            reply = player.handle(event.method.decode("ascii", "replace"),
                                  event.target.decode("ascii", "replace"), headers, bytes(body),
                                  created=int(time.time()))
            await _send(conn, stream, reply)
            if conn.our_state in (h11.MUST_CLOSE, h11.ERROR):  # ERROR: a cut reply
                return
            conn.start_next_cycle()
    except h11.RemoteProtocolError as e:
        if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            reply = error_reply("openai", e.error_status_hint, "invalid_request_error", str(e), "-")
            try:
                await _send(conn, stream, reply)
            except (trio.BrokenResourceError, h11.LocalProtocolError):
                pass
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        await trio.aclose_forcefully(stream)


async def open_model_listeners(host: str = "127.0.0.1", port: int = 0, *,
                               ssl_context: ssl.SSLContext | None = None,
                               ) -> tuple[list[trio.abc.Listener[Any]], tuple[str, int]]:
    """Bind the listening sockets (before serving, so a bind error is plain `OSError`).

    Args:
        host: address to bind.
        port: TCP port; 0 picks a free one.
        ssl_context: wrap every listener in TLS with this server context.

    Returns:
        The listeners and the first one's bound ``(host, port)``.

    Raises:
        OSError: the address cannot be bound (in use, not local).
    """
    listeners: list[Any] = await trio.open_tcp_listeners(port, host=host)
    bound = listeners[0].socket.getsockname()[:2]
    if ssl_context is not None:
        listeners = [trio.SSLListener(lst, ssl_context, https_compatible=True) for lst in listeners]
    return listeners, (bound[0], bound[1])


async def serve_model(player: ScriptPlayer, host: str = "127.0.0.1", port: int = 0, *,
                      ssl_context: ssl.SSLContext | None = None,
                      listeners: list[trio.abc.Listener[Any]] | None = None,
                      task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
                      ) -> None:
    """Serve ``player`` over HTTP/1.1 until cancelled.

    Args:
        player: the script player (shared by every connection).
        host: address to bind (ignored with ``listeners``).
        port: TCP port; 0 picks a free one (ignored with ``listeners``).
        ssl_context: serve HTTPS with this context (ignored with ``listeners``).
        listeners: already bound listeners, from `open_model_listeners`.
        task_status: receives the bound ``(host, port)`` (with ``nursery.start``).
    """
    if listeners is None:
        listeners, bound = await open_model_listeners(host, port, ssl_context=ssl_context)
    else:
        first = listeners[0]
        sock = (first.transport_listener if isinstance(first, trio.SSLListener) else first).socket
        bound = tuple(sock.getsockname()[:2])
    task_status.started(bound)
    await trio.serve_listeners(partial(_serve_connection, player), listeners)


def server_ssl_context(cert: str, key: str) -> ssl.SSLContext:
    """A TLS server context from PEM certificate-chain and key files."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context
