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

import re
from collections.abc import Iterator

from caisson.detectors._base import INFO, VOID, DetectorConfig, Finding, folded, reads
from caisson.detectors.attribution import ATTRIBUTION_EVENTS, CallOwner, attributed, split_owners
from ledger import Record
from ledger.events import (AgentCompaction, AgentError, AgentModelSwitch, AgentRetry, LlmCall, RunStarted,
                           WitnessStarted)

__all__ = ["IN_BAND", "MODEL_SWITCHED", "SESSION", "SIDE_MODELS", "in_band_failure", "model_switched",
           "session_events"]

IN_BAND = "infra.in_band@1"
MODEL_SWITCHED = "model.switched@1"


@reads(RunStarted, WitnessStarted, LlmCall, AgentError, *ATTRIBUTION_EVENTS)
@folded
@attributed
def in_band_failure(records: list[Record], owners: dict[int, CallOwner] | None,
                    config: DetectorConfig) -> Iterator[Finding]:
    """A run of a real agent that never had a working model, or says its provider failed.

    Only runs of an adapter (``run.started.agent`` names one): a plain command may make no
    model call at all. Evidence first, the agent's word second:

    - the chamber had no network (``run.started.limits.network`` ``none``): no model could
      be reached; infra failure;
    - the proxy witness ran and saw no model call, or no successful one: infra failure,
      with the last failure as the provider said it (the agent cannot act before its first
      call succeeds);
    - the transcript says the session ended on a failure (``agent.error``, terminal, not a
      limit the run set): an infra failure only when the proxy saw the session's last call
      fail for a reason that is not the request's own (a context overflow, a request too
      large: the agent's doing, an outcome); otherwise a ``claimed_error``, void and not
      retried (an earlier failure the session recovered from corroborates nothing, nor
      does a call a tool made fail). With no proxy, it is a claim.

    Yields:
        At most one finding, void: kind ``infra_failure`` or ``claimed_error``.
    """
    foreign, _ = split_owners(owners)  # a call a tool made is not the CLI's
    started: RunStarted | None = None
    started_seq = 0
    proxy = False
    calls: list[tuple[int, LlmCall]] = []
    errors: list[tuple[int, AgentError]] = []
    for record in records:
        event = record.event
        if isinstance(event, RunStarted):
            started, started_seq = event, record.seq
        elif isinstance(event, WitnessStarted) and event.witness == "proxy":
            proxy = True
        elif isinstance(event, LlmCall) and record.seq not in foreign:
            calls.append((record.seq, event))
        elif isinstance(event, AgentError) and event.terminal and event.cause != "limit":
            errors.append((record.seq, event))
    if started is None or started.agent is None or not started.agent.name:
        return
    agent = started.agent.name

    def infra(message: str, evidence: list[int]) -> Finding:
        return Finding(detector=IN_BAND, kind="infra_failure", effect=VOID, evidence=evidence, message=message)

    if started.limits is not None and started.limits.network == "none":
        yield infra(f"{agent} had no route to a model: the chamber had no network (the scenario's [egress]"
                    " allows no provider host)", [started_seq])
        return
    said = errors[-1] if errors else None
    tail = [said[0]] if said else []
    if proxy and not calls:
        yield infra(f"{agent} made no model call through the proxy"
                    + (f"; it said: {_said(said[1])}" if said else ""), [started_seq, *tail])
        return
    if proxy and all(call.failed is not None for _, call in calls):
        failed = [seq for seq, _ in calls]
        yield infra(f"no model call succeeded ({len(calls)} made); the last: {calls[-1][1].failed}"
                    + (f"; {agent} said: {_said(said[1])}" if said else ""), failed + tail)
        return
    if said is None:
        return
    seq, error = said
    side = SIDE_MODELS.get(agent, ())
    main = [(s, c) for s, c in calls if not (side and (c.requested_model or "").startswith(side))]
    last_seq, last = (main or calls)[-1] if calls else (None, None)  # the session's, not a side call's
    if (last is not None and last.failed is not None and error.cause in ("provider", "")
            and _providers_word(last.failed)):
        yield infra(f"{agent} said: {_said(error)}; the proxy saw the session's last call fail: {last.failed}",
                    [seq, last_seq])
        return
    why = ("the last call failed for the request's own reason (an outcome, not the provider's failure):"
           f" {last.failed}" if last is not None and last.failed is not None and _requests_own(last.failed)
           else f"the proxy cannot tell who ended the session's last call ({last.failed})"
           if last is not None and last.failed is not None and not _providers_word(last.failed)
           else f"the failure it names is its own ({error.cause}), not the provider's"
           if last is not None and last.failed is not None
           else f"every model call the proxy saw end the session succeeded ({len(calls)} in all)" if proxy
           else "no proxy witness saw its calls")
    yield Finding(detector=IN_BAND, kind="claimed_error", effect=VOID, evidence=[seq],
                  message=f"{agent} said it failed ({_said(error)}), but {why}: not an answer, and not an"
                  " infrastructure failure either")


_OWN = re.compile(r"prompt is too long|context.{0,24}(?:length|window|limit)|too many tokens|maximum.{0,40}tokens"
                  r"|request (?:entity )?too large|exceeds? the (?:maximum|limit)", re.IGNORECASE)
_STATUS = re.compile(r"^error status (\d{3})")


def _providers_word(failed: str) -> bool:
    """Whether the provider itself failed a call: an HTTP error status (not the request's own
    reason), a stream error event or a failed response. A cut stream, a body cut short or
    no response is not: the client may have closed it (an agent interrupting its own CLI)."""
    if failed.startswith(("stream cut", "response body cut", "no response")):
        return False
    return not _requests_own(failed)


def _requests_own(failed: str) -> bool:
    """Whether a call failed for the request's own reason: a 400, 413 or 422 whose detail says
    the prompt or request was too long (the context the agent built), not the provider's
    failure (overload, rate limit, credentials, a server error, a cut stream)."""
    status = _STATUS.match(failed)
    return status is not None and status[1] in ("400", "413", "422") and _OWN.search(failed) is not None


def _said(error: AgentError) -> str:
    parts = [p for p in (str(error.status) if error.status is not None else None, error.code, error.message) if p]
    return f"{error.said}: " + " ".join(parts)[:300]


SIDE_MODELS: dict[str, tuple[str, ...]] = {
    "claude-code": ("claude-haiku-", "claude-3-5-haiku", "claude-3-haiku"),
}
"""Model name prefixes an adapter's CLI asks for itself beside the run's model, for side
work (Claude Code's "Haiku-class model for background functionality":
``ANTHROPIC_DEFAULT_HAIKU_MODEL``, formerly ``ANTHROPIC_SMALL_FAST_MODEL``, in its model
configuration docs; titles and topic checks, as the scripted model's ``[[background]]``
turns serve). A call for one of them is no switch; any other model is."""


@reads(RunStarted, LlmCall, AgentModelSwitch, *ATTRIBUTION_EVENTS)
@folded
@attributed
def model_switched(records: list[Record], owners: dict[int, CallOwner] | None,
                   config: DetectorConfig) -> Iterator[Finding]:
    """The cell measured another model than the one it was run with.

    - the transcript says the agent switched (``agent.model_switch``: a fallback model, a
      reroute), whatever the proxy saw;
    - the proxy saw a successful call ask for another model than ``run.started.agent.model``
      (the model the run asked the agent to use), by ``model.substituted``'s rule (a dated
      snapshot of the alias is the same model), other than the small models the adapter's
      CLI asks for side work (`SIDE_MODELS`).

    Yields:
        A void ``model_switched`` finding per switch reported, and one per other model asked
        for (every call's record as evidence).
    """
    from caisson.detectors.model import same_model

    foreign, _ = split_owners(owners)  # a call a tool made is not the CLI's
    want: str | None = None
    agent = ""
    asked: dict[str, list[int]] = {}
    for record in records:
        event = record.event
        if isinstance(event, RunStarted):
            want, agent = (event.agent.model or None, event.agent.name) if event.agent else (None, "")
        elif isinstance(event, AgentModelSwitch):
            yield Finding(detector=MODEL_SWITCHED, kind="model_switched", effect=VOID, evidence=[record.seq],
                          message=f"{event.agent} switched from {event.requested or '?'} to {event.used or '?'}"
                          f" ({event.said}{': ' + event.trigger if event.trigger else ''})")
        elif (isinstance(event, LlmCall) and event.failed is None and event.requested_model
              and event.provider != "azure" and record.seq not in foreign):  # Azure's URL names a deployment, not a model
            asked.setdefault(event.requested_model, []).append(record.seq)
    if want is None:
        return
    side = SIDE_MODELS.get(agent, ())
    for model, seqs in asked.items():
        if same_model(want, model) or model.startswith(side):
            continue
        yield Finding(detector=MODEL_SWITCHED, kind="model_switched", effect=VOID, evidence=seqs,
                      message=f"{len(seqs)} model call(s) asked for {model}; the run asked the agent for {want}")


SESSION = "agent.session@1"


@reads(LlmCall, AgentRetry, AgentCompaction, *ATTRIBUTION_EVENTS)
@folded
@attributed
def session_events(records: list[Record], owners: dict[int, CallOwner] | None,
                   config: DetectorConfig) -> Iterator[Finding]:
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
    foreign, _ = split_owners(owners)  # a tool's failed calls are not the session's retries
    for record in records:
        event = record.event
        if isinstance(event, LlmCall):
            if record.seq not in foreign:
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
