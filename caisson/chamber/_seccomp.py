"""The chamber's own seccomp profile: the engine's default, plus what the witness audit denies.

`seccomp_profile(deny, action=...)` returns a `SeccompProfile`: the base (Docker's default,
``moby_seccomp_default.json`` beside this module, `BASE_PROFILE`) with every syscall of
``deny`` refused (``trace``: stopped at the tracer, which fails it with EPERM and prints it;
``errno``: EPERM from the kernel) and the two calls of `REFUSED_BY_ARGS` refused by their
arguments; the same arguments give the same JSON bytes, whose sha256 ``run.started``
records. A bad ``action`` raises ValueError. Why each rule, and what each witness sees of a
refusal: docs/chamber.md, "The seccomp profile".
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
"""The calls refused by their arguments (docs/chamber.md), as the manifest names them."""


class SeccompProfile(msgspec.Struct, frozen=True, kw_only=True):
    """A seccomp profile as the engine takes it, and what ``run.started`` says of it.

    Attributes:
        json: the profile, compact JSON text (what ``seccomp=`` carries).
        sha256: hex digest of ``json``'s UTF-8 bytes.
        denied: the syscalls refused on top of the base, sorted.
        action: ``trace`` or ``errno`` (docs/chamber.md, "The seccomp profile").
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
    """The base profile with ``deny`` refused (docs/chamber.md, "The seccomp profile").

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
