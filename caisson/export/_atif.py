"""Export a run as a Harbor / Terminal-Bench ATIF trajectory (JSON).

ATIF is the Agent Trajectory Interchange Format of Harbor (RFC 0001,
https://github.com/laude-institute/harbor/blob/main/docs/rfcs/0001-trajectory-format.md;
the schema is harbor's pydantic models, ``harbor.models.trajectories``, version
``ATIF-v1.8`` in harbor 0.26.0). One trajectory per run: a user step with the command,
one agent step per tool call with its observed result, and a last agent step with the
answer. Rules the models enforce beyond the JSON schema, kept here: step ids run 1, 2,
... ; tool calls and metrics only on agent steps; an observation's ``source_call_id``
names a tool call of its own step.

The trajectory is a derived view: ``extra.caisson`` names the ledger it came from (run
id, chain head at the last valid seal, records sealed) and its verification.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import msgspec

from caisson import __version__
from caisson.export._facts import RunFacts
from ledger.events import AgentAnswer, AgentToolCall, AgentToolResult, LlmCall

__all__ = ["ATIF_VERSION", "to_trajectory", "write_atif"]

ATIF_VERSION = "ATIF-v1.8"


def _iso(ns: int) -> str:
    return datetime.datetime.fromtimestamp(ns / 1e9, datetime.UTC).isoformat()


def _tokens(run: RunFacts) -> tuple[int | None, int | None, str | None]:
    """(prompt, completion, served model) summed over the proxy's LLM calls; a figure is
    None when any call lacks it (unknown is never 0)."""
    prompt: int | None = 0
    completion: int | None = 0
    model = None
    calls = 0
    for record in run.records:
        e = record.event
        if isinstance(e, LlmCall):
            calls += 1
            model = e.served_model or e.requested_model or model
            n = e.normalized
            prompt = None if prompt is None or n is None or n.input_tokens is None else prompt + n.input_tokens
            completion = (None if completion is None or n is None or n.output_tokens is None
                          else completion + n.output_tokens)
    if calls == 0:
        return None, None, None
    return prompt, completion, model


def to_trajectory(run: RunFacts) -> dict[str, Any]:
    """The ATIF trajectory of one run, as a JSON-ready dict (None fields left out)."""
    started = run.started
    agent = started.agent if started else None
    prompt, completion, model = _tokens(run)
    first_ns = run.records[0].wall_ns if run.records else 0
    steps: list[dict[str, Any]] = [{
        "step_id": 1, "timestamp": _iso(first_ns), "source": "user",
        "message": " ".join(started.command) if started and started.command else "(no command recorded)",
        "extra": {"caisson_seq": run.records[0].seq if run.records else None},
    }]
    results: dict[str, AgentToolResult] = {}
    for record in run.records:
        if isinstance(record.event, AgentToolResult):
            results.setdefault(record.event.call_id, record.event)
    for record in run.agent_steps():
        e = record.event
        step: dict[str, Any] = {"step_id": len(steps) + 1, "timestamp": _iso(record.wall_ns), "source": "agent",
                                "extra": {"caisson_seq": record.seq}}
        if isinstance(e, AgentToolCall):
            step["message"] = ""
            step["tool_calls"] = [{"tool_call_id": e.call_id, "function_name": e.tool, "arguments": dict(e.input)}]
            result = results.get(e.call_id)
            if result is not None:
                step["observation"] = {"results": [{
                    "source_call_id": e.call_id, "content": result.excerpt,
                    "extra": {"outcome": result.outcome}}]}
                step["extra"]["outcome"] = result.outcome
        elif isinstance(e, AgentAnswer):
            step["message"] = e.text
        else:
            continue  # tool results are observations of their call's step; LLM calls go to metrics
        steps.append(step)
    findings = run.findings or {}
    trajectory: dict[str, Any] = {
        "schema_version": ATIF_VERSION,
        "session_id": run.run_id or Path(run.run_dir).name,
        "agent": {"name": agent.name if agent and agent.name else "command",
                  "version": agent.version if agent and agent.version else "unknown", "model_name": model},
        "steps": steps,
        "final_metrics": {"total_prompt_tokens": prompt, "total_completion_tokens": completion,
                          "total_steps": len(steps)},
        "notes": "derived from a caisson ledger; extra.caisson names its chain head",
        "extra": {"caisson": {
            "caisson_version": __version__, "run_dir": run.run_dir, "run_id": run.run_id,
            "ledger_head": run.ledger_head, "ledger_records": run.ledger_records,
            "key_fingerprint": run.key_fingerprint, "verified": run.verified, "verify_reason": run.verify_reason,
            "status": findings.get("status"), "score": findings.get("score"),
            "findings": findings.get("findings", []), "question_id": started.question_id if started else None,
        }},
    }
    return _drop_none(trajectory)


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


def write_atif(runs: list[RunFacts], out: Path) -> list[Path]:
    """Write one trajectory per run: to ``out`` itself for one run (a ``.json`` path),
    else to ``out/<run_id>.json``. Returns the files written."""
    out = Path(out)
    if len(runs) == 1 and out.suffix == ".json":
        targets = [out]
    else:
        out.mkdir(parents=True, exist_ok=True)
        targets = [out / f"{run.run_id or Path(run.run_dir).name}.json" for run in runs]
    for run, target in zip(runs, targets, strict=True):
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(msgspec.json.format(msgspec.json.encode(to_trajectory(run))) + b"\n")
    return targets
