"""Per-agent aggregates: one row per (arm, model) of one agent, never pooled across agents.

Counts (planned, run, refused, void by reason, scored), score spreads (all questions and
per question kind), token figures by source, content tokens over the floor of the same
(arm, agent, model) and source, cost from the study's prices, pass rates with Wilson
intervals, pass@k and pass^k, and the schema tax between arms of one (agent, model).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence

import msgspec

from caisson.report._inputs import ReportBaseline, ReportCell
from caisson.report._stats import Spread, pass_at_k, pass_hat_k, spread, wilson
from caisson.report._tokens import TokenFigure
from ledger.events import Price

__all__ = ["ArmSummary", "PassK", "Rate", "SchemaTax", "content_tokens", "cell_cost", "schema_tax", "summarize_arms"]

PASS_SCORE = 1.0
"""A cell passes when its score is full marks."""


class Rate(msgspec.Struct, frozen=True, kw_only=True):
    """``k`` of ``n`` with its Wilson 95% interval (None when ``n`` is 0)."""

    k: int
    n: int
    low: float | None = None
    high: float | None = None


class PassK(msgspec.Struct, frozen=True, kw_only=True):
    """pass@k and pass^k averaged over questions with at least ``k`` scored repetitions."""

    k: int
    questions: int
    pass_at_k: float
    pass_hat_k: float


class ArmSummary(msgspec.Struct, frozen=True, kw_only=True):
    """One (agent, arm, model) row of the report; see the module docstring.

    Attributes:
        gating: the cells' gating (``mixed(...)`` when cells disagree).
        void_by_reason: void reason -> cells.
        scored: clean cells with a score; ``score_null`` clean cells without (leak backstop).
        score: spread of the scores; ``by_kind`` the same per question kind.
        token_sources: source -> cells measured with it; ``tokens_unmeasured`` run cells
            with no figure; ``tokens_ambiguous`` cells with several session identities.
        tokens: spread of the clean cells' totals (the cells the scores come from; one
            source only, else None: ``tokens_mixed``).
        floor: the baseline's figure, or None (no baseline or not measured).
        content: spread of the clean cells' content tokens (total - floor, same source).
        content_null: clean cells whose content tokens are null.
        cost_usd: summed over every run cell (void ones spent too) with a price and an
            input/output split, or None; ``cost_cells`` how many cells it covers.
        pass_rate: cells at full score among scored; ``void_rate`` void among run.
        pass_k: pass@k and pass^k for k = 1 and k = the smallest repetition count.
        retries: retried model calls over the run cells (``agent.session``);
            ``infra_attempts`` attempts discarded as infra failures and run again;
            ``compactions`` context compactions reported.
    """

    agent: str
    arm: str
    model: str
    gating: str
    elicitation: str
    planned: int
    run: int
    refused: int
    not_run: int
    void_by_reason: dict[str, int] = {}
    scored: int = 0
    score_null: int = 0
    score: Spread | None = None
    by_kind: dict[str, Spread] = {}
    token_sources: dict[str, int] = {}
    tokens_unmeasured: int = 0
    tokens_ambiguous: int = 0
    tokens_mixed: bool = False
    tokens: Spread | None = None
    floor: TokenFigure | None = None
    content: Spread | None = None
    content_null: int = 0
    cost_usd: float | None = None
    cost_cells: int = 0
    pass_rate: Rate
    void_rate: Rate
    pass_k: list[PassK] = []
    retries: int = 0
    infra_attempts: int = 0
    compactions: int = 0


class SchemaTax(msgspec.Struct, frozen=True, kw_only=True):
    """The floor difference between two arms of one (agent, model): ``floor_b - floor_a``,
    or None with the reason (a floor missing, or floors from different sources)."""

    agent: str
    model: str
    arm_a: str
    arm_b: str
    tokens: int | None = None
    source: str | None = None
    null_reason: str = ""


def content_tokens(cell: ReportCell, baseline: ReportBaseline | None) -> int | None:
    """Cell total minus the floor of the same (arm, agent, model) and source, else None."""
    if cell.tokens is None or baseline is None or baseline.floor is None:
        return None
    if cell.tokens.source != baseline.floor.source:
        return None
    return cell.tokens.total - baseline.floor.total


def cell_cost(cell: ReportCell, prices: Mapping[str, Price]) -> float | None:
    """USD of one cell from the study's price of its model, or None (no price, no split)."""
    price = prices.get(cell.model)
    t = cell.tokens
    if price is None or t is None or t.input is None or t.output is None:
        return None
    return (t.input * price.input_usd_per_mtok + t.output * price.output_usd_per_mtok) / 1_000_000


def _rate(k: int, n: int) -> Rate:
    interval = wilson(k, n)
    return Rate(k=k, n=n, low=interval[0] if interval else None, high=interval[1] if interval else None)


def _pass_k(cells: Sequence[ReportCell]) -> list[PassK]:
    per_question: dict[str, list[float]] = defaultdict(list)
    for cell in cells:
        if cell.status == "clean" and cell.score is not None:
            per_question[cell.question_id].append(cell.score)
    if not per_question:
        return []
    k_max = min(len(v) for v in per_question.values())
    out = []
    for k in sorted({1, k_max}):
        counts = [(len(v), sum(1 for s in v if s >= PASS_SCORE)) for v in per_question.values()]
        out.append(PassK(k=k, questions=len(counts),
                         pass_at_k=sum(pass_at_k(n, c, k) for n, c in counts) / len(counts),
                         pass_hat_k=sum(pass_hat_k(n, c, k) for n, c in counts) / len(counts)))
    return out


def _one(values: Iterable[str]) -> str:
    distinct = sorted(set(values))
    return distinct[0] if len(distinct) == 1 else f"mixed({', '.join(distinct)})" if distinct else ""


def summarize_arms(cells: Sequence[ReportCell], baselines: Sequence[ReportBaseline],
                   prices: Mapping[str, Price]) -> dict[str, list[ArmSummary]]:
    """Aggregate cells per agent, then per (arm, model).

    Args:
        cells: every planned cell.
        baselines: the floors, one per (arm, agent, model).
        prices: the study's prices, model -> price.

    Returns:
        agent -> its rows, sorted by (model, arm); agents sorted.
    """
    floors = {(b.arm, b.agent, b.model): b for b in baselines}
    groups: dict[tuple[str, str, str], list[ReportCell]] = defaultdict(list)
    for cell in cells:
        groups[(cell.agent, cell.model, cell.arm)].append(cell)
    out: dict[str, list[ArmSummary]] = defaultdict(list)
    for (agent, model, arm), group in sorted(groups.items()):
        baseline = floors.get((arm, agent, model))
        ran = [c for c in group if c.status in ("clean", "void")]
        scored = [c for c in ran if c.status == "clean" and c.score is not None]
        kinds: dict[str, list[float]] = defaultdict(list)
        for c in scored:
            kinds[c.question_kind].append(c.score)  # type: ignore[arg-type]
        measured = [c for c in ran if c.tokens is not None]
        sources = Counter(c.tokens.source for c in measured)  # type: ignore[union-attr]
        clean = [c for c in ran if c.status == "clean"]  # spreads over the cells the scores come from
        totals = [c.tokens.total for c in clean if c.tokens is not None]
        contents = [v for v in (content_tokens(c, baseline) for c in clean) if v is not None]
        costs = [v for v in (cell_cost(c, prices) for c in ran) if v is not None]
        void = Counter(c.void_reason or "unknown" for c in ran if c.status == "void")
        out[agent].append(ArmSummary(
            agent=agent, arm=arm, model=model, gating=_one(c.gating for c in group),
            elicitation=_one(c.elicitation for c in group), planned=len(group), run=len(ran),
            refused=sum(c.status == "refused" for c in group), not_run=sum(c.status == "not_run" for c in group),
            void_by_reason=dict(sorted(void.items())), scored=len(scored),
            score_null=sum(c.status == "clean" and c.score is None for c in ran),
            score=spread([c.score for c in scored]),  # type: ignore[misc]
            by_kind={k: spread(v) for k, v in sorted(kinds.items())},  # type: ignore[misc]
            token_sources=dict(sorted(sources.items())), tokens_unmeasured=len(ran) - len(measured),
            tokens_ambiguous=sum(c.token_ambiguous for c in ran), tokens_mixed=len(sources) > 1,
            tokens=spread(totals) if len(sources) == 1 else None,
            floor=baseline.floor if baseline is not None else None,
            content=spread(contents), content_null=len(clean) - len(contents),
            cost_usd=sum(costs) if costs else None, cost_cells=len(costs),
            pass_rate=_rate(sum(c.score >= PASS_SCORE for c in scored), len(scored)),  # type: ignore[operator]
            void_rate=_rate(sum(void.values()), len(ran)), pass_k=_pass_k(group),
            retries=sum(c.retries for c in ran), infra_attempts=sum(c.infra_attempts for c in ran),
            compactions=sum(c.compactions for c in ran)))
    return dict(sorted(out.items()))


def schema_tax(baselines: Sequence[ReportBaseline]) -> list[SchemaTax]:
    """Floor differences between every two arms of one (agent, model), never across them."""
    by_pair: dict[tuple[str, str], list[ReportBaseline]] = defaultdict(list)
    for b in baselines:
        by_pair[(b.agent, b.model)].append(b)
    out = []
    for (agent, model), group in sorted(by_pair.items()):
        group = sorted(group, key=lambda b: b.arm)
        for i, a in enumerate(group):
            for b in group[i + 1:]:
                tax = SchemaTax(agent=agent, model=model, arm_a=a.arm, arm_b=b.arm)
                if a.floor is None or b.floor is None:
                    missing = ", ".join(x.arm for x in (a, b) if x.floor is None)
                    tax = msgspec.structs.replace(tax, null_reason=f"no floor measured for {missing}")
                elif a.floor.source != b.floor.source:
                    tax = msgspec.structs.replace(
                        tax, null_reason=f"floors from different sources: {a.floor.source} vs {b.floor.source}")
                else:
                    tax = msgspec.structs.replace(tax, tokens=b.floor.total - a.floor.total, source=a.floor.source)
                out.append(tax)
    return out
