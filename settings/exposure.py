"""How widely an unauthenticated HTTP service may be opened: one rule, standard library only.

Shared by the settings model (`serving.http.sourceRanges`) and the policy pack's no-public-load-balancer
(`policy/guardrails.py`, on a Service's `spec.loadBalancerSourceRanges`), so the two agree on every list.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

# The widest block of addresses an external, unauthenticated service may be opened to, and the
# most internet addresses all its ranges together may hold: one /8's worth. Many disjoint smaller
# blocks add up to the same exposure as one wide one.
MIN_SOURCE_PREFIX = 8
MAX_PUBLIC_ADDRESSES = 2 ** (32 - MIN_SOURCE_PREFIX)
SOURCE_RANGES_ALLOWED = (
    f"allowed: ranges whose union has no block wider than /{MIN_SOURCE_PREFIX} and holds at most "
    f"{MAX_PUBLIC_ADDRESSES:,} internet addresses (a /{MIN_SOURCE_PREFIX}'s worth; RFC 1918 and "
    "100.64.0.0/10 not counted)"
)
# Addresses no one on the internet holds (RFC 1918, RFC 6598): reached only from networks peered with the VPC.
PRIVATE_BLOCKS = tuple(
    ipaddress.IPv4Network(block) for block in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10")
)


def widest_union(ranges: Iterable[ipaddress.IPv4Network]) -> ipaddress.IPv4Network | None:
    """The first block of the ranges' union wider than a /8, or None.

    By union, not by literal: [0.0.0.0/1, 128.0.0.0/1] is the whole internet too.
    """
    wide = [n for n in ipaddress.collapse_addresses(ranges) if n.prefixlen < MIN_SOURCE_PREFIX]
    return wide[0] if wide else None


def public_addresses(ranges: Iterable[ipaddress.IPv4Network]) -> int:
    """How many internet addresses the ranges' union holds (private blocks not counted)."""
    total = 0
    for block in ipaddress.collapse_addresses(ranges):
        if any(block.subnet_of(private) for private in PRIVATE_BLOCKS):
            continue
        total += block.num_addresses - sum(p.num_addresses for p in PRIVATE_BLOCKS if p.subnet_of(block))
    return total


def too_wide(ranges: Iterable[ipaddress.IPv4Network]) -> str | None:
    """Why the ranges open a service too widely (a phrase), or None: by union, and by total."""
    ranges = list(ranges)
    wide = widest_union(ranges)
    if wide is not None:
        return f"ranges that together cover {wide}, wider than a /{MIN_SOURCE_PREFIX}"
    public = public_addresses(ranges)
    if public > MAX_PUBLIC_ADDRESSES:
        return f"ranges that together hold {public:,} internet addresses, more than a /{MIN_SOURCE_PREFIX}'s"
    return None


def source_ranges_problem(cidrs: Iterable[str]) -> str | None:
    """Why a list of source CIDRs opens a service too widely (a phrase), or None.

    A /8 means nothing in IPv6 (the settings take IPv4 only): IPv6 ranges a Service may still carry
    are held to a /32, the size of a whole provider's allocation.
    """
    v4: list[ipaddress.IPv4Network] = []
    for cidr in cidrs:
        try:
            network = ipaddress.ip_network(str(cidr).strip(), strict=False)
        except ValueError:
            return f"'{cidr}', which is not a CIDR"
        if isinstance(network, ipaddress.IPv6Network):
            if network.prefixlen < 32:
                return f"'{cidr}', wider than an IPv6 /32"
            continue
        v4.append(network)
    return too_wide(v4)
