"""Tests for `caisson.run.stream`: monitor addresses, the gap tracker, and real monitor sockets."""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trio

from caisson.errors import UsageError
from caisson.run.stream import (
    Gap,
    GapTracker,
    MonitorAddress,
    MonitorSink,
    parse_monitor_address,
    record_json,
)
from ledger import LedgerWriter, Record, SigningKey, read_records
from ledger.events import Note

# --- helpers -------------------------------------------------------------------------------


def make_record(seq: int, text_bytes: int = 16) -> Record:
    return Record(seq=seq, wall_ns=1_700_000_000_000_000_000 + seq, mono_ns=seq, source="test",
                  event=Note(text="x" * text_bytes))


class Monitor:
    """A test monitor: accepts connections, parses JSON lines, one list of items per connection.

    Args:
        listener: where to accept.
        stalled: accept but do not read until `resume` is set.
        close_after: close each connection after this many items (a dying monitor).
    """

    def __init__(self, listener: trio.SocketListener, *, stalled: bool = False, close_after: int | None = None):
        self.listener = listener
        self.close_after = close_after
        self.connections: list[list[dict]] = []
        self.resume = trio.Event()
        if not stalled:
            self.resume.set()
        self._changed = trio.Event()

    async def serve(self, connections: int = 1, *, close_listener: bool = False) -> None:
        for _ in range(connections):
            stream = await self.listener.accept()
            if close_listener and len(self.connections) + 1 == connections:
                await self.listener.aclose()
            items: list[dict] = []
            self.connections.append(items)
            self._pulse()
            await self._read(stream, items)

    async def _read(self, stream: trio.abc.Stream, items: list[dict]) -> None:
        async with stream:
            await self.resume.wait()
            buf = b""
            while True:
                data = await stream.receive_some(65536)
                if not data:
                    return
                *lines, buf = (buf + data).split(b"\n")
                items.extend(json.loads(line) for line in lines)
                self._pulse()
                if self.close_after is not None and len(items) >= self.close_after:
                    return

    def _pulse(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        while not predicate():
            await self._changed.wait()


def walk(items: list[dict]) -> tuple[list[int], list[Gap]]:
    """Check that items continue each other exactly; return the received seqs and the gaps."""
    received: list[int] = []
    gaps: list[Gap] = []
    expected: int | None = None
    for item in items:
        if "gap" in item:
            gap = Gap(**item["gap"])
            assert expected is None or gap.first_seq == expected, (item, expected)
            assert gap.missed == gap.last_seq - gap.first_seq + 1 > 0, item
            gaps.append(gap)
            expected = gap.last_seq + 1
        else:
            assert expected is None or item["seq"] == expected, (item["seq"], expected)
            received.append(item["seq"])
            expected = item["seq"] + 1
    return received, gaps


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    """A short temp dir: unix socket paths are limited to ~107 bytes."""
    path = Path(tempfile.mkdtemp(prefix="cs-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def unix_listener(path: Path) -> trio.SocketListener:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # accepted sockets inherit it
    sock.bind(str(path))
    sock.listen(8)
    return trio.SocketListener(trio.socket.from_stdlib_socket(sock))


async def listen(kind: str, sock_dir: Path) -> tuple[trio.SocketListener, MonitorAddress]:
    if kind == "unix":
        path = sock_dir / "m.sock"
        return unix_listener(path), MonitorAddress(kind="unix", path=str(path))
    (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
    return listener, MonitorAddress(kind="tcp", host="127.0.0.1", port=listener.socket.getsockname()[1])


# --- addresses ---------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("unix:/run/m.sock", MonitorAddress(kind="unix", path="/run/m.sock")),
    ("unix:rel.sock", MonitorAddress(kind="unix", path="rel.sock")),
    ("tcp:127.0.0.1:9000", MonitorAddress(kind="tcp", host="127.0.0.1", port=9000)),
    ("tcp:monitor.example:1", MonitorAddress(kind="tcp", host="monitor.example", port=1)),
    ("tcp:[::1]:65535", MonitorAddress(kind="tcp", host="::1", port=65535)),
])
def test_parse_monitor_address(text: str, expected: MonitorAddress) -> None:
    assert parse_monitor_address(text) == expected
    assert parse_monitor_address(str(expected)) == expected


@pytest.mark.parametrize("text", [
    "", "monitor", "/run/m.sock", "unix:", "tcp:", "tcp:host", "tcp::9000", "tcp:host:0", "tcp:host:65536",
    "tcp:host:port", "tcp:host:+1", "tcp:host:\uff11", "udp:host:9000", "UNIX:/x",
])
def test_parse_monitor_address_rejects(text: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_monitor_address(text)
    message = str(info.value)
    assert repr(text) in message and "unix:/path/to.sock" in message and "tcp:HOST:PORT" in message


# --- the gap tracker (sans-IO) -------------------------------------------------------------


def lines_of(tracker: GapTracker, max_bytes: int = 1 << 20) -> list[dict]:
    batch = tracker.take(max_bytes)
    assert batch is not None
    tracker.commit(batch)
    return [json.loads(line) for line in batch.data.splitlines()]


def test_tracker_drops_when_full_and_reports_gap_before_next_line() -> None:
    tracker = GapTracker(3)
    for seq in range(7):
        if tracker.full:
            tracker.drop(seq)
        else:
            tracker.push(seq, record_json(make_record(seq)))
    assert [item["seq"] for item in lines_of(tracker)] == [0, 1, 2]
    tracker.push(7, record_json(make_record(7)))
    assert lines_of(tracker) == [{"gap": {"first_seq": 3, "last_seq": 6, "missed": 4}}, json.loads(record_json(make_record(7)))]
    assert tracker.take() is None and tracker.empty
    stats = tracker.finish()
    assert (stats.offered, stats.sent, stats.dropped, stats.gaps) == (8, 4, 4, 1)


def test_tracker_sends_open_gap_when_buffer_empties() -> None:
    tracker = GapTracker(1)
    tracker.push(0, b"{}")
    tracker.drop(1)
    tracker.drop(2)
    assert lines_of(tracker, max_bytes=1) == [{}]
    assert lines_of(tracker) == [{"gap": {"first_seq": 1, "last_seq": 2, "missed": 2}}]
    assert tracker.empty


def test_tracker_failed_batch_becomes_gap_merged_with_following_gap() -> None:
    tracker = GapTracker(2)
    tracker.push(0, b"{}")
    tracker.push(1, b"{}")
    batch = tracker.take()
    tracker.drop(2)
    tracker.push(3, b"{}")  # closes the gap 2..2
    tracker.fail(batch)
    assert lines_of(tracker) == [{"gap": {"first_seq": 0, "last_seq": 2, "missed": 3}}, {}]
    stats = tracker.finish()
    assert (stats.offered, stats.sent, stats.dropped, stats.gaps) == (4, 1, 3, 1)


def test_tracker_failed_batch_merges_with_open_gap_and_finish_counts_leftovers() -> None:
    tracker = GapTracker(1)
    tracker.push(0, b"{}")
    tracker.drop(1)  # open gap 1..1
    batch = tracker.take()
    tracker.fail(batch)
    assert lines_of(tracker) == [{"gap": {"first_seq": 0, "last_seq": 1, "missed": 2}}]
    tracker.push(2, b"{}")  # never sent: dropped at finish
    stats = tracker.finish()
    assert (stats.offered, stats.sent, stats.dropped, stats.gaps) == (3, 0, 3, 1)
    assert tracker.empty


# --- sinks on real sockets -------------------------------------------------------------


@pytest.mark.parametrize("kind", ["unix", "tcp"])
def test_fast_monitor_gets_every_line_in_order(kind: str, sock_dir: Path) -> None:
    records = [make_record(seq) for seq in range(3000)]

    async def main() -> None:
        listener, address = await listen(kind, sock_dir)
        monitor = Monitor(listener)
        sink = MonitorSink(address)
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(monitor.serve)
                await nursery.start(sink.run)
                for record in records:
                    sink.offer(record)
                    if record.seq % 100 == 0:
                        await trio.sleep(0)
                stats = await sink.aclose()
        assert monitor.connections == [[json.loads(record_json(r)) for r in records]]
        assert (stats.offered, stats.sent, stats.dropped, stats.gaps, stats.connections) == (3000, 3000, 0, 0, 1)

    trio.run(main)


def test_stalled_monitor_never_blocks_offer_and_gets_exact_gap(sock_dir: Path) -> None:
    async def main() -> None:
        listener, address = await listen("unix", sock_dir)
        monitor = Monitor(listener, stalled=True)
        sink = MonitorSink(address, buffer_events=1000)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(monitor.serve)
            await nursery.start(sink.run)
            with trio.fail_after(5):
                await monitor.wait_for(lambda: bool(monitor.connections))
            slowest = 0.0
            start = time.perf_counter()
            with trio.fail_after(5):
                for seq in range(50_000):
                    t0 = time.perf_counter()
                    sink.offer(make_record(seq, text_bytes=1024))
                    slowest = max(slowest, time.perf_counter() - t0)
                    if seq % 100 == 0:
                        await trio.sleep(0)  # let the sink run: it blocks in send_all
            # A blocked offer would wait on the stalled socket for good; one preempted by a busy
            # host (2 cores, other work) takes a scheduler slice or two, never a second.
            assert time.perf_counter() - start < 5 and slowest < 1.0
            stalled = sink.stats()
            assert stalled.dropped > 40_000 and stalled.sent + stalled.dropped < 50_000
            monitor.resume.set()
            with trio.fail_after(10):
                await monitor.wait_for(lambda: any("gap" in item for item in monitor.connections[0]))
            for seq in range(50_000, 50_010):
                sink.offer(make_record(seq))
            with trio.fail_after(10):
                stats = await sink.aclose()
        received, gaps = walk(monitor.connections[0])
        assert received[0] == 0 and received[-1] == 50_009
        assert len(gaps) == 1 and 0 < gaps[0].first_seq and gaps[0].last_seq < 50_000
        assert received[-10:] == list(range(50_000, 50_010))
        assert gaps[0].missed == stats.dropped == 50_010 - len(received)
        assert (stats.offered, stats.sent, stats.gaps, stats.connections) == (50_010, len(received), 1, 1)

    trio.run(main)


@pytest.mark.parametrize("kind", ["unix", "tcp"])
def test_absent_monitor_at_start_gets_buffered_lines_then_gap(kind: str, sock_dir: Path) -> None:
    async def main() -> None:
        if kind == "unix":
            address = MonitorAddress(kind="unix", path=str(sock_dir / "late.sock"))
        else:
            probe = trio.socket.socket()
            await probe.bind(("127.0.0.1", 0))
            address = MonitorAddress(kind="tcp", host="127.0.0.1", port=probe.getsockname()[1])
            probe.close()  # nothing listens there now
        sink = MonitorSink(address, buffer_events=10, retry_initial_s=0.01, retry_max_s=0.05)
        async with trio.open_nursery() as nursery:
            await nursery.start(sink.run)
            for seq in range(25):
                sink.offer(make_record(seq))
            await trio.sleep(0.1)  # a few refused connection attempts
            assert not sink.connected and sink.stats().connections == 0
            if kind == "unix":
                listener = unix_listener(sock_dir / "late.sock")
            else:
                (listener,) = await trio.open_tcp_listeners(address.port, host="127.0.0.1")
            monitor = Monitor(listener)
            nursery.start_soon(monitor.serve)
            with trio.fail_after(5):
                await monitor.wait_for(lambda: bool(monitor.connections) and len(monitor.connections[0]) == 11)
            for seq in range(25, 30):
                sink.offer(make_record(seq))
            with trio.fail_after(5):
                stats = await sink.aclose()
        received, gaps = walk(monitor.connections[0])
        assert received == [*range(10), *range(25, 30)]
        assert gaps == [Gap(first_seq=10, last_seq=24, missed=15)]
        assert (stats.offered, stats.sent, stats.dropped, stats.gaps, stats.connections) == (30, 15, 15, 1, 1)

    trio.run(main)


def test_monitor_that_disconnects_and_a_new_one_gets_gap(sock_dir: Path) -> None:
    path = sock_dir / "m.sock"

    async def main() -> None:
        first = Monitor(unix_listener(path), close_after=10)
        sink = MonitorSink(MonitorAddress(kind="unix", path=str(path)), buffer_events=50,
                           retry_initial_s=0.01, retry_max_s=0.05)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: first.serve(1, close_listener=True))
            await nursery.start(sink.run)
            for seq in range(10):
                sink.offer(make_record(seq))
            with trio.fail_after(5):
                await first.wait_for(lambda: bool(first.connections) and len(first.connections[0]) == 10)
                while sink.connected:  # the sink sees the close without writing
                    await trio.sleep(0.005)
            os.unlink(path)
            for seq in range(10, 210):  # nobody listens: 50 wait, 150 are dropped
                sink.offer(make_record(seq))
            await trio.sleep(0.05)
            second = Monitor(unix_listener(path))
            nursery.start_soon(second.serve)
            with trio.fail_after(5):
                await second.wait_for(lambda: bool(second.connections) and len(second.connections[0]) == 51)
            for seq in range(210, 220):
                sink.offer(make_record(seq))
            with trio.fail_after(5):
                stats = await sink.aclose()
        assert walk(first.connections[0]) == (list(range(10)), [])
        received, gaps = walk(second.connections[0])
        assert received == [*range(10, 60), *range(210, 220)]
        assert gaps == [Gap(first_seq=60, last_seq=209, missed=150)]
        assert (stats.offered, stats.sent, stats.dropped, stats.gaps, stats.connections) == (220, 70, 150, 1, 2)

    trio.run(main)


def test_monitors_dying_mid_flow_each_sees_a_consistent_stream(sock_dir: Path) -> None:
    async def main() -> None:
        listener, address = await listen("tcp", sock_dir)
        monitor = Monitor(listener, close_after=500)
        sink = MonitorSink(address, buffer_events=200, retry_initial_s=0.01, retry_max_s=0.05)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: monitor.serve(3))
            await nursery.start(sink.run)
            with trio.fail_after(20):
                seq = 0
                while len(monitor.connections) < 3 or len(monitor.connections[2]) < 500:
                    sink.offer(make_record(seq, text_bytes=200))
                    seq += 1
                    if seq % 300 == 0:  # bursts larger than the buffer: drops while connected
                        await trio.sleep(0.001)
            stats = await sink.aclose(drain_timeout_s=0.5)
        assert stats.connections >= 3 and stats.offered == seq == stats.sent + stats.dropped
        for items in monitor.connections:
            received, gaps = walk(items)  # in order, and every gap exactly fills its hole
            assert received and gaps

    trio.run(main)


def test_ledger_writer_listener_every_seq_received_or_in_gap_exactly_once(tmp_path: Path, sock_dir: Path) -> None:
    async def main() -> None:
        listener, address = await listen("unix", sock_dir)
        monitor = Monitor(listener)
        sink = MonitorSink(address, buffer_events=100)
        writer = LedgerWriter(tmp_path / "ledger", run_id="run-stream", key=SigningKey.generate())
        writer.add_listener(sink.offer)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(monitor.serve)
            await nursery.start(sink.run)
            with trio.fail_after(20):
                await monitor.wait_for(lambda: bool(monitor.connections))
                for i in range(20_000):
                    writer.append(Note(text=f"event {i} " + "y" * 300), source="test")
                    if i % 500 == 0:
                        await trio.sleep(0)
                writer.close()
                stats = await sink.aclose(drain_timeout_s=10)
        seqs = [r.seq for r in read_records(tmp_path / "ledger")]
        assert seqs == list(range(20_000))
        received, gaps = walk(monitor.connections[0])
        covered = received + [s for g in gaps for s in range(g.first_seq, g.last_seq + 1)]
        assert sorted(covered) == seqs  # each seq exactly once
        assert gaps and stats.dropped == sum(g.missed for g in gaps)
        assert (stats.offered, stats.sent, stats.gaps) == (20_000, len(received), len(gaps))

    trio.run(main)


def test_aclose_with_absent_monitor_counts_buffered_as_dropped(sock_dir: Path) -> None:
    async def main() -> None:
        sink = MonitorSink(MonitorAddress(kind="unix", path=str(sock_dir / "none.sock")), retry_initial_s=0.01)
        for seq in range(5):
            sink.offer(make_record(seq))  # before run starts: fine, never waits
        async with trio.open_nursery() as nursery:
            await nursery.start(sink.run)
            start = trio.current_time()
            stats = await sink.aclose(drain_timeout_s=0.2)
            assert trio.current_time() - start < 1
        assert (stats.offered, stats.sent, stats.dropped, stats.gaps, stats.connections) == (5, 0, 5, 0, 0)

    trio.run(main)


def test_aclose_without_run() -> None:
    async def main() -> None:
        sink = MonitorSink(parse_monitor_address("tcp:127.0.0.1:9"))
        sink.offer(make_record(0))
        stats = await sink.aclose()
        sink.offer(make_record(1))  # after close: dropped, still never waits
        assert (stats.offered, stats.dropped) == (1, 1)
        assert sink.stats().dropped == 2

    trio.run(main)


def test_aclose_does_not_wait_out_the_retry_delay_when_nothing_is_pending(sock_dir: Path) -> None:
    async def main() -> None:
        sink = MonitorSink(MonitorAddress(kind="unix", path=str(sock_dir / "none.sock")), retry_initial_s=30)
        async with trio.open_nursery() as nursery:
            await nursery.start(sink.run)
            await trio.sleep(0.01)  # the first attempt failed; the sink pauses 30 s
            with trio.fail_after(1):
                stats = await sink.aclose(drain_timeout_s=10)
        assert (stats.offered, stats.connections) == (0, 0)

    trio.run(main)


def test_head_lines_go_in_order_uncounted_and_a_failed_one_is_not_a_gap(tmp_path: Path) -> None:
    from ledger import load_heads

    writer = LedgerWriter(tmp_path / "ledger", run_id="run-heads", key=SigningKey.generate(), flush_records=2)
    tracker = GapTracker(10)
    seals: list = []
    writer.add_seal_listener(seals.append)
    for i in range(3):
        tracker.push(i, record_json(make_record(i)))
        writer.append(Note(text=f"n{i}"), source="test")
    writer.close()
    assert [s.upto for s in seals] == [2, 3]
    from ledger import encode_head

    tracker.push_head(encode_head(seals[0]))
    tracker.push(3, record_json(make_record(3)))
    lines = lines_of(tracker)
    assert [next(iter(line)) for line in lines] == ["seq", "seq", "seq", "head", "seq"]
    heads = tmp_path / "heads.jsonl"
    heads.write_bytes(b"".join(json.dumps(line).encode() + b"\n" for line in lines if "head" in line))
    assert load_heads(heads) == seals[:1]  # the monitor's head lines are a heads file
    tracker.push_head(encode_head(seals[1]))
    tracker.fail(tracker.take())
    assert tracker.empty
    stats = tracker.finish()
    assert (stats.offered, stats.sent, stats.dropped, stats.gaps) == (4, 4, 0, 0)
