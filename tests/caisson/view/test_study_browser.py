"""The study page in headless Chromium: the grid renders and updates live (server-sent
events) while the study ledger is written, with the real study events."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import ledger.events as events
from ledger import BlobStore, LedgerWriter
from tests.caisson.view.conftest import shoot

if not hasattr(events, "CellEnded"):
    pytest.skip("the study events (ledger/events.py: study.planned, cell.*) are not on this branch yet",
                allow_module_level=True)

T0 = 1_767_225_600_000_000_000


def _planned():
    cells = [events.PlannedCell(cell_id=f"{arm}-{q}-r{rep}", arm=arm, agent="claude-code", model="m1", question_id=q,
                                repetition=rep) for arm in ("grep", "lsp") for q in ("q1", "q2") for rep in (1, 2)]
    refusals = [events.Refusal(arm="lsp", agent="codex", model="m1", gating="ungated", kind="cannot",
                               reason="codex cannot withhold its shell tool", cells=4)]
    return events.StudyPlanned(study="demo-study", study_sha256="0" * 64, cells=cells, refusals=refusals)


class StudyLedger:
    """A study ledger written event by event, each flushed (sealed) at once, as the runner does."""

    def __init__(self, study_dir: Path, key):
        seg = study_dir / "study" / "000"
        seg.mkdir(parents=True)
        self.writer = LedgerWriter(seg / "ledger", run_id="study-demo", key=key, blobs=BlobStore(seg / "blobs"),
                                   created_ns=T0, flush_interval_s=3600)
        self.n = 0

    def emit(self, event) -> None:
        self.n += 1
        self.writer.append(event, source="study", wall_ns=T0 + self.n * 10**9, mono_ns=self.n * 10**9)
        self.writer.flush()


def test_study_grid_renders_and_updates_live(tmp_path: Path, keys, serve, browser):
    study_dir = tmp_path / "study-out"
    ledger = StudyLedger(study_dir, keys[0])
    ledger.emit(_planned())
    server = serve([study_dir])
    page = browser
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(f"{server.url}/study/0")
    assert page.locator("a.cell").count() == 8
    assert page.locator("a.cell[data-status=planned]").count() == 8
    assert "codex cannot withhold its shell tool" in page.locator(".cell.refused").inner_text()
    page.wait_for_function("document.getElementById('live').textContent === 'following'")
    assert page.locator("#verify").get_attribute("data-status") == "unclosed"  # still being written

    ledger.emit(events.CellStarted(cell_id="grep-q1-r1", attempt=1, run_dir="cells/grep-q1-r1/1"))
    page.wait_for_selector("#cell-grep-q1-r1[data-status=running]", timeout=10_000)
    shoot(page, "view-study-running")
    ledger.emit(events.CellEnded(cell_id="grep-q1-r1", attempt=1, run_dir="cells/grep-q1-r1/1", status="clean",
                                 counting=True, verdict=events.Verdict(status="clean", score=1.0)))
    ledger.emit(events.CellStarted(cell_id="lsp-q2-r2", attempt=1, run_dir="cells/lsp-q2-r2/1"))
    ledger.emit(events.CellEnded(cell_id="lsp-q2-r2", attempt=1, run_dir="cells/lsp-q2-r2/1", status="void",
                                 counting=True, verdict=events.Verdict(status="void", void=[events.Finding(
                                     detector="leak@1", kind="leak", effect="void",
                                     message="read answers/key.md (excluded)")])))
    page.wait_for_selector("#cell-lsp-q2-r2[data-status=void]", timeout=10_000)
    assert page.locator("#cell-grep-q1-r1").get_attribute("data-status") == "clean"
    assert "leak: read answers/key.md" in page.locator("#cell-lsp-q2-r2").get_attribute("title")
    ledger.emit(events.StudyEnded(cells=8, counted=2, void=1))
    ledger.writer.close()
    page.wait_for_function("document.getElementById('live').textContent === 'ended'", timeout=10_000)
    assert page.locator("#study-state").inner_text() == "ended"
    assert page.locator("#verify").get_attribute("data-status") == "ok"
    shoot(page, "view-study")
    # pushed, not polled: one page load and one event stream, nothing else
    time.sleep(1)
    assert [u.split("/", 3)[3] for u in requests] == ["study/0", "study/0/stream"]
    # the report, once written beside the study, is on the page
    (study_dir / "report.md").write_text("# demo-study\n\nclaude-code: tie (inconclusive)\n")
    (study_dir / "report.html").write_text("<html><body><h1 id='r'>demo-study report</h1></body></html>")
    page.goto(f"{server.url}/study/0")
    assert "claude-code: tie (inconclusive)" in page.locator("#report").inner_text()
    page.locator("#report-html").click()
    assert page.locator("#r").inner_text() == "demo-study report"


def test_tampered_study_ledger_shows_as_tampered(tmp_path: Path, keys, serve, browser):
    study_dir = tmp_path / "study-out"
    ledger = StudyLedger(study_dir, keys[0])
    ledger.emit(_planned())
    for i in range(3):
        ledger.emit(events.CellStarted(cell_id="grep-q1-r1", attempt=i + 1))
    ledger.writer.close()
    path = study_dir / "study" / "000" / "ledger"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    page = browser
    page.goto(f"{serve([study_dir]).url}/study/0")
    assert page.locator("#verify").get_attribute("data-status") == "tampered"
    assert "TAMPERED" in page.locator("#verify").inner_text()
