"""Strategy-scoped audit playbooks: scenario strategies group tools and MCP backends, an arm
grants strategies, and only a tool of another strategy that executed is an escape."""

from __future__ import annotations

import pytest

from caisson.agents import deny_list
from caisson.detectors import DetectorConfig, Finding, config_from_records
from caisson.detectors.agents import TOOL_ESCAPE, isolation, strategy, tool_escape
from caisson.errors import ScenarioError
from caisson.scenario import parse_scenario
from ledger import Record
from ledger.events import AgentTools, AgentToolResult, RunArm, RunStarted

CATALOG = (("search", ("Grep", "Glob", "mcp__codesearch")), ("docs", ("mcp__docs",)))
SEARCH = DetectorConfig(granted_tools=("Read",), denied_tools=("Bash", "Write"), strategies=CATALOG,
                        granted_strategies=("search",))


def play(*events) -> list[Record]:
    return [Record(seq=i, wall_ns=i, mono_ns=i, source="transcript", event=e) for i, e in enumerate(events)]


def result(tool, outcome="executed"):
    return AgentToolResult(agent="claude-code", call_id=tool, tool=tool, outcome=outcome)


def test_a_tool_belongs_to_its_scenario_strategy_first():
    assert strategy("mcp__codesearch__find_symbol", SEARCH) == "search"
    assert strategy("Grep", SEARCH) == "search"
    assert strategy("mcp__docs__lookup", SEARCH) == "docs"
    assert strategy("Grep") == "read" and strategy("mcp__other__x", SEARCH) == "backend:mcp__other"


def test_an_unlisted_tool_of_a_granted_backend_is_fine_another_strategys_tool_is_an_escape():
    records = play(result("Read"), result("Grep"), result("mcp__codesearch__find_symbol"),
                   result("mcp__codesearch__new_tool_upstream"), result("mcp__docs__lookup"),
                   result("mcp__docs__search", "refused"), result("mcp__other__x", "unknown"))
    assert list(tool_escape(records, SEARCH)) == [
        Finding(detector=TOOL_ESCAPE, kind="tool_refused", effect="info", evidence=[5],
                message="mcp__docs__search (docs) refused by the agent's permissions"),
        Finding(detector=TOOL_ESCAPE, kind="tool_escape", effect="void", evidence=[4],
                message="strategy docs is outside the grant and ran: mcp__docs__lookup (executed)"),
        Finding(detector=TOOL_ESCAPE, kind="tool_escape", effect="void", evidence=[6],
                message="strategy backend:mcp__other is outside the grant and ran: mcp__other__x (unknown)"),
    ]


def test_a_grant_of_an_mcp_server_grants_its_tools_without_strategies():
    config = DetectorConfig(granted_tools=("mcp__codesearch",))
    assert list(tool_escape(play(result("mcp__codesearch__find_symbol")), config)) == []
    assert deny_list(["Bash", "mcp__codesearch__find", "mcp__docs__x"], ["mcp__codesearch"], []) == [
        "Bash", "mcp__docs__x"]


def test_isolation_knows_the_tools_of_granted_strategies():
    offered = play(AgentTools(agent="claude-code", surface="init",
                              tools=["Read", "Grep", "mcp__codesearch__find_symbol", "mcp__docs__lookup"]))
    [unknown] = isolation(offered, SEARCH)
    assert unknown.message == "tools offered (init) that the deny list does not know: mcp__docs__lookup"


def test_the_strategies_come_from_the_runs_own_record_and_old_ledgers_have_none():
    arm = RunArm(name="a", grant=["Read"], deny=["Bash"], strategies=["search"],
                 catalog={name: list(members) for name, members in CATALOG})
    started = RunStarted(run_id="r", caisson_version="0", arm=arm)
    config = config_from_records(play(started))
    assert (config.strategies, config.granted_strategies) == (CATALOG, ("search",))
    old = config_from_records(play(RunStarted(run_id="r", caisson_version="0", arm=RunArm(name="a", grant=["Read"]))))
    assert (old.strategies, old.granted_strategies) == ((), ())


SCENARIO = b'''
name = "s"
[[strategies]]
name = "search"
tools = ["Grep", "Glob"]
backends = ["codesearch"]
[[strategies]]
name = "docs"
backends = ["docs"]
[[arms]]
name = "searching"
grant = ["Read"]
strategies = ["search"]
'''


def test_scenario_strategies_validate_with_errors_naming_the_field():
    scenario = parse_scenario(SCENARIO, "s.toml")
    assert scenario.strategy("search").members() == ("Grep", "Glob", "mcp__codesearch")
    with pytest.raises(ScenarioError, match="unknown strategy 'web'") as e:
        parse_scenario(SCENARIO.replace(b'strategies = ["search"]', b'strategies = ["search", "web"]'), "s.toml")
    assert e.value.field == "$.arms[0].strategies[1]"
    with pytest.raises(ScenarioError, match="already in strategy 'search'") as e:
        parse_scenario(SCENARIO.replace(b'backends = ["docs"]', b'backends = ["docs", "codesearch"]'), "s.toml")
    assert e.value.field == "$.strategies[1].backends[1]"
    with pytest.raises(ScenarioError, match="duplicate strategy name") as e:
        parse_scenario(SCENARIO.replace(b'name = "docs"', b'name = "search"'), "s.toml")
    assert e.value.field == "$.strategies[1].name"


def test_a_plan_hands_the_agent_the_granted_strategies_and_records_the_catalog():
    from caisson.run.plan import RecordOptions, plan_run

    scenario = parse_scenario(SCENARIO + b'[[questions]]\nid = "q1"\nprompt = "Where?"\n', "s.toml")
    plan = plan_run(RecordOptions(command=[], question="q1", agent="claude-code", arm="searching"), scenario)
    allowed = plan.command[plan.command.index("--allowedTools") + 1].split(",")
    assert allowed == ["Read", "Grep", "Glob", "mcp__codesearch"]
    assert {"Grep", "Glob", "Read"}.isdisjoint(plan.arm.deny) and "Bash" in plan.arm.deny
    facts = plan.arm  # as run.started records it
    assert facts.strategies == ["search"]
    assert facts.catalog == {"search": ["Grep", "Glob", "mcp__codesearch"], "docs": ["mcp__docs"]}
    assert config_from_records(play(RunStarted(run_id="r", caisson_version="0", arm=facts))).granted_strategies == (
        "search",)


def test_a_tool_the_provider_ran_is_an_execution_and_an_escape_when_web_is_withheld():
    from ledger.events import LlmCall

    searched = LlmCall(provider="anthropic", endpoint="messages", server_tools={"web_search": 2})
    records = play(result("Read"), searched, LlmCall(provider="openai", endpoint="responses"))
    assert list(tool_escape(records, SEARCH)) == [
        Finding(detector=TOOL_ESCAPE, kind="tool_escape", effect="void", evidence=[1],
                message="strategy web is outside the grant and ran: web_search (run by the provider, 2x)")]
    web = DetectorConfig(granted_tools=("Read", "WebSearch"))
    assert list(tool_escape(records, web)) == []
    assert list(tool_escape(records, DetectorConfig())) == []  # no arm, nothing to enforce


def test_gemini_s_search_and_url_fetches_are_web_and_its_code_execution_a_tool_of_its_own():
    from ledger.events import LlmCall

    ran = LlmCall(provider="gemini", endpoint="generateContent",
                  server_tools={"google_search": 2, "url_context": 1, "code_execution": 1})
    assert list(tool_escape(play(result("Read"), ran), SEARCH)) == [
        Finding(detector=TOOL_ESCAPE, kind="tool_escape", effect="void", evidence=[1],
                message="strategy tool:code_execution is outside the grant and ran: code_execution"
                        " (run by the provider, 1x)"),
        Finding(detector=TOOL_ESCAPE, kind="tool_escape", effect="void", evidence=[1, 1],
                message="strategy web is outside the grant and ran: google_search (run by the provider, 2x),"
                        " url_context (run by the provider, 1x)")]
    assert [f.message.split(" is")[0] for f in tool_escape(play(ran), DetectorConfig(
        granted_tools=("WebSearch",)))] == ["strategy tool:code_execution"]
