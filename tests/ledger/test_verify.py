"""Verification: every flipped byte and every truncation is detected and explained."""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import msgspec
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import (
    LedgerChecker,
    LedgerError,
    NotALedgerError,
    SigningKey,
    read_records,
    verify_ledger,
)
from ledger._format import FRAME_HEADER_SIZE, FRAME_RECORDS, NEED_DATA, Frame, FrameParser, Header
from ledger.events import Note
from tests.ledger.conftest import KEY, items_of, replace_frame, write_ledger

ROOT = Path(__file__).resolve().parents[2]


def _items(n: int):
    return [("recorder", Note(text=f"event {i} " + "x" * (i % 7)), 1_000 + i, 2_000 + i) for i in range(n)]


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> tuple[bytes, list[tuple[int, int, int]]]:
    """A closed 10-record ledger (frames of 3) and its frames: (start, end, sealed before)."""
    run = tmp_path_factory.mktemp("sample")
    write_ledger(run, _items(10), flush_records=3)
    data = (run / "ledger").read_bytes()
    return data, frame_map(data)


def frame_map(data: bytes) -> list[tuple[int, int, int]]:
    """Byte ranges of the header and each frame, with the records sealed before each."""
    parser = FrameParser()
    parser.feed(data)
    spans: list[tuple[int, int, int]] = []
    sealed = 0
    start = 0
    while True:
        item = parser.next_event()
        if item is NEED_DATA:
            break
        end = parser.offset
        if isinstance(item, Header):
            spans.append((0, end, 0))
        else:
            assert isinstance(item, Frame)
            spans.append((start, end, sealed))
            if item.kind != FRAME_RECORDS:
                sealed = item.first_seq
        start = end
    assert start == len(data)
    return spans


def _verify_bytes(data: bytes, key=KEY):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ledger"
        path.write_bytes(data)
        return verify_ledger(path, key.verify_key)


def _sealed_before(spans, pos: int) -> int:
    for start, end, sealed in spans:
        if start <= pos < end:
            return sealed
    raise AssertionError(pos)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_flipped_byte_is_detected_at_the_right_record(sample, data):
    ledger, spans = sample
    pos = data.draw(st.integers(0, len(ledger) - 1), label="pos")
    bit = data.draw(st.integers(0, 7), label="bit")
    damaged = bytearray(ledger)
    damaged[pos] ^= 1 << bit
    report = _verify_bytes(bytes(damaged))
    assert report.status == "tampered", report
    assert report.bad_seq == _sealed_before(spans, pos), (pos, report)


def test_every_single_byte_flip_is_detected(sample):
    ledger, spans = sample
    for pos in range(len(ledger)):
        damaged = bytearray(ledger)
        damaged[pos] ^= 0xFF
        report = _verify_bytes(bytes(damaged))
        assert report.status == "tampered", (pos, report)
        assert report.bad_seq == _sealed_before(spans, pos), (pos, report)


def test_truncation_at_any_offset_keeps_the_sealed_prefix(sample):
    ledger, spans = sample
    with pytest.raises(NotALedgerError, match="empty"):  # cut at 0: no header, no evidence
        _verify_bytes(b"")
    for cut in range(1, len(ledger)):
        report = _verify_bytes(ledger[:cut])
        assert report.status == "unclosed", (cut, report)
        assert report.exit_code == 3
        whole = [s for s in spans if s[1] <= cut]
        sealed = 0 if len(whole) < 2 else _sealed_after(ledger, whole[-1][1])
        assert report.sealed == sealed, (cut, report)
        assert report.unsealed == report.records - report.sealed
        assert report.torn_bytes == cut - (whole[-1][1] if whole else 0)
    assert _verify_bytes(ledger).status == "ok"


def _sealed_after(ledger: bytes, end: int) -> int:
    checker = LedgerChecker(KEY.verify_key, decode=False)
    checker.feed(ledger[:end])
    for _ in checker.records():
        pass
    return checker.sealed


def test_an_empty_file_is_not_a_ledger(tmp_path):
    """No byte, no evidence that it ever was a ledger: exit 2, not "not closed"."""
    path = tmp_path / "ledger"
    path.write_bytes(b"")
    with pytest.raises(NotALedgerError, match="empty"):
        verify_ledger(path, KEY.verify_key)
    with pytest.raises(NotALedgerError, match="empty"):
        list(read_records(path))


def test_a_partial_header_is_a_torn_ledger_with_no_run(sample):
    """From one byte of the magic to all but the header's last byte: a crash as the file
    was created, reported as unclosed (exit 3) with no run id and no records."""
    ledger, spans = sample
    for cut in range(1, spans[0][1]):
        report = _verify_bytes(ledger[:cut])
        assert (report.status, report.records, report.torn_bytes, report.run_id) == ("unclosed", 0, cut, None)
        assert report.exit_code == 3


def test_unsealed_tail_is_counted(tmp_path):
    run = tmp_path / "run"
    write_ledger(run, _items(10), flush_records=4)
    data = (run / "ledger").read_bytes()
    spans = frame_map(data)
    # Cut inside the last non-final seal: the 4 records of the frame before it are unsealed.
    records_frame, seal_frame = spans[-4], spans[-3]
    report = _verify_bytes(data[: seal_frame[0] + 5])
    assert (report.status, report.sealed, report.unsealed, report.torn_bytes) == ("unclosed", 4, 4, 5)
    assert records_frame[2] == 4


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_reader_raises_only_its_own_error_on_garbage(garbage):
    for blob in (garbage, b"\x89CSNLDG\n" + garbage):
        try:
            report = _verify_bytes(blob)
        except LedgerError:
            continue
        assert report.status in ("tampered", "unclosed")
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "ledger"
            path.write_bytes(blob)
            try:
                list(read_records(path))
            except LedgerError:
                pass


def test_untrusted_key_fails_even_when_consistent(tmp_path):
    write_ledger(tmp_path / "run", _items(5))
    assert verify_ledger(tmp_path / "run", KEY.verify_key).status == "ok"
    other = SigningKey.generate()
    report = verify_ledger(tmp_path / "run", other.verify_key)
    assert report.status == "tampered" and report.exit_code == 1
    assert "key not trusted" in report.reason and other.fingerprint in report.reason


def test_resigned_rewrite_fails_against_the_trusted_key(tmp_path):
    """An attacker rewrites an event and re-signs with their own key: not trusted."""
    forger = SigningKey.generate()
    items = _items(5)
    items[2] = ("recorder", Note(text="forged"), 1, 1)
    write_ledger(tmp_path / "run", items, key=forger)
    assert verify_ledger(tmp_path / "run", KEY.verify_key).status == "tampered"


def test_removed_frame_is_a_sequence_gap(tmp_path):
    write_ledger(tmp_path / "run", _items(9), flush_records=3)
    data = (tmp_path / "run" / "ledger").read_bytes()
    spans = frame_map(data)
    # spans: header, rec0, seal0, rec1, seal1, rec2, seal2, final seal
    cut = data[: spans[3][0]] + data[spans[5][0] :]
    report = _verify_bytes(cut)
    assert report.status == "tampered" and report.bad_seq == 3 and "sequence gap" in report.reason
    assert report.fork_seq is None and report.fork_offsets is None


def test_seal_from_another_run_is_rejected(tmp_path):
    write_ledger(tmp_path / "a", _items(3), flush_records=3, run_id="run-a")
    write_ledger(tmp_path / "b", _items(3), flush_records=3, run_id="run-b")
    a = (tmp_path / "a" / "ledger").read_bytes()
    b = (tmp_path / "b" / "ledger").read_bytes()
    sa, sb = frame_map(a), frame_map(b)
    spliced = b[: sb[2][0]] + a[sa[2][0] : sa[2][1]] + b[sb[2][1] :]
    report = _verify_bytes(spliced)
    assert report.status == "tampered" and report.bad_seq == 0
    assert "run-a" in report.reason


def test_data_after_final_seal_is_tampering(tmp_path):
    write_ledger(tmp_path / "run", _items(3))
    data = (tmp_path / "run" / "ledger").read_bytes()
    spans = frame_map(data)
    report = _verify_bytes(data + data[spans[1][0] : spans[2][1]])
    assert report.status == "tampered" and "after the final seal" in report.reason


def test_not_a_ledger_is_an_error(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello, this is not a ledger\n")
    with pytest.raises(LedgerError, match="not a caisson ledger"):
        verify_ledger(path, KEY.verify_key)
    with pytest.raises(LedgerError, match="no such file"):
        verify_ledger(tmp_path / "missing", KEY.verify_key)


_CRASH_WRITER = r"""
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from ledger import LedgerWriter, SigningKey
from ledger.events import Note
key = SigningKey(__import__("cryptography.hazmat.primitives.serialization", fromlist=["x"]).load_pem_private_key(
    Path(sys.argv[2]).read_bytes(), password=None))
w = LedgerWriter(Path(sys.argv[1]), run_id="crash", key=key, flush_records=17, flush_interval_s=3600)
i = 0
while True:
    w.append(Note(text=f"event {i}"), source="crash", wall_ns=i, mono_ns=i)
    i += 1
    if w.sealed and i % 17 == 0:
        print(w.sealed, flush=True)
"""


def test_sigkill_at_random_moments_loses_only_the_unsealed_tail(tmp_path):
    key_path = tmp_path / "key.pem"
    key_path.write_bytes(KEY.to_pem())
    script = tmp_path / "writer.py"
    script.write_text(_CRASH_WRITER)
    rng = __import__("random").Random(1234)
    for attempt in range(8):
        ledger = tmp_path / f"ledger{attempt}"
        proc = subprocess.Popen([sys.executable, str(script), str(ledger), str(key_path), str(ROOT)],
                                stdout=subprocess.PIPE, text=True)
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
        reader.start()
        deadline = time.monotonic() + 30
        while not lines and time.monotonic() < deadline:  # the writer is up and has sealed
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.8))
        proc.send_signal(signal.SIGKILL)
        reader.join()
        reported = int(lines[-1]) if lines else 0
        proc.wait()
        report = verify_ledger(ledger, KEY.verify_key)
        assert report.status == "unclosed", report
        assert report.sealed >= reported > 0, (report, reported)
        texts = [r.event.text for r in read_records(ledger)]
        assert texts == [f"event {i}" for i in range(len(texts))]
        assert len(texts) == report.records >= report.sealed


def test_bytes_after_the_final_seal_are_tampering_even_when_they_do_not_make_a_frame(tmp_path):
    write_ledger(tmp_path / "run", _items(3))
    data = (tmp_path / "run" / "ledger").read_bytes()
    report = _verify_bytes(data + b"x" * 24)
    assert report.status == "tampered" and "after the final seal" in report.reason


def test_zeros_after_the_last_seal_of_a_crashed_ledger_are_a_torn_tail(tmp_path):
    write_ledger(tmp_path / "run", _items(6), flush_records=3)
    data = (tmp_path / "run" / "ledger").read_bytes()
    spans = frame_map(data)
    crashed = data[: spans[-2][1]]  # everything but the final seal: an unclosed ledger
    report = _verify_bytes(crashed + bytes(100))
    assert (report.status, report.sealed, report.torn_bytes) == ("unclosed", 6, 100)


def test_a_listener_that_raises_never_costs_the_ledger_an_event(tmp_path):
    from ledger import LedgerWriter

    w = LedgerWriter(tmp_path / "ledger", run_id="r", key=KEY)
    w.add_listener(lambda record: 1 / 0)
    for i in range(3):
        w.append(Note(text=str(i)), source="t")
    w.close()
    assert w.listener_failures == 3
    assert [r.event.text for r in read_records(tmp_path / "ledger")] == ["0", "1", "2"]


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


def _bad_event(kind: str, depth: int):
    from ledger.events import AgentToolCall, FileOpen

    if kind == "undecodable":  # a witness bug: a float fd; written, but not read as a FileOpen
        return FileOpen(pid=1, path="/x", result=3.5)
    # An agent's tool call input, nested: 991 encodes but may not decode in a deeper stack,
    # 5000 does not encode at all; both are over MAX_RECORD_DEPTH, as is 63 (+ record, event, dict).
    return AgentToolCall(agent="a", call_id="c", tool="Bash", input={"deep": _nested(depth)})


@pytest.mark.parametrize("kind, depth", [("undecodable", 0), ("unencodable", 63), ("unencodable", 991),
                                         ("unencodable", 5000)])
def test_a_bad_record_is_kept_as_raw_between_its_neighbours(tmp_path, kind, depth):
    from ledger import LedgerWriter
    from ledger.events import WitnessRaw

    w = LedgerWriter(tmp_path / "ledger", run_id="r", key=KEY)
    w.append(Note(text="a"), source="t")
    w.append(_bad_event(kind, depth), source="witness")
    w.append(Note(text="b"), source="t")
    w.close()
    assert verify_ledger(tmp_path / "ledger", KEY.verify_key).status == "ok"
    events = [r.event for r in read_records(tmp_path / "ledger")]
    assert events[0] == Note(text="a") and events[2] == Note(text="b")
    assert isinstance(events[1], WitnessRaw) and kind in events[1].line


def test_a_frame_nested_too_deep_to_decode_is_reported_not_raised(tmp_path, monkeypatch):
    """msgspec raises RecursionError (not DecodeError) on deep nesting; a reader must not."""
    import msgspec

    from ledger import LedgerError, LedgerWriter, _writer

    deep = b"\x91" * 5000 + b"\x90"
    real_encode = _writer._encode

    def encode(obj):  # the record's event bytes replaced by a deep array, then signed
        return real_encode(obj).replace(real_encode(Note(text="deep")), deep)

    monkeypatch.setattr(_writer, "_encode", encode)
    monkeypatch.setattr(_writer, "MAX_RECORD_DEPTH", 0)  # a writer without our depth cap
    w = LedgerWriter(tmp_path / "ledger", run_id="r", key=KEY)
    w.append(Note(text="a"), source="t")
    w.append(Note(text="deep"), source="t")
    w.close()
    with pytest.raises(RecursionError):
        msgspec.msgpack.decode(deep)
    report = verify_ledger(tmp_path / "ledger", KEY.verify_key)
    assert (report.status, report.bad_seq) == ("tampered", 0) and "nested deeper" in report.reason
    with pytest.raises(LedgerError, match="nested deeper"):
        list(read_records(tmp_path / "ledger"))


def test_a_header_or_seal_with_a_deeply_nested_extra_key_is_tampering_not_a_crash(tmp_path):
    """An unknown key is skipped by msgspec, recursively: a CRC-valid header or seal with
    one nested too deep must be reported, not raise RecursionError."""
    import zlib

    import msgspec

    from ledger import LedgerWriter
    from ledger import _format as F

    deep = b"\xa1x" + b"\x91" * 5000 + b"\xc0"  # key "x": a 5000-deep array

    def with_deep_key(payload: bytes) -> bytes:  # a fixmap with one more entry
        assert payload[0] & 0xF0 == 0x80
        return bytes([payload[0] + 1]) + payload[1:] + deep

    w = LedgerWriter(tmp_path / "ledger", run_id="r", key=KEY)
    w.append(Note(text="a"), source="t")
    w.close()
    data = (tmp_path / "ledger").read_bytes()
    header = with_deep_key(msgspec.msgpack.encode(msgspec.structs.asdict(w.header)))
    prefix = F._HEADER_PREFIX.pack(F.MAGIC, len(header), zlib.crc32(header))
    header_start = F.HEADER_PREFIX_SIZE + len(msgspec.msgpack.encode(msgspec.structs.asdict(w.header)))
    bad_header = prefix + F._HEADER_PREFIX_CRC.pack(zlib.crc32(prefix)) + header + data[header_start:]
    seal_offset, seal_end, _ = frame_map(data)[-1]  # the final seal
    seal = F.seal_decoder.decode(data[seal_offset + FRAME_HEADER_SIZE : seal_end])
    seal_payload = with_deep_key(msgspec.msgpack.encode(msgspec.structs.asdict(seal)))
    bad_seal = data[:seal_offset] + F.encode_frame(F.FRAME_SEAL, seal.upto, 0, seal_payload)
    for name, bad in (("header", bad_header), ("seal", bad_seal)):
        report = _verify_bytes(bad)
        assert report.status == "tampered" and f"{name} undecodable" in report.reason, (name, report)
        path = tmp_path / name
        path.write_bytes(bad)
        with pytest.raises(LedgerError, match=f"{name} undecodable"):
            list(read_records(path))


# -- forks: two records claiming one sequence number ------------------------------------------


def _records_frames(data: bytes):
    return [i for i in items_of(data) if i.kind == FRAME_RECORDS]


def _body(item) -> bytes:
    return zstandard.ZstdDecompressor().decompress(item.payload)


def test_a_frame_repeated_later_is_a_fork_with_both_offsets(sample):
    ledger, _ = sample
    first = _records_frames(ledger)[1]  # seqs 3..5
    seal = items_of(ledger)[4]  # the seal after it
    forked = ledger[: seal.end] + ledger[first.start : first.end] + ledger[seal.end :]
    report = _verify_bytes(forked)
    assert report.status == "tampered" and "sequence gap" not in report.reason
    assert report.reason == (f"fork: seq 3 is recorded twice, in the frame at byte {first.start}"
                             f" and the frame at byte {seal.end}")
    assert (report.fork_seq, report.fork_offsets) == (3, [first.start, seal.end])
    assert (report.bad_offset, report.bad_seq) == (seal.end, 6)


def test_a_frame_repeated_after_the_final_seal_is_a_fork(sample):
    ledger, _ = sample
    first = _records_frames(ledger)[0]
    report = _verify_bytes(ledger + ledger[first.start : first.end])
    assert (report.status, report.fork_seq, report.fork_offsets) == ("tampered", 0, [first.start, len(ledger)])
    assert report.reason.endswith("after the final seal")


def test_a_record_repeated_inside_a_frame_is_a_fork(sample):
    ledger, _ = sample
    frame = _records_frames(ledger)[1]  # seqs 3..5
    raws = msgspec.msgpack.decode(_body(frame), type=list[msgspec.Raw])
    second = msgspec.msgpack.decode(raws[1])
    second[0] = 3  # the second record claims seq 3 too
    body = b"\x93" + bytes(raws[0]) + msgspec.msgpack.encode(second) + bytes(raws[2])
    report = _verify_bytes(replace_frame(ledger, frame, payload=zstandard.ZstdCompressor().compress(body)))
    assert report.status == "tampered" and report.reason.startswith("fork: seq 3")
    assert (report.fork_seq, report.fork_offsets, report.bad_seq) == (3, [frame.start, frame.start], 3)


def test_a_frame_whose_records_restart_at_an_earlier_seq_is_a_fork(sample):
    """Its header claims the next seq, but its records say 1, 2, 3: seq 1 was in frame 0."""
    ledger, _ = sample
    frames = _records_frames(ledger)
    frame = frames[1]
    raws = msgspec.msgpack.decode(_body(frame), type=list[msgspec.Raw])
    body = msgspec.msgpack.encode([[1 + i] + msgspec.msgpack.decode(raw)[1:] for i, raw in enumerate(raws)])
    report = _verify_bytes(replace_frame(ledger, frame, payload=zstandard.ZstdCompressor().compress(body)))
    assert (report.status, report.fork_seq, report.fork_offsets) == ("tampered", 1, [frames[0].start, frame.start])
