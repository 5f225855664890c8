"""The egress policy's names: one spelling of a host, the allow list, addresses never reached.

Standard library only: the proxy addon runs inside mitmdump and loads this file beside it
(`collectors.proxy.addon`), the DNS witness imports it, and so every policy check and every
lookup (DNS policy and static answers, proxy policy, upstream rewrites) compares hosts
through the one function `canonical_host`.

Allow entries: ``name`` or ``*.suffix`` (any name strictly below ``suffix``, as a DNS
wildcard matches, RFC 4592 §2.1.1), optionally with ``:port``. Without a port an entry
allows `DEFAULT_PORTS` (HTTP and HTTPS). The resolver ignores ports; the proxy checks both.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Final, NamedTuple

__all__ = ["DEFAULT_PORTS", "AllowEntry", "canonical_host", "forbidden_address", "host_allowed", "ip_literal",
           "parse_allow", "split_authority", "target_allowed"]

DEFAULT_PORTS: Final = (80, 443)
"""Ports an allow entry without ``:port`` lets the proxy reach: HTTP and HTTPS."""

_UPPER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_DIGITS = {8: set("01234567"), 10: set("0123456789"), 16: set("0123456789abcdefABCDEF")}


def canonical_host(host: str) -> str:
    """The spelling of ``host`` that every policy check and lookup compares.

    - ASCII letters lower-cased (names compare case-insensitively, RFC 4343 §3); other
      characters are kept, so a name that is not ASCII never matches an ASCII entry.
    - One trailing dot dropped (the root label of an absolute name, RFC 1034 §3.1):
      ``a.example.`` is ``a.example``; ``a.example..`` (an empty label) is kept, and
      matches nothing. The result is its own canonical spelling.
    - An IP address in any spelling the host's resolver takes as one is written as
      `ipaddress` writes it: IPv6 brackets dropped (``[::1]`` is ``::1``), an IPv4-mapped
      IPv6 address as its IPv4 address (``::ffff:127.0.0.1`` is ``127.0.0.1``), and IPv4
      in the forms of inet_aton(3) (``2130706433``, ``0x7f.1``, ``0177.0.0.1``, ``127.1``)
      as a dotted quad.
    """
    name = host.translate(_UPPER)
    if name.endswith(".") and not name.endswith(".."):
        name = name[:-1] or "."
    address = _address(name)
    return name if address is None else str(address)


def ip_literal(host: str) -> str | None:
    """``host`` as `canonical_host` writes an IP address, or None when it is a name."""
    address = _address(canonical_host(host))
    return None if address is None else str(address)


def _address(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """``name`` as an IP address, or None when it is not one in any accepted spelling."""
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    if ":" in name:
        try:
            v6 = ipaddress.IPv6Address(name)
        except ValueError:
            return None
        return v6.ipv4_mapped or v6
    return _inet_aton(name)


def _inet_aton(name: str) -> ipaddress.IPv4Address | None:
    """inet_aton(3)'s IPv4 forms (a, a.b, a.b.c, a.b.c.d; each part decimal, 0x hex or 0
    octal; the last part fills the remaining bytes), exactly: no trailing characters."""
    parts = name.split(".")
    if not name or len(parts) > 4:
        return None
    values = []
    for part in parts:
        if part[:2] in ("0x", "0X"):
            digits, base = part[2:], 16
        elif len(part) > 1 and part[0] == "0":
            digits, base = part[1:], 8
        else:
            digits, base = part, 10
        if not digits or not set(digits) <= _DIGITS[base]:
            return None
        values.append(int(digits, base))
    *head, last = values
    if any(v > 255 for v in head) or last >= 1 << (8 * (4 - len(head))):
        return None
    number = last
    for i, v in enumerate(head):
        number |= v << (8 * (3 - i))
    return ipaddress.IPv4Address(number)


def forbidden_address(host: str) -> str | None:
    """Why the proxy must never connect to ``host`` when it is an IP address: the host's
    own side (loopback, unspecified, ``0.0.0.0/8``, which Linux routes to the host itself),
    link-local, multicast or broadcast. None for any other address, and for a name.

    The host's other own addresses (its interfaces) are the caller's to test: they are
    a property of the machine, not of the address.
    """
    address = _address(canonical_host(host))
    if address is None:
        return None
    if address.is_loopback:
        return "loopback"
    if address.is_unspecified or (address.version == 4 and address in _THIS_NETWORK):
        return "unspecified (the host itself)"
    if address.is_link_local:
        return "link-local"
    if address.is_multicast:
        return "multicast"
    if address.version == 4 and address == _BROADCAST:
        return "broadcast"
    return None


_THIS_NETWORK = ipaddress.IPv4Network("0.0.0.0/8")  # RFC 1122 §3.2.1.3 "this host on this network"
_BROADCAST = ipaddress.IPv4Address("255.255.255.255")


class AllowEntry(NamedTuple):
    """One parsed allow entry: ``name`` (canonical) or ``*.suffix``, and its port or None."""

    pattern: str
    port: int | None = None

    def matches(self, host: str) -> bool:
        """Whether canonical ``host`` is this entry's name, or strictly below its suffix."""
        if self.pattern.startswith("*."):
            suffix = self.pattern[1:]
            return host.endswith(suffix) and len(host) > len(suffix)
        return host == self.pattern


def parse_allow(entries: Iterable[str]) -> tuple[AllowEntry, ...]:
    """Allow entries (``name``, ``*.suffix``, either with ``:port``; blanks skipped).

    Raises:
        ValueError: an entry with an empty name or a port that is not 1-65535.
    """
    out = []
    for raw in entries:
        entry = raw.strip()
        if not entry:
            continue
        try:
            name, port = split_authority(entry)
        except ValueError:
            name, port = "", None
        wildcard = name.startswith("*.")
        pattern = canonical_host(name[2:] if wildcard else name)
        if not pattern or pattern == "." or (port is not None and not 0 < port < 65536):
            raise ValueError(f"allow entry {raw!r}: expected name, *.suffix, or either with :port (1-65535)")
        out.append(AllowEntry("*." + pattern if wildcard else pattern, port))
    return tuple(out)


def split_authority(authority: str) -> tuple[str, int | None]:
    """``host[:port]`` (IPv6 in brackets) -> (host, port or None).

    Raises:
        ValueError: a port that is not decimal digits.
    """
    if authority.startswith("["):
        end = authority.find("]")
        if end > 0 and authority[end + 1:end + 2] in ("", ":"):
            host, rest = authority[:end + 1], authority[end + 2:]
            return host, _port(rest, authority) if authority[end + 1:end + 2] == ":" else None
    host, colon, port = authority.rpartition(":")
    if not colon or ":" in host:  # no port, or a bare IPv6 address
        return authority, None
    return host, _port(port, authority)


def _port(text: str, authority: str) -> int:
    if not text.isascii() or not text.isdigit():
        raise ValueError(f"{authority!r}: port {text!r} is not a number")
    return int(text)


def host_allowed(host: str, allow: Iterable[AllowEntry]) -> bool:
    """Whether ``host`` (any spelling) matches an entry, whatever the entry's port (DNS)."""
    name = canonical_host(host)
    return any(entry.matches(name) for entry in allow)


def target_allowed(host: str, port: int, allow: Iterable[AllowEntry]) -> bool:
    """Whether the proxy may reach ``host`` (any spelling) on ``port``: an entry matches
    the host and names that port, or names none and the port is in `DEFAULT_PORTS`."""
    name = canonical_host(host)
    return any(entry.matches(name) and (port == entry.port if entry.port is not None else port in DEFAULT_PORTS)
               for entry in allow)
