"""The ``ray`` executor: each session of a study is a Ray task on a Docker host.

Imported only for ``caisson study run --executor ray``: ``caisson`` never touches Ray
otherwise. The protocol (docs/studies.md, "Executors"):

- A host joins with ``ray start --address ... --resources '{"caisson_slot": K}'``. At the
  start of a study the driver runs one join task on every host holding a slot (pinned to
  it): the host reaps orphaned chambers (`caisson.chamber.reap`, the labels of `caisson
  gc`) and reports its label, its public key (its caisson home's operator key) and the tag
  of its chamber recipe, which must be the driver's (the same recipes; the image digests
  themselves differ between hosts, builds are not reproducible, and each run records its own).
- A session is a task needing one ``caisson_slot``, ``max_retries=0``: caisson owns
  retries. The task records into a scratch directory on its host, signs with the host's key,
  and returns the run directory content-addressed: a manifest (path, sha256, size) of
  every file and the bytes of only those blobs whose sha256 the driver said it already has
  not (``have``). The driver rebuilds the run directory from the reply and its own copies,
  checking every file's sha256 against the manifest; the runner then verifies the run
  against the enrolled key before ``cell.ended`` binds it.
- A task that fails (its node lost, its worker killed, the object gone) is an infra
  failure of that attempt, which the runner retries within ``--infra-retries``.
- A drained host (`drain`), or one whose key the study did not enroll (a host that joined
  after the start, with keys gathered at the start), takes no session: a task placed on it
  returns at once, records nothing, and is placed again.
- Token authentication: with ``--address``, ``RAY_AUTH_MODE`` is ``token`` (set when
  unset; ``disabled`` is refused), so the driver presents the cluster's token
  (``RAY_AUTH_TOKEN`` or ``~/.ray/auth_token``) and fails without one; the nodes are
  started with ``RAY_AUTH_MODE=token`` so the cluster demands it (README).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from caisson.errors import UsageError
from caisson.study.executor import AllHostsDrained

if TYPE_CHECKING:
    from caisson.study._dispatch import SessionJob, SessionResult

# The recorder (`caisson.study._dispatch`: SessionJob, SessionResult, run_session_here) is
# imported where it is used, not here: the driver connects to the cluster and sends every
# host its join task first, and imports it while the hosts' workers start (docs/studies.md).

__all__ = ["RayExecutor", "SLOT"]

SLOT = "caisson_slot"
"""The Ray custom resource a Docker host offers, one per session it may record at once."""


def _host_label() -> str:
    """This host as the study ledger names it: ``<host name>/<first 12 hex of its Ray node id>``."""
    return f"{socket.gethostname()}/{ray.get_runtime_context().get_node_id()[:12]}"


@ray.remote(num_cpus=0, max_retries=0)
def _join_host() -> tuple[str, bytes, int, str]:
    """On one host, at the start of a study: reap orphaned chambers; (label, raw public key,
    chambers reaped, the tag of the chamber recipe its checkout builds).

    It runs in the worker process that records this study's first session here: the
    recorder is imported now, while the driver plans, not by that session."""
    import trio

    import caisson.study._dispatch  # noqa: F401  (the warm-up: the recorder's modules)
    from caisson.chamber import open_engine
    from caisson.chamber.image import image_tag
    from caisson.chamber.reap import reap
    from caisson.home import ensure_operator_key

    async def _reap() -> int:
        async with open_engine() as engine:
            return sum(1 for r in await reap(engine) if r.removed)

    return _host_label(), ensure_operator_key().verify_key.raw, trio.run(_reap), image_tag("chamber")


def _missing_commit(repo: Path, commit: str) -> str:
    """Why ``repo`` on this host cannot give ``commit`` ("" when it can)."""
    if not repo.is_dir():
        return f"the repository {repo} is not on this host"
    proc = subprocess.run(["git", "-C", str(repo), "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True)
    return "" if proc.returncode == 0 else f"the repository {repo} on this host does not hold commit {commit}"


@ray.remote(num_cpus=0, max_retries=0)
def _host_session(job: SessionJob, files: dict[str, bytes], have: frozenset[str], drained: frozenset[str],
                  enrolled: frozenset[bytes]) -> dict:
    """Record one session on this host; the run directory as a manifest and missing blobs."""
    from caisson.chamber.reap import RECORDER_FILE, SCRATCH_PREFIX, recorder_identity, recorder_labels
    from caisson.home import ensure_operator_key
    from caisson.study._dispatch import SessionResult, run_session_here

    host = _host_label()
    key = ensure_operator_key().verify_key.raw
    if host in drained or key not in enrolled:
        return {"drained": True, "host": host, "enrolled": key in enrolled}
    # a scratch directory like the recorder's own: labelled with this worker, so that when the
    # worker dies mid-session (its node lost) the next record or `caisson gc` on this host reaps it
    root = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}ray-"))
    budget_s = 2 * (job.timeout_s or job.scenario.limits.wall_seconds)
    (root / RECORDER_FILE).write_text(json.dumps(recorder_labels(recorder_identity(),
                                                                 time.time_ns() + int(budget_s * 1e9))))
    try:
        run_dir = root / "s" / job.session.run_dir.name
        run_dir.parent.mkdir(parents=True)
        (root / "study" / "scenarios").mkdir(parents=True)  # a baseline writes its model script there
        scenario = root / "scenario.toml"
        scenario.write_bytes(files["scenario"])
        combo = job.combo
        if "model_script" in files:
            (root / "model.toml").write_bytes(files["model_script"])
            combo = msgspec.structs.replace(combo, endpoint={**combo.endpoint, "script": str(root / "model.toml")})
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
        return {"drained": False, "host": host, "public_key": key,
                "outcome": result.outcome, "error": result.error, "refused": result.refused,
                "manifest": manifest, "blobs": blobs}
    finally:
        shutil.rmtree(root, ignore_errors=True)


class RayExecutor:
    """Sessions as Ray tasks on the hosts of a Ray cluster (see the module docstring).

    Args:
        address: the cluster's head, ``host:port`` (as `ray.init` takes it); None:
            this process is already connected (tests), or a one-host cluster is started
            here with ``slots_per_host`` slots.
        slots_per_host: the slots of the one-host cluster started here (``address`` None);
            hosts that join a cluster declare their own (``ray start --resources``).
        enroll_keys: public key files of the hosts to trust; empty: the keys the hosts
            report at the start (recorded in ``study.planned``, printed by the CLI).
        in_transit: called with each reply before it is unpacked (tests: a cell altered in
            transit).

    Raises:
        UsageError: ``slots_per_host`` with ``address``; the cluster holds no ``caisson_slot``;
            an enrolled key file that is not a public key.
    """

    name = "ray"

    def __init__(self, address: str | None = None, slots_per_host: int | None = None,
                 enroll_keys: list[Path] | tuple[Path, ...] = (), in_transit: Callable[[dict], None] | None = None):
        if address is not None:
            mode = os.environ.setdefault("RAY_AUTH_MODE", "token")
            if mode.lower() != "token":
                raise UsageError(f"RAY_AUTH_MODE={mode}: caisson joins a Ray cluster only with token authentication"
                                 " (RAY_AUTH_MODE=token, the cluster's token in RAY_AUTH_TOKEN or ~/.ray/auth_token)")
        if address is not None and slots_per_host is not None:
            raise UsageError("--slots-per-host is for the one-host cluster started here; hosts joining --address"
                             " declare their slots: ray start --resources '{\"caisson_slot\": K}'")
        self._owned = False
        if not ray.is_initialized():
            if address is None:
                ray.init(resources={SLOT: slots_per_host or 1}, include_dashboard=False, log_to_driver=False)
            else:
                # this driver sends the cluster no task events (unless set): flushing them made every
                # study's ray.shutdown wait about 0.25 s; the hosts' workers still report theirs
                quiet = "RAY_task_events_report_interval_ms" not in os.environ
                if quiet:
                    os.environ["RAY_task_events_report_interval_ms"] = "0"  # read once, by ray.init
                try:
                    ray.init(address=address, log_to_driver=False)
                finally:
                    if quiet:
                        del os.environ["RAY_task_events_report_interval_ms"]
            self._owned = True
        self._enroll_files = [Path(p) for p in enroll_keys]
        self._in_transit = in_transit
        self._drained: set[str] = set()
        self._refusing: set[str] = set()  # hosts whose key the study did not enroll
        self._enrolled: frozenset[bytes] = frozenset()
        self._index: dict[str, Path] = {}  # sha256 -> a file on the driver with those bytes
        self._lock = threading.Lock()
        if self.slots() < 1:
            self.close()
            raise UsageError(f"no host of the Ray cluster holds a {SLOT}: join one with ray start --address ..."
                             f" --resources '{{\"{SLOT}\": K}}'")
        # every host joins (reaps, reports its key) while the driver plans; `joined` waits for them
        self._joining = [_join_host.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
                                            ).remote() for n in self._slot_nodes()]
        self._joined: list[tuple[str, bytes, int]] | None = None

    @property
    def joined(self) -> list[tuple[str, bytes, int, str]]:
        """(host, raw public key, orphaned chambers reaped, chamber recipe tag) of every host
        holding a slot at the start.

        Raises:
            UsageError: a host builds its chamber from other recipes than this checkout's
                (another caisson version: its cells would not be the study's).
        """
        if self._joined is None:
            from caisson.chamber.image import image_tag

            joined = ray.get(self._joining)
            ours = image_tag("chamber")
            other = [f"{host} ({tag})" for host, _, _, tag in joined if tag != ours]
            if other:
                raise UsageError(f"hosts whose chamber recipe is not this checkout's ({ours}): {', '.join(other)};"
                                 " set them up from the same caisson checkout (make setup)")
            self._joined = joined
        return self._joined

    def _slot_nodes(self) -> list[dict]:
        return [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get(SLOT, 0) > 0]

    def slots(self) -> int:
        """The ``caisson_slot`` total of the cluster now (hosts may join or leave)."""
        return int(ray.cluster_resources().get(SLOT, 0))

    def host_keys(self) -> list[dict[str, str]]:
        """The enrolled key files' keys, else those the hosts reported when they joined (the
        hosts have joined either way: reaped, their recipes checked).

        Raises:
            UsageError: as `joined`. KeyFileError: an enrolled file is not a public key.
        """
        joined = self.joined
        if self._enroll_files:
            from caisson.home import trusted_key

            return [{"host": f"enrolled:{p.name}", "public_key": trusted_key(p).raw.hex()} for p in self._enroll_files]
        return [{"host": host, "public_key": raw.hex()} for host, raw, _, _ in joined]

    def enroll(self, host_keys: list[dict[str, str]]) -> None:
        """Run sessions only on hosts whose key is one of ``host_keys`` (the study's)."""
        self._enrolled = frozenset(bytes.fromhex(k["public_key"]) for k in host_keys)

    def drain(self, host: str) -> None:
        """Give ``host`` no further session."""
        self._drained.add(host)

    def _every_host_drained(self) -> bool:
        out = {d.rsplit("/", 1)[-1] for d in self._drained | self._refusing}
        return all(n["NodeID"][:12] in out for n in self._slot_nodes())

    def run(self, job: SessionJob, around=None) -> SessionResult:
        """Record ``job`` on a host; its run directory at ``job.session.run_dir`` when it arrived.

        Raises:
            AllHostsDrained: every host holding a slot is drained.
        """
        from caisson.study._dispatch import SessionResult

        files = {"scenario": Path(job.session.scenario).read_bytes()}
        script = job.combo.endpoint.get("script")
        if script and not job.session.baseline and job.session.model_script is None:
            files["model_script"] = Path(script.replace("{question}", job.session.question_id)).read_bytes()
        with around(job.session.run_dir) if around is not None else contextlib.nullcontext():
            while True:
                with self._lock:
                    have = frozenset(sha for sha, path in self._index.items() if path.is_file())
                ref = _host_session.options(resources={SLOT: 1}).remote(job, files, have, frozenset(self._drained),
                                                                        self._enrolled)
                try:
                    reply = ray.get(ref)
                except ray.exceptions.RayError as exc:
                    first = (str(exc).strip().splitlines() or [""])[0][:300]
                    return SessionResult(error=f"the task was lost ({type(exc).__name__}): {first}")
                if not reply["drained"]:
                    break
                if not reply["enrolled"]:
                    self._refusing.add(reply["host"])
                if self._every_host_drained():
                    raise AllHostsDrained("every host of the Ray cluster holding a caisson_slot is drained or has"
                                          " a key this study did not enroll")
                time.sleep(0.5)
        return self._arrive(job, reply)

    def _arrive(self, job: SessionJob, reply: dict) -> SessionResult:
        from caisson.study._dispatch import SessionResult

        host, run_dir = reply["host"], Path(job.session.run_dir)
        if self._in_transit is not None:
            self._in_transit(reply)
        outcome = reply["outcome"]
        if outcome is not None:
            outcome = msgspec.structs.replace(outcome, run_dir=run_dir)
        result = SessionResult(outcome=outcome, error=reply["error"], refused=reply["refused"], host=host)
        problem = ""
        written: list[tuple[str, Path]] = []
        for rel, sha, size in reply["manifest"]:
            dest = run_dir / rel
            if Path(rel).is_absolute() or ".." in Path(rel).parts:
                problem = f"{rel}: a path outside the run directory"
                break
            data = reply["blobs"].get(sha)
            if data is None:
                with self._lock:
                    source = self._index.get(sha)
                with contextlib.suppress(OSError):
                    data = source.read_bytes() if source is not None else None
            if data is None or len(data) != size or hashlib.sha256(data).hexdigest() != sha:
                problem = f"{rel}: its bytes are not those of sha256 {sha[:16]} the host sent"
                break
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
            written.append((sha, dest))
        if problem:
            return msgspec.structs.replace(result, outcome=None, arrival=f"arrived altered: {problem}")
        with self._lock:
            self._index.update(written)
        return result

    def close(self) -> None:
        """Disconnect from (or stop) the Ray instance this executor started."""
        if self._owned and ray.is_initialized():
            ray.shutdown()
        self._owned = False
