#!/bin/sh
# model_switcher: a known-bad "agent" whose Claude Code-shaped transcript (stream-json) says it
# answered with another model than the one it was asked for: a system/model_fallback line
# (Claude Code 2.1.328's shape, written when --fallback-model takes over from an overloaded
# model), then the answer. Its one model call through the proxy asks for that fallback model.
# model.switched must void the cell: its numbers are another model's.
set -u
curl -s -m 20 https://api.anthropic.com/v1/messages -H "content-type: application/json" \
     -H "x-api-key: ${ANTHROPIC_API_KEY:-none}" -H "anthropic-version: 2023-06-01" \
     -d '{"model":"claude-haiku-4-5","max_tokens":64,"messages":[{"role":"user","content":"where is answer defined?"}]}' \
     -o /dev/null
session=8d3c1f7e-2b4a-4f0e-9a6c-1d2e3f4a5b6c
printf '%s\n' \
  '{"type":"system","subtype":"init","session_id":"'$session'","model":"claude-sonnet-4-5","tools":["Bash","Read"]}' \
  '{"type":"system","subtype":"model_fallback","uuid":"9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d","trigger":"overloaded","original_model":"claude-sonnet-4-5","fallback_model":"claude-haiku-4-5","content":"Switched to claude-haiku-4-5 due to high demand for claude-sonnet-4-5","session_id":"'$session'"}' \
  '{"type":"assistant","message":{"id":"msg_caisson000001","type":"message","role":"assistant","model":"claude-haiku-4-5","content":[{"type":"text","text":"`answer` is defined in src/app.py:1"}],"stop_reason":"end_turn","usage":{"input_tokens":120,"output_tokens":14}},"session_id":"'$session'"}' \
  '{"type":"result","subtype":"success","is_error":false,"result":"`answer` is defined in src/app.py:1","usage":{"input_tokens":120,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":14},"session_id":"'$session'"}'
