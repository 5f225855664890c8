"""The native append (ledger/_appendc.c) behaves as its pure-Python twin, `AppenderPy`.

Same stored records, same sequence numbers, same errors in the same order, same calls
to the writer's callbacks; and the writer works with either. Tests of the native module
are skipped when it is not built, except with ``CI=true``: a slow ledger is not a green run.
"""

from __future__ import annotations

import gc
import os
import sys
import time
import tracemalloc
import weakref

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
import trio

from ledger import LedgerWriter, read_records, verify_ledger
from ledger import _append, _writer
from ledger._append import AppenderPy
from ledger._errors import WriterClosedError
from ledger.events import EVENT_TYPES, FileOpen, Note, WitnessRaw
from tests.ledger.conftest import KEY, events, write_ledger

native = pytest.mark.skipif(not _append.NATIVE and os.environ.get("CI") != "true",
                            reason="ledger._appendc is not built (no C compiler)")
both = pytest.mark.parametrize("cls", [AppenderPy, pytest.param("native", marks=native)])

NEVER = 2**62  # a flush deadline no test reaches


class NotAnEvent(msgspec.Struct):
    text: str = ""


def _native():
    from ledger._appendc import Appender

    return Appender


def _cls(cls):
    return _native() if cls == "native" else cls


@native
def test_the_writer_uses_the_native_appender(tmp_path):
    assert _append.NATIVE and _append.Appender is _native()
    writer = LedgerWriter(tmp_path / "ledger", run_id="r", key=KEY)
    assert type(writer._appender) is _native()
    writer.close()


class Harness:
    """One appender with callbacks that log what they are called with; `on_due` flushes
    all but the newest pending record, as a writer removes what it wrote."""

    def __init__(self, cls, flush_records: int, flush_at_ns: int, listen: bool, on_due=None):
        self.pending: list[tuple] = []
        self.log: list[tuple] = []
        self.appender = cls(pending=self.pending, event_types=frozenset(EVENT_TYPES), on_due=on_due or self.on_due,
                            flush_records=flush_records, flush_at_ns=flush_at_ns,
                            closed_error=WriterClosedError, path="/runs/r/ledger")
        if listen:
            self.appender.on_record = self.on_record

    def on_due(self) -> None:
        self.log.append(("due", len(self.pending)))
        del self.pending[:-1]

    def on_record(self, *args) -> None:
        self.log.append(("record", *args, tuple(type(arg) for arg in args)))  # True == 1: types too

    def do(self, op: tuple):
        try:
            if op[0] == "close":
                return self.appender.close()
            if op[0] == "deadline":
                self.appender.flush_at_ns = op[1]
                return None
            _, event, source, wall, mono = op
            return self.appender.append(event, source=source, wall_ns=wall, mono_ns=mono)
        except Exception as exc:
            return type(exc), str(exc)

    def state(self):
        return self.pending, self.log, self.appender.next_seq, self.appender.closed, self.appender.flush_at_ns


_times = (st.integers(0, 2**63 - 1) | st.integers(-(2**70), 2**70) | st.booleans()
          | st.floats(allow_nan=False) | st.sampled_from([2**63, -1, "1"]))
_appends = st.tuples(
    st.just("append"),
    events | st.builds(NotAnEvent) | st.sampled_from([None, 1, "note", {"kind": "run.note"}]),
    st.sampled_from(["strace", "proxy", ""]) | st.text(max_size=5) | st.sampled_from([None, 1, b"strace"]),
    _times,
    _times,
)
_ops = st.lists(
    st.one_of(_appends, _appends, _appends, st.just(("close",)),
              st.tuples(st.just("deadline"), st.sampled_from([0, NEVER]))),
    max_size=30,
)


@native
@settings(max_examples=300, deadline=None)
@given(_ops, st.integers(1, 5), st.sampled_from([0, NEVER]), st.booleans())
def test_the_native_appender_does_what_the_python_one_does(ops, flush_records, flush_at_ns, listen):
    native = Harness(_native(), flush_records, flush_at_ns, listen)
    python = Harness(AppenderPy, flush_records, flush_at_ns, listen)
    for op in ops:
        assert native.do(op) == python.do(op), op
        assert native.state() == python.state(), op


@both
def test_default_times_are_the_clocks_and_times_are_stored_as_deltas(cls):
    cls = _cls(cls)
    h = Harness(cls, flush_records=100, flush_at_ns=NEVER, listen=False)
    before_wall, before_mono = time.time_ns(), time.monotonic_ns()
    assert h.appender.append(Note(text="a"), source="t") == 0
    after_wall, after_mono = time.time_ns(), time.monotonic_ns()
    seq, wall, mono, source, event = h.pending[0]
    assert (seq, source, event) == (0, "t", Note(text="a"))
    assert before_wall <= wall <= after_wall and before_mono <= mono <= after_mono
    assert h.appender.append(Note(text="b"), source="t", wall_ns=wall + 5, mono_ns=mono - 3) == 1
    assert h.pending[1][1:3] == (5, -3)


@both
def test_a_flush_becomes_due_by_count_or_by_the_monotonic_clock(cls):
    cls = _cls(cls)
    h = Harness(cls, flush_records=3, flush_at_ns=NEVER, listen=False)
    for i in range(3):
        h.appender.append(Note(text=str(i)), source="t", wall_ns=i, mono_ns=i)
    assert h.log == [("due", 3)]
    h.appender.flush_at_ns = time.monotonic_ns() + 10**9  # a witness's own mono_ns does not count
    h.appender.append(Note(text="late"), source="t", wall_ns=9, mono_ns=2**62)
    assert h.log == [("due", 3)]
    h.appender.flush_at_ns = time.monotonic_ns()
    h.appender.append(Note(text="now"), source="t", wall_ns=9, mono_ns=0)
    assert h.log == [("due", 3), ("due", 3)]


@both
def test_a_callback_error_propagates_after_the_record_is_kept(cls):
    cls = _cls(cls)
    h = Harness(cls, flush_records=1, flush_at_ns=NEVER, listen=False)
    h.appender.on_record = lambda *args: 1 / 0
    with pytest.raises(ZeroDivisionError):
        h.appender.append(Note(text="a"), source="t", wall_ns=1, mono_ns=1)
    assert len(h.pending) == 1 and h.appender.next_seq == 1 and h.log == []  # on_due not reached

    def full_disk():
        raise OSError(28, "No space left on device")

    h = Harness(cls, flush_records=1, flush_at_ns=NEVER, listen=False, on_due=full_disk)
    with pytest.raises(OSError):
        h.appender.append(Note(text="b"), source="t", wall_ns=1, mono_ns=1)
    assert h.pending == [(0, 1, 1, "t", Note(text="b"))] and h.appender.next_seq == 1


@both
def test_a_listener_that_closes_the_writer_makes_no_flush_due(cls):
    cls = _cls(cls)
    h = Harness(cls, flush_records=1, flush_at_ns=0, listen=False)
    h.appender.on_record = lambda *args: h.appender.close()
    assert h.appender.append(Note(text="a"), source="t", wall_ns=1, mono_ns=1) == 0
    assert h.log == [] and h.appender.closed
    with pytest.raises(WriterClosedError, match="/runs/r/ledger: append after close"):
        h.appender.append(Note(text="b"), source="t")


@native
def test_the_native_appender_holds_no_stray_references():
    h = Harness(_native(), flush_records=10**6, flush_at_ns=NEVER, listen=True)
    event, source = FileOpen(pid=1, path="/etc/hosts"), "strace-" + "x" * 20
    before = sys.getrefcount(event), sys.getrefcount(source)
    for i in range(1000):
        h.appender.append(event, source=source, wall_ns=i, mono_ns=i)
        with pytest.raises(ValueError):  # refused before anything is kept
            h.appender.append(event, source=source, wall_ns=-1)
    assert sys.getrefcount(event) == before[0] + 2000  # one in each stored record, one in each log entry
    h.appender.on_record = lambda *args: 1 / 0
    for _ in range(100):  # a callback's error after the record is kept
        with pytest.raises(ZeroDivisionError):
            h.appender.append(event, source=source, wall_ns=1, mono_ns=1)
    h.pending.clear()
    h.log.clear()
    assert (sys.getrefcount(event), sys.getrefcount(source)) == before


def _refused(errors, call) -> None:
    """Assert that ``call()`` raises one of ``errors`` (no pytest.raises: its tracebacks are
    cycles that hold memory until a collection, which a leak test must not count)."""
    try:
        call()
    except errors:
        return
    raise AssertionError(f"{call} did not raise {errors}")


@native
def test_the_native_appender_leaks_nothing_on_any_path():
    """Every path, the error ones and the callbacks' included, leaves no memory behind."""
    h = Harness(_native(), flush_records=3, flush_at_ns=NEVER, listen=True)
    event = Note(text="x")

    def every_path():
        h.appender.on_record = h.on_record
        h.appender.append(event, source="s", wall_ns=1, mono_ns=2)
        h.appender.append(event=event, source="s")  # default times; the third append makes a flush due
        for bad in ({"wall_ns": -1}, {"mono_ns": 2**64}, {"wall_ns": 1.5}, {"source": 3}, {"when": 1}):
            _refused((TypeError, ValueError), lambda: h.appender.append(event, **{"source": "s", **bad}))
        _refused(TypeError, lambda: h.appender.append(object(), source="s"))
        h.appender.on_record = lambda *args: 1 / 0
        _refused(ZeroDivisionError, lambda: h.appender.append(event, source="s", wall_ns=1, mono_ns=2))
        h.pending.clear()
        h.log.clear()

    for _ in range(200):  # warm up: caches, small ints, interned strings
        every_path()
    tracemalloc.start()
    try:
        every_path()
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(5000):
            every_path()
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 5000 * 8, grown  # a leaked int or tuple per path would be 32 bytes and more


@native
def test_the_collector_sees_the_native_appenders_references():
    class Holder:  # holder -> appender -> on_record, on_due (bound to holder): a cycle
        def __init__(self):
            self.appender = _native()(pending=[], event_types=frozenset(EVENT_TYPES), on_due=self.due,
                                      flush_records=1, flush_at_ns=NEVER, closed_error=WriterClosedError, path="p")
            self.appender.on_record = self.record

        def due(self):
            pass

        def record(self, *args):
            pass

    for drop in ("on_record", "on_due"):
        holder = Holder()
        if drop == "on_due":
            holder.appender.on_record = None
        gone = weakref.ref(holder)
        del holder
        gc.collect()
        assert gone() is None, f"a cycle through {drop} was not collected"


@both
def test_finalisers_run_by_the_collector_inside_an_append_neither_reuse_a_seq_nor_lose_a_record(cls):
    h = Harness(_cls(cls), flush_records=10**9, flush_at_ns=NEVER, listen=False)

    class Finaliser:  # freed only by the collector, which an append's allocation may run
        def __init__(self, action):
            self.action, self.me = action, self

        def __del__(self):
            self.action()

    clock = iter(range(1, 10**6))

    def append_from_finaliser():
        t = next(clock)
        h.appender.append(Note(text=str(t)), source="gc", wall_ns=t, mono_ns=t)

    gc.collect()
    thresholds = gc.get_threshold()
    gc.set_threshold(1)
    try:
        for _ in range(300):
            Finaliser(append_from_finaliser)
            t = next(clock)
            h.appender.append(Note(text=str(t)), source="main", wall_ns=t, mono_ns=t)
    finally:
        gc.set_threshold(*thresholds)
    gc.collect()
    seqs = [record[0] for record in h.pending]
    assert seqs == list(range(len(seqs))) and h.appender.next_seq == len(seqs) >= 300
    wall = mono = 0
    for _, wall_delta, mono_delta, _, event in h.pending:  # the deltas add up to the times given
        wall, mono = wall + wall_delta, mono + mono_delta
        assert wall == mono == int(event.text)
    assert any(source == "gc" for _, _, _, source, _ in h.pending)


@both
def test_a_finaliser_that_closes_inside_an_append_makes_it_raise_not_vanish(cls):
    h = Harness(_cls(cls), flush_records=10**9, flush_at_ns=NEVER, listen=False)
    event = Note(text="x")  # built once: an append's record is the loop's only tracked allocation
    armed = [True]

    def close_once(phase, info):
        if phase == "start" and armed[0] and len(h.pending) >= 3:
            armed[0] = False
            h.appender.close()  # as a __del__ or weakref callback run by this collection would

    gc.collect()
    thresholds = gc.get_threshold()
    gc.callbacks.append(close_once)
    gc.set_threshold(1)
    try:
        with pytest.raises(WriterClosedError):
            for i in range(1000):  # the record's allocation runs the collector
                h.appender.append(event, source="s", wall_ns=i, mono_ns=i)
    finally:
        gc.set_threshold(*thresholds)
        gc.callbacks.remove(close_once)
    assert len(h.pending) == h.appender.next_seq >= 3  # every seq handed out is stored


@both
def test_an_appender_is_initialised_once(cls):
    h = Harness(_cls(cls), flush_records=10, flush_at_ns=NEVER, listen=False)
    h.appender.append(Note(text="x"), source="s", wall_ns=1, mono_ns=1)
    with pytest.raises(RuntimeError, match="initialised once"):  # it would restart the seqs
        h.appender.__init__(pending=h.pending, event_types=frozenset(EVENT_TYPES), on_due=h.on_due,
                            flush_records=10, flush_at_ns=NEVER, closed_error=WriterClosedError, path="p")
    assert h.appender.append(Note(text="y"), source="s", wall_ns=1, mono_ns=1) == 1


def test_the_python_twin_checks_the_int_value_not_a_subclass_s_comparisons():
    class Lying(int):
        def __ge__(self, other):
            return True

        __le__ = __ge__

    h = Harness(AppenderPy, flush_records=10, flush_at_ns=NEVER, listen=False)
    with pytest.raises(ValueError, match="wall_ns"):
        h.appender.append(Note(text="x"), source="s", wall_ns=Lying(-5), mono_ns=1)
    assert h.pending == []


@native
def test_an_appender_never_initialised_raises_instead_of_crashing():
    appender = _native().__new__(_native())
    assert appender.on_record is None and appender.closed
    with pytest.raises(RuntimeError, match="not initialised"):
        appender.append(Note(text="x"), source="s")


@both
def test_argument_errors_are_named(cls):
    h = Harness(_cls(cls), flush_records=10, flush_at_ns=NEVER, listen=False)
    assert h.appender.append(event=Note(text="kw"), source="s", wall_ns=1, mono_ns=1) == 0
    with pytest.raises(TypeError, match="source"):
        h.appender.append(Note(text="x"))
    with pytest.raises(TypeError, match="multiple values"):
        h.appender.append(Note(text="x"), event=Note(text="y"), source="s")
    with pytest.raises(TypeError, match="unexpected keyword"):
        h.appender.append(Note(text="x"), source="s", when=1)
    with pytest.raises(TypeError, match="on_record"):
        h.appender.on_record = 42
    assert h.appender.next_seq == 1


@pytest.mark.parametrize("appender", [pytest.param("native", marks=native), "python"])
def test_listeners_and_flushes_run_ki_protected_under_trio(tmp_path, monkeypatch, appender):
    if appender == "python":
        monkeypatch.setattr(_writer, "Appender", AppenderPy)
    seen = {}
    writer = LedgerWriter(tmp_path / "ledger", run_id="r", key=KEY, flush_records=2)
    writer.add_listener(lambda record: seen.setdefault("listener", trio.lowlevel.currently_ki_protected()))
    write_frames = writer._write_frames

    def spy(**kwargs):
        seen.setdefault("flush", trio.lowlevel.currently_ki_protected())
        return write_frames(**kwargs)

    monkeypatch.setattr(writer, "_write_frames", spy)

    async def main():
        assert not trio.lowlevel.currently_ki_protected()
        for i in range(2):
            writer.append(Note(text=str(i)), source="t")

    trio.run(main)
    writer.close()
    assert seen == {"listener": True, "flush": True}


def test_the_python_appenders_append_is_ki_protected_under_trio():
    seen = []
    h = Harness(AppenderPy, flush_records=10, flush_at_ns=NEVER, listen=False)
    h.appender.on_record = lambda *args: seen.append(trio.lowlevel.currently_ki_protected())

    async def main():
        h.appender.append(Note(text="x"), source="t")

    trio.run(main)
    assert seen == [True]


def test_an_append_held_past_its_writer_is_refused_not_lost(tmp_path):
    writer = LedgerWriter(tmp_path / "ledger", run_id="r", key=KEY)
    append = writer.append  # keeps the appender, not the writer
    append(Note(text="a"), source="t")
    del writer
    gc.collect()
    with pytest.raises(WriterClosedError):
        append(Note(text="b"), source="t")


@pytest.mark.parametrize("during", ["close", "flush", "a flush an append made due"])
def test_appends_from_finalisers_during_a_flush_keep_the_ledger_intact(tmp_path, during):
    """Each collection that starts inside the flush, in turn, runs a finaliser that appends:
    the frame is the records pending when the flush began, the seal numbers them right,
    and the finaliser's record is written later or refused, never lost."""
    collections = 1
    while True:
        run = tmp_path / f"run{collections}"
        run.mkdir()
        writer = LedgerWriter(run / "ledger", run_id="r", key=KEY, flush_interval_s=3600,
                              flush_records=6 if during.startswith("a flush") else 10**6)
        for i in range(5):
            writer.append(Note(text=str(i)), source="t")
        seen, outcomes = [0], []

        def finaliser(phase, info):
            if phase == "start":
                seen[0] += 1
                if seen[0] == collections:
                    try:
                        outcomes.append(writer.append(Note(text="finaliser"), source="gc"))
                    except WriterClosedError:
                        outcomes.append("refused")

        gc.collect()
        thresholds = gc.get_threshold()
        gc.callbacks.append(finaliser)
        gc.set_threshold(1)
        try:
            {"close": writer.close, "flush": writer.flush,
             "a flush an append made due": lambda: writer.append(Note(text="5"), source="t")}[during]()
        finally:
            gc.set_threshold(*thresholds)
            gc.callbacks.remove(finaliser)
        writer.close()
        report = verify_ledger(run / "ledger", KEY.verify_key)
        assert (report.status, report.records) == ("ok", writer.next_seq), (collections, outcomes)
        if collections > seen[0]:
            break
        collections += 1
    assert collections > 3  # the sweep did reach into the flush


def test_a_source_that_utf8_cannot_hold_is_kept_in_ascii_form(tmp_path):
    writer = LedgerWriter(tmp_path / "ledger", run_id="r", key=KEY)
    writer.append(Note(text="before"), source="t")
    writer.append(Note(text="x"), source="\ud800")  # a lone surrogate: no UTF-8 form
    writer.append(Note(text="after"), source="t")
    writer.close()
    assert verify_ledger(tmp_path / "ledger", KEY.verify_key).status == "ok"
    records = list(read_records(tmp_path / "ledger"))
    assert [r.source for r in records] == ["t", "'\\ud800'", "t"]
    assert isinstance(records[1].event, WitnessRaw) and "Note(text='x')" in records[1].event.line


def test_an_append_while_close_writes_the_final_seal_is_refused(tmp_path, monkeypatch):
    writer = LedgerWriter(tmp_path / "ledger", run_id="r", key=KEY)
    writer.append(Note(text="a"), source="t")
    write_frames, outcome = writer._write_frames, []

    def append_then_write(**kwargs):
        try:
            outcome.append(writer.append(Note(text="late"), source="t"))
        except WriterClosedError:
            outcome.append("refused")
        return write_frames(**kwargs)

    monkeypatch.setattr(writer, "_write_frames", append_then_write)
    writer.close()
    assert outcome == ["refused"] and verify_ledger(tmp_path / "ledger", KEY.verify_key).records == 1


def test_a_writer_dropped_unclosed_is_freed_at_once(tmp_path):
    gc.disable()  # no cycle collection: freed by its reference count, as a plain file is
    try:
        writer = LedgerWriter(tmp_path / "ledger", run_id="r", key=KEY)
        writer.add_listener(lambda record: None)
        writer.append(Note(text="a"), source="t")
        fd = writer._file.fileno()
        gone = weakref.ref(writer)
        del writer
        assert gone() is None
        with pytest.raises(OSError):
            os.fstat(fd)  # closed
    finally:
        gc.enable()
    assert verify_ledger(tmp_path / "ledger", KEY.verify_key).status == "unclosed"


def test_flush_settings_are_checked_before_a_file_is_made_and_never_means_never(tmp_path):
    for bad in ({"flush_records": 0}, {"flush_records": 2.5}, {"flush_interval_s": -1},
                {"flush_interval_s": float("nan")}):
        with pytest.raises((TypeError, ValueError)):
            LedgerWriter(tmp_path / "ledger", run_id="r", key=KEY, **bad)
        assert not (tmp_path / "ledger").exists()
    writer = LedgerWriter(tmp_path / "ledger", run_id="r", key=KEY, flush_records=2**70,
                          flush_interval_s=float("inf"))
    for i in range(5):
        writer.append(Note(text=str(i)), source="t")
    assert writer.sealed == 0 and len(writer._pending) == 5
    writer.flush_records = 1  # takes effect at the next append
    writer.append(Note(text="5"), source="t")
    assert not writer._pending
    writer.flush_interval_ns = 0.5e9  # a float is taken as whole ns
    assert writer.flush_interval_ns == 500_000_000
    with pytest.raises(ValueError):
        writer.flush_interval_ns = -1
    writer.close()
    assert verify_ledger(tmp_path / "ledger", KEY.verify_key).records == 6


@pytest.mark.parametrize("appender", ["native", "python"])
def test_a_ledger_written_through_either_appender_reads_back_and_verifies(tmp_path, monkeypatch, appender):
    if appender == "python":
        monkeypatch.setattr(_writer, "Appender", AppenderPy)
    items = [("strace", FileOpen(pid=7, path=f"/f{i}"), 1_000 + i, 2_000 - i) for i in range(10)]
    seen = []
    writer = write_ledger(tmp_path / "run", items, flush_records=3, close=False)
    writer.add_listener(seen.append)
    writer.append(Note(text="last"), source="recorder", wall_ns=5, mono_ns=6)
    writer.close()
    assert type(writer._appender) is (AppenderPy if appender == "python" else _native())
    got = [(r.source, r.event, r.wall_ns, r.mono_ns) for r in read_records(tmp_path / "run")]
    assert got == [*items, ("recorder", Note(text="last"), 5, 6)]
    assert [(r.seq, r.event) for r in seen] == [(10, Note(text="last"))]
    assert verify_ledger(tmp_path / "run", KEY.verify_key).status == "ok"
    with pytest.raises(WriterClosedError):
        writer.append(Note(text="after"), source="t")
