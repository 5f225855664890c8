"""Playbooks of the per-agent aggregates: floors, content tokens, schema tax, cost, counts."""

from __future__ import annotations

import msgspec
import pytest

from caisson.report import Price, ReportBaseline, ReportCell, build_report, content_tokens, render_text
from caisson.report._aggregate import schema_tax, summarize_arms
from tests.caisson.report.study import SOURCE, baselines, cells, figure, study

PROXY = "proxy:llm.call"


def _cell(**kw) -> ReportCell:
    base = dict(cell_id="c", arm="a", agent="ag", model="m1", question_id="q0", status="clean", score=1.0,
                tokens=figure(1500), gating="enforced", elicitation="default")
    return ReportCell(**{**base, **kw})


def test_content_tokens_need_a_floor_of_the_same_combination_and_source():
    floor = ReportBaseline(arm="a", agent="ag", model="m1", floor=figure(1000))
    assert content_tokens(_cell(), floor) == 500
    assert content_tokens(_cell(tokens=figure(1500, PROXY)), floor) is None  # never across sources
    assert content_tokens(_cell(tokens=None), floor) is None  # not measured: null, never 0
    assert content_tokens(_cell(), None) is None
    assert content_tokens(_cell(), msgspec.structs.replace(floor, floor=None)) is None


def test_rows_are_per_agent_and_never_pooled():
    cs = cells("alpha", "a", 2, 2, lambda q, r: 1.0) + cells("beta", "a", 2, 2, lambda q, r: 0.0)
    rows = summarize_arms(cs, baselines("alpha", ["a"]) + baselines("beta", ["a"]), {})
    assert list(rows) == ["alpha", "beta"]
    assert [(r.agent, r.arm, r.score.median, r.planned) for rs in rows.values() for r in rs] == [
        ("alpha", "a", 1.0, 4), ("beta", "a", 0.0, 4)]


def test_counts_void_by_reason_spreads_per_kind_and_rates():
    cs = [
        _cell(cell_id="1", question_id="q0", question_kind="locate", score=1.0, repetition=0),
        _cell(cell_id="2", question_id="q0", question_kind="locate", score=0.5, repetition=1),
        _cell(cell_id="3", question_id="q1", question_kind="absence", score=1.0, repetition=0),
        _cell(cell_id="4", question_id="q1", question_kind="absence", score=None, repetition=1),  # leak backstop
        _cell(cell_id="5", question_id="q2", status="void", void_reason="tool_escape", score=None),
        _cell(cell_id="6", question_id="q2", status="void", void_reason="host_stalled", score=None),
        _cell(cell_id="7", question_id="q3", status="not_run", score=None, tokens=None),
        _cell(cell_id="8", question_id="q3", status="refused", score=None, tokens=None),
    ]
    (row,) = summarize_arms(cs, [], {})["ag"]
    assert (row.planned, row.run, row.refused, row.not_run, row.scored, row.score_null) == (8, 6, 1, 1, 3, 1)
    assert row.void_by_reason == {"host_stalled": 1, "tool_escape": 1}
    assert (row.score.median, row.score.min, row.score.max) == (1.0, 0.5, 1.0)
    assert {k: s.median for k, s in row.by_kind.items()} == {"absence": 1.0, "locate": 0.75}
    assert (row.pass_rate.k, row.pass_rate.n, row.void_rate.k, row.void_rate.n) == (2, 3, 2, 6)
    assert row.pass_rate.low == pytest.approx(0.2077, abs=1e-4)
    # pass@k over questions with scored repetitions: q0 (2 reps, 1 pass), q1 (1 rep, 1 pass) -> k in {1}
    assert [(p.k, p.questions, p.pass_at_k, p.pass_hat_k) for p in row.pass_k] == [(1, 2, 0.75, 0.75)]
    assert row.floor is None and row.content is None and row.content_null == 4  # the clean cells


def test_mixed_sources_are_counted_not_pooled():
    cs = [_cell(cell_id="1"), _cell(cell_id="2", tokens=figure(900, PROXY)), _cell(cell_id="3", tokens=None)]
    (row,) = summarize_arms(cs, baselines("ag", ["a"]), {})["ag"]
    assert row.token_sources == {SOURCE: 1, PROXY: 1}
    assert (row.tokens_mixed, row.tokens, row.tokens_unmeasured) == (True, None, 1)
    assert (row.content.median, row.content.n, row.content_null) == (500, 1, 2)


def test_schema_tax_only_within_one_agent_and_model():
    base = (baselines("ag", ["a", "b"], floor=1000)
            + [ReportBaseline(arm="c", agent="ag", model="m1", floor=figure(1300, PROXY))]
            + baselines("ag", ["a"], model="m2", floor=5000) + baselines("other", ["b"], floor=9000))
    taxes = {(t.agent, t.model, t.arm_a, t.arm_b): (t.tokens, t.null_reason) for t in schema_tax(base)}
    assert taxes == {
        ("ag", "m1", "a", "b"): (0, ""),
        ("ag", "m1", "a", "c"): (None, f"floors from different sources: {SOURCE} vs {PROXY}"),
        ("ag", "m1", "b", "c"): (None, f"floors from different sources: {SOURCE} vs {PROXY}"),
    }  # no pair across models (m2) or agents (other)


def test_cost_only_from_the_study_prices():
    cs = [_cell(cell_id="1", tokens=figure(1000, input=800, output=200)),
          _cell(cell_id="2", tokens=figure(1000, input=None, output=None)),
          _cell(cell_id="3", model="unpriced", tokens=figure(1000, input=800, output=200))]
    rows = summarize_arms(cs, [], {"m1": Price(input_usd_per_mtok=3.0, output_usd_per_mtok=15.0)})["ag"]
    priced = next(r for r in rows if r.model == "m1")
    assert priced.cost_usd == pytest.approx((800 * 3 + 200 * 15) / 1e6) and priced.cost_cells == 1
    assert next(r for r in rows if r.model == "unpriced").cost_usd is None


def test_report_lists_every_cell_with_its_derived_figures():
    report = build_report(study([_cell(cell_id="1"), _cell(cell_id="2", tokens=None, tokens_null_reason="no call")],
                                baselines("ag", ["a"])))
    assert [(c.cell_id, c.tokens, c.token_source, c.content_tokens, c.tokens_null_reason) for c in report.cells] == [
        ("1", 1500, SOURCE, 500, ""), ("2", None, None, None, "no call")]


def test_void_cells_spend_money_but_stay_out_of_the_token_spreads():
    cs = [_cell(cell_id="1", tokens=figure(1500, input=1000, output=500)),
          _cell(cell_id="2", status="void", void_reason="tool_escape", score=None,
                tokens=figure(9000, input=8000, output=1000))]
    (row,) = summarize_arms(cs, baselines("ag", ["a"]), {"m1": Price(input_usd_per_mtok=1.0,
                                                                       output_usd_per_mtok=2.0)})["ag"]
    assert (row.tokens.median, row.tokens.n, row.content.median, row.content.n) == (1500, 1, 500, 1)
    assert row.token_sources == {SOURCE: 2} and row.cost_cells == 2
    assert row.cost_usd == pytest.approx((1000 + 8000 + 2 * (500 + 1000)) / 1e6)


def test_backfilled_figures_rank_and_subtract_only_from_a_backfilled_floor():
    late = "first_party_backfill:claude-code session files (messages[].usage)"
    cs = [_cell(cell_id="1", tokens=figure(1500, late)), _cell(cell_id="2", tokens=figure(1600, late))]
    live_floor = baselines("ag", ["a"])  # a live first-party floor: another source
    (row,) = summarize_arms(cs, live_floor, {})["ag"]
    assert row.token_sources == {late: 2} and not row.tokens_mixed
    assert (row.content, row.content_null) == (None, 2)  # never across sources, even both first-party
    late_floor = [msgspec.structs.replace(live_floor[0], floor=figure(1000, late))]
    (row,) = summarize_arms(cs, late_floor, {})["ag"]
    assert (row.content.median, row.content.n, row.content_null) == (550, 2, 0)
    text = render_text(build_report(study(cs, late_floor)))
    assert f"1,000 ({late})" in text or f"1000 ({late})" in text  # the source printed beside the floor
