"""Study reports: per-agent tables, comparable tokens, the winner gate, the trust checklist.

Everything here is computed from sealed evidence: `cell_tokens` from a cell's ledger
records, `read_cell` from a cell's run directory (one read: replay and tokens; `read_cells`
for many, in parallel processes),
`build_report` from a `StudyReportInput` (cells, baselines, refusals, prices, the judge's
summary), and the renderers turn a `Report` into text, markdown, JSON or one
self-contained HTML file. See docs/architecture.md ("report").
"""

from caisson.report._aggregate import ArmSummary, PassK, Rate, SchemaTax, cell_cost, content_tokens
from caisson.report._checklist import FAIL, PASS, WARN, CheckItem
from caisson.report._evidence import CellEvidence, read_cell, read_cells, report_cell, share_out
from caisson.report._gate import ALPHA, BOOTSTRAP_FROM, EQUIVALENCE, SEED_RATIO, Comparison
from caisson.report._html import render_html
from caisson.report._inputs import (
    Disagreement,
    JudgeSummary,
    Price,
    Refusal,
    ReportBaseline,
    ReportCell,
    ReportInputError,
    StudyReportInput,
    check_input,
)
from caisson.report._render import render_json, render_markdown, render_text
from caisson.report._report import AgentSection, CellRow, Report, build_report
from caisson.report._stats import Spread
from caisson.report._tokens import (
    BACKFILL,
    TOKEN_EVENTS,
    FIRST_PARTY,
    PROXY,
    RANKS,
    SESSION_HEADERS,
    CellTokens,
    TokenFigure,
    backfill_figure,
    cell_tokens,
    with_backfill,
)

__all__ = [
    "ALPHA",
    "BACKFILL",
    "BOOTSTRAP_FROM",
    "EQUIVALENCE",
    "FAIL",
    "FIRST_PARTY",
    "PASS",
    "PROXY",
    "RANKS",
    "SEED_RATIO",
    "SESSION_HEADERS",
    "TOKEN_EVENTS",
    "WARN",
    "AgentSection",
    "ArmSummary",
    "CellEvidence",
    "CellRow",
    "CellTokens",
    "CheckItem",
    "Comparison",
    "Disagreement",
    "JudgeSummary",
    "PassK",
    "Price",
    "Rate",
    "Refusal",
    "Report",
    "ReportBaseline",
    "ReportCell",
    "ReportInputError",
    "SchemaTax",
    "Spread",
    "StudyReportInput",
    "TokenFigure",
    "build_report",
    "cell_cost",
    "backfill_figure",
    "cell_tokens",
    "check_input",
    "content_tokens",
    "read_cell",
    "read_cells",
    "share_out",
    "render_html",
    "render_json",
    "render_markdown",
    "render_text",
    "report_cell",
    "with_backfill",
]
