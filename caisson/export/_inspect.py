"""Export runs as an Inspect AI eval log (samples = cells).

The log is a derived view: each sample's metadata names the ledger it came from (run id,
chain head at the last valid seal, records sealed) and the verification result against
the trusted key. Field meanings follow inspect_ai's log schema (`inspect_ai.log.EvalLog`,
https://inspect.aisi.org.uk/eval-logs.html); `inspect_ai.log.read_eval_log` reads it back
and `inspect view` shows it.
"""

from __future__ import annotations

import datetime
import math
from pathlib import Path
from typing import Any

import msgspec

from caisson import __version__
from caisson.export._facts import RunFacts
from ledger.events import AgentAnswer, AgentToolCall, AgentToolResult, LlmCall, RunArm

__all__ = ["to_eval_log", "write_inspect"]


def _iso(ns: int) -> str:
    return datetime.datetime.fromtimestamp(ns / 1e9, datetime.UTC).isoformat()


def _arm(arm: RunArm) -> dict[str, Any]:
    """The arm as the sample's metadata shows it: its name, grant, withhold and deny list,
    even empty, and its strategies and their catalog when the scenario has some."""
    shown = {"name": arm.name, "grant": arm.grant, "withhold": arm.withhold, "deny": arm.deny}
    return shown | ({"strategies": arm.strategies, "catalog": arm.catalog} if arm.catalog else {})


def _messages(run: RunFacts) -> list:
    from inspect_ai.model import ChatMessageAssistant, ChatMessageTool, ChatMessageUser
    from inspect_ai.tool import ToolCall, ToolCallError

    started = run.started
    prompt = " ".join(started.command) if started is not None else ""
    messages: list = [ChatMessageUser(content=prompt or "(no command recorded)")]
    pending: list[ToolCall] = []
    for record in run.agent_steps():
        e = record.event
        if isinstance(e, AgentToolCall):
            pending.append(ToolCall(id=e.call_id, function=e.tool, arguments=dict(e.input)))
        elif isinstance(e, AgentToolResult):
            if pending:
                messages.append(ChatMessageAssistant(content="", tool_calls=pending))
                pending = []
            error = None if e.outcome == "executed" else ToolCallError(
                type="approval" if e.outcome == "refused" else "unknown", message=f"{e.outcome}: {e.excerpt}")
            messages.append(ChatMessageTool(content=e.excerpt, tool_call_id=e.call_id, function=e.tool or None,
                                            error=error))
        elif isinstance(e, AgentAnswer):
            messages.append(ChatMessageAssistant(content=e.text, tool_calls=pending or None))
            pending = []
    if pending:
        messages.append(ChatMessageAssistant(content="", tool_calls=pending))
    return messages


def _usage(run: RunFacts) -> dict[str, Any]:
    """Per served model: tokens summed over the proxy's LLM calls (normalised figures;
    a call without usage makes the total unknown, so that model's figures are left out)."""
    from inspect_ai.model import ModelUsage

    totals: dict[str, list[int | None]] = {}
    for record in run.records:
        e = record.event
        if not isinstance(e, LlmCall):
            continue
        model = e.served_model or e.requested_model or "unknown"
        n = e.normalized
        row = totals.setdefault(model, [0, 0, 0])
        for i, value in enumerate((n.input_tokens, n.output_tokens, n.total_tokens) if n else (None, None, None)):
            row[i] = None if row[i] is None or value is None else row[i] + value
    return {model: ModelUsage(input_tokens=r[0], output_tokens=r[1], total_tokens=r[2])
            for model, r in totals.items() if None not in r}


def _sample(run: RunFacts, index: int):
    from inspect_ai.log import EvalSample
    from inspect_ai.model import ModelOutput
    from inspect_ai.scorer import Score

    findings = run.findings or {}
    grade = findings.get("grade") or {}
    score = findings.get("score")
    started, ended = run.started, run.ended
    explanation = findings.get("status", "not replayed")
    if findings.get("reasons"):
        explanation += ": " + "; ".join(findings["reasons"])
    metadata = {
        "caisson": {
            "run_dir": run.run_dir,
            "run_id": run.run_id,
            "ledger_head": run.ledger_head,
            "ledger_records": run.ledger_records,
            "key_fingerprint": run.key_fingerprint,
            "verified": run.verified,
            "verify_reason": run.verify_reason,
            "status": findings.get("status"),
            "findings": findings.get("findings", []),
            "score_if_clean": findings.get("score_if_clean"),
            "arm": _arm(started.arm) if started and started.arm else {},
            "agent": msgspec.to_builtins(started.agent) if started and started.agent else {},
        }
    }
    answer = run.answer
    sample = EvalSample(
        id=run.run_id or f"run-{index}",
        epoch=1,
        input=" ".join(started.command) if started else "",
        target=grade.get("required_met", []) + grade.get("required_missed", []) or "",
        messages=_messages(run),
        output=ModelOutput.from_content(model="caisson", content=answer or ""),
        scores={"caisson": Score(value=math.nan if score is None else score, answer=answer,
                                 explanation=explanation, metadata={"grade": grade})},
        metadata=metadata,
        model_usage=_usage(run),
        started_at=_iso(run.records[0].wall_ns) if run.records else None,
        completed_at=_iso(run.records[-1].wall_ns) if run.records else None,
        total_time=(ended.duration_ns / 1e9) if ended else None,
    )
    if started and started.question_id:
        sample.metadata["question_id"] = started.question_id
    return sample


def to_eval_log(runs: list[RunFacts], *, task: str):
    """The `inspect_ai.log.EvalLog` of ``runs`` (one sample per run).

    Args:
        runs: the runs, as `read_run` gives them.
        task: the task name (the study's or run's directory name).
    """
    from inspect_ai.log import EvalConfig, EvalDataset, EvalLog, EvalResults, EvalScore, EvalSpec, EvalStats

    samples = [_sample(run, i) for i, run in enumerate(runs)]
    scored = [s.scores["caisson"].value for s in samples if not math.isnan(s.scores["caisson"].value)]
    models = sorted({m for s in samples for m in s.model_usage}) or ["none"]
    created = samples[0].started_at if samples and samples[0].started_at else _iso(0)
    spec = EvalSpec(
        created=created, task=task, dataset=EvalDataset(name=task, samples=len(samples)), model=models[0],
        config=EvalConfig(),
        metadata={"caisson_version": __version__, "derived_from": "caisson ledgers; each sample's metadata.caisson"
                  " names its ledger head", "ledgers": [{"run_id": r.run_id, "ledger_head": r.ledger_head,
                                                          "ledger_records": r.ledger_records,
                                                          "verified": r.verified} for r in runs]},
    )
    results = EvalResults(total_samples=len(samples), completed_samples=len(samples), scores=[EvalScore(
        name="caisson", scorer="caisson replay", scored_samples=len(scored),
        unscored_samples=len(samples) - len(scored))])
    status = "success" if all(r.verified == "ok" for r in runs) else "error"
    return EvalLog(status=status, eval=spec, results=results, stats=EvalStats(started_at=created,
                   completed_at=samples[-1].completed_at or created if samples else created), samples=samples)


def write_inspect(runs: list[RunFacts], out: Path, *, task: str) -> Path:
    """Write the eval log to ``out`` (``.eval`` or ``.json`` by its suffix); returns it."""
    from inspect_ai.log import write_eval_log

    write_eval_log(to_eval_log(runs, task=task), str(out))
    return out


