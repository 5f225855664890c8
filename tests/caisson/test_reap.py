"""Chambers never outlive their recorder: caisson.chamber.reap, the chamber's own
deadline, reaping at `caisson record` start, and `caisson gc`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from caisson.chamber import ContainerSpec, open_engine
from caisson.chamber._docker import _create_config
from caisson.chamber.reap import (
    DEADLINE_LABEL,
    RECORDER_FILE,
    RECORDER_HOST_LABEL,
    RECORDER_PID_LABEL,
    RECORDER_START_LABEL,
    orphan_reason,
    process_start,
    reap,
    recorder_identity,
    recorder_labels,
)
from caisson.cli import main
from ledger import read_records
from ledger.events import ChamberReaped

ROOT = Path(__file__).resolve().parents[2]
HERE = "host-a/boot-1"
NOW = 1_800_000_000 * 10**9


def labels(pid: int = 42, start: str = "100", host: str = HERE, deadline_ns: int = NOW) -> dict[str, str]:
    return {RECORDER_PID_LABEL: str(pid), RECORDER_START_LABEL: start, RECORDER_HOST_LABEL: host,
            DEADLINE_LABEL: str(deadline_ns)}


@pytest.mark.parametrize("found, started, expected", [
    (labels(), {42: "100"}, None),  # its recorder runs
    (labels(), {}, "its recorder (pid 42) is gone"),
    (labels(), {42: "999"}, "its recorder (pid 42, started at tick 100) is gone; the pid was reused"),
    (labels(host="host-b/boot-1"), {}, None),  # another host, deadline just now: wait
    (labels(host="host-b/boot-1", deadline_ns=NOW - 61 * 10**9), {},
     "its recorder is on another host (host-b/boot-1) and its deadline passed 61 s ago"),
    (labels(host="host-a/boot-0"), {42: "100"}, None),  # rebooted: judged by the deadline only
    ({}, {}, None),  # no recorder labels (an older caisson, or by hand): never reaped
    ({**labels(), RECORDER_PID_LABEL: "x"}, {}, None),
])
def test_orphan_reason(found, started, expected) -> None:
    assert orphan_reason(found, here=HERE, started=started.get, now_ns=NOW) == expected


def test_process_start_tells_a_reused_pid() -> None:
    me = recorder_identity()
    assert me.pid == os.getpid() and me.start == process_start(os.getpid())
    child = subprocess.Popen(["sleep", "0"])
    child.wait()
    assert process_start(child.pid) is None  # reaped: no such process
    assert recorder_labels(me, 5)[DEADLINE_LABEL] == "5"


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
def test_a_sigkilled_recorder_leaves_no_chamber(chamber_image, tmp_path, capsys) -> None:
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
    assert [c["State"] for c in found] == ["running"], found
    info = _inspect(found[0]["ID"])
    deadline_ns = int(info["Config"]["Labels"][DEADLINE_LABEL])
    assert info["Config"]["Labels"][RECORDER_PID_LABEL] == str(proc.pid)
    while info["State"]["Running"] and time.time_ns() < deadline_ns + 20 * 10**9:  # 20 s of slack for load
        time.sleep(0.5)
        info = _inspect(found[0]["ID"])
    assert not info["State"]["Running"], "the chamber outlived its deadline with no recorder"
    run_id = info["Config"]["Labels"]["caisson.run"]
    scratch = [p for p in Path(os.environ.get("TMPDIR", "/tmp")).glob(f"caisson-{run_id}-*")]
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


@pytest.mark.engine_exclusive  # `gc` reaps every orphan; another run's `record` would reap ours first
def test_gc_lists_then_removes(chamber_image, tmp_path, capsys) -> None:
    child = subprocess.Popen(["sleep", "0"])
    child.wait()  # a recorder that is gone
    me = recorder_identity()
    dead = recorder_labels(type(me)(pid=child.pid, start="1", host=me.host), 0)
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


def test_reap_removes_orphan_scratch_dirs_only(tmp_path) -> None:
    me = recorder_identity()
    gone = {**recorder_labels(type(me)(pid=me.pid, start="0", host=me.host), 0), "caisson.run": "r1"}
    alive = {**recorder_labels(me, 0), "caisson.run": "r2"}
    for name, owner in (("caisson-r1-x", gone), ("caisson-r2-y", alive), ("caisson-r3-z", None)):
        d = tmp_path / name
        (d / "sandbox").mkdir(parents=True)
        (d / "sandbox" / "f").write_text("x")
        os.chmod(d / "sandbox", 0o500)
        if owner is not None:
            (d / RECORDER_FILE).write_text(json.dumps(owner))

    class NoEngine:
        async def labelled(self):
            return [], []

    found = trio.run(lambda: reap(NoEngine(), tmp=tmp_path))  # type: ignore[arg-type]
    assert [(r.kind, r.run_id, r.removed) for r in found] == [("scratch", "r1", True)]
    assert not (tmp_path / "caisson-r1-x").exists()
    assert (tmp_path / "caisson-r2-y").exists() and (tmp_path / "caisson-r3-z").exists()


def test_unguard_interface_removes_a_dead_runs_firewall_rules() -> None:
    import shutil

    from caisson.chamber._firewall import guard_bridge, unguard_interface
    from tests.caisson.conftest import require

    if shutil.which("iptables") is None or os.geteuid() != 0:
        require("iptables as root is needed to guard a bridge")
    bridge = f"caiT{os.getpid() % 10**8}"[:15]
    rules = guard_bridge(bridge, [("tcp", 1), ("udp", 53)])
    try:
        assert unguard_interface(bridge) == len(rules) == 5
        assert unguard_interface(bridge) == 0
        listed = subprocess.run(["iptables", "-S", "INPUT"], capture_output=True, text=True).stdout
        assert f"-i {bridge} " not in listed
    finally:
        unguard_interface(bridge)
