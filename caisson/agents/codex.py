"""Codex CLI: invocation, gating, and a sans-IO transcript parser.

Invocation (verified against codex-cli 0.171.0 in the agent image): ``codex exec --json
--skip-git-repo-check PROMPT`` runs one task and prints JSON lines. It reaches a model
only through a provider configured with ``-c``; the built-in OpenAI provider ignores
``OPENAI_BASE_URL`` and the ``chat`` wire API is gone, so the adapter names a provider
``caisson`` with ``wire_api = "responses"`` at ``https://api.openai.com/v1``, which the
chamber reaches through the proxy witness (the scenario's egress maps it to an endpoint).

Gating is **ungated**: Codex has no per-tool allow or deny list, only its own sandbox
and approval policy, and its sandbox cannot engage in the chamber (bubblewrap cannot
create namespaces under Docker's default seccomp profile). It runs with
``--dangerously-bypass-approvals-and-sandbox``; the chamber is the sandbox. An arm that
withholds something cannot be run with it (`caisson.run.record` refuses the combination).

Transcript: ``item.started``/``item.completed`` lines whose ``item`` is an
``agent_message`` (text), a ``command_execution`` (command, exit code, status), a
``file_change`` and others; ``turn.completed`` carries that turn's ``usage``
(``input_tokens`` including ``cached_input_tokens``, ``output_tokens`` including
``reasoning_output_tokens``: OpenAI's breakdown semantics).
"""

from __future__ import annotations

from typing import Any

from caisson.agents._lines import JsonLinesParser
from collectors.llm import normalize_usage
from ledger.events import AgentAnswer, AgentToolCall, AgentToolResult, AgentUsage, Gating

__all__ = ["NAME", "GATING", "STATIC_TOOLS", "command", "TranscriptParser"]

NAME = "codex"
GATING: Gating = "ungated"
STATIC_TOOLS = ("exec_command", "write_stdin", "apply_patch", "view_image", "web_search", "request_user_input",
                "get_goal", "create_goal", "update_goal")
"""Tools codex-cli 0.171.0 sends the model (the request's tool list is its only surface)."""
_TOOL_OF_ITEM = {"command_execution": "exec_command", "file_change": "apply_patch", "web_search": "web_search",
                 "mcp_tool_call": "mcp"}
PROVIDER = ('model_providers.caisson={name="caisson",base_url="https://api.openai.com/v1",'
            'env_key="OPENAI_API_KEY",wire_api="responses"}')


def command(prompt: str, *, allowed: list[str], denied: list[str], model: str | None = None,
            max_turns: int | None = None) -> list[str]:
    """The argv of one ``codex exec`` task (``allowed``/``denied`` cannot be honoured: ungated)."""
    argv = ["codex", "exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
            "-c", 'model_provider="caisson"', "-c", PROVIDER]
    if model:
        argv += ["-m", model]
    return [*argv, prompt]


class TranscriptParser(JsonLinesParser):
    """Sans-IO: `feed` stdout bytes, `close`, then `events()` (same protocol as Claude Code's)."""

    def __init__(self) -> None:
        super().__init__()
        self._open: dict[str, str] = {}  # item id -> tool, started and not completed
        self._answer: str | None = None
        self._usage: dict[str, int] | None = None

    def on_close(self) -> None:
        for call_id, tool in self._open.items():
            self.emit(AgentToolResult(agent=NAME, call_id=call_id, tool=tool, outcome="unknown"))
        if self._answer is not None:
            self.emit(AgentAnswer(agent=NAME, text=self._answer))
        usage, view = self._usage, None
        if usage is not None:
            as_responses = {"input_tokens": usage.get("input_tokens", 0),
                            "input_tokens_details": {"cached_tokens": usage.get("cached_input_tokens", 0)},
                            "output_tokens": usage.get("output_tokens", 0),
                            "output_tokens_details": {"reasoning_tokens": usage.get("reasoning_output_tokens", 0)}}
            view = normalize_usage("responses", as_responses, streamed=False)[0]
        self.emit(AgentUsage(agent=NAME, token_source="codex turn.completed usage (summed over turns)",
                             usage=usage, normalized=view))

    def on_object(self, obj: dict[str, Any]) -> None:
        kind, item = obj.get("type"), obj.get("item") if isinstance(obj.get("item"), dict) else {}
        tool = _TOOL_OF_ITEM.get(item.get("type", ""))
        call_id = str(item.get("id", ""))
        shown = {k: v for k, v in item.items() if k in ("command", "changes", "query")}
        if kind == "item.started" and tool:
            self._open[call_id] = tool
            self.emit(AgentToolCall(agent=NAME, call_id=call_id, tool=tool, input=shown))
        elif kind == "item.completed" and tool:
            if self._open.pop(call_id, None) is None:
                self.emit(AgentToolCall(agent=NAME, call_id=call_id, tool=tool, input=shown))
            status = item.get("status")
            outcome = ("refused" if status in ("declined", "rejected") else
                       "errored" if status == "failed" else "executed" if status == "completed" else "unknown")
            self.emit(AgentToolResult(agent=NAME, call_id=call_id, tool=tool, outcome=outcome,
                                      excerpt=str(item.get("aggregated_output", ""))[:300]))
        elif kind == "item.completed" and item.get("type") == "agent_message":
            self._answer = str(item.get("text", ""))
        elif kind == "turn.completed" and isinstance(obj.get("usage"), dict):
            total = self._usage or {}
            for key, value in obj["usage"].items():
                if isinstance(value, int):
                    total[key] = total.get(key, 0) + value
            self._usage = total
