"""The report as one self-contained HTML file, with its plots embedded as PNG data URIs.

No script, no external resource (stylesheet, font, image): the file opens offline in any
browser. Per agent, one figure: the score distribution and the content-token
distribution of each (arm, model), as box plots with every cell drawn over them.
Plots use matplotlib's object API (no pyplot global state) on the Agg canvas.
"""

from __future__ import annotations

import base64
import html
import io
from collections import defaultdict

from caisson.report._report import AgentSection, Report
from caisson.report._render import identity_lines, table_sections

__all__ = ["agent_plot_png", "render_html"]

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}
th,td{border:1px solid #ccc;padding:.25em .5em;vertical-align:top;text-align:left}
th{background:#f3f3f3}
tr.PASS td:nth-child(3){background:#dcf5dc}
tr.WARN td:nth-child(3){background:#fff2c2}
tr.FAIL td:nth-child(3){background:#f8d0d0;font-weight:bold}
img{max-width:100%;border:1px solid #ddd}
code{font-size:90%}
"""


def agent_plot_png(section: AgentSection, cells: list, *, dpi: int = 80) -> bytes:
    """PNG bytes of one agent's score and content-token distributions per (arm, model).

    Args:
        section: the agent's section (its rows name the groups).
        cells: the report's `CellRow` list (only this agent's clean cells are drawn).
        dpi: resolution.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # here: text and JSON reports never pay for it
    from matplotlib.figure import Figure

    groups = [(r.arm, r.model) for r in section.rows]
    scores: dict[tuple[str, str], list[float]] = defaultdict(list)
    content: dict[tuple[str, str], list[float]] = defaultdict(list)
    for c in cells:
        if c.agent != section.agent or c.status != "clean":
            continue
        if c.score is not None:
            scores[(c.arm, c.model)].append(c.score)
        if c.content_tokens is not None:
            content[(c.arm, c.model)].append(c.content_tokens)
    fig = Figure(figsize=(4 + 1.2 * len(groups), 3.6), dpi=dpi)
    FigureCanvasAgg(fig)
    labels = [f"{arm}\n{model}" for arm, model in groups]
    for i, (title, data, unit) in enumerate((("score", scores, "score (0-1)"),
                                             ("content tokens", content, "tokens over the floor"))):
        ax = fig.add_subplot(1, 2, i + 1)
        series = [data.get(g, []) for g in groups]
        drawn = [(k, s) for k, s in enumerate(series) if s]
        if drawn:
            ax.boxplot([s for _, s in drawn], positions=[k + 1 for k, _ in drawn], widths=0.5, showfliers=False)
            for k, s in drawn:
                jitter = [k + 1 + (j % 7 - 3) * 0.04 for j in range(len(s))]
                ax.scatter(jitter, s, s=8, alpha=0.5)
        for k, s in enumerate(series):
            if not s:
                ax.text(k + 1, 0.5, "null", ha="center", transform=ax.get_xaxis_transform(), color="grey")
        ax.set_xticks(range(1, len(groups) + 1), labels, fontsize=8)
        ax.set_xlim(0.5, len(groups) + 0.5)
        ax.set_title(f"{section.agent}: {title}", fontsize=10)
        ax.set_ylabel(unit, fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def _table(title: str, header: list[str], rows: list[list[str]], *, classes: bool) -> str:
    e = html.escape
    parts = [f"<h2>{e(title)}</h2>"]
    if not rows:
        return parts[0] + "<p>none</p>"
    parts.append("<table><thead><tr>" + "".join(f"<th>{e(h)}</th>" for h in header) + "</tr></thead><tbody>")
    for row in rows:
        cls = f' class="{e(row[2])}"' if classes and len(row) > 2 else ""
        parts.append(f"<tr{cls}>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>")
    parts.append("</tbody></table>")
    return "".join(parts)


def render_html(report: Report) -> str:
    """The report as one self-contained HTML document (plots as base64 PNG)."""
    e = html.escape
    body = [f"<h1>Study report: {e(report.study_id)}</h1>"] + [f"<p><code>{e(x)}</code></p>" for x in identity_lines(report)]
    plotted: set[str] = set()
    for title, header, rows in table_sections(report):
        body.append(_table(title, header, rows, classes=title.startswith("Trust checklist")))
        for section in report.agents:
            if title == f"Agent {section.agent}" and section.agent not in plotted:
                plotted.add(section.agent)
                png = base64.b64encode(agent_plot_png(section, report.cells)).decode("ascii")
                body.append(f'<p><img alt="{e(section.agent)}: score and content-token distributions per arm"'
                            f' src="data:image/png;base64,{png}"></p>')
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{e('Study report: ' + report.study_id)}</title><style>{_CSS}</style></head><body>"
            + "\n".join(body) + "</body></html>\n")
