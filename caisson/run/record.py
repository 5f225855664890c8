"""`caisson record`: one command in a sealed chamber, written to a sealed ledger.

The run is one trio nursery: the ledger writer task is started first (it signals
readiness), witnesses send `Submission`s into one bounded channel, and the recorder's
own lifecycle events (``run.started``, ``sandbox.built``, ``blob.stored``,
``run.ended``) go the same way. Whatever happens (command failure, timeout, Ctrl-C,
the engine dying), the ledger is closed with a final seal and the sandbox, config home
and container are removed.

A chamber never outlives its recorder: it kills itself `CHAMBER_GRACE_S` after the wall
deadline even with no recorder alive (`ContainerSpec.self_deadline_s`), and every
container, network and scratch directory carries the recorder's identity, so the next
`caisson record` (or `caisson gc`) reaps those whose recorder is gone; each reaping is a
line on stderr and a ``chamber.reaped`` event in the new run's ledger.

Order of work: the plan first (`caisson.run.plan.plan_run`, pure: every option is
checked there), then every check that needs I/O and can fail on bad input (scenario
file, strace's root, run directory, engine, image, repository, commit, containment),
all *before* the run directory exists, so a refused run leaves nothing that looks like
a run. This module keeps only the I/O: it carries the plan out.
"""

from __future__ import annotations

import os
import platform
import secrets
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import msgspec
import trio

from caisson import __version__
from caisson.chamber import RUN_LABEL, ContainerLimits, ContainerSpec, open_engine, seccomp_profile
from caisson._paths import CONFIG_HOME, SANDBOX_PATH
from caisson._signals import run_terminable
from caisson.run._session import EXIT_INFRA, EXIT_TIMEOUT, PreparedRun, RunOutcome, Witness, run_session
from caisson.chamber import ChamberEnv, build_env
from caisson.errors import UsageError
from caisson.home import ensure_operator_key, fingerprint_key
from caisson.chamber import image_tag
from caisson.chamber import reap, recorder_identity, recorder_labels
from caisson.chamber import mount_chamber_fs, open_scratch
from caisson.chamber import Sandbox, build_sandbox
from caisson.run.plan import WEAKENABLE, RecordOptions, RunPlan, plan_run
from caisson.scenario import Scenario, load_scenario, scenario_digest
from collectors.strace import DENIED_SYSCALLS
from ledger import BlobStore, LedgerWriter, redact_argv
from ledger.events import Caller, HostFacts, RunLimits, RunStarted, SyscallWitnessChoice

__all__ = ["RecordOptions", "RunOutcome", "record", "SANDBOX_PATH", "EXIT_TIMEOUT", "EXIT_INFRA", "WEAKENABLE",
           "recorded_command", "syscall_witness_facts"]

CHAMBER_GRACE_S = 15.0
"""Seconds past the wall deadline after which the chamber kills itself, recorder or not
(the recorder kills it at the deadline; this is for a recorder that died)."""


def new_run_id() -> str:
    """A sortable, unique run id: UTC time plus 6 random hex digits."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(3)


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        os.lchown(dirpath, uid, gid)
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), uid, gid)


def _host_facts(engine_info: dict) -> HostFacts:
    """The recorder's machine and the engine's facts (`caisson.chamber.Engine.info`), each
    checked against the Docker Engine API's type `HostFacts` gives it: a fact of another
    type (an engine that answers otherwise) is left out, so the run still starts and its
    ledger never holds a value it cannot read."""
    uname = platform.uname()
    facts: dict[str, object] = {"kernel": uname.release, "machine": uname.machine, "cpus": os.cpu_count() or 0,
                                "python": sys.version.split()[0]}
    facts.update(engine_info)
    try:
        facts["mem_total_bytes"] = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        pass
    kept = {}
    for field in msgspec.structs.fields(HostFacts):
        if field.name in facts:
            try:
                kept[field.name] = msgspec.convert(facts[field.name], field.type)
            except msgspec.ValidationError:
                pass
    return HostFacts(**kept)


def recorded_command(command: Sequence[str], key: bytes, patterns: Sequence[str] = ()) -> list[str]:
    """The command as ``run.started.command`` records it: `ledger.redact_argv` with the
    key and credential patterns the syscall witnesses redact every exec's argv with (so
    the command and its first ``process.exec`` carry the same fingerprints), as many
    elements as ``command``.

    Args:
        command: the argv run in the chamber.
        key: the run's fingerprint key (`caisson.home.fingerprint_key`).
        patterns: the scenario's ``credential_patterns``.
    """
    return redact_argv(command, key=key, patterns=tuple(patterns))


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
        UsageError: bad input, found before anything is written: an option
            (`caisson.run.plan.plan_run`), a refused arm x agent ("refused: ..."), the
            scenario file, strace without root, the run directory, the image missing,
            the scratch root (`caisson.chamber.scratch`), the repository or commit.
        ContainmentError: the sandbox holds a question window or a leak term.
        ChamberError: the Docker engine is not reachable.
        KeyboardInterrupt: Ctrl-C; `caisson._signals.Terminated` for SIGTERM. Either
            way the chamber is removed and the ledger ends with an interrupted run.ended.
    """
    return run_terminable(_record, options, witnesses or [])


async def _record(options: RecordOptions, witnesses: list[Witness]) -> RunOutcome:
    scenario = load_scenario(options.scenario) if options.scenario else None
    plan = plan_run(options, scenario, witnesses=witnesses)
    if plan.refusal is not None:
        raise UsageError(f"refused: {plan.refusal.reason}")
    if "strace" in plan.witnesses and os.geteuid() != 0:
        raise UsageError("the strace witness needs root: its FIFO and tracer must not belong to the agent's uid"
                         " (run caisson record as root)")
    scenario = _with_upstream_ca(plan.scenario, options.scenario)
    witnesses = [w for w in witnesses if w.name in plan.witnesses]
    transcript = _adapter_transcript(plan.transcript)
    run_id = new_run_id()
    run_dir = _prepare_run_dir(options.out, run_id)
    tag = plan.image or image_tag(plan.image_recipe)
    async with open_engine() as engine:
        image_id = await engine.image_id(tag)
        if image_id is None:
            raise UsageError(f"chamber image {tag} is missing: build it with `caisson image build`")
        engine_info = await engine.info()
        reaped = await reap(engine)
        for r in reaped:
            print(f"caisson record: {r.line()}", file=sys.stderr)
        identity = recorder_identity()
        deadline_ns = time.time_ns() + int((plan.timeout_s + CHAMBER_GRACE_S) * 1e9)
        owner = {**recorder_labels(identity, deadline_ns), RUN_LABEL: run_id}
        try:
            held = open_scratch(owner)  # made with its owner in place, and held while this process lives
        except OSError as exc:
            raise UsageError(f"cannot make the run's scratch directory: {exc}") from exc
        try:
            try:
                scratch, own_fs = mount_chamber_fs(held.path, scenario.limits.disk_bytes)
            except OSError as exc:
                raise UsageError(f"cannot make the chamber's filesystem: {exc}") from exc
            if not own_fs:  # said, and recorded in run.started.limits.tree_fs
                print("caisson record: the chamber's tree is a plain directory on the host's disk (not root, or"
                      " the engine is in another mount namespace): limits.disk_bytes bounds only /tmp",
                      file=sys.stderr)
            sandbox, binds = await _build_trees(plan, options, scenario, scratch)
            key = ensure_operator_key()
            run_dir.mkdir(parents=True, exist_ok=True)
            writer = LedgerWriter(run_dir / "ledger", run_id=run_id, key=key, blobs=BlobStore(run_dir / "blobs"),
                                  flush_records=1024, flush_interval_s=0.5)
            fp_key = fingerprint_key(key)
            chamber_env = _chamber_env(plan, scenario, fp_key)
            limits = scenario.limits
            # The witness fails the denied calls visibly; with no tracer the kernel does.
            seccomp = None if plan.weakened.seccomp else seccomp_profile(
                DENIED_SYSCALLS, action="trace" if "strace" in plan.witnesses else "errno")
            manifest = RunStarted(
                run_id=run_id,
                caisson_version=__version__,
                command=recorded_command(plan.command, fp_key, scenario.credential_patterns),
                repo=str(Path(options.repo).resolve()) if options.repo else None,
                commit=sandbox.commit if sandbox else None,
                scenario=str(options.scenario) if options.scenario else None,
                scenario_digest=scenario_digest(options.scenario) if options.scenario else None,
                env=chamber_env.recorded,
                limits=RunLimits(wall_seconds=plan.timeout_s, pids=limits.pids, memory_bytes=limits.memory_bytes,
                                 cpus=limits.cpus, disk_bytes=limits.disk_bytes,
                                 tree_fs="tmpfs" if own_fs else "host", network=plan.network, user=plan.user),
                image_id=image_id,
                host=_host_facts(engine_info),
                question_id=plan.question.id if plan.question else None,
                caller=Caller(cwd=os.getcwd(), home=os.path.expanduser("~")),
                witnesses=[w.name for w in witnesses],
                weakened=plan.weakened.names,
                agent=plan.agent,
                arm=plan.arm,
                seccomp=seccomp.manifest() if seccomp else None,
                syscall_witness=syscall_witness_facts([w.name for w in witnesses], options.syscall_witness_why,
                                                      _witness_facts(witnesses)),
            )
            spec = ContainerSpec(
                image=tag,
                cmd=list(plan.command),
                env=chamber_env.env,
                workdir=SANDBOX_PATH,
                user=f"{plan.uid}:{plan.gid}",
                binds=binds,
                labels={"caisson.run_dir": str(run_dir.resolve()), **owner},
                limits=ContainerLimits(pids_limit=limits.pids, memory_bytes=limits.memory_bytes,
                                       nano_cpus=int(limits.cpus * 1e9)),
                # the image's own filesystem is read-only: the chamber writes its tree, config home,
                # /tmp, /var/tmp and /run/lock (the image's other world-writable directories), each
                # a tmpfs of limits.disk_bytes, never the container's layer on the host's disk
                read_only_root=True,
                tmpfs={path: f"rw,exec,nosuid,nodev,mode=1777,size={limits.disk_bytes}"
                       for path in ("/tmp", "/var/tmp", "/run/lock")},
                network_mode="none",  # the session puts it on its witnessed network
                etc_dir=str(scratch / "etc"),  # its own resolv.conf (no nameserver without a network), hosts, hostname
                deadline_s=plan.timeout_s,
                self_deadline_s=plan.timeout_s + CHAMBER_GRACE_S,
                run_id=run_id,
                seccomp=seccomp.json if seccomp else None,
            )
            scenario_bytes = Path(options.scenario).read_bytes() if options.scenario else None
            session = PreparedRun(engine=engine, writer=writer, spec=spec, manifest=manifest, sandbox=sandbox,
                                  sandbox_dir=scratch / "sandbox", scenario=scenario, scenario_bytes=scenario_bytes,
                                  run_dir=run_dir, scratch=scratch, witnesses=witnesses, monitor=plan.monitor,
                                  fingerprint_key=fp_key, network=plan.weakened.network,
                                  transcript=transcript, labels=owner, reaped=reaped, config_home=scratch / "home")
            return await run_session(session)
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(held.remove)


async def _build_trees(plan: RunPlan, options: RecordOptions, scenario: Scenario,
                       scratch: Path) -> tuple[Sandbox | None, list[tuple[str, str, bool]]]:
    """The sandbox (``scratch/sandbox``, from the repository, or empty), the agent's fresh
    config home (``scratch/home``), both owned by the agent's user, and the container's
    binds; weakened ``live_repo``: a copy of the live repository at its own path too.

    Raises:
        SandboxError: the repository or commit is wrong.
        ContainmentError: the containment scan hit.
    """
    sandbox_dir, config_home = scratch / "sandbox", scratch / "home"
    sandbox: Sandbox | None = None
    if options.repo is not None:
        rules = scenario
        if plan.weakened.exclusions:
            rules = msgspec.structs.replace(scenario, exclusions=[], questions=[], leak_terms=[])
        defaults = not (plan.weakened.exclusions or plan.weakened.agent_config)
        sandbox = await trio.to_thread.run_sync(
            lambda: build_sandbox(options.repo, options.commit or "HEAD", rules, sandbox_dir,
                                  default_exclusions=defaults))
        for line in sandbox.unscanned:  # recorded in sandbox.built as well
            print(f"caisson record: containment scan: {line}", file=sys.stderr)
    else:
        sandbox_dir.mkdir()
    config_home.mkdir()
    for sub in (".config", ".cache", ".claude", ".codex"):  # what the pinned variables name
        (config_home / sub).mkdir()
    _chown_tree(sandbox_dir, plan.uid, plan.gid)
    _chown_tree(config_home, plan.uid, plan.gid)
    binds = [(str(sandbox_dir), SANDBOX_PATH, False), (str(config_home), CONFIG_HOME, False)]
    if plan.weakened.live_repo and options.repo is not None:
        copy = scratch / "live-copy"
        await trio.to_thread.run_sync(lambda: shutil.copytree(options.repo, copy, symlinks=True))
        _chown_tree(copy, plan.uid, plan.gid)
        binds.append((str(copy), str(Path(options.repo).resolve()), False))
    return sandbox, binds


def _chamber_env(plan: RunPlan, scenario: Scenario, key: bytes) -> ChamberEnv:
    """The chamber's environment (`caisson.chamber.build_env` from the caller's, the
    scenario's and the plan's variables); weakened ``env``: the caller's OLDPWD and PWD and
    a planted credential leak in."""
    chamber_env = build_env(caller=os.environ, scenario=scenario, overrides=plan.env, cwd=SANDBOX_PATH,
                            fingerprint_key=key)
    if plan.weakened.env:
        leaked = {"OLDPWD": os.getcwd(), "PWD": os.getcwd(), "PLANTED_API_KEY": "sk-planted-by-selftest"}
        chamber_env = msgspec.structs.replace(
            chamber_env, env={**chamber_env.env, **leaked},
            recorded={**chamber_env.recorded, **leaked, "PLANTED_API_KEY": "fp:planted"})
    return chamber_env


def _with_upstream_ca(scenario: Scenario, scenario_path: Path | None) -> Scenario:
    """The scenario with a relative ``egress.upstream_ca`` made absolute, relative to the
    scenario file (as `caisson.scenario.Egress.upstream_ca` documents)."""
    ca = scenario.egress.upstream_ca
    if not ca or scenario_path is None or os.path.isabs(ca):
        return scenario
    ca = str((Path(scenario_path).parent / ca).resolve())
    return msgspec.structs.replace(scenario, egress=msgspec.structs.replace(scenario.egress, upstream_ca=ca))


def _adapter_transcript(name: str | None):
    """The transcript parser factory of adapter ``name``, or None."""
    if name is None:
        return None
    from caisson.agents import adapter

    return adapter(name).transcript


def syscall_witness_facts(witnesses: list[str], why: str, extra: dict[str, str] | None = None) -> SyscallWitnessChoice:
    """``run.started.syscall_witness``: which syscall witness runs, from the witnesses
    started (``strace``, ``ebpf``, ``both`` or ``none``), and ``why`` (the choice's reason;
    empty: the caller gave none, e.g. a library call with its own witnesses); then
    ``extra``, the witnesses' own facts, fields of `SyscallWitnessChoice` by name (the eBPF
    witness's ``ebpf_backend`` and ``ebpf_program_sha256``).

    Raises:
        TypeError: a key of ``extra`` is not a field of `SyscallWitnessChoice`.
    """
    ran = [name for name in ("strace", "ebpf") if name in witnesses]
    return SyscallWitnessChoice(ran="both" if len(ran) == 2 else ran[0] if ran else "none",
                                why=why or "chosen by the caller", **(extra or {}))


def _witness_facts(witnesses: list) -> dict[str, str]:
    """The facts of the witnesses that have some (``facts()``), merged."""
    out: dict[str, str] = {}
    for w in witnesses:
        if callable(facts := getattr(w, "facts", None)):
            out.update(facts())
    return out
