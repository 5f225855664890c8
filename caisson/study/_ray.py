"""The ``ray`` executor: each session of a study is recorded on a Docker host of a Ray cluster.

Imported only for ``caisson study run --executor ray``: ``caisson`` never touches Ray
otherwise. The protocol (docs/studies.md, "Executors"):

- A host joins with ``ray start --address ... --resources '{"caisson_slot": K}'``. Each
  host holding slots runs one caisson service (`caisson.study._rayhost.HostService`): a
  detached Ray actor pinned to it, holding its K slots, recording at most K sessions at
  once. The first study that finds a host without one starts it; it outlives the study,
  so the next study neither waits for a worker process per host nor for it to import the
  recorder. At the start of a study the driver finds (or starts) every host's service and
  asks it to join: the host reaps orphaned chambers (`caisson.chamber._reap`) and reports
  its label, its public key (its caisson home's operator key), the tag of its chamber
  recipe, which must be the driver's (the same recipes; the image digests themselves
  differ between hosts, builds are not reproducible, and each run records its own), and
  whether the service still runs the host's installed caisson: else it retires (admits
  nothing, finishes its sessions, killed once idle, never while it records) and a service
  of the next generation serves the host beside it. A join is waited for at most
  `JOIN_TIMEOUT_S`; it runs in the service's own concurrency group, never behind sessions.
- A session goes to the enrolled, undrained host with the most free slots of this study's
  (a service whose slots other studies' sessions hold answers "full" at once, and the
  driver tries another host; a host whose key the study did not enroll, or a drained one,
  gets none; a host that joins the cluster later joins the study when it is next looked
  for, at most every `REFRESH_S`). Ray retries nothing: caisson owns retries. The service records into a
  scratch directory on its host, signs with the host's key, and returns the run directory
  content-addressed: a manifest (path, sha256, size) of every file and the bytes of only
  those blobs whose sha256 the driver said it already has not (``have``). The driver
  rebuilds the run directory from the reply and its own copies, checking every file's
  sha256 against the manifest; the runner then verifies the run against the enrolled key
  before ``cell.ended`` binds it.
- A session that fails in Ray (its node lost, the service's process killed, the reply
  gone) is an infra failure of that attempt, which the runner retries within
  ``--infra-retries``, on another host: a host whose service died takes no session until
  a new service has joined.
- Token authentication: with ``--address``, ``RAY_AUTH_MODE`` is ``token`` (set when
  unset; ``disabled`` is refused), so the driver presents the cluster's token
  (``RAY_AUTH_TOKEN`` or ``~/.ray/auth_token``) and fails without one; the nodes are
  started with ``RAY_AUTH_MODE=token`` so the cluster demands it (README). A service is an
  actor of that cluster: reached only through it, with its token.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
import ray

from caisson.errors import AllHostsDrained, UsageError
from caisson.study._rayhost import NAMESPACE, SLOT, service_generations, service_name, start_service
from ledger.events import HostKey

if TYPE_CHECKING:
    from caisson.study._dispatch import SessionJob, SessionResult

# The recorder (`caisson.study._dispatch`: SessionJob, SessionResult, run_session_here) is
# imported where it is used, not here: the driver connects to the cluster and asks every
# host's service to join first, and imports it while the hosts reap (docs/studies.md).

__all__ = ["FULL_BACKOFF_S", "JOIN_TIMEOUT_S", "LOST_WAIT_S", "REFRESH_S", "SLOT", "RayExecutor"]

REFRESH_S = 2.0
"""Seconds between two looks at the cluster's nodes (hosts lost, hosts joined)."""
JOIN_TIMEOUT_S = 120.0
"""Seconds a host's service has to answer a join (start, import the recorder, reap)."""
LOST_WAIT_S = 300.0
"""Seconds a session waits for a host while every host holding a slot is lost."""
FULL_BACKOFF_S = 1.0
"""Seconds a host that answered "full" (its slots taken by other studies) is passed over."""


class _Host(msgspec.Struct, kw_only=True):
    """One host of this study, as the driver tracks it."""

    node_id: str
    service: ray.actor.ActorHandle
    slots: int
    label: str = ""
    key: bytes = b""
    tag: str = ""
    generation: int = 0  # of its service (`caisson.study._rayhost.service_name`)
    busy: int = 0  # this study's sessions on it now
    lost: bool = False  # its service died (or its node): no session until a new one joins
    full_until: float = 0.0  # monotonic s: its service answered "full" (other studies' sessions)


class RayExecutor:
    """Sessions recorded by the caisson services of a Ray cluster's hosts (see the module docstring).

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
        self._enrolled: frozenset[bytes] = frozenset()
        self._index: dict[str, Path] = {}  # sha256 -> a file on the driver with those bytes
        self._lock = threading.Lock()
        self._free = threading.Condition()  # guards the hosts; notified when a slot frees or hosts change
        self._hosts: dict[str, _Host] = {}  # node id -> host, once joined; never replaced (it counts `busy`)
        self._joining_lock = threading.Lock()  # `joined` is computed once, by one thread
        self._refreshing = threading.Lock()  # one thread looks at the cluster at a time
        self._ours = ""  # the driver's image recipe tags, once the hosts joined
        if self.slots() < 1:
            self.close()
            raise UsageError(f"no host of the Ray cluster holds a {SLOT}: join one with ray start --address ..."
                             f" --resources '{{\"{SLOT}\": K}}'")
        # every host's service joins (reaps, reports its key) while the driver plans; `joined` waits
        named = ray.util.list_named_actors(all_namespaces=True)
        self._joining = {n["NodeID"]: self._join(n["NodeID"], int(n["Resources"][SLOT]), named=named)
                         for n in self._slot_nodes()}
        self._refreshed = time.monotonic()
        self._joined: list[tuple[str, bytes, int, str]] | None = None

    @staticmethod
    def _join(node_id: str, slots: int, generation: int | None = None,
              named: list[dict] | None = None) -> tuple[_Host, ray.ObjectRef]:
        """Find or start the service of ``node_id`` (of ``generation``; None: the newest) and
        ask it to join: (host, its join reply). Older generations still living are retired,
        and killed if idle. ``named``: the cluster's named actors, when the caller has them."""
        living = service_generations(node_id, named) if generation is None else []
        if generation is None:
            generation = living[-1] if living else 0
        older = [g for g in living if g < generation]
        service, generation = start_service(node_id, slots, generation)
        for old in older:
            _retire(node_id, old)
        return _Host(node_id=node_id, service=service, slots=slots, generation=generation), service.join.remote()

    def _settle(self, host: _Host, ref: ray.ObjectRef, reaped: list[int], *, strict: bool) -> _Host | None:
        """A join's reply (waited for at most `JOIN_TIMEOUT_S`): the host, joined (a stale
        service replaced by the next generation, and retired: it finishes its sessions and is
        killed once idle, never while it records); None if it is lost, or (not ``strict``)
        failed to join. Called without ``_free`` held.

        Raises:
            UsageError: ``strict``, and the host failed to join (its Docker engine down, say)
                or did not answer within `JOIN_TIMEOUT_S`.
        """
        try:
            label, key, n, tag, current = ray.get(ref, timeout=JOIN_TIMEOUT_S)
            if not current:  # the host's caisson changed since its service started: a new one beside it
                old = host
                newest = max([old.generation + 1, *service_generations(old.node_id)])  # another study's, maybe
                host, ref = self._join(host.node_id, host.slots, newest)
                _retire(old.node_id, old.generation)
                label, key, n, tag, current = ray.get(ref, timeout=JOIN_TIMEOUT_S)
                if not current:  # changing under our feet: not this study's host
                    return None
        except ray.exceptions.GetTimeoutError:
            if strict:
                raise UsageError(f"the host of Ray node {host.node_id[:12]} did not answer its join within"
                                 f" {JOIN_TIMEOUT_S:.0f} s (its service still starting, or its Docker engine"
                                 " hung); ray status, then docker ps on that host") from None
            return None
        except ray.exceptions.RayTaskError as exc:
            if strict:
                first = (str(exc).strip().splitlines() or [""])[-1][:300]
                raise UsageError(f"the host of Ray node {host.node_id[:12]} failed to join: {first}") from None
            return None
        except ray.exceptions.RayError:  # its node or service lost
            return None
        reaped.append(n)
        return msgspec.structs.replace(host, label=label, key=key, tag=tag)

    def _adopt(self, joined: _Host) -> None:
        """Record a joined host (the caller holds ``_free``): a host already tracked is updated
        in place, never replaced, so that the slots taken on it stay counted."""
        known = self._hosts.get(joined.node_id)
        if known is None:
            self._hosts[joined.node_id] = joined
            return
        for field in ("service", "generation", "slots", "label", "key", "tag"):
            setattr(known, field, getattr(joined, field))
        known.lost, known.full_until = False, 0.0

    @property
    def joined(self) -> list[tuple[str, bytes, int, str]]:
        """(host, raw public key, orphaned chambers reaped, image recipe tags) of every host
        holding a slot at the start (lost ones aside); computed once, by the first thread
        that asks (the others wait for it).

        Raises:
            UsageError: a host builds its chamber or agent image from other recipes than this
                checkout's (another caisson version: its cells would not be the study's); a host failed
                to join, or did not answer within `JOIN_TIMEOUT_S`.
        """
        with self._joining_lock:
            if self._joined is None:
                from caisson.chamber import recipe_tags

                self._ours = recipe_tags()
                joined, reaped = [], []
                for host, ref in self._joining.values():
                    host = self._settle(host, ref, reaped, strict=True)
                    if host is not None:
                        joined.append(host)
                other = [f"{h.label} ({h.tag})" for h in joined if h.tag != self._ours]
                if other:
                    raise UsageError(f"hosts whose image recipes are not this checkout's ({self._ours}):"
                                     f" {', '.join(other)}; set them up from the same caisson checkout (make setup)")
                with self._free:
                    for h in joined:
                        self._adopt(h)
                    self._joining = {}
                self._joined = [(h.label, h.key, n, h.tag) for h, n in zip(joined, reaped, strict=True)]
            return self._joined

    def _slot_nodes(self) -> list[dict]:
        return [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get(SLOT, 0) > 0]

    def slots(self) -> int:
        """The ``caisson_slot`` total of the cluster now (hosts may join or leave)."""
        return int(ray.cluster_resources().get(SLOT, 0))

    def host_keys(self) -> list[HostKey]:
        """The enrolled key files' keys, else those the hosts reported when they joined (the
        hosts have joined either way: reaped, their recipes checked).

        Raises:
            UsageError: as `joined`. KeyFileError: an enrolled file is not a public key.
        """
        joined = self.joined
        if self._enroll_files:
            from caisson.home import trusted_key

            return [HostKey(host=f"enrolled:{p.name}", public_key=trusted_key(p).raw.hex()) for p in self._enroll_files]
        return [HostKey(host=host, public_key=raw.hex()) for host, raw, _, _ in joined]

    def enroll(self, host_keys: list[HostKey]) -> None:
        """Run sessions only on hosts whose key is one of ``host_keys`` (the study's)."""
        self._enrolled = frozenset(bytes.fromhex(k.public_key) for k in host_keys)

    def drain(self, host: str) -> None:
        """Give ``host`` no further session."""
        with self._free:
            self._drained.add(host)

    def _refresh(self) -> None:
        """Look at the cluster (at most every `REFRESH_S`, one thread at a time; the caller
        does not hold ``_free``, taken here only to read and update the hosts, never across
        a Ray call): hosts whose node is gone are lost; a node holding slots without a joined
        service joins."""
        if time.monotonic() - self._refreshed < REFRESH_S or not self._refreshing.acquire(blocking=False):
            return
        try:
            alive = {n["NodeID"]: int(n["Resources"][SLOT]) for n in self._slot_nodes()}
            with self._free:
                for node_id, host in self._hosts.items():
                    if node_id not in alive:
                        host.lost = True
                joining = list(self._joining.items())
            for node_id, (host, ref) in joining:
                ready, _ = ray.wait([ref], timeout=0)
                if ready or node_id not in alive:
                    settled = self._settle(host, ref, [], strict=False) if ready else None
                    with self._free:
                        del self._joining[node_id]
                        if settled is not None:  # one of another checkout's recipes is kept, never used
                            self._adopt(settled)
            with self._free:  # a lost service's sessions settle first
                rejoin = [(node_id, slots) for node_id, slots in alive.items() if node_id not in self._joining
                          and ((known := self._hosts.get(node_id)) is None or (known.lost and known.busy == 0))]
            for node_id, slots in rejoin:
                started = self._join(node_id, slots)
                with self._free:
                    self._joining[node_id] = started
            with self._free:
                self._free.notify_all()
        finally:
            self._refreshed = time.monotonic()
            self._refreshing.release()

    def _take(self) -> _Host:
        """A host with a free slot of this study (waits for one), its slot taken.

        Raises:
            AllHostsDrained: every host holding a slot is drained, has a key the study did
                not enroll, or builds its chamber from other recipes (it joined later); or
                every host has been lost for `LOST_WAIT_S` (named).
        """
        self.joined  # noqa: B018  (the hosts of the start, joined: a resumed study asks no keys)
        lost_since = None
        while True:
            self._refresh()
            with self._free:
                now = time.monotonic()
                usable = [h for h in self._hosts.values() if not h.lost and h.label not in self._drained
                          and h.key in self._enrolled and h.tag == self._ours]
                free = [h for h in usable if h.busy < h.slots and h.full_until <= now]
                if free:
                    host = max(free, key=lambda h: h.slots - h.busy)
                    host.busy += 1
                    return host
                if not usable and any(not h.lost for h in self._hosts.values()):
                    raise AllHostsDrained("every host of the Ray cluster holding a caisson_slot is drained, has"
                                          " a key this study did not enroll or another checkout's recipes")
                if usable:
                    lost_since = None
                elif lost_since is None:
                    lost_since = now
                elif now - lost_since > LOST_WAIT_S:
                    names = ", ".join(sorted(h.label for h in self._hosts.values())) or "none joined"
                    raise AllHostsDrained(f"no host of the Ray cluster came back within {LOST_WAIT_S:.0f} s: every"
                                          f" one is lost ({names}); ray status, then resume the study")
                # every host busy or full, or none left (lost): wait for a slot, or for a host to join
                self._free.wait(FULL_BACKOFF_S if usable else REFRESH_S)

    def run(self, job: SessionJob, around=None) -> SessionResult:
        """Record ``job`` on a host; its run directory at ``job.session.run_dir`` when it arrived.
        A host whose service answers "full" (its slots taken by other studies' sessions) is
        passed over for `FULL_BACKOFF_S`; one that answers "retired" (older than its host's
        checkout) rejoins, as its next generation, before it takes another session.

        Raises:
            AllHostsDrained: every host holding a slot is drained (or lost, see `_take`).
        """
        from caisson.study._dispatch import SessionResult

        files = {"scenario": Path(job.session.scenario).read_bytes()}
        script = job.combo.endpoint.script
        if script and not job.session.baseline and job.session.model_script is None:
            files["model_script"] = Path(script.replace("{question}", job.session.question_id)).read_bytes()
        with around(job.session.run_dir) if around is not None else contextlib.nullcontext():
            while True:
                host = self._take()
                try:
                    with self._lock:
                        have = frozenset(sha for sha, path in self._index.items() if path.is_file())
                    reply = ray.get(host.service.session.remote(job, files, have))
                except ray.exceptions.RayTaskError as exc:  # the service raised: a bug of caisson's, on this host
                    last = (str(exc).strip().splitlines() or [""])[-1][:300]
                    return SessionResult(error=f"the session failed on {host.label}: {last}", host=host.label)
                except ray.exceptions.RayError as exc:
                    if _retired_and_killed(host, exc):  # nothing ran there: place it again
                        host.lost = True
                        continue
                    first = (str(exc).strip().splitlines() or [""])[0][:300]
                    if isinstance(exc, ray.exceptions.RayActorError):
                        host.lost = True  # its service (or node) died: a new one joins before it records again
                    return SessionResult(error=f"the session was lost on {host.label} ({type(exc).__name__}):"
                                         f" {first}", host=host.label)
                finally:
                    with self._free:
                        host.busy -= 1
                        self._free.notify_all()
                if not reply.get("full"):
                    return self._arrive(job, reply)
                with self._free:  # nothing ran: place it again
                    if reply.get("retired"):
                        host.lost = True
                    else:
                        host.full_until = time.monotonic() + FULL_BACKOFF_S

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


def _retire(node_id: str, generation: int) -> None:
    """Retire the service of ``node_id`` of ``generation`` (it admits no further session)
    and kill it if it records none; one that does is killed by a later join once idle."""
    try:
        service = ray.get_actor(service_name(node_id, generation), namespace=NAMESPACE)
        if ray.get(service.retire.remote(), timeout=10) == 0:
            ray.kill(service, no_restart=True)
    except (ValueError, ray.exceptions.RayError):  # gone already, or not answering: a later join retries
        pass


def _retired_and_killed(host: _Host, exc: ray.exceptions.RayError) -> bool:
    """Whether ``exc`` says ``host``'s service was killed by ``ray.kill`` after another
    study's join retired it (a newer generation lives): a retired service admits no session
    and is killed only when idle, so the session sent to it never started."""
    return (isinstance(exc, ray.exceptions.RayActorError) and "killed by `ray.kill`" in str(exc)
            and any(g > host.generation for g in service_generations(host.node_id)))
