"""The report's faster statistics give the very numbers of the straightforward ones.

`sign_flip_p`'s Monte Carlo sums the flipped signs with einsum (no BLAS threads) and
`bootstrap_gmr_interval` takes its medians by sorting rows; the references below are the
implementations they replaced (numpy's bool @ float product through BLAS, `np.median`),
kept verbatim so that a report of the same study gives the same p-values and intervals as
before (the sums may differ in the last bit; the p-values may not).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from caisson.report._stats import bootstrap_gmr_interval, sign_flip_p


def reference_monte_carlo(diffs, *, seed=0, resamples=200_000):
    d = np.abs(np.asarray(diffs, dtype=float))
    n = len(d)
    observed = abs(float(np.sum(np.asarray(diffs, dtype=float))))
    tol = 100 * np.finfo(float).eps * observed
    rng = np.random.default_rng(seed)
    hits = 0
    total = float(np.sum(d))
    for start in range(0, resamples, 10_000):
        flips = rng.random((min(10_000, resamples - start), n)) < 0.5
        hits += int(np.sum(np.abs(total - 2.0 * (flips @ d)) >= observed - tol))
    return (hits + 1) / (resamples + 1), f"monte carlo ({resamples}, seed {seed})"


def reference_bootstrap(pairs, *, seed, resamples=2000, level=0.95):
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
            med_a = np.median(a[rng.integers(0, len(a), size=(k, len(a)))], axis=1)
            med_b = np.median(b[rng.integers(0, len(b), size=(k, len(b)))], axis=1)
            logs[mask] = np.log(med_a) - np.log(med_b)
        stats = np.mean(logs, axis=1)
    finite = stats[~np.isnan(stats)]
    undefined = resamples - len(finite)
    if undefined > resamples * (1.0 - level) / 2.0:
        return math.nan, math.nan, undefined
    tail = (1.0 - level) / 2.0 * 100.0
    low = np.percentile(finite, tail, method="lower")
    high = np.percentile(finite, 100.0 - tail, method="higher")
    return float(np.exp(low)), float(np.exp(high)), undefined


def diffs_cases():
    rng = np.random.default_rng(7)
    yield list(rng.normal(0.05, 0.2, 50))
    yield list(rng.normal(0.0, 1.0, 41))
    yield list(rng.normal(0.3, 0.1, 73))
    yield [0.1] * 30 + [-0.1] * 30  # a sum of 0: every pattern reaches it
    yield [0.2] * 45  # one value: the sums land on a lattice, ties at the threshold
    yield list(np.round(rng.normal(0, 0.5, 60), 1))  # ties within the differences
    yield [0.0] * 20 + list(rng.normal(0.1, 0.3, 25))


@pytest.mark.parametrize("diffs", list(diffs_cases()))
@pytest.mark.parametrize("seed", [0, 3])
def test_monte_carlo_sign_flip_is_the_reference(diffs, seed):
    assert sign_flip_p(diffs, seed=seed, resamples=30_000) == reference_monte_carlo(diffs, seed=seed,
                                                                                     resamples=30_000)


def pairs_cases():
    rng = np.random.default_rng(3)
    for reps in (1, 2, 3, 4, 10, 11):  # odd and even repetition counts
        yield [(list(rng.integers(800, 1400, reps).astype(float)), list(rng.integers(700, 1500, reps).astype(float)))
               for _ in range(30)]
    yield [([1.0, 1.0, 1.0], [0.5, 0.5, 0.6])] * 20 + [([1.0, 1.0, 1.0], [0.0, 0.5, 0.5])] * 5  # zeros: inf
    yield [([0.0, 1.0, 1.0], [1.0, 1.0, 0.0])] * 25  # 0 against 0: undefined resamples
    yield [([1.0, 2.0], [math.nan, 3.0])] * 20  # a NaN: numpy's median says NaN
    yield [(list(rng.uniform(0, 1, int(r))), list(rng.uniform(0, 1, int(s))))
           for r, s in rng.integers(1, 12, (40, 2))]  # ragged repetitions


@pytest.mark.parametrize("pairs", list(pairs_cases()))
@pytest.mark.parametrize("seed", [0, 11])
def test_bootstrap_is_the_reference(pairs, seed):
    got, want = bootstrap_gmr_interval(pairs, seed=seed), reference_bootstrap(pairs, seed=seed)
    assert got[2] == want[2]
    assert got[:2] == want[:2] or (all(map(math.isnan, got[:2])) and all(map(math.isnan, want[:2])))


def test_monte_carlo_sign_flip_at_the_gates_resample_count_is_the_reference():
    diffs = list(np.random.default_rng(5).normal(0.02, 0.3, 50))
    assert sign_flip_p(diffs, seed=9) == reference_monte_carlo(diffs, seed=9)


@pytest.mark.parametrize("parts", [1, 2, 3, 7])
@pytest.mark.parametrize("resamples", [30_000, 25_000])
def test_sign_flips_drawn_once_for_many_sets_and_in_parts_give_each_sets_own_p(parts, resamples):
    """The sets with the same number of pairs share one drawing of the sign patterns, drawn
    in ranges of rows on threads (each from the seed's generator advanced to its first row):
    every p is the one the set gets alone, drawn in one go."""
    from concurrent.futures import ThreadPoolExecutor

    from caisson.report._stats import sign_flip_ps

    sets = list(diffs_cases()) + [list(np.random.default_rng(1).normal(0.1, 0.3, 50)), [0.2, -0.1, 0.3], []]
    want = [reference_monte_carlo(d, seed=4, resamples=resamples) if len(d) > 40 else sign_flip_p(d, seed=4)
            for d in sets]
    with ThreadPoolExecutor(max_workers=3) as pool:
        assert sign_flip_ps(sets, seed=4, resamples=resamples, executor=pool, parts=parts) == want
    assert sign_flip_ps(sets, seed=4, resamples=resamples) == want
    assert sign_flip_ps([], seed=4) == []


def test_no_resamples_gives_the_monte_carlo_p_of_no_pattern():
    """With no resample there is no block to draw: p is (0 + 1) / (0 + 1), as before."""
    from caisson.report._stats import sign_flip_ps

    assert sign_flip_p([0.1] * 41, resamples=0) == (1.0, "monte carlo (0, seed 0)")
    assert sign_flip_ps([[0.1] * 41, [0.2] * 3], resamples=0) == [(1.0, "monte carlo (0, seed 0)"),
                                                                 sign_flip_p([0.2] * 3)]
