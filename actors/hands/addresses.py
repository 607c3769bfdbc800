"""Which IP addresses `fetch` may connect to (issue 13; issue 20, review P7; docs/SEARCH.md).

An address is public when it is on the public internet and cannot lead to this computer,
its network or the provider's (the metadata service at 169.254.169.254). The ranges are
written out here rather than taken from `ipaddress`'s `is_global`, whose answers differ
between Python versions; `is_global` is still asked last, as a second opinion.

IPv6 can carry an IPv4 address, and a network that translates or tunnels IPv6 then
delivers the packet to that IPv4 address: so an IPv6 form that embeds a private IPv4 is
as private as the IPv4 itself (P7). Each form is either decoded exactly and the IPv4
inside judged, or refused whole:

- decoded, the IPv4 in the last 32 bits: mapped `::ffff:a.b.c.d`, SIIT `::ffff:0:a.b.c.d`
  (RFC 6145) and NAT64's well-known prefix `64:ff9b::/96` (RFC 6052);
- decoded, 6to4 `2002:AABB:CCDD::/48` (bits 16-47) and an ISATAP interface id
  `[0|200]:5efe:a.b.c.d` under any prefix (RFC 5214);
- refused whole: everything outside the global unicast block `2000::/3`, which holds
  `::/96` (IPv4-compatible `::a.b.c.d`, `::`, `::1`), NAT64's local-use `64:ff9b:1::/48`
  (its IPv4 is split around bits 64-71, so not decoded), discard `100::/64`, SRv6
  `5f00::/16`, ULA `fc00::/7`, link-local `fe80::/10`, site-local `fec0::/10` and
  multicast `ff00::/8`; and, inside it, the IETF block `2001::/23` (Teredo `2001::/32`
  among them: its client address is obfuscated and reached through any relay) and the
  documentation ranges `2001:db8::/32` and `3fff::/20`.

A NAT64 network-specific prefix (an operator's own /96) cannot be told from an ordinary
address; a network that has one reaches its private IPv4 through it.
"""

from __future__ import annotations

import ipaddress
from ipaddress import IPv4Address, IPv6Address, ip_network

__all__ = ["is_public"]

_V4_NOT_PUBLIC = tuple(ip_network(net) for net in (
    "0.0.0.0/8",  # "this network": 0.0.0.0 reaches this computer
    "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",  # private (RFC 1918)
    "100.64.0.0/10",  # shared address space: carrier-grade NAT, Tailscale
    "127.0.0.0/8",  # loopback
    "169.254.0.0/16",  # link-local, the cloud metadata service
    "192.0.0.0/24",  # IETF protocol assignments
    "192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24",  # documentation
    "192.88.99.0/24",  # 6to4 relay anycast (deprecated)
    "198.18.0.0/15",  # benchmarking
    "224.0.0.0/4",  # multicast
    "240.0.0.0/4",  # reserved, with the broadcast 255.255.255.255
))

_LAST_32_BITS = tuple(ip_network(net) for net in ("::ffff:0:0/96", "::ffff:0:0:0/96", "64:ff9b::/96"))
_GLOBAL_UNICAST = ip_network("2000::/3")
_V6_NOT_PUBLIC = tuple(ip_network(net) for net in ("2001::/23", "2001:db8::/32", "3fff::/20"))


def _public_v4(ip: IPv4Address) -> bool:
    return not any(ip in net for net in _V4_NOT_PUBLIC) and ip.is_global


def _isatap(ip: IPv6Address) -> IPv4Address | None:
    """The IPv4 address of an ISATAP interface id (`0:5efe:V4`, with the u/g bits set or not)."""
    iid = int(ip) & (2 ** 64 - 1)
    if (iid >> 48) & 0xFCFF == 0 and (iid >> 32) & 0xFFFF == 0x5EFE:
        return IPv4Address(iid & 0xFFFFFFFF)
    return None


def is_public(address: str) -> bool:
    """Whether `fetch` may connect to `address` (an IP as text; a zone `%eth0` is ignored):
    False for private, loopback, link-local, shared, reserved, documentation, multicast
    addresses, and for every IPv6 form that embeds such an IPv4 or is not decoded (P7)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, IPv4Address):
        return _public_v4(ip)
    if any(ip in net for net in _LAST_32_BITS):
        return _public_v4(IPv4Address(int(ip) & 0xFFFFFFFF))
    if ip not in _GLOBAL_UNICAST or any(ip in net for net in _V6_NOT_PUBLIC):
        return False
    for inner in (ip.sixtofour, _isatap(ip)):
        if inner is not None and not _public_v4(inner):
            return False
    return ip.is_global
