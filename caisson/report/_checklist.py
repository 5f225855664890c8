"""The trust checklist, computed: PASS / WARN / FAIL with counts and the cells behind them.

Two parts, in the order a reader needs them (issue #14). *Before trusting a run*: ledgers
verified, containment (the sandbox built and scanned), the isolation assertion, tool
escapes, contamination, host stalls, recorded verdicts (WARN with the cells whose verdict by
today's detectors differs from the one ``cell.ended`` recorded), refusals, token sources, retries (uneven across arms:
a provider confound), token ambiguity, baselines,
the judge's served model (PASS: every judge call served by the model asked for; WARN: no
judge ran, or a call's served model is unknown; FAIL: a substitution, so the verdicts are
another model's), disagreements (WARN with the cells, alarms about the key or the matcher;
also WARN when a reply was unparseable or missing).
*Before publishing*: per-agent separation, enforcement and elicitation stated, winners
through the gate, refusals and limitations stated. A FAIL withholds every winner claim
unless the caller allows an untrusted report (each claim is then labelled).
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from caisson.detectors import same_model
from caisson.report._aggregate import ArmSummary
from caisson.report._gate import Comparison
from caisson.report._inputs import StudyReportInput

__all__ = ["CONTAMINATION", "FAIL", "PASS", "WARN", "CheckItem", "checklist", "limitations"]

PASS, WARN, FAIL = "PASS", "WARN", "FAIL"
CONTAMINATION = ("leak", "excluded_read", "outside_tree", "excluded_attempt", "env_inheritance")
"""Finding kinds that say the cell may have seen what it should not have."""
_SHOWN = 20  # cells listed per item; the count is always whole


class CheckItem(msgspec.Struct, frozen=True, kw_only=True):
    """One checklist line.

    Attributes:
        part: ``trust`` (before trusting a run) or ``publish`` (before publishing).
        name: short identifier, e.g. ``tool_escape``.
        status: PASS | WARN | FAIL.
        count: how many cells (or combinations) the item is about.
        detail: one line.
        cells: the cell ids (or combinations) behind it, at most 20 (``count`` is whole).
    """

    part: str
    name: str
    status: str
    count: int = 0
    detail: str = ""
    cells: list[str] = []


def _item(part: str, name: str, bad: list[str], status_if_bad: str, ok: str, bad_text: str) -> CheckItem:
    if not bad:
        return CheckItem(part=part, name=name, status=PASS, detail=ok)
    return CheckItem(part=part, name=name, status=status_if_bad, count=len(bad), detail=bad_text.format(n=len(bad)),
                     cells=bad[:_SHOWN])


def _combo(arm: str, agent: str, model: str) -> str:
    return f"{agent}/{arm}/{model}"


def checklist(data: StudyReportInput, rows: dict[str, list[ArmSummary]],
              comparisons: Sequence[Comparison]) -> list[CheckItem]:
    """Compute every checklist item from the input, the aggregates and the gate.

    Returns:
        The items, *trust* first, in the module docstring's order.
    """
    ran = [c for c in data.cells if c.status in ("clean", "void")]
    items = [
        _item("trust", "ledgers_verified", [c.cell_id for c in ran if not c.verified], FAIL,
              f"{len(ran)} run cells, every ledger verified", "{n} run cells whose ledger did not verify"),
        _item("trust", "containment", [c.cell_id for c in ran if c.verified and not c.contained], FAIL,
              "every verified cell records its sandbox built and scanned",
              "{n} verified cells without sandbox.built: no evidence the exclusion set was withheld and scanned"),
    ]
    failed = [f"{_combo(b.arm, b.agent, b.model)}: {', '.join(b.denied_present)}"
              for b in data.baselines if b.isolation == "failed"]
    unavailable = [_combo(b.arm, b.agent, b.model) for b in data.baselines if b.isolation == "unavailable"]
    if failed:
        items.append(CheckItem(part="trust", name="isolation", status=FAIL, count=len(failed), cells=failed[:_SHOWN],
                               detail=f"{len(failed)} combinations still offer a denied tool"))
    elif unavailable:
        items.append(CheckItem(part="trust", name="isolation", status=WARN, count=len(unavailable),
                               cells=unavailable[:_SHOWN],
                               detail=f"{len(unavailable)} combinations have no tool audit (unavailable: ungated)"))
    else:
        items.append(CheckItem(part="trust", name="isolation", status=PASS,
                               detail=f"{len(data.baselines)} baselines: no denied tool offered"))
    items += [
        _item("trust", "tool_escape", [c.cell_id for c in ran if "tool_escape" in c.findings], FAIL,
              "no tool ran outside its arm's grant", "{n} cells ran a tool outside the grant (void)"),
        _item("trust", "contamination", [c.cell_id for c in ran if set(c.findings) & set(CONTAMINATION)], WARN,
              "no contamination flag", "{n} cells with a contamination flag (" + ", ".join(CONTAMINATION) + ")"),
        _item("trust", "host_stalled", [c.cell_id for c in ran if "host_stalled" in c.findings], WARN,
              "no host stall", "{n} cells void for a stalled host"),
        _item("trust", "recorded_verdicts", [f"{c.cell_id}: {c.verdict_change}" for c in ran if c.verdict_change],
              WARN, "every run cell's verdict today is the one the study recorded",
              "{n} cells judged otherwise today than when they ran (the live view and status show the recorded"
              " verdict; this report, today's)"),
        CheckItem(part="trust", name="refusals", status=FAIL if any(not r.reason for r in data.refusals) else PASS,
                  count=len(data.refusals),
                  cells=[f"{_combo(r.arm, r.agent, r.model or '-')}: {r.reason or 'NO REASON'}"
                         for r in data.refusals][:_SHOWN],
                  detail=f"{len(data.refusals)} refusals, each with its reason" if all(r.reason for r in data.refusals)
                  else "a refusal without a reason"),
    ]
    mixed = [f"{r.agent}/{r.arm}/{r.model}: {', '.join(r.token_sources)}" for rs in rows.values() for r in rs
             if r.tokens_mixed]
    unmeasured = [c.cell_id for c in ran if c.tokens is None]
    sources = sorted({c.tokens.source for c in ran if c.tokens is not None})
    if mixed:
        items.append(CheckItem(part="trust", name="token_sources", status=WARN, count=len(mixed), cells=mixed[:_SHOWN],
                               detail=f"{len(mixed)} combinations measured with more than one source (not pooled)"
                               + (f"; {len(unmeasured)} cells unmeasured" if unmeasured else "")))
    else:
        items.append(_item("trust", "token_sources", unmeasured, WARN,
                           f"every run cell measured; sources: {', '.join(sources) or 'none'}",
                           "{n} run cells with no token figure (null, never 0)"))
    items.append(_retry_item(rows))
    items += [
        _item("trust", "token_ambiguity", [c.cell_id for c in ran if c.token_ambiguous], WARN,
              "every cell's calls carry at most one session identity",
              "{n} cells whose summed calls carry more than one session identity"),
    ]
    combos = sorted({(c.arm, c.agent, c.model) for c in ran})
    have = {(b.arm, b.agent, b.model): b for b in data.baselines}
    unresolved = [_combo(*k) + (": no baseline" if k not in have else ": floor not measured")
                  for k in combos if k not in have or have[k].floor is None]
    items.append(_item("trust", "baselines", unresolved, WARN, f"{len(combos)} combinations, every floor measured",
                       "{n} combinations without a measured floor (their content tokens are null)"))
    judge = data.judge
    if judge is None:
        items.append(CheckItem(part="trust", name="judge_model", status=WARN, detail="no judge ran: no alarms raised"))
        items.append(CheckItem(part="trust", name="disagreements", status=WARN,
                               detail="no judge ran: disagreements unknown"))
    else:
        # a dated snapshot of the alias asked for is the same model (caisson.detectors.model.same_model)
        other = [m for m in judge.served_models if not same_model(judge.requested_model, m)]
        served = f"requested {judge.requested_model}, served {', '.join(judge.served_models) or 'unknown'}"
        if other:  # the judge's verdicts (and its silence) are another model's: not the judge the study names
            status, detail = FAIL, served + ": substituted; rerun the judge on the requested model"
        elif not judge.served_models or judge.unknown_served:
            status, detail = WARN, served + (f"; {judge.unknown_served} calls with no served model recorded"
                                              if judge.unknown_served else "")
        else:
            status, detail = PASS, served
        items.append(CheckItem(part="trust", name="judge_model", status=status, count=len(other), cells=other,
                               detail=detail))
        unread = (f"; {judge.unparseable} replies unparseable, {judge.errors} calls without a reply"
                  if judge.unparseable or judge.errors else "")
        items.append(_item("trust", "disagreements", [f"{d.cell_id} ({d.question_id})" for d in judge.disagreements],
                           WARN, f"{judge.cells_judged} cells judged, no disagreement" + unread,
                           "{n} disagreements with the deterministic score: alarms about the key or the matcher"
                           + unread))
        if unread and not judge.disagreements:
            items[-1] = msgspec.structs.replace(items[-1], status=WARN)
    pooled = [f"{r.agent}/{r.arm}/{r.model}: gating {r.gating}, elicitation {r.elicitation}" for rs in rows.values()
              for r in rs if r.gating.startswith("mixed(") or r.elicitation.startswith("mixed(")]
    items.append(_item("publish", "per_agent", pooled, FAIL,
                       f"{len(rows)} agents, each in its own table; every row one gating and one elicitation",
                       "{n} rows pool cells gated or asked differently"))
    unstated = [c.cell_id for c in data.cells if not c.gating or not c.elicitation.strip()]
    items.append(_item("publish", "enforcement_elicitation", unstated, FAIL,
                       "gating and elicitation stated for every cell", "{n} cells without gating or elicitation"))
    winners = [c for c in comparisons if c.verdict == "winner"]
    soft = [f"{c.agent}/{c.model}/{c.metric}: {c.winner}" for c in winners
            if any(r.gating != "enforced" for r in rows.get(c.agent, []) if r.model == c.model
                   and r.arm in (c.arm_a, c.arm_b))]
    items.append(_item("publish", "winners_gated", soft, WARN,
                       f"{len(winners)} winners, each through the seed rule and the paired test",
                       "{n} winners between arms whose gating is not enforced"))
    items.append(CheckItem(part="publish", name="refusals_limitations", status=PASS, count=len(data.refusals),
                           detail="refusals and known limitations are printed in this report"))
    return items


UNEVEN_RETRIES = (2.0, 0.25)
"""Arms of one (agent, model) whose retry rates differ by this factor and by at least this
many retries per run cell are uneven (``retries``)."""


def _retry_item(rows: dict[str, list[ArmSummary]]) -> CheckItem:
    """``retries``: arms of one agent and model that retried unevenly (model calls retried in
    the session, and attempts the study ran again, each per run cell). A provider that
    failed more for one arm than another is a confound: time, tokens and even scores then
    measure the provider's bad minutes beside the arm."""
    uneven: list[str] = []
    total = sum(r.retries + r.infra_attempts for rs in rows.values() for r in rs)
    factor, least = UNEVEN_RETRIES
    for agent, rs in rows.items():
        for model in sorted({r.model for r in rs}):
            arms = [r for r in rs if r.model == model and r.run]
            for what, rate in (("in-session retries", lambda r: r.retries / r.run),
                               ("attempts run again", lambda r: r.infra_attempts / r.run)):
                rates = {r.arm: rate(r) for r in arms}
                if len(rates) < 2:
                    continue
                high, low = max(rates.values()), min(rates.values())
                if high - low >= least and high >= factor * low:
                    uneven.append(f"{agent}/{model} {what}: " + ", ".join(f"{a} {v:.2f}/cell"
                                                                          for a, v in sorted(rates.items())))
    return _item("trust", "retries", uneven, WARN,
                 f"retries even across arms ({total} in all)",
                 "{n} agent/model pairs whose arms retried unevenly: a provider confound")


def limitations(data: StudyReportInput, comparisons: Sequence[Comparison]) -> list[str]:
    """The known limitations that apply to this study, one line each."""
    out = []
    ungated = sorted({_combo(b.arm, b.agent, b.model) for b in data.baselines if b.isolation == "unavailable"}
                     | {_combo(c.arm, c.agent, c.model) for c in data.cells if c.gating == "ungated"})
    if ungated:
        out.append(f"no tool audit for ungated agents (tools recorded as unavailable): {', '.join(ungated)}")
    out.append("parity of global instruction files: the sandbox withholds the repository's agent instruction"
               " files; an agent's own global configuration is not compared across agents")
    reps = {}
    measured = [c for c in data.cells if c.status != "refused"]  # a refusal's cells carry no question
    for c in measured:
        key = (c.agent, c.arm, c.model, c.question_id)
        reps[key] = reps.get(key, 0) + 1
    questions = len({c.question_id for c in measured})
    small = [c for c in comparisons if c.verdict == "tie" and c.detectable_ratio is None]
    line = (f"sample size: {questions} questions, {min(reps.values()) if reps else 0}-{max(reps.values()) if reps else 0}"
            " repetitions per cell")
    if small:
        line += f"; {len(small)} comparisons could detect no ratio at all"
    out.append(line)
    if any(c.questions_excluded for c in comparisons):
        out.append("questions whose median is 0 in an arm have no log-ratio and are left out of the paired analysis")
    out.append("cost counts input and output tokens at the study's prices; cache reads and writes are priced out")
    return out
