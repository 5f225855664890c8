"""Model-side detector playbooks: substitution and calls on paths no parser recognises."""

from __future__ import annotations

from caisson.detectors import DetectorConfig, Finding
from caisson.detectors.model import (
    MODEL_SUBSTITUTED, UNRECOGNISED_CALL, model_substituted, same_model, unrecognised_model_call,
)
from ledger import Record
from ledger.events import HttpExchange, LlmCall

CONFIG = DetectorConfig()


def play(*events) -> list[Record]:
    return [Record(seq=i, wall_ns=i, mono_ns=i, source="proxy", event=e) for i, e in enumerate(events)]


def call(requested, served):
    return LlmCall(provider="anthropic", endpoint="messages", requested_model=requested, served_model=served)


def test_same_model_accepts_snapshots_of_an_alias_and_nothing_else():
    assert same_model("claude-sonnet-4-5", "claude-sonnet-4-5")
    assert same_model("claude-sonnet-4-5", "claude-sonnet-4-5-20250929")
    assert same_model("gpt-5", "gpt-5-2025-08-07")
    assert same_model("claude-3-7-sonnet-latest", "claude-3-7-sonnet-20250219")
    assert same_model("anthropic.claude-sonnet-4-5", "claude-sonnet-4-5-20250929")
    assert same_model("openai/gpt-5", "gpt-5-2025-08-07")
    assert same_model("claude-sonnet-4-5@20250929", "claude-sonnet-4-5-20250929")  # Vertex AI
    assert same_model("anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5-20250929")  # Bedrock
    assert not same_model("anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-haiku-4-5-20251001")
    assert not same_model("claude-sonnet-4-5", "claude-haiku-4-5")
    assert not same_model("gpt-5", "gpt-5-mini")
    assert not same_model("gpt-5", "gpt-5-mini-2025-08-07")
    assert not same_model("claude-opus-4", "claude-opus-4-1")


def test_model_substituted_voids_a_cell_served_by_another_model_one_finding_per_pair():
    records = play(call("claude-sonnet-4-5", "claude-sonnet-4-5-20250929"), call("claude-sonnet-4-5", "claude-haiku-4-5"),
                   call("claude-haiku-4-5", "claude-haiku-4-5"), call("claude-sonnet-4-5", "claude-haiku-4-5"),
                   call("claude-sonnet-4-5", None), call(None, "gpt-5"),
                   LlmCall(provider="azure", endpoint="chat.completions", requested_model="my-deployment",
                           served_model="gpt-5-2025-08-07"))
    assert list(model_substituted(records, CONFIG)) == [
        Finding(detector=MODEL_SUBSTITUTED, kind="model_substituted", effect="void", evidence=[1, 3],
                message="asked for claude-sonnet-4-5, served by claude-haiku-4-5 (2 call(s))")]
    assert list(model_substituted(records[:1] + records[2:3] + records[4:], CONFIG)) == []


def exchange(host, path, method="POST", denied=None):
    return HttpExchange(method=method, scheme="https", host=host, port=443, path=path, status=200, denied=denied)


def test_a_post_to_a_model_host_on_an_unknown_path_is_reported_never_dropped():
    records = play(exchange("api.anthropic.com", "/v1/messages?beta=true"),
                   exchange("api.anthropic.com", "/v1/complete"),
                   exchange("api.openai.com", "/v1/models", method="GET"),
                   exchange("myres.openai.azure.com", "/openai/assistants?api-version=2025-01-01"),
                   exchange("pypi.org", "/simple/x"),
                   exchange("api.openai.com", "/v1/embeddings", denied="egress"))
    assert list(unrecognised_model_call(records, CONFIG)) == [
        Finding(detector=UNRECOGNISED_CALL, kind="unrecognised_model_call", effect="info", evidence=[1],
                message="POST api.anthropic.com/v1/complete: a model host, on a path no parser recognises;"
                        " its model and usage were not read"),
        Finding(detector=UNRECOGNISED_CALL, kind="unrecognised_model_call", effect="info", evidence=[3],
                message="POST myres.openai.azure.com/openai/assistants: a model host, on a path no parser"
                        " recognises; its model and usage were not read")]


def test_a_host_that_served_a_recognised_model_call_is_a_model_host_too():
    records = play(exchange("gateway.internal", "/api/v1/messages"), exchange("gateway.internal", "/api/v1/complete"),
                   exchange("other.internal", "/api/v1/complete"))
    assert [f.evidence for f in unrecognised_model_call(records, CONFIG)] == [[1]]
