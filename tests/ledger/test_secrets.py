"""Secrets in command lines (ledger/_secrets.py redact_argv): fingerprinted in place, the
argv keeping its shape; redaction is idempotent and never changes the number of elements."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import fingerprint_secret, redact_argv, redact_exec

KEY = bytes(range(32))
SECRETS = ["hunter2", "sk-ant-api03-abcdefghijklmnop0123", "ghp_0123456789abcdefghijABCDEFGHIJ0123",
           "AKIAABCDEFGHIJKLMNOP", "s3cr3t-t0ken"]
FRAGMENTS = [
    "curl", "-H", "sh", "-c", " ", '"', "'", "=", ":", "@", "/", "--", "-", "_", ";", "$",
    "Authorization: Bearer ", "authorization:", "Cookie: a=1; b=2", "x-api-key: ", "https://", "user:", "@host/",
    "--api-key=", "--token", "--password ", "--key=", "API_KEY=", "export GITHUB_TOKEN=", "X=", "fp:", "npm_config_",
    "0123456789abcdef", *SECRETS,
]
argv_strategy = st.lists(st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=6), max_size=8).map("".join),
                         max_size=6)


@settings(max_examples=300, deadline=None)
@given(argv_strategy)
def test_redaction_keeps_the_length_and_is_idempotent(argv):
    once = redact_argv(argv, key=KEY)
    assert len(once) == len(argv)
    assert redact_argv(once, key=KEY) == once


def fp(value: str) -> str:
    return fingerprint_secret(value, KEY)


def test_each_recogniser_fingerprints_in_place():
    argv = ["sh", "-c", "X=http://user:pw@host/ curl -H 'Authorization: Bearer tok-123' https://h/",
            "--api-key=abc", "--token", "t0k", "--password=hunter2", "-H", "x-api-key: k-1",
            "OPENAI_API_KEY=plain", "https://oauth2:glpat-0123456789abcdefghij@gitlab.example/x.git",
            "AKIAABCDEFGHIJKLMNOP", "--verbose", "npm_config_user_agent", "ls -la /tmp"]
    assert redact_argv(argv, key=KEY) == [
        "sh", "-c", f"X=http://user:{fp('pw')}@host/ curl -H 'Authorization: Bearer {fp('tok-123')}' https://h/",
        f"--api-key={fp('abc')}", "--token", fp("t0k"), f"--password={fp('hunter2')}", "-H", f"x-api-key: {fp('k-1')}",
        f"OPENAI_API_KEY={fp('plain')}", f"https://oauth2:{fp('glpat-0123456789abcdefghij')}@gitlab.example/x.git",
        fp("AKIAABCDEFGHIJKLMNOP"), "--verbose", "npm_config_user_agent", "ls -la /tmp"]


def test_an_exec_is_redacted_in_one_call():
    argv, env = redact_exec(["curl", "-u", "x", "https://a:b@h/"], {"HF_TOKEN": "v", "HOME": "/root"}, key=KEY)
    assert argv == ["curl", "-u", "x", f"https://a:{fp('b')}@h/"] and env == {"HF_TOKEN": fp("v"), "HOME": "/root"}
    assert redact_exec(["true"], None, key=KEY) == (["true"], None)
