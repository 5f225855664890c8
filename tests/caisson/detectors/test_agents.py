"""Agent detector playbooks, and the Claude Code transcript parser on a stream-json transcript."""

from __future__ import annotations

import json

from caisson.agents.claude_code import TranscriptParser
from caisson.detectors import DetectorConfig, Finding
from caisson.detectors.agents import ISOLATION, TOKENS, TOOL_ESCAPE, isolation, strategy, tokens_cross_check, tool_escape
from ledger import Record, drain
from ledger.events import AgentTools, AgentToolCall, AgentToolResult, AgentUsage, LlmCall, LlmUsage

GREP_ONLY = DetectorConfig(granted_tools=("Grep", "Read", "Glob"), denied_tools=("Bash", "Write", "Edit", "WebFetch"))


def play(*events) -> list[Record]:
    return [Record(seq=i, wall_ns=i, mono_ns=i, source="transcript", event=e) for i, e in enumerate(events)]


def result(call_id, tool, outcome):
    return AgentToolResult(agent="claude-code", call_id=call_id, tool=tool, outcome=outcome)


def test_tool_escape_voids_an_executed_tool_outside_the_grant_scoped_to_strategy():
    records = play(result("1", "Grep", "executed"), result("2", "Bash", "refused"), result("3", "Bash", "executed"),
                   result("4", "BashOutput", "unknown"), result("5", "Write", "errored"))
    assert list(tool_escape(records, GREP_ONLY)) == [
        Finding(detector=TOOL_ESCAPE, kind="tool_refused", effect="info", evidence=[1],
                message="Bash (shell) refused by the agent's permissions"),
        Finding(detector=TOOL_ESCAPE, kind="tool_escape", effect="void", evidence=[2, 3],
                message="strategy shell is outside the grant and ran: Bash (executed), BashOutput (unknown)"),
        Finding(detector=TOOL_ESCAPE, kind="tool_escape", effect="void", evidence=[4],
                message="strategy write is outside the grant and ran: Write (errored)"),
    ]


def test_tool_escape_is_silent_within_the_grant_and_without_an_arm():
    records = play(result("1", "Grep", "executed"), result("2", "Read", "executed"))
    assert list(tool_escape(records, GREP_ONLY)) == []
    assert list(tool_escape(play(result("1", "Bash", "executed")), DetectorConfig())) == []
    assert strategy("exec_command") == "shell" and strategy("mcp__x__y") == "backend:mcp__x"
    assert strategy("mcp__x") == "backend:mcp__x" and strategy("Frobnicate") == "tool:Frobnicate"


def test_isolation_fires_when_a_denied_tool_is_still_offered():
    records = play(AgentTools(agent="claude-code", surface="init", tools=["Grep", "Read", "Bash", "Cron"]))
    assert list(isolation(records, GREP_ONLY)) == [
        Finding(detector=ISOLATION, kind="isolation", effect="void", evidence=[0],
                message="denied tools still offered (init): Bash"),
        Finding(detector=ISOLATION, kind="undiscovered_tool", effect="info", evidence=[0],
                message="tools offered (init) that the deny list does not know: Cron")]
    assert list(isolation(play(AgentTools(agent="claude-code", surface="init", tools=["Grep"])), GREP_ONLY)) == []


def call(inp, out):
    return LlmCall(provider="anthropic", endpoint="messages",
                   normalized=None if inp is None else LlmUsage(input_tokens=inp, output_tokens=out))


def usage(inp, out):
    return AgentUsage(agent="claude-code", token_source="claude-code result.usage",
                      normalized=LlmUsage(input_tokens=inp, output_tokens=out))


def test_tokens_cross_check_names_both_sources_and_keeps_null_null():
    assert list(tokens_cross_check(play(call(100, 10), call(50, 5), usage(150, 15)), DetectorConfig())) == []
    assert list(tokens_cross_check(play(call(100, 10), usage(300, 15)), DetectorConfig())) == [
        Finding(detector=TOKENS, kind="token_ambiguous", effect="info", evidence=[1, 0],
                message="claude-code result.usage: input 300, output 15; proxy llm.call sum over 1 call(s):"
                        " input 100, output 10")]
    [cut] = tokens_cross_check(play(call(100, 10), call(None, None), usage(150, 15)), DetectorConfig())
    assert "input null, output null" in cut.message
    [missing] = tokens_cross_check(play(call(100, 10)), DetectorConfig())
    assert missing.message.startswith("no agent.usage: input null, output null")


TRANSCRIPT = [
    {"type": "system", "subtype": "init", "model": "claude-sonnet-4-5", "tools": ["Bash", "Grep", "Read", "Write"]},
    {"type": "assistant", "message": {"content": [
        {"type": "text", "text": "Let me search."},
        {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "grep -rn 'def answer' ."}}]}},
    {"type": "user", "message": {"content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": "./src/app.py:1:def answer():", "is_error": False}]}},
    {"type": "assistant", "message": {"content": [
        {"type": "tool_use", "id": "t2", "name": "Write", "input": {"file_path": "x", "content": "y"}},
        {"type": "tool_use", "id": "t3", "name": "Read", "input": {"file_path": "nope"}},
        {"type": "tool_use", "id": "t4", "name": "WebFetch", "input": {"url": "https://example.com"}}]}},
    {"type": "user", "message": {"content": [
        {"type": "tool_result", "tool_use_id": "t2", "is_error": True,
         "content": "Claude requested permissions to use Write, but you haven't granted it yet."},
        {"type": "tool_result", "tool_use_id": "t3", "is_error": True, "content": [{"type": "text", "text": "File does not exist."}]}]}},
    {"type": "result", "subtype": "success", "result": "`answer` is defined in src/app.py:1", "total_cost_usd": 0.0123,
     "usage": {"input_tokens": 20, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 1000, "output_tokens": 40},
     "modelUsage": {"claude-sonnet-4-5": {"inputTokens": 20, "outputTokens": 40}},
     "permission_denials": [{"tool_name": "Write", "tool_use_id": "t2", "tool_input": {}}]},
]


def test_claude_code_transcript_parser_classifies_outcomes_and_keeps_usage_as_reported():
    data = b"".join(json.dumps(x).encode() + b"\n" for x in TRANSCRIPT) + b"not json\n"
    for chunks in ([data], [data[i:i + 7] for i in range(0, len(data), 7)]):
        parser = TranscriptParser()
        events = []
        for chunk in chunks:
            parser.feed(chunk)
            events += list(drain(parser))
        parser.close()
        events += list(drain(parser))
        kinds = [type(e).__name__ for e in events]
        assert kinds[0] == "AgentTools" and events[0].tools == ["Bash", "Grep", "Read", "Write"]
        assert [e.tool for e in events if isinstance(e, AgentToolCall)] == ["Bash", "Write", "Read", "WebFetch"]
        outcomes = {e.call_id: e.outcome for e in events if isinstance(e, AgentToolResult)}
        assert outcomes == {"t1": "executed", "t2": "refused", "t3": "errored", "t4": "unknown"}
        [answer] = [e for e in events if type(e).__name__ == "AgentAnswer"]
        assert answer.text == "`answer` is defined in src/app.py:1"
        [use] = [e for e in events if isinstance(e, AgentUsage)]
        assert use.usage["cache_read_input_tokens"] == 1000 and use.cost_usd == 0.0123
        assert (use.normalized.input_tokens, use.normalized.output_tokens) == (1120, 40)  # Anthropic addends
        assert any(type(e).__name__ == "WitnessRaw" for e in events)


CODEX = [
    {"type": "thread.started", "thread_id": "t"},
    {"type": "turn.started"},
    {"type": "item.completed", "item": {"id": "item_1", "type": "agent_message", "text": "Searching."}},
    {"type": "item.started", "item": {"id": "item_2", "type": "command_execution", "command": "bash -lc 'grep x .'",
                                      "status": "in_progress"}},
    {"type": "item.completed", "item": {"id": "item_2", "type": "command_execution", "command": "bash -lc 'grep x .'",
                                        "aggregated_output": "./a:1:x\n", "exit_code": 0, "status": "completed"}},
    {"type": "item.started", "item": {"id": "item_3", "type": "command_execution", "command": "rm -rf /",
                                      "status": "in_progress"}},
    {"type": "item.completed", "item": {"id": "item_4", "type": "agent_message", "text": "x is in a:1"}},
    {"type": "turn.completed", "usage": {"input_tokens": 700, "cached_input_tokens": 200, "output_tokens": 40,
                                         "reasoning_output_tokens": 10}},
    {"type": "turn.completed", "usage": {"input_tokens": 780, "cached_input_tokens": 700, "output_tokens": 2,
                                         "reasoning_output_tokens": 0}},
]


def test_codex_transcript_parser_keeps_openai_breakdowns_and_unknown_outcomes():
    from caisson.agents.codex import TranscriptParser as CodexParser

    parser = CodexParser(shape="per_turn")  # these two turns report their own usage (output falls 40 -> 2)
    data = b"".join(json.dumps(x).encode() + b"\n" for x in CODEX)
    for i in range(0, len(data), 5):
        parser.feed(data[i:i + 5])
    parser.close()
    events = list(drain(parser))
    assert [(e.tool, e.input["command"]) for e in events if isinstance(e, AgentToolCall)] == [
        ("exec_command", "bash -lc 'grep x .'"), ("exec_command", "rm -rf /")]
    assert {e.call_id: e.outcome for e in events if isinstance(e, AgentToolResult)} == {
        "item_2": "executed", "item_3": "unknown"}
    [use] = [e for e in events if isinstance(e, AgentUsage)]
    assert use.usage == {"input_tokens": 1480, "cached_input_tokens": 900, "output_tokens": 42,
                         "reasoning_output_tokens": 10}
    assert (use.normalized.input_tokens, use.normalized.output_tokens, use.normalized.cache_read_tokens) == (
        1480, 42, 900)  # cached tokens are inside input: never added twice
    assert [e.text for e in events if type(e).__name__ == "AgentAnswer"] == ["x is in a:1"]
