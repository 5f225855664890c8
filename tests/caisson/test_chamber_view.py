"""What a recorded chamber can see of its host, end to end (`caisson record` on a real
engine): its mount table, resolver, host name and cgroup, and the ledger's record of them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from caisson.chamber.scratch import SCRATCH_ENV, scratch_root
from ledger import read_records
from ledger.events import BlobStored, RunStarted

ROOT = Path(__file__).resolve().parents[2]

LOOK = ("cat /proc/self/mountinfo; echo @; cat /etc/resolv.conf; echo @; cat /etc/hostname; hostname; echo $HOSTNAME;"
        " echo @; cat /etc/hosts; echo @; cat /proc/self/cgroup; sleep 2")


def _blobs(run_dir: Path) -> dict[str, bytes]:
    return {r.event.role: (run_dir / "blobs" / r.event.sha256[:2] / r.event.sha256).read_bytes()
            for r in read_records(run_dir) if isinstance(r.event, BlobStored)}


def _record(run_dir: Path, scenario: Path | None) -> str:
    """Run ``LOOK`` in a chamber with `caisson record`; its container's id, seen while it ran."""
    env = {k: v for k, v in os.environ.items() if k != SCRATCH_ENV}  # the default root, as an operator's
    args = ["--scenario", str(scenario)] if scenario else []
    proc = subprocess.Popen([sys.executable, "-m", "caisson.cli", "record", *args, "--out", str(run_dir), "--",
                             "sh", "-c", LOOK], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    cid = ""
    while proc.poll() is None and not cid:
        cid = subprocess.run(["docker", "ps", "-q", "--no-trunc", "--filter", f"label=caisson.run_dir={run_dir}"],
                             capture_output=True, text=True).stdout.strip()
        time.sleep(0.1)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and len(cid) == 64, err
    return cid


@pytest.mark.parametrize("network", [False, True], ids=["no-network", "witnessed-network"])
def test_the_chamber_sees_no_host_temp_path_run_or_container_id(chamber_image, tmp_path, network):
    if os.geteuid() != 0:
        pytest.skip("caisson record with its syscall witness runs as root (its default scratch root is root's)")
    scenario = None
    if network:
        scenario = tmp_path / "net.toml"
        scenario.write_text('name = "net"\n[egress]\nallow_hosts = ["example.com"]\n')
    run_dir = (tmp_path / "run").resolve()
    cid = _record(run_dir, scenario)
    records = list(read_records(run_dir))
    run_id = next(r.event for r in records if isinstance(r.event, RunStarted)).run_id
    blobs = _blobs(run_dir)
    seen = blobs["stdout"].decode()
    mountinfo, resolv, hostname, hosts, cgroup = seen.split("@\n")

    # nothing the chamber can read names the run, the container, the caller or the host's temp dir
    for fact in (run_id, cid, cid[:12], str(ROOT), str(tmp_path)):
        assert fact not in seen, fact
    temp = tempfile.gettempdir()
    roots = [line.split()[3] for line in mountinfo.splitlines()]
    assert not [r for r in roots if r.startswith(temp + "/") or r.startswith(os.path.expanduser("~") + "/")], roots
    # its binds come from the run's own tmpfs (caisson.chamber.scratch.mount_chamber_fs): each
    # root names a path within it, nothing of the host's, not even the opaque scratch directory
    assert not [r for r in roots if r.startswith(str(scratch_root()))], roots
    mine = {line.split()[3]: line.split()[4] for line in mountinfo.splitlines() if " - tmpfs " in line
            and line.split()[4] in ("/work/sandbox", "/tmp/caisson-home", "/caisson/witness", "/etc/hosts")}
    witness = {"/witness": "/caisson/witness"} if "/witness" in mine else {}  # strace's FIFO dir, when it runs
    assert mine == {"/sandbox": "/work/sandbox", "/home": "/tmp/caisson-home", "/etc/hosts": "/etc/hosts",
                    **witness}, roots
    assert hostname == "chamber\nchamber\nchamber\n" and "chamber" in hosts
    assert all(line.endswith(":/") for line in cgroup.splitlines()), cgroup
    host_nameservers = [ln.split()[1] for ln in Path("/etc/resolv.conf").read_text().splitlines()
                        if ln.startswith("nameserver")]
    if network:  # the DNS witness on the network's gateway, alone
        assert re.fullmatch(r"nameserver \d+\.\d+\.\d+\.\d+\n", resolv), resolv
        assert resolv.split()[1] not in host_nameservers
    else:
        assert "nameserver" not in resolv, resolv
    # the ledger keeps what the chamber saw
    assert blobs["chamber.mountinfo"].decode() == mountinfo
    assert blobs["chamber.etc.resolv.conf"].decode() == resolv
    assert blobs["chamber.etc.hostname"] == b"chamber\n" and blobs["chamber.etc.hosts"].decode() == hosts
