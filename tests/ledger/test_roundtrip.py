"""Any event sequence written to a ledger reads back identically and verifies."""

from __future__ import annotations

import hashlib
import tempfile
import threading
import time
from pathlib import Path

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import (BlobMismatchError, BlobStore, LedgerError, LedgerWriter, Submission, read_records, run_writer,
                    verify_and_read, verify_ledger)
from ledger.events import EVENT_KINDS, FileOpen, Note, decode_event
from tests.ledger.conftest import KEY, records, write_ledger


@settings(max_examples=60, deadline=None)
@given(records)
def test_any_event_sequence_round_trips(items):
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        write_ledger(run, items, flush_records=3)
        got = [(r.source, r.event, r.wall_ns, r.mono_ns) for r in read_records(run)]
        assert got == list(items)
        assert [r.seq for r in read_records(run)] == list(range(len(items)))
        report = verify_ledger(run, KEY.verify_key)
        assert (report.status, report.records, report.sealed) == ("ok", len(items), len(items))


def test_required_kinds_exist():
    required = {
        "run.started", "run.ended", "process.exec", "process.exit", "file.open", "net.connect",
        "proc.sample", "host.sample", "witness.started", "witness.stopped", "witness.gap",
        "http.exchange", "llm.call", "dns.query", "net.flow",
    }
    assert required <= EVENT_KINDS
    assert all("." in k for k in EVENT_KINDS)


def test_events_are_frozen_and_keyword_only():
    event = FileOpen(pid=1, path="/x")
    try:
        event.pid = 2  # type: ignore[misc]
    except AttributeError:
        pass
    else:  # pragma: no cover
        raise AssertionError("events must be frozen")
    import msgspec

    assert decode_event(msgspec.msgpack.encode(event)) == event


def test_empty_ledger_is_sealed_and_closed(tmp_path):
    write_ledger(tmp_path / "run", [])
    report = verify_ledger(tmp_path / "run", KEY.verify_key)
    assert (report.status, report.records, report.final) == ("ok", 0, True)


def test_blobs_are_stored_by_hash_and_checked(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    with LedgerWriter(run / "ledger", run_id="r", key=KEY, blobs=BlobStore(run / "blobs")) as w:
        digest = w.put_blob(b"agent stdout\n", role="stdout", media_type="text/plain")
    assert (run / "blobs" / digest[:2] / digest).read_bytes() == b"agent stdout\n"
    assert verify_ledger(run, KEY.verify_key).blobs_checked == 1
    (run / "blobs" / digest[:2] / digest).write_bytes(b"agent stdout, edited\n")
    report = verify_ledger(run, KEY.verify_key)
    assert report.status == "tampered" and report.bad_seq == 0 and "blob" in report.reason
    (run / "blobs" / digest[:2] / digest).unlink()
    assert "missing" in verify_ledger(run, KEY.verify_key).reason


def test_verify_and_read_hands_over_the_blob_bytes_it_hashed_and_only_those(tmp_path, monkeypatch):
    import ledger._reader as reader

    run = tmp_path / "run"
    run.mkdir()
    with LedgerWriter(run / "ledger", run_id="r", key=KEY, blobs=BlobStore(run / "blobs")) as w:
        small = w.put_blob(b"agent stdout\n", role="stdout", media_type="text/plain")
        empty = w.put_blob(b"", role="stderr", media_type="text/plain")
        large = w.put_blob(b"x" * 100, role="answer", media_type="text/plain")
        other = w.put_blob(b"a session file", role="agent.session_file", media_type="text/plain")
    monkeypatch.setattr(reader, "KEPT_BLOB_MAX", 50)  # the large one is hashed in chunks, not kept
    kept: dict[str, bytes] = {}
    roles = ("std", "answer")  # prefixes: stdout, stderr, answer; not the session file
    report, _ = verify_and_read(run, KEY.verify_key, kept_blobs=kept, keep_roles=roles)
    assert (report.status, report.blobs_checked) == ("ok", 4)
    assert kept == {small: b"agent stdout\n", empty: b""} and large not in kept and other not in kept
    monkeypatch.setattr(reader, "KEPT_TOTAL_MAX", 5)  # past the budget: checked, not kept
    kept.clear()
    assert verify_and_read(run, KEY.verify_key, kept_blobs=kept, keep_roles=roles)[0].status == "ok"
    assert kept == {empty: b""}
    monkeypatch.setattr(reader, "KEPT_TOTAL_MAX", 64 << 20)
    (run / "blobs" / small[:2] / small).write_bytes(b"agent stdout, edited\n")
    kept.clear()
    report, _ = verify_and_read(run, KEY.verify_key, kept_blobs=kept, keep_roles=roles)
    assert report.status == "tampered" and small not in kept  # altered bytes are never handed over


def test_threads_storing_the_same_bytes_at_once_each_get_the_blob(tmp_path):
    data = b"the same body, twice at once\n" * 40_000  # ~1 MiB: the writes overlap
    for attempt in range(20):
        store = BlobStore(tmp_path / str(attempt))
        got: list[object] = []
        threads = [threading.Thread(target=lambda: got.append(_put(store, data))) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        digest = hashlib.sha256(data).hexdigest()
        assert got == [digest] * 4  # before: FileNotFoundError when another thread's rename took the shared temp
        assert store.get(digest) == data and list(store) == [digest]
        assert not list((tmp_path / str(attempt)).rglob("*.tmp"))  # no temporary file left behind


def _put(store: BlobStore, data: bytes) -> object:
    try:
        return store.put(data)
    except Exception as exc:  # noqa: BLE001 - reported by the test
        return exc


def test_get_returns_the_bound_bytes_or_raises_naming_the_blob_and_its_path(tmp_path):
    """A reader that skipped verify never gets altered bytes: `get` hashes what it read."""
    store = BlobStore(tmp_path / "blobs")
    digest = store.put(b"the answer\n")
    assert store.get(digest) == b"the answer\n"
    path = store.path_for(digest)
    path.write_bytes(b"another answer\n")
    with pytest.raises(BlobMismatchError) as info:
        store.get(digest)
    assert isinstance(info.value, LedgerError)
    assert info.value.path == str(path) and info.value.sha256 == digest
    assert info.value.actual == hashlib.sha256(b"another answer\n").hexdigest()
    assert digest in str(info.value) and str(path) in str(info.value)
    path.write_bytes(b"")  # truncated to nothing is altered too
    with pytest.raises(BlobMismatchError):
        store.get(digest)
    path.unlink()
    with pytest.raises(FileNotFoundError):
        store.get(digest)


def test_flush_by_time_seals_pending_records(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    w = LedgerWriter(run / "ledger", run_id="r", key=KEY, flush_records=1000, flush_interval_s=0.0)
    w.append(Note(text="a"), source="t")  # interval 0: every append is due
    assert verify_ledger(run / "ledger", KEY.verify_key).sealed == 1  # written at once
    deadline = time.monotonic() + 10
    while w.sealed < 1 and time.monotonic() < deadline:  # fsynced in the background
        time.sleep(0.001)
    assert w.sealed == 1
    w2 = LedgerWriter(run / "ledger2", run_id="r", key=KEY, flush_records=1000, flush_interval_s=3600)
    w2.append(Note(text="a"), source="t")
    w2.flush_if_due()
    assert w2.sealed == 0
    w2.flush()
    assert w2.sealed == 1
    report = verify_ledger(run / "ledger2", KEY.verify_key)
    assert (report.status, report.sealed, report.unsealed) == ("unclosed", 1, 0)
    w.close(), w2.close()


def test_trio_writer_task_appends_from_many_witnesses(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    writer = LedgerWriter(run / "ledger", run_id="r", key=KEY, flush_records=7, flush_interval_s=0.05)

    async def witness(name: str, send: trio.MemorySendChannel) -> None:
        async with send:
            for i in range(50):
                await send.send(Submission(source=name, event=Note(text=f"{name}-{i}")))
                if i % 10 == 0:
                    await trio.sleep(0.01)

    async def main() -> None:
        send, receive = trio.open_memory_channel(16)
        async with trio.open_nursery() as nursery:
            await nursery.start(run_writer, writer, receive)
            async with send:
                for name in ("strace", "procfs", "proxy"):
                    nursery.start_soon(witness, name, send.clone())

    trio.run(main)
    writer.close()
    got = [r.event.text for r in read_records(run)]
    assert len(got) == 150
    for name in ("strace", "procfs", "proxy"):
        assert [t for t in got if t.startswith(name)] == [f"{name}-{i}" for i in range(50)]
    assert verify_ledger(run, KEY.verify_key).status == "ok"


def test_append_rejects_what_is_not_an_event_or_out_of_range_times(tmp_path):
    import pytest

    w = LedgerWriter(tmp_path / "ledger", run_id="r", key=KEY)
    with pytest.raises(TypeError):
        w.append({"kind": "run.note", "text": "a dict"}, source="t")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        w.append(Note(text="x"), source="t", wall_ns=-1)
    with pytest.raises(ValueError):
        w.append(Note(text="x"), source="t", wall_ns=1, mono_ns=2**63)
    with pytest.raises(TypeError, match="source must be a str"):  # a reader could not decode it
        w.append(Note(text="x"), source=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="wall_ns must be an int"):
        w.append(Note(text="x"), source="t", wall_ns=1.5)  # type: ignore[arg-type]
    w.close()
    assert verify_ledger(tmp_path / "ledger", KEY.verify_key).records == 0


def test_an_unencodable_event_is_kept_as_raw_and_its_seq_not_lost(tmp_path):
    from ledger.events import WitnessRaw

    w = LedgerWriter(tmp_path / "ledger", run_id="r", key=KEY)
    w.append(Note(text="before"), source="t")
    w.append(FileOpen(pid=2**70, path="/x"), source="strace")  # an int msgpack cannot hold
    w.append(Note(text="after"), source="t")
    w.close()
    events = [r.event for r in read_records(tmp_path / "ledger")]
    assert events[0] == Note(text="before") and events[2] == Note(text="after")
    assert isinstance(events[1], WitnessRaw) and "unencodable" in events[1].line and events[1].witness == "strace"


def _failing_fsync(monkeypatch):
    """From now on, every fsync fails with EIO, as on a dying disk."""
    import errno
    import os

    def fsync(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", fsync)


def _writer_with_two_durable(tmp_path) -> LedgerWriter:
    w = LedgerWriter(tmp_path / "ledger", run_id="r", key=KEY, flush_records=2, flush_interval_s=3600)
    for text in "ab":
        w.append(Note(text=text), source="t")
    w.flush()
    assert w.sealed == 2
    return w


def test_a_failed_background_fsync_stops_the_writer_and_close_says_so(tmp_path, monkeypatch):
    from ledger import LedgerError

    w = _writer_with_two_durable(tmp_path)
    _failing_fsync(monkeypatch)
    for text in "cd":  # the second append flushes; its fsync fails in the background
        w.append(Note(text=text), source="t")
    deadline = time.monotonic() + 10
    while w._syncer.error is None and time.monotonic() < deadline:
        time.sleep(0.001)
    with pytest.raises(LedgerError, match="fsync failed"):  # close never reports success
        w.close()
    assert w.closed and w.sealed == 2
    report = verify_ledger(tmp_path / "ledger", KEY.verify_key)
    assert report.status == "unclosed" and report.sealed == 4  # written, never known durable


def test_a_failed_fsync_is_not_retried_into_a_durable_claim(tmp_path, monkeypatch):
    from ledger import LedgerError

    w = _writer_with_two_durable(tmp_path)
    w.append(Note(text="c"), source="t")
    _failing_fsync(monkeypatch)
    with pytest.raises(LedgerError, match="fsync failed"):
        w.flush()
    monkeypatch.undo()  # the disk "recovers": Linux may have dropped the pages all the same
    with pytest.raises(LedgerError, match="fsync failed"):
        w.flush()
    with pytest.raises(LedgerError):
        w.append(Note(text="d"), source="t")
        w.close()
    assert w.sealed == 2
    assert verify_ledger(tmp_path / "ledger", KEY.verify_key).status == "unclosed"


def _fsync_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "ledger-fsync"}


def test_close_ends_the_fsync_thread(tmp_path):
    before = _fsync_threads()  # other tests' writers in this process may still hold theirs
    w = LedgerWriter(tmp_path / "ledger", run_id="r", key=KEY, flush_records=1, flush_interval_s=3600)
    for i in range(20):
        w.append(Note(text=str(i)), source="t")
    own = _fsync_threads() - before
    assert own
    w.close()
    assert w.sealed == 20
    assert not any(t.is_alive() for t in own)


def test_a_thread_that_could_not_start_is_started_by_the_next_request(tmp_path, monkeypatch):
    w = LedgerWriter(tmp_path / "ledger", run_id="r", key=KEY, flush_records=1, flush_interval_s=3600)

    def no_thread(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", no_thread)
    with pytest.raises(RuntimeError):
        w.append(Note(text="a"), source="t")  # written; its fsync thread could not start
    monkeypatch.undo()
    closer = threading.Thread(target=w.close, daemon=True)
    closer.start()
    closer.join(10)
    assert not closer.is_alive(), "close() hung waiting for an fsync thread that never ran"
    assert w.sealed == 1
    assert verify_ledger(tmp_path / "ledger", KEY.verify_key).status == "ok"


@given(records, st.integers(min_value=0, max_value=40))
@settings(max_examples=40, deadline=None)
def test_reading_from_a_start_seq_gives_the_tail_with_its_absolute_times(items, start):
    """``read_records(start=N)`` skips decoding the frames before N, yet yields exactly the
    records from N on, with the same absolute times (the deltas before N are summed)."""
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        write_ledger(run_dir, items, flush_records=3)
        full = list(read_records(run_dir))
        assert list(read_records(run_dir, start=start)) == full[start:]


def test_reading_from_a_start_seq_still_checks_the_frames_before_it(tmp_path):
    """A frame before ``start`` that fails its checks still stops the reader."""
    items = [("strace", Note(text=f"n{i}"), 1_000 + i, i) for i in range(12)]
    write_ledger(tmp_path / "run", items, flush_records=3)
    ledger = tmp_path / "run" / "ledger"
    data = bytearray(ledger.read_bytes())
    data[120] ^= 0xFF  # inside the first records frame (payloads are compressed: no text to find)
    ledger.write_bytes(bytes(data))
    with pytest.raises(LedgerError):
        list(read_records(tmp_path / "run", start=9))


def test_the_writer_task_appends_what_is_queued_without_a_turn_per_event(tmp_path):
    """A witness that sends a burst (hundreds of events read at once) costs the writer task a
    few scheduler turns, not one per event; every event is appended, in order."""
    run = tmp_path / "run"
    run.mkdir()
    writer = LedgerWriter(run / "ledger", run_id="r", key=KEY, flush_records=64, flush_interval_s=0.05)

    class Steps(trio.abc.Instrument):
        steps = 0

        def before_task_step(self, task) -> None:
            self.steps += task.name.endswith("run_writer")

    async def main() -> None:
        send, receive = trio.open_memory_channel(1000)
        for i in range(500):
            send.send_nowait(Submission(source="w", event=Note(text=str(i))))
        send.close()
        async with trio.open_nursery() as nursery:
            await nursery.start(run_writer, writer, receive)

    steps = Steps()
    trio.run(main, instruments=[steps])
    writer.close()
    assert [r.event.text for r in read_records(run)] == [str(i) for i in range(500)]
    assert steps.steps < 20, steps.steps  # one turn per event would be over 500
