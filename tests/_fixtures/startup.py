"""The command lines that only print help or a usage error: what `caisson` must start fast for.

Shared by tests/caisson/test_cli_startup.py (which modules each imports) and
benchmarks/startup_bench.py (how long each takes against ``python -c pass``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from caisson.cli import _COMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[2]

USAGE_ERRORS = [
    [],
    ["no-such-command"],
    ["record"],
    ["record", "--syscall-witness", "bad", "--", "true"],
    ["study", "report", "DIR", "--format", "bad"],
]
"""Usage errors the parser alone does not tell (the command's own first check), and the bare command."""

HELPS = [["--help"], ["--version"]]

# Runs ARGV as the console script does and writes the modules it imported to the file in $1.
_PROBE = """\
import json, sys
out, sys.argv = sys.argv[1], ["caisson", *sys.argv[2:]]
from caisson.cli import main
try:
    code = main()
except SystemExit as exc:
    code = exc.code
with open(out, "w") as f:
    json.dump(sorted(sys.modules), f)
sys.exit(code)
"""


def _required(parser: argparse.ArgumentParser) -> bool:
    """Whether the parser refuses an empty command line (a required argument or verb)."""
    return any(a.required for a in parser._actions)


def _verbs(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return {name: p for a in parser._actions if isinstance(a, argparse._SubParsersAction)
            for name, p in a.choices.items()}


def startup_cases() -> list[tuple[list[str], int]]:
    """Every command line that prints help (exit 0) or a usage error (exit 2), with its exit code:
    ``caisson --help``, and for each command and each of its verbs ``--help``, an unknown option,
    and the bare command where the parser needs an argument."""
    cases = [(argv, 0) for argv in HELPS] + [(argv, 2) for argv in USAGE_ERRORS]
    for name in _COMMANDS:
        command = _verbs(build_parser(name)).get(name)
        if command is None:  # a command this tree does not have yet
            continue
        for path, parser in [([name], command)] + [([name, v], p) for v, p in _verbs(command).items()]:
            cases += [(path + ["--help"], 0), (path + ["--no-such-option"], 2)]
            if _required(parser) and (path, 2) not in cases:
                cases.append((path, 2))
    return cases


def run_case(argv: list[str], modules_out: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    """``caisson ARGV`` in a fresh interpreter of this tree, output captured; ``modules_out``: also
    write the names of the modules it imported there (a JSON list)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if modules_out is None:
        cmd = [sys.executable, "-m", "caisson.cli", *argv]
    else:
        cmd = [sys.executable, "-c", _PROBE, str(modules_out), *argv]
    return subprocess.run(cmd, capture_output=True, env=env, cwd=ROOT, timeout=120)


def imported_modules(argv: list[str], tmp: Path) -> tuple[int, set[str]]:
    """(exit code, names of the modules imported) of ``caisson ARGV`` in a fresh interpreter."""
    out = tmp / ("modules-" + "_".join(argv).replace("/", "_")[:80] + ".json")
    proc = run_case(argv, out)
    return proc.returncode, set(json.loads(out.read_text()))
