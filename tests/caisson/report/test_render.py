"""The renderings: text, markdown, JSON, and the HTML file loaded in headless Chromium."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import msgspec

from caisson.report import (
    Disagreement,
    JudgeSummary,
    Price,
    Refusal,
    Report,
    build_report,
    render_html,
    render_json,
    render_markdown,
    render_text,
)
from tests.caisson.conftest import require
from tests.caisson.report.study import baselines, cells, study

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def _report(**kw) -> Report:
    cs = (cells("claude-code", "lean", 24, 3, lambda q, r: 0.65 + 0.01 * r, kind=("locate", "absence")[0])
          + cells("claude-code", "rich", 24, 3, lambda q, r: 0.50 + 0.01 * r)
          + cells("codex", "lean", 4, 3, lambda q, r: 0.8, gating="ungated"))
    cs[0] = msgspec.structs.replace(cs[0], status="void", score=None, void_reason="tool_escape",
                                    findings=("tool_escape",))
    judge = JudgeSummary(requested_model="judge-1", served_models=("judge-1", "judge-1-20250101"), cells_judged=10,
                         disagreements=(Disagreement(cell_id=cs[3].cell_id, question_id="q1", score=0.66,
                                                     judge_verdict="incorrect", answer_excerpt="<b>it is in x.py</b>"),))
    return build_report(study(cs, baselines("claude-code", ["lean", "rich"])
                              + baselines("codex", ["lean"], isolation="unavailable"),
                              refusals=(Refusal(arm="rich", agent="codex", model="m1", reason="ungated agent: an arm"
                                                " that withholds tools cannot run", gating="ungated", kind="cannot",
                                                cells=4),),
                              prices={"m1": Price(input_usd_per_mtok=3.0, output_usd_per_mtok=15.0)},
                              judge=judge), **kw)


def test_text_puts_the_checklist_first_and_states_every_figure_with_its_context():
    text = render_text(_report(), width=400)
    assert text.index("Trust checklist") < text.index("Agent claude-code") < text.index("Agent codex")
    assert "FAIL: winner claims withheld" in text
    assert "tool_escape" in text and "WITHHELD [withheld: trust checklist FAIL (tool_escape)]" in text
    assert "first_party:claude-code result.usage" in text  # the source beside the figure
    assert "ungated agent: an arm that withholds tools cannot run" in text
    assert "no tool audit for ungated agents" in text
    assert "abab" * 16 in text and "x@1" in text  # ledger head and detector versions


def test_untrusted_claims_are_labelled_in_every_rendering():
    report = _report(allow_untrusted=True)
    for out in (render_text(report, width=400), render_markdown(report)):
        assert "WINNER lean [UNTRUSTED: trust checklist FAIL (tool_escape)]" in out


def test_markdown_is_one_table_per_section():
    md = render_markdown(_report())
    assert md.startswith("# Study report: playbook\n")
    headings = re.findall(r"^## (.+)$", md, flags=re.M)
    assert headings[0].startswith("Trust checklist") and "Known limitations" in headings[-1]
    assert "| trust | tool_escape | FAIL | 1 |" in md
    # the alarm row; the agent's text is shown, never rendered as HTML
    assert "| claude-code-lean-m1-q1-r0 | q1 | 0.66 | incorrect | &lt;b&gt;it is in x.py&lt;/b&gt; |" in md


def test_text_shows_control_characters_never_sends_them():
    report = _report()
    report = msgspec.structs.replace(report, refusals=[msgspec.structs.replace(report.refusals[0],
                                                                               reason="x\x1b[2Jy")])
    text = render_text(report, width=400)
    assert "\x1b" not in text and "x\\x1b[2Jy" in text


def test_markdown_escapes_a_pipe_in_data():
    report = _report()
    report = msgspec.structs.replace(report, refusals=[msgspec.structs.replace(report.refusals[0],
                                                                               reason="a | b\nc")])
    assert "| codex | rich | m1 | ungated | a \\| b c |" in render_markdown(report)


def test_json_round_trips_into_the_report_type():
    report = _report()
    assert msgspec.json.decode(render_json(report), type=Report) == report


def test_html_is_self_contained():
    page = render_html(_report())
    assert "<script" not in page and "http://" not in page and "https://" not in page
    assert "&lt;b&gt;it is in x.py&lt;/b&gt;" in page  # the answer excerpt is escaped
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert len(images) == 2  # one figure per agent
    assert all(base64.b64decode(i).startswith(b"\x89PNG") for i in images)


_BROWSER = """
import json, sys
from playwright.sync_api import sync_playwright
path, shot, exe, args = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
problems = []
with sync_playwright() as p:
    browser = p.chromium.launch(executable_path=exe, args=args)  # a fresh temporary profile
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}"))
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
        page.goto(path, wait_until="load")
        widths = page.eval_on_selector_all("img", "imgs => imgs.map(i => i.naturalWidth)")
        page.screenshot(path=shot, full_page=True)
    finally:
        browser.close()
print(json.dumps([problems, widths]))
"""


def _load(path: Path, shot: Path) -> tuple[list[str], list[int]]:
    """Open ``path`` in headless Chromium; return (every console message, page error and
    failed request; each image's natural width) and save a full-page screenshot.

    Playwright runs in a child interpreter: its sync API refuses a process where
    trio-asyncio (imported by caisson) has installed its event loop policy."""
    proc = subprocess.run([sys.executable, "-c", _BROWSER, path.as_uri(), str(shot), CHROMIUM,
                           json.dumps(CHROMIUM_ARGS)], capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    problems, widths = json.loads(proc.stdout.strip().splitlines()[-1])
    return problems, widths


def _need_browser() -> None:
    try:
        import playwright  # noqa: F401
    except ImportError:
        require("playwright not installed: pip install playwright (no browser download needed)")
    require(None if shutil.which(CHROMIUM) else "chromium not installed: apt-get install chromium")


def test_html_loads_in_headless_chromium_without_console_errors(tmp_path):
    _need_browser()
    page = tmp_path / "report.html"
    page.write_text(render_html(_report()))
    shot = tmp_path / "report.png"
    problems, widths = _load(page, shot)
    print(f"\nscreenshot of the HTML report: {shot}")
    assert problems == []
    assert len(widths) == 2 and all(w > 0 for w in widths)
    assert shot.stat().st_size > 10_000


def test_the_browser_check_catches_a_broken_page(tmp_path):
    _need_browser()
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><html><body><script>console.error("boom")</script>'
                   '<img src="missing.png"></body></html>')
    problems, widths = _load(bad, tmp_path / "bad.png")
    assert "console error: boom" in problems
    assert any(p.startswith("request failed:") for p in problems) and widths == [0]
