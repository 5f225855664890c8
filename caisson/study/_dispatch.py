"""One session of a study (a cell's attempt or a baseline probe): what it needs
(`SessionJob`), its record options, the model endpoint it talks to, the one call to
`caisson.run.record`, and how it went (`SessionResult`).

`dispatch` is the only place a study calls the recorder, so the plan stage
(`caisson.run.plan`) can take its place in one spot. `run_session_here` records a job in
this process, wherever the executor (`caisson.study.executor`) placed it: the local
executor's process, a Ray host's worker. This module imports the recorder; the executor
interface does not, so that a ray study connects to its cluster before it imports it.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import msgspec

from caisson.errors import CaissonError, ChamberError, UsageError
from caisson.model import scripted_model
from caisson.run import default_syscall_witness
from caisson.run import RecordOptions, RunOutcome, default_witnesses, record
from caisson.scenario import Egress, Scenario
from caisson.study.studyfile import PROVIDERS
from ledger.events import Combo

__all__ = ["BASELINE_QUESTION", "SCRIPTED_KEY", "SessionJob", "SessionResult", "StudySession", "dispatch",
           "derived_scenario", "run_session_here", "session_options"]

BASELINE_QUESTION = "caisson-baseline"
"""The id of the baseline probe's question, added to the baseline scenario."""
SCRIPTED_KEY = "sk-caisson-scripted-endpoint"
"""The credential handed to an agent talking to the scripted endpoint: not a secret."""
_BASELINE_SCRIPT = '''name = "study-baseline"
[[turns]]
text = "ready"
usage = { input = 10, output = 2 }
[[background]]
match = { model_contains = "haiku" }
text = "{}"
usage = { input = 1, output = 1 }
'''


class StudySession(msgspec.Struct, frozen=True, kw_only=True):
    """What one recorded session of a study is: where, which question, which scenario.

    Named for the study: not the run's `caisson.run._session.PreparedRun` (the live engine,
    writer and witnesses one recording runs with); a plan of one recording, never persisted."""

    run_dir: Path
    question_id: str
    scenario: Path  # the (derived) scenario file it records with
    baseline: bool = False
    model_script: str | None = None  # the scripted model's TOML for this session (the gating probe)


class SessionJob(msgspec.Struct, frozen=True, kw_only=True):
    """Everything one session needs, wherever it is recorded (paths are the driver's)."""

    combo: Combo  # the combination, its scripted endpoint's path made absolute
    session: StudySession
    scenario: Scenario  # the study's scenario (its egress)
    repo: Path  # the live repository; under ray it must exist at the same path on every host
    commit: str
    command: list[str]
    timeout_s: float | None
    study_dir: Path
    weaken: list[str] = []
    discovered: list[str] = []
    shared_with: list[str] = []  # the adapters of the study's agents, who share its arms


class SessionResult(msgspec.Struct, kw_only=True):
    """How one session went, as the executor saw it.

    ``outcome`` None with ``error``: an infra failure before or around the recording (the
    chamber failed, the host was lost, the run arrived altered); ``refused``: the recorder
    refused the session (containment, a bad input): not retried, the study stops.
    """

    outcome: RunOutcome | None = None
    error: str = ""
    refused: str = ""
    host: str = ""  # where it ran: "" local; "host name/node id" under ray
    arrival: str = ""  # why the run directory that came back is not what the host sent ("": it is)


def derived_scenario(scenario_file: Path, combo: Combo, target: Path, *, baseline_prompt: str | None = None) -> Path:
    """Write the scenario a combination's sessions record with; its path.

    The scenario's own bytes, with the agent's model and elicitation (``[agent]``), the
    credential it passes (``pass_credentials``) and, for a baseline, the probe question
    added, so each run keeps as its blob exactly what it ran under.
    """
    text = Path(scenario_file).read_text()
    head, tail = "", ""
    if combo.adapter is not None:
        credential = combo.endpoint.credential or PROVIDERS[combo.adapter][1]
        head = f"pass_credentials = [{json.dumps(credential)}]\n"
        tail += "\n[agent]\n"
        if combo.model:
            tail += f"model = {json.dumps(combo.model)}\n"
        if combo.elicitation.max_turns:
            tail += f"max_turns = {combo.elicitation.max_turns}\n"
    if baseline_prompt is not None:
        tail += f"\n[[questions]]\nid = {json.dumps(BASELINE_QUESTION)}\nprompt = {json.dumps(baseline_prompt)}\n"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(head + text + "\n" + tail)
    return target


@contextlib.contextmanager
def session_options(combo: Combo, session: StudySession, *, scenario: Scenario, repo: Path, commit: str,
                    command: list[str], timeout_s: float | None, study_dir: Path,
                    weaken: list[str], discovered: Iterable[str] = (), shared_with: Iterable[str] = ()
                    ) -> Iterator[RecordOptions]:
    """The record options of one session, with its model endpoint up while they are used.

    A scripted endpoint is a fresh `caisson model serve` per session (a script plays its
    turns once); a provider is reached through the egress proxy with the caller's credential.

    Raises:
        UsageError: a provider endpoint whose credential is not in the caller's environment.
    """
    with contextlib.ExitStack() as stack:
        env: dict[str, str] = {}
        egress = None
        if combo.adapter is not None:
            host, credential = PROVIDERS[combo.adapter]
            credential = combo.endpoint.credential or credential
            if session.model_script is not None:  # a probe runs on the scripted endpoint, whatever the study's
                script = session.run_dir.parent / f"{session.run_dir.name}-model.toml"
                script.parent.mkdir(parents=True, exist_ok=True)
                script.write_text(session.model_script)
                address = stack.enter_context(scripted_model(script))
                egress = Egress(allow_hosts=[host], upstream={host: f"http://{address}"})
                env[credential] = SCRIPTED_KEY
            elif combo.endpoint.script:
                script = Path(combo.endpoint.script.replace("{question}", session.question_id))
                if session.baseline:
                    script = study_dir / "scenarios" / "baseline-model.toml"
                    script.write_text(_BASELINE_SCRIPT)
                address = stack.enter_context(scripted_model(script))
                egress = Egress(allow_hosts=[host], upstream={host: f"http://{address}"})
                env[credential] = SCRIPTED_KEY
            elif combo.endpoint.provider:
                host = combo.endpoint.provider
                if not os.environ.get(credential):
                    raise UsageError(f"agent {combo.agent}: its endpoint is {host}, but {credential} is not set"
                                     " in the environment")
                egress = msgspec.structs.replace(scenario.egress,
                                                 allow_hosts=sorted({*scenario.egress.allow_hosts, host}))
            else:
                raise UsageError(f"agent {combo.agent}: its endpoint names neither a script nor a provider")
        yield RecordOptions(command=[] if combo.adapter else list(command), scenario=session.scenario, repo=repo,
                            commit=commit, out=session.run_dir, question=session.question_id,
                            agent=combo.adapter, arm=combo.arm if combo.adapter else None, env=env, egress=egress,
                            timeout_s=timeout_s, weaken=list(weaken),
                            discovered_tools=list(discovered) if combo.adapter else [],
                            arm_shared_with=list(shared_with) if combo.adapter else [])


def dispatch(options: RecordOptions, *, around: Callable[[Path], contextlib.AbstractContextManager] | None = None
             ) -> RunOutcome:
    """Record one session: the study's one call to the recorder.

    Args:
        options: the session's record options.
        around: a context manager factory entered around the recording with the run
            directory (tests: a host staller); None: nothing.

    Raises:
        As `caisson.run.record`.
    """
    if not options.syscall_witness_why:  # the strongest witness shown to work on this host
        choice = default_syscall_witness(say=lambda line: print(f"caisson study: {line}", file=sys.stderr))
        options = msgspec.structs.replace(options, syscall_witness=choice.witness, syscall_witness_why=choice.why)
    with around(options.out) if around is not None else contextlib.nullcontext():
        return record(options, witnesses=default_witnesses(weaken=options.weaken, syscall=options.syscall_witness))


def run_session_here(job: SessionJob, around: Callable[[Path], contextlib.AbstractContextManager] | None = None
                     ) -> SessionResult:
    """Record one session in this process (the local executor; a ray host's task)."""
    with session_options(job.combo, job.session, scenario=job.scenario, repo=job.repo, commit=job.commit,
                         command=list(job.command), timeout_s=job.timeout_s, study_dir=job.study_dir,
                         weaken=list(job.weaken), discovered=job.discovered, shared_with=job.shared_with) as options:
        try:
            return SessionResult(outcome=dispatch(options, around=around))
        except ChamberError as exc:
            return SessionResult(error=f"the chamber failed: {exc}")
        except CaissonError as exc:  # refused before anything ran (containment, a bad input)
            return SessionResult(refused=str(exc))
