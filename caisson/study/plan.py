"""The study plan: the matrix of cells and the refusals, pure (no I/O, no clock).

For every (arm, agent, model) the plan computes the deny list its cells hand the agent
(`caisson.agents.deny_list`: every tool the adapter knows minus the arm's grant, plus
what the arm withholds) and the adapter's gating. A combination whose deny list is not
empty on an agent that cannot enforce it is **refused**, with its reason: ``cannot``
for an ``ungated`` agent (its CLI has no way to withhold a tool), ``not_yet`` for a
``not_enforced`` one (it could, no verified mapping yet). Refused combinations get no
cells; the refusal is data, printed by `caisson study plan` and recorded in the study
ledger's ``study.planned``.

The plan's parts are the types ``study.planned`` records (`ledger.events.PlannedCell`,
`Combo`, `Refusal`). Cells are ordered by a seeded shuffle (`Study.order`) so that arms
interleave in time and a drift of the provider or the host does not line up with one arm.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import Literal

import msgspec

from caisson.agents import Adapter, adapter, arm_grant, deny_list, own_arm
from caisson.scenario import Scenario
from caisson.study.studyfile import Study, StudyAgent
from ledger.events import Combo, Endpoint, Gating, PlannedCell, Refusal

__all__ = ["StudyPlan", "plan_study", "cell_id", "combo_id"]

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class StudyPlan(msgspec.Struct, frozen=True, kw_only=True):
    """What a study will run, in order, and what it refuses."""

    study: str
    questions: list[str]
    arms: list[str]
    repetitions: int
    seed: int | None  # the order's seed; None when not shuffled
    combos: list[Combo]
    refusals: list[Refusal]
    cells: list[PlannedCell]  # in run order


def combo_id(arm: str, agent: str, model: str | None) -> str:
    """An (arm, agent, model)'s id: ``arm--agent--model`` (no model part for a command),
    each part made safe for a path."""
    parts = [arm, agent] + ([model] if model else [])
    return "--".join(_UNSAFE.sub("_", p) for p in parts)


def cell_id(arm: str, agent: str, model: str | None, question_id: str, repetition: int) -> str:
    """The cell's id: ``combo_id--question--rN``, safe as a directory name."""
    return f"{combo_id(arm, agent, model)}--{_UNSAFE.sub('_', question_id)}--r{repetition}"


def _combo(study_agent: StudyAgent, arm, model: str | None, cells: int, scenario: Scenario,
           players: Sequence[Adapter] = ()) -> Combo | Refusal:
    """One (agent, arm, model): its combination, or its refusal. ``players``: the study's
    adapters, who share its arms (each is handed only its own tools: `own_arm`, as the
    cell's record derives its deny list)."""
    spec = adapter(study_agent.adapter) if study_agent.adapter is not None else None
    gating: Gating
    if spec is None:
        gating, adapter_name = "ungated", None
        deny = deny_list((), arm_grant(arm, scenario), arm.withhold)
        withhold = list(arm.withhold)
    else:
        gating, adapter_name = spec.gating, spec.name
        grant, withhold = own_arm(arm, scenario, spec, shared_with=players)
        deny = deny_list(spec.static_tools, grant, withhold)
    if deny and gating != "enforced":
        kind: Literal["cannot", "not_yet"] = "cannot" if gating == "ungated" else "not_yet"
        why = ("its CLI has no way to withhold a tool" if kind == "cannot"
               else "it could gate, but no verified flag mapping exists yet")
        return Refusal(arm=arm.name, agent=study_agent.label, model=model, gating=gating, kind=kind, cells=cells,
                       reason=f"arm {arm.name} withholds {', '.join(withhold) or 'nothing by name'} and denies"
                       f" {len(deny)} tool(s) in all; {study_agent.label} is {gating}: {why}")
    return Combo(arm=arm.name, agent=study_agent.label, adapter=adapter_name, model=model, gating=gating,
                 elicitation=study_agent.elicitation, endpoint=study_agent.endpoint or Endpoint(),
                 grant=list(arm.grant),
                 withhold=list(arm.withhold), deny=deny, cells=cells)


def plan_study(study: Study, scenario: Scenario, *, seed: int | None) -> StudyPlan:
    """The matrix and the refusals of a validated study (see the module docstring).

    Args:
        study: the study (validated against ``scenario`` by `load_study`).
        scenario: its scenario.
        seed: the shuffle's seed; ignored (recorded as None) when the study does not shuffle.

    Returns:
        The plan; its cells in run order.

    Raises:
        ValueError: the study shuffles and ``seed`` is None (the caller draws and records it).
    """
    questions = list(study.questions) or [q.id for q in scenario.questions]
    arms = [scenario.arm(name) for name in study.arms] if study.arms else list(scenario.arms)
    per_combo = len(questions) * study.repetitions
    combos: list[Combo] = []
    refusals: list[Refusal] = []
    cells: list[PlannedCell] = []
    players = list({a.adapter: adapter(a.adapter) for a in study.agents if a.adapter}.values())
    for arm in arms:
        for agent in study.agents:
            for model in agent.models or [None]:
                got = _combo(agent, arm, model, per_combo, scenario, players)
                if isinstance(got, Refusal):
                    refusals.append(got)
                    continue
                combos.append(got)
                cells += [PlannedCell(cell_id=cell_id(arm.name, agent.label, model, q, r), arm=arm.name,
                                      agent=agent.label, model=model, question_id=q, repetition=r)
                          for q in questions for r in range(1, study.repetitions + 1)]
    if study.order.shuffle:
        if seed is None:
            raise ValueError("a shuffled study needs a seed (draw one and record it)")
        random.Random(seed).shuffle(cells)
    else:
        seed = None
    return StudyPlan(study=study.name, questions=questions, arms=[a.name for a in arms],
                     repetitions=study.repetitions, seed=seed, combos=combos, refusals=refusals, cells=cells)
