"""Issue 20, review P7: `fetch` refuses every address that can reach a loopback, private,
link-local or otherwise non-public IPv4 or IPv6 address, the IPv6 forms that embed one
included (actors/hands/addresses.py, docs/SEARCH.md "Addresses").

A table: each non-public IPv4 address, in every IPv6 form that can carry it (mapped,
IPv4-compatible, SIIT, NAT64 well-known and local-use, 6to4, Teredo, ISATAP), is refused,
as the attacker plays it: the model asks `fetch` for the address written in the URL, or
for a name whose DNS answer is that address. A public IPv4 in a form that is decoded
stays public; a form that is refused whole is refused whatever it carries."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address

import pytest

from everchat.actors.hands.web import WebTools, is_public

NOT_PUBLIC_V4 = [
    "127.0.0.1", "127.255.0.9",  # loopback
    "10.1.2.3", "172.16.5.4", "172.31.255.254", "192.168.1.1",  # private
    "169.254.169.254",  # link-local: the cloud metadata service
    "100.64.0.1", "100.127.255.254",  # shared (CGNAT, the Tailscale range)
    "0.0.0.0", "0.1.2.3",  # this network
    "198.18.0.1", "198.19.255.1",  # benchmarking
    "240.0.0.1", "255.255.255.255",  # reserved, broadcast
    "224.0.0.251", "239.255.255.250",  # multicast
    "192.0.0.8", "192.0.2.1", "198.51.100.7", "203.0.113.9", "192.88.99.1",  # IETF, documentation, 6to4 relay
]
PUBLIC_V4 = ["8.8.8.8", "93.184.216.34", "1.1.1.1"]

_ISATAP_PREFIX = 0x2001_0470_0001_0000 << 64  # a global /64 (Hurricane Electric's block)


def _rfc6052_48(v4: int) -> int:
    """NAT64 local-use 64:ff9b:1::/48 with the IPv4 placed as RFC 6052 says for a /48:
    bits 48-63 its first half, bits 64-71 zero, bits 72-87 its second half."""
    return (0x0064_ff9b_0001 << 80) | ((v4 >> 16) << 64) | ((v4 & 0xFFFF) << 40)


def embeddings(v4: str) -> dict[str, str]:
    """Every IPv6 form that carries the IPv4 address `v4`."""
    n = int(IPv4Address(v4))
    forms = {
        "mapped": (0xFFFF << 32) | n,
        "compatible": n,
        "SIIT": (0xFFFF << 48) | n,
        "NAT64": (0x64_ff9b << 96) | n,
        "NAT64 local-use /48": _rfc6052_48(n),
        "6to4": (0x2002 << 112) | (n << 80) | 1,
        "Teredo client": (0x2001_0000 << 96) | (int(IPv4Address("65.54.227.120")) << 64) | (n ^ 0xFFFFFFFF),
        "Teredo server": (0x2001_0000 << 96) | (n << 64) | 0x8000_0000_9999_9999,
        "ISATAP": _ISATAP_PREFIX | (0x5EFE << 32) | n,
        "ISATAP u-bit": _ISATAP_PREFIX | (0x0200_5EFE << 32) | n,
    }
    spelled = {name: str(IPv6Address(value)) for name, value in forms.items()}
    spelled["mapped, dotted"] = f"::ffff:{v4}"
    spelled["compatible, dotted"] = f"::{v4}"
    spelled["SIIT, dotted"] = f"::ffff:0:{v4}"
    spelled["NAT64, dotted"] = f"64:ff9b::{v4}"
    return spelled


NOT_PUBLIC_V6 = [
    "::", "::1", "fe80::1", "fe80::1%eth0", "fec0::1", "feff::1",  # unspecified, loopback, link- and site-local
    "fc00::1", "fd12:3456::1",  # unique local
    "ff02::1", "ff0e::1",  # multicast
    "100::1", "2001:db8::1", "3fff::1", "5f00::1", "2001:2::1",  # discard, documentation, SRv6, IETF
    "4000::1", "e000::1",  # not global unicast (outside 2000::/3)
]
PUBLIC_V6 = ["2606:4700:4700::1111", "2001:4860:4860::8888", "2a00:1450:4001:80b::200e"]
REFUSED_WHOLE = ("compatible", "compatible, dotted", "NAT64 local-use /48", "Teredo client", "Teredo server")

TABLE = (
    [(v4, v4, False) for v4 in NOT_PUBLIC_V4]
    + [(f"{form} of {v4}", spelled, False) for v4 in NOT_PUBLIC_V4 for form, spelled in embeddings(v4).items()]
    + [(v6, v6, False) for v6 in NOT_PUBLIC_V6]
    + [(v4, v4, True) for v4 in PUBLIC_V4]
    + [(f"{form} of {v4}", spelled, form not in REFUSED_WHOLE)
       for v4 in PUBLIC_V4 for form, spelled in embeddings(v4).items()]
    + [(v6, v6, True) for v6 in PUBLIC_V6]
)
NOT_PUBLIC = [(what, address) for what, address, public in TABLE if not public]


@pytest.mark.parametrize("what, address, public", TABLE, ids=[row[0] for row in TABLE])
def test_is_public_knows_every_range_and_every_embedding(what, address, public):
    assert is_public(address) is public


@pytest.mark.parametrize("text", ["example.com", "", "127.0.0.1:80", "[::1]", "::ffff:127.0.0.256"])
def test_what_is_not_an_address_is_not_public(text):
    assert is_public(text) is False


def _refused(outcome, address: str) -> bool:
    return outcome.is_error and f"{address}, which is not a public address: refused" in outcome.text


REVIEW_FORMS = ["64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe", "::127.0.0.1", "::ffff:0:7f00:1", "fec0::1",
                "::ffff:100.64.0.1", "::ffff:7f00:1", "2002:7f00:1::1", "64:ff9b:1:7f00:0:100::"]


@pytest.mark.parametrize("address", REVIEW_FORMS)
def test_fetch_refuses_a_url_naming_an_embedded_private_address_before_connecting(address):
    tools = WebTools(deadline=2)  # the default resolver: the literal is the address
    connected: list = []
    tools._connect = lambda *args: connected.append(args)  # noqa: SLF001 (a refusal comes first)
    outcome = tools.call("fetch", {"url": f"http://[{address}]:8080/latest/meta-data/"})
    assert connected == [] and outcome.is_error and "which is not a public address: refused" in outcome.text


@pytest.mark.parametrize("what, address", NOT_PUBLIC, ids=[row[0] for row in NOT_PUBLIC])
def test_fetch_refuses_a_name_whose_dns_answer_is_not_public(what, address):
    """DNS rebinding's move: a public-looking name answered with a private address."""
    connected: list = []
    tools = WebTools(deadline=2, resolve=lambda host, port: [address])
    tools._connect = lambda *args: connected.append(args)  # noqa: SLF001
    outcome = tools.call("fetch", {"url": "http://rebind.example/"})
    assert connected == [] and _refused(outcome, address), outcome.text
