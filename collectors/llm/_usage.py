"""Normalisation of provider usage objects into `LlmUsage`, one rule per API shape.

The raw usage object is always kept as sent; this module only derives the normalised
view and names the rule it applied in `LlmUsage.rule`. All counts are tokens. A count
must be a JSON integer in [0, 2**53] (a bool, float, string, negative or larger number
is rejected); an absent or null optional field stays None in the view.

Sources (provider API references):

- Anthropic Messages API, "Create a Message" response ``usage`` and "Streaming
  Messages": ``input_tokens``, ``cache_creation_input_tokens`` and
  ``cache_read_input_tokens`` are separate, non-overlapping addends of the prompt;
  ``output_tokens`` is the completion.
- OpenAI Chat Completions API, the ``usage`` object: ``prompt_tokens`` already includes
  ``prompt_tokens_details.cached_tokens``; ``completion_tokens`` already includes
  ``completion_tokens_details.reasoning_tokens``. Breakdowns are never added again.
- OpenAI Responses API, the response ``usage`` object: ``input_tokens`` includes
  ``input_tokens_details.cached_tokens``; ``output_tokens`` includes
  ``output_tokens_details.reasoning_tokens``.
- Gemini API ``usageMetadata`` (google-genai 3.6.1 ``types.py``
  ``GenerateContentResponseUsageMetadata``; https://ai.google.dev/api/generate-content#UsageMetadata):
  ``promptTokenCount`` "also includes" ``cachedContentTokenCount``; ``totalTokenCount`` is
  "the sum of prompt_token_count, candidates_token_count, tool_use_prompt_token_count, and
  thoughts_token_count", so thoughts and tool-use prompt tokens are separate addends.
  Counts of 0 are left out (ProtoJSON omits default values), so inside a ``usageMetadata``
  with any count an absent count is 0.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ledger.events import LlmUsage

__all__ = ["FIGURE_RULES", "RULES", "STREAM_RULES", "USAGE_RULES_VERSION", "gemini_counted", "normalize_usage"]

USAGE_RULES_VERSION = "llm.usage@3"
"""The version of this module's rules as a whole, recorded by replay (2: streamed fields
merged per field, never overridden by a later 0; only a terminal usage chunk counts;
3: the Gemini API's ``usageMetadata``)."""

RULES: dict[str, str] = {
    "messages": (
        "anthropic.messages: input = input_tokens + cache_creation_input_tokens"
        " + cache_read_input_tokens (separate addends, absent counts 0);"
        " output = output_tokens; total = input + output;"
        " cache_write = cache_creation_input_tokens, cache_read = cache_read_input_tokens"
    ),
    "chat.completions": (
        "openai.chat.completions: input = prompt_tokens (includes"
        " prompt_tokens_details.cached_tokens); output = completion_tokens (includes"
        " completion_tokens_details.reasoning_tokens); total = input + output;"
        " cache_read and reasoning are breakdowns, never added"
    ),
    "responses": (
        "openai.responses: input = input_tokens (includes"
        " input_tokens_details.cached_tokens); output = output_tokens (includes"
        " output_tokens_details.reasoning_tokens); total = input + output;"
        " cache_read and reasoning are breakdowns, never added"
    ),
    "generate_content": (
        "gemini.generate_content: input = promptTokenCount (includes cachedContentTokenCount)"
        " + toolUsePromptTokenCount; output = candidatesTokenCount + thoughtsTokenCount"
        " (separate addends); absent counts 0; total = input + output;"
        " cache_read = cachedContentTokenCount and reasoning = thoughtsTokenCount are breakdowns, never added"
    ),
}
"""The rule text per endpoint, as recorded in `LlmUsage.rule` (before any suffix)."""

FIGURE_RULES: dict[str, dict[str, str]] = {
    "messages": {
        "input_tokens": "anthropic.input_sum@1",  # input_tokens + cache_creation + cache_read
        "output_tokens": "anthropic.output@1",
        "total_tokens": "total.input_plus_output@1",
        "cache_read_tokens": "anthropic.cache_read@1",
        "cache_write_tokens": "anthropic.cache_write@1",
    },
    "chat.completions": {
        "input_tokens": "openai.chat.prompt_tokens@1",
        "output_tokens": "openai.chat.completion_tokens@1",
        "total_tokens": "total.input_plus_output@1",
        "cache_read_tokens": "openai.chat.cached_breakdown@1",
        "reasoning_tokens": "openai.chat.reasoning_breakdown@1",
    },
    "responses": {
        "input_tokens": "openai.responses.input_tokens@1",
        "output_tokens": "openai.responses.output_tokens@1",
        "total_tokens": "total.input_plus_output@1",
        "cache_read_tokens": "openai.responses.cached_breakdown@1",
        "reasoning_tokens": "openai.responses.reasoning_breakdown@1",
    },
    "generate_content": {
        "input_tokens": "gemini.prompt_plus_tool_use@1",
        "output_tokens": "gemini.candidates_plus_thoughts@1",
        "total_tokens": "total.input_plus_output@1",
        "cache_read_tokens": "gemini.cached_breakdown@1",
        "reasoning_tokens": "gemini.thoughts_breakdown@1",
    },
}
"""Per endpoint, normalised figure -> the rule (``name@version``) recorded in `LlmUsage.rules`."""

GEMINI_INCLUSIVE_OUTPUT = "gemini.candidates_include_thoughts@1"
"""The output rule when the sent ``totalTokenCount`` shows ``candidatesTokenCount`` already
holds the thoughts (total = prompt + tool use + candidates, thoughts > 0): output =
candidatesTokenCount, so thoughts are never counted twice. The documented reading
(thoughts separate) is the default; this variant is reported second hand (LiteLLM's
``is_candidate_token_count_inclusive``) and recorded by name when it applies."""

STREAM_RULES: dict[str, str] = {
    "messages": "anthropic.stream_fields@2",
    "chat.completions": "openai.chat.terminal_usage_chunk@2",
    "responses": "openai.responses.terminal_usage@1",
    "generate_content": "gemini.last_usage_metadata@1",
}
"""Per endpoint, the rule (``name@version``) that picks a streamed response's raw usage;
prefixed to every figure's rule in `LlmUsage.rules` when the usage came from a stream."""

STREAMED_ANTHROPIC_SUFFIX = (
    "; streamed: usage = message_start.message.usage merged field by field with the last"
    " message_delta.usage (counts are cumulative: the larger wins, never summed; a 0 or"
    " null in the delta never overrides a real count)"
)
STREAMED_CHAT_SUFFIX = (
    "; streamed: usage from the terminal usage chunk (choices empty, or the last chunk;"
    " stream_options.include_usage); usage on earlier chunks is a placeholder"
)
STREAMED_RESPONSES_SUFFIX = "; streamed: usage from the terminal event's response.usage"
STREAMED_GEMINI_SUFFIX = (
    "; streamed: usage = the usageMetadata of the last chunk with token counts, on or after"
    " the first chunk with a finishReason (counts are running totals: the last wins, never summed)"
)


GEMINI_COUNTS = ("promptTokenCount", "candidatesTokenCount", "thoughtsTokenCount", "toolUsePromptTokenCount",
                 "cachedContentTokenCount", "totalTokenCount")
"""The token counts of a Gemini ``usageMetadata``, in the order `_gemini` reads them."""


def gemini_counted(usage: dict[str, Any]) -> bool:
    """Whether a Gemini ``usageMetadata`` carries any token count. One without is a
    placeholder: Vertex AI sends ``{"trafficType": "ON_DEMAND"}`` alone on the chunks
    before the last."""
    return any(usage.get(key) is not None for key in GEMINI_COUNTS)


MAX_TOKENS = 2**53
"""Largest count accepted, tokens: the interoperable JSON integer bound (RFC 7493, I-JSON);
sums of a few such counts still fit the ledger's 64-bit integers."""


class _Bad(Exception):
    """A usage field has the wrong shape; the message says which."""


def _count(obj: dict[str, Any], key: str, *, required: bool, where: str = "") -> int | None:
    value = obj.get(key)
    name = f"{where}{key}"
    if value is None:
        if required:
            raise _Bad(f"{name} missing")
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Bad(f"{name} is not an integer: {value!r:.40}")
    if value < 0:
        raise _Bad(f"{name} is negative: {value}")
    if value > MAX_TOKENS:
        raise _Bad(f"{name} is implausibly large: {value}")
    return value


def _detail(usage: dict[str, Any], details: str, key: str) -> int | None:
    sub = usage.get(details)
    if sub is None:
        return None
    if not isinstance(sub, dict):
        raise _Bad(f"{details} is not an object")
    return _count(sub, key, required=False, where=f"{details}.")


def _anthropic(usage: dict[str, Any]) -> tuple[LlmUsage, list[str]]:
    base = _count(usage, "input_tokens", required=True)
    write = _count(usage, "cache_creation_input_tokens", required=False)
    read = _count(usage, "cache_read_input_tokens", required=False)
    out = _count(usage, "output_tokens", required=True)
    assert base is not None and out is not None
    inp = base + (write or 0) + (read or 0)
    view = LlmUsage(
        input_tokens=inp,
        output_tokens=out,
        total_tokens=inp + out,
        cache_read_tokens=read,
        cache_write_tokens=write,
    )
    return view, []


def _openai(
    usage: dict[str, Any], in_key: str, out_key: str, in_details: str, out_details: str
) -> tuple[LlmUsage, list[str]]:
    inp = _count(usage, in_key, required=True)
    out = _count(usage, out_key, required=True)
    assert inp is not None and out is not None
    cached = _detail(usage, in_details, "cached_tokens")
    reasoning = _detail(usage, out_details, "reasoning_tokens")
    notes = []
    sent_total = usage.get("total_tokens")
    is_count = isinstance(sent_total, int) and not isinstance(sent_total, bool)
    if is_count and sent_total != inp + out:
        notes.append(f"sent total_tokens {sent_total} != {in_key} + {out_key}")
    if cached is not None and cached > inp:
        notes.append(f"cached_tokens {cached} > {in_key} {inp}")
    if reasoning is not None and reasoning > out:
        notes.append(f"reasoning_tokens {reasoning} > {out_key} {out}")
    view = LlmUsage(
        input_tokens=inp,
        output_tokens=out,
        total_tokens=inp + out,
        cache_read_tokens=cached,
        reasoning_tokens=reasoning,
    )
    return view, notes


def _gemini(usage: dict[str, Any]) -> tuple[LlmUsage, list[str]]:
    """`RULES["generate_content"]`; the view's ``rules`` name a figure's rule where it is
    not the default (`GEMINI_INCLUSIVE_OUTPUT`)."""
    if not gemini_counted(usage):
        raise _Bad("usageMetadata has no token counts")
    prompt, candidates, thoughts, tool_use, cached, sent_total = (
        _count(usage, key, required=False) for key in GEMINI_COUNTS)
    inp = (prompt or 0) + (tool_use or 0)
    out = (candidates or 0) + (thoughts or 0)
    notes: list[str] = []
    rules: dict[str, str] = {}
    if sent_total is not None and sent_total != inp + out:
        if thoughts and sent_total == inp + (candidates or 0) and (candidates or 0) >= thoughts:
            out, rules = candidates or 0, {"output_tokens": GEMINI_INCLUSIVE_OUTPUT}
        else:
            notes.append(f"sent totalTokenCount {sent_total} != promptTokenCount + toolUsePromptTokenCount"
                         " + candidatesTokenCount + thoughtsTokenCount")
    if cached is not None and cached > (prompt or 0):
        notes.append(f"cachedContentTokenCount {cached} > promptTokenCount {prompt or 0}")
    view = LlmUsage(input_tokens=inp, output_tokens=out, total_tokens=inp + out, cache_read_tokens=cached,
                    reasoning_tokens=thoughts, rules=rules)
    return view, notes


def normalize_usage(
    endpoint: str, usage: dict[str, Any], *, streamed: bool
) -> tuple[LlmUsage | None, str | None]:
    """Derive the normalised view of one raw usage object.

    Args:
        endpoint: the API shape: ``"messages"``, ``"chat.completions"``, ``"responses"``
            or ``"generate_content"`` (`collectors.llm.SHAPES`).
        usage: the usage object as sent (for a streamed Anthropic call, the merge
            described by ``STREAMED_ANTHROPIC_SUFFIX``).
        streamed: the usage came from an event stream; adds the streamed rule suffix.

    Returns:
        ``(view, None)`` with ``view.rule`` naming the rule (plus any inconsistency
        noted, e.g. a sent ``total_tokens`` that differs from input + output), or
        ``(None, problem)`` when a required count is missing or malformed.
    """
    try:
        if endpoint == "messages":
            view, notes = _anthropic(usage)
            suffix = STREAMED_ANTHROPIC_SUFFIX if streamed else ""
        elif endpoint == "chat.completions":
            view, notes = _openai(
                usage,
                "prompt_tokens",
                "completion_tokens",
                "prompt_tokens_details",
                "completion_tokens_details",
            )
            suffix = STREAMED_CHAT_SUFFIX if streamed else ""
        elif endpoint == "responses":
            view, notes = _openai(
                usage,
                "input_tokens",
                "output_tokens",
                "input_tokens_details",
                "output_tokens_details",
            )
            suffix = STREAMED_RESPONSES_SUFFIX if streamed else ""
        elif endpoint == "generate_content":
            view, notes = _gemini(usage)
            suffix = STREAMED_GEMINI_SUFFIX if streamed else ""
            if view.rules:
                suffix = ("; candidatesTokenCount includes thoughtsTokenCount (sent totalTokenCount ="
                          " promptTokenCount + toolUsePromptTokenCount + candidatesTokenCount): output ="
                          " candidatesTokenCount") + suffix
        else:
            return None, f"no usage rule for endpoint {endpoint!r}"
    except _Bad as exc:
        return None, str(exc)
    rule = RULES[endpoint] + suffix
    if notes:
        rule += "; inconsistent: " + "; ".join(notes)
    prefix = STREAM_RULES[endpoint] + "+" if streamed else ""
    rules = {figure: prefix + name for figure, name in {**FIGURE_RULES[endpoint], **view.rules}.items()
             if getattr(view, figure) is not None}
    return msgspec.structs.replace(view, rule=rule, rules=rules), None
