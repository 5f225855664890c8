"""Detectors: pure projections over a run's records that yield findings.

`DEFAULT_DETECTORS` is the registry replay runs; each entry is (name@version, function).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from caisson.detectors._base import (
    INFO,
    SCORE_NULL,
    VOID,
    Detector,
    DetectorConfig,
    Effect,
    Finding,
    Fold,
    config_from_records,
    fold_of,
    folded,
    reads,
    reads_of,
)
from caisson.detectors._runner import Routed, Streamed, one_pass, route, route_for
from caisson.detectors.attribution import ATTRIBUTION_EVENTS, FOREIGN_CALL, foreign_calls, foreign_model_call
from caisson.detectors.containment import (
    AGENT_CONFIG,
    DENIED_SYSCALL,
    EXCLUDED_READ,
    OUTSIDE_TREE,
    PATH_UNJUDGED,
    agent_config,
    denied_syscall,
    excluded_read,
    outside_tree,
    path_unjudged,
)
from caisson.detectors.crosscheck import WITNESS_DISAGREEMENT, witness_disagreement
from caisson.detectors.processes import EVASION, UNSEEN_PROCESS, evasion, unseen_process
from caisson.detectors.inband import IN_BAND, MODEL_SWITCHED, SESSION, in_band_failure, model_switched, session_events
from caisson.detectors.environment import ENV_INHERITANCE, env_inheritance
from caisson.detectors.health import (
    HOST_STALLED,
    INFRA_FAILURE,
    WITNESS_GAP,
    host_stalled,
    infra_failure,
    should_abort_study,
    witness_gap,
)
from caisson.detectors.agents import ISOLATION, TOKENS, TOOL_ESCAPE, isolation, tokens_cross_check, tool_escape
from caisson.detectors.model import (
    MODEL_SUBSTITUTED,
    UNRECOGNISED_CALL,
    model_substituted,
    same_model,
    unrecognised_model_call,
)
from caisson.detectors.tool_audit import TOOL_AUDIT, tool_audit, tool_audit_status
from caisson.detectors.network import (
    BYPASS_ATTEMPT,
    DENIED_EGRESS,
    UNEXPLAINED_FLOW,
    UNPOLICED_TUNNEL,
    bypass_attempt,
    denied_egress,
    unexplained_flow,
    unpoliced_tunnel,
)
from ledger import Record

__all__ = [
    "ATTRIBUTION_EVENTS",
    "DEFAULT_DETECTORS",
    "Detector",
    "DetectorConfig",
    "Effect",
    "Finding",
    "Fold",
    "HOST_STALLED",
    "INFO",
    "SCORE_NULL",
    "VOID",
    "config_from_records",
    "fold_of",
    "folded",
    "foreign_calls",
    "reads",
    "reads_of",
    "route",
    "route_for",
    "Routed",
    "Streamed",
    "run_detectors",
    "same_model",
    "should_abort_study",
    "tool_audit_status",
]

DEFAULT_DETECTORS: tuple[tuple[str, Detector], ...] = (
    (EXCLUDED_READ, excluded_read),
    (OUTSIDE_TREE, outside_tree),
    (PATH_UNJUDGED, path_unjudged),
    (DENIED_SYSCALL, denied_syscall),
    (AGENT_CONFIG, agent_config),
    (ENV_INHERITANCE, env_inheritance),
    (HOST_STALLED, host_stalled),
    (WITNESS_GAP, witness_gap),
    (WITNESS_DISAGREEMENT, witness_disagreement),
    (UNSEEN_PROCESS, unseen_process),
    (EVASION, evasion),
    (INFRA_FAILURE, infra_failure),
    (IN_BAND, in_band_failure),
    (DENIED_EGRESS, denied_egress),
    (BYPASS_ATTEMPT, bypass_attempt),
    (UNPOLICED_TUNNEL, unpoliced_tunnel),
    (UNEXPLAINED_FLOW, unexplained_flow),
    (TOOL_ESCAPE, tool_escape),
    (TOOL_AUDIT, tool_audit),
    (ISOLATION, isolation),
    (TOKENS, tokens_cross_check),
    (MODEL_SUBSTITUTED, model_substituted),
    (MODEL_SWITCHED, model_switched),
    (FOREIGN_CALL, foreign_model_call),
    (UNRECOGNISED_CALL, unrecognised_model_call),
    (SESSION, session_events),
)


def run_detectors(records: Sequence[Record], config: DetectorConfig,
                  detectors: Iterable[tuple[str, Detector]] = DEFAULT_DETECTORS) -> list[Finding]:
    """Run each detector over the run's records; findings in registry order.

    The records are walked once and routed by event type to the detectors that declared
    it (`reads`; see `caisson.detectors._runner`): the findings are the same as running
    each detector alone over every record.
    """
    return one_pass(records, config, detectors)
