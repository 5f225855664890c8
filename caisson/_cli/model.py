"""`caisson model serve|check --script FILE`: the scripted model endpoint.

``serve`` answers Anthropic Messages, OpenAI Chat Completions and Responses requests
from the script (see `caisson.model.server`), prints the bound address on stdout, and
runs until Ctrl-C or SIGTERM; then it prints what was played. ``check`` only validates the script.

Exit codes: 0 ok (``serve``: every turn played and nothing unexpected); 1 ``serve``:
turns left unplayed or unexpected requests (a finding for a preflight); 2 usage or I/O
error (invalid script with file and field, port in use, bad TLS files).
"""

from __future__ import annotations

import argparse
import signal
import sys
from functools import partial
from pathlib import Path

from caisson.errors import UsageError

__all__ = ["register", "run_check", "run_serve"]


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `model` command with its `serve` and `check` subcommands."""
    parser = sub.add_parser("model", help="a scripted model endpoint for agents in the chamber")
    verbs = parser.add_subparsers(dest="model_command", metavar="{serve,check}")
    verbs.required = True
    serve = verbs.add_parser("serve", help="serve a model script over HTTP(S) until Ctrl-C")
    serve.add_argument("--script", required=True, type=Path, metavar="FILE")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=0, help="TCP port; 0 picks a free one")
    serve.add_argument("--tls-cert", type=Path, metavar="PEM", help="serve HTTPS with this chain")
    serve.add_argument("--tls-key", type=Path, metavar="PEM", help="the certificate's key")
    serve.set_defaults(func=run_serve)
    check = verbs.add_parser("check", help="validate a model script and summarise it")
    check.add_argument("--script", required=True, type=Path, metavar="FILE")
    check.set_defaults(func=run_check)


def run_check(args: argparse.Namespace) -> int:
    from caisson.model import load_model_script

    script = load_model_script(args.script)
    for name, turns in script.conversation_turns().items():
        print(f"{name}: {len(turns)} turns")
    print(f"background: {len(script.background)} turns; models: {', '.join(script.model_ids())}")
    return 0


def run_serve(args: argparse.Namespace) -> int:
    import trio

    from caisson.model import ScriptPlayer, load_model_script, open_model_listeners, serve_model, server_ssl_context

    script = load_model_script(args.script)
    if (args.tls_cert is None) != (args.tls_key is None):
        raise UsageError("give both --tls-cert and --tls-key, or neither")
    context = None
    if args.tls_cert is not None:
        try:
            context = server_ssl_context(str(args.tls_cert), str(args.tls_key))
        except (OSError, ValueError) as e:
            raise UsageError(f"cannot load the TLS certificate or key: {e}") from e
    player = ScriptPlayer(script)
    scheme = "https" if context is not None else "http"

    async def main() -> None:
        try:
            listeners, (host, port) = await open_model_listeners(args.host, args.port,
                                                                 ssl_context=context)
        except OSError as e:
            raise UsageError(f"cannot listen on {args.host}:{args.port}: {e.strerror or e}") from e
        shown = f"[{host}]" if ":" in host else host
        print(f"caisson model: serving {args.script} on {scheme}://{shown}:{port}", flush=True)
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(partial(serve_model, player, listeners=listeners))
                async for _ in signals:
                    nursery.cancel_scope.cancel()
                    break

    trio.run(main)
    left = {c: n for c, n in player.remaining().items() if n}
    print(f"caisson model: played {len(player.served)} turns; unplayed {left or 'none'}; "
          f"{len(player.unexpected)} unexpected requests", file=sys.stderr)
    return 0 if not left and not player.unexpected else 1
