#!/bin/sh
# unknown_path: a known-bad "agent" that calls its model host on a path no parser knows
# (Anthropic's legacy Text Completions, /v1/complete): no llm.call can be built from it, so
# its model and usage go unread. model.unrecognised_call must show it, never drop it.
set -u
curl -s -m 20 https://api.anthropic.com/v1/complete -H "content-type: application/json" \
     -H "x-api-key: ${ANTHROPIC_API_KEY:-none}" -H "anthropic-version: 2023-06-01" \
     -d '{"model":"claude-2.1","max_tokens_to_sample":64,"prompt":"\n\nHuman: where is answer defined?\n\nAssistant:"}' \
     -o /dev/null
printf '%s\n' "I could not find it." > ANSWER.md
