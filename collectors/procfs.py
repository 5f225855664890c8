"""The procfs witness: the chamber's process tree and the host, sampled on a fixed grid.

- Sans-IO parsers (`parse_proc_stat_cpu`, `parse_pressure`, `parse_loadavg`,
  `parse_pid_stat_starttime`, `parse_nspid`, `parse_proc_net_tcp`, `parse_socket_link`):
  pure functions of text. Malformed text
  raises `ProcfsParseError` (a `ValueError`); a missing optional part (no ``NSpid:`` line
  before Linux 4.1, no ``full`` line in ``/proc/pressure/cpu`` before 5.13) is not an error.
- Samplers that read files: `HostSampler` (load, steal, PSI) and `sample_tree` (psutil).
- `run_procfs_witness`, the trio task that sends ``host.sample`` and ``proc.sample``.

Timer lateness, the evidence for ``host_stalled``: deadlines are ``t0 + k * interval`` on
`time.monotonic_ns`; each tick records ``wake - deadline`` (never negative: an early wake
sleeps again). Grid points that passed meanwhile are skipped, not fired in a burst, so a
stall during a sleep is one late tick and ``timer_lateness_ns // interval_ns`` ticks were
skipped. The next deadline is chosen after the tick's events are sent, so a slow ledger
writer skips ticks but never shows up as lateness. That also means a stall that lands
while a tick is being sampled or sent is no tick's lateness; a `StallClock` thread, which
only sleeps on its own grid and never waits on the writer, sees those: each
``host.sample`` carries the worst it measured since the previous one (``stall_ns``). A
stall during a sleep shows in both, on one sample or two.
"""

from __future__ import annotations

import ipaddress
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal, NamedTuple

import msgspec
import psutil
import trio

from collectors._witness import WitnessFailed, witness_life
from ledger import CaissonError, Submission
from ledger.events import HostSample, ProcSample

__all__ = [
    "PSI_RESOURCES", "TCP_STATES", "CpuTimes", "HostPids", "HostReading", "HostSampler", "LoadAvg",
    "ProcfsParseError", "TcpSocket", "parse_loadavg", "parse_nspid", "parse_nspids", "parse_pid_stat_starttime",
    "parse_pressure", "parse_proc_net_tcp", "parse_proc_stat_cpu", "parse_socket_link", "run_procfs_witness",
    "sample_tree", "StallClock", "steal_ratio",
]

WITNESS = "procfs"
PSI_RESOURCES = ("cpu", "memory", "io")
"""The ``/proc/pressure/*`` files sampled, when the kernel has them."""

_CLK_TCK = os.sysconf("SC_CLK_TCK")  # clock ticks per second of /proc/PID/stat times


class ProcfsParseError(CaissonError, ValueError):
    """Raised by a procfs parser when the text is not in the kernel's format.

    Attributes:
        source: which file the text claims to be, e.g. ``"/proc/stat"``.
        line: the offending line (or the whole text when no line is to blame).
    """

    def __init__(self, message: str, *, source: str, line: str):
        super().__init__(f"{source}: {message}: {line[:200]!r}")
        self.source = source
        self.line = line


# --- sans-IO parsers ---------------------------------------------------------------------


class CpuTimes(NamedTuple):
    """The aggregate ``cpu`` line of ``/proc/stat``, in clock ticks (USER_HZ)."""

    total: int  # user+nice+system+idle+iowait+irq+softirq+steal (guest is inside user)
    steal: int  # time stolen by the hypervisor; 0 on kernels that do not report it


def parse_proc_stat_cpu(text: str) -> CpuTimes:
    """Parse the aggregate ``cpu`` line of ``/proc/stat``.

    Args:
        text: the whole file, or just its ``cpu`` line.

    Returns:
        Total and steal times in clock ticks. ``guest`` and ``guest_nice`` are left out
        of the total: the kernel already counts them in ``user`` and ``nice``.

    Raises:
        ProcfsParseError: no ``cpu`` line, fewer than 4 fields, or a non-integer field.
    """
    for line in text.splitlines():
        if line.startswith("cpu "):
            fields = line.split()[1:9]
            if len(fields) < 4 or not all(f.isdigit() for f in fields):
                raise ProcfsParseError("bad cpu line", source="/proc/stat", line=line)
            values = [int(f) for f in fields]
            return CpuTimes(total=sum(values), steal=values[7] if len(values) > 7 else 0)
    raise ProcfsParseError("no aggregate cpu line", source="/proc/stat", line=text)


def steal_ratio(previous: CpuTimes, current: CpuTimes) -> float | None:
    """Steal delta / total delta between two readings, in [0, 1]; None if no time passed."""
    total = current.total - previous.total
    if total <= 0:
        return None
    return min(1.0, max(0.0, (current.steal - previous.steal) / total))


def parse_pressure(resource: str, text: str) -> dict[str, float]:
    """Parse one ``/proc/pressure/<resource>`` file.

    Args:
        resource: ``cpu``, ``memory`` or ``io``; the key prefix.
        text: lines like ``some avg10=0.00 avg60=0.00 avg300=0.00 total=0``.

    Returns:
        ``{"<resource>.some.avg10": percent, ..., "<resource>.some.total_us": µs}``:
        avg10/avg60/avg300 are percent of wall time stalled; ``total_us`` is the
        cumulative stall time in microseconds. A missing ``full`` line adds no keys.

    Raises:
        ProcfsParseError: an unknown line kind, a field without ``=``, or a bad number.
    """
    out: dict[str, float] = {}
    source = f"/proc/pressure/{resource}"
    for line in text.splitlines():
        if not line.strip():
            continue
        kind, *fields = line.split()
        if kind not in ("some", "full") or not fields:
            raise ProcfsParseError("bad pressure line", source=source, line=line)
        for field in fields:
            name, sep, value = field.partition("=")
            if not sep or not name:
                raise ProcfsParseError("bad pressure field", source=source, line=line)
            try:
                number = float(value)
            except ValueError:
                raise ProcfsParseError("bad pressure value", source=source, line=line) from None
            out[f"{resource}.{kind}.{'total_us' if name == 'total' else name}"] = number
    return out


class LoadAvg(NamedTuple):
    """``/proc/loadavg``: run-queue averages and the scheduling-entity counts."""

    load1: float
    load5: float
    load15: float
    runnable: int
    total: int


def parse_loadavg(text: str) -> LoadAvg:
    """Parse ``/proc/loadavg`` (``0.46 0.66 0.37 2/114 16919``).

    Raises:
        ProcfsParseError: fewer than 4 fields or a field that is not a number.
    """
    fields = text.split()
    try:
        runnable, total = fields[3].split("/")
        return LoadAvg(float(fields[0]), float(fields[1]), float(fields[2]), int(runnable), int(total))
    except (IndexError, ValueError):
        raise ProcfsParseError("bad loadavg", source="/proc/loadavg", line=text) from None


def parse_pid_stat_starttime(text: str) -> int:
    """The start time of a process, in clock ticks since boot, from ``/proc/PID/stat``.

    The command name (field 2) may contain spaces and parentheses, so fields are
    counted after the last ``)``; ``starttime`` is field 22.

    Raises:
        ProcfsParseError: no ``)`` or too few fields, or a non-integer start time.
    """
    _, paren, rest = text.rpartition(")")
    fields = rest.split()
    if not paren or len(fields) < 20 or not fields[19].isdigit():
        raise ProcfsParseError("bad stat", source="/proc/PID/stat", line=text)
    return int(fields[19])


def parse_nspids(text: str) -> list[int]:
    """The process's pid in each pid namespace it is in, outermost first (the reader's),
    from the ``NSpid:`` line of ``/proc/PID/status``; ``[]`` when there is none (Linux < 4.1).

    Raises:
        ProcfsParseError: an ``NSpid:`` line without numbers, or with a word that is not one.
    """
    for line in text.splitlines():
        if line.startswith("NSpid:"):
            fields = line[6:].split()
            if not fields or not all(f.isdigit() for f in fields):
                raise ProcfsParseError("bad NSpid line", source="/proc/PID/status", line=line)
            return [int(f) for f in fields]
    return []


def parse_nspid(text: str) -> int | None:
    """The pid in the innermost pid namespace, from ``/proc/PID/status``: the last number
    of its ``NSpid:`` line, or None when there is none (Linux < 4.1).

    Raises:
        ProcfsParseError: as `parse_nspids`.
    """
    pids = parse_nspids(text)
    return pids[-1] if pids else None


TCP_STATES = {1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV", 4: "FIN_WAIT1", 5: "FIN_WAIT2", 6: "TIME_WAIT",
              7: "CLOSE", 8: "CLOSE_WAIT", 9: "LAST_ACK", 10: "LISTEN", 11: "CLOSING", 12: "NEW_SYN_RECV"}
"""The ``st`` column of ``/proc/net/tcp``: the kernel's TCP states (include/net/tcp_states.h)."""


_TCP_ADDRESS = re.compile(r"[0-9A-Fa-f]{8}(?:[0-9A-Fa-f]{24})?:[0-9A-Fa-f]{4}")
_TCP_SLOT = re.compile(r"[0-9]+:")
_TCP_STATE = re.compile(r"[0-9A-Fa-f]{2}")
_DECIMAL = re.compile(r"[0-9]+")
_SOCKET_LINK = re.compile(r"socket:\[([0-9]+)\]")


class TcpSocket(NamedTuple):
    """One line of ``/proc/net/tcp`` or ``/proc/net/tcp6``."""

    local: tuple[str, int]  # (address, port); an IPv4-mapped IPv6 address as its IPv4 form
    remote: tuple[str, int]
    state: int  # `TCP_STATES`
    uid: int
    inode: int  # the socket's inode (``socket:[N]`` in /proc/PID/fd); 0 when no file holds it


def _tcp_address(text: str, byteorder: Literal["little", "big"]) -> tuple[str, int]:
    """``0100007F:0CEA`` -> ("127.0.0.1", 3306); the address words as the kernel prints
    them (``%08X`` of each 32-bit word in host order), the port big-endian hex."""
    if _TCP_ADDRESS.fullmatch(text) is None:
        raise ValueError(text)
    address, _, port = text.partition(":")
    raw = b"".join(int(address[i:i + 8], 16).to_bytes(4, byteorder) for i in range(0, len(address), 8))
    ip = ipaddress.ip_address(raw)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip), int(port, 16)


def parse_proc_net_tcp(text: str, *, byteorder: Literal["little", "big"] = sys.byteorder) -> list[TcpSocket]:
    """Parse ``/proc/net/tcp`` or ``/proc/net/tcp6`` (the kernel's ``get_tcp4_sock`` and
    ``get_tcp6_sock``, net/ipv4/tcp_ipv4.c and net/ipv6/tcp_ipv6.c, the same columns since
    Linux 2.6): ``sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt
    uid timeout inode ...``. Time-wait and request sockets have inode 0.

    Args:
        text: the whole file; its header line is skipped, blank lines too.
        byteorder: the byte order of the kernel that printed it (``"little"`` on x86 and
            arm64): addresses are printed as host-order 32-bit words.

    Raises:
        ProcfsParseError: a line with fewer than 10 fields, or a field not in its format.
    """
    sockets = []
    for line in text.splitlines():
        fields = line.split()
        if not fields or fields[0] == "sl":
            continue
        try:
            if (len(fields) < 10 or _TCP_SLOT.fullmatch(fields[0]) is None or _TCP_STATE.fullmatch(fields[3]) is None
                    or not _DECIMAL.fullmatch(fields[7]) or not _DECIMAL.fullmatch(fields[9])):
                raise ValueError(line)
            sockets.append(TcpSocket(local=_tcp_address(fields[1], byteorder),
                                     remote=_tcp_address(fields[2], byteorder), state=int(fields[3], 16),
                                     uid=int(fields[7]), inode=int(fields[9])))
        except ValueError:
            raise ProcfsParseError("bad socket line", source="/proc/net/tcp", line=line) from None
    return sockets


def parse_socket_link(text: str) -> int | None:
    """The inode of a socket from a ``/proc/PID/fd/N`` link (``socket:[12345]``), or None
    for any other link (a file, a pipe, ``anon_inode:...``)."""
    found = _SOCKET_LINK.fullmatch(text)
    return int(found[1]) if found else None


# --- samplers (file IO, no trio) ---------------------------------------------------------


class HostReading(NamedTuple):
    """One host reading: load, steal ratio over the last interval, PSI (see `HostSample`)."""

    load1: float
    cpu_steal_ratio: float | None
    psi: dict[str, float]


class HostSampler:
    """Reads the host's load, CPU steal and PSI; keeps the last ``/proc/stat`` reading.

    Args:
        proc_root: where procfs is mounted (tests point it at a fake tree).

    Attributes:
        parse_failures: how many files did not parse (their values are left out).
        bytes_read: bytes of procfs text read so far.
    """

    def __init__(self, proc_root: str | os.PathLike[str] = "/proc"):
        self._root = Path(proc_root)
        self._previous: CpuTimes | None = None
        self.parse_failures = 0
        self.bytes_read = 0

    def _read(self, name: str) -> str | None:
        try:
            text = (self._root / name).read_text()
        except OSError:  # absent, or EOPNOTSUPP when PSI is compiled in but disabled
            return None
        self.bytes_read += len(text)
        return text

    def sample(self) -> HostReading:
        """Read the host once. The first steal ratio is None (no previous reading)."""
        load1, ratio, psi = 0.0, None, {}
        if (text := self._read("loadavg")) is not None:
            try:
                load1 = parse_loadavg(text).load1
            except ProcfsParseError:
                self.parse_failures += 1
        if (text := self._read("stat")) is not None:
            try:
                current = parse_proc_stat_cpu(text)
            except ProcfsParseError:
                self.parse_failures += 1
            else:
                if self._previous is not None:
                    ratio = steal_ratio(self._previous, current)
                self._previous = current
        for resource in PSI_RESOURCES:
            if (text := self._read(f"pressure/{resource}")) is not None:
                try:
                    psi.update(parse_pressure(resource, text))
                except ProcfsParseError:
                    self.parse_failures += 1
        return HostReading(load1=load1, cpu_steal_ratio=ratio, psi=psi)


class HostPids:
    """Finds the host pid of a process of the chamber from its pid there (``NSpid``).

    A callable ``chamber pid -> host pid | None`` for `collectors.strace.StraceParser`
    (``host_pid=``). A host process is the chamber's process N when it lives in the
    chamber's pid namespace (the ``/proc/PID/ns/pid`` link of its init) and the last
    number of its ``NSpid`` line is N: an exact test, at the moment it is made.

    Speed is what makes it reliable: a short-lived process is reaped within milliseconds,
    and a process that is gone cannot be found any more (it maps to None). So a lookup
    does not walk the host's process table (psutil's tree walk reads every process's
    ``stat``): it checks the host pids that appeared in ``/proc`` since the last lookup
    (one ``readlink`` each; the other namespaces' pids are remembered), and only when
    that fails, every pid once more. A known mapping is checked before it is returned,
    so a chamber pid reused by a new process never gets the old process's host pid.

    Args:
        init_host_pid: the chamber's init as a host pid.
        proc_root: where procfs is mounted.

    Attributes:
        scans: how many times ``/proc`` was listed.
    """

    def __init__(self, init_host_pid: int, *, proc_root: str | os.PathLike[str] = "/proc"):
        self._proc = Path(proc_root)
        self._namespace = self._ns(init_host_pid)
        self._known: dict[int, int] = {}  # chamber pid -> host pid
        self._foreign: set[int] = set()  # host pids outside the chamber's namespace, as last seen
        self.scans = 0

    def __call__(self, chamber_pid: int) -> int | None:
        """The host pid of ``chamber_pid``, or None when no live process of the chamber has it."""
        host = self._known.get(chamber_pid)
        if host is not None and self._is(host, chamber_pid):
            return host
        if self._namespace is None:
            return None
        for full in (False, True):  # the new pids first; then all, a foreign pid may have been reused
            self._scan(full=full)
            host = self._known.get(chamber_pid)
            if host is not None and self._is(host, chamber_pid):
                return host
        return None

    def resolve(self, chamber_pids: set[int]) -> dict[int, int]:
        """The host pids of those of ``chamber_pids`` that live now: the known ones checked,
        the others looked up in one listing of the pids new in ``/proc``.

        For `collectors.strace.run_strace_witness`: the pids a chunk of trace names, as
        it arrives. Pids of no live process of the chamber are left out.
        """
        found = {pid: self._known[pid] for pid in chamber_pids
                 if pid in self._known and self._is(self._known[pid], pid)}
        if len(found) < len(chamber_pids) and self._namespace is not None:
            self._scan(full=False)
            found.update((pid, self._known[pid]) for pid in chamber_pids - found.keys()
                         if pid in self._known and self._is(self._known[pid], pid))
        return found

    def members(self) -> dict[int, int]:
        """The chamber's processes in one listing of ``/proc`` (the pids new in it checked,
        as `resolve` does): host pid -> chamber pid. A known process whose host pid left the
        listing is forgotten; one whose host pid was reused outside the chamber since it was
        checked may still be listed (a caller that acts on one checks it with `identify`)."""
        if self._namespace is None:
            return {}
        listed = self._scan(full=False)
        return {host: chamber for chamber, host in self._known.items() if host in listed}

    def identify(self, host_pid: int) -> int | None:
        """The chamber pid of host process ``host_pid`` now, or None when it is not the
        chamber's (another namespace, gone)."""
        if self._namespace is None or self._ns(host_pid) != self._namespace:
            return None
        return self._nspid(host_pid)

    def _ns(self, host_pid: int) -> str | None:
        try:
            return os.readlink(self._proc / str(host_pid) / "ns" / "pid")
        except OSError:
            return None

    def _nspid(self, host_pid: int) -> int | None:
        try:
            return parse_nspid((self._proc / str(host_pid) / "status").read_text())
        except (OSError, ProcfsParseError):
            return None

    def _is(self, host_pid: int, chamber_pid: int) -> bool:
        return self._ns(host_pid) == self._namespace and self._nspid(host_pid) == chamber_pid

    def _scan(self, *, full: bool) -> set[int]:
        """Classify the host pids new in ``/proc`` (every one with ``full``); returns those listed."""
        self.scans += 1
        if full:
            self._foreign.clear()
        try:
            names = os.listdir(self._proc)
        except OSError:
            return set()
        listed = {int(name) for name in names if name.isdigit()}
        self._foreign &= listed
        for chamber in [c for c, h in self._known.items() if h not in listed]:
            del self._known[chamber]
        mapped = set(self._known.values())
        for name in names:
            if not name.isdigit() or int(name) in self._foreign or (int(name) in mapped and not full):
                continue
            host = int(name)
            if self._ns(host) != self._namespace:
                self._foreign.add(host)
                continue
            nspid = self._nspid(host)
            if nspid is not None:
                self._known[nspid] = host
        return listed


def sample_tree(root_host_pid: int, *, failures: list[ProcfsParseError] | None = None) -> list[ProcSample]:
    """Sample a process and all its descendants.

    Args:
        root_host_pid: the tree's root, as a pid on the host (psutil's pid).
        failures: when given, collects the parse errors of skipped processes.

    Returns:
        One `ProcSample` per live process, root first. ``pid`` is the pid in the root's
        namespace (its ``NSpid`` number at the root's depth, so a process in a nested
        namespace keeps the name the chamber gives it; the host pid when the kernel has no
        ``NSpid``),
        ``ppid`` is the parent's pid in the same namespace (None for the root, whose
        parent is outside the tree), ``start_time_ns`` is ``/proc/PID/stat`` starttime converted from clock ticks to
        ns since boot (exact integer arithmetic, stable across samples, unlike psutil's
        float epoch ``create_time``), ``cpu_ns`` is user + system CPU time and
        ``rss_bytes`` the resident set size. Processes that vanish or deny access
        mid-sample are skipped; a vanished root gives ``[]``.
    """
    try:
        root = psutil.Process(root_host_pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return []
    samples = []
    parents: dict[int, int] = {}  # host pid -> host ppid, of the processes sampled
    level: list[int] = []  # the root's depth of pid namespaces: its pids name the tree's processes
    for proc in processes:
        try:
            sample, parents[proc.pid] = _sample_process(proc, level)
            samples.append(sample)
        except (psutil.Error, OSError):
            continue  # gone (ENOENT/ESRCH), zombie or not ours
        except ProcfsParseError as exc:
            if failures is not None:
                failures.append(exc)
    chamber = {s.host_pid: s.pid for s in samples}  # the root's parent is outside the tree: None
    return [msgspec.structs.replace(s, ppid=None if s.host_pid is None else chamber.get(parents[s.host_pid]))
            for s in samples]


def _sample_process(proc: psutil.Process, level: list[int]) -> tuple[ProcSample, int]:
    """One process's sample (its ``ppid`` not yet known) and its parent's host pid.

    ``level`` holds the depth of the root's pid namespace once the root is sampled (the
    first call); a process in a namespace nested below it (``unshare -pf``, bubblewrap) is
    named by its pid at that depth, as the syscall witnesses name it, not its innermost."""
    host_pid = proc.pid
    starttime = parse_pid_stat_starttime(Path(f"/proc/{host_pid}/stat").read_text())
    nspids = parse_nspids(Path(f"/proc/{host_pid}/status").read_text())
    if not level:
        level.append(len(nspids))
    nspid = nspids[min(level[0], len(nspids)) - 1] if nspids else None
    with proc.oneshot():
        name = proc.name()
        cpu = proc.cpu_times()
        rss = proc.memory_info().rss
        ppid = proc.ppid()
    return ProcSample(pid=host_pid if nspid is None else nspid, host_pid=host_pid,
                      start_time_ns=starttime * 1_000_000_000 // _CLK_TCK, name=name,
                      cpu_ns=round((cpu.user + cpu.system) * 1e9), rss_bytes=rss), ppid


# --- the trio task -----------------------------------------------------------------------


class StallClock:
    """A thread that does nothing but wake on a grid of ``period_ns`` (`time.monotonic_ns`)
    and keep the worst lateness of its wake-ups: how long this process was kept from
    running (stopped, or starved of CPU), whatever its trio thread was doing meanwhile.

    A context manager: the thread runs inside ``with``; `take_worst` returns the worst
    lateness in ns since its previous call (0 when every wake was on time) and resets it.
    A wake overdue when it is asked (the thread has not run since the process was
    continued) counts as late by then, and is not counted again when the thread wakes.
    Its wakes are independent of the ledger writer, so backpressure never shows here.

    Raises:
        ValueError: ``period_ns`` is not positive (our misuse).
    """

    def __init__(self, period_ns: int = 50_000_000) -> None:
        if period_ns <= 0:
            raise ValueError(f"period_ns must be positive, got {period_ns!r}")
        self._period_ns = period_ns
        self._worst_ns = 0
        self._deadline_ns = time.monotonic_ns() + period_ns  # the wake the thread is waiting for
        self._reported_ns: int | None = None  # a deadline take_worst counted as overdue
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="procfs-stall-clock", daemon=True)

    def __enter__(self) -> StallClock:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def take_worst(self) -> int:
        """The worst wake-up lateness since the last call, ns (an overdue wake included);
        resets it to 0."""
        now = time.monotonic_ns()
        with self._lock:
            worst, self._worst_ns = self._worst_ns, 0
            if now > self._deadline_ns and self._reported_ns != self._deadline_ns:
                worst = max(worst, now - self._deadline_ns)
                self._reported_ns = self._deadline_ns
        return worst

    def _run(self) -> None:
        while True:
            with self._lock:
                deadline = self._deadline_ns
            if self._stop.wait(max(0, deadline - time.monotonic_ns()) / 1e9):
                return
            now = time.monotonic_ns()
            with self._lock:
                if now > deadline and self._reported_ns != deadline:
                    self._worst_ns = max(self._worst_ns, now - deadline)
                self._deadline_ns = _next_deadline(deadline, self._period_ns, now)


async def run_procfs_witness(
    send_channel: trio.MemorySendChannel[Submission],
    *,
    root_host_pid: Callable[[], int | None] | int | None = None,
    interval_s: float = 0.25,
    proc_root: str | os.PathLike[str] = "/proc",
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Sample the host and the chamber's tree every ``interval_s`` until cancelled.

    Sends ``witness.started``, then per tick one ``host.sample`` (stamped at the wake-up,
    where lateness is measured; ``stall_ns`` from a `StallClock` running beside the task)
    and one ``proc.sample`` per process (stamped when the tree was read, in a worker
    thread: a slow ``/proc`` cannot hide a stall).

    Ends as `collectors._witness.witness_life` says: cancelled, ``witness.stopped``
    (``lines``: ticks, ``bytes``: host procfs text read); if sampling raises,
    ``witness.gap`` since the tick and a return: the run goes on, void.

    Args:
        send_channel: where submissions go; closed when this task ends, so pass a clone.
        root_host_pid: the tree's root as a host pid; a callable is asked at every tick
            (the chamber may start later); None samples the host only.
        interval_s: the sampling interval, seconds (default 0.25).
        proc_root: where procfs is mounted, for the host files.
        task_status: started once ``witness.started`` is sent.

    Raises:
        ValueError: ``interval_s`` is not positive (our misuse).
    """
    interval_ns = int(interval_s * 1e9)
    if interval_ns <= 0:
        raise ValueError(f"interval_s must be positive, got {interval_s!r}")
    sampler = HostSampler(proc_root)
    failures: list[ProcfsParseError] = []
    with StallClock() as clock:
        async with witness_life(send_channel, WITNESS, missing="host.sample, proc.sample") as w:
            await w.started({"interval_ns": interval_ns})
            task_status.started()
            deadline = time.monotonic_ns()
            while True:
                woke = await _sleep_until_ns(deadline)
                wall = w.now()[0]
                try:
                    pid = root_host_pid() if callable(root_host_pid) else root_host_pid
                    host, procs, (proc_wall, proc_mono) = await trio.to_thread.run_sync(
                        _sample, sampler, failures, pid, w.now)
                except Exception as exc:
                    raise WitnessFailed(f"sampling failed: {exc!r}", since_ns=wall) from exc
                w.parse_failures, w.bytes = sampler.parse_failures + len(failures), sampler.bytes_read
                await w.send(HostSample(load1=host.load1, cpu_steal_ratio=host.cpu_steal_ratio, psi=host.psi,
                                        timer_lateness_ns=woke - deadline, stall_ns=clock.take_worst(),
                                        interval_ns=interval_ns),
                             wall_ns=wall, mono_ns=woke)
                w.lines += 1  # a tick whose host.sample was sent (not one cancelled while sending it)
                for proc in procs:
                    await w.send(proc, wall_ns=proc_wall, mono_ns=proc_mono)
                deadline = _next_deadline(deadline, interval_ns, time.monotonic_ns())


def _sample(sampler: HostSampler, failures: list[ProcfsParseError], pid: int | None,
            now: Callable[[], tuple[int, int]]) -> tuple[HostReading, list[ProcSample], tuple[int, int]]:
    """One tick's reading, in a worker thread: the host, the tree of ``pid`` (none when
    None; parse failures appended to ``failures``) and the (wall, mono) clock after both."""
    host = sampler.sample()
    return host, ([] if pid is None else sample_tree(pid, failures=failures)), now()


async def _sleep_until_ns(deadline_ns: int) -> int:
    """Sleep until `time.monotonic_ns` reaches ``deadline_ns``; returns the wake time, ns."""
    while True:
        now = time.monotonic_ns()
        if now >= deadline_ns:
            return now
        await trio.sleep((deadline_ns - now) / 1e9)


def _next_deadline(deadline_ns: int, interval_ns: int, now_ns: int) -> int:
    """The first grid point after ``now_ns``: late ticks are skipped, never bunched."""
    return deadline_ns + ((now_ns - deadline_ns) // interval_ns + 1) * interval_ns


