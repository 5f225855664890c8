"""The report's statistics against scipy's on the same numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st

from caisson.report._stats import (
    bootstrap_gmr_interval,
    holm,
    pass_at_k,
    pass_hat_k,
    quantile,
    sign_flip_p,
    smallest_detectable_ratio,
    spread,
    t_interval,
    t_ppf,
    wilson,
)

floats = st.floats(min_value=-5, max_value=5, allow_nan=False, allow_infinity=False)


@pytest.mark.parametrize("df", [1, 2, 3, 5, 9, 18, 19, 60])
@pytest.mark.parametrize("p", [0.6, 0.8, 0.9, 0.975, 0.995, 0.025])
def test_t_quantile_matches_scipy(df, p):
    assert t_ppf(p, df) == pytest.approx(scipy.stats.t.ppf(p, df), rel=1e-10, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.lists(floats, min_size=2, max_size=25))
def test_t_interval_matches_scipy(values):
    mean, low, high = t_interval(values)
    if np.std(values) == 0:
        assert low == pytest.approx(mean) and high == pytest.approx(mean)
        return
    ref = scipy.stats.ttest_1samp(values, 0.0).confidence_interval(0.95)
    assert (low, high) == (pytest.approx(ref.low, abs=1e-9), pytest.approx(ref.high, abs=1e-9))


@pytest.mark.parametrize(("k", "n"), [(0, 1), (0, 10), (3, 10), (10, 10), (7, 20), (1, 300), (150, 300)])
def test_wilson_matches_scipy(k, n):
    ref = scipy.stats.binomtest(k, n).proportion_ci(0.95, method="wilson")
    low, high = wilson(k, n)
    assert (low, high) == (pytest.approx(ref.low, abs=1e-12), pytest.approx(ref.high, abs=1e-12))
    assert wilson(0, 0) is None


@settings(max_examples=40, deadline=None)
@given(st.lists(floats, min_size=2, max_size=12))
def test_exact_sign_flip_p_matches_scipy(diffs):
    ref = scipy.stats.permutation_test((np.array(diffs),), np.sum, permutation_type="samples",
                                       n_resamples=np.inf, alternative="two-sided").pvalue
    p, method = sign_flip_p(diffs)
    assert method == "exact"
    assert p == pytest.approx(ref, abs=1e-12)


def test_sign_flip_meets_in_the_middle_up_to_40_pairs_and_samples_past_it():
    rng = np.random.default_rng(3)
    diffs = rng.normal(0.15, 0.4, 18)
    p, method = sign_flip_p(list(diffs))
    patterns = 1 - 2 * ((np.arange(2 ** 18)[:, None] >> np.arange(18)) & 1)  # every sign pattern, by brute force
    ref = np.mean(np.abs(patterns @ diffs) >= abs(diffs.sum()) * (1 - 1e-12))
    assert method == "exact" and p == pytest.approx(ref, abs=1e-12)
    many = list(rng.normal(0.05, 0.4, 45))
    p, method = sign_flip_p(many, seed=5)
    assert method == "monte carlo (200000, seed 5)"
    ref = scipy.stats.permutation_test((np.array(many),), np.sum, permutation_type="samples", n_resamples=50_000,
                                       rng=np.random.default_rng(9)).pvalue
    assert p == pytest.approx(ref, abs=0.01)
    assert sign_flip_p(many, seed=5) == sign_flip_p(many, seed=5)


def test_sign_flip_extremes():
    assert sign_flip_p([]) == (1.0, "exact")
    assert sign_flip_p([0.0, 0.0]) == (1.0, "exact")
    assert sign_flip_p([0.3] * 6)[0] == pytest.approx(2 / 64)


def test_holm_matches_a_worked_example():
    # Holm (1979): sorted p 0.01, 0.02, 0.03, 0.04 with m = 4 -> 0.04, 0.06, 0.06, 0.06 (monotone)
    assert holm([0.03, 0.01, 0.04, 0.02]) == pytest.approx([0.06, 0.04, 0.06, 0.06])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []


@settings(max_examples=50, deadline=None)
@given(st.lists(floats, min_size=1, max_size=30), st.floats(min_value=0, max_value=1))
def test_quantile_is_numpy_linear(values, q):
    assert quantile(values, q) == pytest.approx(float(np.percentile(values, q * 100)), abs=1e-9)
    s = spread(values)
    assert s.q3 - s.q1 == pytest.approx(scipy.stats.iqr(values), abs=1e-9)


@pytest.mark.parametrize(("n", "c", "k"), [(3, 0, 1), (3, 1, 1), (3, 2, 2), (5, 5, 3), (10, 4, 5), (10, 9, 10)])
def test_pass_at_k_and_pass_hat_k(n, c, k):
    assert pass_at_k(n, c, k) == pytest.approx(1 - scipy.special.comb(n - c, k, exact=True) / scipy.special.comb(n, k))
    assert pass_hat_k(n, c, k) == pytest.approx(scipy.special.comb(c, k, exact=True) / scipy.special.comb(n, k))
    with pytest.raises(ValueError):
        pass_at_k(n, c, n + 1)


def test_bootstrap_interval_is_seeded_and_covers_the_estimate():
    rng = np.random.default_rng(1)
    pairs = [(list(1.3 * x * rng.uniform(0.9, 1.1, 3)), list(x * rng.uniform(0.9, 1.1, 3)))
             for x in rng.uniform(0.2, 1.0, 25)]
    low, high, undefined = bootstrap_gmr_interval(pairs, seed=11)
    assert (low, high, undefined) == bootstrap_gmr_interval(pairs, seed=11)
    assert undefined == 0 and low < 1.3 < high and high / low < 1.2
    assert bootstrap_gmr_interval(pairs, seed=12) != (low, high, undefined)
    with pytest.raises(ValueError):
        bootstrap_gmr_interval([([], [1.0])], seed=0)


def test_bootstrap_with_zero_medians_is_conservative_or_absent():
    # one question in five can resample to 0 in arm b: -inf/inf statistics, never interpolated into NaN
    pairs = [([1.0, 1.0, 1.0], [0.5, 0.5, 0.6])] * 4 + [([1.0, 1.0, 1.0], [0.0, 0.5, 0.5])]
    low, high, undefined = bootstrap_gmr_interval(pairs * 5, seed=2)
    assert undefined == 0 and 1.0 < low and math.isfinite(low) and high == math.inf
    low, high, undefined = bootstrap_gmr_interval([([0.0, 1.0, 1.0], [1.0, 1.0, 0.0])] * 25, seed=1)
    assert math.isnan(low) and math.isnan(high) and undefined > 50


def test_smallest_detectable_ratio():
    ratio, how = smallest_detectable_ratio([0.1, -0.1, 0.2, 0.0, 0.05, -0.05, 0.15, 0.1])
    sd = float(np.std([0.1, -0.1, 0.2, 0.0, 0.05, -0.05, 0.15, 0.1], ddof=1))
    expected = math.exp((scipy.stats.t.ppf(0.975, 7) + scipy.stats.t.ppf(0.8, 7)) * sd / math.sqrt(8))
    assert ratio == pytest.approx(expected) and "n=8" in how
    assert smallest_detectable_ratio([0.1] * 5)[0] is None  # 2/2^5 > 0.05: the sign-flip test cannot reach it
    assert smallest_detectable_ratio([0.1, 0.2, 0.3, 0.1, 0.2, 0.3], comparisons=2)[0] is None  # 2 x 2/64 > 0.05
