"""Which program the eBPF witness runs: the libbpf loader when it is built, else bpftrace.

Two backends print the same lines (the grammar in `collectors.ebpf`):

- ``libbpf``: ``collectors/bpf/`` (``witness.bpf.c``, a CO-RE program, and ``loader.c``),
  built by ``scripts/build_ebpf.sh`` (run by ``scripts/setup.sh``) into
  ``collectors/bpf/build/caisson-ebpf``. Its records go through one BPF ring buffer that
  wakes the loader only once `WAKE_BYTES` are pending, and the loader reads it at least
  every `POLL_MS`: a wake-up per record (bpftrace 0.17's perf buffer) costs the traced
  program an interrupt inside its syscall, which is most of bpftrace's overhead on
  file-heavy work (``benchmarks/witness_bench.py``).
- ``bpftrace``: ``collectors/ebpf.bt``, where the loader is not built.

`ebpf_program` names the backend and the sha256 of what it loads (the BPF object the
loader embeds, or the bpftrace program's text), for ``witness.started``, ``run.started``
and the selftest's machine identity.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
from pathlib import Path
from typing import NamedTuple

__all__ = ["BACKENDS", "BPFTRACE_PROGRAM", "LOADER", "POLL_MS", "RING_BYTES", "WAKE_BYTES", "EbpfProgram",
           "ebpf_program", "loader_command"]

BPFTRACE_PROGRAM = Path(__file__).with_name("ebpf.bt")
"""The bpftrace program of the witness (a data file beside this module)."""
LOADER = Path(__file__).with_name("bpf") / "build" / "caisson-ebpf"
"""The libbpf loader, once ``scripts/build_ebpf.sh`` has built it (gitignored)."""
BACKENDS = ("libbpf", "bpftrace")
RING_BYTES = 1 << 24
"""Bytes of the loader's BPF ring buffer (16 MiB: 60,000 records of 264 bytes)."""
WAKE_BYTES = 1 << 20
"""Pending bytes at which a record wakes the loader (1 MiB: 4,000 records)."""
POLL_MS = 50
"""Longest wait between two reads of the ring by the loader, ms."""


class EbpfProgram(NamedTuple):
    """The program an eBPF witness runs.

    Attributes:
        backend: ``libbpf`` or ``bpftrace``.
        path: the loader, or the bpftrace program.
        sha256: hex digest of the BPF object the loader embeds (what it loads), or of the
            bpftrace program's text.
        why: why this backend (e.g. the loader is not built), for a notice.
    """

    backend: str
    path: Path
    sha256: str
    why: str


def ebpf_program(backend: str | None = None, *, loader: Path = LOADER) -> EbpfProgram:
    """The program the eBPF witness runs with ``backend`` (None: libbpf when built, else bpftrace).

    Raises:
        ValueError: an unknown backend, or ``libbpf`` asked for and not built.
        OSError: ``libbpf`` asked for and the loader would not write its object (a broken
            build); with ``backend`` None that is bpftrace, and ``why`` says so.
    """
    if backend not in (None, *BACKENDS):
        raise ValueError(f"eBPF backend {backend!r}: libbpf or bpftrace")
    built = loader.is_file() and os.access(loader, os.X_OK)
    if backend == "libbpf" and not built:
        raise ValueError(f"the libbpf loader is not built ({loader}): run scripts/setup.sh")
    why = "asked for" if backend == "bpftrace" else f"the libbpf loader is not built ({loader}; scripts/setup.sh)"
    if built and backend != "bpftrace":
        st = loader.stat()
        try:
            digest = _object_digest(str(loader), st.st_mtime_ns, st.st_size)
        except (OSError, subprocess.SubprocessError) as exc:
            if backend == "libbpf":
                raise OSError(str(exc)) from exc
            why = f"the libbpf loader does not run ({exc}; scripts/setup.sh builds it again)"
        else:
            return EbpfProgram("libbpf", loader, digest, "asked for" if backend else "the libbpf loader is built")
    return EbpfProgram("bpftrace", BPFTRACE_PROGRAM, hashlib.sha256(BPFTRACE_PROGRAM.read_bytes()).hexdigest(), why)


@functools.lru_cache(maxsize=8)
def _object_digest(loader: str, mtime_ns: int, size: int) -> str:
    """sha256 of the BPF object ``loader --object`` writes (the one it loads); cached per build."""
    out = subprocess.run([loader, "--object"], capture_output=True, timeout=10, check=False)
    if out.returncode != 0 or not out.stdout.startswith(b"\x7fELF"):
        raise OSError(f"{loader} --object failed ({out.returncode}): {out.stderr.decode(errors='replace')[-300:]}")
    return hashlib.sha256(out.stdout).hexdigest()


def loader_command(pidns_inum: int, level: int, init_pid: int, *, loader: Path = LOADER,
                   ring_bytes: int = RING_BYTES, wake_bytes: int = WAKE_BYTES, poll_ms: int = POLL_MS) -> list[str]:
    """The loader's command line that witnesses one PID namespace (as `bpftrace_command`'s).

    Args:
        pidns_inum: inode number of the chamber's PID namespace.
        level: that namespace's depth below the host's (1 to 31).
        init_pid: host pid of the namespace's init.
        loader: the built loader.
        ring_bytes: the ring buffer's size, bytes: a power of 2 of at least a page (4096
            here); a smaller one loses records sooner (tests use it to force ``Lost N events``).
        wake_bytes: pending bytes at which a record wakes the loader.
        poll_ms: longest wait between two reads of the ring, ms.

    Raises:
        ValueError: an argument out of range.
    """
    if min(pidns_inum, level, init_pid) < 1 or level > 31:
        raise ValueError(f"pidns_inum and init_pid must be >= 1 and level 1..31, got {pidns_inum}, {level}, {init_pid}")
    if ring_bytes < 4096 or ring_bytes & (ring_bytes - 1):
        raise ValueError(f"ring_bytes must be a power of 2 of at least 4096, got {ring_bytes}")
    if wake_bytes < 1 or poll_ms < 1:
        raise ValueError(f"wake_bytes and poll_ms must be >= 1, got {wake_bytes}, {poll_ms}")
    return [str(loader), "--ring-bytes", str(ring_bytes), "--wake-bytes", str(wake_bytes), "--poll-ms", str(poll_ms),
            str(pidns_inum), str(level), str(init_pid)]
