"""Model-side detectors: what the provider did that the chamber never runs.

- `model_substituted`: the model a call asked for is not the model that answered.
- `unrecognised_model_call`: a POST to a model provider's host on a path no parser
  recognises; its usage was not read, so it is reported, never dropped. A method known to
  generate nothing (token counting, Code Assist's account methods:
  `collectors.llm.non_generating`) is recognised, and not reported.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator

from caisson.detectors._base import DetectorConfig, Finding, INFO, VOID, reads
from collectors.llm import classify, non_generating
from ledger import Record
from ledger.events import HttpExchange, LlmCall

__all__ = ["MODEL_SUBSTITUTED", "UNRECOGNISED_CALL", "MODEL_HOSTS", "same_model", "model_substituted",
           "unrecognised_model_call"]

MODEL_SUBSTITUTED = "model.substituted@1"
UNRECOGNISED_CALL = "model.unrecognised_call@1"

_SNAPSHOT = re.compile(r"^-(?:\d{8}|\d{4}-\d{2}-\d{2}|v\d+(?::\d+)?|\d{3})$")
"""A dated snapshot or version suffix a provider appends to an alias: Anthropic's
``-20250929`` (Models overview, https://docs.anthropic.com/en/docs/about-claude/models),
OpenAI's ``-2025-08-07`` (https://platform.openai.com/docs/models), Bedrock's ``-v1:0``,
Gemini's stable version ``-001`` ("You can identify the version of a stable model by the
three-digit number that's appended to the model name", "Model versions and lifecycle",
https://cloud.google.com/vertex-ai/generative-ai/docs/learn/model-versioning)."""
_ALIASES = ("tunedModels/", "endpoints/")
"""Requested models that name an operator's resource, not a model: a Gemini tuned model and
a Vertex AI endpoint (`collectors.llm.path_model`); like an Azure deployment, never compared."""

MODEL_HOSTS = (
    "api.anthropic.com", "api.openai.com", ".openai.azure.com", "-aiplatform.googleapis.com",
    "aiplatform.googleapis.com", "bedrock-runtime.", "generativelanguage.googleapis.com", "openrouter.ai",
    "cloudcode-pa.googleapis.com", "aiplatform.us.rep.googleapis.com", "aiplatform.eu.rep.googleapis.com",
)
"""Hosts (exact, or a ``.suffix`` / ``-suffix`` / ``prefix.``) that serve model APIs (Vertex
AI's multi-region hosts: google-genai 3.6.1 ``_api_client.py``; Code Assist's: gemini-cli
0.61.0 ``CODE_ASSIST_ENDPOINT``)."""


@functools.lru_cache(maxsize=1024)  # pure; a run asks for the same model on every call
def same_model(requested: str, served: str) -> bool:
    """True when ``served`` is ``requested`` or a dated snapshot of that alias.

    ``claude-sonnet-4-5`` served as ``claude-sonnet-4-5-20250929`` is the same model; a
    ``-latest`` alias is its stem's snapshot; a ``models/`` prefix (the Gemini API's resource
    name, in older ``modelVersion`` values) is no difference; anything else is a
    substitution (Gemini's ``gemini-flash-latest`` names a family, not a stem: its answer
    by ``gemini-2.5-flash`` is not known to be the model asked for).
    """
    requested, served = requested.removeprefix("models/"), served.removeprefix("models/")
    if requested == served:
        return True
    # Vertex AI names a snapshot MODEL@DATE; Bedrock's ids end in a version, -v1:0
    requested = re.sub(r"-v\d+(?::\d+)?$", "", requested.replace("@", "-"))
    if requested == served:
        return True
    stem = requested.removesuffix("-latest")
    if served.startswith(stem) and _SNAPSHOT.match(served[len(stem):]):
        return True
    # a provider-prefixed request (Bedrock's "anthropic.claude-...-v1:0", OpenRouter's "openai/gpt-5")
    short = requested.rsplit("/", 1)[-1].split(".", 1)[-1] if ("/" in requested or "." in requested) else None
    return short is not None and short != requested and same_model(short, served)


@reads(LlmCall)
def model_substituted(records: Iterable[Record], config: DetectorConfig) -> Iterator[Finding]:
    """A call answered by another model than it asked for voids the cell: its numbers
    measure the served model, not the one the cell claims. One finding per
    (requested, served) pair, with every call's record as evidence. A call whose response
    names no model is not a substitution (nothing to compare). Azure OpenAI is skipped: its
    URL names a deployment, an operator's alias for a model, not the model; so are a Gemini
    tuned model and a Vertex AI endpoint (`_ALIASES`). A Gemini call's served model is its
    response's ``modelVersion``."""
    del config
    pairs: dict[tuple[str, str], list[int]] = {}
    for record in records:
        event = record.event
        if isinstance(event, LlmCall) and event.provider != "azure" and event.requested_model and event.served_model \
                and not event.requested_model.startswith(_ALIASES) \
                and not same_model(event.requested_model, event.served_model):
            pairs.setdefault((event.requested_model, event.served_model), []).append(record.seq)
    for (requested, served), seqs in pairs.items():
        yield Finding(detector=MODEL_SUBSTITUTED, kind="model_substituted", effect=VOID, evidence=seqs,
                      message=f"asked for {requested}, served by {served} ({len(seqs)} call(s))")


def _model_host(host: str) -> bool:
    host = host.lower()
    return any(host == h or (h[0] in ".-" and host.endswith(h)) or (h.endswith(".") and host.startswith(h))
               for h in MODEL_HOSTS)


@reads(HttpExchange)
def unrecognised_model_call(records: Iterable[Record], config: DetectorConfig) -> Iterator[Finding]:
    """A POST to a model host on a path `collectors.llm.classify` does not recognise: no
    ``llm.call`` was built, so its model and usage were not read. A model host is a
    provider's (`MODEL_HOSTS`) or one this run made a recognised model call to (a gateway,
    the scripted endpoint). A method known to generate nothing (`collectors.llm.non_generating`:
    token counting, Code Assist's account methods) is not reported. Shown (info) with its
    path; the exchange and its bodies are in the ledger."""
    del config
    posts = [(r, classify("POST", r.event.host, r.event.path)) for r in records
             if isinstance(r.event, HttpExchange) and r.event.method.upper() == "POST" and r.event.denied is None]
    gateways = {r.event.host.lower() for r, kind in posts if kind is not None}
    for record, kind in posts:
        event = record.event
        if kind is None and (_model_host(event.host) or event.host.lower() in gateways) \
                and non_generating(event.path) is None:
            yield Finding(detector=UNRECOGNISED_CALL, kind="unrecognised_model_call", effect=INFO,
                          evidence=[record.seq],
                          message=f"POST {event.host}{event.path.split('?', 1)[0]}: a model host, on a path no"
                                  " parser recognises; its model and usage were not read")
