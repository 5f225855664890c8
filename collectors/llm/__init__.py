"""LLM API calls as the proxy sees them: which provider and endpoint a request is for,
the requested and served model, and the usage fields exactly as sent, with a normalised
view that states its rule (sans-IO; bodies and SSE streams in, `ledger.events.LlmCall` out)."""

from collectors.llm._calls import (
    ANTHROPIC, ENDPOINTS, OPENAI, SHAPES, STREAMING, LlmCallBuilder, classify, non_generating, path_model,
)
from collectors.llm._eventstream import EventStreamDecoder, EventStreamError, EventStreamMessage
from collectors.llm._usage import RULES, USAGE_RULES_VERSION, normalize_usage

__all__ = ["ANTHROPIC", "ENDPOINTS", "OPENAI", "RULES", "SHAPES", "STREAMING", "USAGE_RULES_VERSION",
           "EventStreamDecoder", "EventStreamError", "EventStreamMessage", "LlmCallBuilder", "classify",
           "non_generating", "normalize_usage", "path_model"]
