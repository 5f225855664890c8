"""A quick qualification of the eBPF witness on this host: a known-answer run in seconds.

`caisson selftest --syscall-witness ebpf` shows every detector discriminating under eBPF
(minutes). Before a machine has run it, `caisson record` still wants the stronger witness,
so at first use (`caisson.run.witness_choice.choose_syscall_witness`) it records one
short probe in the chamber under the eBPF witness and checks that the ledger holds exactly
what the probe did (`check_qualification`, pure): its exec with its argv, a read, a failed
open, a tree change, an io_uring call refused by the chamber's profile, a connect, a
child's birth and exit status, long paths whole and a directory fd moved by dup2, the
witness started and stopped with no gap, and no detector voiding the honest run. The
verdict is kept signed beside the selftest's (`witness_choice.keep_outcome`).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from ledger import Record
from ledger.events import (FileChange, FileOpen, NetConnect, ProcessExec, ProcessExit, ProcessFork, ProcessSyscall,
                           RunEnded, WitnessGap, WitnessStarted, WitnessStopped)

__all__ = ["PROBE", "check_qualification", "qualify_ebpf"]

_LONG = "/caisson-qualify/" + "d" * 240 + "/absent"
"""A path past the 199 bytes the eBPF witness once kept: recorded whole, or the witness fails."""
_ARG = "a" * 300
"""An argv string past those 199 bytes too (Claude Code's bash -c command is longer)."""
PROBE = f"""set -u
cat /etc/hostname >/dev/null
cat /caisson-qualify/absent 2>/dev/null
cat {_LONG} 2>/dev/null
mkdir /tmp/caisson-qualify
sh -c 'exit 3' {_ARG}
python3 - <<'PY'
import ctypes, os, socket
libc = ctypes.CDLL(None, use_errno=True)
print("io_uring_setup:", libc.syscall(425, 4, ctypes.create_string_buffer(120)), ctypes.get_errno())
s = socket.socket()
try:
    s.connect(("127.0.0.1", 9))
except OSError as exc:
    print("connect:", exc.errno)
d = os.open("/etc", os.O_RDONLY | os.O_DIRECTORY)
t = os.open("/tmp", os.O_RDONLY | os.O_DIRECTORY)
os.mkdir(f"/proc/self/fd/{{t}}/caisson-qualify-link")
os.dup2(d, t)
os.close(d)
os.close(os.open("passwd", os.O_RDONLY, dir_fd=t))
PY
"""
"""The probe, a shell script for the chamber image (its python3 makes the raw calls)."""


def check_qualification(records: Sequence[Record], witness: str = "ebpf") -> list[str]:
    """What the run of `PROBE` under ``witness`` should hold and does not: one line each.

    Args:
        records: the qualification run's records.
        witness: the syscall witness qualified (its records' source).

    Returns:
        The failures; empty when the witness recorded exactly what the probe did.
    """
    from caisson.detectors import VOID, config_from_records, run_detectors

    mine = [r.event for r in records if r.source == witness]
    failures: list[str] = []

    def want(what: str, found: Iterable[bool]) -> None:
        if not any(found):
            failures.append(f"{witness} did not record {what}")

    want("the start of its witness", (isinstance(e, WitnessStarted) for e in mine))
    want("its stop", (isinstance(e, WitnessStopped) for e in mine))
    gaps = [e for e in mine if isinstance(e, WitnessGap)]
    failures += [f"{witness} reported a gap: {g.reason}" for g in gaps]
    want("the exec of cat /etc/hostname", (isinstance(e, ProcessExec) and e.result == 0
                                           and e.argv == ["cat", "/etc/hostname"] for e in mine))
    want("the read of /etc/hostname", (isinstance(e, FileOpen) and e.path == "/etc/hostname"
                                       and e.result is not None for e in mine))
    want("the failed open of /caisson-qualify/absent (ENOENT)", (
        isinstance(e, FileOpen) and e.path == "/caisson-qualify/absent" and e.errno == "ENOENT" for e in mine))
    want(f"the {len(_LONG)}-byte path whole", (isinstance(e, FileOpen) and e.path == _LONG for e in mine))
    want("mkdir /tmp/caisson-qualify", (isinstance(e, FileChange) and e.syscall == "mkdir"
                                        and e.path == "/tmp/caisson-qualify" for e in mine))
    want("io_uring_setup refused by the chamber's profile", (
        isinstance(e, ProcessSyscall) and e.syscall == "io_uring_setup" and e.denied for e in mine))
    want("the connect to 127.0.0.1:9", (isinstance(e, NetConnect) and e.address == "127.0.0.1" and e.port == 9
                                        for e in mine))
    want("mkdir through /proc/self/fd/N/ as /tmp/caisson-qualify-link", (
        isinstance(e, FileChange) and e.syscall == "mkdir" and e.path == "/tmp/caisson-qualify-link"
        and not e.unresolved for e in mine))
    want(f"the {len(_ARG)}-byte argv string whole", (isinstance(e, ProcessExec) and e.argv[-1:] == [_ARG]
                                                    and not e.argv_cut for e in mine))
    want("a child's birth", (isinstance(e, ProcessFork) for e in mine))
    want("a child's exit status 3", (isinstance(e, ProcessExit) and e.code == 3 for e in mine))
    moved = [e for e in mine if isinstance(e, FileOpen) and e.result is not None and e.path.endswith("/passwd")]
    if not any((e.real_path or e.path) == "/etc/passwd" for e in moved) or any(
            (e.real_path or e.path) == "/tmp/passwd" for e in moved):
        failures.append(f"{witness} did not record the open of passwd through a directory fd moved by dup2 as"
                        f" /etc/passwd (recorded: {sorted({e.real_path or e.path for e in moved})})")
    ended = [r.event for r in records if isinstance(r.event, RunEnded)]
    if not ended or ended[-1].status != "completed" or ended[-1].exit_code != 0:
        failures.append(f"the probe did not complete with exit 0 ({ended[-1] if ended else 'no run.ended'})")
    voids = [f for f in run_detectors(list(records), config_from_records(records)) if f.effect == VOID]
    failures += [f"{f.detector} voided the honest probe: {f.message}" for f in voids]
    return failures


def qualify_ebpf() -> tuple[list[str], float]:
    """Record `PROBE` under the eBPF witness (and procfs) and check it.

    Returns:
        (failures, seconds it took); no failures: the witness is qualified here.

    Raises:
        CaissonError: the chamber cannot run (engine, image), as `caisson record`.
    """
    from caisson.run.plan import RecordOptions
    from caisson.run.record import record
    from caisson.run.witnesses import default_witnesses
    from ledger import read_records

    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="caisson-qualify-") as tmp:
        scenario = Path(tmp) / "qualify.toml"
        scenario.write_text('name = "ebpf-qualification"\n[limits]\nwall_seconds = 60\n')
        out = Path(tmp) / "run"
        witnesses = [w for w in default_witnesses(syscall="ebpf") if w.name in ("ebpf", "procfs")]
        record(RecordOptions(command=["sh", "-c", PROBE], scenario=scenario, out=out, syscall_witness="ebpf",
                             syscall_witness_why="the eBPF witness's qualification"), witnesses=witnesses)
        failures = check_qualification(list(read_records(out)))
    return failures, time.monotonic() - began
