"""The trust checklist: each item PASS on a clean study and firing on its known-bad one."""

from __future__ import annotations

import msgspec
import pytest

from caisson.report import (
    Disagreement,
    JudgeSummary,
    Refusal,
    ReportBaseline,
    ReportCell,
    ReportInputError,
    build_report,
)
from tests.caisson.report.study import baselines, cells, figure, study


def _clean():
    return (cells("ag", "a", 3, 2, lambda q, r: 1.0) + cells("ag", "b", 3, 2, lambda q, r: 0.5),
            baselines("ag", ["a", "b"]))


def _items(data, **kw):
    return {i.name: i for i in build_report(data, **kw).checklist}


JUDGE = JudgeSummary(requested_model="judge-1", served_models=("judge-1",), cells_judged=12)


def test_a_clean_study_passes_every_item_but_the_absent_judge():
    cs, base = _clean()
    items = _items(study(cs, base))
    assert {n: i.status for n, i in items.items() if i.status != "PASS"} == {"judge_model": "WARN",
                                                                               "disagreements": "WARN"}
    items = _items(study(cs, base, judge=JUDGE))
    assert all(i.status == "PASS" for i in items.values()), items
    assert list(items)[:4] == ["ledgers_verified", "containment", "isolation", "tool_escape"]  # trust first


def _with(cs, index, **changes):
    cs = list(cs)
    cs[index] = msgspec.structs.replace(cs[index], **changes)
    return cs


@pytest.mark.parametrize(("name", "status", "change"), [
    ("ledgers_verified", "FAIL", dict(verified=False)),
    ("containment", "FAIL", dict(contained=False)),
    ("tool_escape", "FAIL", dict(status="void", score=None, void_reason="tool_escape", findings=("tool_escape",))),
    ("contamination", "WARN", dict(findings=("excluded_read",))),
    ("contamination", "WARN", dict(score=None, findings=("leak",))),
    ("host_stalled", "WARN", dict(status="void", score=None, void_reason="host_stalled", findings=("host_stalled",))),
    ("token_sources", "WARN", dict(tokens=None, tokens_null_reason="cut stream")),
    ("token_sources", "WARN", dict(tokens=figure(10, "proxy:llm.call"))),
    ("token_ambiguity", "WARN", dict(token_ambiguous=True, sessions=("s1", "s2"))),
    ("per_agent", "FAIL", dict(gating="not_enforced")),
    ("enforcement_elicitation", "FAIL", dict(elicitation=" ")),
])
def test_each_cell_item_fires_on_its_known_bad_cell(name, status, change):
    cs, base = _clean()
    item = _items(study(_with(cs, 1, **change), base, judge=JUDGE))[name]
    assert item.status == status and item.count == 1
    assert item.cells == [cs[1].cell_id] or name in ("token_sources", "per_agent") and len(item.cells) == 1


def test_isolation_fails_on_a_denied_tool_and_warns_when_unavailable():
    cs, base = _clean()
    failed = [msgspec.structs.replace(base[0], isolation="failed", denied_present=("Bash",)), base[1]]
    item = _items(study(cs, failed))["isolation"]
    assert (item.status, item.cells) == ("FAIL", ["ag/a/m1: Bash"])
    unknown = [msgspec.structs.replace(base[0], isolation="unavailable", tools=None), base[1]]
    assert _items(study(cs, unknown))["isolation"].status == "WARN"


def test_baselines_refusals_judge_and_disagreements():
    cs, base = _clean()
    items = _items(study(cs, [base[0], msgspec.structs.replace(base[1], floor=None)],
                         refusals=(Refusal(arm="a", agent="codex", model="m1", reason="ungated", gating="ungated",
                                                    kind="cannot"),),
                         judge=JudgeSummary(requested_model="judge-1", served_models=("judge-2",), cells_judged=12,
                                            disagreements=(Disagreement(cell_id=cs[0].cell_id, question_id="q0",
                                                                        score=1.0, judge_verdict="wrong"),))))
    assert (items["baselines"].status, items["baselines"].cells) == ("WARN", ["ag/b/m1: floor not measured"])
    assert (items["refusals"].status, items["refusals"].cells) == ("PASS", ["codex/a/m1: ungated"])
    assert (items["judge_model"].status, items["judge_model"].cells) == ("FAIL", ["judge-2"])
    assert items["disagreements"].status == "WARN" and items["disagreements"].count == 1
    silent = _items(study(cs, base, refusals=(Refusal(arm="a", agent="x", model="m1", reason="", gating="ungated",
                                                                             kind="cannot"),)))
    assert silent["refusals"].status == "FAIL"


def test_limitations_name_what_applies():
    cs, base = _clean()
    ungated = [msgspec.structs.replace(c, gating="ungated") for c in cs]
    report = build_report(study(ungated, [msgspec.structs.replace(b, isolation="unavailable", tools=None)
                                          for b in base]))
    assert report.limitations[0] == "no tool audit for ungated agents (tools recorded as unavailable): ag/a/m1, ag/b/m1"
    assert any(x.startswith("parity of global instruction files") for x in report.limitations)
    assert any(x.startswith("sample size: 3 questions, 2-2 repetitions") for x in report.limitations)
    # A refused combination's cells carry no question: they are not counted as repetitions.
    refused = [ReportCell(cell_id=f"r{i}", arm="b", agent="ag", model="m9", question_id="-", status="refused",
                          gating="ungated", elicitation="-") for i in range(8)]
    report = build_report(study([*cs, *refused], base))
    assert any(x.startswith("sample size: 3 questions, 2-2 repetitions") for x in report.limitations)


@pytest.mark.parametrize(("change", "field"), [
    (dict(status="done"), "status"),
    (dict(gating="sometimes"), "gating"),
    (dict(score=1.5), "score"),
    (dict(status="void"), "score"),
    (dict(status="void", score=None), "void_reason"),
    (dict(void_reason="leak"), "void_reason"),
    (dict(tokens=figure(-1)), "tokens.total"),
])
def test_bad_input_names_the_cell_and_field(change, field):
    cs, base = _clean()
    with pytest.raises(ReportInputError) as err:
        build_report(study(_with(cs, 0, **change), base))
    assert (err.value.where, err.value.field) == (f"cell {cs[0].cell_id}", field)


def test_duplicate_cells_and_baselines_are_refused():
    cs, base = _clean()
    with pytest.raises(ReportInputError, match="duplicate cell id"):
        build_report(study(cs + cs[:1], base))
    with pytest.raises(ReportInputError, match="two baselines"):
        build_report(study(cs, base + base[:1]))
    with pytest.raises(ReportInputError, match="isolation"):
        build_report(study(cs, [ReportBaseline(arm="a", agent="ag", model="m1", isolation="maybe")]))


def test_an_unavailable_tool_audit_is_never_an_empty_list():
    cs, _ = _clean()
    for base, field in ((ReportBaseline(arm="a", agent="ag", model="m1", isolation="unavailable", tools=()), "tools"),
                        (ReportBaseline(arm="a", agent="ag", model="m1", isolation="passed", tools=None), "tools"),
                        (ReportBaseline(arm="a", agent="ag", model="m1", isolation="unavailable",
                                        tools=("Read",)), "tools")):
        with pytest.raises(ReportInputError) as err:
            build_report(study(cs, [base]))
        assert err.value.field == field


def test_judge_model_passes_a_snapshot_warns_on_unknown_and_fails_a_substitution():
    cs, base = _clean()

    def status(**kw) -> tuple[str, list[str]]:
        item = _items(study(cs, base, judge=JudgeSummary(requested_model="judge-1", cells_judged=12, **kw)))
        return item["judge_model"].status, item["judge_model"].cells

    assert status(served_models=("judge-1", "judge-1-20250929")) == ("PASS", [])  # a dated snapshot of the alias
    assert status(served_models=()) == ("WARN", [])  # no call named the model that answered
    assert status(served_models=("judge-1",), unknown_served=2) == ("WARN", [])
    assert status(served_models=("judge-1", "judge-2")) == ("FAIL", ["judge-2"])
    unread = _items(study(cs, base, judge=JudgeSummary(requested_model="judge-1", served_models=("judge-1",),
                                                       cells_judged=12, unparseable=1)))["disagreements"]
    assert unread.status == "WARN" and "1 replies unparseable" in unread.detail


def test_arms_that_retried_unevenly_are_a_provider_confound_and_even_retries_pass():
    """Issue 29, item 4: retries per arm; uneven rates between arms are named."""
    cs, base = _clean()  # arm a: cells 0-5, arm b: cells 6-11
    even = [msgspec.structs.replace(c, retries=1) for c in cs]
    item = _items(study(even, base))["retries"]
    assert (item.status, item.detail) == ("PASS", "retries even across arms (12 in all)")
    uneven = [msgspec.structs.replace(c, retries=2 if c.arm == "a" else 0) for c in cs]
    item = _items(study(uneven, base))["retries"]
    assert (item.status, item.count, item.cells) == ("WARN", 1, ["ag/m1 in-session retries: a 2.00/cell, b 0.00/cell"])
    again = [msgspec.structs.replace(c, infra_attempts=1) if c.arm == "b" and c.repetition == 0 else c for c in cs]
    item = _items(study(again, base))["retries"]
    assert item.status == "WARN" and item.cells == ["ag/m1 attempts run again: a 0.00/cell, b 0.50/cell"]
    slight = [msgspec.structs.replace(c, retries=1) if c.cell_id == cs[0].cell_id else c for c in cs]
    assert _items(study(slight, base))["retries"].status == "PASS"  # 0.17/cell against 0: under 0.25


def test_each_rows_retries_are_rendered():
    from caisson.report import render_text

    cs, base = _clean()
    cs = [msgspec.structs.replace(c, retries=1, compactions=1) if c.arm == "a" else c for c in cs]
    text = render_text(build_report(study(cs, base)))
    line = next(line for line in text.splitlines() if line.strip().startswith("retries"))
    assert "in session 6 (1.00/cell); attempts run again 0; compactions 6" in line
    assert "in session 0 (0.00/cell); attempts run again 0" in line
