"""Where a study's sessions run: the executor interface and the ``local`` executor.

The runner (`caisson.study.runner`) decides what runs, in which order, and what an
outcome means; an executor only runs one session (a cell's attempt, a baseline, a gating
probe) and hands back its run directory in the study directory (docs/studies.md,
"Executors"):

- ``local`` (the default): the session is recorded here, in this process, one at a time;
  its run is signed with the operator key, like the study ledger.
- ``ray`` (`caisson.study._ray`, imported only when chosen): each session is recorded by the
  long-lived caisson service of a host holding ``caisson_slot``s, signed with the host's own
  key; the run comes back content-addressed and is verified on arrival.

What a session is given and gives back (`SessionJob`, `SessionResult`) and the recording
itself (`run_session_here`) live with the recorder call, in `caisson.study._dispatch`:
this module imports no recorder, so a ray study connects to its cluster first and its
hosts start their workers while the driver imports it (docs/studies.md, "Executors").
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from caisson.errors import AllHostsDrained

if TYPE_CHECKING:
    from caisson.study._dispatch import SessionJob, SessionResult
    from ledger.events import HostKey

__all__ = ["EXECUTORS", "AllHostsDrained", "Executor", "LocalExecutor", "make_executor"]

EXECUTORS = ("local", "ray")


class Executor(Protocol):
    """What the runner needs from an executor."""

    name: str

    def slots(self) -> int:
        """How many sessions may run at once now (>= 1)."""

    def host_keys(self) -> list[HostKey]:
        """The host keys to enroll in a new study (``study.planned.host_keys``); [] local."""

    def run(self, job: SessionJob, around: Callable[[Path], contextlib.AbstractContextManager] | None
            ) -> SessionResult:
        """Record one session; its run directory is at ``job.session.run_dir`` when this returns."""

    def enroll(self, host_keys: list[HostKey]) -> None:
        """The study's enrolled host keys (new or resumed): sessions run only on those hosts."""

    def drain(self, host: str) -> None:
        """Give ``host`` no further sessions."""

    def close(self) -> None:
        """Release what the executor holds (a Ray connection)."""


class LocalExecutor:
    """Today's executor: every session recorded here, one at a time, signed with the operator key."""

    name = "local"

    def slots(self) -> int:
        return 1

    def host_keys(self) -> list[HostKey]:
        return []

    def run(self, job: SessionJob, around=None) -> SessionResult:
        from caisson.study._dispatch import run_session_here

        return run_session_here(job, around)

    def enroll(self, host_keys: list[HostKey]) -> None:
        """Nothing to enroll: local runs are signed with the operator key."""

    def drain(self, host: str) -> None:
        """Never called: a local study aborts on its abort rule instead."""

    def close(self) -> None:
        pass


def make_executor(name: str = "local", **options: Any) -> Executor:
    """The executor named ``name`` (``local`` or ``ray``); ``options`` go to `RayExecutor`.

    Raises:
        UsageError: an unknown name, options given to ``local``, or (ray) Ray is not
            installed, the cluster is unreachable or holds no ``caisson_slot``.
    """
    from caisson.errors import UsageError

    if name == "local":
        given = {k: v for k, v in options.items() if v not in (None, (), [])}
        if given:
            raise UsageError(f"--executor local takes none of: {', '.join(sorted(given))} (those are for ray)")
        return LocalExecutor()
    if name == "ray":
        try:
            from caisson.study._ray import RayExecutor
        except ImportError as exc:
            raise UsageError(f"--executor ray needs Ray: pip install 'caisson[ray]' ({exc})") from None
        return RayExecutor(**options)
    raise UsageError(f"--executor {name}: one of {', '.join(EXECUTORS)}")
