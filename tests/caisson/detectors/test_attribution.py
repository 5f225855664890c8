"""model.foreign_call and the CLI-only filter as playbooks: records in, exact findings out.

The process trees are those the syscall witness records for the real agents (Claude Code
2.1.328: its own process makes its calls, its Bash tool is ``/bin/bash -c``; Codex 0.171.0
and Copilot 1.0.102: a node launcher whose platform binary makes them; mini-swe-agent
2.4.6: ``env`` then ``sh`` around ``mini``), and the holders those the proxy witness
records on each ``http.exchange``."""

from __future__ import annotations

from caisson.detectors import DetectorConfig, Finding, run_detectors
from caisson.detectors.attribution import FOREIGN_CALL, call_owners, cli_calls, foreign_model_call
from caisson.detectors.inband import IN_BAND, in_band_failure, model_switched
from caisson.report import cell_tokens
from ledger import Record
from ledger.events import (AgentUsage, ClientProcess, HttpExchange, LlmCall, LlmUsage, ProcessExec, ProcessFork,
                           RunAgent, RunLimits, RunStarted, WitnessStarted)

CONFIG = DetectorConfig()
CODEX_BIN = ("/usr/local/lib/node_modules/@openai/codex/node_modules/@openai/codex-linux-x64/vendor/"
             "x86_64-unknown-linux-musl/bin/codex")


def started(agent: str | None = "claude-code") -> RunStarted:
    facts = RunAgent(name=agent, gating="enforced", model="claude-sonnet-4-5") if agent else None
    return RunStarted(run_id="r", caisson_version="t", agent=facts, limits=RunLimits(network="witnessed"))


def fork(pid: int, ppid: int, host: int | None = None) -> ProcessFork:
    return ProcessFork(pid=pid, host_pid=host, ppid=ppid, syscall="clone")


def exec_(pid: int, path: str, ppid: int | None = None, host: int | None = None) -> ProcessExec:
    return ProcessExec(pid=pid, host_pid=host, ppid=ppid, path=path, argv=[path.rsplit("/", 1)[-1]])


def held(*pids: int, unresolved: str | None = None, status: int = 200) -> HttpExchange:
    """An exchange whose client socket the chamber's ``pids`` held (host pid: 1000 + pid)."""
    return HttpExchange(method="POST", scheme="https", host="api.anthropic.com", port=443, path="/v1/messages",
                        status=status, client="172.30.0.2:40000",
                        client_processes=[ClientProcess(pid=p, host_pid=1000 + p, start_time_ns=p) for p in pids],
                        client_unresolved=unresolved)


def call(model: str = "claude-sonnet-4-5", total: int = 100, failed: str | None = None) -> LlmCall:
    return LlmCall(provider="anthropic", endpoint="messages", requested_model=model, failed=failed,
                   normalized=LlmUsage(input_tokens=total - 10, output_tokens=10, total_tokens=total))


def play(*events) -> list[Record]:
    source = {ProcessExec: "strace", ProcessFork: "strace", HttpExchange: "proxy", LlmCall: "proxy"}
    return [Record(seq=i, wall_ns=i, mono_ns=i, source=source.get(type(e), "recorder"), event=e)
            for i, e in enumerate(events)]


CLAUDE = (started(), WitnessStarted(witness="proxy"), exec_(10, "/usr/local/bin/claude", host=1010),
          fork(27, 10, 1027), exec_(27, "/bin/bash", 10, 1027),  # its Bash tool
          fork(33, 27, 1033), exec_(33, "/usr/bin/curl", 27, 1033))  # seq 2..6


def findings(records) -> list[Finding]:
    return list(foreign_model_call(records, CONFIG))


def test_the_clis_own_calls_are_the_clis_and_nothing_is_found():
    records = play(*CLAUDE, held(10), call(), held(10), call())
    assert findings(records) == []
    assert cli_calls(records) == {8, 10}


def test_a_curl_in_the_clis_bash_tool_is_a_foreign_call():
    """The red team's side call: curl with the CLI's key, from its Bash tool."""
    records = play(*CLAUDE, held(10), call(), held(33), call(total=70000), held(10), call())
    assert findings(records) == [Finding(
        detector=FOREIGN_CALL, kind="foreign_model_call", effect="void", evidence=[4, 9, 10],
        message="a model call to claude-sonnet-4-5 was made by pid 33 (/usr/bin/curl, under /bin/bash (pid 27)),"
        " not by the agent's CLI: a model helped outside the one measured")]
    assert cli_calls(records) == {8, 12}


def test_a_grandchild_and_a_python_tool_are_foreign_and_the_bash_itself_too():
    records = play(*CLAUDE, fork(40, 27, 1040), exec_(40, "/usr/bin/sh", 27), fork(41, 40), exec_(41, "/usr/bin/python3", 40),
                   held(41), call(), held(27), call())
    owners = call_owners(records)
    assert [(o.verdict, o.pid, o.program) for o in owners.values()] == [
        ("foreign", 41, "/usr/bin/python3, under /bin/bash (pid 27)"), ("foreign", 27, "/bin/bash")]


def test_a_nested_claude_in_a_tool_is_not_the_cli():
    records = play(*CLAUDE, fork(50, 27), exec_(50, "/usr/local/bin/claude", 27), held(50), call())
    assert [o.verdict for o in call_owners(records).values()] == ["foreign"]


def test_an_inherited_socket_belongs_to_the_holder_that_opened_it():
    # the CLI vforks git: caught before its exec, the child holds the CLI's sockets too
    git = (fork(16, 10, 1016), exec_(16, "/usr/bin/git", 10, 1016))
    records = play(*CLAUDE, *git, held(10, 16), call())
    assert [(o.verdict, o.pid) for o in call_owners(records).values()] == [("cli", 10)]
    # a tool's socket its own child inherited (curl's fork): the tool's
    records = play(*CLAUDE, fork(34, 33), held(33, 34), call())
    assert [(o.verdict, o.pid) for o in call_owners(records).values()] == [("foreign", 33)]
    # passed between two tools' processes, neither above the other: not the CLI's
    records = play(*CLAUDE, fork(60, 10), exec_(60, "/bin/bash", 10), fork(61, 60), exec_(61, "/usr/bin/python3", 60),
                   held(33, 61), call())
    assert [o.verdict for o in call_owners(records).values()] == ["foreign"]


def test_what_cannot_be_told_is_said_never_guessed():
    records = play(*CLAUDE, held(unresolved="the socket from 172.30.0.2:40000 was closed (TIME_WAIT)"),
                   call(), held(77), call(), held(10, 77), call())
    assert findings(records) == [
        Finding(detector=FOREIGN_CALL, kind="unattributed_model_call", effect="info", evidence=[7, 8],
                message="a model call to claude-sonnet-4-5 could not be attributed to a process: the socket from"
                " 172.30.0.2:40000 was closed (TIME_WAIT)"),
        Finding(detector=FOREIGN_CALL, kind="unattributed_model_call", effect="info", evidence=[9, 10],
                message="a model call to claude-sonnet-4-5 could not be attributed to a process: the syscall"
                " witness reported no process 77 (host pid 1077)"),
        Finding(detector=FOREIGN_CALL, kind="unattributed_model_call", effect="info", evidence=[11, 12],
                message="a model call to claude-sonnet-4-5 could not be attributed to a process: the syscall"
                " witness reported no process 77 (host pid 1077)"),
    ]
    assert cli_calls(records) == frozenset()


def test_a_pid_reused_by_the_cli_and_a_tool_cannot_be_told():
    records = play(*CLAUDE, fork(70, 27), exec_(70, "/usr/bin/curl", 27), fork(70, 10), held(70), call())
    [owner] = call_owners(records).values()
    assert owner.verdict == "unattributed" and "reused" in owner.reason
    records = play(*CLAUDE, fork(70, 27, 1070), exec_(70, "/usr/bin/curl", 27, 1070), fork(70, 10, 5555), held(70),
                   call())  # the host pids tell them apart: the holder (host 1070) was the curl
    assert [o.verdict for o in call_owners(records).values()] == ["foreign"]


def test_a_launchers_platform_binary_is_the_cli_its_tools_are_not():
    records = play(started("codex"), exec_(11, "/usr/local/bin/codex"), exec_(11, "/usr/bin/node"),
                   fork(22, 11), exec_(22, CODEX_BIN, 11), fork(30, 22), exec_(30, "/bin/bash", 22),
                   held(22), call(), held(30), call())
    assert [(o.verdict, o.pid) for o in call_owners(records).values()] == [("cli", 22), ("foreign", 30)]


def test_a_shell_around_the_cli_makes_no_shell_the_clis():
    # mini-swe-agent's command: env, then sh running mini; mini's own sh tool is not the CLI,
    # nor is a second mini run from it
    records = play(started("mini-swe-agent"), exec_(12, "/usr/bin/env"), exec_(12, "/usr/bin/sh"),
                   fork(13, 12), exec_(13, "/usr/local/bin/mini", 12), fork(14, 13), exec_(14, "/usr/bin/sh", 13),
                   fork(15, 14), exec_(15, "/usr/local/bin/mini", 14), held(13), call(), held(15), call())
    assert [(o.verdict, o.pid) for o in call_owners(records).values()] == [("cli", 13), ("foreign", 15)]


def test_no_attribution_no_agent_or_no_syscall_witness_keeps_every_call():
    assert cli_calls(play(*CLAUDE, HttpExchange(method="POST", scheme="https", host="h", port=443, path="/"),
                          call())) is None  # written before attribution: the proxy never looked
    assert cli_calls(play(started(None), *CLAUDE[1:], held(33), call())) is None  # a plain command
    assert cli_calls(play(started(), held(10), call())) is None  # no exec of the command
    assert findings(play(started(None), *CLAUDE[1:], held(33), call())) == []


def test_only_the_first_execs_syscall_witness_is_read():
    # with --syscall-witness both, eBPF reports the same processes again
    ebpf = [Record(seq=100 + i, wall_ns=0, mono_ns=0, source="ebpf", event=e)
            for i, e in enumerate((fork(33, 10, 1033), exec_(33, "/usr/local/bin/claude", 10, 1033)))]
    records = [*play(*CLAUDE), *ebpf, *[Record(seq=200 + i, wall_ns=0, mono_ns=0, source="proxy", event=e)
                                        for i, e in enumerate((held(33), call()))]]
    assert [o.verdict for o in call_owners(records).values()] == ["foreign"]


# --- what the CLI-only filter changes in the detectors and the token figure -----------------


def test_a_failed_call_a_tool_made_last_buys_no_retry():
    """The red team's buy-a-retry: the CLI's call succeeded, the tool's 400 came last, no answer."""
    failed = call(failed="error status 400: invalid_request_error: ...")
    records = play(*CLAUDE, held(10), call(), held(33, status=400), failed)
    assert [f.kind for f in in_band_failure(records, CONFIG)] == []
    assert [f.kind for f in run_detectors(records, CONFIG) if f.detector in (FOREIGN_CALL, IN_BAND)] == [
        "foreign_model_call"]
    # without attribution (an older ledger) neither: a failed last call needs the CLI's own word
    old = play(*CLAUDE, HttpExchange(method="POST", scheme="https", host="h", port=443, path="/"), call(),
               HttpExchange(method="POST", scheme="https", host="h", port=443, path="/", status=400), failed)
    assert [f.kind for f in in_band_failure(old, CONFIG)] == []


def test_a_bigger_model_a_tool_called_is_no_switch_of_the_cli_and_voids_the_cell():
    records = play(*CLAUDE, held(10), call(), held(33), call("claude-opus-4-1"), held(10), call())
    assert list(model_switched(records, CONFIG)) == []
    assert [(f.kind, f.effect) for f in run_detectors(records, CONFIG) if f.detector == FOREIGN_CALL] == [
        ("foreign_model_call", "void")]
    # the CLI's own last call to another model is still a switch
    records = play(*CLAUDE, held(10), call(), held(33), call(), held(10), call("claude-opus-4-1"))
    assert [f.kind for f in model_switched(records, CONFIG)] == ["model_switched"]


def test_the_proxys_token_sum_is_the_clis_calls():
    records = play(*CLAUDE, held(10), call(total=1000), held(33), call(total=70000), held(10), call(total=12))
    figure = cell_tokens(records).figure
    assert (figure.total, figure.reports, figure.source) == (1012, 2, "proxy:llm.call")
    usage = AgentUsage(agent="claude-code", token_source="claude-code result.usage",
                       normalized=LlmUsage(input_tokens=1000, output_tokens=12, total_tokens=1012))
    assert cell_tokens([*records, Record(seq=99, wall_ns=0, mono_ns=0, source="agent", event=usage)]
                       ).figure.total == 1012  # first-party: the same calls


def test_an_unattributed_call_is_possibly_the_clis_and_no_sum_is_made_of_it():
    """A reviewer's case: a lookup that lost its race must not make an honest run look as if
    it reached no model, nor hide a call from the model check; a figure is not summed over it."""
    from caisson.report import cell_tokens

    unknown = HttpExchange(method="POST", scheme="https", host="api.anthropic.com", port=443, path="/v1/messages",
                           status=200, client_unresolved="the client's socket was gone")
    records = play(*CLAUDE, held(10), call(), unknown, call())
    assert [f.kind for f in in_band_failure(records, CONFIG)] == []
    figure = cell_tokens(records)
    assert figure.figure is None and "could not attribute" in figure.null_reason
