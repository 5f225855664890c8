"""Tests for caisson.scenario: loading and validating scenario files."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from caisson.errors import ScenarioError
from caisson.scenario import CATEGORIES, Limits, Scenario, load_scenario, scenario_digest

ROOT = Path(__file__).resolve().parents[2]

VALID = """
name = "demo"
leak_terms = ["KEY-1"]
pass_credentials = ["ANTHROPIC_API_KEY"]
answer_file = "out/ANSWER.md"

[env]
LANG = "C.UTF-8"

[[questions]]
id = "q1"
prompt = "Which function parses the configuration file?"
evidence = ["src/config.py"]
required = [{ subject = "parse", pattern = "config\\\\.py", regex = true }]
forbidden = [{ subject = "parse", claim = "lives in main.py" }]

[[questions]]
id = "q2"
kind = "absence"
absent = true
prompt = "Where is the retry policy?"

[[exclusions]]
category = "answer_key"
globs = ["answers/**"]
description = "expected answers"

[limits]
wall_seconds = 30
memory_bytes = 1073741824
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "scenario.toml"
    p.write_text(text)
    return p


def test_valid_scenario_loads(tmp_path: Path) -> None:
    s = load_scenario(write(tmp_path, VALID))
    assert s.name == "demo"
    assert [q.id for q in s.questions] == ["q1", "q2"]
    assert s.questions[0].kind == "locate" and s.questions[1].kind == "absence"
    assert s.questions[0].required[0].regex is True
    assert s.questions[0].forbidden[0].claim == "lives in main.py"
    assert s.exclusions[0].category == "answer_key"
    assert s.env == {"LANG": "C.UTF-8"}
    assert s.limits == Limits(wall_seconds=30.0, memory_bytes=1 << 30)
    assert s.limits.pids == 512 and s.limits.cpus == 1.0
    assert s.user == "agent" and s.answer_file == "out/ANSWER.md"


def test_defaults() -> None:
    s = Scenario(name="x")
    assert s.questions == [] and s.exclusions == [] and s.leak_terms == []
    assert s.answer_file is None and s.limits.memory_bytes == 2 * 1024**3
    assert s.limits.wall_seconds == 600


def test_example_scenario_loads() -> None:
    s = load_scenario(ROOT / "scenarios" / "example.toml")
    assert s.questions and {e.category for e in s.exclusions} == set(CATEGORIES)


def test_unknown_field_names_its_path(tmp_path: Path) -> None:
    p = write(tmp_path, VALID.replace('evidence = ["src/config.py"]', 'evidnce = ["x"]'))
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    assert e.value.field == "$.questions[0].evidnce"
    assert e.value.path == str(p)
    assert str(p) in str(e.value) and "unknown field" in str(e.value)


def test_missing_required_field(tmp_path: Path) -> None:
    p = write(tmp_path, 'name = "x"\n[[questions]]\nid = "q"\n')
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    assert e.value.field == "$.questions[0]"
    assert "prompt" in str(e.value)


def test_wrong_type_names_field_and_expectation(tmp_path: Path) -> None:
    p = write(tmp_path, 'name = "x"\n[[questions]]\nid = "q"\nprompt = 3\n')
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    assert e.value.field == "$.questions[0].prompt"
    assert "Expected `str`, got `int`" in str(e.value)


def test_limit_must_be_positive(tmp_path: Path) -> None:
    p = write(tmp_path, 'name = "x"\n[limits]\npids = 0\n')
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    assert e.value.field == "$.limits.pids"


def test_unknown_category_lists_allowed(tmp_path: Path) -> None:
    p = write(tmp_path, 'name = "x"\n[[exclusions]]\ncategory = "secrets"\nglobs = ["a"]\n')
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    assert e.value.field == "$.exclusions[0].category"
    for c in CATEGORIES:
        assert c in str(e.value)


def test_unknown_question_kind(tmp_path: Path) -> None:
    p = write(tmp_path, 'name = "x"\n[[questions]]\nid = "q"\nprompt = "p"\nkind = "guess"\n')
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    assert e.value.field == "$.questions[0].kind"


def test_empty_leak_term_rejected(tmp_path: Path) -> None:
    p = write(tmp_path, 'name = "x"\nleak_terms = ["ok", ""]\n')
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    assert e.value.field == "$.leak_terms[1]"


@pytest.mark.parametrize(("text", "field"), [
    ('leak_terms = ["ok", "\\u200b\\u00ad"]\n', "$.leak_terms[1]"),
    ('[[questions]]\nid = "q"\nprompt = "p"\nleak_terms = ["\\u0301 \\ufeff"]\n', "$.questions[0].leak_terms[0]"),
])
def test_a_leak_term_that_folds_to_nothing_is_rejected(tmp_path: Path, text: str, field: str) -> None:
    """Zero-width characters, soft hyphens, marks: leak matching drops them all, so such a
    term could never match."""
    with pytest.raises(ScenarioError, match="could never match") as e:
        load_scenario(write(tmp_path, 'name = "x"\n' + text))
    assert e.value.field == field


def test_duplicate_question_id(tmp_path: Path) -> None:
    q = '[[questions]]\nid = "q"\nprompt = "p"\n'
    with pytest.raises(ScenarioError) as e:
        load_scenario(write(tmp_path, 'name = "x"\n' + q + q))
    assert e.value.field == "$.questions[1].id"


@pytest.mark.parametrize("bad", ["/etc/answer", "../answer", ""])
def test_answer_file_must_be_relative(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ScenarioError) as e:
        load_scenario(write(tmp_path, f'name = "x"\nanswer_file = "{bad}"\n'))
    assert e.value.field == "$.answer_file"


@pytest.mark.parametrize("name, value", [("OPENAI_API_KEY", "anything"), ("MODEL_ENDPOINT", "sk-ant-0123456789abcdef"),
                                         ("UPSTREAM", "https://user:hunter2@proxy.example/")])
def test_a_credential_in_env_is_refused_by_its_name_or_its_value(tmp_path: Path, name: str, value: str) -> None:
    """The scenario file is kept with every run (a blob): a secret in it would reach the
    ledger verbatim, where ``run.started.env`` has only its fingerprint."""
    with pytest.raises(ScenarioError, match="looks like a credential") as e:
        load_scenario(write(tmp_path, f'name = "x"\n[env]\n{name} = "{value}"\n'))
    assert e.value.field == f"$.env.{name}"


def test_toml_syntax_error_names_line(tmp_path: Path) -> None:
    p = write(tmp_path, 'name = "x"\ndescription = "ok"\nleak_terms = [\n"a" "b"]\n')
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    assert e.value.field is None
    assert str(p) in str(e.value) and "line 4" in str(e.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(tmp_path / "nope.toml")


def test_not_utf8(tmp_path: Path) -> None:
    p = tmp_path / "s.toml"
    p.write_bytes(b'name = "\xff"\n')
    with pytest.raises(ScenarioError, match="UTF-8"):
        load_scenario(p)


def test_digest_is_sha256_of_bytes(tmp_path: Path) -> None:
    p = write(tmp_path, VALID)
    assert scenario_digest(p) == hashlib.sha256(VALID.encode()).hexdigest()


def test_a_malformed_scoped_grant_names_its_arm_and_entry(tmp_path: Path) -> None:
    p = write(tmp_path, 'name = "x"\n[[arms]]\nname = "a"\ngrant = ["Read", "Bash(git log:*"]\n')
    with pytest.raises(ScenarioError, match="expected TOOL or TOOL") as e:
        load_scenario(p)
    assert e.value.field == "$.arms[0].grant[1]"
    assert load_scenario(write(tmp_path, 'name = "x"\n[[arms]]\nname = "a"\ngrant = ["Bash(git log:*)"]\n')).arms


@pytest.mark.parametrize(("egress", "field", "words"), [
    ('allow_hosts = ["api.anthropic.com"]\nupstream = { "api.openai.com" = "http://127.0.0.1:9" }',
     "$.egress.upstream.api.openai.com", "is not in egress.allow_hosts (api.anthropic.com)"),
    ('allow_hosts = ["api.anthropic.com"]\nupstream = { "api.anthropic.com" = "nonsense" }',
     "$.egress.upstream.api.anthropic.com", "expected [http://|https://]ip:port"),
    ('allow_hosts = ["*.anthropic.com"]\nupstream = { "api.anthropic.com" = "ftp://127.0.0.1:9" }',
     "$.egress.upstream.api.anthropic.com", "expected [http://|https://]ip:port"),
    ('allow_hosts = ["*.anthropic.com"]\nupstream = { "api.anthropic.com" = "127.0.0.1:65536" }',
     "$.egress.upstream.api.anthropic.com", "a port 1-65535"),
    ('allow_hosts = ["a.test"]\nstatic_hosts = { "a.test" = ["10.0.0.1", "a.test"] }',
     "$.egress.static_hosts.a.test[1]", "'a.test' is not an IP address"),
    ('allow_hosts = ["api.anthropic.com", "*."]', "$.egress.allow_hosts[1]", "expected name, *.suffix"),
])
def test_an_egress_setting_that_configures_nothing_is_refused_where_it_is(tmp_path: Path, egress, field, words):
    path = tmp_path / "s.toml"
    path.write_text(f'name = "e"\n[egress]\n{egress}\n')
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    assert str(caught.value).startswith(f"{path}: {field}: ") and words in str(caught.value), str(caught.value)


def test_upstreams_that_configure_something_load(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text('name = "e"\n[egress]\nallow_hosts = ["*.anthropic.com", "api.openai.com:443"]\n'
                    'upstream = { "api.anthropic.com" = "http://127.0.0.1:9", "api.openai.com" = "[::1]:8080" }\n'
                    'static_hosts = { "api.openai.com" = ["192.0.2.1", "2001:db8::1"] }\n')
    assert load_scenario(path).egress.upstream["api.openai.com"] == "[::1]:8080"


def test_a_regex_fact_that_cannot_compile_is_refused_at_load(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text('name = "r"\n[[questions]]\nid = "q"\nprompt = "p"\n'
                    'required = [{ subject = "s", pattern = "a" }, { subject = "s", pattern = "(", regex = true }]\n')
    with pytest.raises(ScenarioError, match=r"\$\.questions\[0\]\.required\[1\]\.pattern: pattern '\(' is not a"):
        load_scenario(path)
