"""The winner gate: the seed's rule, the paired analysis over questions, and the verdict.

For each agent and model, every two arms are compared on the score and, where resolved,
on content tokens (issue #14):

- **Seed rule** (the floor), over each arm's per-repetition figures (repetition r's
  figure: the mean of the metric over the questions of repetition r): the better arm's
  median figure is at least `SEED_RATIO` times the other's (higher is better for the
  score, lower for tokens) and the two arms' min-max ranges do not overlap. With r
  repetitions per arm and no difference, all of one arm's figures beat all of the
  other's with probability 1/C(2r, r): at 3 repetitions a one-sided p of 0.05 per
  comparison, which is why the paired analysis must hold too.
- **Paired analysis**: per question with values in both arms, the log of the ratio of the
  two arms' medians (questions where a median is not positive have no log-ratio and are
  counted, not used); the geometric mean ratio exp(mean); its 95% interval by t on the
  log scale for fewer than `BOOTSTRAP_FROM` questions, else a seeded two-stage bootstrap
  (questions, then repetitions); the exact sign-flip p of the log-ratios, Holm-adjusted
  across every comparison of one agent (all its models, arm pairs and metrics).
- **Verdict**: ``winner`` only when the seed rule and the paired test both hold for the
  same arm (interval wholly on its side of 1 and Holm p < `ALPHA`); otherwise ``tie``,
  qualified ``equivalent`` when the interval lies inside [0.8, 1.25] and ``inconclusive``
  otherwise, with the smallest ratio the design could have detected.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import msgspec

from caisson.report._aggregate import content_tokens
from caisson.report._evidence import default_jobs
from caisson.report._inputs import ReportBaseline, ReportCell
from caisson.report._stats import (
    bootstrap_gmr_interval,
    holm,
    quantile,
    sign_flip_ps,
    smallest_detectable_ratio,
    t_interval,
)

__all__ = ["ALPHA", "BOOTSTRAP_FROM", "EQUIVALENCE", "METRICS", "SEED_RATIO", "Comparison", "compare_arms"]

SEED_RATIO = 1.25
EQUIVALENCE = (0.8, 1.25)
ALPHA = 0.05
BOOTSTRAP_FROM = 20
BOOTSTRAP_RESAMPLES = 2000
METRICS = ("score", "content_tokens")
_HIGHER_IS_BETTER = {"score": True, "content_tokens": False}


class Comparison(msgspec.Struct, kw_only=True):
    """Two arms of one (agent, model) on one metric; ratios are arm_a over arm_b.

    Attributes:
        cells_a, cells_b: clean cells with a value in each arm.
        median_a, median_b: medians of each arm's per-repetition figures (the seed rule's).
        range_a, range_b: (min, max) of the same figures.
        seed_winner: the arm the seed rule picks, or None; ``seed_detail`` says why.
        questions: questions with a defined log-ratio; ``questions_excluded`` with values
            in both arms but a median that is not positive.
        gmr: geometric mean ratio of per-question medians; ``ci_low``/``ci_high`` its 95%
            interval, ``ci_method`` how; ``p`` the sign-flip p, ``p_method``, ``p_holm``.
        paired_winner: the arm the paired test favours at ``ALPHA``, or None.
        verdict: ``winner`` | ``tie``; ``winner`` the arm; ``qualifier`` ``equivalent`` |
            ``inconclusive`` for a tie; ``detectable_ratio`` the smallest ratio (>= 1)
            this design could have detected, or None with ``detectable_detail``.
        withheld: the checklist has a FAIL: the claim is not made; ``label`` says so, or
            marks a claim made anyway (allow_untrusted).
    """

    agent: str
    model: str
    metric: str
    arm_a: str
    arm_b: str
    cells_a: int = 0
    cells_b: int = 0
    median_a: float | None = None
    median_b: float | None = None
    range_a: tuple[float, float] | None = None
    range_b: tuple[float, float] | None = None
    ratio: float | None = None
    seed_winner: str | None = None
    seed_detail: str = ""
    questions: int = 0
    questions_excluded: int = 0
    gmr: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    ci_method: str = ""
    p: float | None = None
    p_method: str = ""
    p_holm: float | None = None
    paired_winner: str | None = None
    verdict: str = "tie"
    winner: str | None = None
    qualifier: str | None = None
    detectable_ratio: float | None = None
    detectable_detail: str = ""
    withheld: bool = False
    label: str = ""


def _values(cells: Sequence[ReportCell], metric: str, floors: dict) -> tuple[dict[str, list[float]], list[float]]:
    """(question id -> the metric's values over the clean cells that have one, and per
    repetition the mean of those values over questions, in repetition order)."""
    out: dict[str, list[float]] = defaultdict(list)
    reps: dict[int, list[float]] = defaultdict(list)
    for cell in cells:
        if cell.status != "clean":
            continue
        if metric == "score":
            value = cell.score
        else:
            value = content_tokens(cell, floors.get((cell.arm, cell.agent, cell.model)))
        if value is not None:
            out[cell.question_id].append(float(value))
            reps[cell.repetition].append(float(value))
    return out, [sum(v) / len(v) for _, v in sorted(reps.items())]


def _ratio(a: float, b: float) -> float | None:
    if b > 0:
        return a / b
    return math.inf if a > 0 else None


def _seed(c: Comparison, a: list[float], b: list[float]) -> None:
    c.median_a, c.median_b = quantile(a, 0.5), quantile(b, 0.5)
    c.range_a, c.range_b = (min(a), max(a)), (min(b), max(b))
    c.ratio = _ratio(c.median_a, c.median_b)
    higher = _HIGHER_IS_BETTER[c.metric]
    better = c.arm_a if (c.median_a >= c.median_b) == higher else c.arm_b
    hi, lo = (c.median_a, c.median_b) if c.median_a >= c.median_b else (c.median_b, c.median_a)
    gap = _ratio(hi, lo)
    separate = c.range_a[0] > c.range_b[1] or c.range_b[0] > c.range_a[1]
    gap_text = "undefined (both medians 0)" if gap is None else f"{gap:.3g}x"
    if gap is not None and gap >= SEED_RATIO and separate:
        c.seed_winner = better
        c.seed_detail = (f"{better} better by {gap_text} (>= {SEED_RATIO}x), min-max ranges of the"
                         f" per-repetition figures do not overlap")
    else:
        why = []
        if gap is None or gap < SEED_RATIO:
            why.append(f"median gap {gap_text} < {SEED_RATIO}x")
        if not separate:
            why.append("min-max ranges of the per-repetition figures overlap")
        c.seed_detail = "; ".join(why)


def _paired(c: Comparison, qa: dict[str, list[float]], qb: dict[str, list[float]]
            ) -> tuple[list[float], list[tuple[list[float], list[float]]]]:
    """The paired analysis but its interval past `BOOTSTRAP_FROM` questions and its p: the
    per-question log-ratios and, for the bootstrap, the questions' values in both arms."""
    shared = sorted(set(qa) & set(qb))
    logs, pairs = [], []
    for q in shared:
        ma, mb = quantile(qa[q], 0.5), quantile(qb[q], 0.5)
        if ma > 0 and mb > 0:
            logs.append(math.log(ma) - math.log(mb))
            pairs.append((qa[q], qb[q]))
        else:
            c.questions_excluded += 1
    c.questions = len(logs)
    if not logs:
        return logs, pairs
    c.gmr = math.exp(math.fsum(logs) / len(logs))
    if len(logs) < BOOTSTRAP_FROM:
        interval = t_interval(logs)
        if interval is not None:
            c.ci_low, c.ci_high = math.exp(interval[1]), math.exp(interval[2])
            c.ci_method = f"t on the log scale, {len(logs) - 1} df"
        else:
            c.ci_method = "one question: no interval"
    return logs, pairs


def _bootstrap(c: Comparison, pairs: list[tuple[list[float], list[float]]], seed: int) -> None:
    low, high, undefined = bootstrap_gmr_interval(pairs, seed=seed, resamples=BOOTSTRAP_RESAMPLES)
    c.ci_low, c.ci_high = (None if math.isnan(low) else low), (None if math.isnan(high) else high)
    c.ci_method = (f"two-stage bootstrap (questions, then repetitions), {BOOTSTRAP_RESAMPLES} resamples,"
                   f" seed {seed}") + (f", {undefined} undefined resamples left out" if undefined else "")


def _verdict(c: Comparison, logs: list[float], comparisons: int) -> None:
    higher = _HIGHER_IS_BETTER[c.metric]
    if c.p_holm is not None and c.p_holm < ALPHA and c.ci_low is not None and c.ci_high is not None:
        if c.ci_low > 1.0:
            c.paired_winner = c.arm_a if higher else c.arm_b
        elif c.ci_high < 1.0:
            c.paired_winner = c.arm_b if higher else c.arm_a
    if c.seed_winner is not None and c.seed_winner == c.paired_winner:
        c.verdict, c.winner = "winner", c.seed_winner
        return
    c.verdict = "tie"
    inside = (c.ci_low is not None and c.ci_high is not None
              and EQUIVALENCE[0] <= c.ci_low and c.ci_high <= EQUIVALENCE[1])
    c.qualifier = "equivalent" if inside else "inconclusive"
    c.detectable_ratio, c.detectable_detail = smallest_detectable_ratio(logs, comparisons)


def _paired_all(tasks: Sequence[tuple[Comparison, dict[str, list[float]], dict[str, list[float]]]],
                seed: int, jobs: int | None = None) -> list[list[float]]:
    """`_paired` of every (comparison, arm a's values, arm b's), in order, with its
    bootstrap interval and its sign-flip p; returns each one's log-ratios.

    The bootstraps and the sign flips run on ``jobs`` threads (None: one a core this
    process may use, `default_jobs`): numpy releases the GIL in their draws, sorts and
    sums. Every comparison has the study's seed, so those with as many questions test their
    log-ratios against one drawing of sign patterns (`sign_flip_ps`), drawn in parts. Each
    bootstrap writes only its own `Comparison` from its own seeded generator: the figures
    are those of a serial run, one comparison after the other
    (tests/caisson/report/test_gate.py compares them)."""
    done = [(c, *_paired(c, qa, qb)) for c, qa, qb in tasks]
    tested = [(c, logs) for c, logs, _ in done if logs]
    booted = [(c, pairs) for c, logs, pairs in done if len(logs) >= BOOTSTRAP_FROM]
    workers = jobs or default_jobs()  # one comparison's sign flips alone can use them all
    if workers <= 1 or not tested:
        for c, pairs in booted:
            _bootstrap(c, pairs, seed)
        ps = sign_flip_ps([logs for _, logs in tested], seed=seed)
    else:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="caisson-gate") as pool:
            running = [pool.submit(_bootstrap, c, pairs, seed) for c, pairs in booted]
            ps = sign_flip_ps([logs for _, logs in tested], seed=seed, executor=pool, parts=workers)
            for future in running:
                future.result()
    for (c, _), (p, method) in zip(tested, ps, strict=True):
        c.p, c.p_method = p, method
    return [logs for _, logs, _ in done]


def compare_arms(cells: Sequence[ReportCell], baselines: Sequence[ReportBaseline], *,
                 seed: int = 0, jobs: int | None = None) -> list[Comparison]:
    """Every two arms of each (agent, model), on each metric with values in both arms.

    Args:
        cells: every planned cell (only clean cells with a value count).
        baselines: the floors (content tokens need them).
        seed: seeds the bootstrap and any Monte Carlo sign flips.
        jobs: threads the comparisons run on; None: one a core (the figures do not depend on it).

    Returns:
        Comparisons sorted by (agent, model, metric, arm_a, arm_b), Holm-adjusted within
        each agent, with their verdicts.
    """
    floors = {(b.arm, b.agent, b.model): b for b in baselines}
    groups: dict[tuple[str, str], dict[str, list[ReportCell]]] = defaultdict(lambda: defaultdict(list))
    for cell in cells:
        groups[(cell.agent, cell.model)][cell.arm].append(cell)
    tasks: list[tuple[Comparison, dict[str, list[float]], dict[str, list[float]]]] = []
    for (agent, model), arms in sorted(groups.items()):
        names = sorted(arms)
        for metric in METRICS:
            values = {arm: _values(arms[arm], metric, floors) for arm in names}
            for i, arm_a in enumerate(names):
                for arm_b in names[i + 1:]:
                    (qa, a), (qb, b) = values[arm_a], values[arm_b]
                    if not a or not b:
                        continue
                    c = Comparison(agent=agent, model=model, metric=metric, arm_a=arm_a, arm_b=arm_b,
                                   cells_a=sum(map(len, qa.values())), cells_b=sum(map(len, qb.values())))
                    _seed(c, a, b)
                    tasks.append((c, qa, qb))
    out = list(zip((c for c, _, _ in tasks), _paired_all(tasks, seed, jobs)))
    by_agent: dict[str, list[Comparison]] = defaultdict(list)
    for c, _ in out:
        by_agent[c.agent].append(c)
    for group in by_agent.values():
        tested = [c for c in group if c.p is not None]
        for c, adjusted in zip(tested, holm([c.p for c in tested]), strict=True):  # type: ignore[misc]
            c.p_holm = adjusted
    for c, logs in out:
        _verdict(c, logs, len([x for x in by_agent[c.agent] if x.p is not None]))
    return [c for c, _ in out]
