"""Scenario files: the questions put to an agent and what the sandbox must withhold.

A scenario is a TOML file validated by msgspec into frozen Structs. Every error names the
file, the offending field as a JSON path (`$.questions[0].prompt`) and what was expected,
so a typo in a scenario fails before any sandbox is built.

Example:

    name = "demo"
    leak_terms = ["ANSWER-KEY-7"]

    [[questions]]
    id = "q1"
    prompt = "Which function parses the configuration file and where is it defined?"
    evidence = ["src/config.py"]

    [[exclusions]]
    category = "answer_key"
    globs = ["answers/**"]
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from pathlib import Path, PurePosixPath
from typing import Annotated, Literal

import msgspec

from caisson._fold import fold_term
from caisson.errors import ScenarioError
from caisson.grants import parse_grant
from ledger import is_credential, looks_secret
from ledger.events import Category

__all__ = [
    "CATEGORIES",
    "Category",
    "Claim",
    "ExclusionCategory",
    "Fact",
    "Limits",
    "Egress",
    "Arm",
    "Strategy",
    "AgentSettings",
    "Question",
    "Scenario",
    "load_scenario",
    "read_toml",
    "parse_scenario",
    "scenario_digest",
]

CATEGORIES: tuple[str, ...] = Category.__args__  # type: ignore[attr-defined]

QuestionKind = Literal["locate", "absence", "trap"]

NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]


class _Strict(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base for scenario Structs: immutable, keyword-only, unknown fields are errors."""


class Fact(_Strict):
    """A fact a correct answer must state (deterministic checklist grading)."""

    subject: NonEmpty
    """What the fact is about, e.g. a function or file name."""
    pattern: NonEmpty
    """Text the answer must contain for this subject (case-insensitive)."""
    regex: bool = False
    """Whether `pattern` is a Python regular expression rather than plain text."""


class Claim(_Strict):
    """A claim a correct answer must not bind to its subject (a forbidden fact)."""

    subject: NonEmpty
    """What the claim is about."""
    claim: NonEmpty
    """The wrong statement about `subject`."""


class Question(_Strict):
    """One question put to the agent."""

    id: NonEmpty
    """Unique id within the scenario, e.g. `q1`."""
    prompt: NonEmpty
    """The text given to the agent; the containment scan looks for it in the tree."""
    evidence: list[NonEmpty] = []
    """Repo-relative paths (files or directories) that hold the answer; they must survive
    the exclusions, since containment removes the answer key, never the answers."""
    leak_terms: list[NonEmpty] = []
    """Strings that only the answer key contains; none may appear in the sandbox, and an
    answer that cites one scores null. Matched folded (`caisson._fold`: case, dashes,
    format characters, lookalike letters), a space matching any whitespace."""
    kind: QuestionKind = "locate"
    """`locate` (find something that exists), `absence` (the right answer is that it does
    not exist) or `trap` (a plausible wrong answer is on offer)."""
    required: list[Fact] = []
    """Facts a correct answer states (for grading; unused by the sandbox)."""
    forbidden: list[Claim] = []
    """Claims a correct answer must not make (for grading)."""
    absent: bool = False
    """Whether the correct answer is "it does not exist" (for grading)."""


class ExclusionCategory(_Strict):
    """Paths withheld from the sandbox, under one category.

    Globs are matched against repo-relative POSIX paths, anchored at the repository root
    (see `caisson._glob.glob_to_regex`): `*` and `?` stay inside one path segment, a
    whole `**` segment matches zero or more segments, and a glob that matches a directory
    excludes everything below it.
    """

    category: Category
    """One of `CATEGORIES`."""
    globs: list[NonEmpty] = []
    """Repo-relative globs, e.g. `answers/**`, `**/.claude`, `docs/report-*.md`."""
    description: str = ""
    """Why these paths are withheld, for the report."""


class Limits(_Strict):
    """Resource limits of the chamber."""

    wall_seconds: Annotated[float, msgspec.Meta(gt=0)] = 600.0
    """Wall-clock budget of one run, in seconds."""
    pids: Annotated[int, msgspec.Meta(gt=0)] = 512
    """Maximum number of processes (and threads) in the chamber."""
    memory_bytes: Annotated[int, msgspec.Meta(gt=0)] = 2 * 1024**3
    """Memory limit of the chamber, in bytes (default 2 GiB)."""
    cpus: Annotated[float, msgspec.Meta(gt=0)] = 1.0
    """CPU quota, in CPUs."""
    disk_bytes: Annotated[int, msgspec.Meta(gt=0)] = 4 * 1024**3
    """Space the chamber may write, in bytes (default 4 GiB), per place: its tree and config
    home (one tmpfs: the sandbox is built into it, so a tree bigger than this does not fit),
    its /tmp, /var/tmp and /run/lock are each a tmpfs of this size, the image's own
    filesystem read-only, so it never writes the host's disk; what it writes is charged to
    its memory as well (``memory_bytes`` bounds the sum)."""


class Egress(_Strict):
    """The chamber's egress policy: what the network witnesses let through.

    The chamber has no route out; HTTP(S) goes through the proxy witness, names through
    the DNS witness. Everything outside ``allow_hosts`` is refused and recorded.
    """

    allow_hosts: list[NonEmpty] = []
    """What the proxy lets through: exact names or ``*.suffix``, either with ``:port``
    (without one: ports 80 and 443); the resolver ignores ports (default: none;
    `collectors.egress.parse_allow`)."""
    static_hosts: dict[str, list[str]] = {}
    """Names the DNS witness answers from this map (name -> addresses); others allowed by
    ``allow_hosts`` are answered with the proxy's address."""
    upstream: dict[str, str] = {}
    """Proxy rewrites: a request for ``host`` goes to ``ip:port`` or ``http://ip:port`` (e.g. a
    scripted model endpoint on the host standing in for ``api.anthropic.com``)."""
    witnessed: bool | None = None
    """Put the chamber on a witnessed network (proxy, resolver, capture). Default: only when
    ``allow_hosts`` lets something through; otherwise the chamber has no network at all,
    and an attempt to connect fails at once, visible in the strace witness's ``net.connect``."""
    upstream_ca: str | None = None
    """A PEM file of CAs the proxy trusts for upstream TLS besides the system's (e.g. the
    certificate of a local endpoint); relative paths are relative to the scenario file."""


class Strategy(_Strict):
    """A named group of tools and backends the audit treats as one way of working.

    An arm that grants the strategy may use any of its tools, listed or not by the arm; a
    tool of another strategy that executes is ``tool_escape`` for that strategy
    (caisson/detectors/agents.py). Tools not in any scenario strategy keep the built-in
    grouping (``caisson.detectors.agents.STRATEGIES``).
    """

    name: NonEmpty
    tools: list[NonEmpty] = []
    """Tools by the agent's own names (e.g. ``Grep``, ``Read``)."""
    backends: list[NonEmpty] = []
    """MCP servers: every tool ``mcp__SERVER__*`` belongs to the strategy (Claude Code's MCP
    tool naming, https://docs.claude.com/en/docs/claude-code/iam#tool-specific-permission-rules)."""
    description: str = ""

    def members(self) -> tuple[str, ...]:
        """The tool names and ``mcp__SERVER`` entries of the strategy (an agent's grant form)."""
        return (*self.tools, *(f"mcp__{b}" for b in self.backends))


class Arm(_Strict):
    """A strategy: the tools an agent may use, and what it withholds.

    The deny list handed to the agent is every tool its adapter knows or discovers minus
    ``grant`` and the tools of the granted ``strategies``, plus ``withhold`` (built-ins or
    backends withheld by name).
    """

    name: NonEmpty
    grant: list[NonEmpty] = []
    """Tools the arm grants, by the agent's own names (e.g. ``Bash``, ``Grep``, ``Read``), or
    scoped to commands (``Bash(git log:*)``, caisson/grants.py): the audit then reads what
    each call executed."""
    withhold: list[NonEmpty] = []
    """Tools or backends always denied, whatever the grant."""
    strategies: list[NonEmpty] = []
    """Scenario strategies the arm grants, by name: all their tools and backends."""
    description: str = ""


class AgentSettings(_Strict):
    """How the scenario runs real agents."""

    model: str | None = None
    """The model the agent asks for (the scripted endpoint can serve any name)."""
    max_turns: int | None = None
    """A bound on the agent's turns, where its CLI has one."""


class Scenario(_Strict):
    """A set of questions about one repository and the sandbox rules they need."""

    name: NonEmpty
    """Short identifier of the scenario."""
    description: str = ""
    """Free text for humans."""
    questions: list[Question] = []
    """The questions, each asked in its own run."""
    exclusions: list[ExclusionCategory] = []
    """What the sandbox withholds, by category."""
    leak_terms: list[NonEmpty] = []
    """Scenario-wide leak terms, matched as `Question.leak_terms` are."""
    env: dict[str, str] = {}
    """Extra environment variables set in the chamber."""
    pass_credentials: list[NonEmpty] = []
    """Credential variable names passed into the chamber on purpose (recorded)."""
    credential_patterns: list[NonEmpty] = []
    """Extra credential variable globs to strip, e.g. `MYCORP_*_TOKEN`."""
    injection_switches: dict[str, str] = {}
    """Extra knowledge-injection switches to set off: variable name -> value."""
    user: NonEmpty = "agent"
    """The unprivileged user the agent runs as in the chamber."""
    answer_file: str | None = None
    """Where the agent writes its answer, relative to the sandbox root, or None."""
    limits: Limits = Limits()
    """Resource limits of the chamber."""
    egress: Egress = Egress()
    """The network policy (default: nothing leaves the chamber)."""
    strategies: list[Strategy] = []
    """Named groups of tools and backends that arms grant (`Arm.strategies`)."""
    arms: list[Arm] = []
    """The strategies a study compares; `caisson record --arm NAME` picks one."""
    agent: AgentSettings = AgentSettings()
    """Settings for real agents (`caisson record --agent NAME`)."""

    def strategy(self, name: str) -> Strategy | None:
        """The strategy named ``name``, or None."""
        return next((s for s in self.strategies if s.name == name), None)

    def question(self, question_id: str) -> Question | None:
        """The question with id ``question_id``, or None."""
        return next((q for q in self.questions if q.id == question_id), None)

    def arm(self, name: str) -> Arm | None:
        """The arm named ``name``, or None."""
        return next((a for a in self.arms if a.name == name), None)


_AT = re.compile(r"^(?P<msg>.*?)(?: - at `(?P<at>[^`]*)`)?$", re.S)
_UNKNOWN = re.compile(r"^Object contains unknown field `(?P<name>[^`]*)`$")
_TOML_LINE = re.compile(r"\(at line (?P<line>\d+), column (?P<col>\d+)\)")


def _validation_error(err: msgspec.ValidationError, path: str) -> ScenarioError:
    """Turn a msgspec error into a ScenarioError with the field as a JSON path."""
    m = _AT.match(str(err))
    assert m is not None  # the pattern matches any string
    msg, at = m["msg"], m["at"] or "$"
    unknown = _UNKNOWN.match(msg)
    if unknown:
        at = f"{at}.{unknown['name']}"
        msg = f"unknown field `{unknown['name']}` (check its spelling and nesting)"
    elif at.endswith(".category"):
        msg += "; expected one of: " + ", ".join(CATEGORIES)
    return ScenarioError(msg, path=path, field=at)


def _check(scenario: Scenario, path: str) -> None:
    """Constraints msgspec cannot express: unique ids, leak terms that can match, a
    relative answer file."""
    seen: set[str] = set()
    for i, q in enumerate(scenario.questions):
        if q.id in seen:
            raise ScenarioError(
                f"duplicate question id {q.id!r}", path=path, field=f"$.questions[{i}].id"
            )
        seen.add(q.id)
    terms = [(f"$.leak_terms[{j}]", t) for j, t in enumerate(scenario.leak_terms)]
    terms += [(f"$.questions[{i}].leak_terms[{j}]", t) for i, q in enumerate(scenario.questions)
              for j, t in enumerate(q.leak_terms)]
    for at, term in terms:
        if not fold_term(term):
            raise ScenarioError(f"leak term {term!r} is only format characters, marks or whitespace: leak"
                                " matching drops those, so it could never match", path=path, field=at)
    owner: dict[str, str] = {}
    for i, strat in enumerate(scenario.strategies):
        if strat.name in (s.name for s in scenario.strategies[:i]):
            raise ScenarioError(f"duplicate strategy name {strat.name!r}", path=path, field=f"$.strategies[{i}].name")
        for field, items in (("tools", strat.tools), ("backends", strat.backends)):
            for j, item in enumerate(items):
                key = item if field == "tools" else f"mcp__{item}"
                if key in owner:
                    raise ScenarioError(f"{item!r} is already in strategy {owner[key]!r}: a tool belongs to one"
                                        " strategy", path=path, field=f"$.strategies[{i}].{field}[{j}]")
                owner[key] = strat.name
    names = [s.name for s in scenario.strategies]
    for i, arm in enumerate(scenario.arms):
        for j, name in enumerate(arm.strategies):
            if name not in names:
                raise ScenarioError(f"unknown strategy {name!r}; the scenario's strategies: {', '.join(names) or 'none'}",
                                    path=path, field=f"$.arms[{i}].strategies[{j}]")
        for j, entry in enumerate(arm.grant):
            try:
                parse_grant(entry)
            except ValueError as e:
                raise ScenarioError(str(e), path=path, field=f"$.arms[{i}].grant[{j}]") from None
    for i, q in enumerate(scenario.questions):  # a regex fact that cannot compile could never be met
        for j, fact in enumerate(q.required):
            if fact.regex:
                try:
                    re.compile(fact.pattern, re.IGNORECASE)
                except re.error as e:
                    raise ScenarioError(f"pattern {fact.pattern!r} is not a Python regular expression: {e}",
                                        path=path, field=f"$.questions[{i}].required[{j}].pattern") from None
    _check_egress(scenario.egress, path)
    if scenario.answer_file is not None:
        p = PurePosixPath(scenario.answer_file)
        if not scenario.answer_file or p.is_absolute() or ".." in p.parts:
            raise ScenarioError(
                f"expected a path relative to the sandbox without `..`, got "
                f"{scenario.answer_file!r}",
                path=path,
                field="$.answer_file",
            )


def _check_egress(egress: Egress, path: str) -> None:
    """Egress settings that would configure nothing: an allow entry that parses as no name,
    an upstream rewrite of a host the proxy never lets through (or whose target is not
    ``[http://|https://]ip:port``), a static host whose address is no IP address."""
    import ipaddress

    from collectors.egress import canonical_host, host_allowed, parse_allow

    allow = []
    for j, entry in enumerate(egress.allow_hosts):
        try:
            allow += parse_allow([entry])
        except ValueError as e:
            raise ScenarioError(str(e), path=path, field=f"$.egress.allow_hosts[{j}]") from None
    for host, target in egress.upstream.items():
        at = f"$.egress.upstream.{host}"
        if not host_allowed(canonical_host(host), allow):
            raise ScenarioError(f"upstream {host!r} is not in egress.allow_hosts"
                                f" ({', '.join(egress.allow_hosts) or 'none'}): the proxy refuses every request"
                                " for it, so the rewrite would configure nothing", path=path, field=at)
        scheme, _, rest = target.rpartition("://")
        address, colon, port = rest.rpartition(":")
        try:
            ipaddress.ip_address(address.strip("[]"))
            ok = scheme in ("", "http", "https") and colon and port.isdigit() and 0 < int(port) < 65536
        except ValueError:
            ok = False
        if not ok:
            raise ScenarioError(f"upstream target {target!r}: expected [http://|https://]ip:port (an IP address"
                                " and a port 1-65535)", path=path, field=at)
    for name, addresses in egress.static_hosts.items():
        for j, address in enumerate(addresses):
            try:
                ipaddress.ip_address(address)
            except ValueError:
                raise ScenarioError(f"static host {name!r}: {address!r} is not an IP address", path=path,
                                    field=f"$.egress.static_hosts.{name}[{j}]") from None


def _no_literal_credentials(scenario: Scenario, path: str) -> None:
    for name, value in scenario.env.items():  # by its name, or by its value (what redact_env fingerprints)
        if is_credential(name, scenario.credential_patterns) or looks_secret(value):
            raise ScenarioError(
                f"{name} looks like a credential: a scenario file is kept with every run, so never put a"
                f" secret in it; set {name} in the caller's environment and list it in pass_credentials",
                path=path, field=f"$.env.{name}")


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file.

    Args:
        path: the TOML file.

    Returns:
        The validated, immutable scenario.

    Raises:
        ScenarioError: the file cannot be read, is not UTF-8 TOML (the message names the
            line and column), or does not match the schema (`field` is the JSON path of
            the offending value and the message says what was expected).
    """
    name = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ScenarioError(f"cannot read the scenario: {e.strerror or e}", path=name) from e
    return parse_scenario(data, name)


def read_toml(data: bytes, name: str) -> dict:
    """Decode a TOML file's bytes into a table.

    Raises:
        ScenarioError: not UTF-8, or a TOML syntax error (the message names line and column).
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ScenarioError(f"not UTF-8 text: {e.reason} at byte {e.start}", path=name) from e
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = _TOML_LINE.search(str(e))
        where = f"line {m['line']}, column {m['col']}: " if m else ""
        msg = _TOML_LINE.sub("", str(e)).strip()
        raise ScenarioError(f"TOML syntax error: {where}{msg}", path=name) from e


def parse_scenario(data: bytes, name: str) -> Scenario:
    """Validate a scenario from its bytes (e.g. the copy a run keeps as a blob).

    Args:
        data: the TOML file's bytes.
        name: what to call it in errors (a path, or ``RUN_DIR:scenario``).

    Raises:
        ScenarioError: as `load_scenario`.
    """
    data = read_toml(data, name)
    try:
        scenario = msgspec.convert(data, Scenario)
    except msgspec.ValidationError as e:
        raise _validation_error(e, name) from e
    _check(scenario, name)
    _no_literal_credentials(scenario, name)
    return scenario


def scenario_digest(path: str | Path) -> str:
    """The sha256 of a scenario file's bytes, as 64 lowercase hex digits.

    Raises:
        OSError: the file cannot be read.
    """
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
