"""The chamber's firewall rules stand in their order whatever other recorders insert meanwhile."""

from __future__ import annotations

import itertools
import math
import subprocess

from caisson.chamber import _firewall
from caisson.chamber._firewall import _rules, guard_bridge


class Chain:
    """An INPUT chain as iptables keeps it: ``-I INPUT N rule`` puts the rule at position N."""

    def __init__(self) -> None:
        self.rules: list[tuple[str, ...]] = []

    def apply(self, args: tuple[str, ...]) -> None:
        assert args[:2] == ("-I", "INPUT"), args
        self.rules.insert(int(args[2]) - 1, tuple(args[3:]))


def _calls(bridge: str, ports: list[tuple[str, int]], monkeypatch) -> list[tuple[str, ...]]:
    """The iptables calls `guard_bridge` makes for one run, in order."""
    calls: list[tuple[str, ...]] = []

    def record(*args: str) -> subprocess.CompletedProcess[str]:
        calls.append(args)
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(_firewall, "_iptables", record)
    guard_bridge(bridge, ports)
    return calls


def test_two_runs_guarding_at_once_keep_each_runs_rules_in_order_in_every_interleaving(monkeypatch):
    ports = {"caiA": [("tcp", 3128), ("udp", 53)], "caiB": [("tcp", 4000), ("udp", 53), ("tcp", 4001)]}
    calls = {bridge: _calls(bridge, p, monkeypatch) for bridge, p in ports.items()}
    a, b = calls["caiA"], calls["caiB"]
    interleavings = 0
    for positions in itertools.combinations(range(len(a) + len(b)), len(a)):  # where run A's calls fall
        chain, ia, ib = Chain(), iter(a), iter(b)
        for i in range(len(a) + len(b)):
            chain.apply(next(ia) if i in positions else next(ib))
        for bridge, allowed in ports.items():
            mine = [rule for rule in chain.rules if rule[1] == bridge]
            assert mine == [tuple(r) for r in _rules(bridge, allowed)], (bridge, positions)
        interleavings += 1
    assert interleavings == math.comb(len(a) + len(b), len(a)) == 462
