"""The strace witness's trio task (collectors.strace.run_strace_witness): trace bytes in,
the parser's events out to the ledger channel unchanged, and how it ends."""

from __future__ import annotations

from pathlib import Path

import trio

from collectors.strace import NEED_DATA, StraceParser, run_strace_witness
from ledger import Submission
from ledger.events import ProcessExec, WitnessGap, WitnessStarted, WitnessStopped

GOLDEN = Path(__file__).with_name("test_strace")
KEY = bytes(range(32))
HOSTS = {17972: 90072, 17973: 90073}


class Trace(trio.abc.ReceiveStream):
    """A tracer's output: the given chunks, then EOF (or, with ``then_block``, nothing more ever)."""

    def __init__(self, chunks: list[bytes], *, then_block: bool = False):
        self.chunks, self.then_block, self.closed = list(chunks), then_block, False

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        await trio.lowlevel.checkpoint()
        if self.chunks:
            return self.chunks.pop(0)
        if self.then_block:
            await trio.sleep_forever()
        return b""

    async def aclose(self) -> None:
        self.closed = True


def parser() -> StraceParser:
    return StraceParser(root_cwd="/tmp/caisson-golden", host_pid=HOSTS.get, fingerprint_key=KEY,
                        credential_patterns=("MY_ORG_*",))


async def run(trace: Trace, *, cancel_after_s: float | None = None, root_exit_expected=lambda: True):
    send, receive = trio.open_memory_channel[Submission](10_000)
    async with trio.open_nursery() as nursery:
        await nursery.start(lambda task_status: run_strace_witness(
            send, trace=trace, parser=parser(), detail={"argv": ["strace"]},
            root_exit_expected=root_exit_expected, task_status=task_status))
        if cancel_after_s is not None:
            await trio.sleep(cancel_after_s)
            nursery.cancel_scope.cancel()
    return [item async for item in receive]


def test_the_ledger_gets_exactly_what_the_parser_emits():
    data = (GOLDEN / "env.strace").read_bytes()
    trace = Trace([data[i:i + 1000] for i in range(0, len(data), 1000)])
    got = trio.run(run, trace)
    alone = parser()
    alone.feed(data)
    alone.close()
    expected = []
    while (item := alone.next_event()) is not NEED_DATA:
        expected.append(item)
    assert got[0].event == WitnessStarted(witness="strace", detail={"argv": ["strace"]})
    assert [(s.source, s.wall_ns, s.event) for s in got[1:-1]] == [("strace", t, e) for t, e in expected]
    assert {e.host_pid for e in (s.event for s in got) if isinstance(e, ProcessExec)} == {90072, 90073}
    assert got[-1].event == WitnessStopped(witness="strace", lines=data.count(b"\n"), events=len(expected),
                                           parse_failures=0, bytes=len(data))
    assert trace.closed


def test_a_tracer_that_wrote_nothing_is_a_gap():
    got = trio.run(run, Trace([]))
    assert [type(s.event) for s in got] == [WitnessStarted, WitnessGap, WitnessStopped]
    assert (got[1].event.reason, got[1].event.missing) == ("the tracer wrote nothing", "every syscall")


def test_a_tracer_gone_before_the_agent_is_a_gap_unless_the_chamber_was_killed():
    lines = (GOLDEN / "env.strace").read_bytes().splitlines(keepends=True)
    cut = b"".join(lines[:-1])  # the root's exit line is missing
    got = trio.run(run, Trace([cut]))
    gaps = [s.event for s in got if isinstance(s.event, WitnessGap)]
    assert [g.reason for g in gaps] == ["the tracer exited before the agent"]
    assert type(got[-1].event) is WitnessStopped
    killed = trio.run(lambda: run(Trace([cut]), root_exit_expected=lambda: False))
    assert not [s for s in killed if isinstance(s.event, WitnessGap)]


def test_cancelled_mid_trace_flushes_the_parser_then_stops():
    data = (GOLDEN / "env.strace").read_bytes()
    half = data[: data.index(b"<... vfork resumed>")]  # the child's exec waits for its clone
    got = trio.run(lambda: run(Trace([half], then_block=True), cancel_after_s=0.05))
    kinds = [type(s.event) for s in got]
    assert kinds[0] is WitnessStarted and kinds[-1] is WitnessStopped
    execs = [s.event for s in got if isinstance(s.event, ProcessExec)]
    assert [e.path for e in execs] == ["/bin/sh", "/bin/true"]  # released by close()
    assert [g.event.reason for g in got if isinstance(g.event, WitnessGap)] == ["the tracer exited before the agent"]


def test_host_pids_are_found_as_the_trace_arrives_and_learned_in_order():
    """By parse time the processes are gone (the parser's own lookup finds nothing); the
    lookup made as each chunk arrived is used, per chunk: chamber pid 11 is reused."""
    T = "1796000000.000001"
    chunks = [f"10 {T} clone(child_stack=NULL, flags=SIGCHLD) = 11\n11 {T} +++ exited with 0 +++\n".encode(),
              f"10 {T} clone(child_stack=NULL, flags=SIGCHLD) = 11\n11 {T} +++ exited with 1 +++\n"
              f"10 {T} +++ exited with 0 +++\n".encode()]
    arrivals = iter([{10: 5010, 11: 5011}, {10: 5010, 11: 6011}])
    asked: list[set[int]] = []

    def host_pids(pids: set[int]) -> dict[int, int]:
        asked.append(pids)
        return next(arrivals)

    async def main():
        send, receive = trio.open_memory_channel[Submission](100)
        await run_strace_witness(send, trace=Trace(chunks), parser=StraceParser(host_pid=lambda pid: None),
                                 detail={}, host_pids=host_pids)
        return [s.event async for s in receive]

    exits = [e for e in trio.run(main) if type(e).__name__ == "ProcessExit"]
    assert [(e.pid, e.host_pid, e.code) for e in exits] == [(11, 5011, 0), (11, 6011, 1), (10, 5010, 0)]
    assert asked == [{10, 11}, {10, 11}]
