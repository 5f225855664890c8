"""Synthetic study cells: a signed run directory shaped like an agent cell (benchmarks, tests).

A cell ledger as `caisson record` writes one for an agent on the scripted model: the
manifest (question, agent, arm), the scenario and answer as blobs, the sandbox, a
strace-like stream (`tests._fixtures.synthetic.strace_like`), the proxy's
``http.exchange`` (its bodies kept as blobs, so replay re-derives the call) and
``llm.call`` per model turn with the agent's session header, and
the agent's first-party ``agent.usage``. Deterministic in its arguments; wall times are
passed in, never read from a clock.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import msgspec

from caisson._paths import CONFIG_HOME, SANDBOX_PATH
from caisson.chamber import INJECTION_SWITCHES
from caisson.model import render_turn
from caisson.model import Turn, Usage
from tests._fixtures.synthetic import strace_like
from collectors.proxy import rederive_llm_call
from ledger import BlobStore, LedgerWriter, SigningKey
from ledger.events import (
    AgentAnswer,
    AgentUsage,
    BlobStored,
    ExcludedPath,
    HttpExchange,
    LlmUsage,
    ProcessExec,
    RunAgent,
    RunArm,
    RunEnded,
    RunLimits,
    RunStarted,
    SandboxBuilt,
    WitnessStarted,
    WitnessStopped,
)

__all__ = ["CellSpec", "ENV", "SCENARIO", "write_cell"]

ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "PWD": SANDBOX_PATH, "HOME": CONFIG_HOME, **INJECTION_SWITCHES}
"""The agent's start environment as the chamber pins it (clean for `env.inheritance`)."""

SCENARIO = b'''
name = "synthetic-study"
answer_file = "ANSWER.md"

[[questions]]
id = "q-context"
kind = "locate"
prompt = "In which file is the `Context` class of this toolkit defined?"
evidence = ["src/click/core.py"]
required = [{ subject = "Context", pattern = "src/click/core.py" }]

[[exclusions]]
category = "answer_key"
globs = ["benchmark/**"]
'''
"""A one-question scenario every synthetic cell keeps as its ``scenario`` blob."""


class CellSpec(msgspec.Struct, frozen=True, kw_only=True):
    """What one synthetic cell looks like.

    Attributes:
        run_id: the run's id (and the directory's name, by convention).
        agent, arm: recorded in the manifest (the arm's grant is what detectors enforce).
        answer: the agent's answer text (graded against `SCENARIO`'s question).
        turns: model calls, each with ``tokens_in`` input and ``tokens_out`` output tokens.
        sessions: session ids, cycled over the calls (two or more make the cell ambiguous).
        first_party: write the agent's own ``agent.usage`` (the sum of the calls).
        strace_events: strace-like events before the model calls.
        seed: seeds the strace-like stream.
        live_input_tokens: the input tokens the live ``llm.call`` of each turn records, as a
            parser with a bug would have written them (None: what its bodies give, as live).
        request_bytes: each request body's size in bytes, at least: a system prompt and tool
            definitions are added until it is reached, as an agent's request carries them
            (Claude Code's, in the cell `make demo` records: about 44,000 bytes). 0: the
            bare question, about 150 bytes.
        streamed: each request asks for a stream, and each response is the scripted model's
            event stream of the turn (`caisson.model.render_turn`: 9 events, about 1,300
            bytes; Claude Code's calls in `make demo` get such streams, about 930 bytes each);
            else one JSON body.
    """

    run_id: str
    agent: str = "claude-code"
    arm: str = "read-only"
    answer: str = "`Context` is defined in src/click/core.py:234."
    turns: int = 3
    tokens_in: int = 1200
    tokens_out: int = 150
    sessions: tuple[str, ...] = ("session-1",)
    first_party: bool = True
    strace_events: int = 200
    seed: int = 7
    live_input_tokens: int | None = None
    request_bytes: int = 0
    streamed: bool = False


_TOOL = {"description": "Reads a file of the working tree and returns its lines, numbered. " * 4,
         "input_schema": {"type": "object", "properties": {"path": {"type": "string"}, "offset": {"type": "integer"}},
                          "required": ["path"]}}
"""One tool definition of a padded request (`CellSpec.request_bytes`), as the Messages API
takes them (name, description, input_schema)."""


def _request(turn: int, size: int, stream: bool = False) -> bytes:
    """A Messages API request body of at least ``size`` bytes (the bare question when it is
    already that long): tool definitions, then a system prompt, fill the rest."""
    body: dict = {"model": "claude-sonnet-4-5", "max_tokens": 1024, "stream": stream,
                  "messages": [{"role": "user", "content": f"turn {turn}: where is Context defined?"}]}
    bare = len(msgspec.json.encode(body))
    if size <= bare:
        return msgspec.json.encode(body)
    tool = len(msgspec.json.encode({"name": "tool_00", **_TOOL})) + 1
    tools = (size - bare) // 2 // tool  # about half the padding
    if tools:
        body["tools"] = [{"name": f"tool_{i:02d}", **_TOOL} for i in range(tools)]
    filled = len(msgspec.json.encode(body))
    prompt = "You are a coding agent working in a repository; answer from the files you read. "
    body["system"] = (prompt * (max(0, size - filled) // len(prompt) + 1))[: max(0, size - filled)]
    return msgspec.json.encode(body)


def _exchange(spec: CellSpec, turn: int, headers: list[tuple[str, str]]
              ) -> tuple[HttpExchange, tuple[tuple[bytes, str], tuple[bytes, str]]]:
    """One model turn as the proxy keeps it: the Messages API request and response bodies
    (Anthropic's shape: https://docs.anthropic.com/en/api/messages) and the exchange naming
    their blobs, so replay re-derives the same ``llm.call`` from them."""
    request = _request(turn, spec.request_bytes, spec.streamed)
    content_type = "application/json"
    if spec.streamed:
        reply = render_turn("messages", Turn(text=f"turn {turn}", usage=Usage(input=spec.tokens_in,
                                                                            output=spec.tokens_out)),
                            model="claude-sonnet-4-5", stream=True, seq=spec.seed * 100 + turn)
        response = reply.payload()
        content_type = dict(reply.headers)["content-type"]
    else:
        response = msgspec.json.encode({
            "id": f"msg_{spec.seed:08x}{turn:04x}", "type": "message", "role": "assistant",
            "model": "claude-sonnet-4-5", "content": [{"type": "text", "text": f"turn {turn}"}],
            "stop_reason": "end_turn", "usage": {"input_tokens": spec.tokens_in, "output_tokens": spec.tokens_out}})
    exchange = HttpExchange(method="POST", scheme="https", host="api.anthropic.com", port=443, path="/v1/messages",
                            status=200, request_headers=headers, response_headers=[("content-type", content_type)],
                            request_bytes=len(request), response_bytes=len(response),
                            request_body_sha256=hashlib.sha256(request).hexdigest(),
                            response_body_sha256=hashlib.sha256(response).hexdigest())
    return exchange, ((request, "http.request_body"), (response, "http.response_body"))


def write_cell(run_dir: Path, spec: CellSpec, key: SigningKey, *, start_ns: int = 1_767_225_600_000_000_000) -> Path:
    """Write one synthetic cell's ledger and blobs into ``run_dir`` (created).

    Returns:
        ``run_dir``.

    Raises:
        FileExistsError: ``run_dir`` already holds a ledger.
        ValueError: a model turn the proxy's assembly makes no ``llm.call`` of (a bug here).
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    if (run_dir / "ledger").exists():
        raise FileExistsError(f"{run_dir}: already holds a ledger")
    blobs = BlobStore(run_dir / "blobs")
    clock = [start_ns, 1_000_000_000]

    def at() -> dict[str, int]:
        clock[0] += 1_000
        clock[1] += 1_000
        return {"wall_ns": clock[0], "mono_ns": clock[1]}

    with LedgerWriter(run_dir / "ledger", run_id=spec.run_id, key=key, blobs=blobs, flush_interval_s=3600,
                      created_ns=start_ns) as w:
        w.append(RunStarted(run_id=spec.run_id, caisson_version="synthetic", question_id="q-context",
                            agent=RunAgent(name=spec.agent, gating="enforced"),
                            arm=RunArm(name=spec.arm, grant=["Read", "Grep", "Glob"], deny=["Bash"]),
                            limits=RunLimits(wall_seconds=600), env=ENV), source="recorder", **at())
        w.append(BlobStored(sha256=blobs.put(SCENARIO), size_bytes=len(SCENARIO), role="scenario"),
                 source="recorder", **at())
        w.append(SandboxBuilt(path=SANDBOX_PATH, commit="c" * 40, tree_digest="d" * 64,
                              excluded=[ExcludedPath(path="benchmark/questions.toml", category="answer_key")]),
                 source="recorder", **at())
        # the proxy's endpoint, which the strace-like stream connects to (tests._fixtures.synthetic)
        w.append(WitnessStarted(witness="proxy", detail={"listen": "10.89.0.2:3128"}), source="proxy", **at())
        w.append(ProcessExec(pid=1, host_pid=40_001, path="/usr/local/bin/claude", argv=["claude", "-p", "..."],
                             cwd=SANDBOX_PATH, env=ENV), source="strace", **at())
        for wall, mono, event in strace_like(spec.strace_events, seed=spec.seed, start_ns=clock[0]):
            clock[0], clock[1] = wall, mono
            w.append(event, source="strace", wall_ns=wall, mono_ns=mono)
        for turn in range(spec.turns):
            session = spec.sessions[turn % len(spec.sessions)] if spec.sessions else None
            headers = [("content-type", "application/json")]
            if session is not None:
                headers.append(("X-Claude-Code-Session-Id", session))
            exchange, bodies = _exchange(spec, turn, headers)
            for data, role in bodies:
                streamed = spec.streamed and role == "http.response_body"
                w.append(BlobStored(sha256=blobs.put(data), size_bytes=len(data), role=role,
                                    media_type="text/event-stream" if streamed else "application/json"),
                         source="proxy", **at())
            call, why = rederive_llm_call(exchange, *bodies)  # the proxy's own assembly, as live
            if call is None:
                raise ValueError(f"cell {spec.run_id}, turn {turn}: the synthetic exchange gives no llm.call: {why}")
            if spec.live_input_tokens is not None and call.normalized is not None:
                wrong = spec.live_input_tokens
                call = msgspec.structs.replace(call, normalized=msgspec.structs.replace(
                    call.normalized, input_tokens=wrong, total_tokens=wrong + (call.normalized.output_tokens or 0)))
            w.append(exchange, source="proxy", **at())
            w.append(call, source="proxy", **at())
        w.append(AgentAnswer(agent=spec.agent, text=spec.answer), source="agent", **at())
        if spec.first_party:
            n_in, n_out = spec.turns * spec.tokens_in, spec.turns * spec.tokens_out
            w.append(AgentUsage(agent=spec.agent, token_source="claude-code result.usage",
                                usage={"input_tokens": n_in, "output_tokens": n_out},
                                normalized=LlmUsage(input_tokens=n_in, output_tokens=n_out, total_tokens=n_in + n_out,
                                                    rule="anthropic")), source="agent", **at())
        answer = spec.answer.encode()
        w.append(BlobStored(sha256=blobs.put(answer), size_bytes=len(answer), role="answer"), source="recorder",
                 **at())
        w.append(WitnessStopped(witness="proxy", events=4 * spec.turns), source="proxy", **at())
        w.append(RunEnded(exit_code=0, duration_ns=10**9), source="recorder", **at())
    return run_dir
