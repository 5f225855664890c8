"""Known-bad and trivial probes: the selftest's matrix and the preflight.

`caisson.probes.selftest` records each probe with one control weakened and shows which
detectors fire; `caisson.probes.preflight` runs one probe session per arm x agent before a
matrix (the gating probe itself is `caisson.gating`; the eBPF witness's quick known-answer
run, which `caisson record` runs at first use, is `caisson.run.qualify`).
"""

from caisson.probes.preflight import Check, preflight
from caisson.probes.selftest import CASES, LEAK_BACKSTOP, Case, SelftestResult, make_probe_repo, run_selftest

__all__ = ["CASES", "LEAK_BACKSTOP", "Case", "Check", "SelftestResult", "make_probe_repo", "preflight", "run_selftest"]
