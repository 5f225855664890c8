"""Write the golden ledger of the current format version: test_golden/v<FORMAT_VERSION>/.

Run once per format version, from the checkout, and commit the result:

    .venv/bin/python tests/ledger/test_golden/make_golden.py

The run directory holds ``ledger``, ``blobs/`` and ``signer.pub``; the signing key is
made for the occasion and thrown away, so no one can sign another golden with it. The
records are those of v1 (frames of 3, one blob), with fixed times; only the seals' times
come from the clock. A golden is never rewritten: the script refuses an existing folder.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from ledger import FORMAT_VERSION, BlobStore, LedgerWriter, SigningKey  # noqa: E402
from ledger.events import (  # noqa: E402
    BlobStored,
    FileOpen,
    LlmCall,
    LlmUsage,
    ProcessExec,
    ProcessExit,
    RunEnded,
    RunLimits,
    RunStarted,
)

T0 = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z, ns since the Unix epoch


def main() -> int:
    run = Path(__file__).resolve().parent / f"v{FORMAT_VERSION}"
    if run.exists():
        print(f"{run} exists: a golden ledger is never rewritten", file=sys.stderr)
        return 1
    run.mkdir()
    key = SigningKey.generate()
    run_id = f"golden-v{FORMAT_VERSION}"
    blobs = BlobStore(run / "blobs")
    digest = blobs.put(b"hi\n")
    events = [
        ("recorder", RunStarted(run_id=run_id, caisson_version="0.1.0", command=["sh", "-c", "echo hi"],
                                limits=RunLimits(wall_seconds=60))),
        ("strace", ProcessExec(pid=1, host_pid=4242, path="/bin/sh", argv=["sh", "-c", "echo hi"],
                               cwd="/work/sandbox")),
        ("strace", FileOpen(pid=1, host_pid=4242, path="/etc/ld.so.cache", flags="O_RDONLY|O_CLOEXEC", result=3)),
        ("recorder", BlobStored(sha256=digest, size_bytes=3, role="stdout", media_type="text/plain")),
        ("proxy", LlmCall(provider="anthropic", endpoint="messages", requested_model="claude-x",
                          served_model="claude-x", usage={"input_tokens": 10, "output_tokens": 5},
                          normalized=LlmUsage(input_tokens=10, output_tokens=5, total_tokens=15, rule="anthropic"))),
        ("strace", ProcessExit(pid=1, host_pid=4242, code=0)),
        ("recorder", RunEnded(exit_code=0, duration_ns=4000)),
    ]
    with LedgerWriter(run / "ledger", run_id=run_id, key=key, blobs=blobs, flush_records=3,
                      flush_interval_s=3600, created_ns=T0) as writer:
        for i, (source, event) in enumerate(events):
            writer.append(event, source=source, wall_ns=T0 + 1000 * i, mono_ns=10 + 1000 * i)
    (run / "signer.pub").write_bytes(key.verify_key.to_pem())
    print(f"wrote {run}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
