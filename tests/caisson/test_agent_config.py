"""caisson.chamber.agent_config and the sandbox: agent configuration is withheld by default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from caisson.chamber.agent_config import AGENT_CONFIG_GLOBS, agent_of, config_commands
from caisson.chamber.sandbox import build_sandbox
from caisson.scenario import ExclusionCategory, Scenario
from ledger.events import ExcludedPath
from tests.helpers import commit_all

SETTINGS = {"hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": "id > /tmp/hook"}]}],
                      "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "true"}]}]},
            "statusLine": {"type": "command", "command": "printf ok"},
            "mcpServers": {"x": {"command": "node", "args": ["srv.js"]}}}

TREE = {  # path -> (content, agent)
    ".claude/settings.json": (json.dumps(SETTINGS), "claude-code"),
    ".claude/commands/deploy.md": ("run deploy\n", "claude-code"),
    "pkg/CLAUDE.local.md": ("notes\n", "claude-code"),
    "CLAUDE.md": ("read the key\n", "claude-code"),
    "sub/AGENTS.override.md": ("x\n", "codex"),
    "opencode.json": ('{"mcp": {}}', "opencode"),
    "GEMINI.md": ("x\n", "gemini"),
    ".mcp.json": ('{"mcpServers": {"db": {"command": "npx", "args": ["-y", "db-mcp"]}}}', "claude-code"),
    ".codex/config.toml": ('notify = ["notify-send", "done"]\n[mcp_servers.docs]\ncommand = "docs-mcp"\n'
                           'args = ["--port", "1"]\n', "codex"),
    "AGENTS.md": ("be nice\n", "codex"),
    ".cursor/rules/style.mdc": ("rule\n", "cursor"),
    ".cursorrules": ("rule\n", "cursor"),
    ".github/copilot-instructions.md": ("hi\n", "copilot"),
    ".github/instructions/py.instructions.md": ("hi\n", "copilot"),
    ".opencode/agent/review.md": ("x\n", "opencode"),
    "opencode.jsonc": ('{\n // comment\n "mcp": {"m": {"type": "local", "command": ["m-server", "--x"]}}}', "opencode"),
    ".aider.conf.yml": ("model: x\n", "aider"),
    ".gemini/settings.json": ("{}", "gemini"),
    ".windsurfrules": ("r\n", "windsurf"),
    ".clinerules": ("r\n", "cline"),
}
COMMANDS = {
    ".claude/settings.json": ["id > /tmp/hook", "true", "printf ok", "node srv.js"],
    ".mcp.json": ["npx -y db-mcp"],
    ".codex/config.toml": ["docs-mcp --port 1", "notify-send done"],
    "opencode.jsonc": ["m-server --x"],
}


@pytest.mark.parametrize("path", list(TREE))
def test_each_form_is_recognised_with_its_commands(path: str) -> None:
    content, agent = TREE[path]
    found = config_commands(path, content.encode())
    assert (found.agent, found.commands, found.error) == (agent, COMMANDS.get(path, []), None)
    assert agent_of(path) == agent


def test_unparsable_settings_are_still_reported() -> None:
    found = config_commands(".claude/settings.json", b'{"hooks": ')
    assert found.agent == "claude-code" and found.commands == [] and found.error.startswith("JSONDecodeError")
    assert config_commands(".mcp.json", b"\xff\xfe").error.startswith("UnicodeDecodeError")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "live"
    for path, (content, _) in {**TREE, "src/app.py": ("x = 1\n", ""), "docs/agents.txt": ("not config\n", "")}.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(content)
    commit_all(root, "c")
    return root


def test_withheld_by_default_under_their_own_category(repo: Path, tmp_path: Path) -> None:
    # A scenario's own category wins (first match); the rest fall to agent_config.
    s = Scenario(name="t", exclusions=[ExclusionCategory(category="agent_instructions", globs=["AGENTS.md"])])
    sb = build_sandbox(repo, "HEAD", s, tmp_path / "sb")
    expected = {p: "agent_config" for p in TREE} | {"AGENTS.md": "agent_instructions"}
    assert sb.excluded == [ExcludedPath(path=p, category=c) for p, c in sorted(expected.items())]
    assert sb.agent_config == []
    assert sorted(p.name for p in (tmp_path / "sb").iterdir() if p.name != ".git") == ["docs", "src"]


def test_weakened_the_tree_keeps_them_and_says_so(repo: Path, tmp_path: Path) -> None:
    sb = build_sandbox(repo, "HEAD", Scenario(name="t"), tmp_path / "sb", default_exclusions=False)
    assert sb.excluded == []
    assert {c.path: (c.agent, c.commands) for c in sb.agent_config} == {
        p: (agent, COMMANDS.get(p, [])) for p, (_, agent) in TREE.items()}


def test_every_glob_has_a_planted_example() -> None:
    from caisson.chamber.sandbox import glob_to_regex

    for glob in AGENT_CONFIG_GLOBS:
        rx = glob_to_regex(glob)
        assert any(rx.fullmatch(p) or any(rx.fullmatch("/".join(p.split("/")[:i])) for i in range(1, 4))
                   for p in TREE), glob
