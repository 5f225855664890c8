"""The eBPF syscall witness in the chamber: a BPF program on the host, attached before the command.

The witness's program (`collectors.ebpf`: the libbpf loader when ``scripts/setup.sh`` has
built it, else bpftrace) runs on the host, where the agent can neither see nor signal it,
and watches the chamber's PID namespace. So that no instruction of the command runs
unwitnessed, the chamber's command is wrapped (in bash) to wait for a go signal: it reads one line
from a FIFO bind-mounted read-only at `GO_PATH`, and execs the command only when the line
is ``go``. The witness writes ``go`` once the program has printed its ``B`` line (every probe
attached); if it cannot attach, it writes ``abort`` and the command never runs (the
chamber exits with `ABORT_EXIT`, and the failure is a ``witness.gap``).

`ebpf_problem` says why this host cannot run the witness (neither the loader nor bpftrace,
not root, no BTF, no tracefs): `caisson record --syscall-witness ebpf` then says so once
and uses strace. `backend_notice` says, once, when it runs bpftrace for want of the loader.
"""

from __future__ import annotations

import functools
import os
import shutil
import time
from pathlib import Path

import msgspec

from caisson._paths import SANDBOX_PATH
from caisson.chamber import ContainerSpec
from collectors.ebpf import LOADER, EbpfParser, bpftrace_command, ebpf_program, loader_command, run_ebpf_witness
from collectors.strace import DENIED_SYSCALLS

__all__ = ["ABORT_EXIT", "EbpfWitness", "GO_PATH", "backend_notice", "ebpf_problem"]

GO_DIR = "/caisson/ebpf"
GO_PATH = f"{GO_DIR}/go"
"""The FIFO the chamber's command waits on (read-only in the chamber)."""
ABORT_EXIT = 125
"""Exit status of the chamber when the witness could not attach (the command never ran)."""
# bash, not sh: the PATH search is done here without exec (``type -P``) and argv[0] is kept
# (``exec -a``), so the command's first execve in the ledger is the command's own and
# succeeds, as under strace (which searches PATH itself), not a row of ENOENT attempts.
_WAIT = (f'read -r go < {GO_PATH}; if [ "$go" != go ]; then '
         f'echo "caisson: the eBPF witness did not attach; the command was not run" >&2; exit {ABORT_EXIT}; fi; '
         'p=$(type -P -- "$1") || { echo "caisson: $1: command not found" >&2; exit 127; }; '
         'exec -a "$1" "$p" "${@:2}"')
_TRACEFS = Path("/sys/kernel/tracing")


def ebpf_problem() -> str | None:
    """Why the eBPF witness cannot run on this host, or None when it can.

    Checks what the program needs: the libbpf loader built or bpftrace installed, root,
    the kernel's BTF (the program's types), and tracefs with the syscall and io_uring
    tracepoints. It does not load a program (bpftrace takes seconds); a load failure at run
    time is a ``witness.gap``.
    """
    if not os.access(LOADER, os.X_OK) and shutil.which("bpftrace") is None:
        return "neither the libbpf loader (scripts/setup.sh) nor bpftrace is installed (apt-get install bpftrace)"
    if os.geteuid() != 0:
        return "the eBPF witness needs root"
    if not Path("/sys/kernel/btf/vmlinux").exists():
        return "the kernel has no BTF (/sys/kernel/btf/vmlinux)"
    events = _TRACEFS / "events"
    if not events.is_dir():
        return f"tracefs is not mounted at {_TRACEFS} (mount -t tracefs nodev {_TRACEFS})"
    for needed in ("syscalls/sys_enter_openat", "sched/sched_process_exit", "io_uring/io_uring_submit_req"):
        if not (events / needed).is_dir():
            return f"the kernel has no tracepoint {needed.replace('/', ':')}"
    return None


def backend_notice() -> str | None:
    """A line to say once when the witness will run bpftrace for want of the libbpf loader, or None."""
    program = ebpf_program()
    if program.backend == "libbpf":
        return None
    return f"caisson record: the eBPF witness runs bpftrace (slower): {program.why}"


def _pid_namespace(host_pid: int) -> tuple[int, int]:
    """(inode number, level below the host's) of a process's PID namespace."""
    inum = os.stat(f"/proc/{host_pid}/ns/pid").st_ino
    with open(f"/proc/{host_pid}/status", "rb") as f:
        nspid = next(line for line in f if line.startswith(b"NSpid:"))
    return inum, len(nspid.split()) - 2


class EbpfWitness:
    """The eBPF witness's program on the host, scoped to the chamber's PID namespace; see
    the module docstring.

    Args:
        backend: ``libbpf`` or ``bpftrace``; None: libbpf when its loader is built, else
            bpftrace (`collectors.ebpf.ebpf_program`).
        ring_bytes: bytes of the libbpf loader's ring buffer (a power of 2 of at least
            4096; tests shrink it to force lost events, which must void the cell).
        perf_rb_pages: pages per CPU of bpftrace's perf buffer (likewise).
        beside_strace: the strace witness runs too; it is then the chamber's init, and its
            own calls (opening its output FIFO, its start-up probes) are not the command's:
            they are left out, and ``witness.started`` says so.
    """

    name = "ebpf"
    needs_network = False

    def __init__(self, *, backend: str | None = None, ring_bytes: int | None = None, perf_rb_pages: int = 1024,
                 beside_strace: bool = False):
        self.program = ebpf_program(backend)
        self.ring_bytes = ring_bytes
        self.perf_rb_pages = perf_rb_pages
        self.beside_strace = beside_strace
        self._go_fd: int | None = None
        self._denied: tuple[str, ...] = DENIED_SYSCALLS

    def prepare(self, spec: ContainerSpec, ctx) -> ContainerSpec:
        """Make the go FIFO and wrap the command to wait on it."""
        gdir = ctx.scratch / "ebpf"
        gdir.mkdir(mode=0o755)
        fifo = gdir / "go"
        os.mkfifo(fifo, 0o644)  # the chamber's user reads it; only root writes
        # Read and write: never blocks, and the line stays buffered until the chamber reads it.
        self._go_fd = os.open(fifo, os.O_RDWR | os.O_CLOEXEC)
        self._key, self._patterns = ctx.fingerprint_key, tuple(ctx.scenario.credential_patterns)
        # the calls caisson's profile refuses; under the engine's own profile (seccomp weakened)
        # an EPERM is the call's own answer, not caisson's refusal
        self._denied = DENIED_SYSCALLS if spec.seccomp is not None else ()
        return msgspec.structs.replace(spec, cmd=["/bin/bash", "-c", _WAIT, "caisson-wait", *spec.cmd],
                                       binds=[*spec.binds, (str(gdir), GO_DIR, True)])

    def facts(self) -> dict[str, str]:
        """For ``run.started.syscall_witness``: the backend and the sha256 of the program it loads."""
        return {"ebpf_backend": self.program.backend, "ebpf_program_sha256": self.program.sha256}

    async def start(self, ctx) -> None:
        """Start the program on the chamber's namespace; the command goes once it has attached.

        Returns at once: the other witnesses start while it loads and attaches (bpftrace
        compiles for seconds), and the command waits on its go FIFO meanwhile.
        """
        ctx.nursery.start_soon(self._attach, ctx)
        ctx.nursery.start_soon(self._close_at_stop, ctx)

    async def _attach(self, ctx) -> None:
        """Run the witness task; write ``go`` once it has attached, ``abort`` if it cannot.

        Raises:
            Exception: the program could not attach (`EbpfWitnessError`, or the engine's pid
                was gone): the command never runs; the session records a ``witness.gap``.
        """
        ok = False
        try:
            inum, level = _pid_namespace(ctx.started.host_pid)
            if self.program.backend == "libbpf":
                ring = {} if self.ring_bytes is None else {"ring_bytes": self.ring_bytes}
                argv, extra = loader_command(inum, level, ctx.started.host_pid, loader=self.program.path, **ring), {}
            else:
                argv, extra = bpftrace_command(inum, level, ctx.started.host_pid, program=self.program.path,
                                               perf_rb_pages=self.perf_rb_pages)
            offset = time.time_ns() - time.monotonic_ns()  # the program's stamps are CLOCK_MONOTONIC
            parser = EbpfParser(clock_offset_ns=offset, root_cwd=SANDBOX_PATH, root_host_pid=ctx.started.host_pid,
                                fingerprint_key=self._key, credential_patterns=self._patterns,
                                skip_tracer="strace" if self.beside_strace else None, denied_syscalls=self._denied)
            await ctx.nursery.start(functools.partial(
                run_ebpf_witness, ctx.send, argv=argv, env={**os.environ, **extra}, parser=parser, stop=ctx.stop,
                detail={"env": extra, "clock_offset_ns": offset, "pidns_level": level, **self.facts(),
                        "skipped": "the strace tracer's own calls" if self.beside_strace else None}))
            ok = True
        finally:
            if self._go_fd is not None:
                os.write(self._go_fd, b"go\n" if ok else b"abort\n")

    async def _close_at_stop(self, ctx) -> None:
        await ctx.stop.wait()
        if self._go_fd is not None:
            os.close(self._go_fd)
            self._go_fd = None
