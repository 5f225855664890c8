"""Study files: the matrix an experiment runs, validated like scenarios.

A study file (``studies/<name>/study.toml``) names a scenario, the questions (default
all), the agents (an adapter with one or more models, its elicitation and its model
endpoint, or a plain command), the arms (default all of the scenario's), the
repetitions, the baseline probe prompt, the abort rules, the cell order and optional
prices. Every error names the file, the line and column where the field is written (when
it is), and the field as a JSON path; nothing runs on a bad file (exit 2).

Example (paths are relative to the study file):

    name = "click-arms"
    scenario = "../../scenarios/click/scenario.toml"
    questions = ["context-class", "terminal-size"]
    repetitions = 2

    [[agents]]
    adapter = "claude-code"
    models = ["claude-sonnet-4-5"]
    elicitation = { max_turns = 4 }
    endpoint = { script = "../../scenarios/model/study_click_claude.toml" }
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

import msgspec

from caisson.agents import ADAPTERS
from caisson.errors import ScenarioError
from caisson.scenario import Scenario, load_scenario, read_toml
from ledger import redact_argv
from ledger.events import AbortRules, ElicitationSettings, Endpoint, Price

__all__ = ["JudgeTable", "Order", "Study", "StudyAgent", "load_study", "parse_study",
           "ELICITATION", "PROVIDERS"]

NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]

ELICITATION: dict[str, tuple[str, ...]] = {name: ("max_turns",) for name in ADAPTERS}
"""What each adapter lets a study set about how it is asked (its elicitation), by key."""

PROVIDERS: dict[str, tuple[str, str]] = {"claude-code": ("api.anthropic.com", "ANTHROPIC_API_KEY"),
                                         "codex": ("api.openai.com", "OPENAI_API_KEY")}
"""Adapter -> (the provider host its CLI calls, the credential variable it reads)."""


class _Strict(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base for study Structs: immutable, keyword-only, unknown fields are errors."""


class StudyAgent(_Strict):
    """One agent under test: an adapter and its models, or a plain command."""

    adapter: NonEmpty | None = None
    """An adapter of `caisson.agents` (``claude-code``, ``codex``)."""
    command: list[NonEmpty] = []
    """A plain command instead of an adapter (probes); it is ``ungated``."""
    name: NonEmpty | None = None
    """The agent's name in the matrix (default: the adapter's name; required for a command)."""
    models: list[NonEmpty] = []
    """The models to ask for (one cell column each); a command has none."""
    elicitation: ElicitationSettings = ElicitationSettings()
    """How the agent is asked, as its adapter defines it (today: ``max_turns``); the type ``study.planned`` records."""
    endpoint: Endpoint | None = None
    """Where its model calls go (required for an adapter); the type ``study.planned`` records."""

    @property
    def label(self) -> str:
        """The agent's name in cell ids and reports."""
        return self.name or self.adapter or ""


class Order(_Strict):
    """The order cells run in."""

    shuffle: bool = True
    """Shuffle the cells, so arms interleave in time and drift does not line up with one."""
    seed: int | None = None
    """The shuffle's seed (default: drawn at plan time; always recorded in the study ledger)."""


class JudgeTable(_Strict):
    """The study's LLM judge (``[judge]``), for ``caisson study judge DIR``: an alarm, never a score.

    Read from the study file the study ledger sealed, so the judge named is the one planned.
    """

    endpoint: NonEmpty
    """The judge API's base URL, e.g. ``https://api.anthropic.com`` (reached through the proxy witness)."""
    model: NonEmpty
    """The model to ask for."""
    api: Literal["anthropic", "openai"] | None = None
    """``anthropic`` (Messages) or ``openai`` (Chat Completions); default: ``openai`` for
    ``api.openai.com``, else ``anthropic``."""
    credential: NonEmpty | None = None
    """The variable holding the key (default ANTHROPIC_API_KEY or OPENAI_API_KEY by ``api``)."""


class Study(_Strict, kw_only=True):
    """A study: the matrix of arm x agent x model x question x repetition."""

    name: NonEmpty
    scenario: NonEmpty
    """The scenario file, relative to the study file."""
    description: str = ""
    questions: list[NonEmpty] = []
    """Question ids of the scenario (default: all)."""
    arms: list[NonEmpty] = []
    """Arm names of the scenario (default: all)."""
    agents: Annotated[list[StudyAgent], msgspec.Meta(min_length=1)]
    repetitions: Annotated[int, msgspec.Meta(ge=1, le=100)] = 3
    baseline_prompt: NonEmpty = "Reply with the single word ready and nothing else."
    """The trivial prompt of each (arm, agent, model)'s preflight probe session."""
    answer_key: NonEmpty | None = None
    """A TOML answer key (``[[question]]`` with ``id``, ``answer``, optional ``wrong_answer``),
    relative to the study file: the grader is tested on it before anything is spent."""
    timeout_s: Annotated[float, msgspec.Meta(gt=0)] | None = None
    """Wall deadline of one cell (default: the scenario's)."""
    abort: AbortRules = AbortRules()
    """When the study stops early. `Endpoint`, `AbortRules` and `Price` are the types
    ``study.planned`` records (`ledger.events`); they too forbid unknown fields."""
    order: Order = Order()
    prices: dict[str, Price] = {}
    """Model -> its price (optional; reports convert tokens with it)."""
    judge: JudgeTable | None = None
    """The LLM judge ``caisson study judge`` uses when no ``--endpoint``/``--model`` is given."""


_AT = re.compile(r"^(?P<msg>.*?)(?: - at `(?P<at>[^`]*)`)?$", re.S)
_UNKNOWN = re.compile(r"^Object contains unknown field `(?P<name>[^`]*)`$")


def _where(text: str, field: str) -> str:
    """``line L, column C: `` where the field a JSON path names is written, or ``""``.

    Follows ``[[table]]`` headers for indexed segments (``$.agents[1].adapter`` is looked
    up after the second ``[[agents]]``); a best effort for a human, never an error.
    """
    lines = text.splitlines()
    start = 0
    segments = re.findall(r"\.([A-Za-z_][A-Za-z0-9_-]*)(?:\[(\d+)\])?", field)
    for n, (key, index) in enumerate(segments):
        last = n == len(segments) - 1
        if index and not last:
            header = re.compile(rf"^\s*\[\[\s*{re.escape(key)}\s*\]\]")
            hits = [i for i in range(start, len(lines)) if header.match(lines[i])]
            if len(hits) > int(index):
                start = hits[int(index)]
                continue
        assign = re.compile(rf"(^|[{{,\s])\[?\s*{re.escape(key)}\s*(=|\]|\.)")
        for i in range(start, len(lines)):
            m = assign.search(lines[i])
            if m:
                if last:
                    return f"line {i + 1}, column {lines[i].index(key, m.start()) + 1}: "
                start = i
                break
    return ""


_PROBE_KEY = b"caisson study file credential probe"
"""Any key serves: `redact_argv` changes an argv exactly when it recognises a secret in it."""


def _error(message: str, path: str, field: str, text: str) -> ScenarioError:
    return ScenarioError(_where(text, field) + message, path=path, field=field)


def parse_study(data: bytes, name: str) -> Study:
    """Validate a study from its bytes.

    Args:
        data: the TOML file's bytes.
        name: what to call it in errors (its path).

    Raises:
        ScenarioError: not UTF-8 TOML (line and column), or a field does not match the
            schema or its rules (``field`` is the JSON path; the message starts with the
            line and column where that field is written, when found).
    """
    table = read_toml(data, name)
    text = data.decode("utf-8")
    try:
        study = msgspec.convert(table, Study)
    except msgspec.ValidationError as e:
        m = _AT.match(str(e))
        assert m is not None
        msg, at = m["msg"], m["at"] or "$"
        unknown = _UNKNOWN.match(msg)
        if unknown:
            at, msg = f"{at}.{unknown['name']}", f"unknown field `{unknown['name']}` (check its spelling and nesting)"
            if at.endswith(f".elicitation.{unknown['name']}"):
                msg += f"; an adapter's elicitation sets: {', '.join(ElicitationSettings.__struct_fields__)}"
        raise _error(msg, name, at, text) from e
    _check_agents(study, name, text)
    return study


def _check_agents(study: Study, name: str, text: str) -> None:
    seen: set[str] = set()
    for i, agent in enumerate(study.agents):
        at = f"$.agents[{i}]"
        if (agent.adapter is None) == (not agent.command):
            raise _error("give either adapter or command", name, f"{at}.adapter", text)
        if agent.adapter is not None:
            if agent.adapter not in ADAPTERS:
                raise _error(f"unknown adapter {agent.adapter!r}; known: {', '.join(sorted(ADAPTERS))}",
                             name, f"{at}.adapter", text)
            if not agent.models:
                raise _error("an adapter needs at least one model", name, f"{at}.models", text)
            if agent.endpoint is None:
                raise _error("an adapter needs an endpoint: { script = FILE } or { provider = HOST }",
                             name, f"{at}.endpoint", text)
            if (agent.endpoint.script is None) == (agent.endpoint.provider is None):
                raise _error("give exactly one of script and provider", name, f"{at}.endpoint", text)
            for key, value in msgspec.structs.asdict(agent.elicitation).items():
                if value is not None and key not in ELICITATION[agent.adapter]:
                    raise _error(f"{agent.adapter} does not define elicitation {key!r}; it defines: "
                                 + ", ".join(ELICITATION[agent.adapter]), name, f"{at}.elicitation.{key}", text)
        else:
            if agent.name is None:
                raise _error("a command agent needs a name", name, f"{at}.name", text)
            if agent.models or agent.endpoint is not None or agent.elicitation != ElicitationSettings():
                raise _error("a command agent takes no models, endpoint or elicitation", name, f"{at}.command", text)
        if agent.label in seen:
            raise _error(f"duplicate agent {agent.label!r} (give each a distinct name)", name, f"{at}.name", text)
        seen.add(agent.label)


def load_study(path: str | Path) -> tuple[Study, Scenario, bytes]:
    """Read and validate a study file and the scenario it names.

    Args:
        path: the study TOML file.

    Returns:
        (the study, its scenario, the study file's bytes).

    Raises:
        ScenarioError: the study or its scenario cannot be read or is invalid; questions
            or arms it names are not in the scenario; the scenario has no arm; a command
            agent's command holds a credential (`ledger.redact_argv` recognises one).
    """
    name = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ScenarioError(f"cannot read the study: {e.strerror or e}", path=name) from e
    study = parse_study(data, name)
    text = data.decode("utf-8")
    scenario_path = resolve(path, study.scenario)
    if not scenario_path.is_file():
        raise _error(f"no scenario file at {scenario_path}", name, "$.scenario", text)
    scenario = load_scenario(scenario_path)
    ids = [q.id for q in scenario.questions]
    for i, qid in enumerate(study.questions):
        if qid not in ids:
            raise _error(f"question {qid!r} is not in {study.scenario}; its questions: {', '.join(ids) or 'none'}",
                         name, f"$.questions[{i}]", text)
    arms = [a.name for a in scenario.arms]
    if not arms:
        raise _error(f"{study.scenario} defines no [[arms]]: a study compares arms", name, "$.scenario", text)
    for i, arm in enumerate(study.arms):
        if arm not in arms:
            raise _error(f"arm {arm!r} is not in {study.scenario}; its arms: {', '.join(arms)}",
                         name, f"$.arms[{i}]", text)
    from caisson.agents import adapter, check_arm

    players = [adapter(a.adapter) for a in study.agents if a.adapter]  # an arm is shared by the study's agents
    for arm in (scenario.arm(a) for a in study.arms or arms):  # a grant that names nothing configures nothing
        check_arm(arm, scenario, agents=list({p.name: p for p in players}.values()), path=str(scenario_path))
    for i, agent in enumerate(study.agents):
        if agent.command and redact_argv(agent.command, key=_PROBE_KEY, patterns=scenario.credential_patterns) \
                != list(agent.command):
            # The study file is sealed whole in the study ledger (blob role `study`): a secret
            # in it would reach the ledger verbatim, where run.started.command only has its
            # fingerprint (ledger.redact_argv). Refused, not rewritten: its sha256 is bound.
            raise _error("the command holds a credential (a key-shaped token, a --*key*/--*token*= value, a URL"
                         " password or a credential variable): the study file is sealed in the study ledger"
                         " as written, so give the credential to the command through its environment",
                         name, f"$.agents[{i}].command", text)
        if agent.endpoint is not None and agent.endpoint.script is not None:
            for qid in study.questions or ids:
                script = resolve(path, agent.endpoint.script.replace("{question}", qid))
                if not script.is_file():
                    raise _error(f"no model script at {script}", name, f"$.agents[{i}].endpoint.script", text)
    if study.answer_key is not None and not resolve(path, study.answer_key).is_file():
        raise _error(f"no answer key at {resolve(path, study.answer_key)}", name, "$.answer_key", text)
    for field in ("pass_credentials",):
        if getattr(scenario, field):
            raise _error(f"{study.scenario} sets {field}: a study passes credentials per agent endpoint",
                         name, "$.scenario", text)
    if scenario.agent.model is not None or scenario.agent.max_turns is not None:
        raise _error(f"{study.scenario} sets [agent]: a study sets models and elicitation per agent",
                     name, "$.scenario", text)
    return study, scenario, data


def resolve(study_path: str | Path, relative: str) -> Path:
    """A path the study file gives, relative to the study file's folder."""
    p = Path(relative)
    return p if p.is_absolute() else (Path(study_path).parent / p)
