"""The suite's turns on the shared Docker engine under pytest-xdist (tests/conftest.py):
shared tests overlap, an engine_exclusive test runs alone and is never starved."""

from __future__ import annotations

import fcntl
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import LOCKS_ENV, _engine_turn

HOLDER = """
import sys
from tests.conftest import _engine_turn
with _engine_turn(sys.argv[1] == "exclusive"):
    print("held", flush=True)
    sys.stdin.readline()
"""


@pytest.fixture
def worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This process as an xdist worker of a run whose lock directory is ``tmp_path``."""
    monkeypatch.setenv(LOCKS_ENV, str(tmp_path))
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw9")
    return tmp_path


class Holder:
    """Another worker's test, holding the engine (shared or exclusive) until released."""

    def __init__(self, kind: str):
        self.proc = subprocess.Popen([sys.executable, "-c", HOLDER, kind], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)

    def wait_held(self) -> None:
        assert self.proc.stdout.readline() == "held\n"

    def release(self) -> None:
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        assert self.proc.wait(timeout=10) == 0


def _enter(exclusive: bool) -> threading.Event:
    """Enter a turn in a thread; the event is set once it holds the engine (then it leaves)."""
    entered = threading.Event()

    def go() -> None:
        with _engine_turn(exclusive):
            entered.set()

    threading.Thread(target=go, daemon=True).start()
    return entered


def test_shared_turns_overlap(worker):
    other = Holder("shared")
    other.wait_held()
    try:
        assert _enter(exclusive=False).wait(10)
    finally:
        other.release()


@pytest.mark.parametrize("mine, theirs", [(True, "shared"), (False, "exclusive"), (True, "exclusive")])
def test_an_exclusive_turn_never_overlaps_another(worker, mine, theirs):
    other = Holder(theirs)
    other.wait_held()
    entered = _enter(exclusive=mine)
    assert not entered.wait(0.5), "entered while another worker's test held the engine"
    other.release()
    assert entered.wait(10)


def _gate_taken(locks: Path, timeout_s: float) -> bool:
    """Whether another process holds the gate within ``timeout_s`` (flock(2) locks belong to
    an open file: this probe's own fd conflicts with any other holder)."""
    deadline = time.monotonic() + timeout_s
    with open(locks / "gate", "a") as gate:
        while True:
            try:
                fcntl.flock(gate, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(gate, fcntl.LOCK_UN)
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)


def test_a_waiting_exclusive_turn_goes_before_later_shared_ones(worker):
    first = Holder("shared")
    first.wait_held()
    exclusive = Holder("exclusive")  # waits for the first, holding the gate
    try:
        assert _gate_taken(worker, 10), "the exclusive turn never took the gate"  # it started and waits
        assert not _wait_readable(exclusive, 0.5)
        later = _enter(exclusive=False)
        assert not later.wait(0.5), "a shared turn went ahead of the waiting exclusive one"
        first.release()
        exclusive.wait_held()
        assert not later.wait(0.5), "a shared turn overlapped the exclusive one"
        exclusive.release()
        assert later.wait(10)
    finally:
        for holder in (first, exclusive):
            holder.proc.kill()


def test_outside_a_worker_there_is_no_lock(tmp_path, monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.setenv(LOCKS_ENV, str(tmp_path))
    with _engine_turn(True), _engine_turn(True):  # would deadlock if it locked
        pass
    assert list(tmp_path.iterdir()) == []


def _wait_readable(holder: Holder, seconds: float) -> bool:
    """Whether the holder says it holds the engine within ``seconds``."""
    import select

    return bool(select.select([holder.proc.stdout], [], [], seconds)[0])
