"""The VPC: jumbo frames for TPU traffic, a node subnet, a proxy-only subnet, a tight firewall."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from settings.naming import Names


@dataclass(frozen=True)
class NetworkArgs:
    project: str
    region: str
    names: Names
    mtu: int
    node_cidr: str
    pod_cidr: str
    service_cidr: str
    proxy_cidr: str
    depends_on: Sequence[pulumi.Resource] = ()


class Network(pulumi.ComponentResource):
    network: gcp.compute.Network
    node_subnet: gcp.compute.Subnetwork
    proxy_subnet: gcp.compute.Subnetwork
    firewall: gcp.compute.Firewall

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tpu-slicing:infra:Network", name, None, opts)
        names = args.names
        self.network = gcp.compute.Network(
            "vpc",
            gcp.compute.NetworkArgs(
                name=names.network,
                project=args.project,
                auto_create_subnetworks=False,
                routing_mode="REGIONAL",
                mtu=args.mtu,
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )
        child = pulumi.ResourceOptions(parent=self)
        self.node_subnet = gcp.compute.Subnetwork(
            "nodes",
            gcp.compute.SubnetworkArgs(
                name=names.node_subnet,
                project=args.project,
                region=args.region,
                network=self.network.id,
                ip_cidr_range=args.node_cidr,
                private_ip_google_access=True,
                # Named secondary ranges keep pod and service addresses known in
                # advance, so the firewall can name them instead of all of 10/8.
                secondary_ip_ranges=[
                    gcp.compute.SubnetworkSecondaryIpRangeArgs(range_name=names.pod_range, ip_cidr_range=args.pod_cidr),
                    gcp.compute.SubnetworkSecondaryIpRangeArgs(
                        range_name=names.service_range, ip_cidr_range=args.service_cidr
                    ),
                ],
            ),
            opts=child,
        )
        self.proxy_subnet = gcp.compute.Subnetwork(
            "proxy",
            gcp.compute.SubnetworkArgs(
                name=names.proxy_subnet,
                project=args.project,
                region=args.region,
                network=self.network.id,
                ip_cidr_range=args.proxy_cidr,
                purpose="REGIONAL_MANAGED_PROXY",
                role="ACTIVE",
            ),
            opts=child,
        )
        self.firewall = gcp.compute.Firewall(
            "allow-internal",
            gcp.compute.FirewallArgs(
                name=names.firewall,
                project=args.project,
                network=self.network.id,
                description="Traffic between this stack's nodes, pods, services and internal load-balancer proxies.",
                direction="INGRESS",
                priority=1000,
                source_ranges=[args.node_cidr, args.pod_cidr, args.service_cidr, args.proxy_cidr],
                allows=[
                    gcp.compute.FirewallAllowArgs(protocol="tcp"),
                    gcp.compute.FirewallAllowArgs(protocol="udp"),
                    gcp.compute.FirewallAllowArgs(protocol="icmp"),
                ],
            ),
            opts=child,
        )
        self.register_outputs(
            {
                "network": self.network.self_link,
                "nodeSubnet": self.node_subnet.self_link,
                "proxySubnet": self.proxy_subnet.self_link,
            }
        )
