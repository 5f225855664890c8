"""Known-bad and trivial probes: the selftest's matrix, the preflight, the eBPF qualification.

`caisson.probes.selftest` records each probe with one control weakened and shows which
detectors fire; `caisson.probes.preflight` runs one probe session per arm x agent before a
matrix (the gating probe itself is `caisson.gating`); `caisson.probes.qualify` the eBPF
witness's quick known-answer run.
"""

from caisson.probes.preflight import Check, preflight
from caisson.probes.selftest import CASES, Case, SelftestResult, make_probe_repo, run_selftest

__all__ = ["CASES", "Case", "Check", "SelftestResult", "make_probe_repo", "preflight", "run_selftest"]
