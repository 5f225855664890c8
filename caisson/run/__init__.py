"""One run: the plan, the record orchestration (I/O only), the witnesses' wiring and the monitor stream.

`plan_run` (pure) turns the options and the scenario into a `RunPlan`, or a usage error;
`record` builds the sandbox and the chamber, starts the witnesses (`default_witnesses`)
and the ledger writer in one trio nursery, and seals the ledger. The witnesses' parsing
lives in `collectors`; the chamber in `caisson.chamber`.
"""

from caisson.run._session import EXIT_INFRA, EXIT_INTERRUPTED, EXIT_TIMEOUT, RunOutcome
from caisson.run.plan import Controls, PlannedAgent, PlannedArm, RecordOptions, Refusal, RunPlan, plan_run
from caisson.run.record import record
from caisson.run.stream import MonitorAddress, MonitorSink, parse_monitor_address, record_json
from caisson.run.witnesses import default_witnesses

__all__ = [
    "EXIT_INFRA",
    "EXIT_INTERRUPTED",
    "EXIT_TIMEOUT",
    "Controls",
    "MonitorAddress",
    "MonitorSink",
    "PlannedAgent",
    "PlannedArm",
    "RecordOptions",
    "Refusal",
    "RunPlan",
    "RunOutcome",
    "default_witnesses",
    "parse_monitor_address",
    "plan_run",
    "record",
    "record_json",
]
