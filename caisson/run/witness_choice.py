"""The default syscall witness: the strongest one shown to work on this machine.

eBPF is the stronger witness (it sees from outside the chamber what strace's ptrace can
be made blind to, and costs less), so it is the default wherever it is shown to work:
``caisson selftest --syscall-witness ebpf`` (the whole detector matrix, minutes) or, at
first use, its quick qualification (`caisson.run.qualify`: one known-answer run in the
chamber, a few seconds; a failed one is run again a day later). Each verdict is kept in the caisson home (`outcome_path`) with the identity it
holds for (`machine_identity`: the machine id, the kernel's release and build, bpftrace's
version, the Docker engine's version, the eBPF backend and the sha256 of the program it
loads), signed with the operator key; a verdict for another identity, unsigned or failed
does not hold. `choose_syscall_witness` takes eBPF when the selftest's verdict (else the
qualification's) holds and passed, strace otherwise: eBPF cannot run here, or failed. The
choice and its reason go to ``run.started`` (``syscall_witness.why``); a fall-back is also
said once on stderr by the CLI. Nothing runs unwitnessed.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from caisson import home
from collectors.ebpf import ebpf_program
from ledger import KeyFileError

__all__ = ["Choice", "Outcome", "choose_syscall_witness", "default_syscall_witness", "keep_outcome", "machine_identity",
           "outcome_path"]


class Outcome(msgspec.Struct, frozen=True, kw_only=True):
    """One selftest's verdict on a syscall witness."""

    complete: bool  # every detector fired on its probe and none on the honest run
    failures: list[str]  # the selftest's failure lines (empty when complete)
    at_ns: int  # when it was kept, ns since the Unix epoch


class _Kept(msgspec.Struct, kw_only=True):
    identity: dict[str, str]
    outcomes: dict[str, Outcome]  # syscall witness (strace, ebpf, both) -> its last selftest outcome
    qualified: dict[str, Outcome] = {}  # syscall witness -> its last quick qualification (caisson.run.qualify)


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
                 now_ns: int | None = None, qualification: bool = False) -> Path:
    """Keep a whole selftest matrix's verdict on ``syscall`` (or, ``qualification``, a quick
    qualification's, `caisson.run.qualify`), signed; the file's path.

    Outcomes kept for another identity are dropped (they no longer hold). Creates the
    operator key if there is none.
    """
    identity = identity if identity is not None else machine_identity()
    path = outcome_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "a") as lock:  # one writer at a time: none loses another's outcome
        fcntl.flock(lock, fcntl.LOCK_EX)
        kept = _load(identity)[0] or _Kept(identity=identity, outcomes={})
        outcome = Outcome(complete=not failures, failures=list(failures),
                          at_ns=now_ns if now_ns is not None else time.time_ns())
        (kept.qualified if qualification else kept.outcomes)[syscall] = outcome
        body = msgspec.json.encode(kept).decode()
        signed = _Signed(body=body, signature=home.ensure_operator_key().sign(body.encode()).hex())
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=path.name + ".", delete=False) as tmp:
            tmp.write(msgspec.json.encode(signed))
        os.replace(tmp.name, path)
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


def _stamp(outcome: Outcome) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(outcome.at_ns / 1e9))


def choose_syscall_witness(identity: dict[str, str] | None = None, *,
                           qualify: Callable[[], tuple[list[str], float]] | None = None,
                           say: Callable[[str], None] = lambda line: None) -> Choice:
    """The strongest syscall witness shown to work here; see the module docstring.

    eBPF when this identity's last ``caisson selftest --syscall-witness ebpf`` was complete;
    with no selftest verdict, when its quick qualification passed (`caisson.run.qualify`),
    run now by ``qualify`` if there is none yet, or if the last one failed
    `REQUALIFY_AFTER_NS` ago or more (its verdict kept, signed: a pass runs once per
    identity); strace otherwise, with the reason. A failed selftest is never overridden by
    a qualification.

    Args:
        identity: what a verdict must hold for (default `machine_identity`).
        qualify: runs the qualification: (failures, seconds); None: none is run.
        say: told one line when a qualification runs (for the caller's stderr).
    """
    from caisson.run import ebpf_problem  # looked up per call: a test patches caisson.run.ebpf

    problem = ebpf_problem()
    if problem is not None:
        why = f"the eBPF witness cannot run here ({problem})"
        return Choice(witness="strace", why=f"default: strace: {why}",
                      notice=f"caisson record: syscall witness strace, not eBPF: {why}")
    identity = identity if identity is not None else machine_identity()
    kept, why = _load(identity)
    selftest = kept.outcomes.get("ebpf") if kept is not None else None
    quick = kept.qualified.get("ebpf") if kept is not None else None
    stale = quick is not None and not quick.complete and time.time_ns() - quick.at_ns >= REQUALIFY_AFTER_NS
    if selftest is None and (quick is None or stale) and qualify is not None:
        failures, seconds = qualify()
        keep_outcome("ebpf", failures, identity=identity, qualification=True)
        say(f"qualified the eBPF witness on this machine in {seconds:.1f} s: "
            + ("passed" if not failures else f"failed ({'; '.join(failures)})"))
        kept, why = _load(identity)
        quick = kept.qualified.get("ebpf") if kept is not None else None
    if selftest is not None:
        if selftest.complete:
            return Choice(witness="ebpf", why=f"default: ebpf, the strongest syscall witness: caisson selftest"
                                              f" showed it complete on this machine ({_stamp(selftest)})")
        why = f"caisson selftest --syscall-witness ebpf failed here ({len(selftest.failures)} problem(s))"
    elif quick is not None:
        if quick.complete:
            return Choice(witness="ebpf", why=f"default: ebpf, the strongest syscall witness: its qualification"
                                              f" passed on this machine ({_stamp(quick)})")
        again = _stamp(msgspec.structs.replace(quick, at_ns=quick.at_ns + REQUALIFY_AFTER_NS))
        why = (f"the eBPF witness's qualification failed here ({_stamp(quick)}; run again from {again}, or now by"
               f" caisson selftest --syscall-witness ebpf): {'; '.join(quick.failures)}")
    elif kept is not None:
        why = "caisson selftest --syscall-witness ebpf was not run on this machine"
    return Choice(witness="strace", why=f"default: strace: {why}",
                  notice=f"caisson record: syscall witness strace, not eBPF: {why}")


REQUALIFY_AFTER_NS = 24 * 3600 * 10**9
"""A failed qualification is run again at first use this long after it (ns): a host under
load at the time, or a fixed engine, is not kept on strace for good."""

_CHOSEN: dict[Path, Choice] = {}  # caisson home -> the choice this process made for it


def default_syscall_witness(say: Callable[[str], None] = lambda line: None) -> Choice:
    """The syscall witness of this process's runs when none is asked for: `choose_syscall_witness`
    with the eBPF qualification run at first use, once per caisson home and process (a
    study's cells share it). ``say`` is told the qualification's line, and the fall-back's
    notice once (each without a prefix: the caller says who speaks)."""
    where = home.caisson_home()
    if where not in _CHOSEN:
        from caisson.run.qualify import qualify_ebpf

        _CHOSEN[where] = choice = choose_syscall_witness(qualify=qualify_ebpf, say=say)
        if choice.notice is not None:
            say(choice.notice.removeprefix("caisson record: "))
    return _CHOSEN[where]
