"""The view's Jinja2 templates (autoescaped: event text is shown, never interpreted)."""

from __future__ import annotations

import datetime

import jinja2

__all__ = ["environment"]

_BASE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{% block title %}caisson view{% endblock %}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 1.2em; color: #1b1b1b; }
code, td.mono, pre { font-family: ui-monospace, monospace; font-size: 0.86em; }
.verify { padding: 0.7em 1em; border-radius: 6px; margin-bottom: 1em; font-weight: 600; }
.verify.ok { background: #d9f2dd; border: 1px solid #2e7d32; }
.verify.tampered, .verify.unreadable { background: #fbd5d5; border: 2px solid #b71c1c; }
.verify.unclosed { background: #fff1c7; border: 1px solid #b08800; }
.unverified td { color: #8a1f1f; font-style: italic; }
table { border-collapse: collapse; width: 100%; }
td, th { border-bottom: 1px solid #ddd; padding: 2px 6px; text-align: left; vertical-align: top; }
tr:target { background: #ffe58a; outline: 2px solid #b08800; }
tr.excluded td, tr.denied td, tr.refused td, tr.gap td { background: #fde2e2; }
tr.errored td { background: #fff1c7; }
.finding.void { border-left: 4px solid #b71c1c; } .finding.score_null { border-left: 4px solid #b08800; }
.finding { padding: 0.3em 0.6em; margin: 0.3em 0; background: #f6f6f6; }
nav a { margin-right: 0.8em; }
.cell { display: inline-block; min-width: 5.5em; padding: 2px 4px; margin: 1px; border-radius: 3px; font-size: 0.8em; }
.cell.clean { background: #a5d6a7; } .cell.void { background: #ef9a9a; } .cell.refused { background: #bdbdbd; }
.cell.running { background: #90caf9; } .cell.planned { background: #eeeeee; } .cell.unverified { background: #ffcc80; }
</style></head><body>
<p><small>caisson view (read-only) &middot; <a href="/">all paths</a></small></p>
{% block body %}{% endblock %}
</body></html>
"""

_INDEX = """{% extends "base" %}{% block body %}
<h1>caisson view</h1>
<ul>{% for item in items %}
<li><a href="{{ item.href }}">{{ item.label }}</a> <small>{{ item.path }}</small></li>
{% endfor %}</ul>
{% endblock %}"""

_VERIFY = """<div class="verify {{ run.status }}" id="verify" data-status="{{ run.status }}">
{% if run.status == "ok" %}VERIFIED{% elif run.status == "tampered" %}TAMPERED: content below is unverified
{% elif run.status == "unclosed" %}NOT CLOSED: content after the last seal is unverified
{% else %}UNREADABLE{% endif %}
{% for line in run.verify_lines %}<div><code>{{ line }}</code></div>{% endfor %}
</div>"""

_RUN = """{% extends "base" %}{% block title %}run {{ run.run_id }}{% endblock %}{% block body %}
""" + _VERIFY + """
<h1>run {{ run.run_id or "?" }}</h1>
<p><code>{{ run.path }}</code></p>
{% if run.command %}<p>command: <code>{{ run.command | join(" ") }}</code>
{% if run.question_id %} &middot; question <code>{{ run.question_id }}</code>{% endif %}
{% if run.agent %} &middot; agent <code>{{ run.agent.name }}</code>{% endif %}</p>{% endif %}

<h2>Findings</h2>
<p><small>findings.json is derived, not signed: <code>caisson replay</code> recomputes it from the ledger.</small></p>
{% if run.status != "ok" and run.findings is not none %}<p class="verify tampered" id="findings-unverified">The ledger
does not verify now: these findings, and the answer below, are unverified.</p>{% endif %}
{% if run.findings is none %}<p id="no-findings">No findings.json: run <code>caisson replay {{ run.path }}</code>.
{% if run.findings_error %}{{ run.findings_error }}{% endif %}</p>
{% else %}
<p id="run-status">status <b>{{ run.findings.get("status") }}</b>, score {{ run.findings.get("score") }}
(verified as {{ run.findings.get("verified") }} when replayed)</p>
{% for f in run.findings.get("findings", []) %}
<div class="finding {{ f.effect }}"><b>{{ f.kind }}</b> ({{ f.effect }}, {{ f.detector }}): {{ f.message }}
<br>evidence: {% for seq in f.get("evidence", []) %}<a class="evidence" href="{{ base }}/events?start={{ [seq - 5, 0] | max }}#seq-{{ seq }}">seq {{ seq }}</a> {% endfor %}</div>
{% else %}<p>No findings.</p>{% endfor %}
<h2>Answer and grading</h2>
{% set g = run.findings.get("grade") %}
{% if run.answer %}<pre>{{ run.answer }}</pre>{% endif %}
{% if g %}<p>score {{ g.score }} (if clean {{ g.score_if_clean }}); required met: {{ g.required_met | join("; ") }};
missed: {{ g.required_missed | join("; ") }}; forbidden asserted: {{ g.forbidden_hit | join("; ") }}</p>
{% else %}<p>Not graded.</p>{% endif %}
{% endif %}

<h2>Timeline by witness</h2>
<nav><a href="{{ base }}/events">all</a>{% for w in witnesses %}<a href="{{ base }}/events?source={{ w }}">{{ w }}</a>{% endfor %}
<a href="{{ base }}/processes">process tree (strace)</a></nav>
""" + """{% include "rows" %}
{% endblock %}"""

_ROWS = """<table id="timeline" class="{{ '' if run.status == 'ok' else 'unverified' }}">
<tr><th>seq</th><th>wall time (UTC)</th><th>witness</th><th>kind</th><th>event</th></tr>
{% for row in rows %}
<tr id="seq-{{ row.seq }}" class="{{ row.mark }}{{ '' if run.status == 'ok' else ' unverified' }}" title="{{ row.detail }}">
<td class="mono">{{ row.seq }}</td><td class="mono">{{ row.wall_ns | utc }}</td><td>{{ row.source }}</td>
<td>{{ row.kind }}</td><td class="mono">{{ depth_pad(row) }}{{ row.summary }}</td></tr>
{% endfor %}</table>
{% if error %}<p class="verify tampered">reading stopped: {{ error }}</p>{% endif %}
{% if next_start is not none %}<p><a id="next" href="{{ base }}/events?start={{ next_start }}{% if source %}&source={{ source }}{% endif %}">next {{ page_size }} records</a></p>{% endif %}"""

_EVENTS = """{% extends "base" %}{% block title %}run {{ run.run_id }} events{% endblock %}{% block body %}
""" + _VERIFY + """
<h1><a href="{{ base }}">run {{ run.run_id or "?" }}</a>: records{% if source %} of {{ source }}{% endif %} from seq {{ start }}</h1>
{% include "rows" %}
{% endblock %}"""

_GRID = """<table class="grid" data-records="{{ grid.records }}">
<tr><th>arm</th><th>agent</th><th>model</th>{% for q in grid.questions %}<th>{{ q }}</th>{% endfor %}</tr>
{% for row in grid.rows %}<tr><td>{{ row[0] }}</td><td>{{ row[1] }}</td><td>{{ row[2] or "" }}</td>
{% for q in grid.questions %}<td>{% for c in grid.at(row, q) %}<a class="cell {{ c.status }}" id="cell-{{ c.cell_id }}"
 data-status="{{ c.status }}" title="{{ c.cell_id }}: {{ c.status }}{% if c.reason %}: {{ c.reason }}{% endif %} ({{ c.attempts }} attempts)"
 {% if c.run_dir %}href="{{ base }}/run?dir={{ c.run_dir | urlencode }}"{% endif %}>r{{ c.repetition }} {{ c.status }}{% if c.score is not none %} {{ "%.2f" | format(c.score) }}{% endif %}</a>{% endfor %}</td>{% endfor %}</tr>
{% endfor %}
{% for r in grid.refusals %}<tr><td>{{ r.arm }}</td><td>{{ r.agent }}</td><td>{{ r.model or "" }}</td>
<td colspan="{{ [grid.questions | length, 1] | max }}"><span class="cell refused" data-status="refused">refused ({{ r.kind }}, {{ r.cells }} cells): {{ r.reason }}</span></td></tr>{% endfor %}
</table>
<h2>Trust checklist</h2><ul id="checklist">
<li>study ledger: {{ grid.records }} records read{% if grid.state %}; {{ grid.state }}{% endif %}</li>
<li>cells settled: {{ grid.cells.values() | selectattr("status", "in", ["clean", "void"]) | list | length }} of {{ grid.cells | length }}
 ({{ grid.cells.values() | selectattr("status", "equalto", "void") | list | length }} void, never scored 0)</li>
<li>refusals recorded: {{ grid.refusals | length }}</li>
<li>controls weakened on purpose: {{ grid.weakened | join(", ") if grid.weakened else "none" }}</li>
</ul>"""

_STUDY = """{% extends "base" %}{% block title %}study {{ study.name }}{% endblock %}{% block body %}
<div id="verify-box">""" + _VERIFY.replace("run.", "study.") + """</div>
<h1>study {{ study.name }}</h1>
<p>state: <span id="study-state">{{ study.state }}</span> &middot; live: <span id="live">connecting</span></p>
<div id="grid">{{ grid | safe }}</div>
{% if report_html %}<p><a id="report-html" href="{{ base }}/report.html">the study report (HTML)</a></p>{% endif %}
{% if report %}<h2>Report</h2><div id="report"><pre>{{ report }}</pre></div>{% endif %}
<script>
// Server-sent events: the server pushes the grid when the study ledger grows; no polling here.
const source = new EventSource("{{ base }}/stream");
source.addEventListener("open", () => { document.getElementById("live").textContent = "following"; });
source.addEventListener("grid", (e) => {
  const data = JSON.parse(e.data);
  document.getElementById("grid").innerHTML = data.grid;
  document.getElementById("study-state").textContent = data.state;
  document.getElementById("verify-box").innerHTML = data.verify;
});
source.addEventListener("end", () => { source.close(); document.getElementById("live").textContent = "ended"; });
</script>
{% endblock %}"""


def environment() -> jinja2.Environment:
    """The template environment (autoescaping on for every template)."""
    env = jinja2.Environment(
        loader=jinja2.DictLoader({"base": _BASE, "index": _INDEX, "run": _RUN, "rows": _ROWS, "events": _EVENTS,
                                  "study": _STUDY, "grid": _GRID, "verify": _VERIFY}),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["utc"] = lambda ns: datetime.datetime.fromtimestamp(ns / 1e9, datetime.UTC).strftime(
        "%Y-%m-%d %H:%M:%S.%f")
    env.globals["depth_pad"] = lambda row: ""
    return env
