"""The scripted model endpoint: model turns played in the providers' real API shapes.

`caisson.model.script` reads a script (TOML), `caisson.model.server` serves it (Anthropic
Messages, OpenAI Chat Completions and Responses, streamed or not), and `scripted_model`
runs it as its own process for a test, a demo or a preflight. `render_turn` renders one
turn's response as the server sends it (synthetic cells keep such bodies).
"""

from caisson.model._process import scripted_model
from caisson.model._render import Reply, render_turn
from caisson.model.script import ModelScript, Turn, Usage, load_model_script, parse_model_script
from caisson.model.server import ScriptPlayer, open_model_listeners, serve_model, server_ssl_context

__all__ = [
    "ModelScript",
    "Reply",
    "ScriptPlayer",
    "Turn",
    "Usage",
    "load_model_script",
    "open_model_listeners",
    "parse_model_script",
    "render_turn",
    "scripted_model",
    "serve_model",
    "server_ssl_context",
]
