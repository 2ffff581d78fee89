"""How widely an unauthenticated HTTP service may be opened: one rule, standard library only.

Shared by the settings model (`serving.http.sourceRanges`) and the policy pack's no-public-load-balancer
(`policy/guardrails.py`, on a Service's `spec.loadBalancerSourceRanges`), so the two agree on every list.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

# The widest block of addresses an external, unauthenticated service may be opened to.
MIN_SOURCE_PREFIX = 8
SOURCE_RANGES_ALLOWED = f"allowed: ranges whose union has no block wider than /{MIN_SOURCE_PREFIX}"


def widest_union(ranges: Iterable[ipaddress.IPv4Network]) -> ipaddress.IPv4Network | None:
    """The first block of the ranges' union wider than a /8, or None.

    By union, not by literal: [0.0.0.0/1, 128.0.0.0/1] is the whole internet too.
    """
    wide = [n for n in ipaddress.collapse_addresses(ranges) if n.prefixlen < MIN_SOURCE_PREFIX]
    return wide[0] if wide else None


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
    wide = widest_union(v4)
    if wide is not None:
        return f"ranges that together cover {wide}, wider than a /{MIN_SOURCE_PREFIX}"
    return None
