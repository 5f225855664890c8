"""The `caisson` command line: a thin dispatcher over one module per command.

Exit codes (all commands): 0 ok; 1 a finding (tampered ledger, failed check);
2 usage or I/O error; 3 `verify`: intact but not closed; 124 `record`: timeout;
130 Ctrl-C; 143 SIGTERM (`caisson._signals`: both settle what they stop).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import sys

from caisson import __version__
from caisson._signals import Terminated, install as install_sigterm
from caisson.errors import CaissonError

__all__ = ["EXIT_FINDING", "EXIT_OK", "EXIT_USAGE", "build_parser", "main", "run"]

EXIT_OK = 0
EXIT_FINDING = 1
EXIT_USAGE = 2

_COMMANDS = {
    "keygen": "create the operator signing key pair",
    "record": "run a command in a sealed chamber and record it",
    "verify": "verify a ledger against a trusted key",
    "tail": "print a ledger's events as JSON lines",
    "prove": "prove records of a ledger to a third party, without the rest of it",
    "replay": "recompute findings and scores from sealed runs",
    "selftest": "run the known-bad probes and print the detector x probe matrix",
    "preflight": "before a matrix: check every arm x agent's tool gating on the scripted model",
    "model": "a scripted model endpoint for agents in the chamber",
    "image": "build chamber images from images/<name>/",
    "gc": "list and remove chambers, networks and scratch dirs whose recorder is gone",
    "study": "plan, run and follow a study (a matrix of cells)",
    "view": "a read-only web view of runs and studies",
    "export": "export runs to Inspect AI eval logs or Harbor ATIF trajectories",
    "demo": "run the built-in example (click 8.1.7, honest agent vs key reader)",
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The argument parser. Only the module of ``only`` (the command being run) is
    imported, so a quick command does not pay for the heavy ones; the others are listed
    by their summary (``only=None``: every command listed, none imported)."""
    parser = argparse.ArgumentParser(prog="caisson", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"caisson {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, summary in _COMMANDS.items():
        if name != only:
            sub.add_parser(name, help=summary, add_help=False)
            continue
        try:
            module = importlib.import_module(f"caisson._cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"caisson._cli.{name}":
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code (also used as the console script)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(command if command in _COMMANDS else None)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(args.func(args))
    except CaissonError as exc:
        print(f"caisson {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Terminated:
        return 143
    except KeyboardInterrupt:
        return 130


def run() -> None:
    """The console script: `main`, then exit with its code.

    Before the interpreter tears down, every object still alive is frozen out of the
    garbage collector (`gc.freeze`): its final collection would otherwise walk everything
    trio, aiohttp and the ledger imported (its cost: docs/benchmarks.md, "Figures behind the code").
    Finalisation itself (atexit handlers, flushing files) runs as usual; what no longer
    runs is ``__del__`` of garbage left in reference cycles, which caisson does not rely
    on: its ledgers, containers and temp dirs are closed and removed before this point.
    """
    install_sigterm()
    code = main()
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    run()
