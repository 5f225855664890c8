"""The strace and procfs witnesses in a real chamber (strace chosen: eBPF is the default where it
qualifies): exec trees, files, health, the tracer's safety."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path


from caisson.cli import main
from caisson.home import ensure_operator_key
from ledger import read_records, verify_ledger
from ledger.events import (
    FileOpen, HostSample, ProcessExec, ProcessExit, ProcSample, RunEnded, WitnessGap, WitnessRaw,
    WitnessStarted, WitnessStopped,
)

ROOT = Path(__file__).resolve().parents[2]

PIPELINE = r"""
echo 'alpha beta' > words.txt
cat words.txt | tr a-z A-Z | grep -c ALPHA > count.txt
python3 - <<'PY'
import subprocess, threading
def work(i):
    with open(f"thread{i}.txt", "w") as f:
        f.write(str(i))
threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
for t in threads: t.start()
for t in threads: t.join()
subprocess.run(["ls", "-1"], check=True, stdout=subprocess.DEVNULL)
subprocess.run(["sh", "-c", "cat thread0.txt > /dev/null"], check=True)
PY
"""


def events(run_dir: Path) -> list:
    return [r.event for r in read_records(run_dir)]


def test_exec_tree_and_files_of_a_multi_process_command(chamber_image, tmp_path):
    run_dir = tmp_path / "run"
    assert main(["record", "--syscall-witness", "strace", "--out", str(run_dir), "--", "sh", "-c", PIPELINE]) == 0
    evs = events(run_dir)
    execs = [e for e in evs if isinstance(e, ProcessExec)]
    # The agent's own first execve is the first exec in the ledger, and it is its command.
    assert execs[0].argv == ["sh", "-c", PIPELINE] and execs[0].ppid is None and execs[0].cwd == "/work/sandbox"
    shell = execs[0].pid
    by_name = {}
    for e in execs:
        by_name.setdefault(Path(e.path).name, []).append(e)
    for name in ("cat", "tr", "grep", "python3"):
        assert by_name[name][0].ppid == shell, name
    py = by_name["python3"][0].pid
    assert {e.argv[0] for e in execs if e.ppid == py} == {"ls", "sh"}
    inner_sh = next(e for e in execs if e.ppid == py and e.argv[0] == "sh")
    assert any(e.ppid == inner_sh.pid and e.argv == ["cat", "thread0.txt"] for e in execs)
    opened = {e.path for e in evs if isinstance(e, FileOpen) and e.result is not None}
    for name in ("words.txt", "count.txt", "thread0.txt", "thread1.txt", "thread2.txt"):
        assert f"/work/sandbox/{name}" in opened, name
    exits = {e.pid: e.code for e in evs if isinstance(e, ProcessExit)}
    assert exits[shell] == 0 and exits[py] == 0
    assert all(e.env is not None and e.env["PWD"] for e in execs[:1])
    names = [e.witness for e in evs if isinstance(e, WitnessStarted)]
    assert sorted(names) == ["procfs", "strace"]  # no egress allowed: no network, no network witnesses
    stopped = {e.witness: e for e in evs if isinstance(e, WitnessStopped)}
    assert stopped["strace"].events > 20 and stopped["strace"].parse_failures == 0
    assert not [e for e in evs if isinstance(e, WitnessGap)]
    assert verify_ledger(run_dir, ensure_operator_key().verify_key).status == "ok"


def test_procfs_samples_the_chamber_tree_and_the_host(chamber_image, tmp_path):
    run_dir = tmp_path / "run"
    # 1.2 s of CPU and at least 2.5 s of wall time, so that a loaded host (a tick can take
    # longer than its interval there, and a missed tick is skipped) still sees several ticks
    burn = ("python3 -c 'import time; t=time.time()\nwhile time.process_time()<1.2 or time.time()-t<2.0: pass\n"
            "x=bytearray(50*2**20); time.sleep(0.5)'")
    assert main(["record", "--syscall-witness", "strace", "--out", str(run_dir), "--", "sh", "-c", burn]) == 0
    evs = events(run_dir)
    hosts = [e for e in evs if isinstance(e, HostSample)]
    procs = [e for e in evs if isinstance(e, ProcSample)]
    assert len(hosts) >= 4 and all(h.interval_ns == 250_000_000 for h in hosts)
    assert max(h.timer_lateness_ns for h in hosts) < 1_000_000_000
    assert max(h.stall_ns for h in hosts) < 1_000_000_000  # the stall clock calls no stall on a normal run
    python = [p for p in procs if p.name.startswith("python")]
    assert python and max(p.cpu_ns for p in python) > 500_000_000 and max(p.rss_bytes for p in python) > 40 * 2**20
    assert len({(p.pid, p.start_time_ns) for p in python}) == 1


def test_the_agent_cannot_signal_or_read_the_tracer(chamber_image, tmp_path):
    run_dir = tmp_path / "run"
    # pid 1 is the chamber's own deadline (`timeout`, root); the tracer (root) is the agent's parent
    script = "kill -9 1; echo kill=$?; kill -9 $PPID; echo kill2=$?; ls /caisson/witness; echo ls=$?; cat /caisson/witness/strace.fifo; echo ok"
    assert main(["record", "--syscall-witness", "strace", "--out", str(run_dir), "--", "sh", "-c", script]) == 0
    evs = events(run_dir)
    raw = [e.line for e in evs if isinstance(e, WitnessRaw)]
    assert any("kill(1, SIGKILL) = -1 EPERM" in line for line in raw)
    assert any(re.search(r"kill\((?!1,)\d+, SIGKILL\) = -1 EPERM", line) for line in raw)
    denied = [e for e in evs if isinstance(e, FileOpen) and e.path.startswith("/caisson/witness")]
    assert denied and all(e.result is None and e.errno == "EACCES" for e in denied)
    assert not [e for e in evs if isinstance(e, WitnessGap)]
    assert isinstance(evs[-1], RunEnded) and evs[-1].exit_code == 0


def test_killing_the_tracer_mid_run_is_a_recorded_gap_and_the_ledger_verifies(chamber_image, tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "caisson.cli", "record", "--syscall-witness", "strace", "--out",
                             str(run_dir), "--", "sh", "-c", "for i in $(seq 100); do ls > /dev/null; sleep 0.1; done"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    pid = None
    while time.monotonic() < deadline and pid is None:
        out = subprocess.run(["docker", "ps", "-q", "--filter", f"label=caisson.run_dir={run_dir.resolve()}"],
                             capture_output=True,
                             text=True).stdout.split()
        if out:
            pid = int(subprocess.run(["docker", "inspect", "-f", "{{.State.Pid}}", out[0]], capture_output=True,
                                     text=True).stdout.strip() or 0) or None
        time.sleep(0.1)
    assert pid, "the chamber never started"
    time.sleep(1.0)
    assert Path(f"/proc/{pid}/comm").read_text().strip() == "timeout"  # pid 1: the chamber's own deadline
    tracer = int(Path(f"/proc/{pid}/task/{pid}/children").read_text().split()[0])
    assert Path(f"/proc/{tracer}/comm").read_text().strip() == "strace"  # its only child, seen from the host
    os.kill(tracer, signal.SIGKILL)
    proc.wait(timeout=60)
    evs = events(run_dir)
    gaps = [e for e in evs if isinstance(e, WitnessGap)]
    assert gaps and gaps[0].witness == "strace" and "before the agent" in gaps[0].reason
    assert verify_ledger(run_dir, ensure_operator_key().verify_key).status == "ok"
    assert isinstance(evs[-1], RunEnded)
