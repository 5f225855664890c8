"""Chambers never outlive their recorder: caisson.chamber._reap, the chamber's own
deadline, reaping at `caisson record` start, and `caisson gc`."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest
import trio

from caisson.chamber import ContainerSpec, open_engine
from caisson.chamber._docker import _create_config
from caisson.chamber._reap import (
    DEADLINE_LABEL,
    RECORDER_HOST_LABEL,
    RECORDER_PID_LABEL,
    RECORDER_PIDNS_LABEL,
    RECORDER_START_LABEL,
    RecorderIdentity,
    orphan_reason,
    process_start,
    reap,
    recorder_identity,
    recorder_labels,
)
from caisson.chamber.scratch import RECORDER_FILE, SCRATCH_ENV, open_scratch
from caisson.cli import main
from ledger import read_records
from ledger.events import ChamberReaped

ROOT = Path(__file__).resolve().parents[2]
HERE = RecorderIdentity(pid=7, start="5", host="host-a/boot-1", pid_ns="pid:[4026531836]")
NOW = 1_800_000_000 * 10**9


def labels(pid: int = 42, start: str = "100", host: str = HERE.host, deadline_ns: int = NOW,
           pid_ns: str = HERE.pid_ns) -> dict[str, str]:
    return {RECORDER_PID_LABEL: str(pid), RECORDER_START_LABEL: start, RECORDER_HOST_LABEL: host,
            RECORDER_PIDNS_LABEL: pid_ns, DEADLINE_LABEL: str(deadline_ns)}


def _unreadable(pid: int) -> str | None:
    raise PermissionError(f"/proc/{pid} is hidden")


@pytest.mark.parametrize("found, started, here, expected", [
    (labels(), {42: "100"}.get, HERE, None),  # its recorder runs
    (labels(), {}.get, HERE, "its recorder (pid 42) is gone"),
    (labels(), {42: "999"}.get, HERE, "its recorder (pid 42, started at tick 100) is gone; the pid was reused"),
    # another host: its own reaper can tell, this one cannot, however long ago its deadline passed
    (labels(host="host-b/boot-1"), {}.get, HERE, None),
    (labels(host="host-b/boot-1", deadline_ns=NOW - 3600 * 10**9), {}.get, HERE, None),
    (labels(host="host-a/boot-0"), {}.get, HERE, None),  # rebooted, or another machine of that name
    # the same host, another PID namespace (a container sharing the host's name and files):
    # its pid 42 is not this namespace's pid 42
    (labels(pid_ns="pid:[4026532999]"), {}.get, HERE, None),
    (labels(pid_ns="pid:[4026532999]"), {42: "999"}.get, HERE, None),
    ({k: v for k, v in labels().items() if k != RECORDER_PIDNS_LABEL}, {}.get, HERE, None),  # an older caisson's
    (labels(start=""), {}.get, HERE, None),  # its recorder could not tell its own start
    (labels(), _unreadable, HERE, None),  # the process table cannot be read for it: unknown, alive
    # the reaper's /proc is not its own namespace's: it cannot tell
    (labels(), {}.get, RecorderIdentity(pid=7, start="5", host=HERE.host, pid_ns=""), None),
    ({}, {}.get, HERE, None),  # no recorder labels (an older caisson, or by hand): never reaped
    ({**labels(), RECORDER_PID_LABEL: "x"}, {}.get, HERE, None),
    ({**labels(), RECORDER_PID_LABEL: "0"}, {}.get, HERE, None),  # kill(0, 0) would ask its own group
])
def test_orphan_reason_needs_proof_of_death(found, started, here, expected) -> None:
    assert orphan_reason(found, here=here, started=started) == expected


def test_process_start_tells_a_reused_pid_and_never_calls_a_hidden_process_gone(monkeypatch) -> None:
    me = recorder_identity()
    assert me.pid == os.getpid() and me.start == process_start(os.getpid()) and me.complete
    assert me.pid_ns == os.readlink("/proc/self/ns/pid")
    child = subprocess.Popen(["sleep", "0"])
    child.wait()
    assert process_start(child.pid) is None  # reaped: no such process
    assert recorder_labels(me, 5)[DEADLINE_LABEL] == "5"
    # /proc mounted with hidepid hides a running process's entry: ENOENT, yet it runs
    real = Path.read_bytes

    def hidden(path: Path) -> bytes:
        if str(path) == f"/proc/{os.getpid()}/stat":
            raise FileNotFoundError(2, "No such file or directory", str(path))
        return real(path)

    monkeypatch.setattr(Path, "read_bytes", hidden)
    with pytest.raises(OSError):
        process_start(os.getpid())
    assert orphan_reason(recorder_labels(me, 0), here=me, started=process_start) is None


def test_self_deadline_wraps_the_command_in_timeout() -> None:
    spec = ContainerSpec(image="i", cmd=["strace", "--", "agent"], self_deadline_s=17.2)
    assert _create_config(spec, "r")["Cmd"] == ["timeout", "-s", "KILL", "18", "strace", "--", "agent"]
    assert _create_config(ContainerSpec(image="i", cmd=["x"]), "r")["Cmd"] == ["x"]


def test_the_chamber_kills_itself_with_no_caller_deadline(chamber_image) -> None:
    spec = ContainerSpec(image=chamber_image, cmd=["sleep", "120"], self_deadline_s=2)

    async def go():
        async with open_engine() as engine:
            return await engine.run(spec)

    t = time.monotonic()
    result = trio.run(go)
    assert time.monotonic() - t < 30
    assert not result.timed_out and result.exit_code in (124, 137), result


def _containers(run_dir: Path) -> list[dict]:
    out = subprocess.run(["docker", "ps", "-a", "--filter", f"label=caisson.run_dir={run_dir.resolve()}",
                          "--format", "{{json .}}"], capture_output=True, text=True, check=True).stdout
    return [json.loads(line) for line in out.splitlines()]


def _inspect(cid: str) -> dict:
    out = subprocess.run(["docker", "inspect", cid], capture_output=True, text=True, check=True).stdout
    return json.loads(out)[0]


@pytest.mark.engine_exclusive  # another run's `record` would reap the orphan first
def test_a_sigkilled_recorder_leaves_no_chamber(chamber_image, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv(SCRATCH_ENV, str(tmp_path / "scratch"))  # the recorder's and the next one's
    scratch_root = tmp_path / "scratch"
    scenario = tmp_path / "s.toml"
    scenario.write_text('name = "loop"\n[limits]\ncpus = 0.1\n')
    run_dir = tmp_path / "orphan"
    proc = subprocess.Popen([sys.executable, "-m", "caisson.cli", "record", "--scenario", str(scenario), "--timeout",
                             "2", "--out", str(run_dir), "--", "sh", "-c", "while :; do :; done"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        until = time.monotonic() + 60
        while time.monotonic() < until and not any(c["State"] == "running" for c in _containers(run_dir)):
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    found = _containers(run_dir)
    # still running (its command, or its wrapper waiting for the eBPF witness's go), or
    # already exited: a wrapper whose go FIFO closed with the recorder never runs the command
    assert len(found) == 1 and found[0]["State"] in ("running", "exited"), found
    info = _inspect(found[0]["ID"])
    deadline_ns = int(info["Config"]["Labels"][DEADLINE_LABEL])
    assert info["Config"]["Labels"][RECORDER_PID_LABEL] == str(proc.pid)
    while info["State"]["Running"] and time.time_ns() < deadline_ns + 20 * 10**9:  # 20 s of slack for load
        time.sleep(0.5)
        info = _inspect(found[0]["ID"])
    assert not info["State"]["Running"], "the chamber outlived its deadline with no recorder"
    run_id = info["Config"]["Labels"]["caisson.run"]
    scratch = [p for p in scratch_root.iterdir()
               if json.loads((p / RECORDER_FILE).read_text())["caisson.run"] == run_id]
    assert len(scratch) == 1 and (scratch[0] / RECORDER_FILE).exists()  # the dead recorder left it

    # The next record reaps what the dead one left, says so, and records it.
    run2 = tmp_path / "next"
    capsys.readouterr()
    assert main(["record", "--out", str(run2), "--", "true"]) == 0
    err = capsys.readouterr().err
    assert f"reaped container {found[0]['Names']} (run {run_id}, exited): its recorder (pid {proc.pid}) is gone" in err
    assert f"reaped scratch {scratch[0]}" in err
    reaped = [r.event for r in read_records(run2) if isinstance(r.event, ChamberReaped)]
    assert {(e.target, e.run_id, e.removed) for e in reaped} >= {("container", run_id, True), ("scratch", run_id, True)}
    assert _containers(run_dir) == [] and not scratch[0].exists()


_UNSHARED_RECORDER = """
import os, sys
from pathlib import Path
from caisson.run.record import RecordOptions, record
print(os.getpid(), flush=True)
outcome = record(RecordOptions(command=["sleep", "8"], out=Path(sys.argv[1]), timeout_s=60))
print(outcome.status, outcome.reason, flush=True)
"""


@pytest.mark.long
@pytest.mark.engine_exclusive  # each record reaps every orphan it finds on the engine
def test_recorders_started_at_once_reap_none_of_the_living(chamber_image, tmp_path) -> None:
    """Several recorders at once, one of them in a PID namespace of its own (as in a
    container that shares the host's name and scratch directories, where its pid is 1):
    none of the others reaps its chamber or scratch directory, nor each other's."""
    from tests.caisson.conftest import require

    if os.geteuid() != 0 or not shutil.which("unshare"):
        require("a PID namespace of its own needs root and unshare(1)")
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, SCRATCH_ENV: str(tmp_path / "scratch"), "TMPDIR": str(tmp_path / "tmp")}
    apart = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", _UNSHARED_RECORDER,
                              str(tmp_path / "apart")], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        until = time.monotonic() + 60
        while not any(c["State"] == "running" for c in _containers(tmp_path / "apart")):
            assert time.monotonic() < until and apart.poll() is None, apart.communicate()
            time.sleep(0.2)
        many = [subprocess.Popen([sys.executable, "-m", "caisson.cli", "record", "--out", str(tmp_path / f"r{i}"), "--",
                                  "sleep", "2"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True) for i in range(3)]
        results = [(p.wait(timeout=120), p.communicate()[1]) for p in many]
        out, err = apart.communicate(timeout=120)
    finally:
        for p in (apart, *locals().get("many", ())):
            if p.poll() is None:
                p.kill()
    assert out.split()[0] == "1", out  # its pid in its own namespace
    assert [code for code, _ in results] == [0, 0, 0], results
    assert not [e for _, e in results if "reap" in e], results
    assert out.split()[1] == "completed", (out, err)
    for i in range(3):
        assert not [r for r in read_records(tmp_path / f"r{i}") if isinstance(r.event, ChamberReaped)]
    assert list((tmp_path / "scratch").iterdir()) == []  # each recorder removed its own


@pytest.mark.engine_exclusive  # `gc` reaps every orphan; another run's `record` would reap ours first
def test_gc_lists_then_removes(chamber_image, tmp_path, capsys) -> None:
    child = subprocess.Popen(["sleep", "0"])
    child.wait()  # a recorder that is gone
    me = recorder_identity()
    dead = recorder_labels(msgspec.structs.replace(me, pid=child.pid, start="1"), 0)
    run_id = f"gc-test-{os.getpid()}"
    flags = [x for k, v in {**dead, "caisson.run": run_id}.items() for x in ("--label", f"{k}={v}")]
    net = subprocess.run(["docker", "network", "create", "--internal", *flags, f"caisson-{run_id}"],
                         capture_output=True, text=True, check=True).stdout.strip()
    cid = subprocess.run(["docker", "run", "-d", "--network", "none", *flags, chamber_image, "sleep", "300"],
                         capture_output=True, text=True, check=True).stdout.strip()
    try:
        assert main(["gc", "--dry-run"]) == 0
        err = capsys.readouterr().err
        assert "orphan container" in err and f"(run {run_id}, running): its recorder (pid {child.pid}) is gone" in err
        assert f"orphan network caisson-{run_id} (run {run_id})" in err
        assert _inspect(cid)["State"]["Running"]
        assert main(["gc"]) == 0
        err = capsys.readouterr().err
        assert "reaped container" in err and f"reaped network caisson-{run_id}" in err
        assert subprocess.run(["docker", "inspect", cid], capture_output=True).returncode != 0
        assert subprocess.run(["docker", "network", "inspect", net], capture_output=True).returncode != 0
    finally:
        subprocess.run(["docker", "rm", "-f", cid], capture_output=True)
        subprocess.run(["docker", "network", "rm", net], capture_output=True)


class _Engine:
    """An engine that lists the given containers and networks and removes them."""

    def __init__(self, containers=(), networks=()):
        self.containers, self.networks, self.removed = list(containers), list(networks), []

    async def labelled(self):
        return self.containers, self.networks

    async def remove_container(self, cid):
        self.removed.append(cid)

    async def remove_network_id(self, nid):
        self.removed.append(nid)


def _dead_labels(run_id: str) -> dict[str, str]:
    me = recorder_identity()
    return {**recorder_labels(msgspec.structs.replace(me, start="0"), 0), "caisson.run": run_id}  # pid reused


def test_reap_removes_orphan_scratch_dirs_only(tmp_path) -> None:
    me = recorder_identity()
    alive = {**recorder_labels(me, 0), "caisson.run": "r2"}
    for name, owner in (("r1", _dead_labels("r1")), ("r2", alive), ("r3", None)):
        d = tmp_path / name
        (d / "sandbox").mkdir(parents=True)
        (d / "sandbox" / "f").write_text("x")
        os.chmod(d / "sandbox", 0o500)
        if owner is not None:
            (d / RECORDER_FILE).write_text(json.dumps(owner))
    being_made = tmp_path / "r4"  # its recorder.json not renamed in place yet
    being_made.mkdir()
    (being_made / f"{RECORDER_FILE}.part").write_text(json.dumps(_dead_labels("r4"))[:20])

    found = trio.run(lambda: reap(_Engine(), root=tmp_path))  # type: ignore[arg-type]
    assert [(r.kind, r.run_id, r.removed) for r in found] == [("scratch", "r1", True)]
    assert not (tmp_path / "r1").exists()
    assert (tmp_path / "r2").exists() and (tmp_path / "r3").exists() and being_made.exists()


def test_a_held_scratch_dir_and_its_runs_chambers_are_never_reaped(tmp_path) -> None:
    """Labels that read as dead (a pid reused) do not make an orphan while the directory's
    lock is held: nor its run's container and network."""
    held = open_scratch(_dead_labels("held"), root=tmp_path)
    engine = _Engine(
        containers=[{"id": "c1", "name": "held-c", "labels": _dead_labels("held"), "state": "running"},
                    {"id": "c2", "name": "dead-c", "labels": _dead_labels("dead"), "state": "exited"}],
        networks=[{"id": "n1", "name": "caisson-held", "labels": _dead_labels("held"), "state": ""}])
    try:
        found = trio.run(lambda: reap(engine, root=tmp_path))  # type: ignore[arg-type]
        assert [(r.kind, r.run_id) for r in found] == [("container", "dead")] and engine.removed == ["c2"]
        assert (held.path / RECORDER_FILE).is_file()
    finally:
        held.remove()
    assert not held.path.exists()


def _hold_scratch(root: Path, ready: Path) -> subprocess.Popen:
    """A process that makes a scratch directory under ``root`` labelled with its own identity
    and holds it until killed; ``ready`` holds the directory's path once it is made."""
    code = ("import sys, time; from pathlib import Path\n"
            "from caisson.chamber._reap import recorder_identity, recorder_labels\n"
            "from caisson.chamber.scratch import open_scratch\n"
            "labels = {**recorder_labels(recorder_identity(), 0), 'caisson.run': 'child'}\n"
            "held = open_scratch(labels, root=Path(sys.argv[1]))\n"
            "Path(sys.argv[2]).write_text(str(held.path))\n"
            "time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(root), str(ready)], cwd=ROOT)
    until = time.monotonic() + 30
    while not ready.exists() or not ready.read_text():
        assert time.monotonic() < until and proc.poll() is None
        time.sleep(0.05)
    return proc


def test_a_scratch_dir_is_reaped_once_its_recorder_is_dead_not_before(tmp_path) -> None:
    root = tmp_path / "scratch"
    proc = _hold_scratch(root, tmp_path / "ready")
    path = Path((tmp_path / "ready").read_text())
    try:
        assert trio.run(lambda: reap(_Engine(), root=root)) == []  # type: ignore[arg-type]
        assert path.is_dir()
    finally:
        proc.kill()
        proc.wait()
    [found] = trio.run(lambda: reap(_Engine(), root=root))  # type: ignore[arg-type]
    assert (found.kind, found.run_id, found.removed) == ("scratch", "child", True)
    assert found.reason == f"its recorder (pid {proc.pid}) is gone" and not path.exists()


def test_unguard_interface_removes_a_dead_runs_firewall_rules() -> None:
    import shutil

    from caisson.chamber._firewall import guard_bridge, unguard_interface
    from tests.caisson.conftest import require

    if shutil.which("iptables") is None or os.geteuid() != 0:
        require("iptables as root is needed to guard a bridge")
    bridge = f"caiT{os.getpid() % 10**8}"[:15]
    rules = guard_bridge(bridge, "10.255.0.1", [("tcp", 1), ("udp", 53)])
    try:
        assert unguard_interface(bridge) == len(rules) == 5
        assert unguard_interface(bridge) == 0
        listed = subprocess.run(["iptables", "-S", "INPUT"], capture_output=True, text=True).stdout
        assert f"-i {bridge} " not in listed
    finally:
        unguard_interface(bridge)
