"""The default syscall witness: the fastest one `caisson selftest` showed complete here.

`caisson selftest --syscall-witness W` that runs W's whole matrix keeps its outcome in the
caisson home (`outcome_path`): complete (no failure) or not, and the identity of what it
ran on (`machine_identity`: the machine id, the kernel's release and build, bpftrace's
version, the Docker engine's version, the eBPF witness's backend and the sha256 of the
program it loads: the BPF object of the libbpf loader, or the bpftrace program), signed with the
operator key. When `caisson record` is given no ``--syscall-witness``,
`choose_syscall_witness` takes the first of `FASTEST_FIRST` that such an outcome shows
complete on this same identity, and strace otherwise: eBPF not runnable here, no selftest
outcome, an outcome for another kernel, engine, bpftrace, backend or program, an incomplete one, or
one not signed by the operator key. The choice and its reason go to ``run.started``
(``syscall_witness.why``); a fall-back is also said once on stderr by the CLI. strace is
never skipped for want of a selftest: nothing runs unwitnessed.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import msgspec

from caisson import home
from caisson.run import ebpf as ebpf_run
from collectors.ebpf import ebpf_program
from ledger import KeyFileError

__all__ = ["FASTEST_FIRST", "Choice", "Outcome", "choose_syscall_witness", "keep_outcome", "machine_identity",
           "outcome_path"]

FASTEST_FIRST = ("ebpf", "strace")
"""Syscall witnesses, fastest first, as `benchmarks/witness_bench.py` measures them on
agent-shaped work (README, Benchmarks). ``both`` is never a default: it pays for the two."""


class Outcome(msgspec.Struct, frozen=True, kw_only=True):
    """One selftest's verdict on a syscall witness."""

    complete: bool  # every detector fired on its probe and none on the honest run
    failures: list[str]  # the selftest's failure lines (empty when complete)
    at_ns: int  # when it was kept, ns since the Unix epoch


class _Kept(msgspec.Struct, kw_only=True):
    identity: dict[str, str]
    outcomes: dict[str, Outcome]  # syscall witness (strace, ebpf, both) -> its last outcome


class _Signed(msgspec.Struct, kw_only=True):
    body: str  # the JSON of a _Kept, exactly as signed
    signature: str  # hex Ed25519 signature of body's UTF-8 bytes by the operator key


class Choice(msgspec.Struct, frozen=True, kw_only=True):
    """The syscall witness ``record`` starts when none is asked for, and why.

    Attributes:
        witness: ``ebpf`` or ``strace``.
        why: the reason, for ``run.started.syscall_witness.why``.
        notice: a line to say once on stderr (a fall-back to strace), or None.
    """

    witness: str
    why: str
    notice: str | None = None


def outcome_path() -> Path:
    """Where the selftest's outcomes are kept: ``$CAISSON_HOME/selftest/syscall-witness.json``."""
    return home.caisson_home() / "selftest" / "syscall-witness.json"


def _run(argv: list[str]) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"


def machine_identity() -> dict[str, str]:
    """What a selftest outcome holds for: ``{machine, kernel, bpftrace, engine, ebpf_backend, program}``.

    ``unknown`` stands for what could not be read (no bpftrace, no engine); it is compared
    like any other value. Runs ``bpftrace --version`` and ``docker version`` (tens of ms).
    """
    try:
        machine = Path("/etc/machine-id").read_text().strip()
    except OSError:
        machine = "unknown"
    uname = os.uname()
    return {"machine": machine or "unknown", "kernel": f"{uname.release} {uname.version}",
            "bpftrace": _run(["bpftrace", "--version"]),
            "engine": _run(["docker", "version", "--format", "{{.Server.Version}}"]),
            **_program()}


def _program() -> dict[str, str]:
    """The eBPF witness's backend and the sha256 of the program it would load here."""
    try:
        program = ebpf_program()
    except OSError:  # the loader is built but will not run
        return {"ebpf_backend": "unknown", "program": "unknown"}
    return {"ebpf_backend": program.backend, "program": program.sha256}


def keep_outcome(syscall: str, failures: list[str], *, identity: dict[str, str] | None = None,
                 now_ns: int | None = None) -> Path:
    """Keep a whole selftest matrix's verdict on ``syscall``, signed; the file's path.

    Outcomes kept for another identity are dropped (they no longer hold). Creates the
    operator key if there is none.
    """
    identity = identity if identity is not None else machine_identity()
    kept = _load(identity)[0] or _Kept(identity=identity, outcomes={})
    kept.outcomes[syscall] = Outcome(complete=not failures, failures=list(failures),
                                     at_ns=now_ns if now_ns is not None else time.time_ns())
    body = msgspec.json.encode(kept).decode()
    signed = _Signed(body=body, signature=home.ensure_operator_key().sign(body.encode()).hex())
    path = outcome_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(msgspec.json.encode(signed))
    tmp.replace(path)
    return path


def _load(identity: dict[str, str]) -> tuple[_Kept | None, str]:
    """The kept outcomes if they hold for ``identity``, else (None, why not)."""
    path = outcome_path()
    try:
        signed = msgspec.json.decode(path.read_bytes(), type=_Signed)
        kept = msgspec.json.decode(signed.body, type=_Kept)
    except FileNotFoundError:
        return None, "no caisson selftest outcome on this machine"
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        return None, f"the selftest outcome {path} is unreadable ({exc})"
    try:
        signed_ok = home.trusted_key(None).verify(bytes.fromhex(signed.signature), signed.body.encode())
    except (OSError, ValueError, KeyFileError):
        signed_ok = False
    if not signed_ok:
        return None, f"the selftest outcome {path} is not signed by the operator key"
    changed = [k for k in sorted(identity) if kept.identity.get(k) != identity[k]]
    if changed:
        return None, f"the selftest outcome is for another {', '.join(changed)}"
    return kept, ""


def choose_syscall_witness(identity: dict[str, str] | None = None) -> Choice:
    """The fastest syscall witness a selftest showed complete here; see the module docstring."""
    problem = ebpf_run.ebpf_problem()
    if problem is not None:
        why = f"the eBPF witness cannot run here ({problem})"
    else:
        kept, why = _load(identity if identity is not None else machine_identity())
        outcome = kept.outcomes.get("ebpf") if kept is not None else None
        if kept is not None and outcome is None:
            why = "caisson selftest --syscall-witness ebpf was not run on this machine"
        elif outcome is not None and not outcome.complete:
            why = f"caisson selftest --syscall-witness ebpf failed here ({len(outcome.failures)} problem(s))"
        elif outcome is not None:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(outcome.at_ns / 1e9))
            return Choice(witness="ebpf", why=f"default: ebpf, the fastest syscall witness caisson selftest showed"
                                              f" complete on this machine ({stamp})")
    return Choice(witness="strace", why=f"default: strace: {why}",
                  notice=f"caisson record: syscall witness strace, not eBPF: {why}")
