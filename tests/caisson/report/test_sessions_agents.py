"""Real agents on the scripted model: the session identity the report reads is really sent.

Claude Code and Codex run in the chamber through the proxy witness: the runs that
tests/caisson/test_agents.py reads too, recorded once (tests/caisson/conftest.py); the
report's `read_cell` must find exactly one session identity on their model calls and take
the agent's own (first-party) figure.
"""

from __future__ import annotations

import re

import pytest

from caisson.home import ensure_operator_key
from caisson.report import read_cell

UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


@pytest.mark.docker
def test_claude_code_names_one_session_on_every_model_call(claude_grep_run):
    run_dir, _ = claude_grep_run  # grep_then_answer.toml, arm shell
    tokens = read_cell(run_dir, ensure_operator_key().verify_key).tokens
    assert len(tokens.sessions) == 1 and UUID.match(tokens.sessions[0]), tokens
    assert (tokens.unidentified_calls, tokens.token_ambiguous) == (0, False)
    assert (tokens.figure.total, tokens.figure.source) == (5956 + 52, "first_party:claude-code result.usage")


@pytest.mark.docker
def test_codex_names_one_session_on_every_model_call(codex_grep_run):
    _, _, run_dir = codex_grep_run  # codex_grep.toml, no arm
    tokens = read_cell(run_dir, ensure_operator_key().verify_key).tokens
    assert len(tokens.sessions) == 1, tokens
    assert (tokens.unidentified_calls, tokens.token_ambiguous) == (0, False)
    assert tokens.figure.source == "first_party:codex turn.completed usage (cumulative, codex 0.171.0)"
