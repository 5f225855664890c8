"""Format version 2 is canonical: no byte of a sealed ledger is outside what its seals bind.

Each test edits a ledger the way a forger would, recomputing every CRC so the frames
look whole, and checks that `verify` does not call the result intact. Most of these
edits verified as "ok" under format version 1 (the payload rules now apply to version 1
too; its seals still do not bind raw bytes, see `test_v1_seals_do_not_bind_raw_bytes`).
"""

from __future__ import annotations

import shutil
import struct
import tempfile
import zlib
from pathlib import Path

import msgspec
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import LedgerError, load_verify_key, verify_ledger
from ledger import _format as F
from ledger.events import Note
from tests.ledger.conftest import KEY, Item, items_of, replace_frame, write_ledger

GOLDEN_V1 = Path(__file__).parent / "test_golden" / "v1"
SKIPPABLE = struct.pack("<II", 0x184D2A50, 5) + b"extra"  # a zstd skippable frame, 5 bytes of content


def verify_bytes(data: bytes, key=KEY.verify_key, *, blobs: Path | None = None):
    """Verify ``data`` as a ledger file, with a copy of the blob folder ``blobs``."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ledger"
        path.write_bytes(data)
        if blobs is not None:
            shutil.copytree(blobs, Path(tmp) / "blobs")
        return verify_ledger(path, key)


def raw_zstd(body: bytes) -> bytes:
    """``body`` as one zstd frame holding one raw (stored) block: valid, and not what
    the writer's compressor makes of it (RFC 8878: single segment, 4-byte content size)."""
    assert len(body) < 1 << 17
    return (b"\x28\xb5\x2f\xfd" + bytes([0xA0]) + len(body).to_bytes(4, "little")
            + ((len(body) << 3) | 1).to_bytes(3, "little") + body)


@pytest.fixture(scope="module")
def ledger_bytes(tmp_path_factory) -> bytes:
    """A closed 9-record ledger, frames of 3: header, (records, seal) x 3, final seal."""
    run = tmp_path_factory.mktemp("canonical")
    write_ledger(run, [("t", Note(text=f"event {i} " + "x" * i), 1_000 + i, 2_000 + i) for i in range(9)],
                 flush_records=3)
    data = (run / "ledger").read_bytes()
    assert verify_bytes(data).status == "ok"
    return data


def _records(data: bytes) -> list[Item]:
    return [i for i in items_of(data) if i.kind == F.FRAME_RECORDS]


def _body(item: Item) -> bytes:
    return zstandard.ZstdDecompressor().decompress(item.payload)


def _assert_tampered_at(report, item: Item) -> None:
    assert report.status == "tampered", report
    assert report.bad_seq == item.sealed_before, report


# -- inside a records payload: exactly one zstd frame, nothing else ---------------------------


def test_a_skippable_frame_after_the_zstd_frame_is_tampering(ledger_bytes):
    """The reported defect: verify said "ok" although the file held bytes no seal covered."""
    frame = _records(ledger_bytes)[1]
    forged = replace_frame(ledger_bytes, frame, payload=frame.payload + SKIPPABLE)
    report = verify_bytes(forged)
    _assert_tampered_at(report, frame)
    assert report.bad_offset == frame.start and "zstd" in report.reason


@pytest.mark.parametrize("edit", [
    "junk_after", "second_frame", "empty_second_frame", "skippable_before", "no_content_size",
    "other_level", "raw_block", "checksum_flag", "long_array_header",
])
def test_a_payload_that_is_not_exactly_our_zstd_frame_is_tampering(ledger_bytes, edit):
    """Every way to put other bytes in a payload that still decodes to the same records."""
    frame = _records(ledger_bytes)[1]
    body = _body(frame)
    payload = {
        "junk_after": lambda: frame.payload + b"\0",
        "second_frame": lambda: frame.payload + frame.payload,
        "empty_second_frame": lambda: frame.payload + zstandard.ZstdCompressor().compress(b""),
        "skippable_before": lambda: SKIPPABLE + frame.payload,
        "no_content_size": lambda: zstandard.ZstdCompressor(write_content_size=False).compress(body),
        "other_level": lambda: zstandard.ZstdCompressor(level=-5).compress(body),
        "raw_block": lambda: raw_zstd(body),
        "checksum_flag": lambda: zstandard.ZstdCompressor(write_checksum=True).compress(body),
        # the same records under a msgpack array32 header instead of a fixarray
        "long_array_header": lambda: zstandard.ZstdCompressor().compress(b"\xdd\0\0\0\x03" + body[1:]),
    }[edit]()
    assert payload != frame.payload
    report = verify_bytes(replace_frame(ledger_bytes, frame, payload=payload))
    _assert_tampered_at(report, frame)


# -- between frames, and the fields of frames no record holds ------------------------------------


def test_an_empty_records_frame_between_frames_is_tampering(ledger_bytes):
    seal = [i for i in items_of(ledger_bytes) if i.kind == F.FRAME_SEAL][0]
    empty = F.encode_frame(F.FRAME_RECORDS, seal.first_seq, 0, zstandard.ZstdCompressor().compress(b"\x90"))
    report = verify_bytes(ledger_bytes[: seal.end] + empty + ledger_bytes[seal.end :])
    assert report.status == "tampered" and report.bad_seq == seal.first_seq, report


@pytest.mark.parametrize("which", [0, 1, 2])
def test_a_seal_repeated_after_itself_is_tampering(ledger_bytes, which):
    seal = [i for i in items_of(ledger_bytes) if i.kind == F.FRAME_SEAL][which]
    copy = ledger_bytes[seal.start : seal.end]
    report = verify_bytes(ledger_bytes[: seal.end] + copy + ledger_bytes[seal.end :])
    assert report.status == "tampered" and report.bad_seq == seal.first_seq, report


def test_a_seal_frame_claiming_records_is_tampering(ledger_bytes):
    seal = [i for i in items_of(ledger_bytes) if i.kind == F.FRAME_SEAL][0]
    report = verify_bytes(replace_frame(ledger_bytes, seal, count=1))
    _assert_tampered_at(report, seal)


@pytest.mark.parametrize("which", [0, -1])  # a seal that a later one covers, and the final seal
def test_a_seal_with_another_time_is_tampering(ledger_bytes, which):
    """Version 2 signs a seal's time; version 1 did not, and no later seal covered it."""
    seal_item = [i for i in items_of(ledger_bytes) if i.kind == F.FRAME_SEAL][which]
    seal = F.seal_decoder.decode(seal_item.payload)
    later = msgspec.structs.replace(seal, wall_ns=seal.wall_ns + 1)
    report = verify_bytes(replace_frame(ledger_bytes, seal_item, payload=F.record_encoder.encode(later)))
    _assert_tampered_at(report, seal_item)


def _editable_positions(items: list[Item]) -> list[int]:
    """Byte positions whose change a forger can cover by recomputing CRCs: all but the
    length and CRC fields (a new length re-frames the file: see the truncation tests)."""
    positions = []
    for item in items:
        if item.kind == 0:
            positions += list(range(0, 8)) + list(range(F.HEADER_PREFIX_SIZE, item.end))
        else:
            positions += list(range(item.start, item.start + 13))  # type, first_seq, count
            positions += list(range(item.start + F.FRAME_HEADER_SIZE, item.end))
    return positions


def _change_and_recrc(data: bytes, items: list[Item], pos: int, value: int) -> bytes:
    out = bytearray(data)
    out[pos] = value
    item = next(i for i in items if i.start <= pos < i.end)
    if item.kind == 0:
        payload = bytes(out[F.HEADER_PREFIX_SIZE : item.end])
        prefix = F._HEADER_PREFIX.pack(bytes(out[:8]), len(payload), zlib.crc32(payload))
        out[: F.HEADER_PREFIX_SIZE] = prefix + F._HEADER_PREFIX_CRC.pack(zlib.crc32(prefix))
        return bytes(out)
    kind, first_seq, count, _, _ = F._FRAME_HEAD.unpack_from(out, item.start)
    payload = bytes(out[item.start + F.FRAME_HEADER_SIZE : item.end])
    return bytes(out[: item.start]) + F.encode_frame(kind, first_seq, count, payload) + bytes(out[item.end :])


def _expect_refused(report_or_error, item: Item) -> None:
    if isinstance(report_or_error, LedgerError):  # a header now claiming another format version
        assert "unsupported ledger format version" in str(report_or_error)
        return
    _assert_tampered_at(report_or_error, item)


def _verify_or_error(data: bytes):
    try:
        return verify_bytes(data)
    except LedgerError as exc:
        return exc


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_any_byte_changed_with_its_crcs_recomputed_is_tampering(ledger_bytes, data):
    """The kind, not the example: any byte, any new value, CRCs made right again."""
    items = items_of(ledger_bytes)
    pos = data.draw(st.sampled_from(_editable_positions(items)), label="pos")
    value = data.draw(st.integers(0, 255).filter(lambda v: v != ledger_bytes[pos]), label="value")
    item = next(i for i in items if i.start <= pos < i.end)
    _expect_refused(_verify_or_error(_change_and_recrc(ledger_bytes, items, pos, value)), item)


def test_every_byte_of_the_final_seal_and_of_a_zstd_frame_header_is_bound(ledger_bytes):
    """Exhaustive over the final seal (no later seal covers it) and the last records
    frame's zstd header, where a changed window size still decodes to the same records."""
    items = items_of(ledger_bytes)
    final, last_records = items[-1], _records(ledger_bytes)[-1]
    positions = [p for p in _editable_positions(items) if final.start <= p < final.end]
    positions += range(last_records.start + F.FRAME_HEADER_SIZE, last_records.start + F.FRAME_HEADER_SIZE + 8)
    for pos in positions:
        for value in {ledger_bytes[pos] ^ 0x01, ledger_bytes[pos] ^ 0x80, 0}:
            if value == ledger_bytes[pos]:
                continue
            item = next(i for i in items if i.start <= pos < i.end)
            _expect_refused(_verify_or_error(_change_and_recrc(ledger_bytes, items, pos, value)), item)


@pytest.mark.parametrize("older", [1, 2])
def test_a_ledger_relabelled_an_older_version_does_not_verify(ledger_bytes, older):
    """A downgrade to a weaker format: the header is in the chain, and each version's seal
    signs other bytes than the current one's, so the seals no longer match."""
    items = items_of(ledger_bytes)
    pos = ledger_bytes.index(b"\xaeformat_version" + bytes([F.FORMAT_VERSION])) + 15
    report = verify_bytes(_change_and_recrc(ledger_bytes, items, pos, older))
    assert (report.status, report.format_version, report.bad_seq) == ("tampered", older, 0), report


# -- version 1 --------------------------------------------------------------------------------


def test_v1_payloads_follow_the_same_rule():
    data = (GOLDEN_V1 / "ledger").read_bytes()
    key = load_verify_key(GOLDEN_V1 / "signer.pub")
    frame = _records(data)[0]
    report = verify_bytes(replace_frame(data, frame, payload=frame.payload + SKIPPABLE), key, blobs=GOLDEN_V1 / "blobs")
    assert report.status == "tampered" and report.bad_offset == frame.start and "zstd" in report.reason


def test_v1_seals_do_not_bind_raw_bytes():
    """The weaker guarantee of version 1, pinned: the same records compressed otherwise
    still verify, and the report says why such a ledger is only as good as its chain."""
    data = (GOLDEN_V1 / "ledger").read_bytes()
    key = load_verify_key(GOLDEN_V1 / "signer.pub")
    frame = _records(data)[0]
    other = raw_zstd(_body(frame))
    assert other != frame.payload
    report = verify_bytes(replace_frame(data, frame, payload=other), key, blobs=GOLDEN_V1 / "blobs")
    assert report.status == "ok" and report.format_version == 1
    assert "do not bind" in report.note
