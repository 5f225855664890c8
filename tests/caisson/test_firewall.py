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


GATEWAYS = {"caiA": "172.18.0.1", "caiB": "172.19.0.1"}


def _calls(bridge: str, ports: list[tuple[str, int]], monkeypatch) -> list[tuple[str, ...]]:
    """The iptables calls `guard_bridge` makes for one run, in order."""
    calls: list[tuple[str, ...]] = []

    def record(*args: str) -> subprocess.CompletedProcess[str]:
        calls.append(args)
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(_firewall, "_iptables", record)
    guard_bridge(bridge, GATEWAYS[bridge], ports)
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
            assert mine == [tuple(r) for r in _rules(bridge, GATEWAYS[bridge], allowed)], (bridge, positions)
        interleavings += 1
    assert interleavings == math.comb(len(a) + len(b), len(a)) == 462


def test_a_bridge_accepts_the_witnesses_ports_on_its_own_gateway_only(monkeypatch):
    """Another run's resolver listens on port 53 of its own gateway, the host's services on
    any of its addresses: a chamber's packets to those, on a witness's port, are rejected."""
    rules = [list(call[3:]) for call in reversed(_calls("caiA", [("tcp", 3128), ("udp", 53)], monkeypatch))]
    accepts = [r for r in rules if "--dport" in r]
    assert accepts == [["-i", "caiA", "-d", "172.18.0.1/32", "-p", "tcp", "--dport", "3128", "-j", "ACCEPT"],
                       ["-i", "caiA", "-d", "172.18.0.1/32", "-p", "udp", "--dport", "53", "-j", "ACCEPT"]]
    assert rules[0] == ["-i", "caiA", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"]
    assert rules[-2:] == [["-i", "caiA", "-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"],
                          ["-i", "caiA", "-j", "REJECT", "--reject-with", "icmp-port-unreachable"]]
