"""How fast `caisson view` opens a large run, over real HTTP.

Usage: python benchmarks/view_bench.py [--events 1000000] [--repeat 3]

Writes a synthetic strace-like ledger (tests._fixtures.synthetic) of ``--events`` records,
then, ``--repeat`` times, starts a fresh `caisson view` server (nothing cached) and
times: the run page's first open (verification of the whole ledger, findings, the first
page of the timeline), a page in the middle and the last page. Last line:
``view_open_s=S page_mid_s=M page_end_s=E events=N`` (medians; target: open < 2 s for
1,000,000 events).
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests._fixtures.synthetic import strace_like  # noqa: E402
from ledger import BlobStore, LedgerWriter, generate_keypair  # noqa: E402


def fetch(url: str) -> float:
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as response:
        body = response.read()
    elapsed = time.perf_counter() - t0
    if b'id="timeline"' not in body:
        raise SystemExit(f"{url}: no timeline in the page")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        key = generate_keypair(tmp_path / "key", tmp_path / "key.pub")
        run = tmp_path / "run"
        run.mkdir()
        t0 = time.perf_counter()
        with LedgerWriter(run / "ledger", run_id="bench", key=key, blobs=BlobStore(run / "blobs"),
                          flush_interval_s=3600) as writer:
            for wall, mono, event in strace_like(args.events):
                writer.append(event, source="strace", wall_ns=wall, mono_ns=mono)
        print(f"wrote {args.events} events in {time.perf_counter() - t0:.1f} s ({(run / 'ledger').stat().st_size} bytes)")
        opens, mids, ends = [], [], []
        for _ in range(args.repeat):
            proc = subprocess.Popen([sys.executable, "-m", "caisson.cli", "view", str(run), "--port", "0", "--key",
                                     str(tmp_path / "key.pub")], stdout=subprocess.PIPE, text=True, cwd=ROOT)
            try:
                url = re.search(r"http://\S+", proc.stdout.readline()).group(0)
                opens.append(fetch(f"{url}/run/0"))
                mids.append(fetch(f"{url}/run/0/events?start={args.events // 2}"))
                ends.append(fetch(f"{url}/run/0/events?start={args.events - 100}"))
            finally:
                proc.terminate()
                proc.wait(timeout=10)
            print(f"open {opens[-1]:.3f} s, middle page {mids[-1]:.3f} s, last page {ends[-1]:.3f} s")
    print(f"view_open_s={statistics.median(opens):.3f} page_mid_s={statistics.median(mids):.3f}"
          f" page_end_s={statistics.median(ends):.3f} events={args.events}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
