"""The host's side of the chamber network: only the run's own witnesses answer.

Docker's ``Internal`` network has no route out, but the host itself is on it (the
gateway), and a packet from the bridge may name any of the host's addresses: any host
service listening on all addresses, or another run's witness on its own gateway (another
run's resolver is on port 53 too), would be reachable from the chamber, around the proxy.
`guard_bridge` inserts iptables INPUT rules for the run's bridge interface that accept
established traffic and the witnesses' ports on the run's own gateway address only, and
reject everything else (TCP with a reset, the rest with ICMP port unreachable), so a
direct attempt fails at once and is visible in the capture and in ``net.connect``.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from collections.abc import Iterable

from caisson.errors import ChamberError

__all__ = ["guard_bridge", "unguard_bridge", "unguard_interface"]


def _rules(bridge: str, gateway: str, allowed: Iterable[tuple[str, int]]) -> list[list[str]]:
    """The rules, in the order they must stand in the INPUT chain (first matches first)."""
    rules = [["-i", bridge, "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"]]
    for proto, port in sorted(set(allowed)):
        rules.append(["-i", bridge, "-d", f"{gateway}/32", "-p", proto, "--dport", str(port), "-j", "ACCEPT"])
    rules.append(["-i", bridge, "-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"])
    rules.append(["-i", bridge, "-j", "REJECT", "--reject-with", "icmp-port-unreachable"])
    return rules


def _iptables(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("iptables") or "/usr/sbin/iptables"
    return subprocess.run([exe, "-w", "10", *args], capture_output=True, text=True, timeout=30)


def guard_bridge(bridge: str, gateway: str, allowed: Iterable[tuple[str, int]]) -> list[list[str]]:
    """Insert the rules at the top of INPUT; returns them for `unguard_bridge`.

    The rules go in last first, each at position 1, so they stand in order whatever other
    recorders insert meanwhile (parallel cells of a study): inserted at positions 1, 2, ...
    instead, another run's rule landing in between pushes this run's next rule below it,
    and a reject could end above the accept of the proxy's port (seen: a Claude Code run
    that never reached its model). Until the accepts are in, the bridge rejects all; the
    chamber is not started yet.

    Args:
        bridge: the host interface of the run's network.
        gateway: the host's IPv4 address on it, where the run's witnesses listen.
        allowed: (protocol, port) pairs of the witnesses, e.g. ("tcp", 41234), ("udp", 53).

    Raises:
        ChamberError: iptables is missing or refused (the run must not start unguarded).
    """
    rules = _rules(bridge, gateway, allowed)
    done: list[list[str]] = []
    for rule in reversed(rules):
        proc = _iptables("-I", "INPUT", "1", *rule)
        if proc.returncode != 0:
            unguard_bridge(done)
            raise ChamberError(f"cannot guard the chamber network ({proc.stderr.strip() or 'iptables failed'}):"
                               " run as root with iptables installed")
        done.append(rule)
    return done[::-1]  # in the chain's order


def unguard_bridge(rules: list[list[str]]) -> None:
    """Delete rules inserted by `guard_bridge` (missing ones are ignored)."""
    for rule in rules:
        _iptables("-D", "INPUT", *rule)


def unguard_interface(bridge: str) -> int:
    """Delete every INPUT rule for an interface, e.g. those a killed recorder left behind.

    Args:
        bridge: the host interface of a run's network (its rules name it with ``-i``).

    Returns:
        How many rules were deleted (0 also when iptables is missing or refuses).
    """
    listed = _iptables("-S", "INPUT")
    if listed.returncode != 0 or not bridge:
        return 0
    deleted = 0
    for line in listed.stdout.splitlines():
        words = shlex.split(line)
        if words[:2] != ["-A", "INPUT"] or "-i" not in words or words[words.index("-i") + 1] != bridge:
            continue
        if _iptables("-D", "INPUT", *words[2:]).returncode == 0:
            deleted += 1
    return deleted
