"""`caisson preflight --scenario F --repo P --agent NAME [...]`: prove each arm's gating holds.

Exit codes: 0 every arm x agent gates as declared (refusals are listed); 1 a denied tool
is still present (abort: do not run the matrix); 2 usage.
"""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("preflight", help="before a matrix: check every arm x agent's tool gating on the scripted model")
    p.add_argument("--scenario", type=Path, required=True)
    p.add_argument("--repo", type=Path, required=True)
    p.add_argument("--agent", action="append", required=True, metavar="NAME", help="repeatable")
    p.add_argument("--out", type=Path, help="keep the probe runs here")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from caisson.probes import preflight

    checks = preflight(args.scenario, args.repo, args.agent, out=args.out)
    for c in checks:
        detail = c.reason or f"offers {', '.join(c.offered) or 'nothing'}"
        if c.gating is not None:
            detail += f" [gating {c.gating.claimed} -> measured {c.gating.measured}: {c.gating.reason}]"
        print(f"{c.status.upper():8s} {c.agent} x {c.arm}: {detail}")
    return 1 if any(c.status == "abort" for c in checks) else 0
