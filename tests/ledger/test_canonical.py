"""A records payload is exactly one zstd frame: no byte in a ledger that our reader skips.

Each test edits a ledger the way a forger would, recomputing every CRC so the frames
look whole, and checks that `verify` does not call the result intact. Each of these
edits verified as "ok" before (except a skippable frame *before* the zstd frame).
"""

from __future__ import annotations

import shutil
import struct
import tempfile
from pathlib import Path

import pytest
import zstandard

from ledger import load_verify_key, verify_ledger
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
    "long_array_header",
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


def test_a_seal_frame_claiming_records_is_tampering(ledger_bytes):
    seal = [i for i in items_of(ledger_bytes) if i.kind == F.FRAME_SEAL][0]
    report = verify_bytes(replace_frame(ledger_bytes, seal, count=1))
    _assert_tampered_at(report, seal)


# -- version 1 --------------------------------------------------------------------------------


def test_v1_payloads_follow_the_same_rule():
    data = (GOLDEN_V1 / "ledger").read_bytes()
    key = load_verify_key(GOLDEN_V1 / "signer.pub")
    frame = _records(data)[0]
    report = verify_bytes(replace_frame(data, frame, payload=frame.payload + SKIPPABLE), key, blobs=GOLDEN_V1 / "blobs")
    assert report.status == "tampered" and report.bad_offset == frame.start and "zstd" in report.reason
