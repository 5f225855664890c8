"""The witness lifecycle (collectors/_witness.py): how every witness task starts, counts and ends."""

from __future__ import annotations

import itertools

import pytest
import trio
import trio.testing

from collectors._witness import WitnessFailed, Witnessing, witness_life
from ledger import Submission
from ledger.events import Note, WitnessGap, WitnessStarted, WitnessStopped



def _clocks() -> dict:
    """Fake clocks: wall 1000, 1001, ... and monotonic 5000, 5001, ... ns, one step per reading."""
    return {"wall_clock": itertools.count(1_000).__next__, "mono_clock": itertools.count(5_000).__next__}


async def _run(body, *, capacity: int = 100, cancel_after_s: float | None = None, close_receiver: bool = False):
    """Run ``body(w)`` inside `witness_life`; return what reached the channel."""
    send, receive = trio.open_memory_channel[Submission](capacity)
    clocks = _clocks()
    if close_receiver:
        await receive.aclose()

    async def task() -> None:
        async with witness_life(send, "w", missing="its things", **clocks) as w:
            await body(w)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(task)
        if cancel_after_s is not None:
            await trio.sleep(cancel_after_s)
            nursery.cancel_scope.cancel()
    return [] if close_receiver else [item async for item in receive]


def test_stamps_counts_and_stops_on_cancel():
    async def body(w):
        await w.started({"k": 1})
        await w.send(Note(text="a"))
        await w.send(Note(text="b"), wall_ns=7, mono_ns=8)
        w.lines, w.parse_failures, w.bytes = 3, 1, 40
        await trio.sleep_forever()

    got = trio.run(lambda: _run(body, cancel_after_s=0.05))
    assert got == [
        Submission(source="w", event=WitnessStarted(witness="w", detail={"k": 1}), wall_ns=1_000, mono_ns=5_000),
        Submission(source="w", event=Note(text="a"), wall_ns=1_001, mono_ns=5_001),
        Submission(source="w", event=Note(text="b"), wall_ns=7, mono_ns=8),
        Submission(source="w", event=WitnessStopped(witness="w", lines=3, events=2, parse_failures=1, bytes=40),
                   wall_ns=1_003, mono_ns=5_003),
    ]


def test_a_cancellation_out_of_an_inner_nursery_still_stops():
    """trio wraps a cancellation that crosses a nursery in an exception group: still a stop."""
    async def body(w):
        await w.started({})
        async with trio.open_nursery() as inner:
            inner.start_soon(trio.sleep_forever)
            await trio.sleep_forever()

    got = trio.run(lambda: _run(body, cancel_after_s=0.05))
    assert [type(s.event) for s in got] == [WitnessStarted, WitnessStopped]


def test_an_error_is_a_gap_and_the_task_returns():
    async def body(w):
        await w.started({})
        raise RuntimeError("boom")

    got = trio.run(lambda: _run(body))  # no cancel: the task returned by itself, nothing raised
    assert [type(s.event) for s in got] == [WitnessStarted, WitnessGap]
    assert got[1].event == WitnessGap(witness="w", reason="failed: RuntimeError('boom')", missing="its things",
                                      since_ns=1_001)


def test_witness_failed_says_what_is_missing_since_when():
    async def body(w):
        await w.started({})
        async with trio.open_nursery() as inner:  # from a child task: an exception group
            async def fail():
                raise WitnessFailed("socket died", missing="queries", since_ns=42, dropped=3)
            inner.start_soon(fail)
            await trio.sleep_forever()

    got = trio.run(lambda: _run(body))
    assert got[-1].event == WitnessGap(witness="w", reason="socket died", missing="queries", since_ns=42, dropped=3)
    assert WitnessStopped not in [type(s.event) for s in got]


def test_witness_failed_before_started_is_a_gap_other_errors_propagate():
    async def failed(w):
        raise WitnessFailed("cannot run tcpdump")

    got = trio.run(lambda: _run(failed))
    assert [s.event.reason for s in got] == ["cannot run tcpdump"]

    async def broken(w):
        raise OSError("cannot bind")

    with pytest.raises(BaseExceptionGroup) as caught:
        trio.run(lambda: _run(broken))
    assert caught.group_contains(OSError, match="cannot bind")


def test_cancelled_before_started_sends_nothing():
    got = trio.run(lambda: _run(lambda w: trio.sleep_forever(), cancel_after_s=0.05))
    assert got == []


def test_the_writer_gone_ends_quietly():
    async def body(w):
        await w.started({})
        raise AssertionError("not reached")  # pragma: no cover

    assert trio.run(lambda: _run(body, close_receiver=True)) == []  # no exception escaped


def test_last_events_are_bounded_when_nobody_drains():
    """A full channel that nobody reads cannot hang a stop: the stopped event waits 1 s at most."""
    async def main():
        send, receive = trio.open_memory_channel[Submission](1)
        with trio.move_on_after(10):
            async with witness_life(send, "w", missing="x") as w:
                await w.started({})  # fills the channel
                await w.send(Note(text="never fits"))
        return trio.current_time(), receive

    clock = trio.testing.MockClock(autojump_threshold=0)
    ended, receive = trio.run(main, clock=clock)
    assert 11 <= ended < 11.5  # the deadline, then 1 s for the stopped event, then given up
    assert type(receive.receive_nowait().event) is WitnessStarted
    with pytest.raises(trio.EndOfChannel):  # nothing more, and the witness closed its end
        receive.receive_nowait()


def test_stopped_is_sent_once():
    async def body(w):
        await w.started({})
        await w.stopped()
        await w.stopped()
        await trio.sleep_forever()

    got = trio.run(lambda: _run(body, cancel_after_s=0.05))
    assert [type(s.event) for s in got] == [WitnessStarted, WitnessStopped]


class _Steps(trio.abc.Instrument):
    """Counts the scheduler turns of tasks by name."""

    def __init__(self, name: str):
        self.name, self.steps = name, 0

    def before_task_step(self, task) -> None:
        self.steps += task.name.endswith(self.name)


def test_send_many_sends_in_order_in_one_turn_and_waits_only_when_full():
    async def body(w):
        await w.started({})
        await w.send_many([(Note(text=str(i)), 100 + i if i % 2 else None) for i in range(5)])
        await w.stopped()

    got = trio.run(lambda: _run(body))
    notes = [item for item in got if isinstance(item.event, Note)]
    assert [(n.event.text, n.wall_ns) for n in notes] == [("0", 1_001), ("1", 101), ("2", 1_003), ("3", 103),
                                                           ("4", 1_005)]
    assert [n.mono_ns for n in notes] == [5_001, 5_002, 5_003, 5_004, 5_005]
    assert got[-1].event == WitnessStopped(witness="w", lines=0, events=5, parse_failures=0, bytes=0)

    async def sender(capacity: int) -> list[str]:
        send, receive = trio.open_memory_channel[Submission](capacity)
        texts: list[str] = []

        async def drain() -> None:
            async for item in receive:
                texts.append(item.event.text)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(drain)
            async with send:
                await Witnessing(send, "w", **_clocks()).send_many([(Note(text=str(i)), None) for i in range(200)])
        return texts

    steps = _Steps("sender")
    assert trio.run(sender, 1000, instruments=[steps]) == [str(i) for i in range(200)]
    assert steps.steps < 10  # one turn per event (`send`) would be over 200
    assert trio.run(sender, 3) == [str(i) for i in range(200)]  # a full channel: waits, loses nothing
