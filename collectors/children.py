"""What every process a witness or the recorder starts needs before it runs."""

from __future__ import annotations

import signal
from collections.abc import Sequence
from typing import Any

import trio

__all__ = ["clear_signal_mask", "open_child"]


def clear_signal_mask() -> None:
    """A ``preexec_fn`` (`subprocess.Popen`, `trio.lowlevel.open_process`): the child starts
    with no signal blocked.

    A child inherits the signal mask of the thread that forked it, across exec (POSIX
    ``fork``, ``execve``), and a recorder's threads may run with signals blocked: a Ray
    actor's threads block SIGINT, so tcpdump started there never saw the SIGINT that stops
    it (killed after its stop timeout, 5 s a run, its last packets and counters lost), and
    a Python child never saw a SIGTERM. Runs in the child between fork and exec: one
    ``pthread_sigmask`` call.
    """
    signal.pthread_sigmask(signal.SIG_SETMASK, ())


async def open_child(argv: Sequence[str], **options: Any) -> trio.Process:
    """`trio.lowlevel.open_process` of a witness's process, started with no signal blocked
    (`clear_signal_mask`); ``options`` as `subprocess.Popen`'s.

    Raises:
        OSError: the program cannot be run.
    """
    return await trio.lowlevel.open_process(list(argv), preexec_fn=clear_signal_mask, **options)
