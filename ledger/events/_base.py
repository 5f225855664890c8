"""The base of every event, and the closed vocabularies (``Literal`` types) events share."""

from __future__ import annotations

from typing import Literal

import msgspec

__all__ = [
    "Category", "Elicitation", "FileAccess", "Gating", "LlmEndpoint", "NetworkMode", "Provider", "RunStatus",
    "ToolOutcome", "ToolSurface",
]

RunStatus = Literal["completed", "timeout", "interrupted", "infra_failure"]
"""How a run ended (``run.ended.status``)."""

Category = Literal["answer_key", "telemetry", "agent_instructions", "published_reports", "grading",
                   "agent_config"]
"""The exclusion categories: what a sandbox may withhold, and why. ``agent_config`` (files the
agent reads as its own configuration) is also withheld by default (`caisson.chamber.agent_config`)."""

FileAccess = Literal["r", "w", "rw"]
"""How a file was opened: read only, write only, or both (from ``O_RDONLY``/``O_WRONLY``/``O_RDWR``)."""

ToolOutcome = Literal["executed", "refused", "errored", "unknown"]
"""What became of an agent's tool call; ``unknown`` counts as executed."""

ToolSurface = Literal["init", "request"]
"""Where an agent's tool list comes from: what it reports (``init``), what it sends the model (``request``)."""

Provider = Literal["anthropic", "openai", "vertex", "azure", "bedrock", "gemini", "code_assist"]
"""The LLM API a model call went to (``llm.call.provider``): Anthropic, OpenAI, Google
Vertex AI (Anthropic and Gemini models), Azure OpenAI, AWS Bedrock (schema 7 added these
three), the Gemini API of Google AI Studio and Google's Code Assist (schema 14)."""

LlmEndpoint = Literal["messages", "chat.completions", "responses", "rawPredict", "streamRawPredict", "invoke",
                      "invoke-with-response-stream", "generateContent", "streamGenerateContent"]
"""The API endpoint of a model call: Anthropic Messages, OpenAI Chat Completions or
Responses; Vertex AI's ``rawPredict`` / ``streamRawPredict`` and Bedrock's ``invoke`` /
``invoke-with-response-stream`` (Anthropic Messages bodies; schema 7); the Gemini API's
``generateContent`` / ``streamGenerateContent`` (schema 14)."""

Gating = Literal["enforced", "not_enforced", "ungated"]
"""An agent's gating capability (``run.started.agent.gating``): its flags restrict tools
(verified), could restrict them (no verified mapping yet), or cannot."""

Elicitation = Literal["stream", "answer_file"]
"""How an adapter gets the agent's answer back (``run.started.agent.elicitation``): ``stream``
(a structured transcript on stdout as the agent works: Claude Code's stream-json, Codex's
JSON lines) or ``answer_file`` (a file the agent writes, printed once it exits:
mini-swe-agent's trajectory)."""

NetworkMode = Literal["none", "witnessed"]
"""A chamber's network (``run.started.limits.network``): ``none``, no network at all;
``witnessed``, its only way out is through the network witnesses (proxy, resolver, capture)."""


class _Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", omit_defaults=True):
    """Base of every event; ``kind`` is the tag, set by each subclass."""
