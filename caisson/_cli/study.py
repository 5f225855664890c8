"""`caisson study plan|run|status`: a study's matrix, its run, and where it stands.

- ``caisson study plan STUDY [--json]``: one line per (arm, agent, model) with its gating,
  elicitation and number of cells, and a ``REFUSE`` line with the reason for every
  combination that cannot be measured honestly. Exit 0; 2 a bad study file.
- ``caisson study run STUDY --out DIR --repo P [--commit REV] [--resume] [--infra-retries N]
  [--executor local|ray] [--address ADDR] [--slots-per-host K] [--enroll-key FILE ...]``:
  the preflight and the cells into DIR (docs/studies.md). Exit 0 the study ended; 1 it
  aborted (preflight: grader or isolation; the abort rule); 2 a bad study file or usage
  (also: Ray missing or no host holding a ``caisson_slot``).
- ``caisson study status DIR``: the same counts as the live display, from the study
  ledger (also while it runs). Exit 0 ended; 1 aborted; 3 running or crashed.
- ``caisson study report DIR [--format text|markdown|html|json] [--out FILE]
  [--allow-untrusted] [--key PUBKEY] [--jobs N]``: the study verified, every counting cell
  replayed with the current detectors (in N processes, one per core by default), the report
  (caisson/report/). Exit 0 written; 1 the study
  does not verify (tampered: nothing is reported); 2 usage.
- ``caisson study backfill DIR``: first-party token figures read offline from the session
  files the runs collected, for counting cells and baselines whose live figure is missing
  or only proxy-observed, into the study's signed backfill ledger (caisson/study/backfill.py);
  prints each change (old figure and source -> new). Exit 0 done (also when nothing
  changed); 1 the study does not verify or is not closed; 2 usage.
- ``caisson study judge DIR [--endpoint URL --model M] [--api anthropic|openai]
  [--credential VAR]``: an LLM judge re-reads every scored cell's stored answer through
  the proxy witness into DIR/judge/NNN/ (caisson/study/judge.py), an alarm, never a score.
  Exit 0 every verdict agrees and every call was served by the model asked for; 1 an
  alarm (a disagreement, a substitution, an unparseable or missing reply); 2 usage (no
  judge given, a study that does not verify closed, a missing key).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ledger.events import HostKey

__all__ = [
    "plan_lines", "register", "run_backfill", "run_judge", "run_plan", "run_report", "run_run", "run_status",
]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("study", help="plan, run and follow a study (a matrix of cells)")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    plan = verbs.add_parser("plan", help="print the matrix and the refusals; runs nothing")
    plan.add_argument("study", type=Path, metavar="STUDY", help="the study file (studies/<name>/study.toml)")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.add_argument("--seed", type=int, help="the order's seed (default: the study's, else 0 for display)")
    plan.set_defaults(func=run_plan)
    run = verbs.add_parser("run", help="run a study's preflight and cells into DIR")
    run.add_argument("study", type=Path, metavar="STUDY")
    run.add_argument("--out", type=Path, required=True, metavar="DIR", help="the study directory")
    run.add_argument("--repo", type=Path, required=True, metavar="PATH", help="the live repository under test")
    run.add_argument("--commit", metavar="REV", help="the commit under test (default HEAD, resolved once)")
    run.add_argument("--resume", action="store_true", help="continue the study in DIR after a crash or kill")
    run.add_argument("--infra-retries", type=int, default=1, metavar="N",
                     help="new attempts after an infra failure, per cell (default 1)")
    run.add_argument("--executor", choices=("local", "ray"), default="local",
                     help="where sessions run: here, one at a time (default), or on the Docker hosts of a Ray cluster")
    run.add_argument("--address", metavar="ADDR", help="ray: the cluster to join (default: start one here)")
    run.add_argument("--slots-per-host", type=int, metavar="K",
                     help="ray without --address: the sessions at once here (default: cores / the cell CPU quota)")
    run.add_argument("--enroll-key", type=Path, action="append", default=[], metavar="FILE",
                     help="ray: a host public key to trust for this study (repeat); default: the keys the hosts"
                     " report when the study starts, recorded and printed")
    run.set_defaults(func=run_run)
    status = verbs.add_parser("status", help="where a study stands, from its study ledger")
    status.add_argument("dir", type=Path, metavar="DIR")
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=run_status)
    report = verbs.add_parser("report", help="the study's report, recomputed from its sealed ledgers")
    report.add_argument("dir", type=Path, metavar="DIR")
    report.add_argument("--format", choices=("text", "markdown", "html", "json"), default="text")
    report.add_argument("--out", type=Path, metavar="FILE", help="write the report here (default: stdout)")
    report.add_argument("--allow-untrusted", action="store_true",
                        help="make winner claims despite a checklist FAIL, each labelled UNTRUSTED")
    report.add_argument("--key", metavar="PUBKEY", help="trust this public key (default: the operator key)")
    report.add_argument("--jobs", type=_jobs, metavar="N",
                        help="processes that read the cells' ledgers, and threads that compare the arms"
                             " (default: one per core; 1: this one only)")
    report.set_defaults(func=run_report)
    backfill = verbs.add_parser(
        "backfill", help="fill missing or proxy-only token figures from the agents' own session files",
        description="For every counting cell and baseline whose token figure is missing or only proxy-observed,"
                    " read the session files its run collected from the agent's config home (Claude Code,"
                    " Codex) and write the first-party figure to the study's signed backfill ledger"
                    " (DIR/backfill/NNN/). Never replaces a live first-party figure; running it again changes"
                    " nothing; earlier segments are kept. Exit 0 done, 1 the study does not verify or is not"
                    " closed, 2 usage.")
    backfill.add_argument("dir", type=Path, metavar="DIR", help="the study directory")
    backfill.set_defaults(func=run_backfill)
    judge = verbs.add_parser(
        "judge", help="an LLM judge re-reads every scored answer, through the proxy witness (alarms only)",
        description="Re-grade every scored cell's stored answer with an LLM judge, through the proxy witness,"
                    " into DIR/judge/NNN/ (its own ledger, signed with the operator key; caisson verify DIR checks"
                    " it). The judge replies PASS or FAIL on its first line; a disagreement with the deterministic"
                    " score is an alarm about the key or the matcher, never a change of score; a judge served by"
                    " another model than asked for is announced. Exit 0 no alarm, 1 alarms, 2 usage.")
    judge.add_argument("dir", type=Path, metavar="DIR", help="a closed study directory")
    judge.add_argument("--endpoint", metavar="URL",
                       help="the judge API's base URL (default: the study file's [judge] table)")
    judge.add_argument("--model", metavar="M", help="the judge model to ask for (with --endpoint)")
    judge.add_argument("--api", choices=("anthropic", "openai"),
                       help="Messages or Chat Completions (default: openai for api.openai.com, else anthropic)")
    judge.add_argument("--credential", metavar="VAR",
                       help="the variable holding the judge's key (default ANTHROPIC_API_KEY / OPENAI_API_KEY;"
                            " a loopback endpoint needs none)")
    judge.add_argument("--timeout", type=float, default=120.0, metavar="S", help="per judge call, seconds")
    judge.set_defaults(func=run_judge)


def plan_lines(plan, *, drawn: bool = False) -> list[str]:
    """The human lines of `caisson study plan` (also printed before a run); ``drawn``: the
    study draws its seed at run time (the order shown is one example)."""
    order = ("not shuffled" if plan.seed is None else
             "shuffled, seed drawn and recorded at run time" if drawn else f"shuffled, seed {plan.seed}")
    lines = [f"study {plan.study}: {len(plan.cells)} cells ({len(plan.questions)} questions x {plan.repetitions}"
             f" repetitions per combination), order {order}"]
    for c in plan.combos:
        lines.append(f"RUN     {c.arm} x {c.agent} x {c.model or '-'}: gating {c.gating},"
                     f" elicitation {c.elicitation.text() or '-'},"
                     f" {c.cells} cells")
        if c.adapter is not None:  # what the agent is handed: a grant that means something else shows here
            lines.append(f"          grant {_own_grant(c)}")
            lines.append(f"          deny  {', '.join(c.deny) or '-'} ({len(c.deny)} tools)")
    for r in plan.refusals:
        lines.append(f"REFUSE  {r.arm} x {r.agent} x {r.model or '-'}: gating {r.gating} ({r.kind}), {r.cells} cells"
                     f" not run: {r.reason}")
    return lines


def _own_grant(combo) -> str:
    """A combination's grant as its agent reads it: the entries naming its own tools (and
    anything else caisson does not know as another agent's), then how many name only
    another agent's tools (an arm shared by a study's agents)."""
    from caisson.agents import adapter, known_tools
    from caisson.grants import parse_grant

    own = set(adapter(combo.adapter).static_tools)
    others = known_tools() - own
    mine = [g for g in combo.grant if parse_grant(g).tool not in others]
    rest = len(combo.grant) - len(mine)
    return (", ".join(mine) or "-") + (f" (+{rest} names of other agents' tools)" if rest else "")


def run_plan(args: argparse.Namespace) -> int:
    import msgspec

    from caisson.study import load_study, plan_study

    study, scenario, _ = load_study(args.study)
    seed = args.seed if args.seed is not None else (study.order.seed if study.order.seed is not None else 0)
    plan = plan_study(study, scenario, seed=seed)
    if args.json:
        sys.stdout.write(msgspec.json.encode(plan).decode() + "\n")
    else:
        print("\n".join(plan_lines(plan, drawn=args.seed is None and study.order.seed is None)))
    return 0


def run_run(args: argparse.Namespace) -> int:
    import os

    from caisson.study import load_study, plan_study
    from caisson.study import make_executor

    study, scenario, _ = load_study(args.study)  # a bad file fails here, before DIR is touched
    if not args.resume:
        seed = study.order.seed if study.order.seed is not None else 0
        lines = plan_lines(plan_study(study, scenario, seed=seed))
        print("\n".join(line for line in lines[1:]))
    slots = args.slots_per_host
    if args.executor == "ray" and slots is None and args.address is None:  # what keeps cells from starving
        slots = max(1, int((os.cpu_count() or 1) // scenario.limits.cpus))
    # ray: connected, every host's service asked to join (reaping; started if the host has none),
    # before this process imports the runner, so that the two overlap
    executor = make_executor(args.executor, address=args.address, slots_per_host=slots, enroll_keys=args.enroll_key)
    from caisson.study import run_study
    from caisson.study import Progress

    progress = Progress(args.out)
    hosts_shown = args.executor == "local"

    def on_event() -> None:
        nonlocal hosts_shown
        if not hosts_shown:  # the first event is sealed: the hosts joined and the study enrolled its keys
            hosts_shown = True
            enrolled = {k.public_key for k in _host_keys(args.out)}
            for host, raw, reaped, _ in executor.joined:
                state = "enrolled" if raw.hex() in enrolled else "NOT ENROLLED: gets no session"
                print(f"HOST    {host}: key {raw.hex()}, {state}; {reaped} orphaned chambers reaped", flush=True)
        progress.update()

    try:
        result = run_study(args.study, args.out, repo=args.repo, commit=args.commit, resume=args.resume,
                           infra_retries=args.infra_retries, on_event=on_event, executor=executor)
    finally:
        progress.close()
    if result.state == "aborted":
        print(f"ABORTED {result.out}: {result.reason}")
        return 1
    print(f"ENDED {result.out}: {result.cells} cells, {result.counted} counted, {result.void} void;"
          f" verify it: caisson verify {result.out}")
    return 0


def _host_keys(study_dir: Path) -> list[HostKey]:
    """The host keys a study enrolled (``study.planned``); [] when none or unreadable."""
    from caisson.errors import CaissonError
    from caisson.study import read_study
    from ledger.events import StudyPlanned

    try:
        planned = next((r.event for r in read_study(study_dir) if isinstance(r.event, StudyPlanned)), None)
    except CaissonError:  # a display only
        return []
    return list(planned.host_keys) if planned else []


def run_status(args: argparse.Namespace) -> int:
    import os
    import time

    import msgspec

    from caisson.study import read_study, status_lines, study_status

    status = study_status(read_study(args.dir))
    if args.json:
        sys.stdout.write(msgspec.json.encode(status).decode() + "\n")
    else:
        print("\n".join(status_lines(status, now_ns=time.time_ns(), load=os.getloadavg())))
    return {"ended": 0, "aborted": 1}.get(status.state, 3)


def _jobs(text: str) -> int:
    """``--jobs``: a whole number of processes, at least 1."""
    try:
        jobs = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if jobs < 1:
        raise argparse.ArgumentTypeError(f"at least 1, got {jobs}")
    return jobs


def run_report(args: argparse.Namespace) -> int:
    from caisson.home import trusted_key
    from caisson.report import build_report, render_html, render_json, render_markdown, render_text
    from caisson.study import load_study_report

    verified, data = load_study_report(args.dir, trusted_key(args.key), jobs=args.jobs)
    if data is None:
        print(f"TAMPERED {args.dir}: the study does not verify; nothing is reported", file=sys.stderr)
        for problem in verified.problems:
            print(f"  {problem}", file=sys.stderr)
        return 1
    if verified.status == "unclosed":
        print(f"note: {args.dir} is not closed (running or crashed): cells without a sealed counting attempt"
              " are reported not_run", file=sys.stderr)
    report = build_report(data, allow_untrusted=args.allow_untrusted, jobs=args.jobs)
    if args.format == "json":
        out = render_json(report)
    else:
        text = {"text": lambda r: render_text(r, color=args.out is None and sys.stdout.isatty()),
                "markdown": render_markdown, "html": render_html}[args.format](report)
        out = (text if text.endswith("\n") else text + "\n").encode()
    if args.out is None:
        sys.stdout.buffer.write(out)
        sys.stdout.flush()
    else:
        args.out.write_bytes(out)
        print(f"wrote {args.out} ({args.format}, study head {data.study_head[:16]})")
    return 0


def run_backfill(args: argparse.Namespace) -> int:
    from caisson.errors import UsageError
    from caisson.home import ensure_operator_key
    from caisson.study import backfill_study
    from caisson.study import is_study_dir

    if not is_study_dir(args.dir):
        raise UsageError(f"{args.dir}: no study ledger (study/000/ledger); is it a study directory?")
    try:
        result = backfill_study(args.dir, ensure_operator_key())
    except UsageError as exc:
        print(f"NOT BACKFILLED {exc}", file=sys.stderr)
        return 1
    for c in result.changes:
        mark = "BACKFILL" if c.written else "        "
        print(f"{mark} {c.target} {c.name}: {c.old} -> {c.new}")
    if result.segment is None:
        print(f"nothing changed in {args.dir}")
    else:
        print(f"wrote {result.written} figure(s) to {result.segment}")
    return 0
def run_judge(args: argparse.Namespace) -> int:
    from caisson.home import operator_key
    from caisson.study import resolve_judge, run_judge as judge

    key = operator_key()
    spec = resolve_judge(args.dir, key.verify_key, endpoint=args.endpoint, model=args.model, api=args.api,
                         credential=args.credential)
    result = judge(args.dir, key, spec, timeout_s=args.timeout)
    print(f"JUDGED {result.judged} cells into {result.judge_dir}: {result.passed} PASS, {result.failed} FAIL,"
          f" {result.unparseable} unparseable, {result.errors} without a reply; {result.disagreements}"
          f" disagreements; served by {', '.join(result.served_models) or 'unknown'}"
          + (f" (SUBSTITUTED: asked for {spec.model})" if result.substituted else "")
          + f"; verify it: caisson verify {args.dir}")
    return 1 if result.alarms else 0
