"""The chamber's environment is built, never inherited.

Rules (DESIGN.md, Environment):
- Only an allow list of harmless variables is taken from the caller (`ALLOWED_FROM_CALLER`);
  everything else comes from the scenario's ``env`` and ``--env`` values.
- ``PWD`` is pinned to the sandbox path (the cwd); ``OLDPWD`` is never set.
- Credential variables (`CREDENTIAL_PATTERNS`, plus the scenario's ``credential_patterns``)
  are stripped, unless the scenario names them in ``pass_credentials``; passed ones are
  recorded only as keyed fingerprints.
- Knowledge-injection switches are set off (`INJECTION_SWITCHES` plus the scenario's).
- The agent's config home is a fresh directory: ``HOME``, ``XDG_CONFIG_HOME``,
  ``XDG_CACHE_HOME``, ``CLAUDE_CONFIG_DIR`` and ``CODEX_HOME`` all point inside it.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping

import msgspec

from caisson._paths import CONFIG_HOME
from caisson.errors import UsageError
from caisson.scenario import Scenario
from ledger import fingerprint_secret

__all__ = [
    "ALLOWED_FROM_CALLER",
    "CREDENTIAL_PATTERNS",
    "INJECTION_SWITCHES",
    "ChamberEnv",
    "build_env",
    "fingerprint_secret",
    "is_credential",
    "looks_secret",
    "parse_env_assignments",
    "redact_env",
]

ALLOWED_FROM_CALLER = ("LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM")
"""The only names whose values are taken from the caller's environment."""

CREDENTIAL_PATTERNS = (
    "API_KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "*_KEY", "*_PASS", "*_PASSWD", "*CREDENTIALS*",
    "*_API_KEY", "*_APIKEY", "*_TOKEN", "*_SECRET", "*_SECRET_*", "*_PASSWORD", "*_ACCESS_KEY*",
    "AWS_*", "AZURE_*", "ARM_CLIENT_*", "GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_*", "GCP_*",
    "GCLOUD_*", "CLOUDSDK_*", "GITHUB_TOKEN", "GH_TOKEN", "NPM_TOKEN", "HF_TOKEN", "SSH_AUTH_SOCK",
)
"""Glob patterns of variables that carry credentials, matched against the upper-cased name."""

SECRET_VALUE = re.compile(
    r"^(sk-|sk_|rk_|ghp_|gho_|ghs_|github_pat_|xox[abpr]-|AKIA|ASIA|AIza|glpat-|hf_|npm_)|://[^/@\s]+:[^/@\s]+@|"
    r"^Bearer\s",
)
"""Values that look like keys or carry credentials in a URL (``user:pass@``), whatever
the variable is called: recorded only as fingerprints."""

INJECTION_SWITCHES = {"CODING_KNOWLEDGE_INJECTION": "0"}
"""Switches that inject outside knowledge into an agent, and the value that turns them off."""

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class ChamberEnv(msgspec.Struct, frozen=True, kw_only=True):
    """The environment of a run.

    Attributes:
        env: exactly what the chamber's command gets.
        recorded: the same, with every credential value replaced by its fingerprint;
            this is what the ledger keeps.
        stripped: names removed because they looked like credentials.
    """

    env: dict[str, str]
    recorded: dict[str, str]
    stripped: list[str]


def is_credential(name: str, extra_patterns: tuple[str, ...] | list[str] = ()) -> bool:
    """True when ``name`` matches a credential pattern (built-in or scenario-declared),
    whatever its case."""
    upper = name.upper()
    return any(fnmatch.fnmatchcase(upper, p.upper()) for p in (*CREDENTIAL_PATTERNS, *extra_patterns))


def looks_secret(value: str) -> bool:
    """True when a value looks like a key or holds credentials in a URL (see `SECRET_VALUE`)."""
    return bool(SECRET_VALUE.search(value))


def parse_env_assignments(values: list[str]) -> dict[str, str]:
    """Parse ``NAME=VALUE`` strings from ``--env``.

    Raises:
        UsageError: a value without ``=`` or with an invalid name.
    """
    out: dict[str, str] = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not name or not (name[0].isalpha() or name[0] == "_") or not all(
            c.isalnum() or c == "_" for c in name
        ):
            raise UsageError(f"--env {item!r}: expected NAME=VALUE with NAME made of letters, digits and _")
        out[name] = value
    return out


def build_env(
    *,
    caller: Mapping[str, str],
    scenario: Scenario,
    overrides: Mapping[str, str],
    cwd: str,
    fingerprint_key: bytes,
) -> ChamberEnv:
    """Build the chamber environment from the rules in the module docstring.

    Args:
        caller: the caller's environment (only `ALLOWED_FROM_CALLER` is read from it).
        scenario: its ``env``, ``pass_credentials``, ``credential_patterns`` and
            ``injection_switches`` apply.
        overrides: ``--env`` values; they win over the scenario's.
        cwd: the sandbox path inside the chamber; PWD is set to it.
        fingerprint_key: the key for `fingerprint_secret`.

    Returns:
        The `ChamberEnv`.
    """
    env: dict[str, str] = {"PATH": DEFAULT_PATH, "LANG": "C.UTF-8"}
    for name in ALLOWED_FROM_CALLER:
        if name in caller:
            env[name] = caller[name]
    env.update(scenario.env)
    for name in scenario.pass_credentials:  # passed on purpose, from the caller, recorded as fingerprints
        if name in caller:
            env[name] = caller[name]
    env.update(overrides)
    stripped = sorted(
        name for name in env
        if is_credential(name, scenario.credential_patterns) and name not in scenario.pass_credentials
    )
    for name in stripped:
        del env[name]
    env.update(INJECTION_SWITCHES)
    env.update(scenario.injection_switches)
    env.update({
        "HOME": CONFIG_HOME,
        "XDG_CONFIG_HOME": f"{CONFIG_HOME}/.config",
        "XDG_CACHE_HOME": f"{CONFIG_HOME}/.cache",
        "CLAUDE_CONFIG_DIR": f"{CONFIG_HOME}/.claude",
        "CODEX_HOME": f"{CONFIG_HOME}/.codex",
        "PWD": cwd,
    })
    env.pop("OLDPWD", None)
    recorded = redact_env(env, key=fingerprint_key, patterns=scenario.credential_patterns)
    return ChamberEnv(env=env, recorded=recorded, stripped=stripped)


def redact_env(env: Mapping[str, str], *, key: bytes, patterns: tuple[str, ...] | list[str] = ()) -> dict[str, str]:
    """The environment as the ledger may keep it: credential variables, and values that
    look like keys, replaced by keyed fingerprints."""
    return {name: fingerprint_secret(value, key) if is_credential(name, patterns) or looks_secret(value) else value
            for name, value in env.items()}
