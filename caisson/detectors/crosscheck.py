"""Two syscall witnesses cross-checked: a fact one saw and the other did not is a finding.

With ``caisson record --syscall-witness both`` the strace witness (``strace``) and the eBPF
witness (``ebpf``) watch the same command. Each successful file open and each successful
exec one of them recorded should be in the other's record too (issue #20: "a file opened
or a process exec'd in one witness and absent in the other is a finding"). A fact missing
from one witness means that witness missed evidence: the cell is void, as for a
``witness.gap``.

Matching: a fact is ``(kind, syscall, path)`` with ``kind`` ``open`` or ``exec`` (an exec's
syscall is ``execve``: `ProcessExec` does not say which); an open whose witness gave the
kernel's path of the file (``real_path``) is also that path's fact: a name kept as given
(``unresolved``: ``/proc/self/fd/N/...`` for the eBPF witness, which resolves it in the
kernel) and the same name resolved by the other witness's parser are one open. Two facts
of the two witnesses match when these are equal and, where both events carry a host pid,
the host pids are equal, else when their wall times are within
`DetectorConfig.witness_window_ns` (the two witnesses stamp with different clocks: strace
its wall time in µs, eBPF the monotonic clock plus an offset taken once). Each fact
matches at most one of the other side, in record order.

Scope: only facts from strace's first (its command's exec) on, less 50 ms: what ran
before strace started the command (the chamber's wrapper) is out of strace's reach, not a
disagreement. A run with a gap from either witness is not compared (``witness.gap``
already voids it, and every fact after the gap would be a finding).
"""

from __future__ import annotations

from caisson.detectors._base import DetectorConfig, Finding, Fold, VOID, folded, reads
from ledger import Record
from ledger.events import FileOpen, ProcessExec, WitnessGap, WitnessStarted

__all__ = ["WITNESS_DISAGREEMENT", "witness_disagreement"]

WITNESS_DISAGREEMENT = "witness.disagreement@1"
_PAIR = ("strace", "ebpf")
_SCOPE_SLACK_NS = 50_000_000
"""How far before strace's first fact an eBPF fact is still in scope, ns: both stamp an
exec at its entry, strace from the wall clock, eBPF from the monotonic one plus an offset."""


class _Fact:
    __slots__ = ("seq", "wall_ns", "host_pid", "key", "real", "matched")

    def __init__(self, record: Record, host_pid: int | None, key: tuple[str, str, str], real: str | None = None):
        self.seq, self.wall_ns, self.host_pid, self.key = record.seq, record.wall_ns, host_pid, key
        self.real = real  # an open's real path, where the witness gave one
        self.matched = False


@reads(WitnessStarted, WitnessGap, FileOpen, ProcessExec)
@folded
def witness_disagreement(config: DetectorConfig, found: list[Finding]) -> Fold:
    """Successful opens and execs seen by one syscall witness and not by the other.

    Args:
        config: ``witness_window_ns`` (ns) bounds a match by time when a host pid is unknown;
            ``witnesses``, when known, says at once whether both witnesses ran (most runs
            have one syscall witness: their opens are not kept).

    Finds one ``witness_disagreement`` finding (void) per unmatched fact, in record order,
    its evidence the fact's record (sources ``strace`` and ``ebpf`` are compared); nothing
    unless both witnesses started, and nothing when either reported a gap.
    """
    if config.witnesses is not None and not set(_PAIR).issubset(config.witnesses):
        return  # the configuration read the run's witness.started: one of the two never ran
    started: set[str] = set()
    facts: dict[str, list[_Fact]] = {name: [] for name in _PAIR}
    while (record := (yield)) is not None:
        event = record.event
        if isinstance(event, FileOpen):
            if event.result is not None and record.source in facts:
                facts[record.source].append(_Fact(record, event.host_pid, ("open", event.syscall, event.path),
                                                  event.real_path))
        elif isinstance(event, ProcessExec):
            if event.result == 0 and record.source in facts:
                facts[record.source].append(_Fact(record, event.host_pid, ("exec", "execve", event.path)))
        elif isinstance(event, (WitnessStarted, WitnessGap)) and event.witness in _PAIR:
            if isinstance(event, WitnessGap):
                return
            started.add(event.witness)
    if started != set(_PAIR):
        return
    if not facts["strace"]:
        return
    since = facts["strace"][0].wall_ns - _SCOPE_SLACK_NS  # before: the wrapper's, out of strace's reach
    facts["ebpf"] = [f for f in facts["ebpf"] if f.wall_ns >= since]
    by_key: dict[tuple[str, str, str], list[_Fact]] = {}
    for fact in facts["ebpf"]:
        by_key.setdefault(fact.key, []).append(fact)
        if fact.real is not None:
            by_key.setdefault((*fact.key[:2], fact.real), []).append(fact)
    for fact in facts["strace"]:
        candidates = by_key.get(fact.key, [])
        if fact.real is not None:
            candidates = candidates + by_key.get((*fact.key[:2], fact.real), [])
        other = next((o for o in candidates if not o.matched and _same(fact, o, config)), None)
        if other is not None:
            fact.matched = other.matched = True
    unmatched = sorted((f.seq, seen, f) for seen in _PAIR for f in facts[seen] if not f.matched)
    for seq, seen, fact in unmatched:
        kind, syscall, path = fact.key
        missed = _PAIR[1 - _PAIR.index(seen)]
        found.append(Finding(detector=WITNESS_DISAGREEMENT, kind="witness_disagreement", effect=VOID,
                             evidence=[seq], message=f"{seen} saw {kind} {path} ({syscall}, host pid"
                             f" {fact.host_pid}); {missed} did not"))


def _same(a: _Fact, b: _Fact, config: DetectorConfig) -> bool:
    if a.host_pid is not None and b.host_pid is not None:
        return a.host_pid == b.host_pid
    return abs(a.wall_ns - b.wall_ns) <= config.witness_window_ns
