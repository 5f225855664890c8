"""Write the golden ledgers of the current event schema: test_golden/schema<SCHEMA_VERSION>/.

Run once per schema version, from the checkout, on a run and a study ledger (a segment: STUDY/study/000) that this version's
`caisson` recorded (``make demo`` writes both), and commit the result:

    .venv/bin/python tests/ledger/test_golden/make_schema_golden.py RUN_DIR STUDY_LEDGER_DIR

It copies the events of caisson's own persisted vocabulary (``run.started``,
``sandbox.built``, ``run.ended`` of the run; ``study.planned``, ``baseline.measured``,
``cell.started``, ``cell.ended``, ``study.ended`` of the study ledger) as those recorders
wrote them into two new ledgers, ``run/`` and ``study/``, signed by a key made for the
occasion and thrown away, and writes ``expected.json``: each copied event as plain JSON
(`msgspec.to_builtins`), what every later schema must still read from them. A golden is
never rewritten: the script refuses an existing folder.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import msgspec  # noqa: E402

from ledger import BlobStore, LedgerWriter, SigningKey, read_records  # noqa: E402
from ledger.events import SCHEMA_VERSION, event_kind  # noqa: E402

T0 = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z, ns since the Unix epoch
RUN_KINDS = ("run.started", "sandbox.built", "run.ended")
STUDY_KINDS = ("study.planned", "baseline.measured", "cell.started", "cell.ended", "study.ended")


def _copy(source: Path, target: Path, kinds: tuple[str, ...], key: SigningKey) -> list:
    events = [(r.source, r.event) for r in read_records(source) if event_kind(r.event) in kinds]
    target.mkdir()
    run_id = f"golden-schema{SCHEMA_VERSION}-{target.name}"
    with LedgerWriter(target / "ledger", run_id=run_id, key=key, blobs=BlobStore(target / "blobs"),
                      flush_records=4, flush_interval_s=3600, created_ns=T0) as writer:
        for i, (src, event) in enumerate(events):
            if event_kind(event) == "run.started":
                event = msgspec.structs.replace(event, run_id=run_id)
            writer.append(event, source=src, wall_ns=T0 + 1000 * i, mono_ns=10 + 1000 * i)
    (target / "signer.pub").write_bytes(key.verify_key.to_pem())
    return [msgspec.to_builtins(e) for _, e in events]


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(__file__).resolve().parent / f"schema{SCHEMA_VERSION}"
    if out.exists():
        print(f"{out} exists: a golden ledger is never rewritten", file=sys.stderr)
        return 1
    out.mkdir()
    key = SigningKey.generate()
    expected = {"run": _copy(Path(argv[0]), out / "run", RUN_KINDS, key),
                "study": _copy(Path(argv[1]), out / "study", STUDY_KINDS, key)}
    (out / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
