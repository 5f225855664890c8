"""The public surface of caisson.report is explicit and pinned."""

from __future__ import annotations

import caisson.report


def test_report_public_surface_is_pinned():
    assert sorted(caisson.report.__all__) == sorted([
        "ALPHA", "BACKFILL", "BOOTSTRAP_FROM", "EQUIVALENCE", "FAIL", "FIRST_PARTY", "PASS", "PROXY", "RANKS", "SEED_RATIO",
        "SESSION_HEADERS", "TOKEN_EVENTS", "WARN", "AgentSection", "ArmSummary", "CellEvidence", "CellRow", "CellTokens",
        "CheckItem", "Comparison", "Disagreement", "JudgeSummary", "PassK", "Price", "Rate", "Refusal", "Report",
        "ReportBaseline", "ReportCell", "ReportInputError", "SchemaTax", "Spread", "StudyReportInput",
        "TokenFigure", "build_report", "cell_cost", "cell_tokens", "check_input", "content_tokens", "read_cell", "read_cells",
        "render_html", "render_json", "render_markdown", "render_text", "report_cell", "share_out",
        "backfill_figure", "with_backfill",
    ])
    for name in caisson.report.__all__:
        assert getattr(caisson.report, name) is not None
