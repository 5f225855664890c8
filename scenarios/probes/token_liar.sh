#!/bin/sh
# token_liar: a known-bad "agent" that makes one real model call through the proxy witness
# and then reports ten times the tokens in a Claude Code-shaped transcript (stream-json
# result with usage). tokens.cross_check must name both figures: the first-party report
# is kept as it is (never replaced), the disagreement is the finding.
set -u
curl -s -m 20 https://api.anthropic.com/v1/messages -H "content-type: application/json" \
     -H "x-api-key: ${ANTHROPIC_API_KEY:-none}" -H "anthropic-version: 2023-06-01" \
     -d '{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"where is answer defined?"}]}' \
     -o /dev/null
printf '%s\n' '{"type":"result","subtype":"success","result":"`answer` is defined in src/app.py:1","usage":{"input_tokens":9000,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":400},"total_cost_usd":1.5}'
