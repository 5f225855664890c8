"""`caisson export`: runs as the views people already use (Inspect AI eval logs, Harbor ATIF
trajectories). Every export is derived: it names the ledger head it came from."""

from __future__ import annotations

from caisson.export._atif import ATIF_VERSION, to_trajectory, write_atif
from caisson.export._facts import RunFacts, read_run, run_dirs
from caisson.export._inspect import to_eval_log, write_inspect

__all__ = ["ATIF_VERSION", "RunFacts", "read_run", "run_dirs", "to_eval_log", "to_trajectory", "write_atif",
           "write_inspect"]
