"""In-band failures: a run that looks complete but never had a working model.

An agent CLI often exits 0 after its provider failed: Claude Code ends an API error with a
``result`` line whose ``is_error`` is true and whose ``result`` text is the error; Codex
prints ``turn.failed``; a session with no credentials answers "Not logged in". Scored, that
text is a wrong answer and the cell a 0; it is an infrastructure failure (void, retried as
a new attempt in a study). A verdict that discards an attempt needs evidence the agent
does not control, so the proxy witness decides where it saw the calls (``llm.call.failed``)
and the recorder where the chamber had no network at all; the agent's own account
(``agent.error``) is weighed against them, and an error it claims that the proxy never
saw is a finding of its own, void but not an infrastructure failure (an agent cannot buy
itself another attempt with words).

``model.switched``: the agent says it answered with another model (a fallback), or the
proxy saw it ask for one other than the run's: the cell's numbers are another model's.
``agent.session``: the retries and compactions a session explains itself, shown, so a
report can count them and compare the arms.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from caisson.detectors._base import INFO, VOID, DetectorConfig, Finding, reads
from caisson.detectors.attribution import ATTRIBUTION_EVENTS, cli_calls
from ledger import Record
from ledger.events import (AgentAnswer, AgentCompaction, AgentError, AgentModelSwitch, AgentRetry, LlmCall, RunStarted,
                           WitnessStarted)

__all__ = ["IN_BAND", "MODEL_SWITCHED", "SESSION", "in_band_failure", "model_switched", "session_events"]

IN_BAND = "infra.in_band@1"
MODEL_SWITCHED = "model.switched@1"


@reads(RunStarted, WitnessStarted, LlmCall, AgentError, AgentAnswer, *ATTRIBUTION_EVENTS)
def in_band_failure(records: Iterable[Record], config: DetectorConfig) -> Iterator[Finding]:
    """A run of a real agent that never had a working model, or that says it failed.

    Only runs of an adapter (``run.started.agent`` names one): a plain command may make no
    model call at all. In order:

    - the chamber had no network (``run.started.limits.network`` ``none``): no model could
      be reached; infra failure;
    - the proxy witness ran and saw no model call, or no successful one: infra failure,
      with the last failure as the provider said it;
    - the proxy saw the last call fail and the agent gave no answer: infra failure;
    - the transcript reports a failure (``agent.error``, terminal, not a limit the run set):
      with a failed call seen by the proxy, infra failure; with every call seen succeeding,
      a ``claimed_error`` (void, not retried); with no proxy, the agent's own failure
      (``cause`` agent) is an infra failure and a provider failure it claims is not.

    Yields:
        At most one finding, void: kind ``infra_failure`` or ``claimed_error``.
    """
    records = list(records)
    mine = cli_calls(records)  # with attribution, only the calls of the agent's CLI
    started: RunStarted | None = None
    started_seq = 0
    proxy = False
    calls: list[tuple[int, LlmCall]] = []
    errors: list[tuple[int, AgentError]] = []
    answered = False
    for record in records:
        event = record.event
        if isinstance(event, RunStarted):
            started, started_seq = event, record.seq
        elif isinstance(event, WitnessStarted) and event.witness == "proxy":
            proxy = True
        elif isinstance(event, LlmCall) and (mine is None or record.seq in mine):
            calls.append((record.seq, event))
        elif isinstance(event, AgentError) and event.terminal and event.cause != "limit":
            errors.append((record.seq, event))
        elif isinstance(event, AgentAnswer):
            answered = True
    if started is None or not started.agent.get("name"):
        return
    agent = started.agent["name"]

    def infra(message: str, evidence: list[int]) -> Finding:
        return Finding(detector=IN_BAND, kind="infra_failure", effect=VOID, evidence=evidence, message=message)

    if started.limits.get("network") == "none":
        yield infra(f"{agent} had no route to a model: the chamber had no network (the scenario's [egress]"
                    " allows no provider host)", [started_seq])
        return
    failed = [(seq, call) for seq, call in calls if call.failed is not None]
    said = errors[-1] if errors else None
    if proxy:
        if not calls:
            yield infra(f"{agent} made no model call through the proxy"
                        + (f"; it said: {_said(said[1])}" if said else ""), [started_seq] + ([said[0]] if said else []))
            return
        if len(failed) == len(calls):
            seq, call = failed[-1]
            yield infra(f"no model call succeeded ({len(calls)} made); the last: {call.failed}"
                        + (f"; {agent} said: {_said(said[1])}" if said else ""),
                        [s for s, _ in failed] + ([said[0]] if said else []))
            return
        last_seq, last = calls[-1]
        if last.failed is not None and not answered:
            yield infra(f"the session ended on a failed model call: {last.failed}"
                        + (f"; {agent} said: {_said(said[1])}" if said else ""),
                        [last_seq] + ([said[0]] if said else []))
            return
    if said is None:
        return
    seq, error = said
    if failed:
        fseq, call = failed[-1]
        yield infra(f"{agent} said: {_said(error)}; the proxy saw the call fail: {call.failed}", [seq, fseq])
    elif error.cause == "agent" or (not proxy and error.cause == ""):
        yield infra(f"{agent} failed: {_said(error)}", [seq])
    elif proxy:
        yield Finding(detector=IN_BAND, kind="claimed_error", effect=VOID, evidence=[seq],
                      message=f"{agent} said its provider failed ({_said(error)}), but every model call the proxy"
                      f" saw succeeded ({len(calls)}): not an answer, and not an infrastructure failure either")
    else:
        yield Finding(detector=IN_BAND, kind="claimed_error", effect=VOID, evidence=[seq],
                      message=f"{agent} said its provider failed ({_said(error)}); no proxy witness saw its calls")


def _said(error: AgentError) -> str:
    parts = [p for p in (str(error.status) if error.status is not None else None, error.code, error.message) if p]
    return f"{error.said}: " + " ".join(parts)[:300]


@reads(RunStarted, LlmCall, AgentModelSwitch, *ATTRIBUTION_EVENTS)
def model_switched(records: Iterable[Record], config: DetectorConfig) -> Iterator[Finding]:
    """The cell measured another model than the one it was run with.

    - the transcript says the agent switched (``agent.model_switch``: a fallback model, a
      reroute), whatever the proxy saw;
    - the last successful call the proxy saw (the one the answer came from) asked for
      another model than ``run.started.agent.model``, the model the run asked the agent to
      use, by ``model.substituted``'s rule (a dated snapshot of the alias is the same
      model). Calls before it may ask for a small model of the agent's own (a CLI's side
      calls), so only the last is held to the run's model.

    Yields:
        A void ``model_switched`` finding per switch reported, and one for the last call.
    """
    from caisson.detectors.model import same_model

    records = list(records)
    mine = cli_calls(records)  # with attribution, only the calls of the agent's CLI
    want: str | None = None
    last: tuple[int, LlmCall] | None = None
    for record in records:
        event = record.event
        if isinstance(event, RunStarted):
            want = event.agent.get("model") or None
        elif isinstance(event, AgentModelSwitch):
            yield Finding(detector=MODEL_SWITCHED, kind="model_switched", effect=VOID, evidence=[record.seq],
                          message=f"{event.agent} switched from {event.requested or '?'} to {event.used or '?'}"
                          f" ({event.said}{': ' + event.trigger if event.trigger else ''})")
        elif (isinstance(event, LlmCall) and event.failed is None and event.requested_model
              and (mine is None or record.seq in mine)):
            last = (record.seq, event)
    if want is None or last is None or last[1].provider == "azure":  # Azure's URL names a deployment
        return
    seq, call = last
    if not same_model(want, call.requested_model):
        yield Finding(detector=MODEL_SWITCHED, kind="model_switched", effect=VOID, evidence=[seq],
                      message=f"the last model call asked for {call.requested_model}; the run asked the agent for"
                      f" {want}")


SESSION = "agent.session@1"


@reads(LlmCall, AgentRetry, AgentCompaction)
def session_events(records: Iterable[Record], config: DetectorConfig) -> Iterator[Finding]:
    """What a session explains itself, shown (never voiding): its retries and compactions.

    A retry is counted once whichever witness saw it: the proxy's failed model calls that
    another call followed (evidence the agent does not control), or the agent's
    ``agent.retry`` reports, whichever count is larger (a report beyond the proxy's count
    is one the proxy did not see: a connection that never reached it). A compaction is
    the agent's ``agent.compaction``: a silent stretch before it is the agent's own work.

    Yields:
        One ``retry`` finding per retry and one ``compaction`` finding per compaction, info;
        a study's report counts them per cell and compares the arms' rates.
    """
    calls: list[tuple[int, LlmCall]] = []
    said: list[tuple[int, AgentRetry]] = []
    for record in records:
        event = record.event
        if isinstance(event, LlmCall):
            calls.append((record.seq, event))
        elif isinstance(event, AgentRetry):
            said.append((record.seq, event))
        elif isinstance(event, AgentCompaction):
            before = f"{event.tokens_before} tokens" if event.tokens_before is not None else "?"
            after = f"{event.tokens_after} tokens" if event.tokens_after is not None else "?"
            yield Finding(detector=SESSION, kind="compaction", effect=INFO, evidence=[record.seq],
                          message=f"{event.agent} compacted its context ({event.trigger or 'trigger unknown'}):"
                          f" {before} -> {after}")
    seen = [(seq, call) for i, (seq, call) in enumerate(calls[:-1]) if call.failed is not None]
    for seq, call in seen:
        yield Finding(detector=SESSION, kind="retry", effect=INFO, evidence=[seq],
                      message=f"a model call failed and another followed (proxy): {call.failed}")
    for seq, retry in said[len(seen):]:
        status = f" {retry.status}" if retry.status is not None else ""
        yield Finding(detector=SESSION, kind="retry", effect=INFO, evidence=[seq],
                      message=f"{retry.agent} retried (attempt {retry.attempt or '?'} of {retry.max_attempts or '?'},"
                      f"{status} {retry.code or ''}): {retry.said}".replace(" ,", ","))
