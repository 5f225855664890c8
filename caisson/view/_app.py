"""The `caisson view` web application: Starlette routes over run and study directories.

Read-only: every route is a GET that reads ledgers, ``findings.json`` and reports; none
writes a byte. Study pages receive live updates as server-sent events (the `EventSource`
API of the HTML standard, section 9.2) from a task following the growing study ledger.
"""

from __future__ import annotations

import functools
from pathlib import Path

import trio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse
from starlette.routing import Route

from caisson.view import _run, _study
from caisson.view._templates import environment
from ledger import LEDGER_FILE, VerifyKey

__all__ = ["build_app", "discover"]


def discover(paths: list[Path]) -> tuple[list[Path], list[Path]]:
    """Split the given paths into run directories and study directories.

    A run directory holds a ``ledger`` file; a study directory holds a ``study.ledger``
    or a ``runs/`` folder of run directories (those runs are listed too).

    Raises:
        FileNotFoundError: a path is neither (names it).
    """
    runs: list[Path] = []
    studies: list[Path] = []
    for path in paths:
        path = Path(path)
        if (path / LEDGER_FILE).is_file():
            runs.append(path)
            continue
        found = sorted(p.parent for p in path.glob(f"*/{LEDGER_FILE}")) + sorted(
            p.parent for p in path.glob(f"runs/*/{LEDGER_FILE}"))
        if _study.segments(path):
            studies.append(path)
        if not found and path not in studies:
            raise FileNotFoundError(f"{path}: not a run directory (no {LEDGER_FILE}), a study or a folder of runs")
        runs.extend(found)
    return runs, studies


class _Cache:
    """Each run's `RunView`, reopened when its ledger file changes (size or mtime)."""

    def __init__(self, trusted: VerifyKey):
        self._trusted = trusted
        self._views: dict[Path, tuple[tuple[int, int], _run.RunView]] = {}

    def get(self, run_dir: Path) -> _run.RunView:
        stat = (run_dir / LEDGER_FILE).stat()
        stamp = (stat.st_size, stat.st_mtime_ns)
        cached = self._views.get(run_dir)
        if cached is None or cached[0] != stamp:
            cached = (stamp, _run.open_run(run_dir, self._trusted))
            self._views[run_dir] = cached
        return cached[1]


def build_app(paths: list[Path], trusted: VerifyKey) -> Starlette:
    """The ASGI application over ``paths``.

    Args:
        paths: run directories, study directories, or folders of runs.
        trusted: the key every ledger must be signed with (the operator's by default).

    Raises:
        FileNotFoundError: a path is not a run, a study or a folder of runs.
    """
    runs, studies = discover(paths)
    env = environment()
    cache = _Cache(trusted)

    def html(name: str, **context) -> HTMLResponse:
        return HTMLResponse(env.get_template(name).render(**context))

    def run_dir_of(request: Request) -> Path | None:
        i = request.path_params["i"]
        return runs[i] if 0 <= i < len(runs) else None

    async def index(request: Request) -> HTMLResponse:
        items = [{"href": f"/study/{i}", "label": f"study {p.name}", "path": str(p)} for i, p in enumerate(studies)]
        items += [{"href": f"/run/{i}", "label": f"run {p.name}", "path": str(p)} for i, p in enumerate(runs)]
        return html("index", items=items)

    async def run_page(request: Request):
        run_dir = run_dir_of(request)
        if run_dir is None:
            return PlainTextResponse("no such run", status_code=404)
        view = await trio.to_thread.run_sync(cache.get, run_dir)
        rows, next_start, error = await trio.to_thread.run_sync(
            functools.partial(_run.page, run_dir, excluded=view.excluded))
        return html("run", run=view, rows=rows, next_start=next_start, error=error, source=None,
                    base=f"/run/{request.path_params['i']}", witnesses=_run.WITNESSES, page_size=_run.PAGE_SIZE)

    async def events_page(request: Request):
        run_dir = run_dir_of(request)
        if run_dir is None:
            return PlainTextResponse("no such run", status_code=404)
        try:
            start = max(0, int(request.query_params.get("start", "0")))
        except ValueError:
            return PlainTextResponse("start: not an integer", status_code=400)
        source = request.query_params.get("source") or None
        view = await trio.to_thread.run_sync(cache.get, run_dir)
        rows, next_start, error = await trio.to_thread.run_sync(
            functools.partial(_run.page, run_dir, start=start, source=source, excluded=view.excluded))
        return html("events", run=view, rows=rows, next_start=next_start, error=error, source=source, start=start,
                    base=f"/run/{request.path_params['i']}", page_size=_run.PAGE_SIZE)

    async def processes_page(request: Request):
        run_dir = run_dir_of(request)
        if run_dir is None:
            return PlainTextResponse("no such run", status_code=404)
        view = await trio.to_thread.run_sync(cache.get, run_dir)
        tree, error = await trio.to_thread.run_sync(_run.process_tree, run_dir)
        depth = {row.seq: d for d, row in tree}
        page_env = env.overlay()
        page_env.globals["depth_pad"] = lambda row: "\u2003" * depth.get(row.seq, 0)
        return HTMLResponse(page_env.get_template("events").render(
            run=view, rows=[row for _, row in tree], next_start=None, error=error, source="strace (process tree)",
            start=0, base=f"/run/{request.path_params['i']}", page_size=_run.PAGE_SIZE))

    routes = [
        Route("/", index),
        Route("/run/{i:int}", run_page),
        Route("/run/{i:int}/events", events_page),
        Route("/run/{i:int}/processes", processes_page),
    ]
    async def study_run(request: Request):
        """A cell's run, by its directory relative to the study (cells appear while it runs)."""
        i = request.path_params["i"]
        rel = request.query_params.get("dir", "")
        if not 0 <= i < len(studies) or not rel:
            return PlainTextResponse("no such study or cell", status_code=404)
        target = (studies[i] / rel).resolve()
        if not target.is_relative_to(studies[i].resolve()) or not (target / LEDGER_FILE).is_file():
            return PlainTextResponse(f"{rel}: no run ledger there (yet)", status_code=404)
        known = [p.resolve() for p in runs]
        if target not in known:
            runs.append(target)
            known.append(target)
        return RedirectResponse(f"/run/{known.index(target)}", status_code=303)

    def render(name: str, **context) -> str:
        return env.get_template(name).render(**context)

    routes.append(Route("/study/{i:int}/run", study_run))
    routes += _study.routes(studies, trusted, html, render)
    return Starlette(routes=routes)
