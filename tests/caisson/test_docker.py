"""caisson.chamber._docker against a real engine: capture, exit codes, deadlines, cleanup."""

from __future__ import annotations

import os
import subprocess
import time

import pytest
import trio

from caisson.chamber._docker import RUN_LABEL, ContainerLimits, ContainerSpec, ContainerStarted, open_engine
from caisson.errors import ChamberError

pytestmark = pytest.mark.docker


def run_in_chamber(spec: ContainerSpec, **kwargs):
    async def main():
        async with open_engine() as engine:
            return await engine.run(spec, **kwargs)

    return trio.run(main)


def leftovers(run_id: str) -> list[str]:
    """Container ids labelled with `run_id`, asked of the docker CLI (not our adapter)."""
    out = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label={RUN_LABEL}={run_id}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.split()


def py(code: str, image: str, **fields) -> ContainerSpec:
    return ContainerSpec(image=image, cmd=["python3", "-c", code], **fields)


def test_stdout_stderr_and_exit_code(chamber_image):
    code = "import sys; print('to out'); print('to err', file=sys.stderr); sys.exit(3)"
    before = time.time_ns()
    result = run_in_chamber(py(code, chamber_image, run_id="t-capture"))
    assert result.stdout == b"to out\n"
    assert result.stderr == b"to err\n"
    assert result.exit_code == 3
    assert result.signal is None and not result.timed_out and result.error is None
    assert before <= result.started_ns <= result.ended_ns <= time.time_ns()
    assert leftovers("t-capture") == []


def test_non_ascii_output_round_trips(chamber_image):
    result = run_in_chamber(py("print('caf\\u00e9 \\u2713')", chamber_image))
    assert result.stdout == "café ✓\n".encode()


def test_output_is_captured_byte_for_byte(chamber_image):
    code = ("import sys; sys.stdout.buffer.write(b'a\\xff\\xfeb\\n\\x00c' * 3);"
            " sys.stderr.buffer.write(b'err\\xc3\\r')")
    result = run_in_chamber(py(code, chamber_image))
    assert result.stdout == b"a\xff\xfeb\n\x00c" * 3  # no U+FFFD, no line handling
    assert result.stderr == b"err\xc3\r"
    assert not result.output_truncated


def test_output_over_the_log_cap_is_flagged(chamber_image, monkeypatch):
    import caisson.chamber._docker as adapter

    monkeypatch.setattr(adapter, "_LOG_FILE_BYTES", 2**20)  # 4 files of 1 MiB
    code = "import sys\nfor i in range(6000): sys.stdout.write(f'{i:07d}' + 'x' * 1016 + '\\n')"
    result = run_in_chamber(py(code, chamber_image))
    assert result.output_truncated
    assert not result.stdout.startswith(b"0000000") and len(result.stdout) < 6000 * 1024  # oldest dropped
    assert result.stdout.endswith(b"0005999" + b"x" * 1016 + b"\n")


def test_deadline_kills_and_removes(chamber_image):
    spec = ContainerSpec(
        image=chamber_image, cmd=["sleep", "30"], deadline_s=1.0, run_id="t-deadline"
    )
    t0 = time.monotonic()
    result = run_in_chamber(spec)
    assert time.monotonic() - t0 < 15
    assert result.timed_out
    assert result.signal == 9 and result.exit_code == 137
    assert leftovers("t-deadline") == []


@pytest.mark.parametrize("script", ["kill -TERM $$; sleep 5", "exit 143"])
def test_an_exit_status_is_never_taken_for_a_signal(chamber_image, script):
    # With init=True the shell is not pid 1, so its own SIGTERM kills it. The engine reports
    # 143 for both a death by SIGTERM and `exit 143`: no signal is inferred (the strace
    # witness tells them apart; issue 15, item 7).
    spec = ContainerSpec(image=chamber_image, cmd=["sh", "-c", script], init=True)
    result = run_in_chamber(spec)
    assert (result.exit_code, result.signal, result.timed_out) == (143, None, False)


def test_pid_one_ignores_unhandled_signals_without_init(chamber_image):
    spec = ContainerSpec(image=chamber_image, cmd=["sh", "-c", "kill -TERM $$; echo survived"])
    result = run_in_chamber(spec)
    assert (result.exit_code, result.stdout) == (0, b"survived\n")


def test_default_user_is_agent_and_can_be_overridden(chamber_image):
    probe = "import os, pwd; print(os.getuid(), pwd.getpwuid(os.getuid()).pw_name, os.getcwd())"
    assert run_in_chamber(py(probe, chamber_image)).stdout == b"1000 agent /home/agent\n"
    assert (
        run_in_chamber(py(probe, chamber_image, user="agent")).stdout == b"1000 agent /home/agent\n"
    )
    root = run_in_chamber(py(probe, chamber_image, user="0", workdir="/tmp"))
    assert root.stdout == b"0 root /tmp\n"


def test_network_none_leaves_only_loopback(chamber_image):
    result = run_in_chamber(
        py("import os; print(sorted(os.listdir('/sys/class/net')))", chamber_image)
    )
    assert result.stdout == b"['lo']\n"


def test_limits_are_applied(chamber_image):
    probe = (
        "import os\n"
        "def first(*paths):\n"
        "    for p in paths:\n"
        "        if os.path.exists(p): return open(p).read().strip()\n"
        "print(first('/sys/fs/cgroup/pids/pids.max', '/sys/fs/cgroup/pids.max'))\n"
        "print(first('/sys/fs/cgroup/memory/memory.limit_in_bytes', '/sys/fs/cgroup/memory.max'))\n"
    )
    limits = ContainerLimits(pids_limit=64, memory_bytes=256 * 2**20, nano_cpus=500_000_000)
    result = run_in_chamber(py(probe, chamber_image, limits=limits))
    assert result.stdout.split() == [b"64", str(256 * 2**20).encode()], result.stderr


def test_pids_limit_stops_a_fork_bomb(chamber_image):
    code = (
        "import subprocess\n"
        "procs = []\n"
        "try:\n"
        "    for _ in range(100): procs.append(subprocess.Popen(['sleep', '5']))\n"
        "except OSError as e: print('refused', len(procs))\n"
    )
    result = run_in_chamber(py(code, chamber_image, limits=ContainerLimits(pids_limit=20), deadline_s=30))
    assert result.stdout.startswith(b"refused "), (result.stdout, result.stderr)
    assert int(result.stdout.split()[1]) < 20


def test_env_and_read_only_bind(chamber_image, tmp_path):
    (tmp_path / "hello.txt").write_text("from host")
    os.chmod(tmp_path, 0o755)
    code = (
        "import os\n"
        "print(os.environ['CAISSON_PROBE'], open('/work/hello.txt').read())\n"
        "try: open('/work/new', 'w')\n"
        "except OSError as e: print('errno', e.errno)\n"
    )
    spec = py(
        code, chamber_image, env={"CAISSON_PROBE": "42"}, binds=[(str(tmp_path), "/work", True)]
    )
    result = run_in_chamber(spec)
    assert result.stdout == b"42 from host\nerrno 30\n", result.stderr  # 30: EROFS
    assert not (tmp_path / "new").exists()


_VIEW = "cat /etc/resolv.conf; echo @; cat /etc/hostname; hostname; echo $HOSTNAME; echo @; cat /etc/hosts; echo @; " \
        "cat /proc/self/cgroup; echo @; cat /proc/self/mountinfo"


@pytest.mark.parametrize("nameservers", [[], ["10.9.8.7"]])
def test_the_chamber_gets_its_own_etc_files_and_cgroup_view(chamber_image, tmp_path, nameservers):
    """With ``etc_dir``, the chamber's resolv.conf names only the given resolvers (none: no
    nameserver line, not the host's), its host name is ``chamber``, no path it can see names
    its container id, and what it sees in mountinfo is what `mountinfo_seen` reads from the host."""
    from caisson.chamber import mountinfo_seen

    seen = []

    async def on_start(started: ContainerStarted) -> None:
        seen.append(mountinfo_seen(started.host_pid))

    spec = ContainerSpec(image=chamber_image, cmd=["sh", "-c", f"{_VIEW}; sleep 1"], etc_dir=str(tmp_path / "etc"),
                         dns=nameservers)
    result = run_in_chamber(spec, on_start=on_start)
    resolv, hostname, hosts, cgroup, mountinfo = result.stdout.decode().split("@\n")
    assert resolv == "".join(f"nameserver {ns}\n" for ns in nameservers), result.stderr
    assert hostname == "chamber\nchamber\nchamber\n" and "127.0.1.1\tchamber" in hosts
    assert all(line.endswith(":/") for line in cgroup.splitlines())
    cid, short = result.container_id, result.container_id[:12]
    assert cid not in result.stdout.decode() and short not in result.stdout.decode()
    [(host_read, own_view)] = seen
    if os.geteuid() == 0:  # joining its cgroup namespace needs CAP_SYS_ADMIN
        assert own_view and host_read.decode() == mountinfo


def test_without_etc_dir_the_engine_names_the_container_and_copies_the_hosts_resolver(chamber_image):
    """What ``etc_dir`` is for: the engine's own files name the container id in mountinfo, and
    a chamber with no network gets the host's nameservers."""
    spec = ContainerSpec(image=chamber_image, cmd=["sh", "-c", _VIEW], hostname="")
    result = run_in_chamber(spec)
    out = result.stdout.decode()
    assert f"/var/lib/docker/containers/{result.container_id}/resolv.conf /etc/resolv.conf" in out
    assert "nameserver " in out.split("@\n")[0]  # the host's (or Docker's stand-in for a loopback one)


def test_on_start_reports_id_and_host_pid(chamber_image):
    seen: list[tuple[ContainerStarted, bool]] = []

    async def on_start(started: ContainerStarted) -> None:
        seen.append((started, os.path.exists(f"/proc/{started.host_pid}")))

    spec = ContainerSpec(image=chamber_image, cmd=["sleep", "0.5"], run_id="t-start")
    result = run_in_chamber(spec, on_start=on_start)
    [(started, pid_alive)] = seen
    assert started.container_id == result.container_id and len(started.container_id) == 64
    assert started.host_pid > 1 and pid_alive
    assert started.run_id == "t-start" and started.started_ns == result.started_ns
    assert result.exit_code == 0


def test_cancellation_kills_removes_and_propagates(chamber_image):
    started_ids: list[str] = []

    async def main():
        async with open_engine() as engine:
            with trio.move_on_after(20) as outer:
                async with trio.open_nursery() as nursery:

                    async def on_start(started: ContainerStarted) -> None:
                        started_ids.append(started.container_id)
                        nursery.cancel_scope.cancel()  # as Ctrl-C would

                    spec = ContainerSpec(
                        image=chamber_image, cmd=["sleep", "30"], run_id="t-cancel"
                    )
                    nursery.start_soon(lambda: engine.run(spec, on_start=on_start))
                    await trio.sleep_forever()
            assert not outer.cancelled_caught
            return nursery.cancel_scope.cancelled_caught, await engine.containers("t-cancel")

    t0 = time.monotonic()
    caught, remaining = trio.run(main)
    assert caught and started_ids and remaining == []
    assert time.monotonic() - t0 < 15
    assert leftovers("t-cancel") == []


def test_cancelled_is_never_swallowed(chamber_image):
    async def main():
        async with open_engine() as engine:
            with trio.CancelScope() as scope:
                scope.deadline = trio.current_time() + 1.5
                await engine.run(
                    ContainerSpec(image=chamber_image, cmd=["sleep", "30"], run_id="t-swallow")
                )
                pytest.fail("run() returned after its caller was cancelled")
            return scope.cancelled_caught

    assert trio.run(main)
    assert leftovers("t-swallow") == []


def test_start_failure_raises_and_removes(chamber_image):
    spec = ContainerSpec(image=chamber_image, cmd=["/no/such/binary"], run_id="t-startfail")
    with pytest.raises(ChamberError, match="failed to start"):
        run_in_chamber(spec)
    assert leftovers("t-startfail") == []


def test_missing_image_names_the_fix(docker_available):
    with pytest.raises(ChamberError, match="caisson image build"):
        run_in_chamber(ContainerSpec(image="caisson/chamber:0000000000000000", cmd=["true"]))


def test_engine_facts_and_image_lookup(chamber_image):
    async def main():
        async with open_engine() as engine:
            return (
                await engine.info(),
                await engine.image_id(chamber_image),
                await engine.image_id("caisson/none:0"),
            )

    info, found, missing = trio.run(main)
    assert info["server_version"] and info["api_version"] and info["kernel_version"]
    assert found.startswith("sha256:") and missing is None


def test_unreachable_engine_is_a_clear_error(tmp_path):
    async def main():
        async with open_engine(f"unix://{tmp_path}/no.sock"):
            pass

    with pytest.raises(ChamberError, match="not reachable at .*: start dockerd"):
        trio.run(main)
