"""SIGTERM settles a command as Ctrl-C does (`caisson._signals`), without a process."""

from __future__ import annotations

import os
import signal

import pytest
import trio

from caisson._signals import Terminated, run_terminable
from caisson.cli import main


def test_sigterm_cancels_the_work_runs_its_cleanup_then_raises_terminated():
    cleaned = []

    async def work() -> str:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            await trio.sleep(30)
            return "finished"
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(0.01)  # a shielded clean-up still awaits
                cleaned.append(True)

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated):
        run_terminable(work)
    assert cleaned == [True]
    assert signal.getsignal(signal.SIGTERM) == before  # the previous handler is back


def test_work_that_returns_is_returned_and_no_sigterm_handler_stays():
    before = signal.getsignal(signal.SIGTERM)

    async def work(x: int) -> int:
        await trio.sleep(0)
        return x + 1

    assert run_terminable(work, 41) == 42
    assert signal.getsignal(signal.SIGTERM) == before


def test_an_error_of_the_work_is_its_own():
    async def work() -> None:
        raise ValueError("bad input")

    with pytest.raises(ValueError, match="bad input"):
        run_terminable(work)


def test_terminated_is_a_keyboard_interrupt_and_the_cli_exits_143(monkeypatch):
    assert issubclass(Terminated, KeyboardInterrupt)  # every Ctrl-C path settles it too

    def stopped(argv):
        raise Terminated

    import caisson._cli.verify as verify

    monkeypatch.setattr(verify, "run", stopped)
    assert main(["verify", "somewhere"]) == 143
