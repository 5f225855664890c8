"""Gating: whether an agent enforces the tool restrictions an arm puts on it (its deny list).

An agent's gating is one of ``enforced`` (its deny list holds), ``not_enforced`` (it could
gate, but no verified mapping yet, or a probe saw a denied tool run) and ``ungated`` (it
cannot withhold tools); an arm that denies anything runs only on an ``enforced`` agent.
Where each part lives:

- the claim: each adapter's ``GATING`` (`caisson.agents`), with its deny-list mapping;
- the vocabulary: the ``Gating`` literal and the ``gating_*`` fields of ``baseline.measured``
  (`ledger.events`);
- the measurement, here: tool discovery (`caisson.gating.discovery`) and the probe, its
  tool, model script and verdict (`caisson.gating.probe`);
- the sessions that run it: `caisson preflight` (`caisson.probes.preflight`), a study's
  preflight (`caisson.study.runner`), the selftest's agent cases (`caisson.probes.selftest`);
- its consequences: the plan's refusal of an arm the agent cannot gate (`caisson.run.plan`,
  `caisson.study.plan`), the report's gating column and checklist (`caisson.report`).

docs/architecture.md ("Gating, measured") states the rules.
"""

from caisson.gating.discovery import discovered_tools, request_tools
from caisson.gating.probe import GatingVerdict, judge_gating, pick_probe_tool, probe_script, verdict_fields

__all__ = ["GatingVerdict", "discovered_tools", "judge_gating", "pick_probe_tool", "probe_script", "request_tools",
           "verdict_fields"]
