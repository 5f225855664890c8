"""`caisson study run`: a study's matrix, end to end, into one verifiable directory.

Order of work (docs/studies.md): plan (cells, refusals, order seed) and the grader check
-> ``study.planned`` -> preflight: one baseline probe per (arm, agent, model), each a
recorded run under ``DIR/baselines/`` (``baseline.measured``; a failed isolation
assertion aborts before any cell), then, for an ``enforced`` claim under an arm that denies
something, the live gating probe (`caisson.gating`; measured ``not_enforced``: that
combination is refused, recorded with its evidence, and the study goes on) -> cells in
the recorded order, each attempt under
``DIR/cells/<cell-id>/<n>/`` with its ``findings.json`` from replay, ``cell.started``
sealed before it is dispatched and ``cell.ended`` binding its ledger's sealed head ->
``study.ended`` (after ``study.aborted`` when the abort rule fired).

Attempts, never best-of: a chamber or agent that fails to start is an infra failure, void
and retried (``infra_retries`` times) as a new attempt; the counting attempt is the first
sealed one that is not an infra failure.

Sessions run on an executor (`caisson.study.executor`): ``local`` records them here, one
after the other; ``ray`` runs as many cells at once as its hosts hold slots, each run signed
by its host's enrolled key and verified on arrival (one that does not verify is moved to
``DIR/quarantine/`` and is an infra failure), and counts ``host_stalled`` per host,
draining a host instead of aborting the study. ``resume`` continues a crashed or killed study in
a new segment of the study ledger: a cell whose attempt verifies closed is not run again;
an unclosed attempt is recorded as such and the cell runs again.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import shutil
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

import msgspec

from caisson.detectors import VOID, Finding, config_from_records, run_detectors
from caisson.detectors import HOST_STALLED, should_abort_study
from caisson.errors import UsageError
from caisson.home import ensure_operator_key
from caisson.replay import BLOB_ROLES, replay_records, verdict_of, write_findings
from caisson.run import new_run_id
from caisson.agents import adapter as get_adapter
from caisson.gating import judge_gating, pick_probe_tool, probe_script, request_tools, verdict_fields
from caisson.study._dispatch import BASELINE_QUESTION, SessionJob, StudySession, derived_scenario
from caisson.study.executor import AllHostsDrained, Executor, LocalExecutor
from caisson.study.plan import StudyPlan, combo_id, plan_study
from caisson.study.preflight import assess_baseline, check_grader
from caisson.study.studyfile import PROVIDERS, load_study, resolve
from caisson.study.studyledger import SealedState, StudyLedger, enrolled_keys, read_study, run_key, state_of
from ledger import BLOBS_DIR, BlobStore, LedgerError, Record, SigningKey, VerifyKey, verify_and_read, verify_ledger
from ledger.events import (BaselineMeasured, CellEnded, CellStarted, Combo, HostDrained, HostKey, HttpExchange,
                           PlannedCell, StudyAborted, StudyEnded, StudyPlanned)

__all__ = ["StudyResult", "run_study", "counting_history", "EXIT_ABORTED"]

EXIT_ABORTED = 1
QUARANTINE_DIR = "quarantine"
"""Under the study directory: runs that came back from a host and did not verify on
arrival, kept for inspection; the study ledger binds none of them."""


class StudyResult(msgspec.Struct, kw_only=True):
    """How a study run ended: ``ended`` or ``aborted`` (with the reason)."""

    out: str
    state: str
    reason: str = ""
    cells: int = 0
    counted: int = 0
    void: int = 0


def counting_history(records) -> dict[str, tuple[list[list[Finding]], list[str]]]:
    """Per host, the voiding findings of each counting attempt and its cell, in the order the
    study ledger's ``cell.ended`` events give them: what a resumed study's stall rule reads,
    as the attempts' verdicts recorded it (a schema <= 15 ledger kept no detector versions:
    its host stalls are named by today's `HOST_STALLED`)."""
    history: dict[str, tuple[list[list[Finding]], list[str]]] = {}
    for record in records:
        e = record.event
        if isinstance(e, CellEnded) and e.counting:
            void = list(e.verdict.void) if e.verdict is not None else []
            void = [msgspec.structs.replace(f, detector=HOST_STALLED) if not f.detector and f.kind == "host_stalled"
                    else f for f in void]
            found, cells = history.setdefault(e.host, ([], []))
            found.append(void)
            cells.append(e.cell_id)
    return history


class _Stop(Exception):
    """A session was refused before it ran: the study stops here, recorded as aborted."""


class _Drained(_Stop):
    """No host is left to run a session (ray: every host drained): the study stops here."""


class _Runner:
    def __init__(self, study_path: Path, out: Path, *, repo: Path, commit: str | None, resume: bool,
                 infra_retries: int, weaken: list[str], around_cell, on_event: Callable[[], None],
                 executor: Executor | None = None):
        self.study_path, self.out = Path(study_path), Path(out)
        self.study, self.scenario, self.data = load_study(study_path)
        self.repo, self.resume, self.weaken = Path(repo), resume, list(weaken)
        self.discovered: dict[tuple[str, str, str | None], list[str]] = {}  # (arm, agent, model) -> tools
        self.refused: set[tuple[str, str, str | None]] = set()  # combos whose gating was measured not_enforced
        self.infra_retries, self.around_cell, self.on_event = infra_retries, around_cell, on_event
        self.key: SigningKey = ensure_operator_key()
        self.commit = commit
        self.executor: Executor = executor or LocalExecutor()
        self.host_keys: list[HostKey] = []  # the enrolled host keys ([]: runs are signed with self.key)
        # per host ("" local): counting cells' findings and ids, in the order they ended (the abort/drain rule)
        self.history: dict[str, list[list[Finding]]] = {}
        self.history_cells: dict[str, list[str]] = {}
        self.drained: set[str] = set()
        self.interrupted = False  # Ctrl-C: stop after the attempt is settled, resumable
        self.stopping = False  # a session was refused (or every host drained): start no further attempt
        self._lock = threading.RLock()  # the study ledger and the histories, under concurrent cells (ray)

    # -- the study ledger ----------------------------------------------------------------

    def emit(self, event) -> None:
        with self._lock:
            self.ledger.append(event)
            self.on_event()

    def _run_key(self, run_dir: Path) -> VerifyKey | None:
        """The key a session's run must verify against: the operator key (local), else the
        enrolled host key its ledger names (None: a key the study did not enroll)."""
        if not self.host_keys:
            return self.key.verify_key
        return run_key(run_dir, enrolled_keys(self.host_keys))

    def start(self) -> tuple[StudyPlan, list]:
        if self.infra_retries < 0:
            raise UsageError("--infra-retries must be 0 or more")
        previous = []
        if self.resume:
            previous = read_study(self.out, self.key.verify_key)
            planned = next((r.event for r in previous if isinstance(r.event, StudyPlanned)), None)
            if planned is None:
                raise UsageError(f"{self.out}: the study ledger has no study.planned to resume")
            if planned.study_sha256 != hashlib.sha256(self.data).hexdigest():
                raise UsageError(f"{self.study_path} changed since the study was planned: resume needs the same file")
            if any(isinstance(r.event, StudyEnded) for r in previous):
                raise UsageError(f"{self.out}: the study has ended; nothing to resume")
            if planned.executor != self.executor.name:
                raise UsageError(f"{self.out}: the study ran with --executor {planned.executor}; resume it with the"
                                 f" same (not {self.executor.name})")
            self.host_keys = list(planned.host_keys)
            self.commit, self.infra_retries, self.weaken = planned.commit, planned.infra_retries, planned.weakened
            plan = StudyPlan(study=planned.study, questions=[], arms=[], repetitions=self.study.repetitions,
                             seed=planned.order_seed, combos=list(planned.combos), refusals=list(planned.refusals),
                             cells=list(planned.cells))
        else:
            if self.out.exists() and any(self.out.iterdir()):
                raise UsageError(f"--out {self.out}: exists and is not empty; pick a new directory (or --resume)")
            self.commit = self._resolve_commit(self.commit or "HEAD")
            seed = self.study.order.seed if self.study.order.seed is not None else secrets.randbits(32)
            plan = plan_study(self.study, self.scenario, seed=seed)
        if not self.resume:  # the grader check: a false key or a lax checklist stops here, before a ledger
            key_file = resolve(self.study_path, self.study.answer_key) if self.study.answer_key else None
            self.grader = check_grader(self.scenario, plan.questions, key_file)
        for combo in plan.combos:  # a real provider's credential comes from the caller: check it first
            if combo.adapter and combo.endpoint.provider:
                credential = combo.endpoint.credential or PROVIDERS[combo.adapter][1]
                if not os.environ.get(credential):
                    raise UsageError(f"agent {combo.agent}: its endpoint is {combo.endpoint.provider}, but"
                                     f" {credential} is not set in the environment")
        if not self.resume:  # last before the ledger: the hosts (ray) join while the driver plans and checks
            self.host_keys = self.executor.host_keys()
        self.executor.enroll(self.host_keys)
        self.ledger = StudyLedger(self.out, self.key, run_id=f"study-{new_run_id()}", resume=self.resume)
        return plan, previous

    def _resolve_commit(self, rev: str) -> str:
        proc = subprocess.run(["git", "-C", str(self.repo), "rev-parse", "--verify", f"{rev}^{{commit}}"],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise UsageError(f"--repo {self.repo} --commit {rev}: not a commit of a git repository:"
                             f" {proc.stderr.strip()[-200:]}")
        return proc.stdout.strip()

    def record_plan(self, plan: StudyPlan) -> list:
        study_sha = self.ledger.put_blob(self.data, "study", "application/toml")
        scenario_file = resolve(self.study_path, self.study.scenario)
        scenario_sha = self.ledger.put_blob(scenario_file.read_bytes(), "scenario", "application/toml")
        for combo in plan.combos:  # what the scripted endpoint played is evidence too
            script = combo.endpoint.script
            if script is None:
                continue
            for qid in (plan.questions if "{question}" in script else [None]):
                path = resolve(self.study_path, script.replace("{question}", qid or ""))
                self.ledger.put_blob(path.read_bytes(), f"model_script {combo.agent} {qid or '*'}", "application/toml")
        grader = self.grader
        self.emit(StudyPlanned(
            study=self.study.name, study_sha256=study_sha, scenario_sha256=scenario_sha, scenario=self.study.scenario,
            repo=str(self.repo.resolve()), commit=self.commit, order_seed=plan.seed,
            combos=list(plan.combos), cells=list(plan.cells), refusals=list(plan.refusals),
            prices=dict(self.study.prices), abort=self.study.abort, infra_retries=self.infra_retries,
            grader=list(grader), weakened=sorted(self.weaken),
            executor=self.executor.name, host_keys=self.host_keys))
        return [g.reason for g in grader if not g.ok]

    # -- sessions ------------------------------------------------------------------------

    def _scenario_for(self, combo: Combo, baseline: bool) -> Path:
        name = combo_id("", combo.agent, combo.model).lstrip("-") + ("--baseline" if baseline else "")
        target = self.out / "scenarios" / f"{name}.toml"
        with self._lock:  # concurrent cells (ray): written once, whole, before any reads it
            if not target.exists():
                derived_scenario(resolve(self.study_path, self.study.scenario), combo, target,
                                 baseline_prompt=self.study.baseline_prompt if baseline else None)
        return target

    def _combo_for_session(self, combo: Combo) -> Combo:
        if combo.endpoint.script:
            script = str(resolve(self.study_path, combo.endpoint.script).resolve())
            return msgspec.structs.replace(combo, endpoint=msgspec.structs.replace(combo.endpoint, script=script))
        return combo

    def _record(self, combo: Combo, session: StudySession):
        """Run one session on the executor: (outcome or None, infra error in words, host)."""
        agent = next(a for a in self.study.agents if a.label == combo.agent)
        job = SessionJob(combo=self._combo_for_session(combo), session=session, scenario=self.scenario,
                         repo=self.repo, commit=self.commit, command=list(agent.command),
                         timeout_s=self.study.timeout_s, study_dir=self.out, weaken=list(self.weaken),
                         discovered=[] if session.baseline else
                         list(self.discovered.get((combo.arm, combo.agent, combo.model), ())),
                         shared_with=sorted({a.adapter for a in self.study.agents if a.adapter}))
        try:
            result = self.executor.run(job, None if session.baseline else self.around_cell)
        except AllHostsDrained as exc:
            raise _Drained(str(exc)) from exc
        if result.refused:  # refused before anything ran (containment, a bad input): not retried
            raise _Stop(f"{'baseline' if session.baseline else 'cell'} {session.run_dir.name}: record refused:"
                        f" {result.refused}")
        problem = result.arrival or (self._arrival_problem(session.run_dir) if self.host_keys else "")
        if problem:  # never a result: set aside, out of the study's run places; an infra failure
            self._quarantine(session.run_dir)
            return None, f"host {result.host}: the run {problem}; set aside under {QUARANTINE_DIR}/", result.host
        if result.outcome is not None and result.outcome.status == "interrupted":  # Ctrl-C: settle, then stop
            self.interrupted = True
        return result.outcome, result.error, result.host

    @staticmethod
    def _read_run(run_dir: Path, key: VerifyKey | None) -> tuple[SealedState | None, list[Record]]:
        """A baseline's or probe's ledger read once: its sealed state (blobs checked too) and its
        verified records; (None, []) without a key (no ledger) or a readable header."""
        if key is None:
            return None, []
        try:
            report, records = verify_and_read(run_dir, key)
        except LedgerError:
            return None, []
        return state_of(report), records

    def _arrival_problem(self, run_dir: Path) -> str:
        """Verify a run that came from a host, on arrival: "" when it verifies (closed or
        not) against the enrolled key its ledger names; else why not."""
        if not (run_dir / "ledger").exists():
            return ""  # nothing was recorded (the chamber did not start): the outcome says why
        key = self._run_key(run_dir)
        if key is None:
            return "is signed by a key the study did not enroll"
        try:
            report = verify_ledger(run_dir, key)
        except LedgerError as exc:
            return f"does not verify on arrival: {exc}"
        if report.status == "tampered":
            return f"does not verify on arrival: seq {report.bad_seq}: {report.reason}"
        return ""

    def _quarantine(self, run_dir: Path) -> None:
        if run_dir.exists():
            target = self.out / QUARANTINE_DIR / run_dir.relative_to(self.out)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(target, ignore_errors=True)
            run_dir.rename(target)

    # -- preflight -----------------------------------------------------------------------

    def preflight(self, plan: StudyPlan, previous: list) -> str:
        measured = set()
        for e in (r.event for r in previous):
            if isinstance(e, BaselineMeasured) and e.status == "refused":
                measured.add((e.arm, e.agent, e.model))
                self.refused.add((e.arm, e.agent, e.model))
            if isinstance(e, BaselineMeasured) and e.status == "ok":
                measured.add((e.arm, e.agent, e.model))
                self.discovered[(e.arm, e.agent, e.model)] = sorted({*e.tools_discovered, *e.tools_requested})
        for combo in plan.combos:
            if (combo.arm, combo.agent, combo.model) in measured:
                continue
            base = Path("baselines") / combo_id(combo.arm, combo.agent, combo.model)
            n = 1
            while (self.out / base / str(n)).exists():
                n += 1
            rel = base / str(n)
            session = StudySession(run_dir=self.out / rel, question_id=BASELINE_QUESTION, baseline=True,
                                   scenario=self._scenario_for(combo, baseline=True))
            try:
                outcome, error, host = self._record(combo, session)
            except _Stop as stop:
                self.emit(BaselineMeasured(arm=combo.arm, agent=combo.agent, model=combo.model, run_dir=str(rel),
                                           status="abort", reason=str(stop)))
                return f"preflight: {stop}"
            key = self._run_key(session.run_dir) if (session.run_dir / "ledger").exists() else None
            state, records = self._read_run(session.run_dir, key)
            static = get_adapter(combo.adapter).static_tools if combo.adapter else ()
            if state is None or state.status != "ok":
                reason = error or f"the baseline ledger did not verify closed ({state.status if state else 'absent'})"
                facts_ok, facts = False, None
            else:
                facts = assess_baseline(records, arm=combo.arm, agent=combo.agent, grant=combo.grant,
                                        deny=combo.deny, static=static, requested=_requested(session.run_dir, records))
                facts_ok, reason = facts.ok, facts.reason
                self.discovered[(combo.arm, combo.agent, combo.model)] = sorted(
                    {*facts.tools_discovered, *facts.tools_requested})
            gating: dict = {}
            status = "ok" if facts_ok else "abort"
            if facts is not None:
                try:
                    gating = self._probe_gating(combo, base, static, facts)
                except _Stop as stop:
                    gating, facts_ok, status, reason = {}, False, "abort", str(stop)
                if gating.get("gating_measured") == "not_enforced":  # the claim fails: refuse this combination
                    status, facts_ok = "refused", True
                    reason = (f"gating: arm {combo.arm}, agent {combo.agent}: claimed enforced, measured not_enforced:"
                              f" {gating['gating_reason']}")
                    self.refused.add((combo.arm, combo.agent, combo.model))
            self.emit(BaselineMeasured(
                arm=combo.arm, agent=combo.agent, model=combo.model, run_id=state.run_id if state else None,
                run_dir=str(rel), ledger_records=state.records if state else 0, ledger_head=state.head if state else "",
                status=status, reason=reason, **gating, host=host,
                tools_discovered=facts.tools_discovered if facts else [],
                tools_requested=facts.tools_requested if facts else [], deny=facts.deny if facts else [],
                floor_tokens=facts.floor_tokens if facts else None, floor_source=facts.floor_source if facts else None))
            if not facts_ok:
                return f"preflight: {reason}"
        return ""

    def _probe_gating(self, combo: Combo, base: Path, static, facts) -> dict:
        """The gating probe of one combination (docs/studies.md): the ``gating_*`` fields of its
        ``baseline.measured``; {} when there is nothing to probe (no adapter, a claim other than
        ``enforced``, or an arm that denies nothing)."""
        if combo.adapter is None:
            return {}
        spec = get_adapter(combo.adapter)
        if spec.gating != "enforced" or not combo.deny:
            return {"gating_claimed": spec.gating}
        # a tool the session never had is refused whatever the deny list: probe one it has
        shown = {*static, *facts.tools_discovered, *facts.tools_requested}
        tool = pick_probe_tool([t for t in combo.deny if t in shown])
        rel = base.with_name(base.name + "--gating")
        n = 1
        while (self.out / rel / str(n)).exists():
            n += 1
        rel = rel / str(n)
        session = StudySession(run_dir=self.out / rel, question_id=BASELINE_QUESTION, baseline=True,
                               scenario=self._scenario_for(combo, baseline=True),
                               model_script=probe_script(combo.model, tool) if tool else None)
        fields = {"gating_claimed": spec.gating, "gating_run_dir": str(rel), "gating_tool": tool}
        if tool is None:
            verdict = judge_gating([], agent=combo.agent, version=spec.version, claimed=spec.gating, tool=None)
            return {**fields, **verdict_fields(verdict), "gating_run_dir": ""}
        outcome, error, _ = self._record(combo, session)
        if self.interrupted:  # Ctrl-C: a cut probe is no verdict; resume probes again
            raise _Stop(f"gating probe {rel}: interrupted")
        if outcome is not None and outcome.status == "infra_failure":  # never ran: no verdict, not a refusal
            raise _Stop(f"gating probe {rel}: infra failure: {outcome.reason or 'the chamber or agent did not start'}")
        key = self._run_key(session.run_dir) if (session.run_dir / "ledger").exists() else None
        state, records = self._read_run(session.run_dir, key)
        if state is None or state.status != "ok":
            raise _Stop(f"gating probe {rel}: " + (error or "the probe ledger did not verify closed"
                                                   f" ({state.status if state else 'absent'})"))
        failed = next((f for f in run_detectors(records, config_from_records(records))
                       if f.kind == "infra_failure" and f.effect == VOID), None)
        if failed is not None:  # the witnesses say the agent never ran: no verdict either way
            raise _Stop(f"gating probe {rel}: infra failure: {failed.message}")
        verdict = judge_gating(records, agent=combo.agent, version=spec.version, claimed=spec.gating, tool=tool)
        return {**fields, **verdict_fields(verdict), "gating_run_id": state.run_id,
                "gating_ledger_records": state.records, "gating_ledger_head": state.head}

    # -- cells ---------------------------------------------------------------------------

    def _attempt_dir(self, cell: PlannedCell, attempt: int) -> Path:
        return Path("cells") / cell.cell_id / str(attempt)

    def _conclude(self, cell: PlannedCell, attempt: int, rel: Path, outcome, error: str, duration_ns: int,
                  host: str = "") -> CellEnded:
        """The ``cell.ended`` of an attempt that recorded: its ledger read once (verified, its
        sealed state, replayed, ``findings.json`` written beside it) and its `Verdict`."""
        run_dir = self.out / rel
        key = self._run_key(run_dir) if (run_dir / "ledger").exists() else None
        if key is None:  # no ledger; or (ray) signed by a key the study did not enroll, which arrival refuses
            return CellEnded(cell_id=cell.cell_id, attempt=attempt, run_dir=str(rel), status="failed",
                             reason=error or ("no ledger was written" if not (run_dir / "ledger").exists()
                                              else "signed by a key the study did not enroll"),
                             infra_failure=True, duration_ns=duration_ns, host=host)
        kept: dict[str, bytes] = {}
        try:
            report, records = verify_and_read(run_dir, key, kept_blobs=kept, keep_roles=BLOB_ROLES)
        except LedgerError as exc:  # not even a header: nothing to bind
            return CellEnded(cell_id=cell.cell_id, attempt=attempt, run_dir=str(rel), status="failed",
                             reason=error or str(exc), infra_failure=True, duration_ns=duration_ns, host=host)
        state = state_of(report)
        result = replay_records(run_dir, report, records, verified_blobs=kept)
        write_findings(run_dir, result)
        verdict = verdict_of(result)
        infra = any(f.kind == "infra_failure" and f.effect == VOID for f in result.findings)  # retried
        infra = infra or (outcome is not None and outcome.status == "infra_failure") or state.status != "ok"
        counting = state.status == "ok" and not infra
        if counting:
            with self._lock:
                self.history.setdefault(host, []).append(verdict.void)
                self.history_cells.setdefault(host, []).append(cell.cell_id)
        status = verdict.status if state.status == "ok" else state.status
        reason = "" if state.status == "ok" and verdict.status != "unverified" else (state.reason or error)
        return CellEnded(cell_id=cell.cell_id, attempt=attempt, run_id=state.run_id, run_dir=str(rel), status=status,
                         verdict=verdict, reason=reason, infra_failure=infra, counting=counting,
                         ledger_records=state.records, ledger_head=state.head, ledger_final=state.final,
                         seal_signature=state.signature, duration_ns=duration_ns, host=host)

    def run_cell(self, cell: PlannedCell, combo: Combo, ended: list[CellEnded], started: set[int]) -> None:
        for attempt in sorted(started - {e.attempt for e in ended}):  # killed mid-attempt: settle it first
            rel = self._attempt_dir(cell, attempt)
            settled = self._conclude(cell, attempt, rel, None, "", 0) if (self.out / rel / "ledger").exists() else None
            if settled is None or settled.status in ("unclosed", "failed", "tampered"):
                settled = CellEnded(cell_id=cell.cell_id, attempt=attempt, run_dir=str(rel), status="unclosed",
                                    reason="the runner stopped during this attempt", infra_failure=True,
                                    run_id=settled.run_id if settled else None,
                                    ledger_records=settled.ledger_records if settled else 0,
                                    ledger_head=settled.ledger_head if settled else "")
            self.emit(settled)
            ended.append(settled)
        attempt = max([0, *started, *(e.attempt for e in ended)])
        while not any(e.counting for e in ended):
            infra = sum(e.infra_failure and e.status != "unclosed" for e in ended)
            if infra > self.infra_retries or self.stopping:
                return
            attempt += 1
            rel = self._attempt_dir(cell, attempt)
            self.emit(CellStarted(cell_id=cell.cell_id, attempt=attempt, run_dir=str(rel)))
            session = StudySession(run_dir=self.out / rel, question_id=cell.question_id,
                                   scenario=self._scenario_for(combo, baseline=False))
            t0 = time.monotonic_ns()
            try:
                outcome, error, host = self._record(combo, session)
            except _Stop as stop:  # refused; or (_Drained) never placed: an infra failure, run again on resume
                drained = isinstance(stop, _Drained)
                self.emit(CellEnded(cell_id=cell.cell_id, attempt=attempt, run_dir=str(rel),
                                    status="failed" if drained else "refused", infra_failure=drained,
                                    reason=str(stop), duration_ns=time.monotonic_ns() - t0))
                raise
            done = self._conclude(cell, attempt, rel, outcome, error, time.monotonic_ns() - t0, host)
            self.emit(done)
            ended.append(done)
            if self.interrupted:
                raise KeyboardInterrupt

    def _restore_history(self, previous: list) -> None:
        for host, (void, cells) in counting_history(previous).items():
            self.history.setdefault(host, []).extend(void)
            self.history_cells.setdefault(host, []).extend(cells)
        for record in previous:
            if isinstance(record.event, HostDrained):
                self.drained.add(record.event.host)
                self.executor.drain(record.event.host)

    def run(self) -> StudyResult:
        plan, previous = self.start()
        try:
            if not self.resume:
                failed = self.record_plan(plan)
                if failed:
                    return self.finish(plan, "preflight: the grader " + " | ".join(failed), [])
            reason = self.preflight(plan, previous)
            if self.interrupted:
                raise KeyboardInterrupt
            if reason:
                return self.finish(plan, reason, [])
            self._restore_history(previous)
            ended: dict[str, list[CellEnded]] = {}
            started: dict[str, set[int]] = {}
            for record in previous:
                e = record.event
                if isinstance(e, CellStarted):
                    started.setdefault(e.cell_id, set()).add(e.attempt)
                elif isinstance(e, CellEnded):
                    ended.setdefault(e.cell_id, []).append(e)
            combos = {(c.arm, c.agent, c.model): c for c in plan.combos}
            todo = [c for c in plan.cells if (c.arm, c.agent, c.model) not in self.refused]  # gating not_enforced
            if isinstance(self.executor, LocalExecutor):
                return self._run_serial(plan, todo, combos, ended, started)
            return self._run_concurrent(plan, todo, combos, ended, started)
        finally:
            if not self.ledger.writer.closed:
                self.ledger.close()

    def _run_serial(self, plan: StudyPlan, todo: list[PlannedCell], combos: dict, ended: dict[str, list[CellEnded]],
                    started: dict[str, set[int]]) -> StudyResult:
        """The local executor: one cell after the other; three host_stalled in a row abort the study."""
        for cell in todo:
            cell_ended = ended.setdefault(cell.cell_id, [])
            before = len(self.history.get("", []))
            try:
                self.run_cell(cell, combos[(cell.arm, cell.agent, cell.model)], cell_ended,
                              started.get(cell.cell_id, set()))
            except _Stop as stop:
                return self.finish(plan, str(stop), [cell.cell_id], ended)
            history = self.history.get("", [])
            if len(history) > before and should_abort_study(history, self.study.abort.host_stalled_in_a_row):
                n = self.study.abort.host_stalled_in_a_row
                stalled = self.history_cells[""][-n:]
                return self.finish(plan, f"{n} host_stalled cells in a row: the host, not the agents, is being"
                                   " measured", stalled, ended)
        return self.finish(plan, "", [], ended)

    def _run_concurrent(self, plan: StudyPlan, todo: list[PlannedCell], combos: dict, ended: dict[str, list[CellEnded]],
                        started: dict[str, set[int]]) -> StudyResult:
        """A distributed executor: as many cells at once as it has slots, in the recorded order of
        dispatch; a host with three host_stalled cells in a row (its own) is drained, recorded."""
        pending, running = deque(todo), {}
        reason, cells = "", []
        with ThreadPoolExecutor(max_workers=64, thread_name_prefix="caisson-cell") as pool:
            try:
                while pending or running:
                    # no slot now (every host lost): one cell waits in Ray's queue for a host to join
                    while pending and not self.stopping and len(running) < max(1, self.executor.slots()):
                        cell = pending.popleft()
                        running[pool.submit(self.run_cell, cell, combos[(cell.arm, cell.agent, cell.model)],
                                            ended.setdefault(cell.cell_id, []),
                                            started.get(cell.cell_id, set()))] = cell
                    if not running:
                        break
                    done, _ = wait(running, return_when=FIRST_COMPLETED)
                    for future in done:
                        cell = running.pop(future)
                        try:
                            future.result()
                        except _Stop as stop:
                            self.stopping = True
                            reason, cells = reason or str(stop), cells or [cell.cell_id]
                            continue
                        counting = next((e for e in ended[cell.cell_id] if e.counting), None)
                        if counting is not None:
                            self._maybe_drain(counting.host)
            except BaseException:  # Ctrl-C: the sessions under way settle (the pool waits), none starts
                self.stopping = True
                raise
        return self.finish(plan, reason, cells, ended)

    def _maybe_drain(self, host: str) -> None:
        n = self.study.abort.host_stalled_in_a_row
        with self._lock:
            history, ids = list(self.history.get(host, [])), list(self.history_cells.get(host, []))
        if host in self.drained or not should_abort_study(history, n):
            return
        self.drained.add(host)
        self.executor.drain(host)
        self.emit(HostDrained(host=host, reason=f"{n} host_stalled cells in a row on this host: the host, not the"
                              " agents, is being measured", cells=ids[-n:]))

    def finish(self, plan: StudyPlan, reason: str, cells: list[str],
               ended: dict[str, list[CellEnded]] | None = None) -> StudyResult:
        ended = ended or {}
        counted = [e for es in ended.values() for e in es if e.counting]
        void = sum(e.status != "clean" for e in counted) + sum(1 for c in plan.cells if c.cell_id in ended
                                                               and not any(e.counting for e in ended[c.cell_id]))
        if reason:
            self.emit(StudyAborted(reason=reason, cells=cells))
        self.emit(StudyEnded(cells=len(plan.cells), counted=len(counted), void=void, aborted=bool(reason)))
        self.ledger.close()
        return StudyResult(out=str(self.out), state="aborted" if reason else "ended", reason=reason,
                           cells=len(plan.cells), counted=len(counted), void=void)


_MODEL_PATHS = ("/v1/messages", "/v1/responses", "/v1/chat/completions")


def _requested(run_dir: Path, records: list) -> list[str]:
    """Every tool a session's model requests offered, from the request bodies the proxy kept."""
    blobs = BlobStore(run_dir / BLOBS_DIR)
    names: set[str] = set()
    for record in records:
        e = record.event
        path = e.path.split("?", 1)[0] if isinstance(e, HttpExchange) else ""
        if path.endswith(_MODEL_PATHS) and e.request_body_sha256 and blobs.check(e.request_body_sha256) is None:
            names.update(request_tools(blobs.get(e.request_body_sha256)))
    return sorted(names)


def run_study(study_path: Path, out: Path, *, repo: Path, commit: str | None = None, resume: bool = False,
              infra_retries: int = 1, weaken: list[str] | tuple[str, ...] = (),
              around_cell: Callable[[Path], contextlib.AbstractContextManager] | None = None,
              on_event: Callable[[], None] = lambda: None, executor: Executor | None = None) -> StudyResult:
    """Run (or resume) a study into ``out``; see the module docstring.

    Args:
        study_path: the study file.
        out: the study directory (``DIR``); new and empty, or a study's with ``resume``.
        repo: the live repository the sandboxes are exported from.
        commit: the commit under test (default HEAD; resolved once, recorded).
        resume: continue the study in ``out`` in a new segment of its study ledger.
        infra_retries: new attempts after an infra failure, per cell.
        weaken: controls weakened on purpose in every session (tests of the preflight only;
            recorded in ``study.planned``).
        around_cell: a context manager factory entered around every cell attempt with its
            run directory (tests: a host staller).
        on_event: called after every study event is sealed (the progress display).
        executor: where sessions run (`caisson.study.executor`); default the local one. It is
            closed when the study returns.

    Returns:
        How it ended.

    Raises:
        ScenarioError: a bad study file (nothing is written).
        UsageError: ``out`` not empty (without ``resume``), nothing to resume, a bad repository.
        ContainmentError: the sandbox holds a question or a leak term (from the first session).
    """
    try:
        return _Runner(study_path, out, repo=repo, commit=commit, resume=resume, infra_retries=infra_retries,
                       weaken=list(weaken), around_cell=around_cell, on_event=on_event, executor=executor).run()
    finally:
        if executor is not None:
            executor.close()
