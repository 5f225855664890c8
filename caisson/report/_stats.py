"""The statistics of the report: spreads, intervals, the exact sign-flip test, Holm, pass@k.

Pure functions of numbers (no I/O); seeded where random. Each names its source:

- Quantiles: linear interpolation between order statistics (Hyndman and Fan's type 7,
  numpy's and R's default).
- Student's t quantile: the regularised incomplete beta function by its continued
  fraction (Numerical Recipes, 3rd ed., section 6.4), inverted by bisection.
- Wilson score interval: E. B. Wilson, "Probable inference, the law of succession, and
  statistical inference", JASA 22 (1927).
- Sign-flip permutation test: under the null each paired difference is symmetric about
  0, so each of the 2**n sign patterns is equally likely; p is the share of patterns whose
  |sum| reaches the observed |sum|. Exact by enumeration, meeting in the middle (all sums of
  each half, one sorted) up to `EXACT_SIGN_FLIP_MAX` pairs; a seeded Monte Carlo past it.
- Holm's step-down adjustment: S. Holm, "A simple sequentially rejective multiple test
  procedure", Scand. J. Statist. 6 (1979).
- pass@k, the unbiased estimator 1 - C(n-c, k)/C(n, k): M. Chen et al., "Evaluating
  Large Language Models Trained on Code" (2021); pass^k = C(c, k)/C(n, k): S. Yao et al.,
  "tau-bench" (2024).
- Error bars over questions: E. Miller, "Adding Error Bars to Evals" (2024).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from concurrent.futures import Executor
from statistics import NormalDist
from typing import Any

import msgspec
import numpy as np

__all__ = [
    "EXACT_SIGN_FLIP_MAX",
    "Spread",
    "bootstrap_gmr_interval",
    "holm",
    "pass_at_k",
    "pass_hat_k",
    "quantile",
    "sign_flip_p",
    "sign_flip_ps",
    "smallest_detectable_ratio",
    "spread",
    "t_interval",
    "t_ppf",
    "wilson",
]

EXACT_SIGN_FLIP_MAX = 40
"""Up to this many pairs the sign-flip p is exact (2 x 2**20 sums); past it, Monte Carlo."""


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0 <= q <= 1) of ``values``, type 7 (linear between order statistics).

    Raises:
        ValueError: ``values`` is empty or ``q`` is outside [0, 1].
    """
    if not values:
        raise ValueError("quantile of no values")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile {q} outside [0, 1]")
    xs = sorted(values)
    h = (len(xs) - 1) * q
    lo = math.floor(h)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (h - lo) * (xs[hi] - xs[lo])


class Spread(msgspec.Struct, frozen=True, kw_only=True):
    """Median, min-max and interquartile range of ``n`` values (type 7 quartiles)."""

    median: float
    min: float
    max: float
    q1: float
    q3: float
    n: int


def spread(values: Sequence[float]) -> Spread | None:
    """Median, min-max and interquartile range of ``values``; None when there are none."""
    if not values:
        return None
    return Spread(median=quantile(values, 0.5), min=min(values), max=max(values), q1=quantile(values, 0.25),
                  q3=quantile(values, 0.75), n=len(values))


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b), 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def _t_cdf(t: float, df: float) -> float:
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_ppf(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom.

    Raises:
        ValueError: ``p`` outside (0, 1) or ``df`` not positive.
    """
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError(f"t quantile needs 0 < p < 1 and df > 0, got p={p}, df={df}")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_ppf(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while _t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if _t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-13 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


def t_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float] | None:
    """Mean of ``values`` and its two-sided t interval at ``level``.

    Returns:
        (mean, low, high), or None with fewer than 2 values.
    """
    n = len(values)
    if n < 2:
        return None
    mean = math.fsum(values) / n
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_ppf(0.5 + level / 2.0, n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def wilson(successes: int, trials: int, level: float = 0.95) -> tuple[float, float] | None:
    """Wilson score interval of a rate ``successes / trials``; None when ``trials`` is 0.

    Raises:
        ValueError: counts negative or ``successes > trials``.
    """
    if successes < 0 or trials < 0 or successes > trials:
        raise ValueError(f"wilson needs 0 <= successes <= trials, got {successes}/{trials}")
    if trials == 0:
        return None
    z = NormalDist().inv_cdf(0.5 + level / 2.0)
    p = successes / trials
    denom = 1.0 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    low = 0.0 if successes == 0 else max(0.0, centre - half)  # exact at the ends, not a rounding residue
    high = 1.0 if successes == trials else min(1.0, centre + half)
    return low, high


def _half_sums(values: np.ndarray) -> np.ndarray:
    sums = np.zeros(1)
    for v in values:
        sums = np.concatenate((sums + v, sums - v))
    return sums


def sign_flip_p(diffs: Sequence[float], *, seed: int = 0, resamples: int = 200_000) -> tuple[float, str]:
    """Two-sided sign-flip permutation p of paired differences (statistic: their sum).

    Args:
        diffs: one difference per pair (here: log-ratios per question).
        seed: seeds the Monte Carlo past `EXACT_SIGN_FLIP_MAX` pairs.
        resamples: Monte Carlo sign patterns past that size.

    Returns:
        (p, method): method is ``"exact"`` or ``"monte carlo (N, seed S)"``. With no pairs,
        (1.0, "exact").
    """
    return sign_flip_ps([diffs], seed=seed, resamples=resamples)[0]


_MC_ROWS = 10_000
"""Sign patterns drawn at a time (bounds the memory: 10,000 x n flips)."""


def sign_flip_ps(diff_sets: Sequence[Sequence[float]], *, seed: int = 0, resamples: int = 200_000,
                 executor: Executor | None = None, parts: int = 1) -> list[tuple[float, str]]:
    """`sign_flip_p` of each set of paired differences, every set with the same seed.

    The Monte Carlo's sign patterns depend on the seed and the number of pairs only, so the
    sets with the same number of pairs (past `EXACT_SIGN_FLIP_MAX`) are tested against one
    drawing of them: a study's comparisons share its seed and mostly its questions, and the
    drawing is most of a test's cost. Each p is the one `sign_flip_p` gives its set alone.

    Args:
        diff_sets: the sets of differences, each as `sign_flip_p`'s ``diffs``.
        seed, resamples: as `sign_flip_p`.
        executor: runs the drawing in ``parts`` ranges of rows at once (threads: numpy
            releases the GIL as it draws and sums). Each range's generator is the seed's,
            advanced to the range's first draw (numpy's PCG64 ``advance``; ``Generator.random``
            takes one 64-bit output a number), so every row holds the signs drawn in one go.
        parts: ranges of rows per drawing (with ``executor``).

    Returns:
        One (p, method) per set, in order.
    """
    out: list[tuple[float, str] | None] = [None] * len(diff_sets)
    by_size: dict[int, list[int]] = {}
    jobs: list[tuple[list[int], tuple]] = []  # (the sets a job answers for, the job)
    for i, diffs in enumerate(diff_sets):
        if len(diffs) <= EXACT_SIGN_FLIP_MAX:
            jobs.append(([i], ("exact", diffs)))
        else:
            by_size.setdefault(len(diffs), []).append(i)
    blocks = -(-resamples // _MC_ROWS)
    for n, members in by_size.items():
        tests = [_flip_test(diff_sets[i]) for i in members]
        cut = [blocks * k // max(1, parts) for k in range(max(1, parts) + 1)]
        jobs += [(members, ("drawn", n, tests, first, last)) for first, last in zip(cut, cut[1:]) if first < last]
    run = executor.map if executor is not None and parts > 1 else map
    hits = {i: 0 for members in by_size.values() for i in members}  # (no resamples: no block, no hit)
    for (members, job), found in zip(jobs, run(lambda job: _sign_flip_job(seed, resamples, job), [j for _, j in jobs])):
        if job[0] == "exact":
            out[members[0]] = found
            continue
        for i, h in zip(members, found):
            hits[i] += h
    for i, h in hits.items():
        out[i] = ((h + 1) / (resamples + 1), f"monte carlo ({resamples}, seed {seed})")
    return out  # type: ignore[return-value]


def _sign_flip_job(seed: int, resamples: int, job: tuple) -> Any:
    """One job of `sign_flip_ps`: ("exact", diffs) -> (p, method) (up to 40 pairs: 2 x
    2**20 sums, a fair share of a second); ("drawn", n, tests, first, last) -> hits."""
    if job[0] == "exact":
        return _exact_sign_flip_p(job[1])
    return _flip_hits(seed, resamples, *job[1:])


def _observed(diffs: Sequence[float]) -> tuple[np.ndarray, float, float]:
    """(|differences|, |their sum|, the rounding tolerance within which a flipped |sum| counts
    as reaching it: ties within rounding count, as scipy's)."""
    d = np.asarray(diffs, dtype=float)
    observed = abs(float(np.sum(d)))
    return np.abs(d), observed, 100 * np.finfo(float).eps * observed


def _exact_sign_flip_p(diffs: Sequence[float]) -> tuple[float, str]:
    d, observed, tol = _observed(diffs)
    n = len(d)
    if n == 0:
        return 1.0, "exact"
    left, right = _half_sums(d[: n // 2]), np.sort(_half_sums(d[n // 2:]))
    # count pairs with left + right >= observed - tol, or <= -observed + tol
    upper = len(right) - np.searchsorted(right, observed - tol - left, side="left")
    lower = np.searchsorted(right, -observed + tol - left, side="right")
    hits = int(np.sum(upper)) + int(np.sum(lower))
    if observed <= tol:  # every pattern reaches |sum| >= 0
        hits = 2 ** n
    return min(1.0, hits / 2 ** n), "exact"


def _flip_test(diffs: Sequence[float]) -> tuple[np.ndarray, float, float]:
    """(|differences|, their sum, the threshold a flipped |sum| must reach)."""
    d, observed, tol = _observed(diffs)
    return d, float(np.sum(d)), observed - tol


def _flip_hits(seed: int, resamples: int, n: int, tests: list[tuple[np.ndarray, float, float]],
               first: int, last: int) -> list[int]:
    """Patterns of blocks ``first`` to ``last`` (of `_MC_ROWS` rows) whose flipped |sum| reaches
    each test's threshold."""
    bits = np.random.PCG64(seed)  # np.random.default_rng(seed)'s generator
    bits.advance(first * _MC_ROWS * n)
    rng = np.random.Generator(bits)
    hits = [0] * len(tests)
    for start in range(first * _MC_ROWS, min(last * _MC_ROWS, resamples), _MC_ROWS):
        flips = rng.random((min(_MC_ROWS, resamples - start), n)) < 0.5  # each sign flipped with probability 1/2
        for j, (d, total, threshold) in enumerate(tests):
            # the flipped sums by einsum's own loop, not a BLAS product: OpenBLAS's threads cost
            # several times the product's CPU time on a busy host (measured: 0.2 s a comparison
            # against 0.04), and its kernels sum in a machine-dependent order (the tolerance
            # absorbs the rounding either way)
            hits[j] += int(np.sum(np.abs(total - 2.0 * np.einsum("ij,j->i", flips, d)) >= threshold))
    return hits


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def _row_medians(x: np.ndarray) -> np.ndarray:
    """``np.median(x, axis=1)``, the same numbers, by sorting the rows: numpy's median
    partitions each short row at about twice the cost (a row with a NaN: numpy's)."""
    n = x.shape[1]
    if np.isnan(x).any():
        return np.median(x, axis=1)
    s = np.sort(x, axis=1)
    return s[:, n // 2] if n % 2 else (s[:, n // 2 - 1] + s[:, n // 2]) / 2.0


def bootstrap_gmr_interval(pairs: Sequence[tuple[Sequence[float], Sequence[float]]], *, seed: int,
                           resamples: int = 2000, level: float = 0.95) -> tuple[float, float, int]:
    """Two-stage bootstrap interval of the geometric mean ratio of per-question medians.

    Stage one resamples questions with replacement; stage two resamples each chosen
    question's repetitions, for each arm, with replacement; each resample's statistic is
    exp(mean over questions of log(median a / median b)). Percentile interval, each end
    the order statistic just outside its tail (numpy's ``lower``/``higher`` methods).

    Args:
        pairs: per question, (arm a's repetition values, arm b's), each non-empty.
        seed: the generator's seed (numpy PCG64).
        resamples: bootstrap resamples.
        level: interval coverage.

    Returns:
        (low, high, undefined): ``undefined`` counts resamples whose statistic was not a
        number (a resampled median of 0 against 0), left out of the percentiles; when
        they outnumber one tail's share of the resamples, low and high are NaN (no
        interval can be formed).

    Raises:
        ValueError: no pairs, or a question with no values in an arm.
    """
    if not pairs or any(len(a) == 0 or len(b) == 0 for a, b in pairs):
        raise ValueError("bootstrap needs at least one question with values in both arms")
    rng = np.random.default_rng(seed)
    n = len(pairs)
    chosen = rng.integers(0, n, size=(resamples, n))
    logs = np.empty((resamples, n))
    arrays = [(np.asarray(a, dtype=float), np.asarray(b, dtype=float)) for a, b in pairs]
    with np.errstate(divide="ignore", invalid="ignore"):
        for i, (a, b) in enumerate(arrays):
            mask = chosen == i
            k = int(mask.sum())
            if not k:
                continue
            med_a = _row_medians(a[rng.integers(0, len(a), size=(k, len(a)))])
            med_b = _row_medians(b[rng.integers(0, len(b), size=(k, len(b)))])
            logs[mask] = np.log(med_a) - np.log(med_b)
        stats = np.mean(logs, axis=1)
    finite = stats[~np.isnan(stats)]
    undefined = resamples - len(finite)
    if undefined > resamples * (1.0 - level) / 2.0:  # more missing than a tail holds: no interval
        return math.nan, math.nan, undefined
    tail = (1.0 - level) / 2.0 * 100.0
    # the order statistics just outside each tail (conservative, and no interpolation
    # between infinite statistics: a resampled median of 0 gives a log-ratio of -inf or inf)
    low = np.percentile(finite, tail, method="lower")
    high = np.percentile(finite, 100.0 - tail, method="higher")
    return float(np.exp(low)), float(np.exp(high)), undefined


def smallest_detectable_ratio(log_ratios: Sequence[float], comparisons: int = 1, *, alpha: float = 0.05,
                              power: float = 0.8) -> tuple[float | None, str]:
    """The smallest geometric mean ratio this design could have detected.

    exp((t[1 - alpha/2] + t[power]) * sd / sqrt(n)) on the log scale, n - 1 degrees of
    freedom, the usual paired-design minimum detectable effect. None when the sign-flip
    test cannot reach ``alpha`` at all: its smallest two-sided p is 2 / 2**n, times the
    ``comparisons`` Holm may multiply it by.

    Returns:
        (ratio or None, one line saying how it was found).
    """
    n = len(log_ratios)
    if n < 2:
        return None, f"{n} question(s) with a defined log-ratio: nothing detectable"
    if comparisons * 2.0 / 2 ** n >= alpha:
        return None, (f"{n} questions: the sign-flip test's smallest p ({comparisons} x 2/2^{n}) cannot"
                      f" reach {alpha}")
    mean = math.fsum(log_ratios) / n
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in log_ratios) / (n - 1))
    k = t_ppf(1.0 - alpha / 2.0, n - 1) + t_ppf(power, n - 1)
    return math.exp(k * sd / math.sqrt(n)), (f"exp((t[{1 - alpha / 2:g}] + t[{power:g}]) x sd / sqrt(n)),"
                                             f" n={n}, sd={sd:.3g}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of ``k`` draws (without replacement) of ``n`` attempts,
    ``c`` of them passing, passes: 1 - C(n-c, k) / C(n, k).

    Raises:
        ValueError: not 0 <= c <= n and 1 <= k <= n.
    """
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Probability that all ``k`` draws pass (tau-bench's pass^k): C(c, k) / C(n, k).

    Raises:
        ValueError: not 0 <= c <= n and 1 <= k <= n.
    """
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass^k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    return math.comb(c, k) / math.comb(n, k)
