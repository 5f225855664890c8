"""Known-bad and trivial probes: the selftest's matrix, the preflight, synthetic streams.

`caisson.probes.selftest` records each probe with one control weakened and shows which
detectors fire; `caisson.probes.preflight` runs one probe session per arm x agent before a
matrix; `caisson.probes.gating` the gating probe and tool discovery both preflights call;
`caisson.probes.synthetic` makes strace-like event streams for demos and benchmarks.
"""

from caisson.probes.gating import (
    GatingVerdict,
    discovered_tools,
    judge_gating,
    pick_probe_tool,
    probe_script,
    request_tools,
)
from caisson.probes.preflight import Check, preflight
from caisson.probes.selftest import CASES, LEAK_BACKSTOP, Case, SelftestResult, make_probe_repo, run_selftest
from caisson.probes.synthetic import strace_like
from caisson.probes.witness_choice import default_syscall_witness, outcome_path

__all__ = ["CASES", "LEAK_BACKSTOP", "Case", "Check", "GatingVerdict", "SelftestResult", "default_syscall_witness",
           "discovered_tools", "judge_gating", "make_probe_repo", "outcome_path", "pick_probe_tool", "preflight",
           "probe_script", "request_tools", "run_selftest", "strace_like"]
