"""Real agents on the scripted model: the session identity the report reads is really sent.

Claude Code and Codex run in the chamber through the proxy witness (as in
tests/caisson/test_agents.py); the report's `read_cell` must find exactly one session
identity on their model calls and take the agent's own (first-party) figure.
"""

from __future__ import annotations

import os
import re

import pytest

from caisson.cli import main
from caisson.home import ensure_operator_key
from caisson.report import read_cell
from tests.caisson.test_agents import model_server, repo, run  # noqa: F401  (fixtures)

UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


@pytest.mark.docker
@pytest.mark.parametrize("model_server", ["grep_then_answer.toml"], indirect=True)
def test_claude_code_names_one_session_on_every_model_call(agent_image, model_server, repo, tmp_path):
    run_dir, _ = run(tmp_path, repo, model_server, "--arm", "shell")
    tokens = read_cell(run_dir, ensure_operator_key().verify_key).tokens
    assert len(tokens.sessions) == 1 and UUID.match(tokens.sessions[0]), tokens
    assert (tokens.unidentified_calls, tokens.token_ambiguous) == (0, False)
    assert (tokens.figure.total, tokens.figure.source) == (5956 + 52, "first_party:claude-code result.usage")


@pytest.mark.docker
@pytest.mark.parametrize("model_server", ["codex_grep.toml"], indirect=True)
def test_codex_names_one_session_on_every_model_call(agent_image, model_server, repo, tmp_path):
    path = tmp_path / "codex.toml"
    path.write_text(f'''
name = "codex"
pass_credentials = ["OPENAI_API_KEY"]
[[questions]]
id = "where-answer"
prompt = "In which file and line is the function `answer` defined? Use grep."
required = [{{ subject = "answer", pattern = "src/app.py" }}]
[egress]
allow_hosts = ["api.openai.com"]
upstream = {{ "api.openai.com" = "http://{model_server}" }}
[agent]
model = "gpt-5"
''')
    os.environ["OPENAI_API_KEY"] = "sk-openai-scripted-test-0000"
    try:
        assert main(["record", "--scenario", str(path), "--repo", str(repo), "--question", "where-answer",
                     "--agent", "codex", "--out", str(tmp_path / "run")]) == 0
    finally:
        os.environ.pop("OPENAI_API_KEY")
    tokens = read_cell(tmp_path / "run", ensure_operator_key().verify_key).tokens
    assert len(tokens.sessions) == 1, tokens
    assert (tokens.unidentified_calls, tokens.token_ambiguous) == (0, False)
    assert tokens.figure.source == "first_party:codex turn.completed usage (cumulative, codex 0.171.0)"
