"""The runner's executor interface without Ray: two hosts played by one executor.

`TwoHosts` records each session here for real (`run_session_here`, real Docker), then
re-signs its ledger with the key of the host it "ran" on; host A's runs also get one
host sample whose timer fired 10 s late, as a starved host's procfs witness records it.
This drives the runner's per-host rules (enrolled keys, ``host_stalled`` counted per
host, a host drained instead of the study aborted, status per host) in seconds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from caisson.cli import main
from caisson.home import ensure_operator_key
from caisson.probes import make_probe_repo
from caisson.study import read_study, run_study, verify_study
from caisson.study._dispatch import SessionResult, run_session_here
from caisson.study.executor import make_executor
from caisson.study.status import study_status
from caisson.study.studyledger import run_signer, sealed_state
from caisson.errors import UsageError
from ledger import BlobStore, LedgerWriter, SigningKey, read_records
from ledger.events import CellEnded, HostDrained, HostKey, HostSample, RunEnded, StudyAborted, StudyPlanned
from tests.caisson.study.test_study_run import GREP_AGENT, _study


def _resign(run_dir: Path, key: SigningKey, *, stalled: bool) -> None:
    """Rewrite a run's ledger signed with ``key`` (a stall sample before run.ended when ``stalled``)."""
    records = list(read_records(run_dir, ensure_operator_key().verify_key))
    run_id = sealed_state(run_dir, ensure_operator_key().verify_key).run_id
    (run_dir / "ledger").unlink()
    writer = LedgerWriter(run_dir / "ledger", run_id=run_id, key=key, blobs=BlobStore(run_dir / "blobs"))
    for r in records:
        if stalled and isinstance(r.event, RunEnded):
            writer.append(HostSample(timer_lateness_ns=10 * 10**9, interval_ns=10**9), source="procfs",
                          wall_ns=r.wall_ns, mono_ns=r.mono_ns)
        writer.append(r.event, source=r.source, wall_ns=r.wall_ns, mono_ns=r.mono_ns)
    writer.close()


class TwoHosts:
    """Sessions go to host A until it is drained, then to B; A is a starved host."""

    name = "two-hosts"

    def __init__(self):
        self.keys = {"a/0": SigningKey.generate(), "b/1": SigningKey.generate()}
        self.drained: list[str] = []
        self.enrolled: list[HostKey] = []

    def slots(self) -> int:
        return 1

    def host_keys(self):
        return [HostKey(host=h, public_key=k.verify_key.raw.hex()) for h, k in self.keys.items()]

    def enroll(self, host_keys):
        self.enrolled = host_keys

    def run(self, job, around=None) -> SessionResult:
        host = "b/1" if "a/0" in self.drained else "a/0"
        result = run_session_here(job)
        if (job.session.run_dir / "ledger").exists():
            _resign(job.session.run_dir, self.keys[host], stalled=host == "a/0" and not job.session.baseline)
        return SessionResult(outcome=result.outcome, error=result.error, refused=result.refused, host=host)

    def drain(self, host: str) -> None:
        self.drained.append(host)

    def close(self) -> None:
        pass


def test_a_host_with_three_stalled_cells_in_a_row_is_drained_and_the_study_goes_on(chamber_image, tmp_path):
    repo = make_probe_repo(tmp_path)
    study = _study(tmp_path, 'arms = ["plain"]\nquestions = ["where-answer"]\n' + GREP_AGENT.replace("SLEEP ", ""),
                   repetitions=4)
    executor = TwoHosts()
    out = tmp_path / "out"
    result = run_study(study, out, repo=repo, executor=executor)
    assert (result.state, result.cells, result.counted, result.void) == ("ended", 4, 4, 3)
    events = [r.event for r in read_study(out)]
    [planned] = [e for e in events if isinstance(e, StudyPlanned)]
    assert planned.executor == "two-hosts" and planned.host_keys == executor.host_keys() == executor.enrolled
    ended = [e for e in events if isinstance(e, CellEnded)]
    assert [(e.host, e.status) for e in ended] == [("a/0", "void")] * 3 + [("b/1", "clean")]
    assert all("host_stalled" in e.explanation() for e in ended[:3])
    [drained] = [e for e in events if isinstance(e, HostDrained)]
    assert (drained.host, drained.cells) == ("a/0", [e.cell_id for e in ended[:3]])
    assert executor.drained == ["a/0"] and not any(isinstance(e, StudyAborted) for e in events)
    assert events.index(drained) < events.index(ended[3])
    # each run is signed by its host's key, and verify DIR trusts exactly the enrolled ones
    assert [run_signer(out / e.run_dir) for e in ended] == [executor.keys[e.host].verify_key.raw for e in ended]
    assert verify_study(out, ensure_operator_key().verify_key).status == "ok"
    status = study_status(read_study(out))
    assert {h: (c.attempts, c.counted, c.void, c.drained) for h, c in status.hosts.items()} == {
        "a/0": (3, 3, 3, True), "b/1": (1, 1, 0, False)}
    assert main(["study", "status", str(out)]) == 0
    import io

    from caisson.study.progress import Progress

    stream = io.StringIO()
    progress = Progress(out, live=False, stream=stream)
    progress.update()
    progress.close()
    assert stream.getvalue().splitlines()[1:] == [  # the plain progress shows the cells per host
        "  host a/0: attempts 3, counted 3 (void 3), infra failures 0, DRAINED",
        "  host b/1: attempts 1, counted 1 (void 0), infra failures 0"]


def test_local_executor_takes_no_ray_options():
    with pytest.raises(UsageError, match="--executor local takes none of: address"):
        make_executor("local", address="10.0.0.1:6379", slots_per_host=None, enroll_keys=[])
    with pytest.raises(UsageError, match="--executor nope"):
        make_executor("nope")


def test_a_ray_study_can_connect_before_it_imports_the_recorder():
    """`caisson study run --executor ray` makes its executor (connects, sends the join tasks)
    before it imports the runner, so that the host's start-up overlaps the driver's imports
    (docs/studies.md, "Executors"): `caisson.study`, its executor interface and the ray
    executor's module import neither the recorder nor the runner."""
    code = ("import sys\n"
            "from caisson.study import load_study, plan_study\n"
            "from caisson.study.executor import make_executor\n"
            "import caisson.study._ray\n"
            "heavy = ('caisson.run', 'caisson.study._dispatch', 'caisson.study.runner', 'caisson.replay', 'numpy')\n"
            "print(sorted(m for m in heavy if m in sys.modules))\n")
    root = Path(__file__).resolve().parents[3]
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
