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


# --- the Gemini API ------------------------------------------------------------------------


def test_gemini_calls_and_methods_that_generate_nothing_are_not_unrecognised():
    records = play(
        exchange("generativelanguage.googleapis.com", "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"),
        exchange("generativelanguage.googleapis.com", "/v1beta/models/gemini-2.5-flash:countTokens"),
        exchange("aiplatform.googleapis.com", "/v1/publishers/google/models/gemini-2.5-flash:generateContent?key=X"),
        exchange("us-central1-aiplatform.googleapis.com",
                 "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-flash:computeTokens"),
        exchange("cloudcode-pa.googleapis.com", "/v1internal:streamGenerateContent?alt=sse"),
        exchange("cloudcode-pa.googleapis.com", "/v1internal:loadCodeAssist"),
        exchange("api.anthropic.com", "/v1/messages/count_tokens?beta=true"),
        exchange("generativelanguage.googleapis.com", "/v1beta/models/gemini-embedding-001:embedContent"),
        exchange("cloudcode-pa.googleapis.com", "/v1internal:someNewMethod"),
        exchange("aiplatform.eu.rep.googleapis.com",
                 "/v1/projects/p/locations/eu/publishers/google/models/imagen-4.0:predict"))
    assert [(f.evidence, f.message.split(":")[0]) for f in unrecognised_model_call(records, CONFIG)] == [
        ([7], "POST generativelanguage.googleapis.com/v1beta/models/gemini-embedding-001"),
        ([8], "POST cloudcode-pa.googleapis.com/v1internal"),
        ([9], "POST aiplatform.eu.rep.googleapis.com/v1/projects/p/locations/eu/publishers/google/models/imagen-4.0")]


def gemini(requested, served, provider="gemini"):
    return LlmCall(provider=provider, endpoint="streamGenerateContent", requested_model=requested,
                   served_model=served)


def test_same_model_knows_gemini_s_stable_versions_and_resource_prefix():
    assert same_model("gemini-2.0-flash", "gemini-2.0-flash-001")
    assert same_model("gemini-2.5-flash-preview-04-17", "models/gemini-2.5-flash-preview-04-17")
    assert same_model("models/gemini-2.5-pro", "gemini-2.5-pro")
    assert not same_model("gemini-2.5-pro", "gemini-2.5-flash")
    assert not same_model("gemini-2.0-flash", "gemini-2.0-flash-lite-001")
    assert not same_model("gemini-flash-latest", "gemini-2.5-flash-preview-09-2025")  # a family, not a stem


def test_model_substituted_compares_the_url_s_model_with_model_version():
    records = play(gemini("gemini-2.5-pro", "gemini-2.5-pro"), gemini("gemini-2.0-flash", "gemini-2.0-flash-001"),
                   gemini("gemini-2.5-pro", "gemini-2.5-flash", "vertex"),
                   gemini("tunedModels/my-tune", "gemini-2.5-flash"), gemini("endpoints/4711", "gemini-2.5-flash"),
                   gemini("gemini-2.5-pro", "gemini-2.5-flash", "code_assist"))
    assert list(model_substituted(records, CONFIG)) == [
        Finding(detector=MODEL_SUBSTITUTED, kind="model_substituted", effect="void", evidence=[2, 5],
                message="asked for gemini-2.5-pro, served by gemini-2.5-flash (2 call(s))")]


def test_a_stream_answered_by_another_model_than_its_url_names_is_a_substitution():
    from pathlib import Path

    from collectors.llm import LlmCallBuilder, classify, path_model

    stream = (Path(__file__).parents[2] / "collectors" / "test_llm_gemini" / "gemini_stream.sse").read_bytes()
    calls = []
    for model in ("gemini-2.5-flash", "gemini-2.5-pro"):
        path = f"/v1beta/models/{model}:streamGenerateContent?alt=sse"
        builder = LlmCallBuilder(*classify("POST", "h", path), url_model=path_model(path))
        builder.request(b'{"contents": []}')
        builder.response_start(200, [("content-type", "text/event-stream")])
        builder.response_data(stream)
        calls.append(builder.finish())
    assert [(c.requested_model, c.served_model) for c in calls] == [("gemini-2.5-flash", "gemini-2.5-flash"),
                                                                    ("gemini-2.5-pro", "gemini-2.5-flash")]
    assert [f.evidence for f in model_substituted(play(*calls), CONFIG)] == [[1]]
