"""The agents' own session files, read for first-party usage (sans-IO).

An agent CLI keeps a session log in its config home besides what it prints: the recorder
collects these files as blobs when the agent exits (`SESSION_FILE_GLOBS`,
caisson/run/sessionfiles.py), and `caisson study backfill` reads them here, offline, for a
cell whose live figure is missing or only proxy-observed. The layouts were read from the
real CLIs of the agent image on the scripted model (golden files in
tests/caisson/test_sessionfiles/):

- **Claude Code 2.1.328** writes ``$CLAUDE_CONFIG_DIR/projects/<cwd with / as ->/<session
  id>.jsonl``: one JSON object per line. Each ``assistant`` line is one content block of
  a model response and carries that response's ``message.usage`` (the Anthropic Messages
  usage object: input, cache-write and cache-read are separate addends); a response of
  two blocks is two lines with the same ``message.id``, so usage is kept once per
  ``message.id`` (the last line's, as a streamed count only grows) and summed over
  responses. The session ends with a ``cost-state`` line (``totalCostUSD``,
  ``modelUsage``), the terminal event: a session file without it (or with a response
  after it), or any file whose last line is cut, is incomplete and gives no figure.
- **Codex 0.171.0** writes ``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<thread
  id>.jsonl``: ``session_meta`` first (its ``payload.id`` is the thread), ``event_msg``
  lines whose ``payload.type`` is ``token_count`` carry ``info.total_token_usage``, the
  thread's running total (OpenAI breakdown semantics: cached inside input, reasoning
  inside output), so the last one counts and none is summed; ``task_complete`` ends a
  task (the terminal event: a ``task_started`` after it makes the file incomplete again).

Several files of one agent are combined by `session_usage`: Claude Code responses by
``message.id`` across files (a resumed session copies its history), Codex threads summed
by thread id (the same thread twice gives no figure).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from caisson.agents._lines import JsonLinesParser
from caisson._glob import glob_to_regex
from collectors.llm import normalize_usage
from ledger.events import AgentUsage, LlmUsage

__all__ = ["SESSION_FILE_GLOBS", "SESSION_PARSERS", "ClaudeSessionParser", "CodexRolloutParser", "agent_of_file",
           "session_usage"]

SESSION_FILE_GLOBS: dict[str, tuple[str, ...]] = {
    "claude-code": (".claude/projects/**/*.jsonl",),
    "codex": (".codex/sessions/**/rollout-*.jsonl",),
}
"""Agent -> globs (relative to the chamber's config home, `caisson._glob.glob_to_regex`
syntax) of the session files it writes there (``CLAUDE_CONFIG_DIR`` and ``CODEX_HOME``
point inside the config home: caisson/chamber/envpin.py)."""


def agent_of_file(path: str) -> str | None:
    """The agent whose session-file layout ``path`` (relative to the config home) matches, or None."""
    for agent, globs in SESSION_FILE_GLOBS.items():
        if any(glob_to_regex(g).fullmatch(path) for g in globs):
            return agent
    return None


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class ClaudeSessionParser(JsonLinesParser):
    """Sans-IO reader of one Claude Code session file: `feed` bytes, `close`, then read
    `messages`, `cost_usd`, `by_model` and `incomplete` (it emits only ``witness.raw``
    for lines that are not JSON objects).

    Attributes:
        messages: ``message.id`` -> its usage object as reported (the last line's).
        sessions: the ``sessionId`` values seen.
    """

    PARSER = "claude-code.session@1"
    TERMINAL = "cost-state"

    def __init__(self) -> None:
        super().__init__()
        self.messages: dict[str, dict[str, Any]] = {}
        self.sessions: set[str] = set()
        self.cost_usd: float | None = None
        self.by_model: dict[str, Any] = {}

    def on_object(self, obj: dict[str, Any]) -> bool:
        if isinstance(obj.get("sessionId"), str):
            self.sessions.add(obj["sessionId"])
        kind = obj.get("type")
        if kind == "assistant":
            self.terminal = False  # a response after the costs were written: the session went on
            message = obj.get("message") if isinstance(obj.get("message"), dict) else {}
            usage = message.get("usage")
            key = message.get("id") or obj.get("requestId") or obj.get("uuid")
            if isinstance(usage, dict) and isinstance(key, str):
                self.messages[key] = usage
        elif kind == "cost-state":
            self.terminal = True
            cost = obj.get("totalCostUSD")
            self.cost_usd = float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) else None
            self.by_model = obj.get("modelUsage") if isinstance(obj.get("modelUsage"), dict) else {}
        return True  # every other line type (attachments, api requests, ...) is known and carries no usage


class CodexRolloutParser(JsonLinesParser):
    """Sans-IO reader of one Codex rollout file: `feed`, `close`, then read `thread`,
    `totals` (every ``token_count.info.total_token_usage`` in order) and `incomplete`."""

    PARSER = "codex.rollout@1"
    TERMINAL = "task_complete"

    def __init__(self) -> None:
        super().__init__()
        self.thread: str | None = None
        self.totals: list[dict[str, Any]] = []

    def on_object(self, obj: dict[str, Any]) -> bool:
        payload = obj.get("payload") if isinstance(obj.get("payload"), dict) else {}
        kind = obj.get("type")
        if kind == "session_meta" and isinstance(payload.get("id"), str):
            self.thread = payload["id"]
        elif kind == "event_msg" and payload.get("type") == "token_count":
            info = payload.get("info") if isinstance(payload.get("info"), dict) else {}
            if isinstance(info.get("total_token_usage"), dict):
                self.totals.append(info["total_token_usage"])
        elif kind == "event_msg" and payload.get("type") in ("task_started", "task_complete"):
            self.terminal = payload["type"] == "task_complete"  # the last task decides
        return True


SESSION_PARSERS: dict[str, type[JsonLinesParser]] = {"claude-code": ClaudeSessionParser, "codex": CodexRolloutParser}
"""Agent -> its session-file parser."""

_SOURCES = {"claude-code": "claude-code session files (messages[].usage)",
            "codex": "codex rollout files (token_count.total_token_usage)"}


def _null(agent: str, reason: str) -> AgentUsage:
    return AgentUsage(agent=agent, token_source=_SOURCES.get(agent, f"{agent} session files"),
                      usage_missing_reason=reason, parser=SESSION_PARSERS[agent].PARSER if agent in SESSION_PARSERS
                      else "")


def _sum(usages: list[dict[str, Any]]) -> dict[str, Any]:
    """Sum the integer counts of several usage objects, key by key (a count one object lacks
    stays out of that key: never a 0 in its place)."""
    out: dict[str, Any] = {}
    for key in sorted({k for u in usages for k, v in u.items() if _int(v)}):
        values = [u.get(key) for u in usages]
        out[key] = sum(values) if all(_int(v) for v in values) else None  # type: ignore[arg-type]
    return out


def _is_session(path: str) -> bool:
    """A session's own file (``projects/<project>/<session>.jsonl``), which must end with
    its ``cost-state``; files deeper down (a subagent's transcript, where a release keeps
    one: not seen in the recordings yet) only must not be cut."""
    return len(path.split("/")) == 4


def _claude(files: Sequence[tuple[str, bytes]]) -> AgentUsage:
    messages: dict[str, dict[str, Any]] = {}
    costs: list[float | None] = []
    by_model: dict[str, Any] = {}
    for path, data in files:
        parser = ClaudeSessionParser()
        parser.feed(data)
        parser.close()
        if parser.cut_line is not None or (_is_session(path) and not parser.terminal):
            return _null("claude-code", f"{path}: {parser.incomplete}")
        messages.update(parser.messages)
        costs.append(parser.cost_usd)
        by_model.update(parser.by_model)
    if not messages:
        return _null("claude-code", "no assistant message with usage in the session files")
    views: list[LlmUsage] = []
    for key, usage in messages.items():
        view, problem = normalize_usage("messages", usage, streamed=False)
        if view is None or view.total_tokens is None:
            return _null("claude-code", f"message {key}: usage not normalisable: {problem}")
        views.append(view)
    total = LlmUsage(input_tokens=sum(v.input_tokens or 0 for v in views),
                     output_tokens=sum(v.output_tokens or 0 for v in views),
                     total_tokens=sum(v.total_tokens or 0 for v in views),
                     rule=f"{ClaudeSessionParser.PARSER}: sum over {len(views)} responses of {views[0].rule}",
                     sources={"usage": f"{len(views)} distinct message.id (the last line of each)"})
    return AgentUsage(agent="claude-code", token_source=_SOURCES["claude-code"], usage=_sum(list(messages.values())),
                      normalized=total, cost_usd=None if None in costs else sum(costs),  # type: ignore[arg-type]
                      by_model=by_model,
                      parser=ClaudeSessionParser.PARSER)


def _as_responses(usage: dict[str, Any]) -> dict[str, Any]:
    return {"input_tokens": usage.get("input_tokens"),
            "input_tokens_details": {"cached_tokens": usage.get("cached_input_tokens")},
            "output_tokens": usage.get("output_tokens"),
            "output_tokens_details": {"reasoning_tokens": usage.get("reasoning_output_tokens")}}


def _codex(files: Sequence[tuple[str, bytes]]) -> AgentUsage:
    threads: dict[str, dict[str, Any]] = {}
    for path, data in files:
        parser = CodexRolloutParser()
        parser.feed(data)
        parser.close()
        if parser.incomplete:
            return _null("codex", f"{path}: {parser.incomplete}")
        if not parser.totals:
            return _null("codex", f"{path}: no token_count event")
        thread = parser.thread or path
        if thread in threads:
            return _null("codex", f"thread {thread} in two rollout files: not summed")
        for key in {k for t in parser.totals for k, v in t.items() if _int(v)}:
            values = [t.get(key) for t in parser.totals]
            if any(_int(a) and _int(b) and b < a for a, b in zip(values, values[1:])):
                return _null("codex", f"{path}: total_token_usage.{key} decreases ({values}): not a running total")
        threads[thread] = parser.totals[-1]
    usage = _sum(list(threads.values()))
    view, problem = normalize_usage("responses", _as_responses(usage), streamed=False)
    if view is None or view.total_tokens is None:
        return _null("codex", f"usage not normalisable: {problem}")
    view = msgspec.structs.replace(view, sources={"usage": f"the last token_count of {len(threads)} thread(s)"})
    return AgentUsage(agent="codex", token_source=_SOURCES["codex"], usage=usage, normalized=view,
                      parser=CodexRolloutParser.PARSER)


def session_usage(files: Sequence[tuple[str, bytes]]) -> AgentUsage | None:
    """First-party usage from an agent's collected session files (pure).

    Args:
        files: (path relative to the config home, bytes) of each collected file.

    Returns:
        None when no file matches a known layout; otherwise an ``agent.usage`` whose
        ``normalized`` is the figure (total = input + output, tokens) or None with
        ``usage_missing_reason`` saying why: a file incomplete (no terminal event, a last
        line cut), files of two agents, usage not normalisable, a thread twice.
    """
    by_agent: dict[str, list[tuple[str, bytes]]] = {}
    for path, data in files:
        agent = agent_of_file(path)
        if agent is not None:
            by_agent.setdefault(agent, []).append((path, data))
    if not by_agent:
        return None
    if len(by_agent) > 1:
        first = sorted(by_agent)[0]
        return _null(first, f"session files of {len(by_agent)} agents ({', '.join(sorted(by_agent))}): not summed")
    [(agent, mine)] = by_agent.items()
    mine = sorted(mine)
    return _claude(mine) if agent == "claude-code" else _codex(mine)
