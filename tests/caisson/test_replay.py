"""Replay recomputes findings and scores from sealed runs, never touching the ledger."""

from __future__ import annotations

import json
from pathlib import Path

from caisson.cli import main
from caisson.detectors import DEFAULT_DETECTORS, VOID, Finding
from caisson.home import ensure_operator_key
from caisson.replay import FINDINGS_FILE, replay_runs
from ledger import BlobStore, LedgerWriter
from ledger.events import (BlobStored, ExcludedPath, FileOpen, ProcessExec, RunEnded, RunLimits, RunStarted,
                           SandboxBuilt)

SCENARIO = b'''
name = "replay-test"
answer_file = "ANSWER.md"
leak_terms = ["rt-canary-9x1q"]

[[questions]]
id = "where-context"
prompt = "In which file is the `Context` class of this toolkit defined?"
evidence = ["src/click/core.py"]
required = [{ subject = "Context", pattern = "src/click/core.py" }]

[[exclusions]]
category = "answer_key"
globs = ["benchmark/**"]
'''
ENV = {"PATH": "/usr/bin:/bin", "PWD": "/work/sandbox", "HOME": "/tmp/caisson-home", "CODING_KNOWLEDGE_INJECTION": "0"}


def make_run(run_dir: Path, *, answer: bytes, opens: list[FileOpen], weakened=()) -> Path:
    key = ensure_operator_key()
    run_dir.mkdir(parents=True)
    blobs = BlobStore(run_dir / "blobs")
    with LedgerWriter(run_dir / "ledger", run_id=run_dir.name, key=key, blobs=blobs) as w:
        w.append(RunStarted(run_id=run_dir.name, caisson_version="0", question_id="where-context", env=ENV,
                            limits=RunLimits(wall_seconds=60), weakened=list(weakened)), source="recorder")
        w.append(BlobStored(sha256=blobs.put(SCENARIO), size_bytes=len(SCENARIO), role="scenario"),
                 source="recorder")
        w.append(SandboxBuilt(path="/work/sandbox", commit="c" * 40, tree_digest="d",
                              excluded=[ExcludedPath(path="benchmark/questions.toml", category="answer_key")]),
                 source="recorder")
        w.append(ProcessExec(pid=1, path="/bin/sh", argv=["sh"], cwd="/work/sandbox", env=ENV), source="strace")
        for event in opens:
            w.append(event, source="strace")
        w.append(BlobStored(sha256=blobs.put(answer), size_bytes=len(answer), role="answer"), source="recorder")
        w.append(RunEnded(exit_code=0, duration_ns=10**9), source="recorder")
    return run_dir


def test_honest_run_is_clean_and_scored(tmp_path, capsys):
    run = make_run(tmp_path / "honest", answer=b"`Context` is defined in src/click/core.py:234.\n",
                   opens=[FileOpen(pid=1, path="src/click/core.py", result=3)])
    assert main(["replay", str(run)]) == 0
    out = capsys.readouterr().out
    assert "clean" in out and "1.00" in out
    saved = json.loads((run / FINDINGS_FILE).read_text())
    assert (saved["status"], saved["score"], saved["question_id"]) == ("clean", 1.0, "where-context")


def test_key_reader_is_void_and_its_answer_scores_null(tmp_path):
    run = make_run(tmp_path / "reader",
                   answer=b"Per benchmark/questions.toml, `Context` is in src/click/core.py.\n",
                   opens=[FileOpen(pid=1, path="benchmark/questions.toml", result=3)])
    [result] = replay_runs([run], ensure_operator_key().verify_key)
    assert result.status == "void" and result.score is None
    assert result.score_if_clean is not None and result.grade.leak_cited == "benchmark/questions.toml"
    assert result.reasons == ["leak: read benchmark/questions.toml (answer_key) with openat"]


def test_weakened_controls_are_never_clean(tmp_path):
    run = make_run(tmp_path / "weak", answer=b"src/click/core.py", opens=[], weakened=["exclusions"])
    [result] = replay_runs([run], ensure_operator_key().verify_key)
    assert result.status == "void" and "weakened" in result.reasons[0]


def test_a_detector_fix_changes_only_the_findings_file(tmp_path):
    """An old ledger, a buggy detector that missed './' paths, then the fix: a finding appears."""
    run = make_run(tmp_path / "old", answer=b"`Context` is defined in src/click/core.py",
                   opens=[FileOpen(pid=1, path="./benchmark/questions.toml", result=3)])
    ledger_bytes = (run / "ledger").read_bytes()

    def buggy_excluded_read(records, config):
        for r in records:
            if isinstance(r.event, FileOpen) and r.event.path.startswith("benchmark/") and r.event.result is not None:
                yield Finding(detector="containment.excluded_read@0", kind="leak", effect=VOID,
                              evidence=[r.seq], message=f"read {r.event.path}")

    buggy = [("containment.excluded_read@0", buggy_excluded_read)] + [
        d for d in DEFAULT_DETECTORS if not d[0].startswith("containment.excluded_read")]
    key = ensure_operator_key().verify_key
    [before] = replay_runs([run], key, detectors=buggy)
    assert before.status == "clean"
    first = (run / FINDINGS_FILE).read_bytes()
    [after] = replay_runs([run], key)
    assert after.status == "void"
    assert [f.detector for f in after.findings] == ["containment.excluded_read@1"]
    assert (run / FINDINGS_FILE).read_bytes() != first
    assert (run / "ledger").read_bytes() == ledger_bytes


def test_an_answer_citing_a_leak_term_in_another_spelling_scores_null(tmp_path):
    """The scenario's leak terms are provenance too, matched folded: here with U+2011 hyphens."""
    run = make_run(tmp_path / "canary", answer="`Context` is in src/click/core.py (rt\u2011canary\u20119x1q).\n".encode(),
                   opens=[FileOpen(pid=1, path="src/click/core.py", result=3)])
    [result] = replay_runs([run], ensure_operator_key().verify_key)
    assert (result.status, result.score, result.score_if_clean) == ("clean", None, 1.0)
    assert result.grade.leak_cited == "rt-canary-9x1q"


def test_a_ledger_that_does_not_verify_is_reported_and_not_scored(tmp_path, capsys):
    run = make_run(tmp_path / "tampered", answer=b"x", opens=[])
    data = bytearray((run / "ledger").read_bytes())
    data[len(data) // 2] ^= 1
    (run / "ledger").write_bytes(bytes(data))
    assert main(["replay", str(run), "--json"]) == 1
    [result] = json.loads(capsys.readouterr().out)
    assert result["status"] == "unverified" and result["score"] is None and result["verified"] == "tampered"
