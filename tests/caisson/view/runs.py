"""Run directories for the view's tests: real ledgers written with `LedgerWriter`."""

from __future__ import annotations

from pathlib import Path

from caisson.replay import replay_runs
from ledger import BlobStore, LedgerWriter, SigningKey, VerifyKey
from ledger.events import (
    AgentAnswer,
    AgentToolCall,
    AgentToolResult,
    DnsQuery,
    ExcludedPath,
    FileOpen,
    HttpExchange,
    LlmCall,
    LlmUsage,
    ProcessExec,
    ProcessExit,
    RunAgent,
    RunEnded,
    RunStarted,
    SandboxBuilt,
)

T0 = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z, ns
LEAK_SEQ = 5  # the seq of the excluded read in `leaky_run`


def leaky_run(run_dir: Path, key: SigningKey, trusted: VerifyKey, *, filler: int = 0) -> Path:
    """A closed run whose agent reads the answer key; replayed, so findings.json is beside it.

    ``filler`` adds that many strace file reads after the leak (for paging).
    """
    run_dir.mkdir(parents=True)
    events = [
        RunStarted(run_id=run_dir.name, caisson_version="test", command=["sh", "-c", "cat answers/key.md"],
                   agent=RunAgent(name="command")),
        SandboxBuilt(path="/work/sandbox", commit="0" * 40, tree_digest="0" * 64, file_count=3,
                     excluded=[ExcludedPath(path="answers/key.md", category="answer_key")]),
        ProcessExec(pid=1, ppid=0, path="/bin/sh", argv=["sh", "-c", "cat answers/key.md"]),
        ProcessExec(pid=2, ppid=1, path="/bin/cat", argv=["cat", "answers/key.md"]),
        DnsQuery(name="api.anthropic.com", qtype="A", answers=["10.0.0.2"]),
        FileOpen(pid=2, path="/work/sandbox/answers/key.md", flags="O_RDONLY", result=3),
        HttpExchange(method="POST", scheme="https", host="api.anthropic.com", port=443, path="/v1/messages",
                     status=200, request_bytes=120, response_bytes=300),
        LlmCall(provider="anthropic", endpoint="messages", requested_model="claude-x", served_model="claude-x-1",
                usage={"input_tokens": 12, "output_tokens": 7}, exchange_seq=6,
                normalized=LlmUsage(input_tokens=12, output_tokens=7, total_tokens=19)),
        AgentToolCall(agent="command", call_id="c1", tool="Bash", input={"command": "cat answers/key.md"}),
        AgentToolResult(agent="command", call_id="c1", tool="Bash", outcome="refused", excerpt="denied"),
        AgentAnswer(agent="command", text="The answer is 42."),
    ]
    events += [FileOpen(pid=2, path=f"/usr/lib/python3.11/m{i}.py", flags="O_RDONLY", result=3) for i in range(filler)]
    events += [ProcessExit(pid=2, code=0), ProcessExit(pid=1, code=0), RunEnded(exit_code=0, duration_ns=10**9)]
    sources = {"run.started": "recorder", "sandbox.built": "recorder", "dns.query": "dns", "http.exchange": "proxy",
               "llm.call": "proxy", "agent.tool_call": "agent", "agent.tool_result": "agent",
               "agent.answer": "agent", "run.ended": "recorder"}
    with LedgerWriter(run_dir / "ledger", run_id=run_dir.name, key=key, blobs=BlobStore(run_dir / "blobs"),
                      created_ns=T0) as writer:
        for i, event in enumerate(events):
            kind = type(event).__struct_config__.tag
            writer.append(event, source=sources.get(kind, "strace"), wall_ns=T0 + i * 1000, mono_ns=i * 1000)
    replay_runs([run_dir], trusted)
    return run_dir


def tamper(run_dir: Path) -> None:
    """Flip one byte inside the ledger's first records frame (after the header)."""
    ledger = run_dir / "ledger"
    data = bytearray(ledger.read_bytes())
    data[len(data) // 3] ^= 0xFF
    ledger.write_bytes(bytes(data))
