"""`env.inheritance`: the agent's start environment, as the strace witness saw it exec'd.

Only the first exec of the chamber counts: the agent's own start. Later execs inherit
whatever the agent did (a shell sets OLDPWD after ``cd``), which is the agent's business.
When no exec carried an environment, the recorded ``run.started`` environment is checked.
"""

from __future__ import annotations

import functools

from caisson.detectors._base import DetectorConfig, Finding, Fold, VOID, norm, folded, reads, under
from caisson.chamber import INJECTION_SWITCHES
from ledger import is_credential
from ledger.events import ProcessExec, RunStarted

__all__ = ["ENV_INHERITANCE", "env_inheritance"]

ENV_INHERITANCE = "env.inheritance@1"
_is_credential = functools.lru_cache(maxsize=4096)(is_credential)  # pure; every run starts with the same names
_CONFIG_VARS = ("HOME", "XDG_CONFIG_HOME", "CLAUDE_CONFIG_DIR", "CODEX_HOME")


@reads(RunStarted, ProcessExec)
@folded
def env_inheritance(config: DetectorConfig, found: list[Finding]) -> Fold:
    """PWD not equal to cwd, OLDPWD present, credentials present, injection switches on,
    or agent config homes outside the fresh config home: each voids the cell."""
    start: tuple[int, dict[str, str], str | None] | None = None
    fallback: tuple[int, dict[str, str]] | None = None
    while (record := (yield)) is not None:
        event = record.event
        if isinstance(event, RunStarted) and fallback is None:
            fallback = (record.seq, event.env)
        elif isinstance(event, ProcessExec) and event.env is not None and event.result == 0:
            start = (record.seq, event.env, event.cwd)
            break
    if start is None and fallback is None:
        return
    seq, env, cwd = start if start is not None else (*fallback, None)  # type: ignore[misc]
    cwd = cwd or config.sandbox_path

    def finding(message: str) -> Finding:
        return Finding(detector=ENV_INHERITANCE, kind="env_inheritance", effect=VOID, evidence=[seq],
                       message=message)

    if "PWD" in env and norm(env["PWD"]) != norm(cwd):
        found.append(finding(f"PWD={env['PWD']} but the cwd is {cwd}"))
    if "OLDPWD" in env:
        found.append(finding(f"OLDPWD={env['OLDPWD']} inherited"))
    for name in sorted(env):
        if _is_credential(name, config.credential_patterns) and name not in config.pass_credentials:
            found.append(finding(f"credential variable {name} present"))
    switches = {**INJECTION_SWITCHES, **dict(config.injection_switches)}
    for name, off in sorted(switches.items()):
        if env.get(name) != off:
            found.append(finding(f"injection switch {name}={env.get(name, '<unset>')}, expected {off}"))
    for name in _CONFIG_VARS:
        value = env.get(name)
        if value is not None and not under(norm(value), norm(config.config_home)):
            found.append(finding(f"{name}={value} is not the run's fresh config home {config.config_home}"))
