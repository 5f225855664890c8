"""Every ledger format version stays readable: a committed golden ledger per version."""

from __future__ import annotations

from pathlib import Path

from ledger import load_verify_key, read_records, verify_ledger
from ledger.events import FileOpen, LlmCall, ProcessExec, RunEnded, RunStarted

GOLDEN = Path(__file__).parent / "test_golden"


def test_v1_golden_ledger_verifies_and_reads():
    run = GOLDEN / "v1"
    key = load_verify_key(run / "signer.pub")
    report = verify_ledger(run, key)
    assert (report.status, report.run_id, report.records, report.blobs_checked) == ("ok", "golden-v1", 7, 1)
    records = list(read_records(run))
    t0 = 1_767_225_600_000_000_000
    assert [r.seq for r in records] == list(range(7))
    assert [r.wall_ns - t0 for r in records] == [0, 1000, 2000, records[3].wall_ns - t0, 3000, 4000, 5000]
    assert [r.source for r in records] == ["recorder", "strace", "strace", "recorder", "proxy", "strace", "recorder"]
    assert isinstance(records[0].event, RunStarted) and records[0].event.command == ["sh", "-c", "echo hi"]
    assert records[1].event == ProcessExec(pid=1, host_pid=4242, path="/bin/sh", argv=["sh", "-c", "echo hi"],
                                           cwd="/work/sandbox")
    assert records[2].event == FileOpen(pid=1, host_pid=4242, path="/etc/ld.so.cache",
                                        flags="O_RDONLY|O_CLOEXEC", result=3)
    assert records[3].event.sha256 == "98ea6e4f216f2fb4b69fff9b3a44842c38686ca685f3f55dc48c5d3fb1107be4"
    assert isinstance(records[4].event, LlmCall) and records[4].event.usage == {"input_tokens": 10, "output_tokens": 5}
    assert records[6].event == RunEnded(exit_code=0, duration_ns=4000)  # written as wall_ns (schema 2)
