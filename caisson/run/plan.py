"""The plan stage: what one run will do, decided before anything is written.

`plan_run` is pure: it reads the options a caller gave (`RecordOptions`, the CLI's flags)
and a scenario already loaded, and returns a `RunPlan` or raises `UsageError`. It opens
no file, reads no clock, starts no process and touches no engine, so the same options and
scenario always give the same plan: `caisson record` calls it once before its I/O, and a
study runner calls it once per cell (docs/architecture.md, "The data flow").

What a plan settles:

- the command: the one given after ``--``, or the one an agent adapter builds from the
  question and the arm;
- the question, the agent (with its gating), the arm and its deny list;
- a **refusal**, as a value (`ledger.events.Refusal`, the type a study's plan records):
  an arm that withholds tools cannot run with an agent that cannot gate them. A refused
  plan is still a whole plan; `record` turns it into a usage error;
- the chamber's extra environment, user ids, network mode, witnesses, deadline, a parsed
  monitor address;
- the selftest's weakened controls, as one `Controls` value.

What it leaves to `caisson.run.record`, because each needs I/O: reading the scenario file,
the image tag (a digest of the recipe files), the repository and commit (git), the run
directory, the operator key and the caller's environment (the chamber environment is
built from them), and whether the process may run the strace witness (root).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal, Protocol

import msgspec

from caisson.errors import UsageError
from caisson.run.stream import MonitorAddress, parse_monitor_address
from caisson.scenario import Egress, Question, Scenario
from collectors.egress import parse_allow
from ledger.events import Gating, NetworkMode, Refusal, RunAgent, RunArm

__all__ = [
    "Control",
    "Controls",
    "NetworkMode",
    "RecordOptions",
    "RunPlan",
    "WEAKENABLE",
    "WitnessInfo",
    "plan_run",
]

Control = Literal["exclusions", "live_repo", "env", "tracer_user", "network", "deny_list"]
"""A control the selftest can weaken (see `WEAKENABLE`)."""

WEAKENABLE: dict[Control, str] = {
    "exclusions": "the sandbox keeps the exclusion set and skips the containment scan",
    "live_repo": "a copy of the live repository is mounted at its own absolute path",
    "env": "the caller's OLDPWD, PWD and a planted credential reach the chamber",
    "tracer_user": "the tracer runs as the agent's user, so the agent can signal it",
    "network": "the chamber network gets a route out and the host's side is not firewalled",
    "deny_list": "the agent is handed the arm's withheld tools as allowed, and no deny list",
    "agent_config": "the sandbox keeps the files the agent reads as its configuration (settings, hooks, MCP)",
    "ebpf_buffer": "the eBPF witness's buffer is cut (the libbpf loader's ring to 64 KiB, bpftrace's perf buffer"
                   " to a page per CPU), so a flood of syscalls overflows it",
    "strace_openat": "the strace witness leaves openat out of its filter, so it silently misses file opens",
    "seccomp": "the chamber gets the engine's default seccomp profile, not caisson's (io_uring and the rest allowed"
               " as the installed engine allows them)",
    "proxy_tunnels": "the proxy answers every CONNECT and relays bytes that are not HTTP as raw TCP, to any host and"
                     " port (mitmproxy's defaults)",
}
"""Controls `caisson selftest` weakens one at a time to show the detector behind each fires.
A run with any weakened control records it in ``run.started`` and can never be clean."""

_USERS = {"agent": (1000, 1000), "root": (0, 0)}


class RecordOptions(msgspec.Struct, kw_only=True):
    """What one `caisson record` was asked to do (the CLI's flags, or a study's cell)."""

    command: list[str]
    scenario: Path | None = None
    repo: Path | None = None
    commit: str | None = None  # default HEAD when repo is given
    out: Path | None = None  # run directory; default runs/<run id>
    timeout_s: float | None = None  # seconds; default: the scenario's limits.wall_seconds
    env: dict[str, str] = {}
    monitor: str | None = None  # unix:PATH or tcp:HOST:PORT
    image: str | None = None  # default: the tag of the images/chamber (or the agent's) recipe
    question: str | None = None  # a scenario question id; its prompt goes to CAISSON_PROMPT
    agent: str | None = None  # a real agent adapter (caisson.agents); builds the command from the question
    arm: str | None = None  # a scenario arm: the agent's grant and deny list
    transcript: str | None = None  # read stdout with this adapter's transcript parser (selftest probes)
    discovered_tools: list[str] = []  # tools sessions of this agent reported (preflight): unioned into the deny list
    arm_shared_with: list[str] = []  # a study's other agents (adapters) sharing the arm: their tools' names are
    # valid in it, and are not handed to this agent
    measured_gating: Gating | None = None  # what a gating probe measured for this agent version (preflight);
    # None: the adapter's claim stands. It can only weaken a claim (enforced -> not_enforced), never raise one.
    egress: Egress | None = None  # replaces the scenario's egress policy (preflight: the scripted endpoint)
    weaken: list[str] = []  # controls to weaken on purpose (selftest only; see WEAKENABLE)
    syscall_witness: Literal["strace", "ebpf", "both"] = "strace"  # which syscall witness the CLI starts
    syscall_witness_why: str = ""  # why that one, for run.started (e.g. eBPF fell back to strace: the problem)


class Controls(msgspec.Struct, frozen=True, kw_only=True):
    """Which of the chamber's controls a run weakens on purpose (the selftest only).

    Each field is True when that control is weakened, as `WEAKENABLE` describes it; a
    real run has every field False. Read as ``plan.weakened.env``.
    """

    exclusions: bool = False
    live_repo: bool = False
    env: bool = False
    tracer_user: bool = False
    network: bool = False
    deny_list: bool = False
    agent_config: bool = False
    ebpf_buffer: bool = False
    seccomp: bool = False
    strace_openat: bool = False
    proxy_tunnels: bool = False

    @classmethod
    def from_names(cls, names: Sequence[str]) -> Controls:
        """The controls named in ``names`` weakened, the others intact.

        Raises:
            UsageError: a name is not one of `WEAKENABLE` (the message lists them).
        """
        unknown = sorted(set(names) - set(WEAKENABLE))
        if unknown:
            raise UsageError(f"cannot weaken {', '.join(unknown)}: known controls are {', '.join(sorted(WEAKENABLE))}")
        return cls(**{name: True for name in names})

    @property
    def names(self) -> list[str]:
        """The weakened controls' names, sorted (what ``run.started.weakened`` records)."""
        return sorted(name for name in WEAKENABLE if getattr(self, name))


class RunPlan(msgspec.Struct, frozen=True, kw_only=True):
    """Everything `caisson.run.record` needs to know about a run before its I/O.

    Attributes:
        scenario: the scenario the run follows, its egress replaced by the options' if any.
        command: the argv run in the chamber (the agent's, when ``agent`` is set).
        question: the scenario question this run answers, or None.
        agent: the agent under test as ``run.started.agent`` records it, or None for a
            plain command; its image recipe is ``image_recipe``.
        arm: the arm and the deny list handed to the agent, as ``run.started.arm`` records
            it, or None.
        refusal: set when the plan will not run (the combination as a study's
            ``study.planned`` records one); everything else is still planned.
        transcript: the adapter whose transcript parser reads the command's stdout, or None.
        image: the image tag asked for, or None for the recipe's own tag.
        image_recipe: the recipe whose tag is used when ``image`` is None (chamber | agent).
        env: variables set in the chamber on top of the scenario's (``--env``, the agent's
            own, the question's ``CAISSON_QUESTION_ID`` and ``CAISSON_PROMPT``); the chamber
            environment is built from them by `caisson.chamber.build_env`.
        user: the scenario's user name (or uid[:gid]); uid, gid: its numeric ids.
        network: the chamber's network mode.
        witnesses: the names of the witnesses that run, in start order (network
            witnesses only when ``network`` is ``witnessed``).
        timeout_s: the wall deadline, seconds.
        monitor: where to stream the events, or None.
        weakened: the selftest's weakened controls.
    """

    scenario: Scenario
    command: tuple[str, ...]
    question: Question | None = None
    agent: RunAgent | None = None
    arm: RunArm | None = None
    refusal: Refusal | None = None
    transcript: str | None = None
    image: str | None = None
    image_recipe: str = "chamber"
    env: dict[str, str] = {}
    user: str = "agent"
    uid: int = 1000
    gid: int = 1000
    network: NetworkMode = "none"
    witnesses: tuple[str, ...] = ()
    timeout_s: float = 600.0
    monitor: MonitorAddress | None = None
    weakened: Controls = Controls()


class WitnessInfo(Protocol):
    """What the plan reads of a witness: its name and whether it needs the chamber network."""

    name: str
    needs_network: bool


def plan_run(options: RecordOptions, scenario: Scenario | None = None, *,
             witnesses: Sequence[WitnessInfo] = ()) -> RunPlan:
    """Plan one run from its options and its scenario; pure (see the module docstring).

    Args:
        options: what the run was asked to do.
        scenario: the scenario, already loaded and validated (`caisson.scenario.load_scenario`),
            or None for an ad-hoc run (no questions, arms or exclusions; default limits).
        witnesses: the witnesses offered (e.g. `caisson.run.default_witnesses()`); the
            plan keeps the names of those the run's network mode allows.

    Returns:
        The `RunPlan`; its ``refusal`` is set when the arm and agent cannot run together.

    Raises:
        UsageError: an option is wrong; the message names the option (``--monitor``,
            ``--timeout``, ``--question``, ``--arm``, ``--agent``, ``--commit``, ...) and
            what would be right. Nothing has been written when it is raised.
    """
    if options.commit and options.repo is None:
        raise UsageError("--commit needs --repo")
    if not options.command and options.agent is None:
        raise UsageError("no command given: caisson record [OPTIONS] -- CMD [ARG ...] (or --agent NAME)")
    if options.timeout_s is not None and not options.timeout_s > 0:  # also refuses NaN
        raise UsageError(f"--timeout {options.timeout_s:g}: expected a number of seconds above 0")
    monitor = None
    if options.monitor is not None:
        try:
            monitor = parse_monitor_address(options.monitor)
        except UsageError as exc:
            raise UsageError(f"--monitor {options.monitor}: {exc}") from None
    weakened = Controls.from_names(options.weaken)
    scenario = scenario if scenario is not None else Scenario(name="adhoc")
    if options.egress is not None:
        scenario = msgspec.structs.replace(scenario, egress=options.egress)
    question = _pick(scenario.question, options.question, "--question", "questions",
                     [q.id for q in scenario.questions], none="none (pass --scenario)")
    if options.arm is not None and options.agent is None:
        raise UsageError(f"--arm {options.arm}: an arm sets an agent's tools; give --agent NAME too")
    transcript = None
    if options.transcript is not None:
        try:
            transcript = _adapter(options.transcript).name
        except UsageError:
            raise UsageError(f"transcript {options.transcript}: no agent adapter of that name") from None
    command, env, image_recipe = tuple(options.command), dict(options.env), "chamber"
    agent = arm = refusal = None
    if options.agent is not None:
        command, agent, arm, refusal = _agent_plan(options, scenario, question, weakened)
        spec = _adapter(agent.name)
        transcript, env, image_recipe = spec.name, {**spec.env, **options.env}, spec.image
    if question is not None:
        env.update(CAISSON_QUESTION_ID=question.id, CAISSON_PROMPT=question.prompt)
    uid, gid = _user_ids(scenario.user)
    egress = scenario.egress
    try:
        parse_allow(egress.allow_hosts)
    except ValueError as exc:
        raise UsageError(f"[egress] allow_hosts: {exc}") from None
    networked = egress.witnessed if egress.witnessed is not None else bool(egress.allow_hosts)
    network: NetworkMode = "witnessed" if networked or weakened.network else "none"
    kept = tuple(w.name for w in witnesses if network == "witnessed" or not getattr(w, "needs_network", False))
    if "strace" in kept and not scenario.user.isidentifier():
        raise UsageError(f"scenario user {scenario.user!r}: the strace witness needs a user name of the image"
                         " (agent or root)")
    return RunPlan(
        scenario=scenario, command=command, question=question, agent=agent, arm=arm, refusal=refusal,
        transcript=transcript, image=options.image, image_recipe=image_recipe, env=env, user=scenario.user,
        uid=uid, gid=gid, network=network, witnesses=kept,
        timeout_s=options.timeout_s if options.timeout_s is not None else scenario.limits.wall_seconds,
        monitor=monitor, weakened=weakened,
    )


def _adapter(name: str):
    """The agent adapter called ``name`` (imported here: `caisson record -- CMD` never needs one).

    Raises:
        UsageError: unknown adapter (the message names ``--agent`` and the known ones).
    """
    from caisson.agents import adapter

    return adapter(name)


def _agent_plan(options: RecordOptions, scenario: Scenario, question: Question | None,
                weakened: Controls) -> tuple[tuple[str, ...], RunAgent, RunArm | None, Refusal | None]:
    """The command, agent, arm and refusal of a real-agent run.

    Raises:
        UsageError: unknown agent or arm, no question, or a command given as well.
    """
    from caisson.agents import check_arm, deny_list, own_arm

    spec = _adapter(options.agent)
    if options.command:
        raise UsageError("--agent builds the command itself: give no command after --")
    if question is None:
        raise UsageError("--agent needs --question ID (the prompt it is given)")
    found = _pick(scenario.arm, options.arm, "--arm", "arms", [a.name for a in scenario.arms])
    gating = spec.gating
    if spec.gating == "enforced" and options.measured_gating in ("not_enforced", "ungated"):
        gating = "not_enforced"  # claimed, and the probe saw a denied tool run
    agent = RunAgent(name=spec.name, gating=gating, version=spec.version, elicitation=spec.elicitation,
                     model=scenario.agent.model)
    if found is None:
        arm, allowed, denied = None, [], []
    else:
        others = [_adapter(name) for name in dict.fromkeys(options.arm_shared_with) if name != spec.name]
        check_arm(found, scenario, agents=[spec, *others], discovered=options.discovered_tools,
                  path=str(options.scenario) if options.scenario else "")
        catalog = {s.name: list(s.members()) for s in scenario.strategies}
        grant, withhold = own_arm(found, scenario, spec, shared_with=others, discovered=options.discovered_tools)
        deny = deny_list((*spec.static_tools, *options.discovered_tools), grant, withhold)
        arm = RunArm(name=found.name, grant=list(found.grant), withhold=list(found.withhold), deny=deny,
                     strategies=list(found.strategies), catalog=catalog)
        allowed, denied = grant, list(deny)
        if weakened.deny_list:  # selftest: a deliberately wrong deny list
            allowed, denied = list(found.grant) + list(found.withhold), []
    refusal = None
    if arm is not None and arm.deny and gating != "enforced":
        why = ("its gating probe saw a denied tool run" if gating != spec.gating
               else "its flags cannot withhold tools")
        refusal = Refusal(
            arm=arm.name, agent=spec.name, model=scenario.agent.model, gating=gating, cells=1,
            kind="cannot" if gating == "ungated" else "not_yet",
            reason=f"{spec.name} is {gating} ({why}), so arm {arm.name}"
                   f" (which denies {', '.join(arm.deny[:5])}...) cannot be run with it")
    command = spec.command(question.prompt, allowed=allowed, denied=denied, model=scenario.agent.model,
                           max_turns=scenario.agent.max_turns)
    return tuple(command), agent, arm, refusal


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


def _user_ids(user: str) -> tuple[int, int]:
    """The uid and gid of a scenario's ``user``: ``agent``, ``root`` or numeric ``uid[:gid]``.

    Raises:
        UsageError: anything else.
    """
    if user in _USERS:
        return _USERS[user]
    uid, _, gid = user.partition(":")
    if uid.isdigit() and (not gid or gid.isdigit()):
        return int(uid), int(gid or uid)
    raise UsageError(f"scenario user {user!r}: use 'agent', 'root' or a numeric uid[:gid]")
