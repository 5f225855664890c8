"""`caisson record`: one command in a sealed chamber, written to a sealed ledger.

The run is one trio nursery: the ledger writer task is started first (it signals
readiness), witnesses send `Submission`s into one bounded channel, and the recorder's
own lifecycle events (``run.started``, ``sandbox.built``, ``blob.stored``,
``run.ended``) go the same way. Whatever happens (command failure, timeout, Ctrl-C,
the engine dying), the ledger is closed with a final seal and the sandbox, config home
and container are removed.

Order of work: every check that can fail on bad input (scenario, repository, commit,
engine, image, containment) runs *before* the run directory exists, so a refused run
leaves nothing that looks like a run.
"""

from __future__ import annotations

import os
import platform
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path

import msgspec
import trio

from caisson import __version__
from caisson.chamber import ContainerSpec, Limits, open_engine
from caisson._paths import CONFIG_HOME, SANDBOX_PATH
from caisson.run._session import EXIT_INFRA, EXIT_TIMEOUT, RunOutcome, Session, Witness, run_session
from caisson.chamber.envpin import build_env
from caisson.errors import UsageError
from caisson.home import ensure_operator_key, fingerprint_key
from caisson.chamber.image import image_tag
from caisson.chamber.sandbox import Sandbox, build_sandbox
from caisson.scenario import Egress, Scenario, load_scenario, scenario_digest
from ledger import BlobStore, LedgerWriter
from ledger.events import RunStarted

__all__ = ["RecordOptions", "RunOutcome", "record", "SANDBOX_PATH", "EXIT_TIMEOUT", "EXIT_INFRA"]

_USERS = {"agent": (1000, 1000), "root": (0, 0)}

class RecordOptions(msgspec.Struct, kw_only=True):
    """What one `caisson record` was asked to do."""

    command: list[str]
    scenario: Path | None = None
    repo: Path | None = None
    commit: str | None = None  # default HEAD when repo is given
    out: Path | None = None  # run directory; default runs/<run id>
    timeout_s: float | None = None  # default: the scenario's limits.wall_seconds
    env: dict[str, str] = {}
    monitor: str | None = None
    image: str | None = None  # default: the chamber image of images/chamber
    question: str | None = None  # a scenario question id; its prompt goes to CAISSON_PROMPT
    agent: str | None = None  # a real agent adapter (caisson.agents); builds the command from the question
    arm: str | None = None  # a scenario arm: the agent's grant and deny list
    transcript: str | None = None  # read stdout with this adapter's transcript parser (selftest probes)
    egress: Egress | None = None  # replaces the scenario's egress policy (preflight: the scripted endpoint)
    weaken: list[str] = []  # controls to weaken on purpose (selftest only; see WEAKENABLE)
    syscall_witness: str = "strace"  # strace | ebpf | both: which syscall witness the CLI starts


WEAKENABLE = {
    "exclusions": "the sandbox keeps the exclusion set and skips the containment scan",
    "live_repo": "a copy of the live repository is mounted at its own absolute path",
    "env": "the caller's OLDPWD, PWD and a planted credential reach the chamber",
    "tracer_user": "the tracer runs as the agent's user, so the agent can signal it",
    "network": "the chamber network gets a route out and the host's side is not firewalled",
    "deny_list": "the agent is handed the arm's withheld tools as allowed, and no deny list",
    "ebpf_buffer": "the eBPF witness's perf buffer is one page per CPU, so a flood of syscalls overflows it",
}
"""Controls `caisson selftest` weakens one at a time to show the detector behind each fires.
A run with any weakened control records it in ``run.started`` and can never be clean."""


def new_run_id() -> str:
    """A sortable, unique run id: UTC time plus 6 random hex digits."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(3)


def _user_ids(user: str) -> tuple[int, int]:
    if user in _USERS:
        return _USERS[user]
    uid, _, gid = user.partition(":")
    if uid.isdigit() and (not gid or gid.isdigit()):
        return int(uid), int(gid or uid)
    raise UsageError(f"scenario user {user!r}: use 'agent', 'root' or a numeric uid[:gid]")


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        os.lchown(dirpath, uid, gid)
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), uid, gid)


def _host_facts(engine_info: dict) -> dict:
    uname = platform.uname()
    facts = {"kernel": uname.release, "machine": uname.machine, "cpus": os.cpu_count() or 0,
             "python": sys.version.split()[0]}
    facts.update({k: v for k, v in engine_info.items() if isinstance(v, (str, int, float, bool))})
    try:
        facts["mem_total_bytes"] = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        pass
    return facts


def _pick(lookup, wanted: str | None, flag: str, what: str, names: list[str], *, none: str = "none"):
    """``lookup(wanted)``, or None when ``wanted`` is None.

    Raises:
        UsageError: the scenario has no such item (the message lists ``names``).
    """
    if wanted is None:
        return None
    found = lookup(wanted)
    if found is None:
        raise UsageError(f"{flag} {wanted}: not in the scenario; its {what}: {', '.join(names) or none}")
    return found


def _agent_command(options: RecordOptions, scenario: Scenario, question):
    """The command, agent and arm facts, and transcript parser of a real-agent run.

    Raises:
        UsageError: unknown agent or arm, no question, or a command given as well.
    """
    from caisson.agents import adapter, deny_list

    spec = adapter(options.agent)
    if options.command:
        raise UsageError("--agent builds the command itself: give no command after --")
    if question is None:
        raise UsageError("--agent needs --question ID (the prompt it is given)")
    arm = _pick(scenario.arm, options.arm, "--arm", "arms", [a.name for a in scenario.arms])
    grant = list(arm.grant) if arm else []
    deny = deny_list(spec.static_tools, grant, arm.withhold) if arm else []
    if deny and spec.gating != "enforced":
        raise UsageError(f"refused: {spec.name} is {spec.gating} (its flags cannot withhold tools), so arm"
                         f" {arm.name} (which denies {', '.join(deny[:5])}...) cannot be run with it")
    handed_allowed, handed_deny = grant, deny
    if "deny_list" in options.weaken and arm is not None:  # selftest: a deliberately wrong deny list
        handed_allowed, handed_deny = grant + list(arm.withhold), []
    command = spec.command(question.prompt, allowed=handed_allowed, denied=handed_deny,
                           model=scenario.agent.model, max_turns=scenario.agent.max_turns)
    env = {**spec.env, **options.env}
    image = options.image or image_tag(spec.image)
    options = msgspec.structs.replace(options, command=command, env=env, image=image)
    agent_info = {"name": spec.name, "gating": spec.gating}
    arm_info = {"name": arm.name, "grant": grant, "withhold": list(arm.withhold), "deny": deny} if arm else {}
    return options, agent_info, arm_info, spec.transcript


def _prepare_run_dir(out: Path | None, run_id: str) -> Path:
    run_dir = Path(out) if out is not None else Path("runs") / run_id
    if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
        raise UsageError(f"--out {run_dir}: exists and is not empty; pick a new run directory")
    return run_dir


def record(options: RecordOptions, *, witnesses: list[Witness] | None = None) -> RunOutcome:
    """Record one run (blocking; runs its own trio event loop).

    Args:
        options: the command and its settings.
        witnesses: witness starters run once the container has started (none: only the
            chamber's lifecycle is recorded).

    Returns:
        The `RunOutcome`.

    Raises:
        UsageError: bad input, found before anything is written (scenario, repository,
            commit, run directory, image missing).
        ContainmentError: the sandbox holds a question window or a leak term.
        ChamberError: the Docker engine is not reachable.
    """
    return trio.run(_record, options, witnesses or [])


async def _record(options: RecordOptions, witnesses: list[Witness]) -> RunOutcome:
    if not options.command and options.agent is None:
        raise UsageError("no command given: caisson record [OPTIONS] -- CMD [ARG ...] (or --agent NAME)")
    if options.commit and options.repo is None:
        raise UsageError("--commit needs --repo")
    scenario = load_scenario(options.scenario) if options.scenario else Scenario(name="adhoc")
    if options.egress is not None:
        scenario = msgspec.structs.replace(scenario, egress=options.egress)
    ca = scenario.egress.upstream_ca
    if ca and options.scenario and not os.path.isabs(ca):
        ca = str((Path(options.scenario).parent / ca).resolve())
        scenario = msgspec.structs.replace(scenario, egress=msgspec.structs.replace(scenario.egress, upstream_ca=ca))
    unknown = sorted(set(options.weaken) - set(WEAKENABLE))
    if unknown:
        raise UsageError(f"cannot weaken {', '.join(unknown)}: known controls are {', '.join(sorted(WEAKENABLE))}")
    question = _pick(scenario.question, options.question, "--question", "questions",
                     [q.id for q in scenario.questions], none="none (pass --scenario)")
    agent_info, arm_info, transcript = {}, {}, None
    if options.transcript is not None:
        from caisson.agents import adapter

        transcript = adapter(options.transcript).transcript
    if options.agent is not None:
        options, agent_info, arm_info, transcript = _agent_command(options, scenario, question)
    uid, gid = _user_ids(scenario.user)
    egress = scenario.egress
    networked = egress.witnessed if egress.witnessed is not None else bool(egress.allow_hosts)
    if "network" in options.weaken:
        networked = True
    if not networked:  # no network at all: nothing to witness there
        witnesses = [w for w in witnesses if not getattr(w, "needs_network", False)]
    if any(w.name == "strace" for w in witnesses) and os.geteuid() != 0:
        raise UsageError("the strace witness needs root: its FIFO and tracer must not belong to the agent's uid"
                         " (run caisson record as root)")
    if any(w.name == "strace" for w in witnesses) and not scenario.user.isidentifier():
        raise UsageError(f"scenario user {scenario.user!r}: the strace witness needs a user name of the image"
                         " (agent or root)")
    timeout_s = options.timeout_s if options.timeout_s is not None else scenario.limits.wall_seconds
    run_id = new_run_id()
    run_dir = _prepare_run_dir(options.out, run_id)
    tag = options.image or image_tag("chamber")
    async with open_engine() as engine:
        image_id = await engine.image_id(tag)
        if image_id is None:
            raise UsageError(f"chamber image {tag} is missing: build it with `caisson image build`")
        engine_info = await engine.info()
        scratch = Path(tempfile.mkdtemp(prefix=f"caisson-{run_id}-"))
        try:
            sandbox_dir, config_home = scratch / "sandbox", scratch / "home"
            sandbox: Sandbox | None = None
            if options.repo is not None:
                rules = scenario
                if "exclusions" in options.weaken:
                    rules = msgspec.structs.replace(scenario, exclusions=[], questions=[], leak_terms=[])
                sandbox = await trio.to_thread.run_sync(
                    build_sandbox, options.repo, options.commit or "HEAD", rules, sandbox_dir
                )
            else:
                sandbox_dir.mkdir()
            config_home.mkdir()
            for sub in (".config", ".cache", ".claude", ".codex"):  # what the pinned variables name
                (config_home / sub).mkdir()
            _chown_tree(sandbox_dir, uid, gid)
            _chown_tree(config_home, uid, gid)
            key = ensure_operator_key()
            run_dir.mkdir(parents=True, exist_ok=True)
            writer = LedgerWriter(run_dir / "ledger", run_id=run_id, key=key, blobs=BlobStore(run_dir / "blobs"),
                                  flush_records=1024, flush_interval_s=0.5)
            overrides = dict(options.env)
            if question is not None:
                overrides.update(CAISSON_QUESTION_ID=question.id, CAISSON_PROMPT=question.prompt)
            chamber_env = build_env(caller=os.environ, scenario=scenario, overrides=overrides,
                                    cwd=SANDBOX_PATH, fingerprint_key=fingerprint_key(key))
            binds = [(str(sandbox_dir), SANDBOX_PATH, False), (str(config_home), CONFIG_HOME, False)]
            if "env" in options.weaken:
                leaked = {"OLDPWD": os.getcwd(), "PWD": os.getcwd(), "PLANTED_API_KEY": "sk-planted-by-selftest"}
                chamber_env = msgspec.structs.replace(
                    chamber_env, env={**chamber_env.env, **leaked},
                    recorded={**chamber_env.recorded, **leaked, "PLANTED_API_KEY": "fp:planted"})
            if "live_repo" in options.weaken and options.repo is not None:
                copy = scratch / "live-copy"
                await trio.to_thread.run_sync(lambda: shutil.copytree(options.repo, copy, symlinks=True))
                _chown_tree(copy, uid, gid)
                binds.append((str(copy), str(Path(options.repo).resolve()), False))
            limits = scenario.limits
            manifest = RunStarted(
                run_id=run_id,
                caisson_version=__version__,
                command=list(options.command),
                repo=str(Path(options.repo).resolve()) if options.repo else None,
                commit=sandbox.commit if sandbox else None,
                scenario=str(options.scenario) if options.scenario else None,
                scenario_digest=scenario_digest(options.scenario) if options.scenario else None,
                env=chamber_env.recorded,
                limits={"wall_seconds": timeout_s, "pids": limits.pids, "memory_bytes": limits.memory_bytes,
                        "cpus": limits.cpus, "network": "witnessed" if networked else "none",
                        "user": scenario.user},
                image_id=image_id,
                host=_host_facts(engine_info),
                question_id=question.id if question else None,
                caller={"cwd": os.getcwd(), "home": os.path.expanduser("~")},
                witnesses=[w.name for w in witnesses],
                weakened=sorted(options.weaken),
                agent=agent_info,
                arm=arm_info,
            )
            spec = ContainerSpec(
                image=tag,
                cmd=list(options.command),
                env=chamber_env.env,
                workdir=SANDBOX_PATH,
                user=f"{uid}:{gid}",
                binds=binds,
                labels={"caisson.run_dir": str(run_dir.resolve())},
                limits=Limits(pids_limit=limits.pids, memory_bytes=limits.memory_bytes,
                              nano_cpus=int(limits.cpus * 1e9)),
                network_mode="none",  # the session puts it on its witnessed network
                deadline_s=timeout_s,
                run_id=run_id,
            )
            scenario_bytes = Path(options.scenario).read_bytes() if options.scenario else None
            session = Session(engine=engine, writer=writer, spec=spec, manifest=manifest, sandbox=sandbox,
                              sandbox_dir=sandbox_dir, scenario=scenario, scenario_bytes=scenario_bytes,
                              run_dir=run_dir, scratch=scratch, witnesses=witnesses, monitor=options.monitor,
                              fingerprint_key=fingerprint_key(key), network="network" in options.weaken,
                              transcript=transcript)
            return await run_session(session)
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(shutil.rmtree, scratch, True)


