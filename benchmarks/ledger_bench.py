"""Ledger throughput against a same-run baseline (msgspec + zstd frames, no chain, no seals).

Usage: python benchmarks/ledger_bench.py [--events N] [--out DIR]

Writes N strace-like events through the ledger and through the baseline, then
verifies (ledger) and reads (baseline) both. Last line:
``append_ratio=A verify_ratio=V bytes_per_event=B events_per_s=E`` where the ratios are
ledger throughput / baseline throughput, each the median over alternated back-to-back
pairs (targets: A >= 0.75, V >= 1.2, B <= 12).
Then proves one record of the ledger (`caisson prove`'s work: verify the whole ledger, keep
its leaf hashes, build the tree's levels, cut the path) and prints the proof's size and the
proving time, and the time `verify_proof` takes over it.
``--out DIR`` keeps the ledger as a run directory signed with the operator key of
``$CAISSON_HOME`` (created when missing), so `caisson verify DIR` checks it.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import msgspec
import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from caisson.home import ensure_operator_key  # noqa: E402
from tests._fixtures.synthetic import strace_like  # noqa: E402
from ledger import (BlobStore, LedgerWriter, PROOF_VERSION, Proof, Record, _append, _chain, _merkle,  # noqa: E402
                    encode_proof, prove, verify_ledger, verify_proof)

FRAME = 4096


def baseline_write(path: Path, items: list) -> None:
    """msgspec-encode records and write zstd frames of FRAME records, length-prefixed."""
    enc = msgspec.msgpack.Encoder()
    cctx = zstandard.ZstdCompressor(level=3)
    with open(path, "wb") as f:
        batch = []
        for seq, (wall, mono, event) in enumerate(items):
            batch.append(Record(seq=seq, wall_ns=wall, mono_ns=mono, source="strace", event=event))
            if len(batch) == FRAME:
                payload = cctx.compress(enc.encode(batch))
                f.write(len(payload).to_bytes(4, "big") + payload)
                batch = []
        if batch:
            payload = cctx.compress(enc.encode(batch))
            f.write(len(payload).to_bytes(4, "big") + payload)
        f.flush()
        os.fsync(f.fileno())


def baseline_read(path: Path) -> int:
    """Read back every baseline frame, decoding records into typed Structs."""
    dec = msgspec.msgpack.Decoder(list[Record])
    dctx = zstandard.ZstdDecompressor()
    data = path.read_bytes()
    pos = n = 0
    while pos < len(data):
        length = int.from_bytes(data[pos : pos + 4], "big")
        n += len(dec.decode(dctx.decompress(data[pos + 4 : pos + 4 + length])))
        pos += 4 + length
    return n


def ledger_write(run_dir: Path, items: list, key) -> None:
    """Append every event through the ledger writer, then close (final seal)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with LedgerWriter(run_dir / "ledger", run_id=f"bench-{run_dir.name}", key=key,
                      blobs=BlobStore(run_dir / "blobs"), flush_records=FRAME,
                      flush_interval_s=3600) as writer:
        for wall, mono, event in items:
            writer.append(event, source="strace", wall_ns=wall, mono_ns=mono)


class Paired(NamedTuple):
    """Timings of alternated runs: each ratio compares a baseline and a ledger run made
    back to back, so a slower phase of a shared machine hits both sides of it alike."""

    ratio: float  # median of per-pair baseline time / ledger time (ledger throughput / baseline's)
    baseline_s: float  # best baseline wall time, s
    ledger_s: float  # best ledger wall time, s


def paired(baseline, ledger, repeat: int) -> Paired:
    """Run ``repeat`` pairs, swapping which side goes first each time."""
    ratios, base_times, ledger_times = [], [], []
    for i in range(repeat):
        times = {}
        for name, fn in ((("baseline", baseline), ("ledger", ledger))[:: 1 if i % 2 == 0 else -1]):
            gc.collect()
            t0 = time.perf_counter()
            fn()
            times[name] = time.perf_counter() - t0
        ratios.append(times["baseline"] / times["ledger"])
        base_times.append(times["baseline"])
        ledger_times.append(times["ledger"])
    return Paired(statistics.median(ratios), min(base_times), min(ledger_times))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--out", type=Path, help="keep the ledger as this run directory")
    ap.add_argument("--repeat", type=int, default=9, help="alternated pairs per measurement (default 9)")
    args = ap.parse_args()
    key = ensure_operator_key()
    items = list(strace_like(args.events))
    work = Path(tempfile.mkdtemp(prefix="caisson-bench-"))
    try:
        base = work / "baseline.bin"
        runs = iter(range(10**6))

        def write_ledger() -> None:
            d = work / f"run{next(runs)}"
            ledger_write(d, items, key)

        append = paired(lambda: baseline_write(base, items), write_ledger, args.repeat)
        last_run = sorted(work.glob("run*"), key=lambda p: int(p.name[3:]))[-1]
        report = verify_ledger(last_run, key.verify_key)
        assert report.status == "ok" and report.records == args.events, report
        verify = paired(
            lambda: baseline_read(base), lambda: verify_ledger(last_run, key.verify_key), args.repeat
        )
        size = (last_run / "ledger").stat().st_size
        n = args.events
        t0 = time.perf_counter()
        proof = Proof(proof_version=PROOF_VERSION, run=prove(last_run, [args.events // 2], key.verify_key))
        prove_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        assert verify_proof(proof, [key.verify_key]).status == "ok"
        check_s = time.perf_counter() - t0
        native = {"chain": _chain.NATIVE, "merkle": _merkle.NATIVE, "append": _append.NATIVE}
        code = " ".join(f"{part}={'native' if built else 'python'}" for part, built in native.items())
        print(f"events={n} baseline_bytes={base.stat().st_size} ledger_bytes={size} {code}"
              + ("" if all(native.values()) else " (a native module is not built: slower)"))
        print(f"append: ledger {n / append.ledger_s:,.0f} ev/s, baseline {n / append.baseline_s:,.0f} ev/s (best runs)")
        print(f"verify: ledger {n / verify.ledger_s:,.0f} ev/s, baseline read {n / verify.baseline_s:,.0f} ev/s")
        print(f"prove: one record of {n:,}: proof {len(encode_proof(proof)):,} bytes"
              f" ({len(proof.run.records[0].path)} path hashes), proving {prove_s:.2f} s, verifying it {check_s * 1e3:.2f} ms")
        if args.out:
            if args.out.exists():
                shutil.rmtree(args.out)
            shutil.copytree(last_run, args.out)
            print(f"kept the ledger run directory at {args.out} (caisson verify {args.out})")
        print(
            f"append_ratio={append.ratio:.2f} verify_ratio={verify.ratio:.2f}"
            f" bytes_per_event={size / n:.2f} events_per_s={n / append.ledger_s:.0f}"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
