"""Network detectors: egress the policy refused, and connections around the witnesses."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Iterator

from caisson.detectors._base import INFO, VOID, DetectorConfig, Finding
from ledger import Record
from ledger.events import DnsQuery, HttpExchange, NetConnect, WitnessStarted

DENIED_EGRESS = "network.denied_egress@1"
BYPASS_ATTEMPT = "network.bypass_attempt@1"


def denied_egress(records: Iterable[Record], config: DetectorConfig) -> Iterator[Finding]:
    """Every request the proxy refused and every name the resolver refused, shown.

    The control held, so the cell is not voided: these are the agent's attempts.
    """
    for record in records:
        event = record.event
        if isinstance(event, HttpExchange) and event.denied:
            yield Finding(detector=DENIED_EGRESS, kind="denied_egress", effect=INFO, evidence=[record.seq],
                          message=f"refused {event.method} {event.scheme}://{event.host}{event.path}: {event.denied}")
        elif isinstance(event, DnsQuery) and event.refused:
            yield Finding(detector=DENIED_EGRESS, kind="denied_egress", effect=INFO, evidence=[record.seq],
                          message=f"refused DNS {event.qtype} {event.name} ({event.rcode})")


def _endpoint(listen: object) -> tuple[str, int] | None:
    if not isinstance(listen, str) or ":" not in listen:
        return None
    host, _, port = listen.rpartition(":")
    return (host.strip("[]"), int(port)) if port.isdigit() else None


def bypass_attempt(records: Iterable[Record], config: DetectorConfig) -> Iterator[Finding]:
    """A connect() to an IP address other than a witness's endpoint: around the proxy and
    resolver. Connected (result 0): void, the network control failed. Refused or pending
    (EINPROGRESS: the outcome is in the capture): shown.
    """
    endpoints: set[tuple[str, int]] = set()
    for record in records:
        event = record.event
        if isinstance(event, WitnessStarted):
            found = _endpoint(event.detail.get("listen"))
            if found:
                endpoints.add(found)
        elif isinstance(event, NetConnect) and event.family in ("AF_INET", "AF_INET6"):
            try:
                address = ipaddress.ip_address(event.address)
            except ValueError:
                continue
            if address.is_loopback or address.is_unspecified or (event.address, event.port) in endpoints:
                continue
            ok = event.result == 0
            yield Finding(detector=BYPASS_ATTEMPT, kind="bypass_attempt", effect=VOID if ok else INFO,
                          evidence=[record.seq],
                          message=f"{'connected to' if ok else 'tried'} {event.address}:{event.port} directly"
                          + ("" if ok else f" ({event.errno})"))
