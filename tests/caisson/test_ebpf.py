"""The eBPF witness in a real chamber: reads of an excluded file by openat, io_uring and
exec of a reader are each seen and void the cell; lost events void it with a gap.

Needs root, the libbpf loader (scripts/setup.sh) or bpftrace, the kernel's BTF and tracefs,
and a Docker engine: locally a missing one skips, with ``CI=true`` it fails
(tests/caisson/conftest.py). The witness runs the backend `EbpfWitness` picks (libbpf when
built); ``CAISSON_TEST_EBPF_BACKEND=bpftrace`` runs these on bpftrace instead.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

import caisson.run as run_package
from caisson.cli import main
from caisson.home import ensure_operator_key
from caisson.run import witness_choice
from caisson.probes.selftest import SCENARIO, make_probe_repo
from caisson.detectors import config_from_records
from caisson.detectors.crosscheck import witness_disagreement
from caisson.replay import replay_runs
from caisson.run import ebpf as ebpf_module
from caisson.run.ebpf import EbpfWitness, ebpf_problem
from caisson.run.witnesses import StraceWitness, default_witnesses
from caisson.run.record import RecordOptions, record, syscall_witness_facts
from collectors.ebpf import ebpf_program
from ledger import BlobStore, read_records
from ledger.events import (BlobStored, FileChange, FileOpen, NetSend, ProcessExec, ProcessExit, ProcessSyscall, RunEnded, RunStarted,
                           SyscallWitnessChoice, WitnessGap, WitnessStarted, WitnessStopped)
from tests.caisson.conftest import require

HERE = Path(__file__).with_suffix("")
BACKEND = os.environ.get("CAISSON_TEST_EBPF_BACKEND") or None
KEY = "benchmark/questions.toml"

PROBE = f"""
python3 -c "import os; os.close(os.open('{KEY}', os.O_RDONLY))"
./uring_open {KEY}
cat CLAUDE.md > /dev/null
"""


@pytest.fixture
def ebpf(chamber_image) -> None:
    require(ebpf_problem())
    require(None if shutil.which("gcc") else "gcc is not installed (the io_uring probe is built with it)")
    if BACKEND is None:  # the default backend is the one under test: a failed build must not pass on bpftrace
        program = ebpf_program()
        require(None if program.backend == "libbpf" else f"the eBPF witness would run bpftrace: {program.why}")


def _probe_repo(tmp_path: Path) -> Path:
    """The selftest's probe repository plus a static io_uring reader and a process whose
    leader exits before its other thread (test_ebpf/leader_first.c), committed."""
    repo = make_probe_repo(tmp_path)
    for probe in ("uring_open", "leader_first"):
        subprocess.run(["gcc", "-O2", "-static", "-pthread", "-o", str(repo / probe), str(HERE / f"{probe}.c")],
                       check=True)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t.invalid"}
    for args in (["add", "uring_open", "leader_first"], ["commit", "-qm", "io_uring and exit probes"]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)
    return repo


def _record(tmp_path: Path, command: str, witness: EbpfWitness, name: str = "run",
            weaken: tuple[str, ...] = ()) -> tuple[Path, list]:
    scenario = tmp_path / "scenario.toml"
    scenario.write_text(SCENARIO.read_text())  # SCENARIO is the probe scenario file
    run_dir = tmp_path / name
    record(RecordOptions(command=["sh", "-c", command], scenario=scenario, repo=_probe_repo(tmp_path / f"{name}-repo"),
                         out=run_dir, question="where-answer", weaken=["exclusions", *weaken], timeout_s=90),
           witnesses=[witness])
    return run_dir, [r.event for r in read_records(run_dir)]


def test_reads_of_an_excluded_file_by_openat_io_uring_and_exec_are_each_seen(ebpf, tmp_path):
    # caisson's own seccomp profile refuses io_uring in every chamber (the strace witness cannot
    # see through it); with the engine's default the call runs, and the eBPF witness sees it.
    run_dir, events = _record(tmp_path, PROBE, EbpfWitness(backend=BACKEND), weaken=("seccomp",))
    end = next(e for e in events if isinstance(e, RunEnded))
    assert end.exit_code == 0, end
    run_started = next(e for e in events if isinstance(e, RunStarted))
    assert run_started.witnesses == ["ebpf"]
    program = ebpf_program(BACKEND)  # the backend and the digest of what it loaded, in both records
    assert (run_started.syscall_witness.ebpf_backend, run_started.syscall_witness.ebpf_program_sha256) == (
        program.backend, program.sha256)
    [ws] = [e for e in events if isinstance(e, WitnessStarted) and e.witness == "ebpf"]
    assert (ws.detail["ebpf_backend"], ws.detail["ebpf_program_sha256"]) == (program.backend, program.sha256)
    started = [i for i, e in enumerate(events) if isinstance(e, WitnessStarted) and e.witness == "ebpf"]
    execs = [i for i, e in enumerate(events) if isinstance(e, ProcessExec)]
    assert started and execs and started[0] < execs[0]  # attached before the command's first exec
    first = events[execs[0]]  # the command's own, found on PATH without failed attempts, argv[0] kept
    # its parent is the chamber's pid 1 (``timeout -s KILL``, the chamber's own deadline)
    assert (first.path, first.argv[:2], first.result, first.ppid) == ("/usr/bin/sh", ["sh", "-c"], 0, 1)
    assert not [e for e in events if isinstance(e, WitnessGap)]
    ok = {e.result is not None for e in events if isinstance(e, FileOpen)}
    assert ok == {True, False}  # the dynamic loader's misses are there too
    key = f"/work/sandbox/{KEY}"
    by_syscall = {(e.syscall, e.path) for e in events if isinstance(e, FileOpen) and e.result is not None}
    assert ("openat", key) in by_syscall
    assert ("io_uring_openat", key) in by_syscall  # strace cannot see this one
    assert ("openat", "/work/sandbox/CLAUDE.md") in by_syscall
    cat = [e for e in events if isinstance(e, ProcessExec) and e.argv == ["cat", "CLAUDE.md"] and e.result == 0]
    assert cat and cat[0].cwd == "/work/sandbox" and cat[0].ppid is not None and cat[0].host_pid != cat[0].pid
    assert isinstance(events[-2], WitnessStopped) or any(isinstance(e, WitnessStopped) for e in events)
    [result] = replay_runs([run_dir], ensure_operator_key().verify_key)
    leaks = sorted(f.message for f in result.findings if f.detector.startswith("containment.excluded_read"))
    assert leaks == ["read CLAUDE.md (agent_instructions) with openat",
                     f"read {KEY} (answer_key) with io_uring_openat",
                     f"read {KEY} (answer_key) with openat"]
    assert result.status == "void"
    assert not [f for f in result.findings if f.detector.startswith(("infra", "witness"))], result.findings


def test_a_flood_that_overflows_the_buffer_voids_the_cell_with_a_gap(ebpf, tmp_path):
    flood = "python3 -c \"import os\nfor _ in range(200000): os.close(os.open('src/app.py', os.O_RDONLY))\""
    run_dir, events = _record(tmp_path, flood, EbpfWitness(backend=BACKEND, perf_rb_pages=1, ring_bytes=1 << 16))
    gaps = [e for e in events if isinstance(e, WitnessGap)]
    assert gaps and gaps[0].witness == "ebpf" and gaps[0].dropped > 0, gaps
    [result] = replay_runs([run_dir], ensure_operator_key().verify_key)
    assert result.status == "void" and any(f.kind == "witness_gap" for f in result.findings)


# A thread that ends alone, a child that exits 5, a process that exits 3 while eight of its
# threads still run (exit_group: every thread exits at once), and one whose leader exits 0
# before its last thread exits 7 (its wait status is 7, as `echo $?` and strace say). On the older kernels' path
# two threads can both see the group's live count at 0; the program lets one report it. That
# race is not forced here (without the claim, 64 threads showed no second exit in 3 runs).
EXITS = """python3 - <<'PY'
import os, threading, time
t = threading.Thread(target=lambda: None)
t.start()
t.join()
child = os.fork()
if child == 0:
    os._exit(5)
os.waitpid(child, 0)
for _ in range(8):
    threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
time.sleep(0.2)
os._exit(3)
PY
./leader_first
true
"""


@pytest.fixture(scope="module")
def exit_by_live_loader(tmp_path_factory) -> Path:
    """The libbpf loader built with the exit path of kernels whose sched_process_exit has no
    ``group_dead`` (Debian 12's 6.1): the signal_struct's live count, one thread claiming."""
    out = tmp_path_factory.mktemp("ebpf-exit-by-live")
    script = Path(__file__).resolve().parents[2] / "scripts" / "build_ebpf.sh"
    built = subprocess.run([str(script)], env={**os.environ, "EBPF_OUT": str(out),
                                               "BPF_CFLAGS": "-DCAISSON_EXIT_BY_LIVE"},
                           capture_output=True, text=True, timeout=300)
    require(None if built.returncode == 0 else f"the libbpf loader does not build: {built.stderr[-500:]}")
    return out / "caisson-ebpf"


@pytest.mark.parametrize("exit_path", ["group_dead", "signal_live"])
def test_each_process_exit_is_one_event_with_its_code_whatever_its_threads_do(ebpf, tmp_path, exit_path, request):
    witness = EbpfWitness(backend=BACKEND)
    if exit_path == "signal_live":
        if witness.program.backend != "libbpf":
            pytest.skip("the exit path of older kernels is the libbpf program's")
        witness.program = ebpf_program("libbpf", loader=request.getfixturevalue("exit_by_live_loader"))
    run_dir, events = _record(tmp_path, EXITS, witness)
    assert next(e for e in events if isinstance(e, RunEnded)).exit_code == 0
    assert not [e for e in events if isinstance(e, WitnessGap)]
    [python] = {e.pid for e in events if isinstance(e, ProcessExec) and e.argv[:1] == ["python3"] and e.result == 0}
    exits = [e for e in events if isinstance(e, ProcessExit)]
    assert len({e.pid for e in exits}) == len(exits), exits  # one per process: not one per thread
    assert [e.code for e in exits if e.pid == python] == [3]
    assert [e.code for e in exits if e.code == 5] == [5]  # the forked child, which never exec'd
    [leader_first] = {e.pid for e in events if isinstance(e, ProcessExec) and e.argv == ["./leader_first"]}
    assert [e.code for e in exits if e.pid == leader_first] == [7]  # the last thread's, not the leader's 0
    assert all(e.signal is None for e in exits)


class _Recorded(Exception):
    pass


@pytest.fixture
def recorded(monkeypatch):
    """Stops `caisson record` where it would start recording; holds the options and witnesses."""
    seen: dict = {}

    def fake_record(options, *, witnesses):
        seen.update(options=options, witnesses=[w.name for w in witnesses])
        raise _Recorded

    monkeypatch.setattr(run_package, "record", fake_record)
    return seen


def test_where_ebpf_cannot_run_record_says_so_once_and_uses_strace(recorded, monkeypatch, capsys):
    monkeypatch.setattr(ebpf_module, "ebpf_problem", lambda: "bpftrace is not installed (apt-get install bpftrace)")
    with pytest.raises(_Recorded):
        main(["record", "--syscall-witness", "ebpf", "--", "true"])
    err = capsys.readouterr().err
    assert err.count("eBPF witness cannot run here") == 1 and "bpftrace is not installed" in err
    assert "strace" in recorded["witnesses"] and "ebpf" not in recorded["witnesses"]
    assert recorded["options"].syscall_witness == "strace"
    assert syscall_witness_facts(recorded["witnesses"], recorded["options"].syscall_witness_why) == SyscallWitnessChoice(
        ran="strace",
        why="--syscall-witness ebpf: fell back to strace: bpftrace is not installed (apt-get install bpftrace)")


def test_the_syscall_witness_choice(recorded, monkeypatch, capsys):
    monkeypatch.setattr(ebpf_module, "ebpf_problem", lambda: None)
    monkeypatch.setattr(ebpf_module, "backend_notice", lambda: None)  # the loader is built
    for choice, want in (("strace", {"strace"}), ("ebpf", {"ebpf"}), ("both", {"strace", "ebpf"})):
        with pytest.raises(_Recorded):
            main(["record", "--syscall-witness", choice, "--", "true"])
        assert set(recorded["witnesses"]) & {"strace", "ebpf"} == want, choice
        assert syscall_witness_facts(recorded["witnesses"], recorded["options"].syscall_witness_why) == (
            SyscallWitnessChoice(ran=choice, why=f"--syscall-witness {choice}"))
    assert capsys.readouterr().err == ""
    assert isinstance(default_witnesses()[3], StraceWitness)
    with pytest.raises(ValueError):
        default_witnesses(syscall="ptrace")


def test_without_the_libbpf_loader_record_says_once_that_it_runs_bpftrace(recorded, monkeypatch, capsys, tmp_path):
    from collectors import _ebpf_backend

    monkeypatch.setattr(ebpf_module, "ebpf_problem", lambda: None)
    real = _ebpf_backend.ebpf_program
    monkeypatch.setattr(ebpf_module, "ebpf_program", lambda *a, **kw: real(*a, loader=tmp_path / "none", **kw))
    with pytest.raises(_Recorded):
        main(["record", "--syscall-witness", "ebpf", "--", "true"])
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the eBPF witness runs bpftrace (slower): the libbpf loader is not built" in err
    assert "ebpf" in recorded["witnesses"]
    with pytest.raises(_Recorded):
        main(["record", "--syscall-witness", "strace", "--", "true"])
    assert capsys.readouterr().err == ""  # strace alone: no word about eBPF


IDENTITY = {"machine": "m1", "kernel": "6.1.0-test #1", "bpftrace": "bpftrace v0.17.0", "engine": "24.0.7",
            "program": "ab" * 32}


def _default_run(capsys) -> tuple[list[str], dict, str]:
    """``caisson record -- true`` with no --syscall-witness: (witnesses, run.started's facts, stderr)."""
    seen: dict = {}

    def fake_record(options, *, witnesses):
        seen.update(options=options, witnesses=[w.name for w in witnesses])
        raise _Recorded

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(run_package, "record", fake_record)
        with pytest.raises(_Recorded):
            main(["record", "--", "true"])
    return ([w for w in seen["witnesses"] if w in ("strace", "ebpf")],
            syscall_witness_facts(seen["witnesses"], seen["options"].syscall_witness_why), capsys.readouterr().err)


def test_the_default_is_ebpf_where_it_was_shown_to_work_here(monkeypatch, capsys):
    monkeypatch.setattr(witness_choice, "machine_identity", lambda: dict(IDENTITY))
    monkeypatch.setattr(ebpf_module, "ebpf_problem", lambda: None)
    qualifications: list[str] = []
    failing = ["ebpf did not record a child's birth"]

    def qualify():
        qualifications.append("ran")
        return list(failing), 0.8

    from caisson.run import qualify as qualify_module

    monkeypatch.setattr(qualify_module, "qualify_ebpf", qualify)
    witness_choice.outcome_path().unlink(missing_ok=True)

    def default_run():
        monkeypatch.setattr(witness_choice, "_CHOSEN", {})  # a new process
        return _default_run(capsys)

    # No verdict yet: the qualification runs at first use; it failed: strace, said, and why.
    ran, facts, err = default_run()
    assert qualifications == ["ran"] and ran == ["strace"]
    assert facts.why.startswith("default: strace: the eBPF witness's qualification failed here (20")
    assert facts.why.endswith(", or now by caisson selftest --syscall-witness ebpf): " + failing[0])
    assert "qualified the eBPF witness on this machine in 0.8 s: failed" in err
    assert err.count("syscall witness strace, not eBPF") == 1
    # Its verdict is kept: not run again for this identity.
    ran, facts, err = default_run()
    assert qualifications == ["ran"] and ran == ["strace"] and "qualified" not in err
    # A day after it failed, it is run again (a host under load then, an engine fixed since).
    witness_choice.keep_outcome("ebpf", failing, identity=IDENTITY, qualification=True,
                                now_ns=time.time_ns() - witness_choice.REQUALIFY_AFTER_NS - 1)
    ran, facts, err = default_run()
    assert qualifications == ["ran", "ran"] and ran == ["strace"] and "qualified" in err
    # On another kernel or engine it no longer holds: qualified again; passed: eBPF, and why.
    failing.clear()
    monkeypatch.setattr(witness_choice, "machine_identity", lambda: {**IDENTITY, "kernel": "6.2", "engine": "25"})
    ran, facts, err = default_run()
    assert qualifications == ["ran"] * 3 and ran == ["ebpf"] and err.count("\n") == 1 and "passed" in err
    assert facts.why.startswith("default: ebpf, the strongest syscall witness: its qualification passed")
    monkeypatch.setattr(witness_choice, "machine_identity", lambda: dict(IDENTITY))
    # The selftest showed strace complete but eBPF incomplete: strace, whatever a qualification says.
    witness_choice.keep_outcome("ebpf", [], identity=IDENTITY, qualification=True)
    witness_choice.keep_outcome("strace", [], identity=IDENTITY)
    witness_choice.keep_outcome("ebpf", ["witness.gap@1 did not fire on witness_flooder/ebpf_buffer"],
                                identity=IDENTITY)
    ran, facts, _ = default_run()
    assert ran == ["strace"] and "ebpf failed here (1 problem(s))" in facts.why
    # eBPF shown complete by the selftest on this identity: eBPF, silently, and why.
    witness_choice.keep_outcome("ebpf", [], identity=IDENTITY, now_ns=1_700_000_000 * 10**9)
    ran, facts, err = default_run()
    assert ran == ["ebpf"] and err == ""
    assert facts == SyscallWitnessChoice(ran="ebpf", why="default: ebpf, the strongest syscall witness: caisson"
                                         " selftest showed it complete on this machine (2023-11-14T22:13:20Z)")
    assert qualifications == ["ran"] * 3
    witness_choice.keep_outcome("ebpf", ["witness.gap@1 did not fire"], identity=IDENTITY)
    path = witness_choice.outcome_path()  # a failed selftest edited to look complete
    signed = json.loads(path.read_text())
    body = signed["body"].replace('"complete":false,"failures":["witness.gap@1 did not fire"]',
                                  '"complete":true,"failures":[]')
    assert body != signed["body"]
    path.write_text(json.dumps({**signed, "body": body}))
    failing.append("a qualification after a tampered verdict")
    ran, facts, err = default_run()  # not signed: it does not hold, and a new qualification decides
    assert ran == ["strace"] and "qualification failed" in facts.why and qualifications == ["ran"] * 4
    # eBPF not allowed here (no bpftrace, no root, no BTF...): strace, said once.
    witness_choice.keep_outcome("ebpf", [], identity=IDENTITY)
    monkeypatch.setattr(ebpf_module, "ebpf_problem", lambda: "bpftrace needs root")
    ran, facts, err = default_run()
    assert ran == ["strace"]
    assert facts.why == "default: strace: the eBPF witness cannot run here (bpftrace needs root)"
    assert err.count("\n") == 1 and "bpftrace needs root" in err
    witness_choice.outcome_path().unlink()  # the session's other tests keep their default


def test_both_witnesses_see_the_same_command_and_the_tracer_is_not_the_agent(ebpf, tmp_path):
    run_dir = tmp_path / "run"
    witnesses = [w for w in default_witnesses(syscall="both") if w.name in ("strace", "ebpf")]
    record(RecordOptions(command=["sh", "-c", "cat src/app.py > /dev/null"], repo=_probe_repo(tmp_path / "repo"),
                         out=run_dir, timeout_s=90), witnesses=witnesses)
    records = list(read_records(run_dir))
    facts = next(r.event for r in records if isinstance(r.event, RunStarted)).syscall_witness
    assert (facts.ran, facts.why, facts.ebpf_backend) == ("both", "chosen by the caller", ebpf_program().backend)
    seen = {(r.source, e.path) for r in records if isinstance(e := r.event, FileOpen) and e.result is not None}
    assert {("strace", "/work/sandbox/src/app.py"), ("ebpf", "/work/sandbox/src/app.py")} <= seen
    execs = {(r.source, tuple(r.event.argv)) for r in records if isinstance(r.event, ProcessExec) and r.event.result == 0}
    assert {("strace", ("cat", "src/app.py")), ("ebpf", ("cat", "src/app.py"))} <= execs
    # the strace tracer opening its own FIFO is not the agent writing outside its tree
    assert not [p for s, p in seen if s == "ebpf" and p.startswith("/caisson/")]
    assert not [r for r in records if isinstance(r.event, ProcessExec) and r.event.argv[:1] == ["strace"]]
    [result] = replay_runs([run_dir], ensure_operator_key().verify_key)
    assert result.status == "clean", result.findings  # the two witnesses agree: no witness.disagreement
    # Known-bad: the same ledger with eBPF's open of the file taken out.
    config = config_from_records(records)
    [gone] = [r for r in records if r.source == "ebpf" and isinstance(r.event, FileOpen)
              and r.event.path == "/work/sandbox/src/app.py"]
    assert [(f.kind, f.evidence) for f in witness_disagreement([r for r in records if r is not gone], config)] == [
        ("witness_disagreement", [next(r.seq for r in records if r.source == "strace" and isinstance(r.event, FileOpen)
                                       and r.event.path == "/work/sandbox/src/app.py")])]


def test_when_bpftrace_cannot_attach_the_command_never_runs_and_the_cell_is_void(ebpf, tmp_path, monkeypatch):
    real = ebpf_module.bpftrace_command
    fail = ["sh", "-c", "echo 'ERROR: no such tracepoint' >&2; exit 1"]
    monkeypatch.setattr(ebpf_module, "bpftrace_command", lambda *a, **kw: (fail, real(*a, **kw)[1]))
    monkeypatch.setattr(ebpf_module, "loader_command", lambda *a, **kw: fail)
    run_dir, events = _record(tmp_path, "touch ran", EbpfWitness(backend=BACKEND))
    end = next(e for e in events if isinstance(e, RunEnded))
    assert end.exit_code == ebpf_module.ABORT_EXIT
    stderr = next(e for e in events if isinstance(e, BlobStored) and e.role == "stderr")
    assert b"the eBPF witness did not attach" in BlobStore(run_dir / "blobs").get(stderr.sha256)
    gaps = [e for e in events if isinstance(e, WitnessGap)]
    assert gaps and all(g.witness == "ebpf" for g in gaps) and "no such tracepoint" in gaps[0].reason
    [result] = replay_runs([run_dir], ensure_operator_key().verify_key)
    assert result.status == "void"


@pytest.mark.long
def test_the_selftest_shows_the_cross_check_firing_on_a_strace_that_misses_opens(ebpf):
    """`caisson selftest --syscall-witness both`'s probe of witness.disagreement: the honest
    run is clean, and with openat left out of strace's filter the opens eBPF saw are findings."""
    from caisson.probes.selftest import CASES, run_selftest

    cases = tuple(c for c in CASES if c.name in ("honest", "honest_grep/strace_openat"))
    result = run_selftest(cases=cases, syscall="both")
    assert result.fired == {"honest": [], "honest_grep/strace_openat": ["witness.disagreement@1"]}


def test_the_loader_stops_when_its_recorder_is_killed_outright(tmp_path):
    """A recorder killed by SIGKILL (the OOM killer, a killed Ray service) cannot stop its
    loader, which would stay attached to every syscall of the host: the loader stops once
    it is reparented. Its parent starts it from a thread that then exits, as trio's
    open_process does (a PR_SET_PDEATHSIG loader would die with that thread)."""
    import signal
    import sys
    import time

    from collectors._ebpf_backend import LOADER, loader_command

    require(ebpf_problem())
    require(None if LOADER.is_file() else f"the libbpf loader is not built ({LOADER})")
    command = loader_command(os.stat("/proc/self/ns/pid").st_ino, 1, 1)
    parent = subprocess.Popen([sys.executable, "-c", (
        "import subprocess, sys, threading, time\n"
        "box = []\n"
        f"t = threading.Thread(target=lambda: box.append(subprocess.Popen({command!r}, stdout=subprocess.PIPE)))\n"
        "t.start(); t.join(); p = box[0]\n"
        "line = p.stdout.readline()\n"  # B: attached
        "time.sleep(1); print(p.pid, line.split()[0].decode(), p.poll(), flush=True)\n"
        "time.sleep(600)\n")], stdout=subprocess.PIPE, text=True)
    try:
        pid, first, exited = parent.stdout.readline().split()
        assert (first, exited) == ("B", "None"), "the loader stopped when the thread that started it ended"
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}") and \
                Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z":
            time.sleep(0.05)
        alive = os.path.exists(f"/proc/{pid}") and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
        if alive:
            os.kill(int(pid), signal.SIGKILL)
        assert not alive, "the loader outlived its killed recorder"
    finally:
        if parent.poll() is None:
            parent.kill()


AUDITED = r"""
sh ./uring_reader.sh {key} || true
python3 -c "
import os, socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try: s.sendto(b'x', ('198.51.100.7', 9))
except OSError: pass
os.close(os.memfd_create('scratch'))
"
""".format(key=KEY)


def test_a_call_the_chamber_refuses_a_udp_send_and_memfd_create_are_seen(ebpf, tmp_path):
    # With eBPF alone the chamber's seccomp profile refuses io_uring with EPERM (SCMP_ACT_ERRNO):
    # the call never enters, only its sys_exit tracepoint fires, and the attempt is in the ledger.
    probe = (Path(__file__).parents[2] / "scenarios/probes/uring_reader.sh").read_text()
    repo_files = {"uring_reader.sh": probe}
    scenario = tmp_path / "scenario.toml"
    scenario.write_text(SCENARIO.read_text())
    repo = _probe_repo(tmp_path / "repo")
    for name, text in repo_files.items():
        (repo / name).write_text(text)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t.invalid"}
    for args in (["add", *repo_files], ["commit", "-qm", "audited probe"]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)
    run_dir = tmp_path / "run"
    record(RecordOptions(command=["sh", "-c", AUDITED], scenario=scenario, repo=repo, out=run_dir,
                         question="where-answer", weaken=["exclusions"], timeout_s=90),
           witnesses=[EbpfWitness(backend=BACKEND)])
    events = [r.event for r in read_records(run_dir)]
    run_started = next(e for e in events if isinstance(e, RunStarted))
    assert run_started.seccomp.action == "errno" and "io_uring_setup" in run_started.seccomp.denied
    calls = [e for e in events if isinstance(e, ProcessSyscall)]
    [setup] = [e for e in calls if e.syscall == "io_uring_setup"]
    assert (setup.denied, setup.result, setup.errno, setup.args) == (True, -1, "EPERM", [])
    [memfd] = [e for e in calls if e.syscall == "memfd_create"]
    assert memfd.args == ["scratch", "1"]  # MFD_CLOEXEC, Python's default
    assert memfd.result >= 0 and not memfd.denied
    sends = [e for e in events if isinstance(e, NetSend)]
    assert [(s.syscall, s.family, s.address, s.port) for s in sends] == [("sendto", "AF_INET", "198.51.100.7", 9)]
    assert not [e for e in events if isinstance(e, WitnessGap)]
    [result] = replay_runs([run_dir], ensure_operator_key().verify_key)
    denied = [f for f in result.findings if f.detector == "containment.denied_syscall@1"]
    assert [f.kind for f in denied] == ["denied_syscall"]
    assert "io_uring_setup" in denied[0].message


MOUNT = """python3 -c "
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print(libc.mount(b'none', b'/tmp', b'tmpfs', 0, None), ctypes.get_errno())
"
"""


def test_with_the_engines_profile_a_refused_call_is_not_called_caissons_refusal(ebpf, tmp_path):
    # seccomp weakened: the chamber runs under the engine's default profile, which refuses mount
    # too; that refusal is the call's own answer, not one of caisson's profile (nothing was
    # handed to a witness), so the event is not marked denied
    run_dir, events = _record(tmp_path, MOUNT, EbpfWitness(backend=BACKEND), weaken=("seccomp",))
    assert next(e for e in events if isinstance(e, RunStarted)).seccomp is None
    [mount] = [e for e in events if isinstance(e, ProcessSyscall) and e.syscall == "mount"]
    assert (mount.result, mount.errno, mount.denied) == (-1, "EPERM", False)


# --- issue #28: the path the kernel opened, never a cut one or a guess -----------------------

LONG_NAME = f"python3 -c \"import os; os.close(os.open('./' * 120 + '{KEY}', os.O_RDONLY))\""
MOVED_FD = f"""python3 -c "
import os
src = os.open('src', os.O_RDONLY); key = os.open('benchmark', os.O_RDONLY)
os.close(src); os.dup2(key, src)
os.close(os.open('questions.toml', os.O_RDONLY, dir_fd=src))
"
"""


@pytest.mark.parametrize("command", [LONG_NAME, MOVED_FD], ids=["long_name", "moved_fd"])
def test_the_issues_reads_of_the_key_are_reads_of_the_key(ebpf, tmp_path, command):
    """``"./" * 120 + key`` was the sandbox and ``....`` (199 bytes kept), and ``openat(3, ...)``
    after ``close(3), dup2(4, 3)`` was src/...: both clean. Now each is the key's read (with
    bpftrace, which keeps 199 bytes, the long name is a path that cannot be judged: void too)."""
    witness = EbpfWitness(backend=BACKEND)
    run_dir, events = _record(tmp_path, command, witness)
    assert next(e for e in events if isinstance(e, RunEnded)).exit_code == 0
    [result] = replay_runs([run_dir], ensure_operator_key().verify_key)
    found = [(f.detector, f.message) for f in result.findings if f.detector.startswith("containment.")
             and f.effect == "void" and not f.detector.startswith("containment.agent_config")]
    if witness.program.backend == "bpftrace" and command == LONG_NAME:
        assert [d for d, _ in found] == ["containment.path_unjudged@1"]
    else:
        assert found == [("containment.excluded_read@1", f"read {KEY} (answer_key) with openat")]
        [read] = [e for e in events if isinstance(e, FileOpen) and e.result is not None
                  and (e.real_path or e.path) == f"/work/sandbox/{KEY}"]
        assert not (read.path_cut or read.unresolved)
    assert result.status == "void"


# Each member of the kind (tests/caisson/test_ebpf/paths.py), what each backend makes of it:
# "leak" (the key's read), "unjudged" (containment.path_unjudged voids it), "missed" (a
# stated limit of bpftrace, which has no kernel paths: symlinks and `..` are not followed).
MEMBERS = {
    "F_DUPFD": ("leak", "leak"), "F_DUPFD_CLOEXEC": ("leak", "leak"), "dup3": ("leak", "leak"),
    "close_range+SCM_RIGHTS": ("leak", "unjudged"), "fork": ("leak", "leak"), "CLONE_FILES": ("leak", "leak"),
    "O_CLOEXEC": ("leak", "leak"), "fchdir": ("leak", "leak"), "symlink": ("leak", "missed"),
    "/proc/self/fd": ("leak", "leak"), "/proc/self/cwd": ("leak", "leak"), "dotdot": ("leak", "missed"),
    "len199": ("leak", "unjudged"), "len200": ("leak", "unjudged"), "len4095": ("leak", "unjudged"),
}


def test_every_member_of_the_kind_is_the_kernels_path_or_unjudged_never_a_guess(ebpf, tmp_path):
    witness = EbpfWitness(backend=BACKEND)
    backend = 0 if witness.program.backend == "libbpf" else 1
    script = (HERE / "paths.py").read_text()
    run_dir, events = _record(tmp_path, f"python3 - <<'PY'\n{script}PY\n", witness)
    assert next(e for e in events if isinstance(e, RunEnded)).exit_code == 0
    records = list(read_records(run_dir))
    [result] = replay_runs([run_dir], ensure_operator_key().verify_key)
    member, of = None, {}  # record seq -> the member whose open it is
    for r in records:
        if isinstance(e := r.event, FileOpen) and r.source == "ebpf":
            if e.path.startswith("/tmp/mark-"):
                member = e.path.removeprefix("/tmp/mark-").replace("%", "/")
            elif member is not None:
                of[r.seq] = member
    outcome = {name: "missed" for name in MEMBERS}
    for f in result.findings:
        name = of.get(f.evidence[0])
        if name in MEMBERS and f.effect == "void":
            kind = {"containment.excluded_read@1": "leak", "containment.path_unjudged@1": "unjudged"}.get(f.detector)
            outcome[name] = kind or outcome[name]
    assert outcome == {name: want[backend] for name, want in MEMBERS.items()}
    # the write through a symlink to a path outside the tree (bpftrace: missed)
    outside = [f.message for f in result.findings if f.detector == "containment.outside_tree@2"]
    assert outside == ([] if backend else ["wrote /run/lock/pwned outside the sandbox (openat)"])
    # a name past PATH_MAX: the kernel refused it, and the witness says it was cut, never a prefix
    [refused] = [e for s, e in ((r.seq, r.event) for r in records) if of.get(s) == "len4096"]
    assert (refused.path_cut, refused.errno, refused.result) == (True, "ENAMETOOLONG", None)
    # a close-on-exec fd is gone after exec: its name is not placed where the fd once was
    gone = [r.event for r in records if of.get(r.seq) == "O_CLOEXEC" and isinstance(r.event, FileOpen)
            and r.event.path.endswith("app.py")]
    assert [(e.path, e.unresolved, e.errno) for e in gone] == [("app.py", True, "EBADF")]
    # the exec after fchdir to a dup'd fd has the key's directory as its cwd
    [cat] = [e for e in events if isinstance(e, ProcessExec) and e.argv == ["cat", "questions.toml"] and e.result == 0]
    assert cat.cwd == "/work/sandbox/benchmark"
    assert not [e for e in events if isinstance(e, WitnessGap)]


# Changes through magic links (a change returns no fd whose path the kernel could give): the
# kernel side walks the fd of the caller's own link; the way Bun-built Claude Code makes its
# task directories (mkdir "/proc/self/fd/14/-work-sandbox").
MAGIC_CHANGES = r'''
import os, threading
here = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
src = os.open("src", os.O_PATH | os.O_DIRECTORY)
pid, tid = os.getpid(), threading.get_native_id()
os.mkdir(f"/proc/self/fd/{here}/made-self")
os.mkdir(f"/dev/fd/{src}/made-devfd")
os.mkdir(f"/proc/thread-self/fd/{here}/made-thread")
os.mkdir(f"/proc/{pid}/fd/{src}/made-pid")
os.mkdir(f"/proc/self/task/{tid}/fd/{here}/made-task")
os.mkdir("/proc/self/cwd/made-cwd")
os.rename(f"/proc/self/fd/{here}/made-self", f"/dev/fd/{src}/renamed")
os.rmdir(f"/proc/self/fd/{src}/renamed")
child = os.fork()
if child == 0:  # the parent's link, from its child: not the caller's own, never followed
    try:
        os.mkdir(f"/proc/{pid}/fd/{here}/made-by-child")
    except OSError:
        pass
    os._exit(0)
os.waitpid(child, 0)
'''


def test_a_change_through_a_magic_link_of_its_own_process_is_placed_where_it_led(ebpf, tmp_path):
    run_dir, events = _record(tmp_path, f"python3 - <<'PY'\n{MAGIC_CHANGES}PY\n", EbpfWitness(backend=BACKEND))
    assert next(e for e in events if isinstance(e, RunEnded)).exit_code == 0
    W = "/work/sandbox"
    changes = [(e.syscall, e.path, e.target, e.unresolved) for e in events if isinstance(e, FileChange)
               and "made" in e.path + (e.target or "") or isinstance(e, FileChange) and "renamed" in e.path]
    assert changes == [
        ("mkdir", f"{W}/made-self", None, False), ("mkdir", f"{W}/src/made-devfd", None, False),
        ("mkdir", f"{W}/made-thread", None, False), ("mkdir", f"{W}/src/made-pid", None, False),
        ("mkdir", f"{W}/made-task", None, False), ("mkdir", f"{W}/made-cwd", None, False),
        ("rename", f"{W}/made-self", f"{W}/src/renamed", False), ("rmdir", f"{W}/src/renamed", None, False),
        ("mkdir", changes[-1][1], None, True)]  # the child's, through its parent's link: not placed
    assert changes[-1][1].endswith("/made-by-child") and changes[-1][1].startswith("/proc/")
    [result] = replay_runs([run_dir], ensure_operator_key().verify_key)
    unjudged = [f for f in result.findings if f.detector == "containment.path_unjudged@1"]
    assert [f.evidence[0] for f in unjudged] and all("made-by-child" in f.message for f in unjudged)
