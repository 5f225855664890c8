"""`caisson record` end to end, with the real Docker engine and the chamber image."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest

from caisson.cli import main
from caisson.home import ensure_operator_key, fingerprint_key
from ledger import read_records, redact_argv, verify_ledger
from ledger.events import (BlobStored, Caller, ProcessExec, RunEnded, RunLimits, RunStarted, SandboxBuilt,
                           SyscallWitnessChoice)
from tests.helpers import commit_all, git

ROOT = Path(__file__).resolve().parents[2]
@pytest.fixture
def live_repo(tmp_path: Path) -> Path:
    """A live repo: commit 1 (the one under test) with an answer key, then a later commit."""
    repo = tmp_path / "live"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "src").mkdir()
    (repo / "src" / "app.py").write_text("def answer():\n    return 42\n")
    (repo / "benchmark").mkdir()
    (repo / "benchmark" / "answers.json").write_text('{"q1": "src/app.py:1 secret-answer-key"}\n')
    (repo / "CLAUDE.md").write_text("Agent instructions that must not leak.\n")
    commit_all(repo, "under test")
    (repo / "src" / "later.py").write_text("LATER_COMMIT_ONLY = True\n")
    commit_all(repo, "later")
    git(repo, "tag", "v-later")
    return repo


@pytest.fixture
def scenario_file(tmp_path: Path) -> Path:
    path = tmp_path / "scenario.toml"
    path.write_text('''
name = "record-test"
answer_file = "ANSWER.txt"

[[questions]]
id = "q1"
prompt = "Which function returns the meaning of life in this repository?"
evidence = ["src/app.py"]

[[exclusions]]
category = "answer_key"
globs = ["benchmark/**"]

[[exclusions]]
category = "agent_instructions"
globs = ["CLAUDE.md", "**/AGENTS.md"]

[limits]
wall_seconds = 60
pids = 128
''')
    return path


def snapshot(repo: Path) -> tuple[dict[str, str], str]:
    files = {}
    for p in sorted(repo.rglob("*")):
        if p.is_file():
            files[str(p.relative_to(repo))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return files, git(repo, "status", "--porcelain", "--ignored")


def records_of(run_dir: Path):
    return list(read_records(run_dir))


def blob(run_dir: Path, role: str) -> bytes:
    for r in records_of(run_dir):
        if isinstance(r.event, BlobStored) and r.event.role == role:
            return (run_dir / "blobs" / r.event.sha256[:2] / r.event.sha256).read_bytes()
    raise AssertionError(f"no {role} blob")


def leftovers(run_id: str) -> str:
    return subprocess.run(["docker", "ps", "-aq", "--filter", f"label=caisson.run={run_id}"],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_sandbox_has_no_history_and_no_excluded_blob(chamber_image, live_repo, scenario_file, tmp_path, capsys):
    first = git(live_repo, "rev-list", "--max-parents=0", "HEAD").strip()
    excluded_blob = git(live_repo, "hash-object", "benchmark/answers.json").strip()
    later_blob = git(live_repo, "hash-object", "src/later.py").strip()
    run_dir = tmp_path / "run"
    code = main(["record", "--scenario", str(scenario_file), "--repo", str(live_repo), "--commit", first[:8],
                 "--out", str(run_dir), "--", "sh", "-c",
                 "git log --all --oneline; echo ==; git rev-list --all --objects; echo ==; "
                 "git fsck --lost-found 2>&1; echo ==; ls -A; git tag; git stash list; git reflog | wc -l"])
    assert code == 0
    out = blob(run_dir, "stdout").decode()
    log, objects, fsck, rest = out.split("==\n")
    assert len(log.strip().splitlines()) == 1
    assert excluded_blob not in objects and later_blob not in objects
    assert "dangling" not in fsck and "unreachable" not in fsck
    listing = rest.split()
    assert "benchmark" not in listing and "CLAUDE.md" not in listing and "src" in listing
    assert "v-later" not in rest
    events = [r.event for r in records_of(run_dir)]
    built = next(e for e in events if isinstance(e, SandboxBuilt))
    assert built.commit == first
    assert {(x.path, x.category) for x in built.excluded} == {
        ("benchmark/answers.json", "answer_key"), ("CLAUDE.md", "agent_instructions")}
    assert verify_ledger(run_dir, ensure_operator_key().verify_key).status == "ok"


def test_live_repo_is_untouched_by_writes_to_pwd_oldpwd_repo_path_and_parent(
        chamber_image, live_repo, scenario_file, tmp_path):
    before = snapshot(live_repo)
    script = (
        f'echo x > "$PWD/pwned"; echo x > "${{OLDPWD:-/nonexistent}}/pwned" 2>/dev/null; '
        f'mkdir -p "{live_repo}" && echo x > "{live_repo}/pwned"; echo x > ../pwned; '
        f'echo x > "{live_repo}/src/app.py" 2>/dev/null; echo done'
    )
    env = {**os.environ, "OLDPWD": str(live_repo)}
    proc = subprocess.run([sys.executable, "-m", "caisson.cli", "record", "--scenario", str(scenario_file),
                           "--repo", str(live_repo), "--commit", "HEAD~1", "--out", str(tmp_path / "run"),
                           "--", "sh", "-c", script], cwd=live_repo, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert blob(tmp_path / "run", "stdout") == b"done\n"
    assert snapshot(live_repo) == before
    assert "worktree" not in git(live_repo, "worktree", "list").split("\n", 1)[-1]
    assert len(git(live_repo, "worktree", "list").strip().splitlines()) == 1


def test_environment_is_built_not_inherited(chamber_image, scenario_file, tmp_path, monkeypatch):
    hostile = {
        "OLDPWD": "/home/someone/live-repo", "PWD": "/home/someone/live-repo",
        "ANTHROPIC_API_KEY": "sk-ant-hostile-1", "OPENAI_API_KEY": "sk-hostile-2", "GITHUB_TOKEN": "ghp_hostile",
        "AWS_SECRET_ACCESS_KEY": "aws-hostile", "CODING_KNOWLEDGE_INJECTION": "1", "CLAUDE_CONFIG_DIR": "/root/.claude",
        "HOME": "/root", "SOME_RANDOM_VAR": "inherited?", "TZ": "Europe/Paris",
    }
    for k, v in hostile.items():
        monkeypatch.setenv(k, v)
    run_dir = tmp_path / "run"
    code = main(["record", "--scenario", str(scenario_file), "--out", str(run_dir),
                 "--env", "MY_SETTING=on", "--env", "MYCORP_API_KEY=sk-passed-by-flag",
                 "--", "sh", "-c", "env; echo cwd=$(pwd); find $HOME -mindepth 1 -not -type d | wc -l"])
    assert code == 0
    lines = blob(run_dir, "stdout").decode().splitlines()
    env = dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("cwd="))
    assert env["PWD"] == "/work/sandbox" and "cwd=/work/sandbox" in lines
    assert "OLDPWD" not in env
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "MYCORP_API_KEY",
                 "SOME_RANDOM_VAR"):
        assert name not in env, name
    assert env["CODING_KNOWLEDGE_INJECTION"] == "0"
    assert env["HOME"] == env["CLAUDE_CONFIG_DIR"].rsplit("/", 1)[0] == "/tmp/caisson-home"
    assert env["MY_SETTING"] == "on" and env["TZ"] == "Europe/Paris"
    assert lines[-1] == "0"  # the config home is fresh: empty directories only
    started = records_of(run_dir)[0].event
    assert isinstance(started, RunStarted) and started.env["PWD"] == "/work/sandbox"
    everything = b"".join(p.read_bytes() for p in run_dir.rglob("*") if p.is_file())
    for secret in ("sk-ant-hostile-1", "sk-hostile-2", "ghp_hostile", "aws-hostile", "sk-passed-by-flag"):
        assert secret.encode() not in everything


def test_passed_credentials_are_recorded_as_fingerprints(chamber_image, tmp_path):
    scenario = tmp_path / "s.toml"
    scenario.write_text('name = "pass"\npass_credentials = ["PROVIDER_API_KEY"]\n')
    run_dir = tmp_path / "run"
    assert main(["record", "--scenario", str(scenario), "--out", str(run_dir), "--env",
                 "PROVIDER_API_KEY=sk-live-123456", "--", "sh", "-c", 'test "$PROVIDER_API_KEY" = sk-live-123456']) == 0
    started = records_of(run_dir)[0].event
    assert started.env["PROVIDER_API_KEY"].startswith("fp:")
    assert b"sk-live-123456" not in (run_dir / "ledger").read_bytes()


def test_a_secret_on_the_command_line_is_fingerprinted_in_run_started_as_in_its_exec(chamber_image, tmp_path):
    """``run.started.command`` is redacted as the syscall witness redacts the exec of the
    same argv: same key, same fingerprints, as many elements; the secret is nowhere."""
    scenario = tmp_path / "s.toml"
    scenario.write_text('name = "argv"\ncredential_patterns = ["MY_CORP_*"]\n')
    secrets_ = ("sk-abcdefghijklmnopqrstuvwx", "hunter2-url-password", "corp-credential-value")
    command = ["sh", "-c", "exit 0", "probe", f"--api-key={secrets_[0]}",
               f"https://user:{secrets_[1]}@example.invalid/", f"MY_CORP_LOGIN={secrets_[2]}"]
    run_dir = tmp_path / "run"
    assert main(["record", "--scenario", str(scenario), "--syscall-witness", "strace", "--out", str(run_dir),
                 "--", *command]) == 0
    records = records_of(run_dir)
    started = records[0].event
    key = fingerprint_key(ensure_operator_key())
    assert isinstance(started, RunStarted)
    assert started.command == redact_argv(command, key=key, patterns=("MY_CORP_*",))
    assert len(started.command) == len(command) and started.command[:4] == command[:4]
    assert all(s not in " ".join(started.command) for s in secrets_)
    execs = [r.event for r in records if isinstance(r.event, ProcessExec) and r.event.argv[:3] == command[:3]]
    assert execs and execs[0].argv == started.command
    everything = b"".join(msgspec.json.encode(r.event) for r in records)
    assert all(s.encode() not in everything for s in secrets_)


def test_timeout_exit_124_and_the_ledger_is_sealed(chamber_image, tmp_path):
    run_dir = tmp_path / "run"
    t0 = time.monotonic()
    assert main(["record", "--timeout", "2", "--out", str(run_dir), "--", "sleep", "60"]) == 124
    assert time.monotonic() - t0 < 30
    end = records_of(run_dir)[-1].event
    assert isinstance(end, RunEnded) and end.timed_out and end.status == "timeout"
    assert verify_ledger(run_dir, ensure_operator_key().verify_key).status == "ok"
    assert leftovers(records_of(run_dir)[0].event.run_id) == ""


def test_answer_file_and_exit_code(chamber_image, scenario_file, tmp_path):
    run_dir = tmp_path / "run"
    assert main(["record", "--scenario", str(scenario_file), "--out", str(run_dir), "--",
                 "sh", "-c", "echo 'answer() in src/app.py' > ANSWER.txt; exit 7"]) == 7
    assert blob(run_dir, "answer") == b"answer() in src/app.py\n"
    end = records_of(run_dir)[-1].event
    assert (end.exit_code, end.status) == (7, "completed")


def test_run_started_records_its_facts_as_their_types(chamber_image, scenario_file, tmp_path):
    """What the recorder knows of the run is written typed (``run.started``'s facts), each
    field what the run had: the scenario's limits, this machine, the caller, the profile."""
    import platform

    run_dir = tmp_path / "run"
    assert main(["record", "--scenario", str(scenario_file), "--syscall-witness", "strace", "--out", str(run_dir),
                 "--", "true"]) == 0
    started = records_of(run_dir)[0].event
    assert isinstance(started, RunStarted) and (started.agent, started.arm) == (None, None)  # a plain command
    assert started.limits == RunLimits(wall_seconds=60.0, pids=128, memory_bytes=2 * 1024**3, cpus=1.0,
                                       disk_bytes=4 * 1024**3, tree_fs=started.limits.tree_fs, network="none",
                                       user="agent")
    assert started.limits.tree_fs in ("tmpfs", "host")
    host = started.host
    assert (host.kernel, host.machine, host.python) == (platform.release(), platform.machine(),
                                                        platform.python_version())
    assert host.cpus == os.cpu_count() and host.server_version and host.api_version and host.ncpu >= 1
    assert started.caller == Caller(cwd=os.getcwd(), home=os.path.expanduser("~"))
    assert started.seccomp.action == "trace" and "io_uring_setup" in started.seccomp.denied
    assert started.seccomp.sha256 == hashlib.sha256(blob(run_dir, "seccomp")).hexdigest()
    assert started.syscall_witness == SyscallWitnessChoice(ran="strace", why="--syscall-witness strace")


# (signal, exit code): Ctrl-C at a terminal, and what timeout(1), kill and schedulers send
STOPS = [pytest.param(signal.SIGINT, 130, id="ctrl-c"), pytest.param(signal.SIGTERM, 143, id="sigterm")]


@pytest.mark.parametrize("signum, code", STOPS)
def test_a_stop_removes_the_chamber_and_closes_the_ledger(chamber_image, tmp_path, signum, code):
    _stop(tmp_path, once="command", signum=signum, code=code)


@pytest.mark.parametrize("signum, code", STOPS)
def test_a_stop_while_the_witness_starts_removes_the_chamber_and_closes_the_ledger(chamber_image, tmp_path,
                                                                                   signum, code):
    _stop(tmp_path, once="container", signum=signum, code=code)


def _terminal_sigint() -> None:
    """SIGINT as at a terminal: a shell without job control starts a background job (a CI
    step, ``make test &``) with SIGINT ignored, its children inherit that, and Python keeps
    an ignored SIGINT ignored, so the recorder would wait for its command (the hang these
    tests once showed in CI)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _stop(tmp_path, once: str, signum: int, code: int) -> None:
    """Send `signum` to the recorder of ``sleep 60`` once its container runs (``container``)
    or once its command does (``command``: the syscall witness attached, ``sleep`` started);
    then the run ends interrupted within 30 s with exit `code`, its ledger verifies and
    nothing of it is left."""
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-X", "faulthandler", "-m", "caisson.cli", "record", "--out",
                             str(run_dir), "--", "sleep", "60"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, preexec_fn=_terminal_sigint)
    deadline = time.monotonic() + 120  # a first run qualifies the eBPF witness; a loaded machine takes long
    while time.monotonic() < deadline:
        ids = subprocess.run(["docker", "ps", "-q", "--filter", f"label=caisson.run_dir={run_dir.resolve()}"],
                             capture_output=True, text=True).stdout.split() if (run_dir / "ledger").exists() else []
        if ids and (once == "container" or any(line.split(None, 1)[1:] == ["sleep 60"] for line in subprocess.run(
                ["docker", "top", ids[0], "-o", "pid,args"], capture_output=True, text=True).stdout.splitlines())):
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the run's {once} never showed")
    time.sleep(0.5)
    proc.send_signal(signum)
    try:
        assert proc.wait(timeout=30) == code, proc.communicate()[1].decode(errors="replace")[-3000:]
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack
        raise AssertionError("the recorder did not end within 30 s of the signal:\n"
                             + proc.communicate(timeout=30)[1].decode(errors="replace")[-6000:]) from None
    report = verify_ledger(run_dir, ensure_operator_key().verify_key)
    assert report.status == "ok", report
    end = records_of(run_dir)[-1].event
    assert isinstance(end, RunEnded) and end.status == "interrupted"
    assert leftovers(records_of(run_dir)[0].event.run_id) == ""


@pytest.mark.parametrize("args, message", [
    (["--repo", "/nonexistent/repo"], "nonexistent"),
    (["--repo", "LIVE", "--commit", "deadbeefcafe"], "deadbeefcafe"),
    (["--scenario", "BAD_CATEGORY"], "category"),
    (["--scenario", "BAD_FIELD"], "wall_seconds"),
    (["--image", "caisson/nope:0"], "caisson image build"),
    (["--commit", "HEAD"], "--commit needs --repo"),
    (["--env", "NOT AN ASSIGNMENT"], "NAME=VALUE"),
])
def test_bad_input_is_one_line_exit_2_and_no_run_dir(chamber_image, live_repo, tmp_path, capsys, args, message):
    (tmp_path / "bad_category.toml").write_text('name = "x"\n[[exclusions]]\ncategory = "secrets"\nglobs = ["a"]\n')
    (tmp_path / "bad_field.toml").write_text('name = "x"\n[limits]\nwall_seconds = "soon"\n')
    subst = {"LIVE": str(live_repo), "BAD_CATEGORY": str(tmp_path / "bad_category.toml"),
             "BAD_FIELD": str(tmp_path / "bad_field.toml")}
    args = [subst.get(a, a) for a in args]
    run_dir = tmp_path / "run"
    assert main(["record", *args, "--out", str(run_dir), "--", "true"]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert not run_dir.exists()


def test_a_scratch_root_others_may_write_is_exit_2_and_no_run_dir(chamber_image, tmp_path, capsys, monkeypatch):
    root = tmp_path / "scratch"
    root.mkdir()
    os.chmod(root, 0o777)
    monkeypatch.setenv("CAISSON_SCRATCH", str(root))
    assert main(["record", "--out", str(tmp_path / "run"), "--", "true"]) == 2
    assert "cannot make the run's scratch directory" in capsys.readouterr().err
    assert not (tmp_path / "run").exists() and list(root.iterdir()) == []


def test_engine_not_reachable_is_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    assert main(["record", "--out", str(tmp_path / "run"), "--", "true"]) == 2
    assert "start dockerd" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_containment_hit_refuses_the_run(chamber_image, live_repo, tmp_path, capsys):
    scenario = tmp_path / "leaky.toml"
    scenario.write_text('name = "leaky"\n[[questions]]\nid = "q"\nprompt = "x"\n'
                        'leak_terms = ["secret-answer-key"]\n')
    assert main(["record", "--scenario", str(scenario), "--repo", str(live_repo), "--commit", "HEAD~1",
                 "--out", str(tmp_path / "run"), "--", "true"]) == 2
    err = capsys.readouterr().err
    assert "benchmark/answers.json:1" in err
    assert not (tmp_path / "run").exists()


def test_monitor_receives_every_event_in_order(chamber_image, tmp_path):
    import socket
    import threading

    path = tmp_path / "monitor.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(1)
    received: list[dict] = []

    def serve() -> None:
        conn, _ = server.accept()
        with conn, conn.makefile("r") as lines:
            for line in lines:
                received.append(json.loads(line))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    run_dir = tmp_path / "run"
    assert main(["record", "--monitor", f"unix:{path}", "--out", str(run_dir), "--", "echo", "hi"]) == 0
    thread.join(timeout=10)
    seals: list = []
    seqs = [r.seq for r in read_records(run_dir, on_seal=seals.append)]
    events = [x for x in received if "head" not in x]
    assert [x["seq"] for x in events] == seqs
    assert events[-1]["kind"] == "run.ended"
    # head lines (ledger.HeldHead): seals of the ledger, in order, each after the records it covers
    heads = [(i, x["head"]["upto"]) for i, x in enumerate(received) if "head" in x]
    assert heads and {upto for _, upto in heads} <= {s.upto for s in seals}
    assert [upto for _, upto in heads] == sorted({upto for _, upto in heads})
    assert all(sum("head" not in x for x in received[:i]) >= upto for i, upto in heads)


def test_absent_monitor_never_blocks_the_run(chamber_image, tmp_path):
    run_dir = tmp_path / "run"
    t0 = time.monotonic()
    assert main(["record", "--monitor", f"unix:{tmp_path}/nobody.sock", "--out", str(run_dir), "--", "true"]) == 0
    assert time.monotonic() - t0 < 20
    assert verify_ledger(run_dir, ensure_operator_key().verify_key).status == "ok"


class _EngineLine:
    """A unix-socket forwarder to the real Docker engine that can be cut mid-run, as an
    engine that dies would look to the recorder."""

    def __init__(self, path: Path, target: str = "/var/run/docker.sock"):
        import socket
        import threading

        self.path, self.target = path, target
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(str(path))
        self.server.listen(16)
        self.conns: list = []
        self.alive = True
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket
        import threading

        while self.alive:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX)
            upstream.connect(self.target)
            self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a, b) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.close()
                except OSError:
                    pass

    def cut(self) -> None:
        import socket

        self.alive = False
        self.server.close()
        for s in self.conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass


def test_the_engine_dying_mid_run_is_recorded_and_the_ledger_sealed(chamber_image, tmp_path, monkeypatch):
    import threading

    line = _EngineLine(tmp_path / "engine.sock")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/engine.sock")
    timer = threading.Timer(3.0, line.cut)
    timer.start()
    run_dir = tmp_path / "run"
    try:
        code = main(["record", "--out", str(run_dir), "--", "sleep", "20"])
    finally:
        timer.cancel()
        subprocess.run(["docker", "rm", "-f", *subprocess.run(
            ["docker", "ps", "-aq", "--filter", f"label=caisson.run_dir={run_dir.resolve()}"],
            capture_output=True, text=True).stdout.split()], capture_output=True)
    assert code == 125
    end = records_of(run_dir)[-1].event
    assert isinstance(end, RunEnded) and end.status == "infra_failure" and "engine" in end.reason
    assert verify_ledger(run_dir, ensure_operator_key().verify_key).status == "ok"


def test_a_command_that_cannot_be_executed_ends_the_run_without_a_hang(chamber_image, tmp_path):
    """With no syscall witness nothing says whether the command started: the run is what the
    engine saw (``timeout`` exited 127), never a verdict read from its stderr."""
    import threading

    from caisson.run.record import RecordOptions, record
    from caisson.run.witnesses import ProcfsWitness


    run_dir = tmp_path / "run"
    box: dict = {}
    thread = threading.Thread(target=lambda: box.update(outcome=record(
        RecordOptions(command=["/no/such/agent"], out=run_dir, timeout_s=30), witnesses=[ProcfsWitness()])),
        daemon=True)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "record hung after the command could not be executed"
    outcome = box["outcome"]
    assert (outcome.status, outcome.exit_code) == ("completed", 127)
    end = records_of(run_dir)[-1].event
    assert isinstance(end, RunEnded) and (end.status, end.exit_code) == ("completed", 127)
    assert verify_ledger(run_dir, ensure_operator_key().verify_key).status == "ok"


def test_a_failing_witness_is_a_gap_and_the_run_goes_on(chamber_image, tmp_path):
    from caisson.run.record import RecordOptions, record
    from caisson.replay import replay_runs
    from caisson.run.witnesses import ProcfsWitness
    from ledger.events import WitnessGap

    class Broken:
        name = "broken"
        needs_network = False

        def prepare(self, spec, ctx):
            return spec

        async def start(self, ctx):
            async def crash():
                raise RuntimeError("witness bug")

            ctx.nursery.start_soon(crash)

    run_dir = tmp_path / "run"
    outcome = record(RecordOptions(command=["sh", "-c", "sleep 1; echo done"], out=run_dir),
                     witnesses=[Broken(), ProcfsWitness()])
    assert outcome.status == "completed" and outcome.command_exit == 0
    gaps = [r.event for r in read_records(run_dir) if isinstance(r.event, WitnessGap)]
    assert gaps and gaps[0].witness == "broken" and "witness bug" in gaps[0].reason
    [result] = replay_runs([run_dir], ensure_operator_key().verify_key)
    assert result.status == "void" and any("broken" in r for r in result.reasons)


def test_an_unknown_question_or_arm_is_a_usage_error_naming_the_scenarios_own(tmp_path):
    from caisson.errors import UsageError
    from caisson.run.record import RecordOptions, record

    path = tmp_path / "s.toml"
    path.write_text('name = "s"\n[[questions]]\nid = "q1"\nprompt = "?"\n[[arms]]\nname = "shell"\n'
                    'grant = ["Bash"]\n')
    with pytest.raises(UsageError, match=r"--question nope: not in the scenario; its questions: q1$"):
        record(RecordOptions(command=["true"], scenario=path, question="nope", out=tmp_path / "a"))
    with pytest.raises(UsageError, match=r"its questions: none \(pass --scenario\)"):
        record(RecordOptions(command=["true"], question="q1", out=tmp_path / "b"))
    with pytest.raises(UsageError, match=r"--arm nope: not in the scenario; its arms: shell$"):
        record(RecordOptions(command=[], scenario=path, question="q1", agent="claude-code", arm="nope",
                             out=tmp_path / "c"))


def test_host_facts_keep_what_has_the_api_type_and_leave_out_the_rest():
    """An engine answering a fact with another type than its API's: the run still starts,
    that fact unrecorded, the others kept."""
    from caisson.run.record import _host_facts

    facts = _host_facts({"server_version": "20.10.24", "ncpu": "two", "api_version": 1.41, "os": "Debian",
                         "unknown_fact": [1]})
    assert (facts.server_version, facts.os, facts.ncpu, facts.api_version) == ("20.10.24", "Debian", None, None)
    assert facts.kernel and facts.cpus is not None and facts.python
