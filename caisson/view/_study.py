"""The study page: the matrix as a grid, updated live from the growing study ledger.

A study directory keeps its study ledger in segments, ``DIR/study/000/ledger``,
``001/`` after a resume (docs/studies.md). The grid is a pure fold over the study
events (study.planned, cell.started, cell.ended, study.aborted, study.ended); the page
receives it again each time the ledger grows, as server-sent events (the HTML
standard's ``EventSource``, section 9.2): the browser does not poll. The server follows
the ledger's file as `ledger.follow_records` does, with `ledger.LedgerChecker` checking
frames, chain and signatures against the trusted key as the bytes arrive, so a study
ledger tampered with while it is watched shows as tampered.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Any

import msgspec
import trio
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, StreamingResponse
from starlette.routing import Route

from ledger import LEDGER_FILE, LedgerChecker, Record, VerifyKey, read_records
from ledger.events import Refusal, event_kind

__all__ = ["REPORT_FILES", "GridCell", "StudyGrid", "fold", "read_grid", "routes", "segments"]

STUDY_DIR = "study"
REPORT_FILES = ("report.txt", "report.md")  # a study report beside the study, shown inline when present
REPORT_HTML = "report.html"  # caisson.report's self-contained HTML, linked when present
FOLLOW_INTERVAL_S = 0.25  # how often the server looks for new bytes in the study ledger (the page never polls)


class GridCell(msgspec.Struct, kw_only=True):
    """One cell of the matrix and where it stands."""

    cell_id: str
    arm: str
    agent: str
    model: str | None = None
    question_id: str
    repetition: int = 1
    status: str = "planned"  # planned (not yet run) | running | clean | void | unverified | unclosed | failed | refused
    attempts: int = 0
    reason: str = ""  # why void, failed or refused
    score: float | None = None
    run_dir: str = ""  # the counting (or last) attempt's run, relative to the study directory


class StudyGrid(msgspec.Struct, kw_only=True):
    """The study as the page shows it: ``rows`` are (arm, agent, model), ``columns`` the
    questions, each entry the cells of that row and question in repetition order."""

    name: str = ""
    state: str = "waiting for study.planned"  # running | ended | aborted
    cells: dict[str, GridCell] = {}
    refusals: list[Refusal] = []  # as study.planned records them
    questions: list[str] = []
    rows: list[tuple[str, str, str | None]] = []
    records: int = 0
    weakened: list[str] = []

    def at(self, row: tuple[str, str, str | None], question: str) -> list[GridCell]:
        """The cells of one row and question, by repetition."""
        found = [c for c in self.cells.values() if (c.arm, c.agent, c.model) == row and c.question_id == question]
        return sorted(found, key=lambda c: c.repetition)


def fold(records: Iterable[Record], grid: StudyGrid | None = None) -> StudyGrid:
    """Fold study events into the grid (pure; feed it more records later to update it).

    Event fields follow ledger.events: ``study.planned.cells`` are `PlannedCell`s;
    ``cell.ended`` carries status, counting, its `ledger.events.Verdict`, reason, infra_failure
    and run_dir.
    """
    grid = grid or StudyGrid()
    for record in records:
        grid.records += 1
        e = record.event
        kind = event_kind(e)
        if kind == "study.planned":
            grid.name, grid.state, grid.weakened = e.study, "running", list(getattr(e, "weakened", []))
            grid.refusals = list(e.refusals)
            for c in e.cells:
                cell = GridCell(cell_id=c.cell_id, arm=c.arm, agent=c.agent, model=c.model,
                                question_id=c.question_id, repetition=c.repetition)
                grid.cells[cell.cell_id] = cell
                row = (cell.arm, cell.agent, cell.model)
                if row not in grid.rows:
                    grid.rows.append(row)
                if cell.question_id not in grid.questions:
                    grid.questions.append(cell.question_id)
        elif kind == "cell.started" and e.cell_id in grid.cells:
            cell = grid.cells[e.cell_id]
            if cell.status not in ("clean", "void"):
                cell.status, cell.attempts, cell.run_dir = "running", max(cell.attempts, e.attempt), e.run_dir
        elif kind == "cell.ended" and e.cell_id in grid.cells:
            cell = grid.cells[e.cell_id]
            cell.attempts = max(cell.attempts, e.attempt)
            if cell.status in ("clean", "void") and not e.counting:
                continue  # the counting attempt is settled; later attempts do not change it
            cell.run_dir = e.run_dir or cell.run_dir
            if e.counting:
                cell.status = "clean" if e.status == "clean" else "void"
            elif e.infra_failure:
                cell.status = "failed"  # retried as a new attempt, or void after the last retry
            else:
                cell.status = e.status or "failed"
            cell.reason = e.explanation() or ("infra failure" if e.infra_failure else "")
            cell.score = e.verdict.score if e.verdict is not None else None
        elif kind == "study.aborted":
            grid.state = f"aborted: {e.reason}"
        elif kind == "study.ended" and not grid.state.startswith("aborted"):
            grid.state = "ended"
    return grid


def segments(study_dir: Path) -> list[Path]:
    """The study ledger's segment files, in order (``DIR/study/NNN/ledger``)."""
    root = Path(study_dir) / STUDY_DIR
    if not root.is_dir():
        return []
    return sorted(p / LEDGER_FILE for p in root.iterdir() if p.name.isdigit() and (p / LEDGER_FILE).is_file())


def read_grid(study_dir: Path, trusted: VerifyKey | None = None) -> StudyGrid:
    """The grid of a study as its ledger stands (every segment, read once).

    Raises:
        LedgerError: a segment is not a ledger, or fails a check (names it).
    """
    grid = StudyGrid()
    for path in segments(study_dir):
        fold(read_records(path, trusted), grid)
    return grid


class _Follower:
    """The study ledger read so far: each segment through its own `LedgerChecker`."""

    def __init__(self, study_dir: Path, trusted: VerifyKey):
        self.study_dir, self.trusted = study_dir, trusted
        self.grid = StudyGrid()
        self.checkers: dict[Path, tuple[LedgerChecker, int]] = {}  # segment -> (checker, bytes fed)

    def step(self) -> bool:
        """Read what the segments gained since the last call; True when the grid changed."""
        changed = False
        for path in segments(self.study_dir):
            checker, fed = self.checkers.get(path, (LedgerChecker(self.trusted, decode=True), 0))
            with open(path, "rb") as f:
                f.seek(fed)
                data = f.read()
            if data:
                checker.feed(data)
                before = self.grid.records
                fold(checker.records(), self.grid)
                changed = changed or self.grid.records != before or checker.tampered is not None
            self.checkers[path] = (checker, fed + len(data))
        return changed

    def verification(self) -> tuple[str, list[str]]:
        """(ok | tampered | unclosed | missing, lines) over the segments read so far."""
        if not self.checkers:
            return "missing", [f"no study ledger under {self.study_dir / STUDY_DIR} yet"]
        lines, status = [], "ok"
        for path, (checker, _) in self.checkers.items():
            if checker.tampered is not None:
                reason, offset, seq = checker.tampered
                status = "tampered"
                lines.append(f"TAMPERED {path}: first bad record seq {seq} at byte {offset}: {reason}")
            elif not checker.final:
                status = "unclosed" if status == "ok" else status
                lines.append(f"NOT CLOSED {path}: {checker.sealed} records sealed, {checker.expected - checker.sealed}"
                             " after the last seal (still running, or stopped)")
            else:
                lines.append(f"OK {path}: {checker.sealed} records sealed and closed")
        return status, lines

    @property
    def finished(self) -> bool:
        last = list(self.checkers.values())[-1][0] if self.checkers else None
        return last is not None and (last.final or last.tampered is not None) and (
            self.grid.state == "ended" or self.grid.state.startswith("aborted"))


def _report(study_dir: Path) -> str | None:
    for name in REPORT_FILES:
        path = study_dir / name
        if path.is_file():
            return path.read_text(errors="replace")
    return None


def routes(studies: list[Path], trusted: VerifyKey, html: Callable[..., HTMLResponse],
           render: Callable[..., str]) -> list[Route]:
    """The study routes: ``/study/{i}`` (the page) and ``/study/{i}/stream`` (its SSE)."""

    def study_of(request: Request) -> Path | None:
        i = request.path_params["i"]
        return studies[i] if 0 <= i < len(studies) else None

    def snapshot(follower: _Follower, base: str) -> dict[str, Any]:
        status, lines = follower.verification()
        return {"grid": render("grid", grid=follower.grid, base=base), "state": follower.grid.state,
                "verify": render("verify", run={"status": status, "verify_lines": lines}), "status": status}

    async def page(request: Request):
        study_dir = study_of(request)
        if study_dir is None:
            return PlainTextResponse("no such study", status_code=404)
        follower = _Follower(study_dir, trusted)
        await trio.to_thread.run_sync(follower.step)
        base = f"/study/{request.path_params['i']}"
        status, lines = follower.verification()
        return html("study", study={"name": follower.grid.name or study_dir.name, "state": follower.grid.state,
                                    "status": status, "verify_lines": lines},
                    grid=render("grid", grid=follower.grid, base=base), report=_report(study_dir),
                    report_html=(study_dir / REPORT_HTML).is_file(), base=base)

    async def stream(request: Request):
        study_dir = study_of(request)
        if study_dir is None:
            return PlainTextResponse("no such study", status_code=404)
        base = f"/study/{request.path_params['i']}"

        async def events() -> AsyncIterator[str]:
            follower = _Follower(study_dir, trusted)
            await trio.to_thread.run_sync(follower.step)
            yield f"event: grid\ndata: {msgspec.json.encode(snapshot(follower, base)).decode()}\n\n"
            while not follower.finished:
                await trio.sleep(FOLLOW_INTERVAL_S)
                if await trio.to_thread.run_sync(follower.step):
                    yield f"event: grid\ndata: {msgspec.json.encode(snapshot(follower, base)).decode()}\n\n"
            yield "event: end\ndata: {}\n\n"

        return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-store"})

    async def report_html(request: Request):
        study_dir = study_of(request)
        if study_dir is None or not (study_dir / REPORT_HTML).is_file():
            return PlainTextResponse("no report.html beside this study", status_code=404)
        body = await trio.to_thread.run_sync((study_dir / REPORT_HTML).read_bytes)
        # shown as a document of its own, with no script and no form (CSP sandbox)
        return HTMLResponse(body, headers={"Content-Security-Policy": "sandbox"})

    return [Route("/study/{i:int}", page), Route("/study/{i:int}/stream", stream),
            Route("/study/{i:int}/report.html", report_html)]
