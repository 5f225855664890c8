"""The one-pass runner gives exactly the findings of each detector run alone over every record.

Each detector declares the event types it reads (`caisson.detectors.reads`); the runner
hands it only those. The promise checked here: on generated streams (hypothesis) and on a
known-bad run that makes every registered detector fire, each detector's findings over
its own stream equal its findings over the whole run, and `run_detectors` equals the
detectors run one by one over every record, in registry order.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from caisson.detectors import DEFAULT_DETECTORS, DetectorConfig, Finding, reads, reads_of, run_detectors
from caisson.detectors import Streamed, route, route_for
from ledger import Record
from ledger.events import (
    AgentCompaction, AgentConfigFound, ClientProcess, AgentError, AgentModelSwitch, AgentRetry, AgentToolCall, AgentToolResult, AgentTools, AgentUsage, BlobStored, DnsQuery, ExcludedPath,
    FileChange, FileOpen, HostSample, HttpExchange, LlmCall, LlmUsage, NetConnect, NetFlow, NetSend, Note,
    ProcessExec, ProcessExit, ProcessFork, ProcessSyscall, ProcSample, ProxyTunnel, RunAgent, RunEnded, RunLimits, RunStarted, SandboxBuilt, SeccompFacts, WitnessGap, WitnessStarted,
    WitnessStopped,
)

SANDBOX = "/work/sandbox"
ARM = DetectorConfig(
    sandbox_path=SANDBOX, excluded_paths=("benchmark/questions.toml", "CLAUDE.md"),
    exclusion_globs=(("answer_key", "benchmark/**"),), live_repo="/home/dev/click", caller_home="/home/dev",
    caller_cwd="/home/dev/click", deadline_s=60, granted_tools=("Read", "Grep", "Bash(git log:*)"),
    denied_tools=("WebFetch", "Write"), strategies=(("search", ("mcp__search",)),), granted_strategies=(),
)
NO_ARM = DetectorConfig(sandbox_path=SANDBOX, excluded_paths=("benchmark/questions.toml",), deadline_s=60)
ENV = {"PATH": "/usr/bin", "PWD": SANDBOX, "HOME": "/tmp/caisson-home", "OLDPWD": "/home/dev",
       "ANTHROPIC_API_KEY": "fp:1"}


def _usage(n_in: int, n_out: int) -> LlmUsage:
    return LlmUsage(input_tokens=n_in, output_tokens=n_out, total_tokens=n_in + n_out, rule="anthropic")


# (source, event): honest events and known-bad ones, for every type a detector reads and some none reads
POOL = [
    ("recorder", RunStarted(run_id="r", caisson_version="t", question_id="q", agent=RunAgent(name="claude-code"),
                            witnesses=["strace", "ebpf", "proxy", "procfs"], limits=RunLimits(wall_seconds=60), env=ENV,
                            seccomp=SeccompFacts(denied=["io_uring_setup", "open_by_handle_at"]))),
    ("recorder", SandboxBuilt(path=SANDBOX, commit="c" * 40, tree_digest="d" * 64,
                              excluded=[ExcludedPath(path="benchmark/questions.toml", category="answer_key")],
                              agent_config=[AgentConfigFound(path=".claude/settings.json", agent="claude-code",
                                                             commands=["sh hook.sh"])])),
    ("recorder", BlobStored(sha256="0" * 64, size_bytes=3, role="answer")),
    ("recorder", Note(text="a note no detector reads")),
    ("strace", WitnessStarted(witness="strace")),
    ("ebpf", WitnessStarted(witness="ebpf")),
    ("proxy", WitnessStarted(witness="proxy", detail={"listen": "10.89.0.2:3128"})),
    ("strace", WitnessStopped(witness="strace")),
    ("ebpf", WitnessStopped(witness="ebpf")),
    ("ebpf", WitnessGap(witness="ebpf", reason="ring buffer full", dropped=3)),
    ("procfs", HostSample(timer_lateness_ns=3_000_000_000)),
    ("procfs", HostSample(timer_lateness_ns=1_000)),
    ("strace", ProcessExec(pid=1, host_pid=901, path="/usr/bin/claude", argv=["claude"], cwd=SANDBOX, env=ENV)),
    ("ebpf", ProcessExec(pid=1, host_pid=901, path="/usr/bin/claude", argv=["claude"], cwd=SANDBOX)),
    ("strace", ProcessExec(pid=2, host_pid=902, ppid=1, path="/bin/bash", cwd="/work",
                           argv=["/bin/bash", "-c", "eval 'git log -1' && cat /etc/passwd"])),
    ("strace", ProcessExec(pid=3, host_pid=903, ppid=2, path="/usr/bin/git", argv=["git", "log", "-1"], cwd=SANDBOX)),
    ("strace", ProcessExec(pid=4, host_pid=904, ppid=2, path="/bin/cat", argv=["cat", "/etc/passwd"])),
    ("strace", ProcessExec(pid=5, host_pid=905, ppid=1, path="/bin/sh", argv=["/bin/sh", "-c", "sh hook.sh"])),
    ("strace", ProcessExec(pid=6, path="/nope", argv=["nope"], result=-1, errno="ENOENT")),
    ("strace", ProcessExit(pid=2, host_pid=902, code=0)),
    ("strace", ProcessExit(pid=4, host_pid=904, code=1)),
    ("strace", FileOpen(pid=1, host_pid=901, path="benchmark/questions.toml", result=3)),
    ("ebpf", FileOpen(pid=1, host_pid=901, path="/work/sandbox/benchmark/questions.toml", result=3)),
    ("strace", FileOpen(pid=2, host_pid=902, path="../sandbox/CLAUDE.md", result=None, errno="ENOENT")),
    ("strace", FileOpen(pid=3, host_pid=903, path="src/core.py", result=4)),
    ("strace", FileOpen(pid=3, host_pid=903, path="link.py", real_path="/home/dev/click/core.py", result=5)),
    ("strace", FileOpen(pid=4, host_pid=904, path="/home/dev/click/pwned", flags="O_WRONLY|O_CREAT",
                        access="w", result=6)),
    ("strace", FileOpen(pid=4, host_pid=904, path="out.txt", flags="O_WRONLY|O_CREAT|O_TRUNC", access="w",
                        result=7)),
    ("strace", FileOpen(pid=1, host_pid=901, path="/data/secret.txt", result=8)),
    ("strace", FileOpen(pid=1, host_pid=901, path="/usr/lib/python3.11/os.py", result=9)),
    ("strace", FileOpen(pid=1, host_pid=901, path="/etc/shadow", result=None, errno="EACCES")),
    ("strace", FileChange(pid=4, host_pid=904, syscall="rename", path="/tmp/a", target="/srv2/b")),
    ("strace", FileChange(pid=4, host_pid=904, syscall="symlink", path="/home/dev", target="/work/sandbox/l")),
    ("strace", FileChange(pid=4, host_pid=904, syscall="mkdir", path="/home/dev/x", result=-1, errno="EEXIST")),
    ("strace", ProcessSyscall(pid=1, syscall="io_uring_setup", result=-1, errno="EPERM", denied=True)),
    ("strace", ProcessSyscall(pid=1, syscall="open_by_handle_at", result=3)),
    ("strace", NetConnect(pid=1, family="AF_INET", address="10.89.0.2", port=3128)),
    ("strace", NetConnect(pid=1, family="AF_INET", address="1.1.1.1", port=443)),
    ("strace", NetConnect(pid=1, family="AF_INET", address="8.8.8.8", port=53, result=-1, errno="ENETUNREACH")),
    ("strace", NetSend(pid=1, family="AF_INET", address="8.8.4.4", port=53, result=40)),
    ("pcap", NetFlow(proto="udp", src="10.89.0.5", sport=5353, dst="9.9.9.9", dport=53, packets=1, bytes=60)),
    ("pcap", NetFlow(proto="tcp", src="10.89.0.5", sport=40000, dst="10.89.0.2", dport=3128, packets=9)),
    ("dns", DnsQuery(name="evil.example", qtype="A", rcode="REFUSED", refused=True)),
    ("proxy", HttpExchange(method="GET", scheme="https", host="evil.example", port=443, path="/",
                           denied="host not allowed")),
    ("proxy", HttpExchange(method="POST", scheme="https", host="api.anthropic.com", port=443, path="/v1/messages",
                           status=200)),
    ("proxy", HttpExchange(method="POST", scheme="https", host="api.anthropic.com", port=443, path="/v1/unknown",
                           status=200)),
    ("proxy", LlmCall(provider="anthropic", endpoint="messages", requested_model="claude-sonnet-4-5",
                      served_model="claude-haiku-4-5", normalized=_usage(10, 2), server_tools={"web_search": 1})),
    ("proxy", LlmCall(provider="anthropic", endpoint="messages", requested_model="claude-sonnet-4-5",
                      served_model="claude-sonnet-4-5-20250929", normalized=_usage(7, 1))),
    ("agent", AgentTools(agent="claude-code", surface="init", tools=["Read", "WebFetch", "Mystery"])),
    ("agent", AgentToolCall(agent="claude-code", call_id="c1", tool="Bash", input={"command": "git log -1"})),
    ("agent", AgentToolResult(agent="claude-code", call_id="c1", tool="Bash", outcome="executed")),
    ("agent", AgentToolCall(agent="claude-code", call_id="c2", tool="Write", input={"file_path": "x"})),
    ("agent", AgentToolResult(agent="claude-code", call_id="c2", tool="Write", outcome="refused")),
    ("agent", AgentToolResult(agent="claude-code", call_id="c3", tool="mcp__search__find", outcome="executed")),
    ("agent", AgentUsage(agent="claude-code", token_source="claude-code result.usage", normalized=_usage(99, 9),
                         incomplete="no terminal event")),
    ("recorder", RunEnded(exit_code=0, duration_ns=200 * 10**9)),
    ("recorder", RunEnded(exit_code=1, status="interrupted", reason="Ctrl-C")),
    # what the agent's transcript says went wrong: an error the proxy never saw, a model switch
    ("agent", AgentError(agent="claude-code", said="result.is_error", status=529, code="overloaded",
                         message="API Error: Repeated 529 Overloaded errors", cause="provider")),
    ("agent", AgentModelSwitch(agent="claude-code", said="system.model_fallback", requested="claude-opus-4-1",
                               used="claude-sonnet-4-5", trigger="overloaded")),
    ("agent", AgentRetry(agent="claude-code", said="system.api_retry", attempt=1, max_attempts=10, status=529)),
    ("agent", AgentCompaction(agent="claude-code", trigger="auto", tokens_before=167204, tokens_after=9120)),
    # the syscall witness against procfs, and the moves that blind strace
    ("procfs", WitnessStarted(witness="procfs")),
    ("procfs", ProcSample(pid=39, host_pid=939, ppid=1, start_time_ns=1, name="strace")),
    ("procfs", ProcSample(pid=40, host_pid=940, ppid=1, start_time_ns=2, name="cat")),
    ("strace", ProcessFork(pid=7, host_pid=907, ppid=1, syscall="clone", flags=["CLONE_UNTRACED"])),
    ("strace", ProcessSyscall(pid=1, syscall="seccomp", args=["SECCOMP_SET_MODE_FILTER",
                                                               "SECCOMP_FILTER_FLAG_NEW_LISTENER", "{}"], result=4)),
    ("proxy", ProxyTunnel(via="connect", host="127.0.0.1", port=8765, denied="host not allowed")),
    ("proxy", ProxyTunnel(via="connect", host="127.0.0.1", port=8765, protocol="tcp", client_bytes=3)),
    ("ebpf", FileOpen(pid=1, host_pid=901, path="answers.json", result=10, unresolved=True)),
    ("strace", FileChange(pid=4, host_pid=904, syscall="unlink", path="/work/sandbox/" + "a/" * 3000 + "...",
                          path_cut=True, result=-1, errno="ENAMETOOLONG")),
    # a model call whose connection a tool's process held (cat, under bash): not the CLI's
    ("proxy", HttpExchange(method="POST", scheme="https", host="api.anthropic.com", port=443, path="/v1/messages",
                           status=200, client_processes=[ClientProcess(pid=4, host_pid=904, start_time_ns=1)])),
    ("proxy", LlmCall(provider="anthropic", endpoint="messages", requested_model="claude-opus-4-1",
                      normalized=_usage(50000, 20000))),
]


def records_of(picks: list[int]) -> list[Record]:
    """Records of the pool entries ``picks`` (with repeats), in that order."""
    return [Record(seq=i, wall_ns=1_000_000 * i, mono_ns=1_000_000 * i, source=POOL[p][0], event=POOL[p][1])
            for i, p in enumerate(picks)]


def alone(records: list[Record], config: DetectorConfig) -> list[Finding]:
    """Every detector run alone over every record, in registry order (the old runner)."""
    return [f for _, detect in DEFAULT_DETECTORS for f in detect(records, config)]


def check(records: list[Record], config: DetectorConfig) -> None:
    for name, detect in DEFAULT_DETECTORS:
        kinds = reads_of(detect)
        assert kinds is not None, f"{name} declares no event types: the runner hands it every record"
        own = [r for r in records if isinstance(r.event, kinds)]
        assert list(detect(own, config)) == list(detect(records, config)), name
    assert run_detectors(records, config) == alone(records, config)


# known-bad runs: every pool event in reverse order, then again in pool order (it ends
# interrupted); every one but the witness gap (which stops the witness cross-check)
GAP = next(i for i, (_, e) in enumerate(POOL) if isinstance(e, WitnessGap))
KNOWN_BAD = [list(reversed(range(len(POOL)))) + list(range(len(POOL))),
             [i for i in range(len(POOL)) if i != GAP]]


def test_the_known_bad_runs_make_every_registered_detector_fire():
    fired = {f.detector for config in (ARM, NO_ARM) for run in KNOWN_BAD for f in alone(records_of(run), config)}
    assert fired >= {name for name, _ in DEFAULT_DETECTORS}


def test_the_runner_gives_the_findings_of_each_detector_alone_on_the_known_bad_runs():
    for config in (ARM, NO_ARM):
        for run in KNOWN_BAD:
            check(records_of(run), config)
            check(records_of(list(reversed(run))), config)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, len(POOL) - 1), max_size=60), st.sampled_from([ARM, NO_ARM]))
def test_the_runner_gives_the_findings_of_each_detector_alone_on_any_stream(picks, config):
    check(records_of(picks), config)


def test_a_detector_that_declares_nothing_gets_every_record_and_one_that_does_only_its_types():
    seen: dict[str, list[int]] = {}

    def everything(records, config):
        seen["everything"] = [r.seq for r in records]
        return iter(())

    @reads(FileOpen, RunEnded)
    def some(records, config):
        seen["some"] = [r.seq for r in records]
        yield Finding(detector="t@1", kind="t", effect="info", message=str(len(seen["some"])))

    records = records_of([0, 21, 12, 22, 3, 56])
    assert run_detectors(records, NO_ARM, [("all@1", everything), ("some@1", some)]) == [
        Finding(detector="t@1", kind="t", effect="info", message="3")]
    assert seen == {"everything": [0, 1, 2, 3, 4, 5], "some": [1, 3, 5]}


def test_route_sends_a_record_to_every_stream_that_wants_its_type_or_a_base_of_it():
    class LateOpen(FileOpen, tag="file.open.late", frozen=True, kw_only=True):
        pass

    records = records_of([21, 12, 56]) + [Record(seq=3, wall_ns=3, mono_ns=3, source="strace",
                                                 event=LateOpen(pid=1, path="/x", result=3))]
    opens, execs_and_opens, nothing = route(records, [(FileOpen,), (ProcessExec, FileOpen), (DnsQuery,)])
    assert [r.seq for r in opens] == [0, 3]
    assert [r.seq for r in execs_and_opens] == [0, 1, 3]
    assert nothing == []


def test_reads_refuses_what_is_not_a_class():
    import pytest

    with pytest.raises(TypeError, match="event classes"):
        reads("file.open")


def test_the_path_memos_answer_for_their_own_configuration_and_past_their_bound(monkeypatch):
    # ARM makes the caller's paths traps and has an exclusion glob; NO_ARM has neither: a memo
    # answering for the wrong configuration shows in which findings come out
    from caisson.detectors import containment

    run = records_of(KNOWN_BAD[1])

    def contained(config):
        found = list(containment.outside_tree(run, config)) + list(containment.excluded_read(run, config))
        return {f.message for f in found}

    for bound in (containment.MEMO_MAX, 2):
        monkeypatch.setattr(containment, "MEMO_MAX", bound)
        for config in (ARM, NO_ARM, ARM, NO_ARM):
            messages = contained(config)
            assert any("(the live repository)" in m for m in messages) == (config is ARM)
            assert any("(answer_key)" in m for m in messages) == (config is ARM)
            assert any("(excluded)" in m for m in messages) == (config is NO_ARM)


# the caller's own streams of route_for: the replay's manifest, a detector's own tuple, a
# type no detector reads, a base class
EXTRA = [(RunStarted, SandboxBuilt, BlobStored), (FileOpen, ProcessExec), (Note,), (WitnessStarted, WitnessStopped)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, len(POOL) - 1), max_size=60), st.sampled_from([ARM, NO_ARM]))
def test_route_for_gives_the_streams_of_route_and_the_findings_of_run_detectors(picks, config):
    records = records_of(picks)
    routed = route_for(records, DEFAULT_DETECTORS, EXTRA)
    assert routed.streams == route(records, EXTRA)
    assert routed.detect(config) == run_detectors(records, config) == alone(records, config)
    assert route_for(records, DEFAULT_DETECTORS).streams == []


def test_route_for_on_the_known_bad_runs():
    for config in (ARM, NO_ARM):
        for run in KNOWN_BAD:
            records = records_of(run)
            routed = route_for(records, [list(pair) for pair in DEFAULT_DETECTORS], EXTRA)  # unhashable pairs
            assert routed.streams == route(records, EXTRA) and routed.detect(config) == alone(records, config)


def _route_record_by_record(records, wanted):
    """The reference `route` replaced by the run-at-a-time split: each record, one by one,
    into every stream whose tuple holds its event's class or a base of it."""
    streams = [[] for _ in wanted]
    for record in records:
        for stream, kinds in zip(streams, wanted):
            if isinstance(record.event, tuple(kinds)):
                stream.append(record)
    return streams


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, len(POOL) - 1), max_size=60))
def test_route_by_runs_equals_routing_record_by_record(picks):
    # repeats make runs of one class, as a strace stream of opens does
    records = records_of([p for p in picks for _ in range(1 + p % 3)])
    wanted = [*EXTRA, (FileOpen,), (LlmCall, AgentUsage, HttpExchange), (SandboxBuilt,)]
    for each in (records, tuple(records), iter(records)):
        assert route(each, wanted) == _route_record_by_record(records, wanted)
    assert route([], wanted) == [[] for _ in wanted]


def test_route_by_runs_on_synthetic_cells(tmp_path):
    from tests._fixtures.cells import CellSpec, write_cell
    from ledger import SigningKey, verify_and_read

    key = SigningKey.generate()
    wanted = [*EXTRA, (FileOpen,), (LlmCall, AgentUsage, HttpExchange)]
    for n, spec in enumerate([CellSpec(run_id="a", strace_events=300, seed=3),
                              CellSpec(run_id="b", turns=1, strace_events=0, first_party=False),
                              CellSpec(run_id="c", agent="codex", sessions=("s1", "s2"), strace_events=50, seed=9)]):
        report, records = verify_and_read(write_cell(tmp_path / str(n), spec, key), key.verify_key)
        assert report.status == "ok"
        streams = route(records, wanted)
        assert streams == _route_record_by_record(records, wanted)
        assert len(streams[4]) >= spec.strace_events // 2  # the file opens: runs of many records
        assert route_for(records, DEFAULT_DETECTORS, EXTRA).streams == streams[: len(EXTRA)]


# opens whose meaning depends on the cwd their pid exec'd in: the same relative path names
# an excluded file, a file in the tree, or one of the caller's files; the same absolute path
# is the same file from anywhere
MEMO_POOL = [
    ProcessExec(pid=1, path="/bin/sh", argv=["sh"], cwd=SANDBOX),
    ProcessExec(pid=1, path="/bin/sh", argv=["sh"], cwd="/home/dev/click"),
    ProcessExec(pid=2, path="/bin/sh", argv=["sh"], cwd=SANDBOX + "/src"),
    ProcessExec(pid=2, path="/bin/sh", argv=["sh"], cwd="/usr/lib"),
    *(FileOpen(pid=pid, path=path, result=3) for pid in (1, 2, 3)
      for path in ("benchmark/questions.toml", "CLAUDE.md", "../CLAUDE.md", "core.py", "../benchmark/a.toml",
                   "/home/dev/click/core.py", SANDBOX + "/CLAUDE.md", "/usr/lib/os.py")),
    FileOpen(pid=1, path="core.py", real_path="/home/dev/click/core.py", result=3),
    FileOpen(pid=2, path="out.txt", flags="O_WRONLY|O_CREAT", access="w", result=4),
    FileChange(pid=1, syscall="unlink", path="core.py"),
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, len(MEMO_POOL) - 1), max_size=40), st.lists(st.integers(0, len(MEMO_POOL) - 1),
                                                                          max_size=40),
       st.sampled_from([ARM, NO_ARM]))
def test_the_path_memos_never_change_a_finding(picks, before, config):
    """The containment detectors' memos (by path alone for an absolute path, by path and cwd
    for a relative one) answer as a cold start does, whatever run filled them: the same
    relative path opened from other cwds, the same absolute path from anywhere."""
    from caisson.detectors import containment

    def run_of(picks):
        return [Record(seq=i, wall_ns=i, mono_ns=i, source="strace", event=MEMO_POOL[p]) for i, p in enumerate(picks)]

    def cold_memos():
        containment._exclusion.cache_clear()
        containment._layout.cache_clear()

    run, other = run_of(picks), run_of(before)
    detectors = (containment.excluded_read, containment.outside_tree)
    cold_memos()
    cold = [list(detect(run, config)) for detect in detectors]
    cold_memos()
    for detect in detectors:  # the memos filled by another run first
        list(detect(other, config))
        list(detect(list(reversed(other)), config))
    assert [list(detect(run, config)) for detect in detectors] == cold


def streamed(records: list[Record], config: DetectorConfig) -> list[Finding]:
    """The detectors fed the records one by one (replay's streaming runner)."""
    run = Streamed(DEFAULT_DETECTORS, config)
    for record in records:
        run.feed(record)
    return run.finish()


def test_the_streaming_runner_gives_the_findings_of_each_detector_alone_on_the_known_bad_runs():
    for config in (ARM, NO_ARM):
        for run in KNOWN_BAD:
            for records in (records_of(run), records_of(list(reversed(run)))):
                assert streamed(records, config) == alone(records, config)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, len(POOL) - 1), max_size=60), st.sampled_from([ARM, NO_ARM]))
def test_the_streaming_runner_gives_the_findings_of_each_detector_alone_on_any_stream(picks, config):
    """Folds that end early, detectors over the call owners sharing one attribution, and
    those handed their records at the end, all as each detector alone over every record."""
    records = records_of(picks)
    assert streamed(records, config) == alone(records, config)
