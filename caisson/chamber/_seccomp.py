"""The chamber's own seccomp profile: the engine's default, plus what the witness audit denies.

The base is Docker's default profile as data (``moby_seccomp_default.json`` beside this
module: ``profiles/seccomp/default.json`` of github.com/moby/profiles v0.2.3, as vendored by
moby/moby; Apache License 2.0, copyright Docker, Inc.). Shipping it makes the chamber's
filter independent of the engine's version: Debian 12's engine (20.10) predates the
default's io_uring block, so its built-in profile lets io_uring through.

On top of the base, every syscall of ``deny`` is refused whatever the base says (see the
audit in docs/architecture.md):

- ``action="trace"`` (the strace witness runs): ``SCMP_ACT_TRACE``. The kernel stops the
  call at the tracer, which fails it with EPERM (strace's ``-e inject``) and prints it, so
  the attempt is in the ledger. A process no tracer holds gets ENOSYS: refused either way.
  (``SCMP_ACT_ERRNO`` would hide the attempt: of two seccomp filters the higher-precedence
  action wins, ERRNO over TRACE, so strace's ``--seccomp-bpf`` filter never stops on it;
  seccomp(2), "Filter return values").
- ``action="errno"`` (no tracer): ``SCMP_ACT_ERRNO`` with EPERM, refused by the kernel.
  With no tracer there is nothing to see, and no process may play tracer and let it run.

Two calls are refused by their arguments, whatever ``deny`` says, because only an agent
that fights its witnesses needs them (both fail with EPERM, the base's default action):

- ``seccomp`` with ``SECCOMP_FILTER_FLAG_NEW_LISTENER``: a filter of the agent's own whose
  ``SECCOMP_RET_USER_NOTIF`` outranks the tracer's ``SECCOMP_RET_TRACE``, answered by a
  supervisor with ``SECCOMP_USER_NOTIF_FLAG_CONTINUE``, runs the call unseen by strace
  (seccomp(2), "Filter return values"; seccomp_unotify(2)). Filters without a listener
  stay allowed: agents sandbox themselves with them.
- ``clone`` with ``CLONE_UNTRACED``: a child the tracer cannot follow (clone(2)). The base
  already allows ``clone`` only without namespace flags; the flag joins that mask. ``clone3``
  is refused by the base (ENOSYS) unless CAP_SYS_ADMIN, which the chamber never grants.

The refusal comes from the kernel's filter, so the strace witness does not see these
attempts (ERRNO outranks TRACE); the eBPF witness sees each as a call that exited with
EPERM and never entered, and the procfs cross-check (``witness.unseen_process``) covers a
chamber whose profile was weakened.

The engine is handed the profile's JSON text (``HostConfig.SecurityOpt``:
``seccomp=<json>``, Docker Engine API, "Create a container"); ``run.started`` records its
sha256 so a ledger says exactly which filter its chamber had.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

import msgspec

from ledger.events import SeccompFacts

__all__ = ["BASE_PROFILE", "CLONE_UNTRACED", "REFUSED_BY_ARGS", "SECCOMP_FILTER_FLAG_NEW_LISTENER", "SeccompProfile",
           "seccomp_profile"]

BASE_PROFILE = "moby/profiles seccomp v0.2.3 default.json"
"""Where the base of the profile comes from (Apache License 2.0)."""
_BASE_FILE = Path(__file__).with_name("moby_seccomp_default.json")
_EPERM = 1
SECCOMP_FILTER_FLAG_NEW_LISTENER = 1 << 3
"""seccomp(2)'s flag that makes a user-notification listener fd (linux/seccomp.h)."""
CLONE_UNTRACED = 0x00800000
"""clone(2)'s flag that keeps a tracer from following the child (linux/sched.h)."""
REFUSED_BY_ARGS = ("seccomp: SECCOMP_FILTER_FLAG_NEW_LISTENER", "clone: CLONE_UNTRACED")
"""The calls refused by their arguments (see the module docstring), as the manifest names them."""


class SeccompProfile(msgspec.Struct, frozen=True, kw_only=True):
    """A seccomp profile as the engine takes it, and what ``run.started`` says of it.

    Attributes:
        json: the profile, compact JSON text (what ``seccomp=`` carries).
        sha256: hex digest of ``json``'s UTF-8 bytes.
        denied: the syscalls refused on top of the base, sorted.
        action: ``trace`` or ``errno`` (see the module docstring).
    """

    json: str
    sha256: str
    denied: tuple[str, ...]
    action: str

    def manifest(self) -> SeccompFacts:
        """The ``run.started`` ``seccomp`` field: digest, base, denied calls, action."""
        return SeccompFacts(sha256=self.sha256, base=BASE_PROFILE, denied=list(self.denied),
                            action=self.action,  # type: ignore[arg-type]  # seccomp_profile checks it
                            refused_by_args=list(REFUSED_BY_ARGS))


@cache
def _base() -> dict[str, Any]:
    return json.loads(_BASE_FILE.read_text())


def _untraced_refused(rule: dict[str, Any]) -> dict[str, Any]:
    """The base's rule allowing ``clone`` only without namespace flags, with CLONE_UNTRACED in
    its mask (any other rule unchanged)."""
    if rule["names"] != ["clone"] or rule.get("action") != "SCMP_ACT_ALLOW" or not rule.get("args"):
        return rule
    args = [{**a, "value": a["value"] | CLONE_UNTRACED} if a.get("op") == "SCMP_CMP_MASKED_EQ" else a
            for a in rule["args"]]
    return {**rule, "args": args}


def seccomp_profile(deny: Iterable[str], *, action: str) -> SeccompProfile:
    """The base profile with ``deny`` refused (see the module docstring).

    Args:
        deny: syscall names as the kernel spells them (``io_uring_setup``).
        action: ``trace`` (a tracer that fails them visibly runs in the chamber) or
            ``errno`` (the kernel fails them with EPERM).

    Returns:
        The profile; the same arguments always give the same bytes and digest.

    Raises:
        ValueError: ``action`` is neither ``trace`` nor ``errno``.
    """
    if action not in ("trace", "errno"):
        raise ValueError(f"seccomp action must be 'trace' or 'errno', got {action!r}")
    denied = tuple(sorted(set(deny)))
    base = _base()
    rules = []
    for rule in base["syscalls"]:  # the base's own rules for these calls go: one action each
        names = [n for n in rule["names"] if n not in denied and n != "seccomp"]
        if names:
            rules.append(_untraced_refused({**rule, "names": names}))
    if "seccomp" not in denied:
        rules.append({"names": ["seccomp"], "action": "SCMP_ACT_ALLOW",
                      "args": [{"index": 1, "value": SECCOMP_FILTER_FLAG_NEW_LISTENER, "valueTwo": 0,
                                "op": "SCMP_CMP_MASKED_EQ"}],
                      "comment": "caisson: a filter of the agent's own, without a user-notification listener"})
    if denied:
        rule = {"names": list(denied), "comment": "caisson: syscalls the strace witness cannot see through"}
        rule.update({"action": "SCMP_ACT_TRACE", "errnoRet": _EPERM} if action == "trace"
                    else {"action": "SCMP_ACT_ERRNO", "errnoRet": _EPERM})
        rules.append(rule)
    text = json.dumps({**base, "syscalls": rules}, sort_keys=True, separators=(",", ":"))
    return SeccompProfile(json=text, sha256=hashlib.sha256(text.encode()).hexdigest(), denied=denied,
                          action=action)
