"""SIGTERM ends a command as Ctrl-C does: what it holds is cleaned up, its ledger sealed.

`timeout(1)`, ``kill``, systemd and a batch scheduler stop a process with SIGTERM, whose
default action kills it before any ``finally`` runs: a recorder killed so leaves its
chamber running (until the next recorder reaps it) and its ledger without a final seal.
Here SIGTERM raises `Terminated`, a `KeyboardInterrupt`, so every path that settles a
Ctrl-C settles it too; the command line exits 143 (128 + SIGTERM) instead of 130.

A process that inherited SIGINT ignored (a job a non-interactive shell put in the
background) keeps it ignored, as Python does: Ctrl-C at a terminal never reaches it, and
SIGTERM is then the way to stop it cleanly.
"""

from __future__ import annotations

import signal
import threading
from typing import Any, Awaitable, Callable, TypeVar

__all__ = ["Terminated", "install", "run_terminable"]

T = TypeVar("T")


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived; raised once the work it stopped has unwound."""


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated


def install() -> None:
    """Make SIGTERM raise `Terminated` in plain (non-trio) code of the main thread."""
    signal.signal(signal.SIGTERM, _raise_terminated)


def run_terminable(async_fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``trio.run(async_fn, *args)`` where SIGTERM cancels `async_fn` (its ``finally``
    blocks and shielded clean-up run, as under Ctrl-C) and then raises `Terminated`; a
    result `async_fn` reached before it saw the cancellation is returned. Off the main
    thread, where no signal handler can be set, it is plain ``trio.run``. Every command
    that runs trio goes through here (`caisson.cli.run` makes SIGTERM raise `Terminated`,
    which must never land inside trio's own loop).

    Raises:
        Terminated: SIGTERM arrived before `async_fn` returned, or while trio closed
            (the work's result stands, and the process is still asked to stop).
    """
    import trio

    if threading.current_thread() is not threading.main_thread():
        return trio.run(async_fn, *args)
    returned: list[T] = []

    async def main() -> None:
        watching = trio.CancelScope()
        with trio.open_signal_receiver(signal.SIGTERM) as signals, trio.CancelScope() as scope:
            async def watch() -> None:  # a system task: `async_fn`'s errors stay its own, ungrouped
                with watching:
                    await trio.lowlevel.checkpoint()  # cancelled here if `async_fn` ended first
                    async for _ in signals:
                        scope.cancel()
                        return

            trio.lowlevel.spawn_system_task(watch)
            try:
                returned.append(await async_fn(*args))
            finally:
                watching.cancel()  # before the receiver closes under it

    trio.run(main)
    if not returned:
        raise Terminated
    return returned[0]
