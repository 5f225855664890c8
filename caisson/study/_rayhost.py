"""The host side of the ``ray`` executor: one long-lived caisson service per Docker host.

A host that joins a Ray cluster with ``caisson_slot``s gets one `HostService`: a detached
Ray actor, named after its node (`service_name`), in the namespace ``caisson``, pinned to
that node, holding all of its slots. The first study that finds a host without one
starts it (`caisson.study._ray`); it outlives that study, so a later study neither waits
for Ray to start a worker process for it on each host nor for that worker to import
caisson's recorder: it finds the service by name and calls it (docs/studies.md,
"Executors").

- `HostService.join`: reap orphaned chambers (`caisson.chamber._reap`, the labels of
  `caisson gc`) and report the host's label, public key, image recipe tags, and whether
  the caisson code this process imported is still what is installed (`code_stamp`). A
  service older than its host's checkout retires: it admits no further session, finishes
  those it records; a new service of the next generation (`service_name`) serves the
  host meanwhile, counts the sessions its predecessor still records against the host's
  slots, and kills it once idle (a join that finds it idle kills it too).
- `HostService.session`: record one session in a scratch directory and return the run
  directory content-addressed (a manifest and the blobs the driver lacks). Admission never
  waits: with all ``slots`` recording (whichever studies sent them) the reply is
  ``{"full": True}`` and the driver places the session on another host, or later.
- ``join`` and ``retire`` run in their own concurrency group (``control``), so that a
  study's start never queues behind other studies' sessions.
- Every `REAP_PERIOD_S` the service reaps orphans on its own, between studies too.

Ray restarts nothing (``max_restarts=0``, ``max_task_retries=0``): a service whose node
or process dies raises `ray.exceptions.RayActorError` at the driver for every session it
held, each an infra-failed attempt that the runner places again on another host.
"""

from __future__ import annotations

import hashlib
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
import ray

if TYPE_CHECKING:
    from caisson.study._dispatch import SessionJob

__all__ = ["NAMESPACE", "REAP_PERIOD_S", "WATCH_S", "SLOT", "HostService", "code_stamp", "service_name", "start_service"]

SLOT = "caisson_slot"
"""The Ray custom resource a Docker host offers, one per session it may record at once."""
NAMESPACE = "caisson"
"""The Ray namespace of the hosts' services (detached actors live in one)."""
REAP_PERIOD_S = 600.0
"""Seconds between a service's own reaps of orphaned chambers."""
WATCH_S = 1.0
"""Seconds between a new generation's looks at its retired predecessors' sessions."""
_PACKAGES = ("caisson", "collectors", "ledger")


def service_name(node_id: str, generation: int = 0) -> str:
    """The name of the caisson service of the Ray node ``node_id`` (hex), ``generation``
    counting its replacements (0: the first; the highest living one serves)."""
    return f"caisson-host-{node_id}" + (f"-{generation}" if generation else "")


def service_generations(node_id: str, named: list[dict] | None = None) -> list[int]:
    """The generations of the living services of node ``node_id``, ascending; ``named``: the
    cluster's named actors (``ray.util.list_named_actors(all_namespaces=True)``), else asked."""
    base = service_name(node_id)
    found = []
    for actor in ray.util.list_named_actors(all_namespaces=True) if named is None else named:
        name = actor["name"]
        if actor["namespace"] != NAMESPACE or not (name == base or name.startswith(base + "-")):
            continue
        tail = name[len(base) + 1:]
        if not tail or tail.isdigit():
            found.append(int(tail or 0))
    return sorted(found)


def code_stamp(roots: list[Path] | None = None) -> str:
    """sha256 hex over the path, size and mtime (ns) of every ``.py`` and ``.so`` file under
    ``roots`` (default: the installed caisson, collectors and ledger packages; about 2 ms):
    it changes when the host's checkout does."""
    if roots is None:
        roots = [Path(__import__(name).__file__).parent for name in _PACKAGES]
    digest = hashlib.sha256()
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.suffix in (".py", ".so"):
                st = path.stat()
                digest.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _host_label() -> str:
    """This host as the study ledger names it: ``<host name>/<first 12 hex of its Ray node id>``."""
    return f"{socket.gethostname()}/{ray.get_runtime_context().get_node_id()[:12]}"


def _missing_commit(repo: Path, commit: str) -> str:
    """Why ``repo`` on this host cannot give ``commit`` ("" when it can)."""
    if not repo.is_dir():
        return f"the repository {repo} is not on this host"
    proc = subprocess.run(["git", "-C", str(repo), "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True)
    return "" if proc.returncode == 0 else f"the repository {repo} on this host does not hold commit {commit}"


def _reap_here() -> int:
    """Reap this host's orphaned chambers; how many were removed.

    Raises:
        ChamberError: the engine cannot list containers or networks.
    """
    from caisson._signals import run_terminable
    from caisson.chamber import open_engine
    from caisson.chamber import reap

    async def _reap() -> int:
        async with open_engine() as engine:
            return sum(1 for r in await reap(engine) if r.removed)

    return run_terminable(_reap)


class HostService:
    """One host's caisson service (a detached Ray actor; see the module docstring).

    It imports the recorder when it starts, so that no session waits for that import.

    Args:
        slots: sessions recorded at once on the host (the host's ``caisson_slot``s), its
            retired predecessors' included; more are answered "full".
        node_id: the Ray node it serves (hex).
        generation: its generation (`service_name`): from 1 on, it watches its retired
            predecessors, counts their sessions against its slots, and kills each once idle.
    """

    def __init__(self, slots: int, node_id: str = "", generation: int = 0):
        import caisson.study._dispatch  # noqa: F401  (the recorder's modules, once per service)

        self._stamp = code_stamp()
        self._slots = max(1, slots)
        self._guard = threading.Lock()  # guards the three below
        self._active = 0  # sessions recording now
        self._borrowed = 0  # sessions its retired predecessors record now
        self._retired = False  # older than the host's checkout: admits no session
        threading.Thread(target=self._reap_periodically, name="caisson-reap", daemon=True).start()
        if generation:
            self._borrowed = self._slots  # until its predecessors are counted
            threading.Thread(target=self._watch_predecessors, args=(node_id, generation),
                             name="caisson-predecessors", daemon=True).start()

    def _watch_predecessors(self, node_id: str, generation: int) -> None:
        """Every `WATCH_S`: count the sessions of the living services of ``node_id`` older than
        ``generation`` (retiring them) against this one's slots; kill each once idle; stop
        when none is left."""
        while True:
            borrowed = 0
            for old in [g for g in service_generations(node_id) if g < generation]:
                try:
                    service = ray.get_actor(service_name(node_id, old), namespace=NAMESPACE)
                    active = ray.get(service.retire.remote(), timeout=10)
                    if active == 0:
                        ray.kill(service, no_restart=True)
                    borrowed += active
                except ValueError:  # gone meanwhile
                    pass
                except Exception:  # noqa: BLE001  (not answering: count it full, look again)
                    borrowed += self._slots
            with self._guard:
                self._borrowed = borrowed
            if not borrowed:
                return
            time.sleep(WATCH_S)

    def _reap_periodically(self) -> None:
        while True:
            time.sleep(REAP_PERIOD_S)
            try:
                _reap_here()
            except Exception:  # noqa: BLE001  (an engine down for a while: the next round retries)
                pass

    @ray.method(concurrency_group="control")
    def join(self) -> tuple[str, bytes, int, str, bool]:
        """At the start of a study: reap orphans; (label, raw public key, chambers reaped,
        its image recipes' tags (`caisson.chamber.image.recipe_tags`), whether this service's
        code is still the host's). A service
        whose code is not the host's any more retires (see `retire`)."""
        from caisson.chamber import recipe_tags
        from caisson.home import ensure_operator_key

        current = code_stamp() == self._stamp
        if not current:  # replaced by the driver: a stale service reaps nothing and records nothing
            self.retire()
            return _host_label(), b"", 0, "", False
        return _host_label(), ensure_operator_key().verify_key.raw, _reap_here(), recipe_tags(), True

    def session(self, job: SessionJob, files: dict[str, bytes], have: frozenset[str]) -> dict:
        """Record one session here; the run directory as a manifest and the blobs not in ``have``.

        Args:
            job: the session (its paths are the driver's).
            files: ``scenario`` (the scenario file's bytes), ``model_script`` when it has one.
            have: sha256 hex of the blobs the driver holds: not sent back.

        Returns:
            ``host``, ``public_key``, ``outcome``, ``error``, ``refused``, ``manifest``
            ([(path, sha256 hex, bytes)]) and ``blobs`` ({sha256 hex: bytes}).
        """
        with self._guard:
            if self._retired:
                return {"full": True, "retired": True}
            if self._active + self._borrowed >= self._slots:
                return {"full": True, "retired": False}
            self._active += 1
        try:
            return self._session(job, files, have)
        finally:
            with self._guard:
                self._active -= 1

    @ray.method(concurrency_group="control")
    def retire(self) -> int:
        """Admit no further session; the sessions still recording (0: it may be killed)."""
        with self._guard:
            self._retired = True
            return self._active

    def _session(self, job: SessionJob, files: dict[str, bytes], have: frozenset[str]) -> dict:
        from caisson.chamber import recorder_identity, recorder_labels
        from caisson.chamber import open_scratch
        from caisson.home import ensure_operator_key
        from caisson.study._dispatch import SessionResult, run_session_here

        host = _host_label()
        # a scratch directory like the recorder's own, held by this process: when it dies
        # mid-session (its node lost) the next record or `caisson gc` on this host reaps it
        budget_s = 2 * (job.timeout_s or job.scenario.limits.wall_seconds)
        held = open_scratch(recorder_labels(recorder_identity(), time.time_ns() + int(budget_s * 1e9)))
        root = held.path
        try:
            run_dir = root / "s" / job.session.run_dir.name
            run_dir.parent.mkdir(parents=True)
            (root / "study" / "scenarios").mkdir(parents=True)  # a baseline writes its model script there
            scenario = root / "scenario.toml"
            scenario.write_bytes(files["scenario"])
            combo = job.combo
            if "model_script" in files:
                (root / "model.toml").write_bytes(files["model_script"])
                combo = msgspec.structs.replace(combo, endpoint=msgspec.structs.replace(combo.endpoint,
                                                                                       script=str(root / "model.toml")))
            here = msgspec.structs.replace(job, combo=combo, study_dir=root / "study",
                                           session=msgspec.structs.replace(job.session, run_dir=run_dir,
                                                                           scenario=scenario))
            missing = _missing_commit(Path(job.repo), job.commit)
            if missing:  # this host's fault, not the session's: an infra failure, run again elsewhere
                result = SessionResult(error=f"host {host}: {missing}")
            else:
                result = run_session_here(here)
            manifest, blobs = [], {}
            for path in sorted(p for p in run_dir.rglob("*") if p.is_file()) if run_dir.is_dir() else []:
                data = path.read_bytes()
                sha = hashlib.sha256(data).hexdigest()
                manifest.append((str(path.relative_to(run_dir)), sha, len(data)))
                if sha not in have:
                    blobs[sha] = data
            return {"host": host, "public_key": ensure_operator_key().verify_key.raw,
                    "outcome": result.outcome, "error": result.error, "refused": result.refused,
                    "manifest": manifest, "blobs": blobs}
        finally:
            held.remove()


_HostActor = ray.remote(concurrency_groups={"control": 4})(HostService)


def start_service(node_id: str, slots: int, generation: int | None = None) -> tuple[ray.actor.ActorHandle, int]:
    """The caisson service of node ``node_id`` and its generation: that of ``generation``
    (None: the newest living one, else the first), running or started there now (detached,
    namespace ``caisson``, pinned to the node, recording at most ``slots`` sessions at once,
    no restarts, no retries). It holds none of the node's ``caisson_slot`` resource: an
    old service finishing its sessions and its replacement may live side by side."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if generation is None:
        generation = (service_generations(node_id) or [0])[-1]
    return _HostActor.options(
        name=service_name(node_id, generation), namespace=NAMESPACE, get_if_exists=True, lifetime="detached",
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
        num_cpus=0, max_restarts=0, max_task_retries=0,
        max_concurrency=slots + 4,  # the sessions and the replies "full"; joins have their own group
    ).remote(slots, node_id, generation), generation
