"""`caisson record [OPTIONS] -- CMD [ARG ...]`: run one command in a sealed chamber.

Prints the run directory and the run's status. Exit status: the command's own; 124 on
timeout; 125 when the chamber failed (engine error, command could not start); 130 on
Ctrl-C; 2 on bad input (nothing is written then).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from caisson.errors import UsageError

__all__ = ["SYSCALL_WITNESSES", "register", "run"]

SYSCALL_WITNESSES = ("strace", "ebpf", "both")
"""The values of ``--syscall-witness``."""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("record", help="run a command in a sealed chamber and record it",
                       usage="caisson record [OPTIONS] -- CMD [ARG ...]")
    p.add_argument("--scenario", type=Path, metavar="FILE", help="scenario TOML (exclusions, env, limits)")
    p.add_argument("--repo", type=Path, metavar="PATH", help="the live repository to export the sandbox from")
    p.add_argument("--commit", metavar="REV", help="the commit under test (default HEAD)")
    p.add_argument("--out", type=Path, metavar="RUN_DIR", help="run directory (default runs/<run id>)")
    p.add_argument("--timeout", type=float, metavar="SECONDS", help="wall deadline (default: the scenario's)")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="set a variable (repeatable)")
    p.add_argument("--monitor", metavar="ADDR", help="stream events as JSON lines to unix:PATH or tcp:HOST:PORT")
    p.add_argument("--image", metavar="TAG", help="chamber image (default: the images/chamber recipe's tag)")
    p.add_argument("--question", metavar="ID", help="the scenario question this run answers (CAISSON_PROMPT)")
    p.add_argument("--agent", metavar="NAME", help="run a real agent (claude-code, ...) on the question")
    p.add_argument("--arm", metavar="NAME", help="the scenario arm: the agent's granted and denied tools")
    p.add_argument("--syscall-witness", metavar="strace|ebpf|both",
                   help="syscall witness: strace, ebpf (a BPF program on the host: the libbpf loader, else bpftrace;"
                        " strace where it cannot run), or both;"
                        " default: eBPF where it was shown to work on this machine (qualified at first use), else strace")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="the command, after --")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.syscall_witness is not None and args.syscall_witness not in SYSCALL_WITNESSES:
        raise UsageError(f"--syscall-witness {args.syscall_witness}: expected one of {', '.join(SYSCALL_WITNESSES)}")
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    # plan_run's check, made before its imports: 3.8x a bare interpreter's start, not 28x (docs/benchmarks.md,
    # "Import time of each command"); with --commit, plan_run answers in its own order
    if not cmd and args.agent is None and args.commit is None:
        raise UsageError("no command given: caisson record [OPTIONS] -- CMD [ARG ...] (or --agent NAME)")
    from caisson.chamber import parse_env_assignments
    from caisson.run import RecordOptions, default_witnesses, record

    options = RecordOptions(
        command=cmd, scenario=args.scenario, repo=args.repo, commit=args.commit, out=args.out,
        timeout_s=args.timeout, env=parse_env_assignments(args.env), monitor=args.monitor, image=args.image,
        question=args.question, agent=args.agent, arm=args.arm, syscall_witness=args.syscall_witness or "strace",
        syscall_witness_why=f"--syscall-witness {args.syscall_witness}",
    )
    from caisson.run import plan_run
    from caisson.scenario import load_scenario

    # every option checked before a witness is chosen (the choice may run a qualification in the chamber)
    plan_run(options, load_scenario(options.scenario) if options.scenario else None, witnesses=[])
    if args.syscall_witness is None:  # the strongest witness shown to work here (eBPF qualified at first use)
        from caisson.run import default_syscall_witness

        # a fall-back is said once; the run is witnessed by strace, never by nothing
        choice = default_syscall_witness(say=lambda line: print(f"caisson record: {line}", file=sys.stderr))
        options.syscall_witness, options.syscall_witness_why = choice.witness, choice.why
    elif options.syscall_witness != "strace":
        from caisson.run import ebpf_problem

        problem = ebpf_problem()
        if problem is not None:  # said once; the run is witnessed by strace, never by nothing
            print(f"caisson record: the eBPF witness cannot run here ({problem}): using strace", file=sys.stderr)
            options.syscall_witness = "strace"
            options.syscall_witness_why = f"--syscall-witness {args.syscall_witness}: fell back to strace: {problem}"
    if options.syscall_witness != "strace":
        from caisson.run import backend_notice

        if (notice := backend_notice()) is not None:  # said once; run.started names the backend
            print(notice, file=sys.stderr)
    outcome = record(options, witnesses=default_witnesses(weaken=options.weaken, syscall=options.syscall_witness))
    detail = f"exit {outcome.command_exit}" if outcome.status == "completed" else outcome.reason
    print(f"{outcome.run_dir}")
    print(f"run {outcome.run_id}: {outcome.status} ({detail}, {outcome.duration_ns / 1e9:.2f} s)", file=sys.stderr)
    return outcome.exit_code
