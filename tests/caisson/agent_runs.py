"""Real agents recorded in the chamber on the scripted model, for the tests that only read
the run: what the witnesses saw (tests/caisson/test_agents.py) and the session identity the
report reads (tests/caisson/report/test_sessions_agents.py). The session fixtures in
tests/caisson/conftest.py record each such run once per test session (per xdist worker)."""

from __future__ import annotations

import os
from pathlib import Path

from caisson.cli import main
from caisson.home import ensure_operator_key
from ledger import read_records, verify_ledger
from tests.helpers import commit_all

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scenarios" / "model"
KEY = "sk-ant-scripted-test-0000"
OPENAI_KEY = "sk-openai-scripted-test-0000"


def make_repo(tmp_path: Path) -> Path:
    """A one-commit repository under ``tmp_path``: src/app.py defines ``answer``."""
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "app.py").write_text("def answer():\n    return 42\n")
    commit_all(repo, "code")
    return repo


def scenario(tmp_path: Path, address: str) -> Path:
    """Claude Code's scenario (arms shell and no-write), its provider at ``address``."""
    path = tmp_path / "agents.toml"
    path.write_text(f'''
name = "agents"
pass_credentials = ["ANTHROPIC_API_KEY"]

[[questions]]
id = "where-answer"
prompt = "In which file and line is the function `answer` defined? Use grep."
required = [{{ subject = "answer", pattern = "src/app.py" }}]

[[arms]]
name = "shell"
grant = ["Bash"]

[[arms]]
name = "no-write"
grant = ["Bash"]
withhold = ["Write"]

[egress]
allow_hosts = ["api.anthropic.com"]
upstream = {{ "api.anthropic.com" = "http://{address}" }}

[agent]
model = "claude-sonnet-4-5"
max_turns = 5

[limits]
wall_seconds = 120
''')
    return path


def run(tmp_path, repo, address, *extra) -> tuple[Path, list]:
    """Record Claude Code on question where-answer into ``tmp_path/run`` (``extra``: more
    `caisson record` flags); assert it exits 0 and its ledger verifies; (run dir, events)."""
    run_dir = tmp_path / "run"
    old = os.environ.get("ANTHROPIC_API_KEY")
    os.environ["ANTHROPIC_API_KEY"] = KEY
    try:
        code = main(["record", "--scenario", str(scenario(tmp_path, address)), "--repo", str(repo),
                     "--question", "where-answer", "--agent", "claude-code", "--out", str(run_dir), *extra])
    finally:
        if old is None:
            os.environ.pop("ANTHROPIC_API_KEY")
        else:
            os.environ["ANTHROPIC_API_KEY"] = old
    assert code == 0
    assert verify_ledger(run_dir, ensure_operator_key().verify_key).status == "ok"
    return run_dir, [r.event for r in read_records(run_dir)]


def codex_scenario(tmp_path: Path, address: str) -> Path:
    """Codex's scenario (one arm, no-shell, which an ungated agent cannot run), its provider
    at ``address``."""
    path = tmp_path / "codex.toml"
    path.write_text(f'''
name = "codex"
pass_credentials = ["OPENAI_API_KEY"]
[[questions]]
id = "where-answer"
prompt = "In which file and line is the function `answer` defined? Use grep."
required = [{{ subject = "answer", pattern = "src/app.py" }}]
[[arms]]
name = "no-shell"
grant = ["read_file"]
[egress]
allow_hosts = ["api.openai.com"]
upstream = {{ "api.openai.com" = "http://{address}" }}
[agent]
model = "gpt-5"
''')
    return path


def record_codex(scenario_path: Path, repo: Path, out: Path, *extra: str) -> int:
    """`caisson record` of Codex on question where-answer into ``out``; its exit code."""
    os.environ["OPENAI_API_KEY"] = OPENAI_KEY
    try:
        return main(["record", "--scenario", str(scenario_path), "--repo", str(repo), "--question", "where-answer",
                     "--agent", "codex", "--out", str(out), *extra])
    finally:
        os.environ.pop("OPENAI_API_KEY")
