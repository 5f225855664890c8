"""The agent's own account (the transcript witness): tools, calls, answers, usage, errors."""

from __future__ import annotations

from typing import Any, Literal

from ledger.events._base import ToolOutcome, ToolSurface, _Event
from ledger.events._network import LlmUsage

__all__ = [
    "AgentAnswer", "AgentCompaction", "AgentError", "AgentModelSwitch", "AgentRetry", "AgentSessionFile",
    "AgentToolCall", "AgentToolResult", "AgentTools", "AgentUsage",
]


class AgentTools(_Event, tag="agent.tools", frozen=True, kw_only=True):
    """The tool surface an agent reported about itself (e.g. Claude Code's init event)."""

    agent: str  # adapter name: claude-code | codex | ...
    surface: ToolSurface
    tools: list[str] = []
    model: str | None = None


class AgentToolCall(_Event, tag="agent.tool_call", frozen=True, kw_only=True):
    """A tool call in the agent's own transcript."""

    agent: str
    call_id: str
    tool: str
    input: dict[str, Any] = {}  # as the model sent it (secrets are not expected here)


class AgentToolResult(_Event, tag="agent.tool_result", frozen=True, kw_only=True):
    """What became of a tool call: executed, refused by permission, errored, or unknown."""

    agent: str
    call_id: str
    tool: str = ""
    outcome: ToolOutcome
    excerpt: str = ""  # the start of the result text, for humans


class AgentAnswer(_Event, tag="agent.answer", frozen=True, kw_only=True):
    """The agent's final answer as its transcript states it."""

    agent: str
    text: str
    answer_sha256: str | None = None  # blob of the full text when it is long


class AgentUsage(_Event, tag="agent.usage", frozen=True, kw_only=True):
    """First-party usage and cost as the agent reports them (never a reconstruction)."""

    agent: str
    token_source: str  # where the counts come from, e.g. "claude-code result.usage"
    usage: dict[str, Any] | None = None  # as reported; None when the agent reported none
    normalized: LlmUsage | None = None
    cost_usd: float | None = None  # as reported
    by_model: dict[str, Any] = {}  # e.g. Claude Code's modelUsage, as reported
    usage_missing_reason: str | None = None  # why normalized is None (incomplete transcript, unknown shape, ...)
    incomplete: str | None = None  # why the transcript is incomplete: no terminal event, a last line cut
    parser: str = ""  # the transcript parser that read it, "name@version"
    # why cost_usd is None although the agent reported a cost field: a placeholder (OpenCode's 0
    # for a provider without prices, mini-swe-agent's 0.0 under ignore_errors, Claude Code's
    # costBasis "unknown": a guess at another model's price) is not a figure (schema 14)
    cost_missing_reason: str | None = None


class AgentError(_Event, tag="agent.error", frozen=True, kw_only=True):
    """An error the agent or its provider reported in the agent's own transcript (schema
    14): Claude Code's ``is_error`` result and its ``<synthetic>`` API-error message, Codex's
    ``turn.failed`` and ``error`` lines, OpenCode's ``error`` line, Copilot's
    ``session.error``, mini-swe-agent's exception exit. The agent's word, not evidence:
    detectors weigh it against what the proxy witness saw."""

    agent: str
    said: str  # where the transcript says it, e.g. "result.is_error", "turn.failed", "session.error"
    status: int | None = None  # the provider's HTTP status, as reported (e.g. 401, 529)
    code: str | None = None  # the agent's or provider's error code, e.g. "oauth_org_not_allowed", "APIError"
    message: str = ""  # as reported (cut to 2,000 characters)
    terminal: bool = True  # the session ended on it; False: it went on (e.g. a context overflow it compacted)
    # who failed, as the parser reads the CLI's vocabulary: "provider" (the model API failed or
    # refused: auth, quota, rate limit, overload, an HTTP error, a cut stream), "agent" (the CLI
    # itself: a crash, a setup failure), "limit" (a bound the run set: turns, budget, time,
    # output length; an outcome, not a failure); "" when the parser cannot tell
    cause: Literal["provider", "agent", "limit", ""] = ""


class AgentRetry(_Event, tag="agent.retry", frozen=True, kw_only=True):
    """A model call the agent retried, as its transcript says (schema 14): Claude Code's
    ``system``/``api_retry``, Codex's ``Reconnecting... N/M``, Copilot's turn retries."""

    agent: str
    said: str  # where, e.g. "system.api_retry", "error.reconnecting", "assistant.turn_retry"
    attempt: int | None = None  # which retry this is, 1-based, as reported
    max_attempts: int | None = None  # the agent's retry cap, as reported
    status: int | None = None  # the HTTP status that caused it, when reported
    delay_ns: int | None = None  # how long the agent waits before it, ns
    code: str | None = None  # the reported cause, e.g. "overloaded", "rate_limit"
    message: str = ""


class AgentCompaction(_Event, tag="agent.compaction", frozen=True, kw_only=True):
    """The agent compacted its context, as its transcript says (schema 14): Claude Code's
    ``system``/``compact_boundary``. A silent stretch before it is the agent's own work."""

    agent: str
    trigger: str | None = None  # "auto" | "manual", as reported
    tokens_before: int | None = None  # context tokens before, as reported (pre_tokens)
    tokens_after: int | None = None  # context tokens after, as reported (post_tokens)
    duration_ns: int | None = None  # how long it took, as reported


class AgentModelSwitch(_Event, tag="agent.model_switch", frozen=True, kw_only=True):
    """The agent answered with another model than it was asked to use, as its transcript
    says (schema 14): Claude Code's ``system``/``model_fallback``, Codex's ``model rerouted``."""

    agent: str
    said: str  # where, e.g. "system.model_fallback", "item.error.model_rerouted"
    requested: str | None = None  # the model the session was using
    used: str | None = None  # the model it switched to
    trigger: str | None = None  # why, as reported (e.g. "overloaded", "HighRiskCyberActivity")
    message: str = ""


class AgentSessionFile(_Event, tag="agent.session_file", frozen=True, kw_only=True):
    """A session or usage file the agent wrote into its config home, collected by the
    recorder when the agent exited (caisson/run/sessionfiles.py); its bytes are a blob."""

    agent: str  # the agent whose file layout the path matches: claude-code | codex
    path: str  # relative to the chamber's config home, e.g. ".claude/projects/-work-sandbox/<session>.jsonl"
    size_bytes: int  # the file's size when collected, bytes
    sha256: str | None = None  # hex digest of its bytes; None when they were not read (skipped)
    # The blob holding them (blobs are content-addressed: equal to sha256); None: not stored.
    blob_sha256: str | None = None
    skipped: str | None = None  # why it was not stored: over the per-file or total cap, not a regular file
