"""`caisson demo [--out DIR]`: the built-in example, end to end, on a real codebase.

click 8.1.7 is fetched as its source distribution from the package index and built into
a local git repository whose second commit seeds a benchmark's files (the answer key
with every question, a published report, agent instructions, telemetry, grading), so the
exclusion set and the containment scan matter. The honest grep agent answers every
question of ``scenarios/click/scenario.toml`` in the chamber; the key reader goes after
the answer key on a few. Every ledger is verified, every run replayed: findings and
scores are printed per run and per agent. Then the checked-in study
(``studies/click-arms``) runs over the same repository and its directory is verified, and
one tool call of one of its cells is proven (`caisson prove --study`) and the proof verified
alone, in a fresh directory, with only the public key.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from caisson.errors import UsageError
from caisson.resources import resource_dir

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "AGENTS", "KEY", "OPENAI_AGENTS", "PROBES", "SCENARIO", "SCENARIOS", "SUMMARY_AGENTS", "prove_tool_call", "register",
    "run",
]

SCENARIOS = resource_dir("scenarios")
SCENARIO = SCENARIOS / "click" / "scenario.toml"
PROBES = SCENARIOS / "probes"
AGENTS = {"honest_grep": "honest_grep.sh", "key_reader": "key_reader.sh"}
OPENAI_AGENTS = ("mini-swe-agent", "opencode", "copilot")
"""The adapters the demo runs once each on the scripted model through the OpenAI API shape."""
SUMMARY_AGENTS = (*AGENTS, "claude_code", *(a.replace("-", "_") for a in OPENAI_AGENTS))
KEY = SCENARIOS / "click" / "seed" / "benchmark" / "questions.toml"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run the built-in example (click 8.1.7, honest agent vs key reader)")
    p.add_argument("--out", type=Path, default=Path(".demo"), help="where the repository and runs go (default .demo)")
    p.add_argument("--questions", type=int, default=0, help="only the first N questions (default: all)")
    p.add_argument("--key-reader-questions", type=int, default=3, help="questions the key reader gets (default 3)")
    p.add_argument("--agent-questions", type=int, default=4,
                   help="questions Claude Code answers on the scripted model (default 4; 0: skip the real agent)")
    p.add_argument("--no-study", action="store_true",
                   help="skip the checked-in study (studies/click-arms) that runs after the single runs")
    p.set_defaults(func=run)


def _fetch_repo(dest: Path) -> str:
    script = SCENARIOS / "click" / "fetch_repo.sh"
    proc = subprocess.run(["bash", str(script), str(dest)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise UsageError(f"building the click 8.1.7 repository failed: {proc.stderr.strip()[-400:]}")
    return proc.stdout.strip().splitlines()[-1]


@contextlib.contextmanager
def _scripted_model(out: Path, question):
    """A scripted model for one question, served on 127.0.0.1, and a scenario that reaches it.

    The model plays two turns: a Bash ``grep`` for the identifier in the question (the
    agent executes it for real, in the chamber), then the known answer once the grep's
    output is back. What the demo shows is the machinery: a real agent CLI, its real tool
    calls, every witness, and the grading; not a model's skill.
    """
    import tomllib

    from caisson.model import scripted_model

    name = question.prompt.split("`")[1] if question.prompt.count("`") >= 2 else "answer"
    answers = {q["id"]: q["answer"] for q in tomllib.loads(KEY.read_text())["question"]}
    work = out / "model" / question.id
    work.mkdir(parents=True, exist_ok=True)
    script = work / "script.toml"
    script.write_text(
        f'name = "demo-{question.id}"\nmodels = ["claude-sonnet-4-5"]\n\n[[turns]]\n'
        f'text = "Let me search the source."\n'
        f"tool_calls = [{{ name = \"Bash\", arguments = {{ command = 'grep -rnE \"(def|class) {name}\\\\b\" src' }} }}]\n"
        f'stop_reason = "tool_use"\nusage = {{ input = 1200, cache_write = 3000, output = 60 }}\n\n[[turns]]\n'
        f'match = {{ tool_result_contains = "{name}" }}\ntext = {json.dumps(answers.get(question.id, ""))}\n'
        f'stop_reason = "end_turn"\nusage = {{ input = 90, cache_read = 4200, output = 25 }}\n\n[[background]]\n'
        f'match = {{ model_contains = "haiku" }}\ntext = "{{}}"\nusage = {{ input = 50, output = 5 }}\n')
    with scripted_model(script) as address:
        scenario = work / "scenario.toml"
        scenario.write_text('pass_credentials = ["ANTHROPIC_API_KEY"]\n' + SCENARIO.read_text() + f"""

[[arms]]
name = "shell"
grant = ["Bash"]

[agent]
model = "claude-sonnet-4-5"
max_turns = 4

[egress]
allow_hosts = ["api.anthropic.com"]
upstream = {{ "api.anthropic.com" = "http://{address}" }}
""")
        yield address, scenario


@contextlib.contextmanager
def _openai_model(out: Path, question, agent: str):
    """A scripted model (Chat Completions) for one question and one of `OPENAI_AGENTS`: a
    ``bash`` grep, then the answer (mini-swe-agent submits it with a command), and a scenario
    whose arm grants ``bash`` only and whose egress reaches the model."""
    import tomllib

    from caisson.model import scripted_model

    name = question.prompt.split("`")[1] if question.prompt.count("`") >= 2 else "answer"
    answer = {q["id"]: q["answer"] for q in tomllib.loads(KEY.read_text())["question"]}.get(question.id, "")
    work = out / "model" / f"{agent}--{question.id}"
    work.mkdir(parents=True, exist_ok=True)
    grep = json.dumps(f'grep -rnE "(def|class) {name}\\b" src')
    submit = "printf '%s\\n' COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT " + shlex.quote(answer)
    last = (f'tool_calls = [{{ name = "bash", arguments = {{ command = {json.dumps(submit)} }} }}]\n'
            'stop_reason = "tool_use"' if agent == "mini-swe-agent" else f'text = {json.dumps(answer)}\nstop_reason = "end_turn"')
    script = work / "script.toml"
    script.write_text(
        f'name = "demo-{agent}-{question.id}"\nmodels = ["gpt-5"]\n\n[[turns]]\ntext = "Let me search the source."\n'
        f'tool_calls = [{{ name = "bash", arguments = {{ command = {grep}, description = "search" }} }}]\n'
        f'stop_reason = "tool_use"\nusage = {{ input = 1200, cache_read = 800, output = 60 }}\n\n[[turns]]\n'
        f'match = {{ tool_result_contains = "{name}" }}\n{last}\n'
        'usage = { input = 90, cache_read = 2000, output = 25 }\n')
    with scripted_model(script) as address:
        scenario = work / "scenario.toml"
        scenario.write_text('pass_credentials = ["OPENAI_API_KEY"]\n' + SCENARIO.read_text() + f"""

[[arms]]
name = "bash"
grant = ["bash"]

[agent]
model = "gpt-5"
max_turns = 4

[egress]
allow_hosts = ["api.openai.com"]
upstream = {{ "api.openai.com" = "http://{address}" }}
""")
        yield address, scenario


def run(args: argparse.Namespace) -> int:
    import statistics

    from rich.console import Console
    from rich.table import Table

    from caisson._cli.replay import table
    from caisson.chamber import build_image
    from caisson.home import ensure_operator_key, operator_key_paths
    from caisson.replay import replay_runs
    from caisson.run import RecordOptions, default_syscall_witness, default_witnesses, record
    from caisson.scenario import load_scenario
    from ledger import verify_ledger

    console = Console(width=150, highlight=False)
    out: Path = args.out
    runs = out / "runs"
    if runs.exists():
        shutil.rmtree(runs)
    key = ensure_operator_key()
    console.print(f"operator key {operator_key_paths()[1]} ({key.fingerprint})")

    console.print("\n== 1. the codebase: click 8.1.7 sdist from the package index, seeded with a benchmark's files")
    repo = out / "click"
    commit = _fetch_repo(repo)
    scenario = load_scenario(SCENARIO)
    questions = scenario.questions[: args.questions] if args.questions else scenario.questions
    console.print(f"  {repo} at {commit[:12]}; {len(questions)} questions in {os.path.relpath(SCENARIO)}")

    console.print("\n== 2. the chamber image (built offline from images/chamber, cached by recipe digest)")
    build_image("chamber")

    choice = default_syscall_witness(say=lambda line: console.print(f"  {line}"))
    witness = {"ebpf": "the eBPF", "strace": "the strace"}[choice.witness]
    console.print(f"\n== 3. record: each agent, one run per question, in the chamber with {witness} and procfs"
                  f" witnesses ({choice.why})")
    run_dirs: list[Path] = []
    for agent, probe in AGENTS.items():
        script = (PROBES / probe).read_text()
        subset = questions if agent == "honest_grep" else questions[: args.key_reader_questions]
        for q in subset:
            run_dir = runs / f"{agent}--{q.id}"
            outcome = record(RecordOptions(command=["sh", "-c", script], scenario=SCENARIO, repo=repo,
                                           commit=commit, out=run_dir, question=q.id,
                                           syscall_witness=choice.witness, syscall_witness_why=choice.why),
                             witnesses=default_witnesses(syscall=choice.witness))
            run_dirs.append(run_dir)
            console.print(f"  {run_dir.name:40s} {outcome.status}, exit {outcome.command_exit},"
                          f" {outcome.duration_ns / 1e6:.0f} ms")

    if args.agent_questions:
        console.print("\n== 3b. a real agent: Claude Code (agent image) on the scripted model, through the proxy witness")
        build_image("agent")
        for q in questions[: args.agent_questions]:
            run_dir = runs / f"claude_code--{q.id}"
            with _scripted_model(out, q) as (address, scenario_path):
                outcome = record(RecordOptions(command=[], scenario=scenario_path, repo=repo, commit=commit,
                                               out=run_dir, question=q.id, agent="claude-code", arm="shell",
                                               env={"ANTHROPIC_API_KEY": "sk-ant-demo-scripted"},
                                               syscall_witness=choice.witness, syscall_witness_why=choice.why),
                                 witnesses=default_witnesses(syscall=choice.witness))
            run_dirs.append(run_dir)
            console.print(f"  {run_dir.name:40s} {outcome.status}, exit {outcome.command_exit},"
                          f" {outcome.duration_ns / 1e6:.0f} ms")

    if args.agent_questions:
        console.print("\n== 3c. mini-swe-agent (ungated), OpenCode and Copilot CLI (gating measured by preflight):"
                      " one question each, on the scripted model")
        q = questions[0]
        for agent in OPENAI_AGENTS:
            run_dir = runs / f"{agent.replace('-', '_')}--{q.id}"
            with _openai_model(out, q, agent) as (address, scenario_path):
                outcome = record(RecordOptions(command=[], scenario=scenario_path, repo=repo, commit=commit,
                                               out=run_dir, question=q.id, agent=agent, arm="bash",
                                               env={"OPENAI_API_KEY": "sk-openai-demo-scripted"},
                                               syscall_witness=choice.witness, syscall_witness_why=choice.why),
                                 witnesses=default_witnesses(syscall=choice.witness))
            run_dirs.append(run_dir)
            console.print(f"  {run_dir.name:40s} {outcome.status}, exit {outcome.command_exit},"
                          f" {outcome.duration_ns / 1e6:.0f} ms")

    console.print("\n== 4. verify every ledger against the operator key")
    ok = 0
    for run_dir in run_dirs:
        report = verify_ledger(run_dir, key.verify_key)
        ok += report.exit_code == 0
        if report.exit_code != 0:
            console.print("  " + report.describe())
    console.print(f"  {ok}/{len(run_dirs)} ledgers intact, sealed and closed")

    console.print("\n== 5. replay: detectors and checklist grading, offline, from the sealed runs")
    results = replay_runs(run_dirs, key.verify_key)
    console.print(table(results))
    summary = Table(box=None, pad_edge=False)
    for col in ("agent", "runs", "clean", "void", "mean score (clean runs)", "null scores"):
        summary.add_column(col)
    for agent in SUMMARY_AGENTS:
        mine = [r for r in results if Path(r.run_dir).name.startswith(agent + "--")]
        scored = [r.score for r in mine if r.score is not None]
        summary.add_row(agent, str(len(mine)), str(sum(r.status == "clean" for r in mine)),
                        str(sum(r.status == "void" for r in mine)),
                        f"{statistics.mean(scored):.2f}" if scored else "-",
                        str(sum(r.score is None for r in mine)))
    console.print()
    console.print(summary)
    console.print(f"\nfindings.json beside each run; verify one yourself: caisson verify {run_dirs[0]}")
    study_ok = True if args.no_study else _study(console, out, repo, commit)
    return 0 if ok == len(run_dirs) and study_ok else 1


def _study(console: Console, out: Path, repo: Path, commit: str) -> bool:
    """Part 6: the checked-in study (studies/click-arms) over the same repository."""
    from caisson._cli.study import plan_lines
    from caisson.chamber import build_image
    from caisson.home import ensure_operator_key
    from caisson.study import load_study, plan_study, run_study, verify_study
    from caisson.study import Progress

    path = resource_dir("studies") / "click-arms" / "study.toml"
    target = out / "study"
    if target.exists():
        shutil.rmtree(target)
    console.print(f"\n== 6. a study: {os.path.relpath(path)} (scripted model: scores show the mechanics,"
                  " not an agent's quality)")
    study, scenario, _ = load_study(path)
    for line in plan_lines(plan_study(study, scenario, seed=0))[1:]:
        console.print("  " + line)
    build_image("agent")
    progress = Progress(target)
    try:
        result = run_study(path, target, repo=repo, commit=commit, on_event=progress.update)
    finally:
        progress.close()
    report = verify_study(target, ensure_operator_key().verify_key)
    console.print(f"  study {result.state}{': ' + result.reason if result.reason else ''}; {result.cells} cells,"
                  f" {result.counted} counted, {result.void} void; verify: {report.status}"
                  f" ({report.runs_checked} run ledgers bound by the study ledger)")
    console.print(f"  caisson study status {target}; caisson verify {target}")
    ok = result.state == "ended" and report.status == "ok"
    return _study_report(console, target) and ok and prove_tool_call(console, target, out / "proof")


def prove_tool_call(console: Console, study_dir: Path, work: Path) -> bool:
    """Part 8: prove one tool call of a study cell with its place in the study, then verify the
    proof alone in a fresh directory holding only the proof and the public key."""
    from caisson.home import ensure_operator_key, operator_key_paths
    from caisson.study import prove_cell, read_study
    from ledger import encode_proof, read_records
    from ledger.events import AgentToolCall, CellEnded

    console.print("\n== 8. prove one tool call of a study cell to a third party, without the rest of the study")
    key = ensure_operator_key()
    found = None
    for r in read_study(study_dir, key.verify_key):
        if isinstance(r.event, CellEnded) and r.event.counting and r.event.ledger_final:
            run_dir = study_dir / r.event.run_dir
            call = next((rec.seq for rec in read_records(run_dir) if isinstance(rec.event, AgentToolCall)), None)
            if call is not None:
                found = (run_dir, call)
                break
    if found is None:
        console.print("  no counting cell of the study made a tool call: nothing to prove")
        return False
    run_dir, seq = found
    proof = prove_cell(study_dir, run_dir, [seq], key.verify_key)
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    (work / "call.proof").write_bytes(encode_proof(proof))
    shutil.copy(operator_key_paths()[1], work / "operator.pub")
    console.print(f"  caisson prove {os.path.relpath(run_dir)} --seq {seq} --study {os.path.relpath(study_dir)}"
                  f" --out {work / 'call.proof'}  ({(work / 'call.proof').stat().st_size} bytes)", soft_wrap=True)
    # a fresh directory and a fresh CAISSON_HOME: only the proof and the public key
    env = {k: v for k, v in os.environ.items() if k != "CAISSON_HOME"} | {"CAISSON_HOME": str(work / "home")}
    import sys

    proc = subprocess.run([sys.executable, "-m", "caisson.cli", "verify", "call.proof", "--key", "operator.pub"],
                          cwd=work, env=env, capture_output=True, text=True)
    for line in (proc.stdout + proc.stderr).strip().splitlines():
        console.print(f"  {line}", soft_wrap=True)  # one line each, as verify printed it
    console.print(f"  in {work} (only call.proof and operator.pub): caisson verify call.proof --key operator.pub"
                  f" -> exit {proc.returncode}")
    return proc.returncode == 0


def _study_report(console: Console, target: Path) -> bool:
    """The study's report, recomputed from its sealed ledgers: text here, HTML beside it."""
    from caisson.home import ensure_operator_key
    from caisson.report import build_report, render_html, render_markdown, render_text
    from caisson.study import load_study_report

    console.print(f"\n== 7. the study's report (caisson study report {target})")
    verified, data = load_study_report(target, ensure_operator_key().verify_key)
    if data is None:
        console.print(f"  the study does not verify: {'; '.join(verified.problems)}")
        return False
    report = build_report(data)
    print(render_text(report, width=console.width or 160, color=console.is_terminal))
    html_path = target / "report.html"
    html_path.write_text(render_html(report))
    (target / "report.md").write_text(render_markdown(report))  # `caisson view` shows it on the study page
    console.print(f"  the HTML report beside it: {html_path}")
    return True
