"""The event vocabulary: renamed fields stay readable, closed vocabularies stay closed, facts
once written as maps read as their types."""

from __future__ import annotations

import json
import re
from pathlib import Path

import msgspec
import pytest

from ledger import read_records
from ledger.events import (SCHEMA_VERSION, AbortRules, CellEnded, Finding, Verdict, AgentToolResult, Caller, Combo, Endpoint, ExcludedPath,
                           ElicitationSettings, FileOpen, GraderCheck, HostFacts, HostKey, LlmCall, PlannedCell, Price, Refusal,
                           RunAgent, RunArm, RunEnded, RunLimits, RunStarted, SeccompFacts, StudyPlanned,
                           SyscallWitnessChoice, decode_event)

GOLDEN_V1 = Path(__file__).parent / "test_golden" / "v1"


def test_schema_version_3_names_the_duration_duration_ns():
    assert SCHEMA_VERSION >= 3  # 3 renamed it; later versions only add kinds and fields
    encoded = msgspec.msgpack.encode(RunEnded(exit_code=0, duration_ns=4000))
    assert msgspec.msgpack.decode(encoded) == {"kind": "run.ended", "exit_code": 0, "duration_ns": 4000}


def test_the_old_name_wall_ns_is_read_as_duration_ns():
    old = msgspec.msgpack.encode({"kind": "run.ended", "exit_code": 0, "wall_ns": 4000, "status": "timeout"})
    event = decode_event(old)
    assert (event.duration_ns, event.legacy_wall_ns, event.status) == (4000, None, "timeout")
    assert event == RunEnded(exit_code=0, duration_ns=4000, status="timeout")
    assert b"wall_ns" not in msgspec.msgpack.encode(event)  # re-encoded under the new name only


def test_the_committed_schema_2_ledger_reads_its_duration_under_the_new_name():
    """tests/ledger/test_golden/v1 was written before duration_ns existed: its run.ended says wall_ns."""
    [end] = [r.event for r in read_records(GOLDEN_V1) if isinstance(r.event, RunEnded)]
    assert end.duration_ns == 4000 and end.legacy_wall_ns is None


@pytest.mark.parametrize("event", [
    {"kind": "run.ended", "status": "finished"},
    {"kind": "file.open", "pid": 1, "path": "/x", "access": "x"},
    {"kind": "agent.tool_result", "agent": "a", "call_id": "c", "outcome": "maybe"},
    {"kind": "agent.tools", "agent": "a", "surface": "guess"},
    {"kind": "llm.call", "provider": "acme", "endpoint": "messages"},
    {"kind": "llm.call", "provider": "openai", "endpoint": "completions"},
    {"kind": "sandbox.built", "path": "/s", "commit": "c", "tree_digest": "d",
     "excluded": [{"path": "a", "category": "secrets"}]},
])
def test_a_value_outside_a_closed_vocabulary_does_not_decode(event):
    with pytest.raises(msgspec.ValidationError):
        decode_event(msgspec.msgpack.encode(event))


def test_closed_vocabularies_decode_their_own_values():
    for status in ("completed", "timeout", "interrupted", "infra_failure"):
        assert decode_event(msgspec.msgpack.encode(RunEnded(status=status))).status == status
    for access in ("r", "w", "rw"):
        assert decode_event(msgspec.msgpack.encode(FileOpen(pid=1, path="/x", access=access))).access == access
    for outcome in ("executed", "refused", "errored", "unknown"):
        event = AgentToolResult(agent="a", call_id="c", outcome=outcome)
        assert decode_event(msgspec.msgpack.encode(event)) == event
    for provider, endpoint in (("anthropic", "messages"), ("openai", "chat.completions"), ("openai", "responses")):
        event = LlmCall(provider=provider, endpoint=endpoint)
        assert decode_event(msgspec.msgpack.encode(event)) == event
    assert ExcludedPath(path="a", category="grading").category == "grading"


def test_a_net_flow_from_before_schema_8_reads_without_per_direction_counts():
    old = msgspec.msgpack.encode({"kind": "net.flow", "proto": "udp", "src": "10.0.0.2", "sport": 4000,
                                  "dst": "1.1.1.1", "dport": 53, "packets": 1, "bytes": 57})
    event = decode_event(old)
    assert (event.packets, event.bytes, event.initiator_packets, event.responder_packets) == (1, 57, None, None)
    assert (event.initiator_bytes, event.responder_bytes, event.responder_tcp_flags) == (None, None, None)


# run.started's facts as schema 14 and older wrote them, as maps: the current writers' (the
# schema 14 golden's run, tests/ledger/test_golden/schema14/expected.json) and older ones'
# (git log -p caisson/run/record.py, caisson/run/plan.py, caisson/probes/cells.py).
SCHEMA14_RUN = json.loads((Path(__file__).parent / "test_golden" / "schema14" / "expected.json").read_text())["run"][0]
OLD_FACTS = [
    pytest.param("agent", SCHEMA14_RUN["agent"],
                 RunAgent(name="claude-code", gating="enforced", version="2.1.328", elicitation="stream",
                          model="claude-sonnet-4-5"), id="agent"),
    pytest.param("agent", {"name": "claude-code", "gating": "enforced"},  # before version and elicitation
                 RunAgent(name="claude-code", gating="enforced"), id="agent-first"),
    pytest.param("agent", {"name": "codex", "gating": "ungated", "version": "", "elicitation": "stream"},
                 RunAgent(name="codex", gating="ungated", version="", elicitation="stream"), id="agent-no-version"),
    pytest.param("arm", SCHEMA14_RUN["arm"],
                 RunArm(name="full", grant=SCHEMA14_RUN["arm"]["grant"]), id="arm"),
    pytest.param("arm", {"name": "searching", "grant": ["Read"], "withhold": ["Write"], "deny": ["Bash", "Write"],
                         "strategies": ["search"], "catalog": {"search": ["Grep", "mcp__codesearch"], "docs": []}},
                 RunArm(name="searching", grant=["Read"], withhold=["Write"], deny=["Bash", "Write"],
                        strategies=["search"], catalog={"search": ["Grep", "mcp__codesearch"], "docs": []}),
                 id="arm-strategies"),
    pytest.param("arm", {"name": "bash", "grant": ["Read", "Grep", "Glob"], "deny": ["Bash"]},  # tests/_fixtures/cells.py
                 RunArm(name="bash", grant=["Read", "Grep", "Glob"], deny=["Bash"]), id="arm-synthetic"),
    pytest.param("limits", SCHEMA14_RUN["limits"],
                 RunLimits(wall_seconds=120.0, pids=512, memory_bytes=2147483648, cpus=1.0, disk_bytes=4294967296,
                           tree_fs="tmpfs", network="witnessed", user="agent"), id="limits"),
    pytest.param("limits", {"wall_seconds": 600, "pids": 512, "memory_bytes": 2147483648, "cpus": 2,
                            "network": "none", "user": "agent"},  # before disk_bytes and tree_fs; ints for floats
                 RunLimits(wall_seconds=600.0, pids=512, memory_bytes=2147483648, cpus=2.0, network="none",
                           user="agent"), id="limits-before-disk"),
    pytest.param("limits", {"wall_seconds": 60}, RunLimits(wall_seconds=60.0), id="limits-v1"),
    pytest.param("host", SCHEMA14_RUN["host"],
                 HostFacts(kernel="6.18.44-fc-v669", machine="x86_64", cpus=2, python="3.11.7",
                           mem_total_bytes=25276502016, server_version="20.10.24+dfsg1", api_version="1.41",
                           os="Debian GNU/Linux 12 (bookworm)", kernel_version="6.18.44-fc-v669", arch="amd64",
                           cgroup_version="1", cgroup_driver="cgroupfs", storage_driver="overlay2", runtime="runc",
                           ncpu=2), id="host"),
    pytest.param("host", {"kernel": "6.1.0", "machine": "aarch64", "cpus": 0, "python": "3.11.2"},  # no engine facts
                 HostFacts(kernel="6.1.0", machine="aarch64", cpus=0, python="3.11.2"), id="host-no-engine"),
    pytest.param("seccomp", SCHEMA14_RUN["seccomp"],
                 SeccompFacts(sha256="a44a60975afa3b3d148d0e367a6d950ddb87b9b467fab2dab5df352bc331c1e9",
                              base="moby/profiles seccomp v0.2.3 default.json", action="errno",
                              denied=SCHEMA14_RUN["seccomp"]["denied"],
                              refused_by_args=["seccomp: SECCOMP_FILTER_FLAG_NEW_LISTENER", "clone: CLONE_UNTRACED"]),
                 id="seccomp"),
    pytest.param("seccomp", {"sha256": "ab" * 32, "base": "moby/profiles seccomp v0.2.3 default.json",
                             "denied": ["io_uring_setup"], "action": "trace"},  # schema 4: before refused_by_args
                 SeccompFacts(sha256="ab" * 32, base="moby/profiles seccomp v0.2.3 default.json",
                              denied=["io_uring_setup"], action="trace"), id="seccomp-schema4"),
    pytest.param("syscall_witness", SCHEMA14_RUN["syscall_witness"],
                 SyscallWitnessChoice(ran="ebpf", why=SCHEMA14_RUN["syscall_witness"]["why"], ebpf_backend="libbpf",
                                      ebpf_program_sha256="c8e2295bdaaa674ac024b1ad044d1bb23d34de314b2911eecddee4302fbb4094"),
                 id="syscall_witness"),
    pytest.param("syscall_witness", {"ran": "strace", "why": "chosen by the caller"},  # before the eBPF facts
                 SyscallWitnessChoice(ran="strace", why="chosen by the caller"), id="syscall_witness-strace"),
    pytest.param("caller", SCHEMA14_RUN["caller"], Caller(cwd="/tmp/fresh", home="/root"), id="caller"),
]


@pytest.mark.parametrize("field, old, typed", OLD_FACTS)
def test_run_started_facts_written_as_maps_decode_typed_with_every_key(field, old, typed):
    event = decode_event(msgspec.msgpack.encode({"kind": "run.started", "run_id": "r", "caisson_version": "0",
                                                 field: old}))
    assert isinstance(event, RunStarted) and getattr(event, field) == typed
    written = {k: v for k, v in old.items() if v not in ([], {})}  # an empty member means what its absence does
    assert msgspec.to_builtins(getattr(event, field)) == written  # no key of the map is lost
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(event))[field] == written  # and it is written the same


def test_run_started_without_facts_has_none_and_writes_none():
    event = RunStarted(run_id="r", caisson_version="0")
    assert (event.agent, event.arm, event.limits, event.host, event.seccomp, event.syscall_witness,
            event.caller) == (None,) * 7
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(event)) == {"kind": "run.started", "run_id": "r",
                                                                     "caisson_version": "0"}


@pytest.mark.parametrize("facts, where", [
    ({"limits": RunLimits(wall_seconds="soon")}, "$.limits.wall_seconds"),
    ({"agent": RunAgent(name="claude-code", gating="maybe")}, "$.agent.gating"),
    ({"syscall_witness": SyscallWitnessChoice(ran="ptrace")}, "$.syscall_witness.ran"),
    ({"host": HostFacts(cpus="2")}, "$.host.cpus"),
    ({"arm": RunArm(name="a", deny="Bash")}, "$.arm.deny"),
])
def test_a_run_started_fact_of_the_wrong_type_is_kept_as_raw_naming_its_path(tmp_path, facts, where):
    """Nothing checks a Struct's fields when it is built: a writer's bug is signed as written,
    and read back as a ``witness.raw`` that says where the record went wrong."""
    from ledger import LedgerWriter, SigningKey
    from ledger.events import WitnessRaw

    bad = RunStarted(run_id="r", caisson_version="0", **facts)
    with pytest.raises(msgspec.ValidationError, match=re.escape(where)):
        decode_event(msgspec.msgpack.encode(bad))
    with LedgerWriter(tmp_path / "ledger", run_id="r", key=SigningKey.generate()) as w:
        w.append(bad, source="recorder")
    [record] = read_records(tmp_path / "ledger")
    assert isinstance(record.event, WitnessRaw) and where in record.event.line


GOLDEN_SCHEMA14 = Path(__file__).parent / "test_golden" / "schema14" / "expected.json"


def _schema14_planned() -> dict:
    """The study.planned the demo study's ledger holds, as main wrote it (schema 14: dicts)."""
    import json

    return json.loads(GOLDEN_SCHEMA14.read_text())["study"][0]


def test_a_schema_14_study_planned_decodes_into_the_typed_plan():
    old = _schema14_planned()
    event = decode_event(msgspec.msgpack.encode(old))
    assert isinstance(event, StudyPlanned)
    assert all(isinstance(c, PlannedCell) for c in event.cells) and len(event.cells) == len(old["cells"])
    first = old["cells"][0]
    assert event.cells[0] == PlannedCell(**first)
    combo = event.combos[0]
    assert isinstance(combo, Combo) and combo.endpoint == Endpoint(script=old["combos"][0]["endpoint"]["script"])
    assert (combo.gating, combo.elicitation, combo.cells) == ("enforced", ElicitationSettings(max_turns=4), 8)
    assert event.refusals == [Refusal(**old["refusals"][0])] and event.refusals[0].kind == "cannot"
    assert event.prices == {m: Price(**p) for m, p in old["prices"].items()}
    assert event.abort == AbortRules(host_stalled_in_a_row=3)
    assert event.grader == [GraderCheck(**g) for g in old["grader"]]
    for name in ("cells", "combos", "refusals", "prices", "abort", "grader"):  # every key, as main wrote it
        assert msgspec.to_builtins(getattr(event, name)) == old[name], name


@pytest.mark.parametrize("written", [{}, {"max_turns": 4}])
def test_a_combos_elicitation_reads_from_and_writes_as_the_map_older_ledgers_hold(written):
    combo = {"arm": "a", "agent": "claude-code", "elicitation": written}
    got = msgspec.msgpack.decode(msgspec.msgpack.encode(combo), type=Combo)
    assert got.elicitation == ElicitationSettings(**written)
    assert msgspec.to_builtins(got)["elicitation"] == written  # a key unset is absent, as the map had it
    assert got.elicitation.text() == ", ".join(f"{k}={v}" for k, v in written.items())
    with pytest.raises(msgspec.ValidationError, match=r"\$\.elicitation\.max_turns"):
        msgspec.msgpack.decode(msgspec.msgpack.encode({**combo, "elicitation": {"max_turns": 0}}), type=Combo)


def test_study_planned_keys_an_older_ledger_left_out_read_as_their_defaults():
    old = {"kind": "study.planned", "study": "s", "study_sha256": "0" * 64,
           "cells": [{"cell_id": "c", "arm": "a", "agent": "probe", "question_id": "q", "repetition": 1}],
           "combos": [{"arm": "a", "agent": "probe", "endpoint": {}}],
           "refusals": [{"arm": "b", "agent": "probe", "kind": "cannot"}],
           "host_keys": [{"host": "h1/n", "public_key": "ab" * 32}], "abort": {}}
    event = decode_event(msgspec.msgpack.encode(old))
    assert isinstance(event, StudyPlanned)
    assert event.cells == [PlannedCell(cell_id="c", arm="a", agent="probe", model=None, question_id="q",
                                       repetition=1)]
    assert event.combos == [Combo(arm="a", agent="probe", adapter=None, model=None, gating="ungated",
                                  endpoint=Endpoint(), cells=0)]
    assert event.refusals == [Refusal(arm="b", agent="probe", gating="ungated", kind="cannot", reason="", cells=0)]
    assert event.host_keys == [HostKey(host="h1/n", public_key="ab" * 32)]
    assert (event.abort, event.prices, event.grader) == (AbortRules(), {}, [])


@pytest.mark.parametrize("member", [
    {"cells": [{"arm": "a", "agent": "probe", "question_id": "q", "repetition": 1}]},  # no cell_id
    {"refusals": [{"arm": "a", "agent": "probe", "kind": "maybe"}]},  # kind outside cannot | not_yet
    {"combos": [{"arm": "a", "agent": "probe", "gating": "sometimes"}]},  # gating outside Gating
    {"prices": {"m": {"input_usd_per_mtok": "3"}}},  # a price that is not a number
])
def test_a_study_planned_member_outside_its_type_does_not_decode(member):
    with pytest.raises(msgspec.ValidationError):
        decode_event(msgspec.msgpack.encode({"kind": "study.planned", "study": "s", "study_sha256": "0", **member}))


# --- cell.ended: the attempt's verdict (schema 16) and what schema 6-15 wrote -----------


def _old_cell_ended(**fields):
    """A schema 6-15 cell.ended as its recorder encoded it (score and void_reason as members)."""
    return msgspec.json.decode(msgspec.json.encode({"kind": "cell.ended", "cell_id": "c", "attempt": 1, **fields}),
                               type=CellEnded)


def test_an_old_void_cell_ended_reads_its_findings_into_the_verdict():
    e = _old_cell_ended(run_id="r", status="void", counting=True,
                        void_reason="host_stalled: 4.1 s of stall\ntool_escape: ran curl: outside the grant")
    assert e.verdict is not None and e.reason == ""
    assert (e.verdict.status, e.verdict.score, e.verdict.detectors) == ("void", None, [])
    assert [(f.kind, f.message, f.effect) for f in e.verdict.void] == [
        ("host_stalled", "4.1 s of stall", "void"), ("tool_escape", "ran curl: outside the grant", "void")]
    assert e.explanation() == "host_stalled: 4.1 s of stall\ntool_escape: ran curl: outside the grant"


def test_an_old_clean_cell_ended_keeps_its_score_in_the_verdict():
    e = _old_cell_ended(run_id="r", status="clean", counting=True, score=0.5)
    assert (e.verdict, e.reason) == (Verdict(status="clean", score=0.5), "")
    assert e.explanation() == ""


@pytest.mark.parametrize("status, text", [
    ("failed", "no ledger was written"), ("unclosed", "the runner stopped during this attempt"),
    ("refused", "record refused: the sandbox holds the answer key"), ("tampered", "seal 3: bad signature")])
def test_an_old_unjudged_attempt_reads_its_text_as_the_reason(status, text):
    e = _old_cell_ended(status=status, void_reason=text, infra_failure=status != "refused")
    assert (e.verdict, e.reason, e.status) == (None, text, status)


def test_a_message_that_is_no_finding_line_is_kept_whole():
    e = _old_cell_ended(run_id="r", status="void", void_reason="the witness said: gone")
    assert [(f.kind, f.message) for f in e.verdict.void] == [("", "the witness said: gone")]


def test_a_schema_16_cell_ended_writes_the_verdict_and_no_old_member():
    v = Verdict(status="void", void=[Finding(detector="host.stalled@2", kind="host_stalled", effect="void",
                                             message="late")], detectors=["host.stalled@2"])
    e = CellEnded(cell_id="c", attempt=1, run_id="r", status="void", counting=True, verdict=v)
    wire = msgspec.json.decode(msgspec.json.encode(e))
    assert "score" not in wire and "void_reason" not in wire and wire["verdict"]["void"][0]["kind"] == "host_stalled"
    assert msgspec.json.decode(msgspec.json.encode(e), type=CellEnded) == e


def test_an_attempt_status_outside_its_vocabulary_does_not_decode():
    with pytest.raises(msgspec.ValidationError):
        _old_cell_ended(status="finished")
