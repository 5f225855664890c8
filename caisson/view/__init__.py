"""`caisson view`: a read-only local web view of runs and studies.

The run page shows the ledger's verification first, then findings linked to the records
they rest on, the answer and its grading, and the timeline by witness, paged lazily.
"""

from __future__ import annotations

from pathlib import Path

import trio

from caisson.view._app import build_app, discover
from caisson.view._study import GridCell, StudyGrid, fold, read_grid, segments
from ledger import VerifyKey

__all__ = ["GridCell", "StudyGrid", "build_app", "discover", "fold", "read_grid", "segments", "serve"]


async def serve(paths: list[Path], trusted: VerifyKey, *, host: str = "127.0.0.1", port: int = 8765,
                task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve the view with Hypercorn's trio worker until cancelled.

    Args:
        paths: run directories, study directories, or folders of runs.
        trusted: the key every ledger must be signed with.
        host: the address to bind (localhost unless the operator says otherwise).
        port: the TCP port; 0 picks a free one.
        task_status: receives the bound URLs once listening (``nursery.start``).

    Raises:
        FileNotFoundError: a path is not a run, a study or a folder of runs.
        OSError: the address cannot be bound.
    """
    from hypercorn.config import Config
    from hypercorn.trio import serve as hypercorn_serve

    app = build_app(paths, trusted)
    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None
    config.errorlog = "-"
    config.loglevel = "WARNING"
    await hypercorn_serve(app, config, task_status=task_status, mode="asgi")
