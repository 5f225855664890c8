"""The containment scan of a tree against reading it (caisson/chamber/_containment.py).

Usage: python benchmarks/scan_bench.py [TREE] [--pairs N] [--scenario FILE]

Scans TREE (default: this checkout; its git-tracked files, or every file under a directory
that is not a git tree) with the scenario's prompts and leak terms (default: the click
scenario, 18 questions), and, as the baseline, reads the same files, decodes them as UTF-8,
case-folds them and splits them into words: what a scan that only looked for the raw
prompt text would do. Last line: ``scan_ratio=R scan_s=S files=F mb=M`` where R is scan
CPU time / baseline CPU time, the median over N alternated back-to-back pairs, and S the
median scan CPU time in seconds.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from caisson.chamber._containment import containment_scan  # noqa: E402
from caisson.scenario import load_scenario  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
WORD = re.compile(r"\w+")


def tree_files(root: Path) -> list[str]:
    """The tree's git-tracked regular files, or all its regular files outside git."""
    out = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True)
    paths = out.stdout.decode("utf-8", "surrogateescape").split("\0") if out.returncode == 0 else []
    paths = [p for p in paths if p]
    if not paths:
        paths = [str(p.relative_to(root)) for p in root.rglob("*")]
    return sorted(p for p in paths if (root / p).is_file() and not (root / p).is_symlink())


def baseline(root: Path, paths: list[str]) -> int:
    return sum(len(WORD.findall((root / p).read_bytes().decode("utf-8", "replace").casefold())) for p in paths)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("tree", nargs="?", type=Path, default=ROOT)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--scenario", type=Path, default=ROOT / "scenarios" / "click" / "scenario.toml")
    args = ap.parse_args()
    scenario = load_scenario(args.scenario)
    paths = tree_files(args.tree)
    size = sum((args.tree / p).stat().st_size for p in paths)
    ratios, scans = [], []
    for _ in range(args.pairs):
        t = time.process_time()
        containment_scan(args.tree, paths, scenario)
        scan = time.process_time() - t
        t = time.process_time()
        baseline(args.tree, paths)
        base = time.process_time() - t
        scans.append(scan)
        ratios.append(scan / base)
        print(f"scan {scan:.2f} s, baseline {base:.2f} s", flush=True)
    print(f"scan_ratio={statistics.median(ratios):.2f} scan_s={statistics.median(scans):.2f} "
          f"files={len(paths)} mb={size / 1e6:.1f}")


if __name__ == "__main__":
    main()
