"""The study ledger (caisson study run) and its backfill ledger; docs/studies.md."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from ledger.events._base import Gating, _Event
from ledger.events._network import LlmUsage

__all__ = [
    "AbortRules", "BackfillStarted", "BaselineMeasured", "CellEnded", "CellStarted", "Combo", "ElicitationSettings",
    "Endpoint",
    "GraderCheck", "HostKey", "NonEmpty", "PlannedCell", "Price", "Refusal", "StudyAborted", "StudyEnded",
    "StudyPlanned", "StudyResumed", "TokenBackfilled",
]

NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]

# --- the parts of study.planned ---------------------------------------------------------
# Every key a study ledger of schema 6-14 wrote has its field; a key absent from an older
# ledger reads as the default its readers gave it. The study file (caisson/study/studyfile.py)
# is parsed straight into `Endpoint`, `ElicitationSettings`, `AbortRules` and `Price`: they
# forbid unknown fields.


class Endpoint(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Where an agent's model calls go: a scripted endpoint, or a real provider.

    Exactly one of ``script`` (a model script served by `caisson model serve`, fresh for
    every session) and ``provider`` (a real host reached through the egress proxy, with
    the credential taken from the caller's environment) is given; neither for a command.
    """

    script: NonEmpty | None = None  # a model script, relative to the study file; "{question}": per question
    provider: NonEmpty | None = None  # a provider host, e.g. api.anthropic.com (reached through the proxy)
    credential: NonEmpty | None = None  # the variable holding its key; None: the adapter's (ANTHROPIC_API_KEY)


class ElicitationSettings(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True,
                          forbid_unknown_fields=True):
    """How a study asks an agent (its ``elicitation``): what an adapter lets a study set
    (caisson.study.studyfile.ELICITATION). Not `Elicitation`, how the answer comes back.
    Written as the map schema 6-16 wrote: a key unset is absent."""

    max_turns: Annotated[int, msgspec.Meta(ge=1)] | None = None  # the most agent turns; None: the adapter's default

    def text(self) -> str:
        """The settings set, as ``key=value, ...``; "" when none is."""
        return ", ".join(f"{k}={v}" for k, v in msgspec.structs.asdict(self).items() if v is not None)


class PlannedCell(msgspec.Struct, frozen=True, kw_only=True):
    """One cell of a study's matrix: a run of one agent on one question under one arm."""

    cell_id: str  # arm--agent[--model]--question--rN, safe as a directory name
    arm: str
    agent: str
    model: str | None = None  # None: a plain command
    question_id: str
    repetition: int  # 1..repetitions


class Combo(msgspec.Struct, frozen=True, kw_only=True):
    """One (arm, agent, model) a study runs: how the agent is gated, asked and reached."""

    arm: str
    agent: str
    adapter: str | None = None  # None: a plain command
    model: str | None = None
    gating: Gating = "ungated"
    elicitation: ElicitationSettings = ElicitationSettings()
    endpoint: Endpoint = Endpoint()  # the empty Endpoint for a command
    grant: list[str] = []  # tools the arm grants, by the agent's own names
    withhold: list[str] = []  # tools always denied
    deny: list[str] = []  # the static deny list (preflight unions the discovered surface)
    cells: int = 0  # cells planned


class Refusal(msgspec.Struct, frozen=True, kw_only=True):
    """One (arm, agent, model) a study will not run, and why: a study's plan records one per
    refused combination, and a run's plan (`caisson.run.RunPlan.refusal`) holds the same value
    for its one cell (the tools it would deny are the plan's arm's ``deny``)."""

    arm: str
    agent: str
    model: str | None = None
    gating: Gating = "ungated"
    kind: Literal["cannot", "not_yet"]  # cannot: ungated; not_yet: not_enforced
    reason: str = ""  # one line for humans
    cells: int = 0  # cells that would have run


class Price(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A model's price as the study's author states it (none is built in)."""

    input_usd_per_mtok: Annotated[float, msgspec.Meta(ge=0)]  # US dollars per million input tokens
    output_usd_per_mtok: Annotated[float, msgspec.Meta(ge=0)]  # US dollars per million output tokens


class AbortRules(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """When a study stops before its matrix is done."""

    host_stalled_in_a_row: Annotated[int, msgspec.Meta(ge=1)] = 3  # counting cells voided by host.stalled


class GraderCheck(msgspec.Struct, frozen=True, kw_only=True):
    """The grader on one question before a study spends anything: the scores (0..1; None:
    unscored) of the answer key's, an empty and a known-bad answer."""

    question_id: str
    key: float | None = None
    empty: float | None = None
    bad: float | None = None
    ok: bool = False  # the key scores full, the empty and the bad answers do not
    reason: str = ""  # why not ok


class HostKey(msgspec.Struct, frozen=True, kw_only=True):
    """A host key the operator enrolled (``--executor ray``)."""

    host: str = ""  # the host's label ("host name/node id", or "enrolled:FILE")
    public_key: str  # hex of the raw 32-byte Ed25519 public key


class StudyPlanned(_Event, tag="study.planned", frozen=True, kw_only=True):
    """A study's plan, first event of its study ledger: what will run, and what will not."""

    study: str  # the study's name
    study_sha256: str  # blob of the study file's bytes (role "study")
    scenario_sha256: str = ""  # blob of the scenario file's bytes (role "scenario")
    scenario: str = ""  # the scenario path as the study file gives it
    repo: str | None = None  # live repository path on the host
    commit: str | None = None  # full commit hash under test
    order_seed: int | None = None  # seed of the shuffled cell order; None: the order as planned
    combos: list[Combo] = []  # per (arm, agent, model) that runs
    cells: list[PlannedCell] = []  # the matrix in run order
    refusals: list[Refusal] = []  # per refused (arm, agent, model)
    prices: dict[str, Price] = {}  # model -> its price, as the study gives them
    abort: AbortRules = AbortRules()
    infra_retries: int = 1  # attempts after an infra failure, per cell
    grader: list[GraderCheck] = []  # per question
    weakened: list[str] = []  # controls weakened on purpose (tests only): never a clean study
    executor: str = "local"  # local | ray (docs/studies.md, "Executors")
    # The host keys the operator enrolled (ray): every run of the study must be signed by one
    # of them. []: the runs are signed with the study ledger's own key (local).
    host_keys: list[HostKey] = []


class StudyResumed(_Event, tag="study.resumed", frozen=True, kw_only=True):
    """First event of a continuation segment: names the last sealed state of the one before."""

    previous_run_id: str  # the previous segment's ledger run id
    previous_records: int  # records covered by its last seal
    previous_head: str  # hex chain head at its last seal
    previous_final: bool = False  # whether it had been closed cleanly


class BaselineMeasured(_Event, tag="baseline.measured", frozen=True, kw_only=True):
    """The preflight probe session of one (arm, agent, model), before any cell."""

    arm: str
    agent: str
    model: str | None = None
    run_id: str | None = None  # the probe run's id
    run_dir: str = ""  # relative to the study directory
    ledger_records: int = 0  # records covered by the probe ledger's last seal
    ledger_head: str = ""  # hex chain head at that seal
    status: str = ""  # ok | abort | refused (gating measured not_enforced: its cells do not run)
    reason: str = ""  # why the study aborts here, naming tool, arm and agent
    tools_discovered: list[str] = []  # the surface the agent reported (agent.tools)
    tools_requested: list[str] = []  # the tools its model requests offered (proxy witness: request bodies)
    deny: list[str] = []  # the deny list of this combination's cells (static union discovered, minus grant)
    floor_tokens: int | None = None  # the session's total tokens (input + output); None: not measured
    floor_source: str | None = None  # where floor_tokens comes from, e.g. "claude-code result.usage"
    # The gating probe (caisson/gating/probe.py), run when the agent claims ``enforced`` and the
    # arm denies something; status ``refused``: the claim was measured ``not_enforced``.
    gating_claimed: str | None = None  # the adapter's claim; None: no adapter
    gating_measured: str | None = None  # enforced | not_enforced | ungated; None: not probed
    gating_tool: str | None = None  # the denied tool the probe's model asked for
    gating_outcome: str | None = None  # what became of that call (refused | executed | unknown ...)
    gating_run_id: str | None = None  # the probe run's id
    gating_run_dir: str = ""  # relative to the study directory
    gating_ledger_records: int = 0  # records covered by the probe ledger's last seal
    gating_ledger_head: str = ""  # hex chain head at that seal
    gating_evidence: list[int] = []  # seqs of the probe run's records the verdict rests on
    gating_reason: str = ""  # the verdict in words
    host: str = ""  # where the probe ran ("host name/node id" under ray; "" local)


class CellStarted(_Event, tag="cell.started", frozen=True, kw_only=True):
    """An attempt of a cell is about to be dispatched (sealed before it is)."""

    cell_id: str
    attempt: int  # 1, 2, ... per cell
    run_dir: str = ""  # where the attempt's run goes, relative to the study directory


Effect = Literal["void", "score_null", "info"]
"""What a finding does to its cell: void (it cannot be scored, never 0), score_null (the
answer keeps its score_if_clean and scores null) or info (visible, no effect)."""


class Finding(msgspec.Struct, frozen=True, kw_only=True):
    """One thing a detector found in a run, with the records it rests on."""

    detector: str  # "name@version"
    kind: str  # e.g. "leak", "outside_tree", "env_inheritance", "host_stalled", "witness_gap"
    effect: Effect
    message: str
    evidence: list[int] = []  # sequence numbers of the records it rests on


VerdictStatus = Literal["clean", "void", "unverified"]


class Verdict(msgspec.Struct, frozen=True, kw_only=True):
    """What the detectors and the checklist made of one run: the outcome of a cell's attempt.

    One function computes it from a replay (`caisson.replay.verdict_of`): the runner when it
    records ``cell.ended``, and the report again with today's detectors, which says where
    the two disagree.
    """

    status: VerdictStatus  # unverified: the ledger did not verify closed (nothing of it is scored)
    score: float | None = None  # the checklist score, 0.0-1.0 (None: void, unverified, unscored, leak backstop)
    void: list[Finding] = []  # the findings that voided the run, in order ([] unless status is void)
    detectors: list[str] = []  # name@version of every detector that judged it ([]: recorded before schema 16)

    def reasons(self) -> list[str]:
        """Why the run is void: one ``kind: message`` line per voiding finding."""
        return [f"{f.kind}: {f.message}" if f.kind else f.message for f in self.void]


AttemptStatus = Literal["", "clean", "void", "unverified", "unclosed", "tampered", "failed", "refused"]
"""How an attempt ended: its verdict's status when its ledger verified closed; else the
ledger's state (``unclosed``, ``tampered``), ``failed`` (no ledger the study can use) or
``refused`` (record refused the session). "" only in ledgers that never set it."""


def _legacy_findings(text: str) -> list[Finding]:
    """Schema 6-15's ``void_reason`` of a judged attempt ("kind: message", one per line)."""
    found = []
    for line in text.splitlines():
        kind, sep, message = line.partition(": ")
        if sep and kind.isidentifier():
            found.append(Finding(detector="", kind=kind, effect="void", message=message))
        elif line:
            found.append(Finding(detector="", kind="", effect="void", message=line))
    return found


class CellEnded(_Event, tag="cell.ended", frozen=True, kw_only=True):
    """An attempt of a cell ended; binds its ledger's sealed state into the study ledger.

    Schema 6-15 wrote the verdict as ``score`` and ``void_reason`` (the voiding findings as
    text, one per line, or the error of an attempt that was not judged); decoding folds them
    into ``verdict`` and ``reason``, with the detector versions unknown.
    """

    cell_id: str
    attempt: int
    run_id: str | None = None  # None: no ledger was written (the chamber never started)
    run_dir: str = ""  # relative to the study directory
    status: AttemptStatus = ""
    verdict: Verdict | None = None  # None: the attempt was not judged (no ledger, refused, the runner stopped)
    reason: str = ""  # why an attempt has no verdict, or why its ledger is not closed ("" otherwise)
    infra_failure: bool = False  # void because the chamber or agent failed to start (retried)
    counting: bool = False  # this attempt is the cell's counting one (first sealed, not infra)
    ledger_records: int = 0  # records covered by the cell ledger's last seal
    ledger_head: str = ""  # hex chain head at that seal
    ledger_final: bool = False  # whether that seal is the final one (a cleanly closed ledger)
    seal_signature: str = ""  # hex Ed25519 signature of that seal
    duration_ns: int = 0  # the attempt's duration as the runner saw it, ns
    host: str = ""  # where the attempt ran ("host name/node id" under ray; "" local or never placed)
    legacy_void_reason: str | None = msgspec.field(default=None, name="void_reason")
    legacy_score: float | None = msgspec.field(default=None, name="score")
    """Schema 6-15's names (see the class docstring), read from older ledgers and folded on
    decode; never written."""

    def explanation(self) -> str:
        """Why the attempt is not clean, as lines: its verdict's voiding findings (``kind:
        message``), then its ``reason``; "" for a clean attempt."""
        return "\n".join([*(self.verdict.reasons() if self.verdict is not None else []), *filter(None, [self.reason])])

    def __post_init__(self) -> None:
        text, score = self.legacy_void_reason, self.legacy_score
        if text is None and score is None:
            return
        msgspec.structs.force_setattr(self, "legacy_void_reason", None)
        msgspec.structs.force_setattr(self, "legacy_score", None)
        if self.verdict is not None:
            return
        if self.status in ("clean", "void", "unverified") and self.run_id is not None:
            void = _legacy_findings(text or "") if self.status == "void" else []
            msgspec.structs.force_setattr(self, "verdict", Verdict(status=self.status, score=score, void=void))
            if self.status != "void" and text:
                msgspec.structs.force_setattr(self, "reason", text)
        elif text and not self.reason:
            msgspec.structs.force_setattr(self, "reason", text)


class StudyAborted(_Event, tag="study.aborted", frozen=True, kw_only=True):
    """The study stopped before its matrix was done."""

    reason: str
    cells: list[str] = []  # the cells behind the reason (e.g. three stalled in a row)


class StudyEnded(_Event, tag="study.ended", frozen=True, kw_only=True):
    """The study's last event: counts over its cells."""

    cells: int = 0  # cells planned
    counted: int = 0  # cells with a counting attempt
    void: int = 0  # counting attempts that are void, plus cells with none
    aborted: bool = False


# --- backfill (the backfill ledger of a study: caisson study backfill; docs/studies.md) ----


class BackfillStarted(_Event, tag="backfill.started", frozen=True, kw_only=True):
    """First event of a backfill ledger segment: what it was computed from."""

    study_head: str  # hex chain head of the study ledger's last seal when the backfill read it
    previous_run_id: str = ""  # the previous backfill segment's ledger run id ("" for the first)
    previous_records: int = 0  # records covered by its last seal
    previous_head: str = ""  # hex chain head at that seal
    parsers: list[str] = []  # "name@version" of the session-file parsers this backfill ran
    caisson_version: str = ""


class TokenBackfilled(_Event, tag="token.backfilled", frozen=True, kw_only=True):
    """A first-party token figure derived offline from the session files a run collected,
    for a cell or baseline whose live figure was missing or only proxy-observed."""

    target: Literal["cell", "baseline"]
    cell_id: str = ""  # the cell (target cell)
    arm: str = ""  # the baseline's arm, agent and model (target baseline); also set for a cell
    agent: str = ""
    model: str | None = None
    run_id: str  # the run the files come from: a cell's counting attempt or a baseline probe
    run_dir: str  # relative to the study directory
    ledger_head: str  # hex chain head of that run's last seal, as the study ledger binds it
    token_source: str  # e.g. "claude-code session files (messages[].usage)"
    parser: str  # "name@version" of the parser that read the files
    usage: dict[str, Any] | None = None  # the summed usage as the files report it
    normalized: LlmUsage | None = None  # its normalised view: total = input + output (tokens)
    cost_usd: float | None = None  # as the files report it
    blobs: list[str] = []  # sha256 hex of the session-file blobs the figure was derived from
    previous_total: int | None = None  # the figure it stands in for (tokens), None: not measured
    previous_source: str = ""  # that figure's source, or why it was null
