"""One run: the plan, the record orchestration (I/O only), the witnesses' wiring and the monitor stream.

`plan_run` (pure) turns the options and the scenario into a `RunPlan`, or a usage error;
`record` builds the sandbox and the chamber, starts the witnesses (`default_witnesses`)
and the ledger writer in one trio nursery, and seals the ledger. The witnesses' parsing
lives in `collectors`; the chamber in `caisson.chamber`.
"""

from typing import TYPE_CHECKING

from ledger.lazy import lazy_face
from caisson.run._session import EXIT_INFRA, EXIT_INTERRUPTED, EXIT_TIMEOUT, RunOutcome
from caisson.run.plan import Controls, RecordOptions, RunPlan, plan_run
from caisson.run.record import new_run_id, record
from caisson.run.stream import MonitorAddress, MonitorSink, parse_monitor_address, record_json
from caisson.run.witnesses import default_witnesses

if TYPE_CHECKING:
    from caisson.run.ebpf import backend_notice, ebpf_problem
    from caisson.run.witness_choice import default_syscall_witness, keep_outcome, outcome_path

__all__ = [
    "EXIT_INFRA",
    "EXIT_INTERRUPTED",
    "EXIT_TIMEOUT",
    "Controls",
    "MonitorAddress",
    "MonitorSink",
    "RecordOptions",
    "RunPlan",
    "RunOutcome",
    "backend_notice",
    "default_syscall_witness",
    "default_witnesses",
    "ebpf_problem",
    "keep_outcome",
    "new_run_id",
    "outcome_path",
    "parse_monitor_address",
    "plan_run",
    "record",
    "record_json",
]

# The eBPF checks import the eBPF witness: only a command that picks a witness pays for it.
__getattr__, __dir__ = lazy_face(__name__, {"ebpf": ("backend_notice", "ebpf_problem"),
                                            "witness_choice": ("default_syscall_witness", "keep_outcome",
                                                               "outcome_path")}, globals())
