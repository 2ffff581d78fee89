"""The network block and who may reach a backend's HTTP service.

Guards `network` (private ranges, RFC 1918 or RFC 6598's shared space, pairwise disjoint, a proxy-only
subnet of at least a /26, pod and node ranges that hold every node the stack makes, and a Service
range that addresses every Service the cluster holds) and
`serving.http` (an external service only with source ranges, none on an internal one, their union no
wider than settings/exposure.py allows: one rule with the policy pack's no-public-load-balancer).
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING

from settings import exposure
from settings.refused import RefusedClass

if TYPE_CHECKING:
    from settings.model import HttpExposure, NetworkConfig, StackConfig

SHARED_ADDRESS_SPACE = ipaddress.IPv4Network("100.64.0.0/10")
VPC_RANGES = tuple(
    ipaddress.IPv4Network(block) for block in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10")
)
# GKE gives every node a /24 of the pod range at the default of 110 pods a node (GKE docs,
# "Configure maximum Pods per node"), so a pod range of /N holds 2^(24-N) nodes.
NODE_POD_PREFIX = 24
# A regional cluster's system pool has `systemNodesPerZone` nodes in each of the region's zones;
# three is what GKE regions have, the AI-zone regions among them.
REGION_ZONES = 3


def private_range(value: ipaddress.IPv4Network) -> ipaddress.IPv4Network:
    # RFC 1918, and the shared address space (RFC 6598) GKE also takes for VPC-native ranges. Not
    # Python's wider is_private: link-local 169.254/16 (the metadata server's), loopback, 198.18/15.
    if not any(value.subnet_of(block) for block in VPC_RANGES):
        raise ValueError(f"{value} is not a private range: allowed are RFC 1918 and 100.64.0.0/10 (RFC 6598)")
    return value


def proxy_size(value: ipaddress.IPv4Network) -> ipaddress.IPv4Network:
    if value.prefixlen > 26:
        raise ValueError(f"{value} is too small: the proxy-only subnet needs at least a /26")
    return value


def disjoint(network: NetworkConfig) -> None:
    ranges = {
        "nodeCidr": network.node_cidr,
        "podCidr": network.pod_cidr,
        "serviceCidr": network.service_cidr,
        "proxyCidr": network.proxy_cidr,
    }
    items = list(ranges.items())
    for i, (a_key, a) in enumerate(items):
        for b_key, b in items[i + 1 :]:
            if a.overlaps(b):
                raise ValueError(f"{a_key} {a} overlaps {b_key} {b}; the ranges must be disjoint")


def check_network_capacity(config: StackConfig) -> None:
    if config.serving.dynamic_slicing:
        tpu_nodes, what = config.tpu.cubes * config.tpu.vms_per_cube, f"tpu.cubes {config.tpu.cubes}"
    else:
        tpu_nodes = config.serving.slices * config.serving.slice.vms
        what = f"serving.slices {config.serving.slices}"
    nodes = tpu_nodes + config.cluster.system_nodes_per_zone * REGION_ZONES
    pod_range = config.network.pod_cidr
    held = 2 ** max(0, NODE_POD_PREFIX - pod_range.prefixlen)
    if nodes > held:
        wanted = NODE_POD_PREFIX - (nodes - 1).bit_length()
        raise ValueError(
            f"network.podCidr {pod_range} holds {held} nodes (a /{NODE_POD_PREFIX} each), but {what} and the "
            f"system pool make {nodes}: node creation would hang; allowed: a pod range of /{wanted} or wider"
        )
    node_range = config.network.node_cidr
    if nodes > node_range.num_addresses - 4:  # GCP keeps four addresses of every subnet
        raise ValueError(
            f"network.nodeCidr {node_range} has {node_range.num_addresses - 4} usable addresses for {nodes} nodes"
        )


# The Services that take an address of network.serviceCidr (a headless one takes none). Kubernetes
# hands out 2^(32-N) - 2 addresses of an IPv4 /N, never the network's or the broadcast address
# (pkg/registry/core/service/ipallocator/ipallocator.go hostsPerNetwork, v1.36.3); a Service it cannot
# address is refused at create, and the release or the up that makes it fails.
# GKE's own on every Standard cluster: the API server's `default/kubernetes`, and kube-dns,
# metrics-server and the HTTP load balancing add-on's default-http-backend in kube-system. Add-ons the
# program does not ask for may add more: no read of a live cluster is made here.
GKE_SERVICES = (
    "default/kubernetes",
    "kube-system/kube-dns",
    "kube-system/metrics-server",
    "kube-system/default-http-backend",
)
# The controllers' charts at their pinned versions, with the program's values (tests/test_charts.py
# renders them): JobSet's webhook and metrics, Kueue's webhook, metrics and visibility, LWS's webhook (its
# metrics Service is off in the program's values). They run whether the program installs them or a
# platform team does (controllers.install), which may add more.
CHART_SERVICES = {"jobset": 2, "kueue": 3, "lws": 1}
# Per backend, the controllers its workloads need (backends/__init__.py) and the program's own Services
# at most (tests/test_service_range.py holds each to the plans): vllm-pd the router's, the slice
# controller's metrics and webhook and the metrics adapter's; none the slice controller's two; Saxml's
# HTTP service; JetStream's.
BACKEND_SERVICES: dict[str, tuple[tuple[str, ...], int]] = {
    "vllm-pd": (("jobset", "kueue", "lws"), 4),
    "none": (("jobset", "kueue", "lws"), 2),
    "saxml": (("jobset",), 1),
    "jetstream": (("lws",), 1),
}


def service_addresses(prefix: int) -> int:
    return max(0, 2 ** (32 - prefix) - 2)


def services_needed(config: StackConfig) -> dict[str, int]:
    """Who holds an address of the Service range, and how many, for the stack's backend."""
    controllers, own = BACKEND_SERVICES[config.serving.backend.value]
    return {"GKE": len(GKE_SERVICES), **{name: CHART_SERVICES[name] for name in controllers}, "the program": own}


def check_service_range(config: StackConfig) -> None:
    needed = services_needed(config)
    total, service_range = sum(needed.values()), config.network.service_cidr
    held = service_addresses(service_range.prefixlen)
    if total <= held:
        return
    widest = max(p for p in range(33) if service_addresses(p) >= total)
    parts = ", ".join(f"{who} {count}" for who, count in needed.items())
    raise ValueError(
        f"network.serviceCidr {service_range} gives {held} Service addresses (Kubernetes hands out 2^(32-N) - 2 "
        f"of a /N), but the cluster holds {total} Services with an address ({parts}): the last ones made would "
        f"be refused and their release or up would fail; allowed: a /{widest} or wider (the default is /20)"
    )


# The widest block an external, unauthenticated service may be opened to: one rule with the policy pack.
MIN_SOURCE_PREFIX = exposure.MIN_SOURCE_PREFIX


def restricted_exposure(http: HttpExposure) -> None:
    if http.type == "external" and not http.source_ranges:
        raise ValueError("an external service needs sourceRanges: the Saxml/JetStream HTTP APIs have no authentication")
    if http.type == "internal" and http.source_ranges:
        raise ValueError(
            f"sourceRanges {[str(r) for r in http.source_ranges]} do nothing on an internal service "
            "(GKE ignores them there): remove them, or use type external"
        )
    # By union, not by literal (settings/exposure.py, shared with the policy pack).
    problem = exposure.too_wide(http.source_ranges)
    if http.type == "external" and problem:
        shown = [str(r) for r in http.source_ranges]
        listed = shown if len(shown) <= 4 else [*shown[:3], f"... {len(shown) - 3} more"]
        raise ValueError(
            f"sourceRanges {listed} are {problem}: the Saxml/JetStream HTTP APIs have no authentication; "
            f"{exposure.SOURCE_RANGES_ALLOWED}"
        )


# An external service with a source range the settings accept (the pack refuses it unless waived).
EXTERNAL = {"type": "external", "sourceRanges": ["10.0.0.0/8"]}

REFUSED: tuple[RefusedClass, ...] = (
    RefusedClass(
        "Service range too small for the Services the cluster holds",
        check_service_range,
        {"network": {"serviceCidr": "10.20.0.0/29"}},
        "network.serviceCidr",
        "a /28 or wider",
    ),
    RefusedClass(
        "public range", private_range, {"network": {"nodeCidr": "8.8.0.0/18"}}, "network.nodeCidr", "RFC 1918"
    ),
    RefusedClass(
        "link-local or other special range for pods",
        private_range,
        {"network": {"podCidr": "169.254.0.0/16"}},
        "network.podCidr",
        "RFC 1918",
    ),
    RefusedClass(
        "proxy subnet too small",
        proxy_size,
        {"network": {"proxyCidr": "172.16.0.0/28"}},
        "network.proxyCidr",
        "/26",
    ),
    RefusedClass(
        "overlapping ranges",
        disjoint,
        {"network": {"proxyCidr": "10.10.0.0/26"}},
        "nodeCidr",
        "disjoint",
    ),
    RefusedClass(
        "pod range too small for the nodes",
        check_network_capacity,
        {"network": {"podCidr": "10.16.0.0/20"}},
        "network.podCidr",
        "a pod range of /18 or wider",
    ),
    # --- exposure (settings/exposure.py, shared with the pack's no-public-load-balancer)
    RefusedClass(
        "external service without source ranges",
        restricted_exposure,
        {"serving": {"http": {"type": "external"}}},
        "serving.http",
        "needs sourceRanges",
        stack="saxml-v5e",
        pack="no-public-load-balancer",
    ),
    RefusedClass(
        "source ranges on an internal service",
        restricted_exposure,
        {"serving": {"http": {"sourceRanges": ["10.0.0.0/8"]}}},
        "serving.http",
        "use type external",
        stack="saxml-v5e",
    ),
    RefusedClass(
        "source ranges whose union is wider than a /8",
        exposure.widest_union,
        {"serving": {"http": {**EXTERNAL, "sourceRanges": ["0.0.0.0/1", "128.0.0.0/1"]}}},
        "serving.http",
        exposure.SOURCE_RANGES_ALLOWED,
        stack="saxml-v5e",
        pack="no-public-load-balancer",
    ),
    RefusedClass(
        "source ranges that together hold more than a /8 of the internet",
        exposure.too_wide,
        {"serving": {"http": {**EXTERNAL, "sourceRanges": [f"{n}.0.0.0/9" for n in range(20, 60, 2)]}}},
        "serving.http",
        exposure.SOURCE_RANGES_ALLOWED,
        stack="saxml-v5e",
        pack="no-public-load-balancer",
    ),
)
