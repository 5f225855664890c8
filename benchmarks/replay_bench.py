"""Replay's peak memory and time on a synthetic agent-shaped run, against `caisson verify`.

Usage: python benchmarks/replay_bench.py [--events N] [--keep DIR]

Writes two signed runs with the real ledger writer, of N and 4N events (default 1M): a
coding agent's run as the syscall witness, the proxy, the procfs witness and the
transcript record it (execs; opens of a tree and of system files, most opened again and
again, some failing; connects; forks, exits, file changes; a model turn every ~2,000
events with its bodies as blobs, tool calls and results; host and process samples), then
runs ``caisson replay`` and ``caisson verify`` on each in a child process and reads the
child's peak RSS (``ru_maxrss``). Last line:
``replay_rss_mb=R replay_growth=G replay_vs_verify=V``: R the peak RSS of replay at N
events (MB, target <= 200), G its peak at 4N over its peak at N (target <= 1.25), V the
wall time of replay over that of verify at N (target <= 3).
``--keep DIR`` keeps (and reuses) the runs and the key under DIR.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from caisson._paths import SANDBOX_PATH  # noqa: E402
from tests._fixtures.cells import ENV, SCENARIO, CellSpec, _exchange  # noqa: E402
from collectors.proxy import rederive_llm_call  # noqa: E402
from ledger import BlobStore, LedgerWriter, generate_keypair, load_signing_key  # noqa: E402
from ledger.events import (  # noqa: E402
    AgentAnswer, AgentToolCall, AgentToolResult, AgentUsage, BlobStored, Event, ExcludedPath, FileChange, FileOpen,
    HostSample, LlmUsage, NetConnect, ProcessExec, ProcessExit, ProcessFork, ProcSample, RunAgent, RunArm, RunEnded,
    RunLimits, RunStarted, SandboxBuilt, WitnessStarted, WitnessStopped,
)

ROOT = Path(__file__).resolve().parent.parent
DISTINCT = 12_000  # distinct files the agent's programs open (a tree and a system's share)
TURN_EVERY = 2_000  # syscall events between model turns
SAMPLE_EVERY = 500  # events between host samples
_RO = "O_RDONLY|O_CLOEXEC"


def _paths(rng: random.Random) -> list[str]:
    tree = [f"{SANDBOX_PATH}/src/pkg{i // 50:03d}/mod{i % 50:02d}.py" for i in range(DISTINCT // 4)]
    system = [f"/usr/share/doc/pkg{i // 20:04d}/file{i % 20:02d}" for i in range(DISTINCT - len(tree))]
    return tree + system


def _syscalls(rng: random.Random, paths: list[str]) -> Iterator[tuple[str, Event]]:
    """An endless stream of (source, event): programs exec'd, their opens, connects, exits."""
    libs = ["/etc/ld.so.cache", "/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libm.so.6",
            "/lib/x86_64-linux-gnu/libz.so.1"]
    pid, agent = 100, 1
    while True:
        pid += 1
        host = pid + 40_000
        yield "strace", ProcessFork(pid=pid, host_pid=host, ppid=agent, syscall="clone")
        prog = rng.choice((("/usr/bin/git", ["git", "grep", "-n", "Context"]),
                           ("/usr/bin/python3", ["python3", "-m", "pytest", "-q"]),
                           ("/bin/sh", ["sh", "-c", "find /usr/share | xargs cat"])))
        yield "strace", ProcessExec(pid=pid, host_pid=host, ppid=agent, path=prog[0], argv=prog[1],
                                    cwd=SANDBOX_PATH, env=ENV)
        for lib in libs:
            yield "strace", FileOpen(pid=pid, host_pid=host, path=lib, flags=_RO, result=3)
        start = rng.randrange(len(paths))
        for i in range(rng.randint(20, 400)):
            path = paths[(start + i) % len(paths)]
            if rng.random() < 0.1:
                yield "strace", FileOpen(pid=pid, host_pid=host, path=path + "c", flags=_RO, result=None,
                                         errno="ENOENT")
            else:
                yield "strace", FileOpen(pid=pid, host_pid=host, path=path, flags=_RO, result=4)
        if rng.random() < 0.2:
            yield "strace", NetConnect(pid=pid, host_pid=host, family="AF_INET", address="10.89.0.2", port=3128,
                                       result=0)
        if rng.random() < 0.2:
            yield "strace", FileChange(pid=pid, host_pid=host, syscall="unlink", path=f"/tmp/t{rng.randrange(10**5)}",
                                       result=0)
        yield "strace", ProcessExit(pid=pid, host_pid=host, code=0)


def build(run_dir: Path, n: int, key) -> None:
    """Write a run of about ``n`` events into ``run_dir`` (replaced)."""
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    rng = random.Random(n)
    blobs = BlobStore(run_dir / "blobs")
    clock = [1_767_225_600_000_000_000, 1_000_000_000]
    spec = CellSpec(run_id=run_dir.name, request_bytes=4_000)
    with LedgerWriter(run_dir / "ledger", run_id=spec.run_id, key=key, blobs=blobs, flush_interval_s=3600,
                      created_ns=clock[0]) as w:

        def put(event: Event, source: str) -> None:
            clock[0] += rng.choice((1, 2, 3, 5, 8, 40)) * 1_000
            clock[1] += 1_000
            w.append(event, source=source, wall_ns=clock[0], mono_ns=clock[1])

        put(RunStarted(run_id=spec.run_id, caisson_version="bench", question_id="q-context",
                       agent=RunAgent(name="claude-code", gating="enforced"),
                       arm=RunArm(name="read-only", grant=["Read", "Grep", "Glob", "Bash"], deny=[]),
                       limits=RunLimits(wall_seconds=36_000), env=ENV), "recorder")
        put(BlobStored(sha256=blobs.put(SCENARIO), size_bytes=len(SCENARIO), role="scenario"), "recorder")
        put(SandboxBuilt(path=SANDBOX_PATH, commit="c" * 40, tree_digest="d" * 64,
                         excluded=[ExcludedPath(path="benchmark/questions.toml", category="answer_key")]), "recorder")
        for witness in ("strace", "proxy", "procfs"):
            put(WitnessStarted(witness=witness, detail={"listen": "10.89.0.2:3128"} if witness == "proxy" else {}),
                witness)
        put(ProcessExec(pid=1, host_pid=40_001, path="/usr/local/bin/claude", argv=["claude", "-p", "..."],
                        cwd=SANDBOX_PATH, env=ENV), "strace")
        syscalls = _syscalls(rng, _paths(rng))
        turn = 0
        written = 9
        while written < n - 6:
            source, event = next(syscalls)
            put(event, source)
            written += 1
            if written % SAMPLE_EVERY == 0:
                put(HostSample(load1=1.5, timer_lateness_ns=1_000_000, interval_ns=250_000_000), "procfs")
                put(ProcSample(pid=1, host_pid=40_001, start_time_ns=1, name="claude", cpu_ns=written,
                               rss_bytes=300 << 20), "procfs")
                written += 2
            if written % TURN_EVERY == 0:
                exchange, bodies = _exchange(spec, turn, [("X-Claude-Code-Session-Id", "session-1")])
                for data, role in bodies:
                    put(BlobStored(sha256=blobs.put(data), size_bytes=len(data), role=role,
                                   media_type="application/json"), "proxy")
                call, why = rederive_llm_call(exchange, *bodies)
                assert call is not None, why
                put(exchange, "proxy")
                put(call, "proxy")
                call_id = f"toolu_{turn:06d}"
                put(AgentToolCall(agent="claude-code", call_id=call_id, tool="Bash", input={"command": "ls"}), "agent")
                put(AgentToolResult(agent="claude-code", call_id=call_id, tool="Bash", outcome="executed",
                                    excerpt="src tests"), "agent")
                written += 6
                turn += 1
        put(AgentAnswer(agent="claude-code", text=spec.answer), "agent")
        n_in, n_out = turn * spec.tokens_in, turn * spec.tokens_out
        put(AgentUsage(agent="claude-code", token_source="claude-code result.usage",
                       usage={"input_tokens": n_in, "output_tokens": n_out},
                       normalized=LlmUsage(input_tokens=n_in, output_tokens=n_out, total_tokens=n_in + n_out,
                                           rule="anthropic")), "agent")
        answer = spec.answer.encode()
        put(BlobStored(sha256=blobs.put(answer), size_bytes=len(answer), role="answer"), "recorder")
        for witness in ("strace", "proxy", "procfs"):
            put(WitnessStopped(witness=witness, events=0), witness)
        put(RunEnded(exit_code=0, duration_ns=10**9), "recorder")


def measure(argv: list[str]) -> tuple[float, float]:
    """(wall s, peak RSS MB) of one child process running ``caisson ARGV``."""
    code = "import sys; from caisson.cli import main; sys.exit(main(sys.argv[1:]))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code, *argv], env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"caisson {' '.join(argv)}: exit {proc.returncode}: {proc.stderr[-2000:]}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if peak <= before:  # ru_maxrss is the largest child's so far: measure the smallest run first
        raise SystemExit(f"caisson {' '.join(argv)}: its peak is hidden by an earlier, larger child")
    return wall, peak / 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--keep", type=Path, help="keep (and reuse) the runs and the key under this directory")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="caisson-replay-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        pub = work / "bench.pub"
        key = load_signing_key(work / "bench.key") if pub.exists() else generate_keypair(work / "bench.key", pub)
        sizes = (args.events, 4 * args.events)
        for n in sizes:
            run_dir = work / f"run-{n}"
            if not (run_dir / "ledger").exists():
                t0 = time.perf_counter()
                build(run_dir, n, key)
                print(f"built {run_dir} ({n} events, {(run_dir / 'ledger').stat().st_size / 1e6:.1f} MB)"
                      f" in {time.perf_counter() - t0:.1f} s", flush=True)
        small, large = (work / f"run-{n}" for n in sizes)
        verify_s, verify_mb = measure(["verify", str(small), "--key", str(pub)])
        replay_s, replay_mb = measure(["replay", str(small), "--key", str(pub), "--json"])
        large_s, large_mb = measure(["replay", str(large), "--key", str(pub), "--json"])
        print(f"verify  {args.events} events: {verify_s:.2f} s, peak {verify_mb:.0f} MB")
        print(f"replay  {args.events} events: {replay_s:.2f} s, peak {replay_mb:.0f} MB")
        print(f"replay {sizes[1]} events: {large_s:.2f} s, peak {large_mb:.0f} MB")
        print(f"replay_rss_mb={replay_mb:.0f} replay_growth={large_mb / replay_mb:.2f}"
              f" replay_vs_verify={replay_s / verify_s:.2f}")
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
