"""Text (rich), markdown and JSON renderings of a `Report`.

Every rendering has the same order: the study's identity (ledger head, detector
versions), the trust checklist, then one section per agent (its table with gating and
elicitation beside every figure, token sources beside every token figure, the schema
tax, the comparisons and their verdicts), refusals, the judge's alarms, limitations.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Iterator

import msgspec
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from caisson.report._aggregate import ArmSummary, Rate
from caisson.report._gate import Comparison
from caisson.report._report import Report
from caisson.report._stats import Spread

__all__ = ["fmt_comparison", "fmt_spread", "render_json", "render_markdown", "render_text"]


def _num(x: float | None, digits: int = 3) -> str:
    if x is None:
        return "null"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    if isinstance(x, int) or (abs(x) >= 1000 and float(x).is_integer()):
        return f"{int(x):,}"
    return f"{x:.{digits}g}"


def fmt_spread(s: Spread | None) -> str:
    """``median [min-max] IQR q1-q3 n=N``, or ``null``."""
    if s is None:
        return "null"
    return f"{_num(s.median)} [{_num(s.min)}-{_num(s.max)}] IQR {_num(s.q1)}-{_num(s.q3)} n={s.n}"


def _rate(r: Rate) -> str:
    if r.n == 0:
        return "-"
    return f"{r.k}/{r.n} ({_num(r.low, 2)}-{_num(r.high, 2)})"


def fmt_comparison(c: Comparison) -> str:
    """One line: the verdict first, then the seed rule and the paired analysis behind it."""
    if c.verdict == "winner":
        head = f"WINNER {c.winner}" + (f" [{c.label}]" if c.label else "")
    elif c.verdict == "withheld":
        head = f"WITHHELD [{c.label}]"
    else:
        head = f"tie ({c.qualifier}; smallest detectable ratio " + (
            f"{_num(c.detectable_ratio)}x)" if c.detectable_ratio is not None else f"none: {c.detectable_detail})")
    ci = (f"[{_num(c.ci_low)}, {_num(c.ci_high)}]" if c.ci_low is not None else "no interval")
    paired = (f"GMR {_num(c.gmr)} {ci} ({c.ci_method}), sign-flip p {_num(c.p)} {c.p_method}, Holm {_num(c.p_holm)}"
              if c.gmr is not None else "no question with a defined log-ratio")
    if c.questions_excluded:
        paired += f", {c.questions_excluded} questions excluded (median 0)"
    return (f"{c.metric} {c.arm_a} vs {c.arm_b}: {head}. medians {_num(c.median_a)} vs {_num(c.median_b)}"
            f" (ratio {_num(c.ratio)}); seed rule: {c.seed_detail}; paired over {c.questions} questions: {paired}")


def _tokens(r: ArmSummary) -> str:
    sources = ", ".join(f"{k} x{v}" for k, v in r.token_sources.items()) or "none"
    figure = "mixed sources: not pooled" if r.tokens_mixed else fmt_spread(r.tokens)
    extra = f"; {r.tokens_unmeasured} null" if r.tokens_unmeasured else ""
    extra += f"; {r.tokens_ambiguous} ambiguous" if r.tokens_ambiguous else ""
    return f"{figure} ({sources}{extra})"


def _floor(r: ArmSummary) -> str:
    return "null" if r.floor is None else f"{_num(r.floor.total)} ({r.floor.source})"


def _row(r: ArmSummary) -> dict[str, str]:
    void = ", ".join(f"{k} {v}" for k, v in r.void_by_reason.items()) or "0"
    kinds = "; ".join(f"{k}: {fmt_spread(s)}" for k, s in r.by_kind.items()) or "-"
    passk = "; ".join(f"pass@{p.k} {_num(p.pass_at_k)} pass^{p.k} {_num(p.pass_hat_k)}" for p in r.pass_k) or "-"
    return {
        "arm": r.arm, "model": r.model, "gating": r.gating, "elicitation": r.elicitation,
        "cells": f"planned {r.planned}, run {r.run}, refused {r.refused}, not run {r.not_run}",
        "void": void, "scored": f"{r.scored}" + (f" (+{r.score_null} null)" if r.score_null else ""),
        "score": fmt_spread(r.score), "by kind": kinds, "pass rate": _rate(r.pass_rate),
        "void rate": _rate(r.void_rate), "pass@k": passk, "tokens": _tokens(r), "floor": _floor(r),
        "content tokens": fmt_spread(r.content) + (f" ({r.floor.source})" if r.content and r.floor else "")
        + (f" ({r.content_null} null)" if r.content_null else ""),
        "cost": ("null" if r.cost_usd is None else f"${r.cost_usd:.4f} over {r.cost_cells} cells"),
        "retries": _retries(r),
    }


def _retries(r: ArmSummary) -> str:
    """Retried model calls per run cell, attempts the study ran again, compactions."""
    per = f" ({r.retries / r.run:.2f}/cell)" if r.run else ""
    return (f"in session {r.retries}{per}; attempts run again {r.infra_attempts}"
            + (f"; compactions {r.compactions}" if r.compactions else ""))


def table_sections(report: Report) -> Iterator[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) of each table, in rendering order (shared by text and markdown)."""
    yield ("Trust checklist" + ("" if report.trusted else " (FAIL: winner claims "
                                + ("labelled UNTRUSTED)" if report.allow_untrusted else "withheld)")),
           ["part", "item", "status", "count", "detail", "cells"],
           [[i.part, i.name, i.status, str(i.count), i.detail, ", ".join(i.cells)] for i in report.checklist])
    for section in report.agents:
        rows = [_row(r) for r in section.rows]  # transposed: one column per (arm, model)
        fields = [f for f in (rows[0] if rows else {}) if f not in ("arm", "model")]
        yield (f"Agent {section.agent}", [""] + [f"{r['arm']} / {r['model']}" for r in rows],
               [[f] + [r[f] for r in rows] for f in fields])
        if section.schema_tax:
            yield (f"Agent {section.agent}: schema tax (floor of arm b - floor of arm a, same model)",
                   ["model", "arm a", "arm b", "tokens", "source / why null"],
                   [[t.model, t.arm_a, t.arm_b, _num(t.tokens), t.source or t.null_reason] for t in section.schema_tax])
        if section.comparisons:
            context = {(r.arm, r.model): f"{r.arm}: {r.gating}, {r.elicitation}" for r in section.rows}
            yield (f"Agent {section.agent}: comparisons", ["model", "gating, elicitation", "verdict"],
                   [[c.model, "; ".join(context[(arm, c.model)] for arm in (c.arm_a, c.arm_b)), fmt_comparison(c)]
                    for c in section.comparisons])
    yield ("Refusals", ["agent", "arm", "model", "gating", "reason"],
           [[r.agent, r.arm, r.model or "-", r.gating, r.reason] for r in report.refusals])
    if report.judge is not None:
        yield ("Judge alarms (never a change of score)", ["cell", "question", "score", "judge", "answer"],
               [[d.cell_id, d.question_id, _num(d.score), d.judge_verdict, d.answer_excerpt]
                for d in report.disagreements])
    yield ("Known limitations", ["limitation"], [[line] for line in report.limitations])


def identity_lines(report: Report) -> list[str]:
    return [f"study {report.study_id}; study ledger head {report.study_head}",
            f"caisson {report.caisson_version}; seed {report.seed}; detectors: "
            + (", ".join(report.detector_versions) or "none recorded")]


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _visible(m: re.Match[str]) -> str:
    """A control character as its escape (an answer's ESC must not drive the terminal)."""
    return repr(m.group())[1:-1]


def render_text(report: Report, *, width: int = 160, color: bool = False) -> str:
    """The report as terminal text (rich tables).

    Args:
        report: the report.
        width: console width, characters.
        color: keep ANSI colour codes.
    """
    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=color, no_color=not color, highlight=False)
    styles = {"PASS": "green", "WARN": "yellow", "FAIL": "bold red"}
    for line in identity_lines(report):
        console.print(Text(_CONTROL.sub(_visible, line)))
    for title, header, rows in table_sections(report):
        table = Table(title=Text(_CONTROL.sub(_visible, title)), box=box.SIMPLE_HEAD, show_lines=False,
                      title_justify="left")
        for name in header:
            table.add_column(Text(_CONTROL.sub(_visible, name)), overflow="fold")
        for row in rows:  # Text: a "[...]" in a label or an answer is data, never rich markup
            style = styles.get(row[2]) if title.startswith("Trust checklist") else None
            table.add_row(*(Text(_CONTROL.sub(_visible, cell)) for cell in row), style=style)
        if not rows:
            table.add_row(*(["none"] + [""] * (len(header) - 1)))
        console.print(table)
    return out.getvalue()


def _md_cell(text: str) -> str:
    """Table-cell text: a pipe is escaped, a newline is a space, and HTML is shown, never
    rendered (an answer excerpt is the agent's text: it must not become markup)."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(report: Report) -> str:
    """The report as GitHub-flavoured markdown (one table per section)."""
    lines = [f"# Study report: {_md_cell(report.study_id)}", ""] + [f"- {_md_cell(x)}" for x in identity_lines(report)]
    for title, header, rows in table_sections(report):
        lines += ["", f"## {_md_cell(title)}", ""]
        if not rows:
            lines.append("none")
            continue
        lines.append("| " + " | ".join(_md_cell(h) for h in header) + " |")
        lines.append("|" + "---|" * len(header))
        lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def render_json(report: Report) -> bytes:
    """The report as indented JSON (every field of `Report`; infinities and NaN as null)."""
    return msgspec.json.format(msgspec.json.encode(report), indent=2) + b"\n"
