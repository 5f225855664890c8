"""The egress policy's one spelling of a host, its allow entries, and the addresses never reached;
the DNS witness, the proxy's policy and its upstream rewrites all compare through it."""

from __future__ import annotations

import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import collectors.dns
import collectors.egress
from collectors.dns import DnsPolicy
from collectors.egress import (AllowEntry, canonical_host, forbidden_address, host_allowed, ip_literal, parse_allow,
                               split_authority, target_allowed)

LOOPBACK_SPELLINGS = ["127.0.0.1", "2130706433", "0x7f.1", "0x7F000001", "0177.0.0.1", "0177.1", "127.1", "127.0.1",
                      "[::ffff:127.0.0.1]", "::ffff:7f00:1", "127.0.0.1.", "[::1]", "::1", "127.255.255.254"]


@pytest.mark.parametrize("spelling", LOOPBACK_SPELLINGS)
def test_every_spelling_of_loopback_is_loopback(spelling):
    assert forbidden_address(spelling) == "loopback"
    assert ip_literal(spelling) in ("127.0.0.1", "::1", "127.255.255.254")


@pytest.mark.parametrize(("host", "why"), [
    ("0.0.0.0", "unspecified (the host itself)"), ("0", "unspecified (the host itself)"), ("::", "unspecified (the host itself)"),
    ("0.1.2.3", "unspecified (the host itself)"), ("169.254.169.254", "link-local"), ("[fe80::1]", "link-local"),
    ("fe80::1%eth0", "link-local"), ("224.0.0.1", "multicast"), ("ff02::1", "multicast"),
    ("255.255.255.255", "broadcast"), ("0xa9fea9fe", "link-local"),
    ("10.0.0.5", None), ("192.0.2.2", None), ("2001:db8::1", None), ("api.anthropic.com", None), ("localhost", None),
])
def test_forbidden_addresses_by_kind(host, why):
    assert forbidden_address(host) == why


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="0123456789abcdefxX.", min_size=1, max_size=16))
def test_ipv4_spellings_read_as_the_c_librarys_inet_aton_reads_them(text):
    """Where glibc's inet_aton (what getaddrinfo falls back to for a numeric host) takes
    ``text`` as an address, it is that address here; where it does not, it is not one
    here either (a trailing dot, which names an absolute name, aside)."""
    try:
        theirs = socket.inet_ntoa(socket.inet_aton(text))
    except OSError:
        theirs = None
    ours = ip_literal(text) if ":" not in text else None
    if text.endswith(".") and not text.endswith(".."):
        return  # canonical_host drops one root dot first; inet_aton refuses it: ours is stricter
    assert ours == theirs


@pytest.mark.parametrize(("spelling", "canonical"), [
    ("API.Anthropic.COM", "api.anthropic.com"), ("api.anthropic.com.", "api.anthropic.com"),
    ("api.anthropic.com..", "api.anthropic.com.."), (".", "."), ("", ""), ("İ.example", "İ.example"),
    ("[2001:DB8::1]", "2001:db8::1"), ("::FFFF:10.0.0.5", "10.0.0.5"),
])
def test_one_spelling_of_a_host(spelling, canonical):
    assert canonical_host(spelling) == canonical
    assert canonical_host(canonical_host(spelling)) == canonical_host(spelling)  # idempotent


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=30) | st.ip_addresses().map(str) | st.ip_addresses(v=6).map(lambda a: f"[{a}]"))
def test_canonical_host_is_its_own_canonical_spelling_and_never_raises(text):
    once = canonical_host(text)
    assert canonical_host(once) == once
    forbidden_address(text)


def test_allow_entries_match_names_wildcards_and_ports():
    allow = parse_allow(["api.anthropic.com", "*.OpenAI.com.", "git.example:9418", " ", "[::1]:8080"])
    assert allow == (AllowEntry("api.anthropic.com"), AllowEntry("*.openai.com"), AllowEntry("git.example", 9418),
                     AllowEntry("::1", 8080))
    assert target_allowed("API.anthropic.com.", 443, allow) and target_allowed("api.anthropic.com", 80, allow)
    assert not target_allowed("api.anthropic.com", 22, allow) and not target_allowed("api.anthropic.com", 8443, allow)
    assert target_allowed("a.b.openai.com", 443, allow) and not target_allowed("openai.com", 443, allow)
    assert not target_allowed("evilopenai.com", 443, allow) and not target_allowed("api.anthropic.com.evil.net", 443, allow)
    assert target_allowed("git.example", 9418, allow) and not target_allowed("git.example", 443, allow)
    assert host_allowed("git.example", allow) and not host_allowed("x", ())  # the resolver ignores ports
    assert target_allowed("[::1]", 8080, allow) and target_allowed("::1", 8080, allow)


def test_authority_split():
    assert split_authority("a.example:443") == ("a.example", 443)
    assert split_authority("a.example") == ("a.example", None)
    assert split_authority("[::1]:9") == ("[::1]", 9) and split_authority("[::1]") == ("[::1]", None)
    assert split_authority("::1") == ("::1", None)
    with pytest.raises(ValueError):
        split_authority("a.example:https")


# --- one function for the DNS policy, the proxy policy and the upstream rewrite -----------


def test_the_dns_policy_the_proxy_and_its_rewrites_use_the_one_normaliser():
    from collectors.proxy import addon

    assert collectors.dns.canonical_host is collectors.egress.canonical_host
    assert addon.canonical_host is collectors.egress.canonical_host
    assert addon.egress is collectors.egress  # imported, not copied, when the addon is imported as a module


@pytest.mark.parametrize("spelling", ["API.ANTHROPIC.COM", "api.anthropic.com.", "Api.Anthropic.Com."])
def test_another_spelling_is_the_same_host_to_the_dns_policy_the_proxy_and_the_rewrite(spelling):
    from collectors.proxy.addon import CaissonWitness, parse_upstream

    policy = DnsPolicy(allow=["api.anthropic.com"], static={"Static.Example.": ["10.0.0.5"]})
    assert policy.allows(spelling) and policy.allows("static.example") and policy.addresses("STATIC.example") == ["10.0.0.5"]
    witness = CaissonWitness()
    witness.allow = parse_allow(["api.anthropic.com"])
    assert witness.refusal(spelling, 443, {"Host header": spelling.lower(), "TLS SNI": spelling}) is None
    assert parse_upstream(f"{spelling}=127.0.0.1:9") == {"api.anthropic.com": (None, "127.0.0.1", 9)}


def test_the_proxy_refuses_what_disagrees_with_where_it_goes():
    from collectors.proxy.addon import CaissonWitness

    witness = CaissonWitness()
    witness.allow = parse_allow(["api.anthropic.com", "*.fronted.test"])
    assert "host 127.0.0.1 is not in the allow list" in witness.refusal("127.0.0.1", 443, {})
    assert "port 22 of host api.anthropic.com" in witness.refusal("api.anthropic.com", 22, {})
    for what, value in (("Host header", "evil.example"), ("TLS SNI", "a.fronted.test"),
                        ("request target", "evil.example:443"), ("Host header", "api.anthropic.com:8443"),
                        ("Host header", "api.anthropic.com,evil.example")):
        assert f"{what} {value!r} disagrees" in witness.refusal("api.anthropic.com", 443, {what: value})
    assert "is not a host" in witness.refusal("api.anthropic.com", 443, {"Host header": "api.anthropic.com:x"})
    assert witness.refusal("api.anthropic.com", 443, {"Host header": "api.anthropic.com:443", "TLS SNI": None}) is None
