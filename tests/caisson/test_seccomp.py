"""The chamber's own seccomp profile: the engine's default as data, plus the audit's denials."""

from __future__ import annotations

import hashlib
import json

import pytest

from caisson.chamber import BASE_PROFILE, seccomp_profile
from caisson.chamber._seccomp import _BASE_FILE as BASE_FILE, CLONE_UNTRACED
from collectors.strace import DENIED_SYSCALLS
from ledger.events import SeccompFacts


def _rules(profile_json: str) -> dict[str, list[dict]]:
    by_name: dict[str, list[dict]] = {}
    for rule in json.loads(profile_json)["syscalls"]:
        for name in rule["names"]:
            by_name.setdefault(name, []).append(rule)
    return by_name


@pytest.mark.parametrize("action, seccomp_action", [("trace", "SCMP_ACT_TRACE"), ("errno", "SCMP_ACT_ERRNO")])
def test_each_denied_call_has_one_rule_refusing_it(action, seccomp_action):
    profile = seccomp_profile(DENIED_SYSCALLS, action=action)
    rules = _rules(profile.json)
    for name in DENIED_SYSCALLS:  # the base allowed some (name_to_handle_at, fanotify_mark, with caps: mount...)
        assert [(r["action"], r["errnoRet"]) for r in rules[name]] == [(seccomp_action, 1)], name
    assert profile.sha256 == hashlib.sha256(profile.json.encode()).hexdigest()
    assert profile.manifest() == SeccompFacts(sha256=profile.sha256, base=BASE_PROFILE,
                                              denied=sorted(DENIED_SYSCALLS), action=action,
                                              refused_by_args=["seccomp: SECCOMP_FILTER_FLAG_NEW_LISTENER",
                                                               "clone: CLONE_UNTRACED"])


@pytest.mark.parametrize("action", ["trace", "errno"])
def test_a_listener_and_an_untraced_clone_are_refused_by_their_arguments(action):
    """Only an agent fighting its witnesses needs them (issue 28, item 1): a seccomp call asking
    for a user-notification listener, a clone with CLONE_UNTRACED, fall to the base's default
    (EPERM); filters without a listener and plain clones stay allowed."""
    rules = _rules(seccomp_profile(DENIED_SYSCALLS, action=action).json)
    assert rules["seccomp"] == [{"names": ["seccomp"], "action": "SCMP_ACT_ALLOW", "comment": rules["seccomp"][0][
        "comment"], "args": [{"index": 1, "value": 8, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}]}]
    masks = [a["value"] for r in rules["clone"] if r["action"] == "SCMP_ACT_ALLOW" and "args" in r
             for a in r["args"]]
    assert masks and all(m & CLONE_UNTRACED and m & 0x10000000 for m in masks)  # CLONE_NEWUSER still in
    base = _rules(json.dumps({"syscalls": json.loads(BASE_FILE.read_text())["syscalls"]}))
    assert all(not (a["value"] & CLONE_UNTRACED) for r in base["clone"] for a in r.get("args", ()))


def test_the_base_is_the_engines_default_and_io_uring_is_refused_by_it_too():
    base = seccomp_profile((), action="errno")
    data = json.loads(base.json)
    assert data["defaultAction"] == "SCMP_ACT_ERRNO" and data["defaultErrnoRet"] == 1
    rules = _rules(base.json)
    assert "io_uring_setup" not in rules  # the default (moby/profiles v0.2.3) leaves it out: refused
    assert rules["openat"][0]["action"] == "SCMP_ACT_ALLOW"
    assert seccomp_profile(DENIED_SYSCALLS, action="trace") == seccomp_profile(
        reversed(DENIED_SYSCALLS), action="trace")  # same calls, same bytes
    with pytest.raises(ValueError, match="trace"):
        seccomp_profile((), action="kill")
