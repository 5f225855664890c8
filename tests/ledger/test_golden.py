"""Every ledger format version stays readable: a committed golden ledger per version.

The goldens are in test_golden/v<N>/ (v1 predates the script; v2 on was written by
test_golden/make_golden.py, once, when its version was the current one).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from ledger import FORMAT_VERSION, load_verify_key, read_records, verify_ledger
from ledger import _format as F
from ledger.events import FileOpen, LlmCall, ProcessExec, RunEnded, RunStarted

GOLDEN = Path(__file__).parent / "test_golden"
T0 = 1_767_225_600_000_000_000


@pytest.mark.parametrize("version", [1, 2])
def test_golden_ledger_verifies_and_reads(version):
    run = GOLDEN / f"v{version}"
    key = load_verify_key(run / "signer.pub")
    report = verify_ledger(run, key)
    assert (report.status, report.run_id, report.records, report.blobs_checked) == (
        "ok", f"golden-v{version}", 7, 1)
    assert report.format_version == version and (report.note is not None) == (version == 1)
    records = list(read_records(run))
    assert [r.seq for r in records] == list(range(7))
    walls = [r.wall_ns - T0 for r in records]
    if version == 1:  # its blob event took the clock's time, the others did not advance for it
        assert walls[:3] + walls[4:] == [0, 1000, 2000, 3000, 4000, 5000]
    else:
        assert walls == [0, 1000, 2000, 3000, 4000, 5000, 6000]
    assert [r.source for r in records] == ["recorder", "strace", "strace", "recorder", "proxy", "strace", "recorder"]
    assert isinstance(records[0].event, RunStarted) and records[0].event.command == ["sh", "-c", "echo hi"]
    assert records[1].event == ProcessExec(pid=1, host_pid=4242, path="/bin/sh", argv=["sh", "-c", "echo hi"],
                                           cwd="/work/sandbox")
    assert records[2].event == FileOpen(pid=1, host_pid=4242, path="/etc/ld.so.cache",
                                        flags="O_RDONLY|O_CLOEXEC", result=3)
    assert records[3].event.sha256 == "98ea6e4f216f2fb4b69fff9b3a44842c38686ca685f3f55dc48c5d3fb1107be4"
    assert isinstance(records[4].event, LlmCall) and records[4].event.usage == {"input_tokens": 10, "output_tokens": 5}
    assert records[6].event == RunEnded(exit_code=0, duration_ns=4000)  # written as wall_ns (schema 2)


def test_v2_seals_bind_the_file_bytes_before_them():
    """What a third party can check with sha256sum: each seal names the bytes before it."""
    data = (GOLDEN / "v2" / "ledger").read_bytes()
    parser = F.FrameParser()
    parser.feed(data)
    items = list(iter(parser.next_event, F.NEED_DATA))
    assert items[0].format_version == 2
    seals = [F.seal_decoder.decode(f.payload) for f in items[1:] if f.kind == F.FRAME_SEAL]
    offsets = [f.offset for f in items[1:] if f.kind == F.FRAME_SEAL]
    assert [s.upto for s in seals] == [3, 6, 7] and seals[-1].final
    for seal, offset in zip(seals, offsets):
        assert seal.size == offset and seal.file_hash == hashlib.sha256(data[:offset]).digest()


def test_there_is_a_golden_for_the_current_version():
    assert (GOLDEN / f"v{FORMAT_VERSION}" / "ledger").is_file()


def test_there_is_a_schema_golden_for_the_current_event_schema():
    """Each schema version's vocabulary is kept as its recorder wrote it (make_schema_golden.py)."""
    from ledger.events import SCHEMA_VERSION

    assert (GOLDEN / f"schema{SCHEMA_VERSION}" / "expected.json").is_file()


def _meaning(value):
    """A value as plain JSON with empty members (None, [], {}) dropped: a field a later schema
    types and omits at its default means what the empty member of a dict meant."""
    if isinstance(value, dict):
        kept = {k: _meaning(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v not in (None, [], {})}
    if isinstance(value, list):
        return [_meaning(v) for v in value]
    return value


def _as_schema16(want: dict) -> dict:
    """A schema 6-15 ``cell.ended`` as schema 16 means it (ledger.events.SCHEMA_VERSION):
    ``score`` and the text ``void_reason`` are the attempt's verdict when it was judged
    (its ledger verified: status clean, void or unverified), else ``reason``."""
    if want["kind"] != "cell.ended" or ("score" not in want and "void_reason" not in want):
        return want
    want = dict(want)
    score, text = want.pop("score", None), want.pop("void_reason", "")
    if want.get("status") in ("clean", "void", "unverified") and want.get("run_id"):
        void = []
        if want["status"] == "void":
            for line in text.splitlines():
                kind, _, message = line.partition(": ")
                void.append({"detector": "", "kind": kind, "effect": "void", "message": message})
        want["verdict"] = {"status": want["status"], "score": score, "void": void}
        if want["status"] != "void" and text:
            want["reason"] = text
    elif text:
        want["reason"] = text
    return want


@pytest.mark.parametrize("schema", sorted(p.name for p in GOLDEN.glob("schema*")))
def test_schema_golden_reads_as_its_recorder_wrote_it(schema):
    """Each event schema's golden (make_schema_golden.py: a real run's and study's own
    vocabulary) verifies and decodes, under today's types, to what its recorder wrote."""
    import json

    import msgspec

    folder = GOLDEN / schema
    expected = json.loads((folder / "expected.json").read_text())
    for name in ("run", "study"):
        run = folder / name
        report = verify_ledger(run, load_verify_key(run / "signer.pub"))
        assert (report.status, report.records) == ("ok", len(expected[name])), report
        decoded = [msgspec.to_builtins(r.event) for r in read_records(run)]
        for got, want in zip(decoded, expected[name], strict=True):
            if want["kind"] == "run.started":
                want = {**want, "run_id": got["run_id"]}
            if int(schema.removeprefix("schema")) <= 15:
                want = _as_schema16(want)
            assert _meaning(got) == _meaning(want)
