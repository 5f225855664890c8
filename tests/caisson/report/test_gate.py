"""Playbooks of the winner gate: hand-made cells in, exact verdicts out."""

from __future__ import annotations

import msgspec
import pytest

from caisson.report import build_report
from caisson.report._gate import compare_arms
from tests.caisson.report.study import baselines, cells, study


def _score(comparisons):
    return next(c for c in comparisons if c.metric == "score")


def test_a_gap_of_1_3x_with_separated_spread_on_every_question_of_a_large_set_is_a_winner():
    cs = (cells("ag", "lean", 24, 3, lambda q, r: 0.65 + 0.01 * r)
          + cells("ag", "rich", 24, 3, lambda q, r: 0.50 + 0.01 * r))
    c = _score(compare_arms(cs, baselines("ag", ["lean", "rich"])))
    assert (c.verdict, c.winner, c.seed_winner, c.paired_winner) == ("winner", "lean", "lean", "lean")
    assert c.questions == 24 and c.ci_method.startswith("two-stage bootstrap")
    assert c.ci_low > 1.0 and c.p_holm < 0.05


def test_the_seed_rule_compares_per_repetition_figures_not_cells_of_unequal_questions():
    # questions range from hard to easy; each is 1.3x better in lean: the cells' own ranges
    # overlap widely, the per-repetition figures (means over the questions) do not
    def lean(q, r):
        return 1.3 * (0.2 + 0.02 * q) + 0.001 * r

    cs = cells("ag", "lean", 24, 3, lean) + cells("ag", "rich", 24, 3, lambda q, r: 0.2 + 0.02 * q + 0.001 * r)
    c = _score(compare_arms(cs, []))
    assert c.range_a[0] > c.range_b[1] and c.ratio == pytest.approx(1.3, rel=0.01)
    assert (c.verdict, c.winner) == ("winner", "lean")


def test_a_gap_of_1_3x_with_overlapping_spread_is_never_a_winner():
    # medians 0.65 vs 0.50 on every question, but in repetition 2 each arm reaches into the
    # other's range: per-repetition figures lean (0.65, 0.65, 0.45), rich (0.50, 0.50, 0.70)
    cs = (cells("ag", "lean", 24, 3, lambda q, r: 0.45 if r == 2 else 0.65)
          + cells("ag", "rich", 24, 3, lambda q, r: 0.70 if r == 2 else 0.50))
    c = _score(compare_arms(cs, baselines("ag", ["lean", "rich"])))
    assert c.ratio == pytest.approx(1.3)
    assert [*c.range_a, *c.range_b] == pytest.approx([0.45, 0.65, 0.50, 0.70])
    assert c.seed_winner is None and "ranges of the per-repetition figures overlap" in c.seed_detail
    assert (c.verdict, c.winner) == ("tie", None)


def test_a_gap_of_1_2x_is_never_a_winner_however_clean():
    cs = (cells("ag", "lean", 40, 5, lambda q, r: 0.60 + 0.001 * r)
          + cells("ag", "rich", 40, 5, lambda q, r: 0.50 + 0.001 * r))
    c = _score(compare_arms(cs, baselines("ag", ["lean", "rich"])))
    assert c.ratio == pytest.approx(1.2, rel=1e-3) and c.paired_winner == "lean"
    assert c.seed_winner is None and c.seed_detail.startswith("median gap 1.2x < 1.25x")
    # the interval (about 1.2) lies inside [0.8, 1.25]: equivalent, as the issue defines it
    assert (c.verdict, c.qualifier) == ("tie", "equivalent")


def test_a_clean_1_3x_gap_on_too_few_questions_is_an_inconclusive_tie():
    cs = (cells("ag", "lean", 5, 3, lambda q, r: 0.65 + 0.01 * r)
          + cells("ag", "rich", 5, 3, lambda q, r: 0.50 + 0.01 * r))
    c = _score(compare_arms(cs, baselines("ag", ["lean", "rich"])))
    assert c.seed_winner == "lean" and c.p == pytest.approx(2 / 32) and c.ci_method == "t on the log scale, 4 df"
    assert (c.verdict, c.qualifier, c.detectable_ratio) == ("tie", "inconclusive", None)
    assert "cannot reach 0.05" in c.detectable_detail


def test_equal_arms_are_an_equivalent_tie_with_a_detectable_ratio():
    wobble = (0.0, 0.02, -0.02, 0.01, -0.01, 0.03, -0.03, 0.0)
    cs = (cells("ag", "lean", 8, 3, lambda q, r: 0.7 + wobble[(q + r) % 8])
          + cells("ag", "rich", 8, 3, lambda q, r: 0.7 + wobble[(q + 2 * r + 1) % 8]))
    c = _score(compare_arms(cs, baselines("ag", ["lean", "rich"])))
    assert (c.verdict, c.qualifier) == ("tie", "equivalent")
    assert 0.8 <= c.ci_low <= 1.0 <= c.ci_high <= 1.25 and c.detectable_ratio > 1.0


def test_content_tokens_lower_is_better_and_use_the_floor():
    # content tokens 1000 vs 1350 (floor 1000 subtracted): lean spends 1.35x less
    cs = (cells("ag", "lean", 24, 3, lambda q, r: 1000 + 10 * r, metric="tokens")
          + cells("ag", "rich", 24, 3, lambda q, r: 1350 + 10 * r, metric="tokens"))
    c = next(c for c in compare_arms(cs, baselines("ag", ["lean", "rich"])) if c.metric == "content_tokens")
    assert (c.median_a, c.median_b) == (1010, 1360)
    assert (c.verdict, c.winner) == ("winner", "lean")


def test_holm_adjusts_across_every_comparison_of_one_agent_only():
    def arms(agent, n_arms):
        out = []
        for k in range(n_arms):
            out += cells(agent, f"arm{k}", 7, 3, lambda q, r, k=k: 0.3 + 0.2 * k + 0.01 * r)
        return out
    comps = compare_arms(arms("one", 3) + arms("two", 2), [])
    one = [c for c in comps if c.agent == "one"]
    two = [c for c in comps if c.agent == "two"]
    assert len(one) == 3 and len(two) == 1  # no floors: content tokens are not compared
    assert all(c.p == pytest.approx(2 / 128) for c in comps)
    assert [c.p_holm for c in one] == pytest.approx([3 * 2 / 128] * 3)
    assert two[0].p_holm == pytest.approx(2 / 128)


def test_questions_with_a_zero_median_are_counted_and_left_out():
    cs = (cells("ag", "lean", 6, 3, lambda q, r: 0.0 if q == 0 else 0.65 + 0.01 * r)
          + cells("ag", "rich", 6, 3, lambda q, r: 0.50 + 0.01 * r))
    c = _score(compare_arms(cs, []))
    assert (c.questions, c.questions_excluded) == (5, 1)


def test_a_winner_is_withheld_on_a_checklist_fail_unless_untrusted_is_allowed():
    cs = (cells("ag", "lean", 24, 3, lambda q, r: 0.65 + 0.01 * r)
          + cells("ag", "rich", 24, 3, lambda q, r: 0.50 + 0.01 * r))
    base = baselines("ag", ["lean", "rich"])
    base[0] = msgspec.structs.replace(base[0], isolation="failed", denied_present=("Bash",))
    report = build_report(study(cs, base))
    c = _score(report.agents[0].comparisons)
    assert not report.trusted
    assert (c.verdict, c.winner, c.withheld) == ("withheld", None, True)
    assert c.label == "withheld: trust checklist FAIL (isolation)"
    labelled = _score(build_report(study(cs, base), allow_untrusted=True).agents[0].comparisons)
    assert (labelled.verdict, labelled.winner) == ("winner", "lean")
    assert labelled.label == "UNTRUSTED: trust checklist FAIL (isolation)"


def test_comparisons_on_threads_give_the_figures_of_a_serial_run(monkeypatch):
    """`compare_arms` runs the comparisons' bootstraps and their shared sign-flip drawing (in
    parts) on threads: every figure equals the serial run's (own seeded generators, own
    `Comparison`; each part's generator advanced to its rows). The set is large enough for
    the bootstrap (>= 20 questions) and the Monte Carlo sign flips (> 40)."""
    def value(k):
        return lambda q, r: 0.3 + 0.05 * k + 0.003 * ((q * 7 + r * 3 + k) % 11)

    cs = [cell for agent in ("a1", "a2") for k, arm in enumerate(("x", "y", "z"))
          for cell in cells(agent, arm, 45, 3, value(k + len(agent)))]
    base = baselines("a1", ["x", "y", "z"]) + baselines("a2", ["x", "y", "z"])
    import threading

    from caisson.report import _gate, _stats

    ran_on: set[str] = set()

    def watch(module, name):
        work = getattr(module, name)

        def watched(*args):
            ran_on.add(threading.current_thread().name)
            return work(*args)

        monkeypatch.setattr(module, name, watched)

    watch(_gate, "_bootstrap")
    watch(_stats, "_flip_hits")
    monkeypatch.setattr(_gate, "default_jobs", lambda: 1)
    serial = compare_arms(cs, base, seed=7)
    assert ran_on == {threading.current_thread().name}
    ran_on.clear()
    monkeypatch.setattr(_gate, "default_jobs", lambda: 4)
    threaded = compare_arms(cs, base, seed=7)
    assert ran_on and all(name.startswith("caisson-gate") for name in ran_on)
    ran_on.clear()
    assert [msgspec.to_builtins(c) for c in compare_arms(cs, base, seed=7, jobs=1)] == [
        msgspec.to_builtins(c) for c in serial]
    assert ran_on == {threading.current_thread().name}  # --jobs 1: this thread only
    assert len(serial) >= 6 and any(c.p_method.startswith("monte carlo") for c in serial)
    assert any(c.ci_method.startswith("two-stage bootstrap") for c in serial)
    assert [msgspec.to_builtins(c) for c in threaded] == [msgspec.to_builtins(c) for c in serial]
