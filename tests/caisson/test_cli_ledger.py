"""`caisson keygen`, `verify` and `tail` as a user runs them."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

from caisson.cli import main
from ledger import BlobStore, LedgerWriter, SigningKey
from ledger import _format as F
from ledger.events import FileOpen, Note, ProcessExec, RunEnded

ROOT = Path(__file__).resolve().parents[2]


def _run_dir(tmp_path: Path, key: SigningKey, *, close: bool = True) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    w = LedgerWriter(run / "ledger", run_id="cli-test", key=key, blobs=BlobStore(run / "blobs"), flush_records=2)
    w.append(ProcessExec(pid=1, path="/bin/sh", argv=["sh"]), source="strace", wall_ns=10, mono_ns=1)
    w.append(FileOpen(pid=1, path="/etc/passwd", result=3), source="strace", wall_ns=20, mono_ns=2)
    w.put_blob(b"out", role="stdout")
    w.append(RunEnded(exit_code=0), source="recorder", wall_ns=30, mono_ns=3)
    if close:
        w.close()
    return run


def test_keygen_writes_a_private_key_only_the_owner_can_read(op_key, caisson_home, capsys):
    private = caisson_home / "keys" / "operator.key"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert (caisson_home / "keys" / "operator.pub").is_file()
    assert main(["keygen"]) == 2  # refuses to overwrite
    assert "refusing to overwrite" in capsys.readouterr().err


def test_verify_exit_codes(op_key, tmp_path, capsys):
    run = _run_dir(tmp_path, op_key)
    assert main(["verify", str(run)]) == 0
    assert capsys.readouterr().out.startswith("OK ")
    assert main(["verify", str(run / "ledger"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "ok"

    data = (run / "ledger").read_bytes()
    (run / "ledger").write_bytes(data[:-7])
    assert main(["verify", str(run)]) == 3
    out = capsys.readouterr().out
    assert "NOT CLOSED" in out and "torn frame of" in out

    damaged = bytearray(data)
    damaged[len(data) // 2] ^= 0x40
    (run / "ledger").write_bytes(bytes(damaged))
    assert main(["verify", str(run)]) == 1
    assert "TAMPERED" in capsys.readouterr().out

    (run / "ledger").write_bytes(data)
    other = tmp_path / "other.pub"
    other.write_bytes(SigningKey.generate().verify_key.to_pem())
    assert main(["verify", str(run), "--key", str(other)]) == 1
    assert "key not trusted" in capsys.readouterr().out

    (tmp_path / "junk").write_text("junk")
    assert main(["verify", str(tmp_path / "junk")]) == 2
    assert "not a caisson ledger" in capsys.readouterr().err
    assert main(["verify", str(tmp_path / "nope")]) == 2


def test_verify_says_an_empty_file_is_not_a_ledger_and_a_partial_header_is_torn(op_key, tmp_path, capsys):
    run = _run_dir(tmp_path, op_key)
    data = (run / "ledger").read_bytes()
    (run / "ledger").write_bytes(b"")
    assert main(["verify", str(run)]) == 2
    assert "empty file: not a caisson ledger" in capsys.readouterr().err

    (run / "ledger").write_bytes(data[:30])
    assert main(["verify", str(run)]) == 3
    assert "ends inside its header (30 bytes)" in capsys.readouterr().out


def test_verify_names_a_fork_with_both_offsets(op_key, tmp_path, capsys):
    run = _run_dir(tmp_path, op_key)
    data = (run / "ledger").read_bytes()
    parser = F.FrameParser()
    parser.feed(data)
    frames = [item for item in iter(parser.next_event, F.NEED_DATA) if isinstance(item, F.Frame)]
    first, seal = frames[0], frames[1]  # records 0..1, and their seal
    end = seal.offset + F.FRAME_HEADER_SIZE + len(seal.payload)
    copy = data[first.offset : seal.offset]
    (run / "ledger").write_bytes(data[:end] + copy + data[end:])  # seqs 0..1 again
    assert main(["verify", str(run)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("TAMPERED") and "sequence gap" not in out
    assert f"fork: two records claim seq 0, in the frames at byte {first.offset} and byte {end}" in out
    assert main(["verify", str(run), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert (report["status"], report["fork_seq"], report["fork_offsets"], report["exit_code"]) == (
        "tampered", 0, [first.offset, end], 1)
    assert report["format_version"] == F.FORMAT_VERSION and report["note"] is None


def test_verify_states_what_a_version_1_ledger_does_not_guarantee(capsys):
    golden = ROOT / "tests" / "ledger" / "test_golden" / "v1"
    assert main(["verify", str(golden), "--key", str(golden / "signer.pub")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("OK ") and "note: format version 1: its seals do not bind the file's raw bytes" in out


def test_tail_prints_json_lines_and_filters_by_kind(op_key, tmp_path, capsys):
    run = _run_dir(tmp_path, op_key)
    assert main(["tail", str(run)]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["kind"] for x in lines] == ["process.exec", "file.open", "blob.stored", "run.ended"]
    assert lines[1] == {"seq": 1, "ts_ns": 20, "source": "strace", "kind": "file.open", "pid": 1,
                        "path": "/etc/passwd", "result": 3}
    assert main(["tail", str(run), "--kind", "file.open", "--kind", "run."]) == 0
    assert [json.loads(x)["kind"] for x in capsys.readouterr().out.splitlines()] == ["file.open", "run.ended"]
    assert main(["tail", str(run), "--kind", "no.such"]) == 2


def test_tail_follow_reads_a_growing_ledger_until_its_final_seal(op_key, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "caisson.cli", "tail", "--follow", str(run)],
                            stdout=subprocess.PIPE, text=True, cwd=ROOT, env=os.environ.copy())
    writer = LedgerWriter(run / "ledger", run_id="follow", key=op_key, flush_records=1000, flush_interval_s=0.05)
    seen: list[dict] = []

    def read() -> None:
        for line in proc.stdout:
            seen.append(json.loads(line))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    for i in range(5):
        writer.append(Note(text=f"live {i}"), source="recorder")
        time.sleep(0.1)
        writer.flush_if_due()
    deadline = time.monotonic() + 10
    while len(seen) < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [x["text"] for x in seen] == [f"live {i}" for i in range(5)]  # seen before the close
    assert proc.poll() is None  # still following: no final seal yet
    writer.append(Note(text="last"), source="recorder")
    writer.close()
    assert proc.wait(timeout=10) == 0
    reader.join(timeout=5)
    assert [x["text"] for x in seen][-1] == "last"
