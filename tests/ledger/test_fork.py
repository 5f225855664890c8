"""Two records claiming one sequence number are a duplicate or a fork of the log, named as
such with both offsets, never a "sequence gap" (issue 19, "Also")."""

from __future__ import annotations

from ledger.events import Note
from tests.ledger.conftest import write_ledger
from tests.ledger.test_verify import _items, _verify_bytes, frame_map


def test_a_records_frame_written_twice_is_a_duplicate_with_both_offsets(tmp_path):
    write_ledger(tmp_path / "run", _items(9), flush_records=3)
    data = (tmp_path / "run" / "ledger").read_bytes()
    spans = frame_map(data)  # header, rec0, seal0, rec1, seal1, rec2, seal2, final seal
    rec1 = data[spans[3][0]:spans[3][1]]
    doubled = data[:spans[4][1]] + rec1 + data[spans[4][1]:]
    report = _verify_bytes(doubled)
    assert report.status == "tampered" and report.bad_seq == 3 and report.bad_offset == spans[4][1]
    assert report.reason == (f"duplicate sequence number: seq 3 is claimed at offset {spans[3][0]} and again at"
                             f" offset {spans[4][1]}: the same records written twice (a duplicate)")


def test_other_records_with_the_same_numbers_are_a_fork(tmp_path):
    items = _items(9)
    write_ledger(tmp_path / "a", items, flush_records=3)
    items[4] = ("recorder", Note(text="the other branch"), 1_004, 2_004)
    write_ledger(tmp_path / "b", items, flush_records=3)
    a, b = (tmp_path / "a" / "ledger").read_bytes(), (tmp_path / "b" / "ledger").read_bytes()
    sa, sb = frame_map(a), frame_map(b)
    forked = a[:sa[4][1]] + b[sb[3][0]:sb[3][1]] + a[sa[4][1]:]
    report = _verify_bytes(forked)
    assert report.status == "tampered" and report.bad_seq == 3
    assert report.reason == (f"duplicate sequence number: seq 3 is claimed at offset {sa[3][0]} and again at"
                             f" offset {sa[4][1]}: different records (a fork of the log)")
    assert "sequence gap" not in report.reason


def test_a_frame_that_repeats_an_earlier_record_midway_is_named_too(tmp_path):
    write_ledger(tmp_path / "run", _items(9), flush_records=3)
    data = (tmp_path / "run" / "ledger").read_bytes()
    spans = frame_map(data)
    write_ledger(tmp_path / "odd", _items(9), flush_records=4)  # frames start at 0, 4, 8
    odd = (tmp_path / "odd" / "ledger").read_bytes()
    rec_4_to_7 = odd[frame_map(odd)[3][0]:frame_map(odd)[3][1]]
    mixed = data[:spans[6][1]] + rec_4_to_7  # after seq 0..8 sealed in frames of 3... seq 4 again
    report = _verify_bytes(mixed)
    assert report.status == "tampered" and report.bad_seq == 4
    assert report.reason == (f"duplicate sequence number: seq 4 is claimed at offset {spans[3][0]} and again at"
                             f" offset {spans[6][1]}: a duplicate or a fork of the log")
