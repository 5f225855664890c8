"""The chamber's environment is built, never inherited.

Rules (docs/architecture.md, "Detectors and scoring", environment):
- Only an allow list of harmless variables is taken from the caller (`ALLOWED_FROM_CALLER`);
  everything else comes from the scenario's ``env`` and ``--env`` values.
- ``PWD`` is pinned to the sandbox path (the cwd); ``OLDPWD`` is never set.
- Credential variables (`ledger.is_credential`, plus the scenario's ``credential_patterns``)
  are stripped, unless the scenario names them in ``pass_credentials``; passed ones are
  recorded only as keyed fingerprints.
- Knowledge-injection switches are set off (`INJECTION_SWITCHES` plus the scenario's).
- The agent's config home is a fresh directory: ``HOME``, ``XDG_CONFIG_HOME``,
  ``XDG_CACHE_HOME``, ``CLAUDE_CONFIG_DIR`` and ``CODEX_HOME`` all point inside it.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from caisson._paths import CONFIG_HOME
from caisson.errors import UsageError
from caisson.scenario import Scenario
from ledger import is_credential, redact_env

__all__ = [
    "ALLOWED_FROM_CALLER",
    "INJECTION_SWITCHES",
    "ChamberEnv",
    "build_env",
    "parse_env_assignments",
]

ALLOWED_FROM_CALLER = ("LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM")
"""The only names whose values are taken from the caller's environment."""

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


