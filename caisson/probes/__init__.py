"""Known-bad and trivial probes: the selftest's matrix, the preflight, synthetic streams.

`caisson.probes.selftest` records each probe with one control weakened and shows which
detectors fire; `caisson.probes.preflight` runs one probe session per arm x agent before a
matrix (the gating probe itself is `caisson.gating`);
`caisson.probes.synthetic` makes strace-like event streams for demos and benchmarks.
"""

from caisson.probes.preflight import Check, preflight
from caisson.probes.selftest import CASES, Case, SelftestResult, make_probe_repo, run_selftest
from caisson.probes.synthetic import strace_like

__all__ = ["CASES", "Case", "Check", "SelftestResult", "make_probe_repo", "preflight", "run_selftest", "strace_like"]
