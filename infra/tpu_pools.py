"""TPU7x node pools bound to a reservation block: one pool per 4x4x4 cube."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

RESERVATION_KEY = "compute.googleapis.com/reservation-name"


@dataclass(frozen=True)
class TpuPoolsArgs:
    project: str
    region: str
    zone: str
    cluster: gcp.container.Cluster
    policy: gcp.compute.ResourcePolicy
    pool_names: Sequence[str]
    reservation_paths: Sequence[str]
    machine_type: str
    nodes_per_pool: int
    service_account: pulumi.Input[str]
    accelerator_label: str


class TpuPools(pulumi.ComponentResource):
    pools: list[gcp.container.NodePool]

    def __init__(self, name: str, args: TpuPoolsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tpu-slicing:infra:TpuPools", name, None, opts)
        if len(args.pool_names) != len(args.reservation_paths):
            raise ValueError("one reservation path per pool is needed")
        self.pools = [
            gcp.container.NodePool(
                f"cube-{index}",
                gcp.container.NodePoolArgs(
                    name=pool_name,
                    project=args.project,
                    cluster=args.cluster.id,
                    location=args.region,
                    node_locations=[args.zone],
                    node_count=args.nodes_per_pool,
                    placement_policy=gcp.container.NodePoolPlacementPolicyArgs(
                        # The SDK requires a type; COMPACT plus policy_name is how a
                        # workload policy is attached (pulumi-notes §4).
                        type="COMPACT",
                        policy_name=args.policy.name,
                    ),
                    management=gcp.container.NodePoolManagementArgs(
                        auto_repair=True,
                        # Upgrades recreate TPU VMs and break running slices; GKE's
                        # maintenance policy governs when they happen.
                        auto_upgrade=True,
                    ),
                    node_config=gcp.container.NodePoolNodeConfigArgs(
                        machine_type=args.machine_type,
                        service_account=args.service_account,
                        oauth_scopes=["https://www.googleapis.com/auth/cloud-platform"],
                        reservation_affinity=gcp.container.NodePoolNodeConfigReservationAffinityArgs(
                            consume_reservation_type="SPECIFIC_RESERVATION",
                            key=RESERVATION_KEY,
                            values=[path],
                        ),
                        workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(
                            mode="GKE_METADATA"
                        ),
                        labels={"tpu-slicing/role": "tpu"},
                    ),
                ),
                opts=pulumi.ResourceOptions(parent=self, depends_on=[args.cluster, args.policy]),
            )
            for index, (pool_name, path) in enumerate(zip(args.pool_names, args.reservation_paths, strict=True), 1)
        ]
        self.register_outputs({"names": [pool.name for pool in self.pools]})
