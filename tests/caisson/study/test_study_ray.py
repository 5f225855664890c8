"""The ray executor on a real two-node Ray cluster on this machine, with real Docker.

One cluster for the module (`ray.cluster_utils.Cluster`): a head without slots and two
nodes with one ``caisson_slot`` each, each with its own caisson home (its own host key).
The study is the smallest that proves each point: the grep probe (a command agent) on
one arm. The node-removal test runs last: it leaves one node.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import msgspec
import pytest

from caisson.chamber.scratch import scratch_root
from caisson.cli import main
from caisson.home import ensure_operator_key
from caisson.probes import make_probe_repo
from caisson.study import read_study, run_study, verify_study
from caisson.study.report_input import load_study_report
from caisson.study.studyledger import run_signer
from ledger.events import CellEnded, CellStarted, HostKey, StudyPlanned
from tests.caisson.conftest import require
from tests.caisson.study.test_study_run import GREP_AGENT, _study

ONE_QUESTION = 'questions = ["where-answer"]'

# Under xdist, one worker runs the whole module: one cluster, not one per worker.
pytestmark = pytest.mark.xdist_group("ray")


@pytest.fixture(scope="module")
def ray_cluster(chamber_image):
    """(cluster, [node1, node2], [home1, home2]); torn down after the module."""
    require(None if importlib.util.find_spec("ray") else "Ray is not installed: pip install 'caisson[ray]'")
    import ray
    from ray.cluster_utils import Cluster

    tmp = Path(tempfile.mkdtemp(prefix="rc", dir="/tmp"))  # short: Ray's unix sockets live under it
    # Ray writes the head's address to DEFAULT_TEMP/ray/ray_current_cluster, a directory only a
    # node started without its own temp_dir creates: pointed at ours, nothing outside it is
    # needed (a fresh machine has no /tmp/ray) or left behind
    saved_tmpdir = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = str(tmp)
    try:
        cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 0, "include_dashboard": False, "temp_dir": str(tmp / "ray"),
            "_system_config": {"health_check_period_ms": 500, "health_check_failure_threshold": 3}})
        homes = [tmp / "home1", tmp / "home2"]
        nodes = [cluster.add_node(num_cpus=1, resources={"caisson_slot": 1}, env_vars={"CAISSON_HOME": str(h)})
                 for h in homes]
        ray.init(address=cluster.address, log_to_driver=False)
        try:
            yield cluster, nodes, homes
        finally:
            ray.shutdown()
            cluster.shutdown()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if saved_tmpdir is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = saved_tmpdir


def _executor(**kw):
    from caisson.study._ray import RayExecutor

    return RayExecutor(**kw)


def _ended(out: Path) -> list[CellEnded]:
    return [r.event for r in read_study(out) if isinstance(r.event, CellEnded)]


def _grep_study(root: Path, sleep: str = "") -> Path:
    return _study(root, 'arms = ["plain"]\n' + GREP_AGENT.replace("SLEEP ", sleep))


def test_two_nodes_give_the_cells_statuses_and_report_of_the_local_executor(ray_cluster, tmp_path):
    repo = make_probe_repo(tmp_path)
    study = _grep_study(tmp_path)
    local = run_study(study, tmp_path / "local", repo=repo)
    distributed = run_study(study, tmp_path / "ray", repo=repo, executor=_executor())
    assert (local.state, local.cells, local.counted, local.void) == ("ended", 2, 2, 0)
    assert (distributed.state, distributed.cells, distributed.counted, distributed.void) == ("ended", 2, 2, 0)
    operator = ensure_operator_key().verify_key

    def cells(out):
        return sorted((e.cell_id, e.attempt, e.status, e.verdict.score if e.verdict else None, e.counting)
                      for e in _ended(out))

    assert cells(tmp_path / "ray") == cells(tmp_path / "local")
    report = {}
    for name in ("local", "ray"):
        verified, data = load_study_report(tmp_path / name, operator)
        assert verified.status == "ok", verified.problems
        report[name] = sorted((c.cell_id, c.status, c.score) for c in data.cells)
    assert report["ray"] == report["local"]
    assert main(["verify", str(tmp_path / "ray")]) == 0
    # each host signed with its own key, enrolled in study.planned; never the operator's
    [planned] = [r.event for r in read_study(tmp_path / "ray") if isinstance(r.event, StudyPlanned)]
    enrolled = {bytes.fromhex(k.public_key) for k in planned.host_keys}
    assert planned.executor == "ray" and len(enrolled) == 2 and operator.raw not in enrolled
    for e in _ended(tmp_path / "ray"):
        assert e.host and run_signer(tmp_path / "ray" / e.run_dir) in enrolled
    assert main(["study", "status", str(tmp_path / "ray")]) == 0
    # verify DIR trusts exactly the enrolled keys: a cell's run replaced by the same cell
    # recorded here (a sound ledger, signed by the operator key, not enrolled) fails
    forged = tmp_path / "forged"
    shutil.copytree(tmp_path / "ray", forged)
    cell = _ended(forged)[0].run_dir
    shutil.rmtree(forged / cell)
    shutil.copytree(tmp_path / "local" / cell, forged / cell)
    report = verify_study(forged, operator)
    assert report.status == "tampered"
    assert report.problems == [f"cell {_ended(forged)[0].cell_id} attempt 1: {cell}: signed by a key the study did"
                               " not enroll"]


def _service_process() -> tuple[int, bool]:
    """In a host's service: (its pid, whether it has the recorder imported)."""
    import os
    import sys

    return os.getpid(), "caisson.run" in sys.modules


def test_each_host_keeps_one_service_that_outlives_the_study(ray_cluster, tmp_path):
    """A study finds (or starts) one detached caisson service per host, which holds the host's
    slots and has the recorder imported; the next study is served by the same processes: it
    waits for no worker to start and no recorder to import (docs/studies.md, "Executors")."""
    import ray

    from caisson.study._rayhost import NAMESPACE, service_name

    _, nodes, _ = ray_cluster
    repo = make_probe_repo(tmp_path)
    study = _study(tmp_path, 'arms = ["plain"]\n' + GREP_AGENT.replace("SLEEP ", ""), questions=ONE_QUESTION)

    def services() -> dict[str, tuple[int, bool]]:
        return {n.node_id: ray.get(ray.get_actor(service_name(n.node_id), namespace=NAMESPACE)
                                   .__ray_call__.remote(lambda self: _service_process())) for n in nodes}

    assert run_study(study, tmp_path / "a", repo=repo, executor=_executor()).state == "ended"
    first = services()
    assert len({pid for pid, _ in first.values()}) == 2 and all(imported for _, imported in first.values())
    # a service holds none of its host's caisson_slot resource: its replacement may start beside it
    assert ray.available_resources().get("caisson_slot", 0) == 2
    assert run_study(study, tmp_path / "b", repo=repo, executor=_executor()).state == "ended"
    assert services() == first
    hosts = {e.host.rsplit("/", 1)[1] for out in ("a", "b") for e in _ended(tmp_path / out)}
    assert hosts <= {n.node_id[:12] for n in nodes}


def test_sessions_go_only_to_enrolled_undrained_hosts_with_a_free_slot(ray_cluster):
    from caisson.study.executor import AllHostsDrained

    executor = _executor()
    keys = executor.host_keys()
    (a, key_a), (b, _) = sorted((k.host, k.public_key) for k in keys)
    executor.enroll([HostKey(host=a, public_key=key_a)])  # b's key not enrolled: b takes nothing
    first = executor._take()
    assert first.label == a and first.busy == 1
    taken = []
    waiter = threading.Thread(target=lambda: taken.append(executor._take()))
    waiter.start()
    waiter.join(timeout=1.0)
    assert waiter.is_alive() and not taken  # a's one slot is busy: the next session waits for it
    with executor._free:
        first.busy -= 1
        executor._free.notify_all()
    waiter.join(timeout=10)
    assert [h.label for h in taken] == [a]
    executor.enroll(keys)
    executor.drain(a)
    with executor._free:
        taken[0].busy -= 1
    assert executor._take().label == b
    executor.drain(b)
    with pytest.raises(AllHostsDrained):
        executor._take()


def _pretend_stale(service) -> None:
    service._stamp = "the stamp of an older checkout"


def test_a_service_older_than_its_hosts_checkout_is_replaced_before_it_records(ray_cluster):
    import ray

    from caisson.study._rayhost import NAMESPACE, service_generations, service_name

    _, nodes, _ = ray_cluster
    _executor().joined  # noqa: B018  (every host has its service)
    services = {n.node_id: ray.get_actor(service_name(n.node_id), namespace=NAMESPACE) for n in nodes}
    before = {node: ray.get(s.__ray_call__.remote(lambda self: _service_process()))[0] for node, s in services.items()}
    stale = nodes[0].node_id
    ray.get(services[stale].__ray_call__.remote(_pretend_stale))
    joined = _executor().joined
    assert len(joined) == 2 and all(key for _, key, _, _ in joined)  # the stale one reported no key: replaced
    assert service_generations(stale) == [1]  # the stale one was idle: killed; its successor is generation 1
    assert service_generations(nodes[1].node_id) == [0]
    after = {n.node_id: ray.get(ray.get_actor(service_name(n.node_id, g), namespace=NAMESPACE)
                                .__ray_call__.remote(lambda self: _service_process()))[0]
             for n, g in zip(nodes, (1, 0), strict=True)}
    assert after[stale] != before[stale]
    assert after[nodes[1].node_id] == before[nodes[1].node_id]


def test_a_resumed_studys_first_sessions_at_once_take_one_slot_each(ray_cluster):
    """On resume nothing calls `host_keys` first: the first sessions enter `joined` together;
    it is computed once and no host's slot count is replaced under a session holding it."""
    keys = _executor().host_keys()
    executor = _executor()
    executor.enroll(keys)
    taken, gate = [], threading.Barrier(4)

    def take():
        gate.wait()
        taken.append(executor._take())

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while len(taken) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.5)  # the others stay waiting: each host's one slot is taken
    assert len(taken) == 2 and {h.label for h in taken} == {k.host for k in keys}  # one slot per host
    assert all(executor._hosts[h.node_id] is h and h.busy == 1 for h in taken)
    with executor._free:
        for h in list(taken):
            h.busy -= 1
        executor._free.notify_all()
    for t in threads:
        t.join(timeout=10)
    assert len(taken) == 4 and sum(h.busy for h in executor._hosts.values()) == 2


def _set_active(service, n: int) -> None:
    service._active = n


def test_a_busy_stale_service_is_retired_not_killed_and_a_new_one_serves_beside_it(ray_cluster):
    """A service older than its host's checkout that still records (another study's
    session) is not killed: it admits nothing more, a next generation serves the host, and
    a later join kills it once idle."""
    import ray

    from caisson.study._rayhost import NAMESPACE, service_generations, service_name

    _, nodes, _ = ray_cluster
    _executor().joined  # noqa: B018
    node = nodes[1].node_id
    [gen] = service_generations(node)
    old = ray.get_actor(service_name(node, gen), namespace=NAMESPACE)
    ray.get(old.__ray_call__.remote(_set_active, 1))  # another study's session recording
    ray.get(old.__ray_call__.remote(_pretend_stale))
    assert len(_executor().joined) == 2
    assert service_generations(node) == [gen, gen + 1]  # both live: the old one was busy
    assert ray.get(old.session.remote(None, {}, frozenset())) == {"full": True, "retired": True}
    new = ray.get_actor(service_name(node, gen + 1), namespace=NAMESPACE)
    # the host's one slot is the old one's session's: the new one answers full meanwhile
    assert ray.get(new.session.remote(None, {}, frozenset())) == {"full": True, "retired": False}
    ray.get(old.__ray_call__.remote(_set_active, 0))  # its session ended
    deadline = time.monotonic() + 20
    while service_generations(node) != [gen + 1] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert service_generations(node) == [gen + 1]  # idle and retired: killed by its successor
    assert ray.get(new.__ray_call__.remote(lambda self: self._borrowed)) == 0


def _sleep(service, seconds: float) -> None:
    time.sleep(seconds)


def test_a_full_service_answers_at_once_and_joins_never_queue_behind_sessions(ray_cluster):
    import ray

    from caisson.study._rayhost import NAMESPACE, service_generations, service_name

    _, nodes, _ = ray_cluster
    _executor().joined  # noqa: B018
    node = nodes[0].node_id
    service = ray.get_actor(service_name(node, service_generations(node)[-1]), namespace=NAMESPACE)
    ray.get(service.__ray_call__.remote(_set_active, 1))  # its one slot taken (another study)
    try:
        assert ray.get(service.session.remote(None, {}, frozenset()), timeout=10) == {"full": True, "retired": False}
    finally:
        ray.get(service.__ray_call__.remote(_set_active, 0))
    sleepers = [service.__ray_call__.remote(_sleep, 8) for _ in range(12)]  # every session thread busy
    try:
        assert ray.get(service.join.remote(), timeout=30)[4] is True
        ready, _ = ray.wait(sleepers, num_returns=len(sleepers), timeout=0)
        assert not ready  # it answered while every sleeper still ran: not queued behind them
    finally:
        ray.get(sleepers)


def test_sessions_refused_as_full_by_a_host_another_study_fills_go_to_the_free_one(ray_cluster, tmp_path):
    """Another study holds node 0's one slot: this study's service answers "full" at once and
    every cell is recorded on node 1, none waits on node 0 nor fails."""
    import ray

    from caisson.study._rayhost import NAMESPACE, service_generations, service_name

    _, nodes, _ = ray_cluster
    executor = _executor()
    executor.joined  # noqa: B018
    full = nodes[0].node_id
    service = ray.get_actor(service_name(full, service_generations(full)[-1]), namespace=NAMESPACE)
    ray.get(service.__ray_call__.remote(_set_active, 1))
    try:
        repo = make_probe_repo(tmp_path)
        result = run_study(_grep_study(tmp_path), tmp_path / "out", repo=repo, executor=executor)
    finally:
        ray.get(service.__ray_call__.remote(_set_active, 0))
    assert (result.state, result.counted, result.void) == ("ended", 2, 0)
    assert {e.host.rsplit("/", 1)[1] for e in _ended(tmp_path / "out")} == {nodes[1].node_id[:12]}


def test_a_session_sent_to_a_service_another_study_retired_and_killed_is_placed_again(ray_cluster, tmp_path):
    """A study holds its hosts' services from its start; another study's join retires a
    stale one and kills it, idle: this study's next session there never ran, so it is placed
    again (on the next generation), not counted as an infra-failed attempt."""
    import ray

    from caisson.study._rayhost import NAMESPACE, service_generations, service_name

    _, nodes, _ = ray_cluster
    executor = _executor()
    executor.joined  # noqa: B018
    for n in nodes:
        gen = service_generations(n.node_id)[-1]
        ray.get(ray.get_actor(service_name(n.node_id, gen), namespace=NAMESPACE).__ray_call__.remote(_pretend_stale))
    assert len(_executor().joined) == 2  # the other study: both stale services retired and killed
    repo = make_probe_repo(tmp_path)
    result = run_study(_grep_study(tmp_path), tmp_path / "out", repo=repo, executor=executor)
    assert (result.state, result.counted, result.void) == ("ended", 2, 0)
    assert [e.attempt for e in _ended(tmp_path / "out")] == [1, 1]


def test_a_host_that_answered_full_is_passed_over_for_a_while(ray_cluster):
    from caisson.study._ray import FULL_BACKOFF_S

    executor = _executor()
    executor.enroll(executor.host_keys())
    first = executor._take()
    with executor._free:
        first.busy -= 1
        first.full_until = time.monotonic() + 10 * FULL_BACKOFF_S
    other = executor._take()
    assert other is not first


def test_the_cluster_is_looked_at_without_holding_the_hosts_lock(ray_cluster):
    from caisson.study import _ray

    executor = _executor()
    executor.enroll(executor.host_keys())
    looked, others_got_in = threading.Event(), []
    slot_nodes = executor._slot_nodes

    def enter():
        got = executor._free.acquire(timeout=1)
        others_got_in.append(got)
        if got:
            executor._free.release()

    def slow_slot_nodes():  # a Ray call of the refresh: another session's thread must get in meanwhile
        looked.set()
        other = threading.Thread(target=enter)
        other.start()
        other.join()
        return slot_nodes()

    executor._slot_nodes = slow_slot_nodes
    executor._refreshed = time.monotonic() - 2 * _ray.REFRESH_S
    executor._take()  # it looks at the cluster first
    assert looked.is_set() and others_got_in == [True]


def test_a_join_that_never_answers_and_hosts_all_lost_end_with_an_error_naming_them(ray_cluster, monkeypatch):
    import ray

    from caisson.errors import UsageError
    from caisson.study import _ray
    from caisson.study.executor import AllHostsDrained

    executor = _executor()
    executor.enroll(executor.host_keys())
    host = next(iter(executor._hosts.values()))
    monkeypatch.setattr(_ray, "JOIN_TIMEOUT_S", 0.5)
    never = ray.remote(num_cpus=0)(_sleep).remote(None, 30)
    with pytest.raises(UsageError, match=f"{host.node_id[:12]} did not answer its join within"):
        executor._settle(host, never, [], strict=True)
    assert executor._settle(host, never, [], strict=False) is None
    ray.cancel(never, force=True)
    monkeypatch.setattr(_ray, "LOST_WAIT_S", 0.5)
    monkeypatch.setattr(executor, "_refresh", lambda: None)
    for h in executor._hosts.values():
        h.lost = True
    started = time.monotonic()
    with pytest.raises(AllHostsDrained, match="every one is lost") as caught:
        executor._take()
    assert all(h.label in str(caught.value) for h in executor._hosts.values())
    assert time.monotonic() - started < 10


def test_a_service_older_than_its_hosts_code_is_told_by_its_stamp(tmp_path):
    from caisson.study._rayhost import code_stamp

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("x = 1\n")
    (tmp_path / "pkg" / "notes.txt").write_text("a")
    stamp = code_stamp([tmp_path / "pkg"])
    assert code_stamp([tmp_path / "pkg"]) == stamp
    (tmp_path / "pkg" / "notes.txt").write_text("b")  # not code
    assert code_stamp([tmp_path / "pkg"]) == stamp
    (tmp_path / "pkg" / "mod.py").write_text("x = 22\n")  # a checkout that changed
    assert code_stamp([tmp_path / "pkg"]) != stamp
    assert len(code_stamp()) == 64  # the installed packages


def test_a_cell_altered_in_transit_fails_verification_on_arrival(ray_cluster, tmp_path):
    import hashlib

    repo = make_probe_repo(tmp_path)
    study = _study(tmp_path, 'arms = ["plain"]\n' + GREP_AGENT.replace("SLEEP ", ""), questions=ONE_QUESTION)
    replies = []

    def alter(reply: dict) -> None:  # the second reply is the first cell's (the first: the baseline)
        replies.append(reply["host"])
        if len(replies) != 2:
            return
        for i, (rel, sha, size) in enumerate(reply["manifest"]):
            if rel == "ledger":  # a consistent forgery: new bytes under a manifest that names them
                data = bytearray(reply["blobs"][sha])
                data[len(data) // 2] ^= 0x01
                new = hashlib.sha256(bytes(data)).hexdigest()
                reply["blobs"][new] = bytes(data)
                reply["manifest"][i] = (rel, new, len(data))

    out = tmp_path / "out"
    result = run_study(study, out, repo=repo, executor=_executor(in_transit=alter))
    assert result.state == "ended" and result.counted == 1
    ended = sorted(_ended(out), key=lambda e: (e.cell_id, e.attempt))
    altered = [e for e in ended if e.infra_failure]
    assert len(altered) == 1 and not altered[0].counting and altered[0].run_id is None
    assert "does not verify on arrival" in altered[0].explanation()
    assert (out / "quarantine" / altered[0].run_dir / "ledger").is_file()  # kept aside, not in cells/
    assert not (out / altered[0].run_dir).exists()
    again = [e for e in ended if e.cell_id == altered[0].cell_id and e.counting]
    assert len(again) == 1 and again[0].attempt == 2
    assert verify_study(out, ensure_operator_key().verify_key).status == "ok"


def test_arrival_rebuilds_only_what_the_manifest_names_with_those_bytes(ray_cluster, tmp_path):
    import hashlib
    from types import SimpleNamespace

    executor = _executor()
    job = SimpleNamespace(session=SimpleNamespace(run_dir=tmp_path / "run"))
    data = b"blob bytes"
    sha = hashlib.sha256(data).hexdigest()

    def reply(manifest, blobs):
        return {"host": "h/1", "outcome": None, "error": "", "refused": "", "manifest": manifest, "blobs": blobs}

    ok = executor._arrive(job, reply([("blobs/x", sha, len(data))], {sha: data}))
    assert ok.arrival == "" and (tmp_path / "run" / "blobs" / "x").read_bytes() == data
    again = executor._arrive(SimpleNamespace(session=SimpleNamespace(run_dir=tmp_path / "run2")),
                             reply([("y", sha, len(data))], {}))  # a blob the driver has: not sent again
    assert again.arrival == "" and (tmp_path / "run2" / "y").read_bytes() == data
    for manifest, blobs, why in [
        ([("../escape", sha, len(data))], {sha: data}, "outside the run directory"),
        ([("z", "0" * 64, 3)], {}, "not those of sha256"),  # named, never sent, not held
        ([("z", sha, len(data))], {sha: b"other bytes"}, "not those of sha256"),
    ]:
        bad = executor._arrive(job, reply(manifest, blobs))
        assert why in bad.arrival and bad.outcome is None
    assert not (tmp_path / "escape").exists()


def test_a_host_without_the_repository_or_its_commit_fails_the_session_as_infra(ray_cluster, tmp_path):
    from caisson.study._rayhost import _missing_commit

    repo = make_probe_repo(tmp_path)
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert _missing_commit(repo, head) == ""
    assert "does not hold commit" in _missing_commit(repo, "0" * 40)
    assert "is not on this host" in _missing_commit(tmp_path / "nowhere", head)


def _node_running_a_chamber(homes: list[Path]) -> int | None:
    """Which node's worker records the chamber that runs now: its recorder's CAISSON_HOME."""
    ids = subprocess.run(["docker", "ps", "-q", "--filter", "label=caisson.recorder.pid"], capture_output=True,
                         text=True).stdout.split()
    for cid in ids:
        pid = subprocess.run(["docker", "inspect", "-f", '{{index .Config.Labels "caisson.recorder.pid"}}', cid],
                             capture_output=True, text=True).stdout.strip()
        with contextlib.suppress(OSError, ValueError):
            environ = Path(f"/proc/{int(pid)}/environ").read_bytes().split(b"\0")
            for i, home in enumerate(homes):
                if f"CAISSON_HOME={home}".encode() in environ:
                    return i
    return None


def _scratch_dirs() -> set[Path]:
    root = scratch_root()
    return set(root.iterdir()) if root.is_dir() else set()


def _session_scratch(before: set[Path]) -> list[Path]:
    """Host scratch directories of sessions (a scenario.toml beside the run) made since ``before``."""
    return [p for p in _scratch_dirs() - before
            if p.is_dir() and (p / "scenario.toml").is_file() and (p / "s").is_dir()]


def test_a_host_whose_agent_recipe_differs_stops_the_study_before_it_starts(ray_cluster, tmp_path):
    """A third host set up from other recipes (its agent image's differ, its chamber's not):
    its joining stops the study, naming it and its tags; every host joined (and reaped) first."""
    import ray

    from caisson.chamber.image import recipe_tags
    from caisson.errors import UsageError
    from caisson.resources import resource_dir

    cluster, _, _ = ray_cluster
    images = tmp_path / "images"
    shutil.copytree(resource_dir("images"), images)
    recipe = next(p for p in sorted((images / "agent").iterdir()) if p.is_file())
    recipe.write_bytes(recipe.read_bytes() + b"\n# another checkout's recipe\n")
    ours = recipe_tags()
    node = cluster.add_node(num_cpus=1, resources={"caisson_slot": 1},
                            env_vars={"CAISSON_HOME": str(tmp_path / "home3"), "CAISSON_IMAGES_DIR": str(images)})
    try:
        deadline = time.monotonic() + 60
        while sum(1 for n in ray.nodes() if n.get("Alive") and n["Resources"].get("caisson_slot")) < 3:
            assert time.monotonic() < deadline, "the third node never joined the cluster"
            time.sleep(0.2)
        with pytest.raises(UsageError, match="image recipes are not this checkout's") as caught:
            _executor().host_keys()
        import re

        theirs = re.search(rf"{node.node_id[:12]} \((\S+) (\S+)\)", str(caught.value))
        assert f"({ours})" in str(caught.value) and theirs, caught.value
        chamber, agent = ours.split()
        assert theirs[1] == chamber and theirs[2] != agent and theirs[2].startswith("caisson/agent:")
    finally:
        cluster.remove_node(node)
        deadline = time.monotonic() + 60
        while any(n["NodeID"] == node.node_id and n.get("Alive") for n in ray.nodes()):
            assert time.monotonic() < deadline, "the third node never left the cluster"
            time.sleep(0.2)


@pytest.mark.engine_exclusive  # another run's record would reap the orphan first
def test_each_host_reaps_orphaned_chambers_when_a_study_starts(ray_cluster, chamber_image):
    """A chamber whose recorder is gone (labels as `caisson gc` reads them), on the engine the
    hosts share: the hosts' joins at a study's start reap it and count it."""
    from caisson.chamber._reap import recorder_identity, recorder_labels

    child = subprocess.Popen(["sleep", "0"])
    child.wait()  # a recorder that is gone
    me = recorder_identity()
    dead = recorder_labels(msgspec.structs.replace(me, pid=child.pid, start="1"), 0)
    flags = [x for k, v in {**dead, "caisson.run": f"ray-reap-{os.getpid()}"}.items() for x in ("--label", f"{k}={v}")]
    cid = subprocess.run(["docker", "run", "-d", "--network", "none", *flags, chamber_image, "sleep", "300"],
                         capture_output=True, text=True, check=True).stdout.strip()
    try:
        joined = _executor().joined
        # both hosts share this engine: both may find it, and removing one already gone is no failure
        assert len(joined) == 2 and sum(reaped for _, _, reaped, _ in joined) >= 1, joined
        assert subprocess.run(["docker", "inspect", cid], capture_output=True).returncode != 0
    finally:
        subprocess.run(["docker", "rm", "-f", cid], capture_output=True)


@pytest.mark.engine_exclusive  # the removed node's chamber is an orphan until the next record reaps it
def test_a_node_removed_mid_cell_is_an_infra_failed_attempt_run_again_on_the_other(ray_cluster, tmp_path):
    cluster, nodes, homes = ray_cluster
    repo = make_probe_repo(tmp_path)
    study = _study(tmp_path, 'arms = ["plain"]\n' + GREP_AGENT.replace("SLEEP", "sleep 5;"), questions=ONE_QUESTION)
    out = tmp_path / "out"
    results = []
    before = _scratch_dirs()
    runner = threading.Thread(target=lambda: results.append(run_study(study, out, repo=repo, infra_retries=1,
                                                                      executor=_executor())))
    runner.start()
    removed = None
    deadline = time.monotonic() + 120
    while removed is None and time.monotonic() < deadline and runner.is_alive():
        time.sleep(0.3)
        with contextlib.suppress(Exception):
            if any(isinstance(r.event, CellStarted) for r in read_study(out)):
                i = _node_running_a_chamber(homes)
                if i is not None:
                    time.sleep(1.0)  # mid-cell: its chamber runs
                    cluster.remove_node(nodes[i], allow_graceful=False)
                    removed = i
    runner.join(timeout=240)
    assert removed is not None, "no cell chamber was seen running"
    assert not runner.is_alive() and results and results[0].state == "ended", results
    ended = _ended(out)
    lost = [e for e in ended if e.infra_failure]
    counting = [e for e in ended if e.counting]
    assert lost and all(e.run_id is None and e.status == "failed" for e in lost)
    assert "lost" in lost[0].explanation()
    # nothing sealed lost or duplicated: each cell counts once, from the surviving node's key
    assert sorted(e.cell_id for e in counting) == sorted({e.cell_id for e in ended})
    assert len({(e.cell_id, e.attempt) for e in ended}) == len(ended)
    survivor = nodes[1 - removed].node_id[:12]
    assert [e.host.rsplit("/", 1)[1] for e in counting] == [survivor]
    assert verify_study(out, ensure_operator_key().verify_key).status == "ok"
    # the lost session's scratch directory on its host carries its worker's labels: the retry's
    # record reaps it when that worker is already gone; on a loaded host the worker may outlive
    # its node for a while, and then the next reap (here `caisson gc`) removes it once it is gone
    deadline = time.monotonic() + 30
    while _session_scratch(before) and time.monotonic() < deadline:
        time.sleep(0.5)
        main(["gc"])
    assert not _session_scratch(before)
