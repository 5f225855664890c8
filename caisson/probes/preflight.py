"""`caisson preflight`: before a matrix spends on a real provider, prove the gating holds.

For each agent that claims ``enforced`` gating, a discovery session (no arm, a model that
only answers) collects the tools the agent shows (`caisson.gating.discovered_tools`);
they are unioned into every arm's deny list. Then, for each arm x agent, a probe session
runs in the chamber against the scripted model, which calls one denied tool
(`caisson.gating.probe_script`): the claim holds only when the transcript shows that
call refused (`judge_gating`); otherwise the agent is measured ``not_enforced`` for its
version, with the evidence, and the check aborts. A denied tool the agent still reports
having aborts too, with the arm, agent and tool named. A combination the agent cannot gate
is a refusal, recorded. The checks are written to ``preflight.json`` in the output folder.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Literal

import msgspec

from caisson.agents import adapter
from caisson.model import scripted_model
from caisson.errors import UsageError
from caisson.gating import GatingVerdict, discovered_tools, judge_gating, pick_probe_tool, probe_script
from caisson.resources import resource_dir
from caisson.run import RecordOptions, plan_run
from caisson.run import record
from caisson.scenario import Egress, Scenario, load_scenario
from caisson.run import default_witnesses, default_syscall_witness
from ledger import locate, read_records
from ledger.events import AgentTools, RunStarted

__all__ = ["Check", "PREFLIGHT_FILE", "preflight"]

SCRIPT = resource_dir("scenarios") / "model" / "preflight.toml"
"""The scripted model of a discovery session: it answers once and asks for no tool."""
PREFLIGHT_FILE = "preflight.json"


def preflight_script(model: str) -> str:
    """`SCRIPT`'s text, with the ``models`` it lists set to ``[model]`` (the scenario's)."""
    return f"models = [{json.dumps(model)}]\n" + SCRIPT.read_text()


_PROVIDERS = ("api.anthropic.com", "api.openai.com")
_KEYS = {"ANTHROPIC_API_KEY": "sk-ant-preflight", "OPENAI_API_KEY": "sk-openai-preflight"}  # scripted: no secret


class Check(msgspec.Struct, kw_only=True):
    """One arm x agent: its status (ok | abort | refused), the tools it showed, why.

    Attributes:
        offered: the tools the probe session showed (its reports and its model requests).
        still_denied: denied tools it still showed (the deny list did not take).
        discovered: the tools the agent's discovery session showed, unioned into the deny list.
        gating: what the gating probe measured (None: not probed: refused, or ungated).
    """

    arm: str
    agent: str
    status: Literal["ok", "abort", "refused"]
    offered: list[str] = []
    still_denied: list[str] = []
    discovered: list[str] = []
    gating: GatingVerdict | None = None
    reason: str = ""
    run_dir: str | None = None


def preflight(scenario_path: Path, repo: Path, agents: list[str], *, out: Path | None = None,
              weaken: tuple[str, ...] = ()) -> list[Check]:
    """Run the discovery and probe sessions of every arm x agent; see the module docstring.

    Args:
        scenario_path: the scenario (its first question is the probes' prompt).
        repo: the repository the sandbox is built from.
        agents: adapter names.
        out: where the runs and ``preflight.json`` go, and stay; None: a temporary folder
            (``caisson-preflight-*``), removed at the end whatever happens, and no check
            then names a ``run_dir``.
        weaken: controls the probe sessions weaken on purpose (the selftest's wrong deny list).

    Raises:
        UsageError: the scenario has no question or no arm, or an agent is unknown.
    """
    scenario = load_scenario(scenario_path)
    if not scenario.questions or not scenario.arms:
        raise UsageError(f"{scenario_path}: a preflight needs at least one question and one arm")
    if out is not None:
        return _preflight(scenario_path, scenario, repo, agents, Path(out), weaken)
    root = Path(tempfile.mkdtemp(prefix="caisson-preflight-"))
    try:
        checks = _preflight(scenario_path, scenario, repo, agents, root, weaken)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return [msgspec.structs.replace(c, run_dir=None) for c in checks]


def _preflight(scenario_path: Path, scenario: Scenario, repo: Path, agents: list[str], root: Path,
               weaken: tuple[str, ...]) -> list[Check]:
    root.mkdir(parents=True, exist_ok=True)
    model = scenario.agent.model or "claude-sonnet-4-5"
    checks = []
    for agent in agents:
        spec = adapter(agent)
        base = RecordOptions(command=[], scenario=scenario_path, repo=repo, question=scenario.questions[0].id,
                             agent=agent, env=_KEYS)
        discovered: list[str] = []
        if spec.gating == "enforced":  # a deny list it enforces must name every tool it has
            run_dir = root / f"{agent}--discovery"
            try:
                _session(msgspec.structs.replace(base, out=run_dir), root / "discovery.toml",
                         preflight_script(model))
            except UsageError as exc:
                checks.append(Check(arm="-", agent=agent, status="refused", reason=str(exc)))
                continue
            discovered = _shown(run_dir)
        for arm in scenario.arms:
            run_dir = root / f"{agent}--{arm.name}"
            options = msgspec.structs.replace(base, out=run_dir, arm=arm.name, weaken=list(weaken),
                                              discovered_tools=discovered)
            try:
                plan = plan_run(options, scenario)
                if plan.refusal is not None:  # planned, never started
                    checks.append(Check(arm=arm.name, agent=agent, status="refused", discovered=discovered,
                                        reason=f"refused: {plan.refusal.reason}"))
                    continue
                # a tool the session does not have is refused whatever the deny list: probe one it showed
                present = [t for t in plan.arm.deny if t in discovered] if plan.arm is not None else []
                tool = pick_probe_tool(present)
                text = probe_script(model, tool) if spec.gating == "enforced" and tool else preflight_script(model)
                _session(options, root / f"{agent}--{arm.name}.toml", text)
            except UsageError as exc:
                checks.append(Check(arm=arm.name, agent=agent, status="refused", reason=str(exc)))
                continue
            checks.append(_check(run_dir, arm.name, agent, spec.version, spec.gating, tool, discovered))
    (root / PREFLIGHT_FILE).write_bytes(msgspec.json.format(msgspec.json.encode(checks)) + b"\n")
    return checks


def _session(options: RecordOptions, script: Path, text: str) -> None:
    """Record one session of ``options`` against the scripted model playing ``text``."""
    script.write_text(text)
    with scripted_model(script) as address:
        egress = Egress(allow_hosts=list(_PROVIDERS), upstream={host: f"http://{address}" for host in _PROVIDERS})
        choice = default_syscall_witness(say=lambda line: print(f"caisson preflight: {line}", file=sys.stderr))
        record(msgspec.structs.replace(options, egress=egress, syscall_witness=choice.witness,
                                       syscall_witness_why=choice.why),
               witnesses=default_witnesses(syscall=choice.witness))


def _shown(run_dir: Path) -> list[str]:
    """The tools a recorded session showed (`discovered_tools` over its records and blobs)."""
    _, blobs = locate(run_dir)

    def blob(sha256: str) -> bytes | None:
        try:
            return blobs.get(sha256)
        except OSError:
            return None

    return discovered_tools(list(read_records(run_dir)), blob)


def _check(run_dir: Path, arm: str, agent: str, version: str, claimed, tool: str | None,
           discovered: list[str]) -> Check:
    records = list(read_records(run_dir))
    started = next(r.event for r in records if isinstance(r.event, RunStarted))
    denied = set(started.arm.deny if started.arm else ())
    offered = _shown(run_dir)
    verdict = judge_gating(records, agent=agent, version=version, claimed=claimed, tool=tool)
    facts = {"arm": arm, "agent": agent, "run_dir": str(run_dir), "offered": offered, "discovered": discovered,
             "gating": verdict}
    if not offered and not any(isinstance(r.event, AgentTools) for r in records):
        return Check(**facts, status="abort",
                     reason="the agent showed no tool surface (no report, no model request): its gating cannot"
                            " be verified")
    still = sorted(denied & set(offered))
    if still:
        return Check(**facts, status="abort", still_denied=still,
                     reason=f"arm {arm}, agent {agent}: denied tools still present: {', '.join(still)}")
    if verdict.measured != claimed:
        return Check(**facts, status="abort",
                     reason=f"arm {arm}, agent {agent} {version}: claims {claimed}, measured {verdict.measured}:"
                            f" {verdict.reason}")
    return Check(**facts, status="ok")
