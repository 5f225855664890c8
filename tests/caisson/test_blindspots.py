"""Issue 15 items 1, 2 and 7 end to end, in the chamber: io_uring refused and seen, sends
without connect traced and their flows reported, an exit status never taken for a signal."""

from __future__ import annotations

from pathlib import Path

import pytest

from caisson.detectors import config_from_records
from caisson.detectors.containment import denied_syscall, excluded_read
from caisson.detectors.network import bypass_attempt, unexplained_flow
from caisson.probes.selftest import PROBES, make_probe_repo
from caisson.run.record import RecordOptions, record
from caisson.run.witnesses import ProcfsWitness, StraceWitness, default_witnesses
from ledger import read_records
from ledger.events import NetSend, ProcessExec, ProcessExit, ProcessSyscall, RunEnded, RunStarted

pytestmark = pytest.mark.docker

EXCLUDE_KEY = '''
name = "blindspots"
[[exclusions]]
category = "answer_key"
globs = ["benchmark/**"]
'''


def _run(tmp_path: Path, command: list[str], *, witnesses, scenario: str = EXCLUDE_KEY, weaken=(), repo=None,
         name="run"):
    sc = tmp_path / f"{name}.toml"
    sc.write_text(scenario)
    out = tmp_path / name
    outcome = record(RecordOptions(command=command, scenario=sc, repo=repo, out=out, weaken=list(weaken),
                                   timeout_s=90), witnesses=witnesses)
    return outcome, list(read_records(out))


def _stdout(records, run_dir: Path) -> str:
    digest = next(r.event.sha256 for r in records if getattr(r.event, "role", None) == "stdout")
    return (run_dir / "blobs" / digest[:2] / digest).read_text()


def test_io_uring_read_of_the_answer_key_is_refused_and_reported(chamber_image, tmp_path):
    repo = make_probe_repo(tmp_path)  # its answer key: benchmark/questions.toml
    probe = ["sh", "-c", (PROBES / "uring_reader.sh").read_text()]
    # The key stays in the tree (exclusions weakened): only the chamber's profile stands between.
    _, records = _run(tmp_path, probe, witnesses=[StraceWitness(), ProcfsWitness()], weaken=["exclusions"],
                      repo=repo)
    started = next(r.event for r in records if isinstance(r.event, RunStarted))
    assert started.seccomp.action == "trace" and "io_uring_setup" in started.seccomp.denied
    denied = [r.event for r in records if isinstance(r.event, ProcessSyscall)]
    assert [(e.syscall, e.errno, e.denied) for e in denied] == [("io_uring_setup", "EPERM", True)]
    stdout = _stdout(records, tmp_path / "run")
    assert "io_uring refused: [Errno 1]" in stdout and "where-answer" not in stdout
    config = config_from_records(records)
    assert [f.kind for f in denied_syscall(records, config)] == ["denied_syscall"]
    assert list(excluded_read(records, config)) == []  # nothing read: the ring never existed


def test_io_uring_is_refused_by_the_kernel_when_no_tracer_runs(chamber_image, tmp_path):
    probe = ["sh", "-c", (PROBES / "uring_reader.sh").read_text(), "uring", "/etc/hostname"]
    _, records = _run(tmp_path, probe, witnesses=[])
    started = next(r.event for r in records if isinstance(r.event, RunStarted))
    assert started.seccomp.action == "errno"
    assert "io_uring refused: [Errno 1]" in _stdout(records, tmp_path / "run")


def test_unconnected_udp_sends_are_traced_and_their_flows_reported(chamber_image, tmp_path):
    probe = ["sh", "-c", (PROBES / "udp_sender.sh").read_text()]
    scenario = EXCLUDE_KEY + '[egress]\nallow_hosts = ["api.anthropic.com"]\n'
    _, records = _run(tmp_path, probe, witnesses=default_witnesses(), scenario=scenario)
    sends = [(e.syscall, e.address, e.port, e.flags) for e in (r.event for r in records) if isinstance(e, NetSend)]
    assert ("sendto", "1.1.1.1", 53, "0") in sends
    assert {(s, p) for s, _, p, _ in sends} >= {("sendto", 18081), ("sendmsg", 18082), ("sendto", 18080)}
    config = config_from_records(records)
    shown = [f.message for f in bypass_attempt(records, config)]
    assert any("sendto to 1.1.1.1:53 directly" in m for m in shown), shown
    found = list(unexplained_flow(records, config))
    flows = [f.message for f in found]
    assert any(m.startswith("udp ") and "-> 1.1.1.1:53" in m for m in flows), flows
    assert any(":18081" in m for m in flows), flows
    # the controls held: dropped or refused, never answered: shown, not void
    assert all(f.effect == "info" for f in found) and all("came back:" in m for m in flows), flows


def test_exit_130_is_an_exit_status_and_a_sigint_death_is_a_signal(chamber_image, tmp_path):
    cmd = ["sh", "-c", "sh -c 'kill -INT $$'; exit 130"]
    outcome, records = _run(tmp_path, cmd, witnesses=[StraceWitness(), ProcfsWitness()], scenario='name = "x"\n')
    end = next(r.event for r in records if isinstance(r.event, RunEnded))
    assert (end.exit_code, end.signal, end.oom_killed) == (130, None, False)  # not "SIGINT"
    assert outcome.exit_code == 130 and outcome.signal is None
    execs = {r.event.pid: r.event.argv for r in records if isinstance(r.event, ProcessExec)}
    exits = {tuple(execs[r.event.pid]): (r.event.code, r.event.signal) for r in records
             if isinstance(r.event, ProcessExit) and r.event.pid in execs}
    assert exits[("sh", "-c", "kill -INT $$")] == (None, "SIGINT")
    assert exits[("sh", "-c", "sh -c 'kill -INT $$'; exit 130")] == (130, None)


def test_an_oom_killed_child_under_a_shell_that_exits_0(chamber_image, tmp_path):
    hog = "python3 -c 'b = bytearray(400 << 20)'"
    scenario = 'name = "oom"\n[limits]\nmemory_bytes = 67108864\n'
    outcome, records = _run(tmp_path, ["sh", "-c", f"{hog}; exit 0"], witnesses=[StraceWitness(), ProcfsWitness()],
                            scenario=scenario)
    end = next(r.event for r in records if isinstance(r.event, RunEnded))
    assert (end.exit_code, end.signal, end.oom_killed, end.status) == (0, None, True, "completed")
    assert "OOM killer" in end.reason
    hogs = {r.event.pid for r in records if isinstance(r.event, ProcessExec) and "python3" in r.event.path}
    assert [(r.event.code, r.event.signal) for r in records
            if isinstance(r.event, ProcessExit) and r.event.pid in hogs] == [(None, "SIGKILL")]


# The syscall numbers of every denied call (x86_64 and arm64 share those from 424 on).
_NUMBERS = {
    "x86_64": {"name_to_handle_at": 303, "open_by_handle_at": 304, "fanotify_init": 300, "fanotify_mark": 301,
               "mount": 165, "umount2": 166},
    "aarch64": {"name_to_handle_at": 264, "open_by_handle_at": 265, "fanotify_init": 262, "fanotify_mark": 263,
                "mount": 40, "umount2": 39},
}
_SHARED = {"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428,
           "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "pidfd_getfd": 438,
           "mount_setattr": 442}


def test_every_denied_call_is_refused_in_the_chamber_and_seen(chamber_image, tmp_path):
    import platform

    from collectors.strace import DENIED_SYSCALLS

    numbers = {**_NUMBERS[platform.machine()], **_SHARED}
    assert set(numbers) == set(DENIED_SYSCALLS)  # a new denial needs its number here
    script = ("import ctypes, sys\nlibc = ctypes.CDLL(None, use_errno=True)\n"
              "for nr in map(int, sys.argv[1:]):\n"
              "    print(nr, libc.syscall(nr, 0, 0, 0, 0, 0), ctypes.get_errno())\n")
    cmd = ["python3", "-c", script, *map(str, numbers.values())]
    _, records = _run(tmp_path, cmd, witnesses=[StraceWitness(), ProcfsWitness()], scenario='name = "x"\n')
    seen = {r.event.syscall: (r.event.errno, r.event.denied) for r in records if isinstance(r.event, ProcessSyscall)}
    assert seen == {name: ("EPERM", True) for name in DENIED_SYSCALLS}
    assert all(line.endswith(" -1 1") for line in _stdout(records, tmp_path / "run").splitlines())
    config = config_from_records(records)
    assert [f.kind for f in denied_syscall(records, config)] == ["denied_syscall"] * len(DENIED_SYSCALLS)
