"""`caisson preflight`: before a matrix spends on a real provider, prove the gating holds.

For each arm x agent, a probe session runs in the chamber against the scripted model
endpoint (which only answers; it asks for no tool) and the agent's own report of its tool
surface is checked against the arm's deny list: a denied tool still present aborts, with
the arm, agent and tool named. A combination the agent cannot gate is a refusal, recorded.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Literal

import msgspec

from caisson.model import scripted_model
from caisson.errors import UsageError
from caisson.resources import resource_dir
from caisson.run.plan import RecordOptions, plan_run
from caisson.run.record import record
from caisson.scenario import Egress, load_scenario
from caisson.run.witnesses import default_witnesses
from ledger import read_records
from ledger.events import AgentTools, RunStarted

__all__ = ["Check", "preflight"]

SCRIPT = resource_dir("scenarios") / "model" / "preflight.toml"
"""The scripted model of a preflight: it answers once and asks for no tool."""


def preflight_script(model: str) -> str:
    """`SCRIPT`'s text, with the ``models`` it lists set to ``[model]`` (the scenario's)."""
    return f"models = [{json.dumps(model)}]\n" + SCRIPT.read_text()


_PROVIDERS = ("api.anthropic.com", "api.openai.com")
_KEYS = {"ANTHROPIC_API_KEY": "sk-ant-preflight", "OPENAI_API_KEY": "sk-openai-preflight"}  # scripted: no secret


class Check(msgspec.Struct, kw_only=True):
    """One arm x agent: its status (ok | abort | refused), the tools it reported, why."""

    arm: str
    agent: str
    status: Literal["ok", "abort", "refused"]
    offered: list[str] = []
    still_denied: list[str] = []
    reason: str = ""
    run_dir: str | None = None


def preflight(scenario_path: Path, repo: Path, agents: list[str], *, out: Path | None = None,
              weaken: tuple[str, ...] = ()) -> list[Check]:
    """Run one probe session per arm x agent; see the module docstring.

    Raises:
        UsageError: the scenario has no question or no arm.
    """
    scenario = load_scenario(scenario_path)
    if not scenario.questions or not scenario.arms:
        raise UsageError(f"{scenario_path}: a preflight needs at least one question and one arm")
    root = Path(out) if out else Path(tempfile.mkdtemp(prefix="caisson-preflight-"))
    root.mkdir(parents=True, exist_ok=True)
    script = root / "model.toml"
    script.write_text(preflight_script(scenario.agent.model or "claude-sonnet-4-5"))
    checks = []
    for agent in agents:
        for arm in scenario.arms:
            run_dir = root / f"{agent}--{arm.name}"
            options = RecordOptions(command=[], scenario=scenario_path, repo=repo, out=run_dir,
                                    question=scenario.questions[0].id, agent=agent, arm=arm.name,
                                    weaken=list(weaken), env=_KEYS)
            try:
                refusal = plan_run(options, scenario).refusal
                if refusal is not None:  # planned, never started
                    checks.append(Check(arm=arm.name, agent=agent, status="refused",
                                        reason=f"refused: {refusal.reason}"))
                    continue
                with scripted_model(script) as address:
                    egress = Egress(allow_hosts=list(_PROVIDERS),
                                    upstream={host: f"http://{address}" for host in _PROVIDERS})
                    record(msgspec.structs.replace(options, egress=egress), witnesses=default_witnesses())
            except UsageError as exc:
                checks.append(Check(arm=arm.name, agent=agent, status="refused", reason=str(exc)))
                continue
            checks.append(_check(run_dir, arm.name, agent))
    return checks


def _check(run_dir: Path, arm: str, agent: str) -> Check:
    records = list(read_records(run_dir))
    started = next(r.event for r in records if isinstance(r.event, RunStarted))
    denied = set(started.arm.get("deny", ()))
    offered = sorted({t for r in records if isinstance(r.event, AgentTools) for t in r.event.tools})
    if not any(isinstance(r.event, AgentTools) for r in records):
        return Check(arm=arm, agent=agent, status="abort", run_dir=str(run_dir),
                     reason="the agent reported no tool surface: its gating cannot be verified")
    still = sorted(denied & set(offered))
    if still:
        return Check(arm=arm, agent=agent, status="abort", offered=offered, still_denied=still, run_dir=str(run_dir),
                     reason=f"arm {arm}, agent {agent}: denied tools still present: {', '.join(still)}")
    return Check(arm=arm, agent=agent, status="ok", offered=offered, run_dir=str(run_dir))
