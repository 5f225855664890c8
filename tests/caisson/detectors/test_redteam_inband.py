"""Red team, caisson#29 item 1: words that still buy an attempt from infra.in_band@1.

An infrastructure verdict discards an attempt (a study retries it), so it needs evidence
the agent does not control (#29 item 1). Records in, the verdict out: each case is a run
in which every model call the proxy saw for the answer succeeded, and only the agent's own
transcript (`agent.error`, as a parser reads it) says the session failed. No transcript
parser emits ``agent.error`` on main yet, so these are reachable once one does. Each is
``xfail(strict=True)`` on `Bought`; remove the mark once the control holds.
"""

from __future__ import annotations

import pytest

from caisson.detectors import VOID, DetectorConfig
from caisson.detectors.inband import in_band_failure
from ledger import Record
from ledger.events import AgentError, LlmCall, RunAgent, RunLimits, RunStarted, WitnessStarted

OK = LlmCall(provider="anthropic", endpoint="messages", requested_model="claude-sonnet-4-5",
             served_model="claude-sonnet-4-5-20250929")
OVERLOADED = LlmCall(provider="anthropic", endpoint="messages", requested_model="claude-sonnet-4-5",
                     failed="error status 529: overloaded_error: Overloaded")
STARTED = RunStarted(run_id="r", caisson_version="t", agent=RunAgent(name="claude-code", gating="enforced"),
                     limits=RunLimits(network="witnessed"))
PROXY = WitnessStarted(witness="proxy")


class Bought(AssertionError):
    """The agent's words were an infra failure: raised by the one check each test is about."""


def _verdict(*events) -> list[str]:
    records = [Record(seq=i, wall_ns=i, mono_ns=i, source="test", event=e) for i, e in enumerate(events)]
    return [f.kind for f in in_band_failure(records, DetectorConfig())]


def test_the_clis_own_word_that_it_failed_buys_no_retry_when_every_call_succeeded():
    said = AgentError(agent="claude-code", said="result.error_during_execution", cause="agent")
    if "infra_failure" in _verdict(STARTED, PROXY, OK, OK, said):
        raise Bought("an error only the transcript reports, every proxy call a success: retried")


def test_a_failure_the_session_recovered_from_does_not_corroborate_a_later_claim():
    claim = AgentError(agent="claude-code", said="result.is_error", status=400, message="API Error: 400 ...",
                       cause="provider")
    if "infra_failure" in _verdict(STARTED, PROXY, OVERLOADED, OK, OK, claim):
        raise Bought("a 529 retried successfully at the start made an API error claimed at the end an infra failure")


def test_a_tools_call_to_a_bigger_model_before_the_last_voids_the_cell():
    """model.switched@1 holds only the last call to the run's model: a tool's own call to a
    bigger model mid-session (the CLI's key is in its environment) passed it. The proxy now
    says which process held each call's connection, and a call the CLI did not make voids
    the cell (model.foreign_call@1)."""
    from caisson.detectors import run_detectors
    from caisson.detectors.attribution import FOREIGN_CALL
    from caisson.detectors.inband import MODEL_SWITCHED
    from ledger.events import ClientProcess, HttpExchange, ProcessExec, ProcessFork

    started = RunStarted(run_id="r", caisson_version="t", limits=RunLimits(network="witnessed"),
                         agent=RunAgent(name="claude-code", gating="enforced", model="claude-sonnet-4-5"))
    opus = LlmCall(provider="anthropic", endpoint="messages", requested_model="claude-opus-4-1",
                   served_model="claude-opus-4-1-20250805")

    def held(pid: int) -> HttpExchange:  # the exchange of the call after it, its client socket held by pid
        return HttpExchange(method="POST", scheme="https", host="api.anthropic.com", port=443, path="/v1/messages",
                            status=200, client_processes=[ClientProcess(pid=pid, host_pid=1000 + pid, start_time_ns=1)])

    tree = (ProcessExec(pid=10, path="/usr/local/bin/claude"), ProcessFork(pid=27, ppid=10),
            ProcessExec(pid=27, ppid=10, path="/bin/bash"), ProcessFork(pid=33, ppid=27),
            ProcessExec(pid=33, ppid=27, path="/usr/bin/curl"))
    records = [Record(seq=i, wall_ns=i, mono_ns=i, source="test", event=e)
               for i, e in enumerate((started, PROXY, *tree, held(10), OK, held(33), opus, held(10), OK))]
    if not [f for f in run_detectors(records, DetectorConfig())
            if f.effect == VOID and f.detector in (MODEL_SWITCHED, FOREIGN_CALL)]:
        raise Bought("claude-opus-4-1 did the work between two claude-sonnet-4-5 calls: nothing voids the cell")


def test_a_call_to_a_bigger_model_before_the_last_is_a_switch_without_attribution():
    from caisson.detectors.inband import model_switched

    started = RunStarted(run_id="r", caisson_version="t", limits=RunLimits(network="witnessed"),
                         agent=RunAgent(name="claude-code", gating="enforced", model="claude-sonnet-4-5"))
    opus = LlmCall(provider="anthropic", endpoint="messages", requested_model="claude-opus-4-1",
                   served_model="claude-opus-4-1-20250805")
    records = [Record(seq=i, wall_ns=i, mono_ns=i, source="test", event=e)
               for i, e in enumerate((started, PROXY, OK, opus, OK))]
    if not list(model_switched(records, DetectorConfig())):
        raise Bought("claude-opus-4-1 did the work between two claude-sonnet-4-5 calls: no model_switched")
