"""Real agents recorded in the chamber on the scripted model, for the tests that only read
the run: what the witnesses saw (tests/caisson/test_agents.py) and the session identity the
report reads (tests/caisson/report/test_sessions_agents.py). The session fixtures in
tests/caisson/conftest.py record each such run once per test session (per xdist worker)."""

from __future__ import annotations

import json
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


def where_answer_scenario(path: Path, *, name: str, credential: str, provider_host: str, address: str,
                          model: str, arms: dict[str, tuple[list[str], list[str]]], hint: str = "grep",
                          max_turns: int | None = 5, wall_seconds: int | None = None) -> Path:
    """Write a scenario at ``path`` with the one question the scripted models answer
    (where ``answer`` is defined; the prompt ends "Use <hint>."), the provider host
    ``provider_host`` routed to ``address`` and ``credential`` passed to the agent.

    Args:
        arms: arm name -> (grant, withhold), in order.
        max_turns, wall_seconds: the agent's and the run's limits (None: not set).

    Returns:
        ``path``.
    """
    arm_lines = "".join(f'[[arms]]\nname = "{arm}"\ngrant = {json.dumps(grant)}\n'
                        + (f"withhold = {json.dumps(withhold)}\n" if withhold else "")
                        for arm, (grant, withhold) in arms.items())  # a JSON list of strings is a TOML array
    path.write_text(f'''
name = "{name}"
pass_credentials = ["{credential}"]
[[questions]]
id = "where-answer"
prompt = "In which file and line is the function `answer` defined? Use {hint}."
required = [{{ subject = "answer", pattern = "src/app.py" }}]
{arm_lines}[egress]
allow_hosts = ["{provider_host}"]
upstream = {{ "{provider_host}" = "http://{address}" }}
[agent]
model = "{model}"
{f"max_turns = {max_turns}" if max_turns is not None else ""}
{f"[limits]{chr(10)}wall_seconds = {wall_seconds}" if wall_seconds is not None else ""}
''')
    return path


def scenario(tmp_path: Path, address: str) -> Path:
    """Claude Code's scenario (arms shell and no-write), its provider at ``address``."""
    return where_answer_scenario(tmp_path / "agents.toml", name="agents", credential="ANTHROPIC_API_KEY",
                                 provider_host="api.anthropic.com", address=address, model="claude-sonnet-4-5",
                                 arms={"shell": (["Bash"], []), "no-write": (["Bash"], ["Write"])},
                                 wall_seconds=120)


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
    return where_answer_scenario(tmp_path / "codex.toml", name="codex", credential="OPENAI_API_KEY",
                                 provider_host="api.openai.com", address=address, model="gpt-5",
                                 arms={"no-shell": (["read_file"], [])}, max_turns=None)


def record_codex(scenario_path: Path, repo: Path, out: Path, *extra: str) -> int:
    """`caisson record` of Codex on question where-answer into ``out``; its exit code."""
    os.environ["OPENAI_API_KEY"] = OPENAI_KEY
    try:
        return main(["record", "--scenario", str(scenario_path), "--repo", str(repo), "--question", "where-answer",
                     "--agent", "codex", "--out", str(out), *extra])
    finally:
        os.environ.pop("OPENAI_API_KEY")
