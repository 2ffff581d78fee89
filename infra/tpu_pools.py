"""TPU node pools: one pool per TPU7x cube bound to a reservation block (dynamic slicing), or one
pool per multi-host slice of a fixed topology (Saxml and JetStream backends), reserved or on demand."""

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
    pool_names: Sequence[str]
    reservation_paths: Sequence[str | None]  # None: on-demand capacity
    machine_type: str
    nodes_per_pool: int
    service_account: pulumi.Input[str]
    accelerator_label: str
    # Exactly one: a workload policy (TPU7x cubes) or a fixed slice topology.
    policy: gcp.compute.ResourcePolicy | None = None
    tpu_topology: str | None = None


def placement(args: TpuPoolsArgs) -> gcp.container.NodePoolPlacementPolicyArgs:
    # The SDK requires a type; COMPACT plus policy_name is how a workload policy
    # is attached (pulumi-notes §4), COMPACT plus tpu_topology makes one slice.
    if args.policy is not None:
        return gcp.container.NodePoolPlacementPolicyArgs(type="COMPACT", policy_name=args.policy.name)
    return gcp.container.NodePoolPlacementPolicyArgs(type="COMPACT", tpu_topology=args.tpu_topology)


def reservation_affinity(path: str | None) -> gcp.container.NodePoolNodeConfigReservationAffinityArgs:
    if path is None:
        # On demand: never eat into a reservation another team counts on.
        return gcp.container.NodePoolNodeConfigReservationAffinityArgs(consume_reservation_type="NO_RESERVATION")
    return gcp.container.NodePoolNodeConfigReservationAffinityArgs(
        consume_reservation_type="SPECIFIC_RESERVATION", key=RESERVATION_KEY, values=[path]
    )


class TpuPools(pulumi.ComponentResource):
    pools: list[gcp.container.NodePool]

    def __init__(self, name: str, args: TpuPoolsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tpu-slicing:infra:TpuPools", name, None, opts)
        if len(args.pool_names) != len(args.reservation_paths):
            raise ValueError("one reservation path per pool is needed")
        if (args.policy is None) == (args.tpu_topology is None):
            raise ValueError("give either a workload policy or a TPU topology")
        waits = [args.cluster] + ([args.policy] if args.policy is not None else [])
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
                    placement_policy=placement(args),
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
                        reservation_affinity=reservation_affinity(path),
                        workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(
                            mode="GKE_METADATA"
                        ),
                        labels={"tpu-slicing/role": "tpu"},
                    ),
                ),
                opts=pulumi.ResourceOptions(parent=self, depends_on=waits),
            )
            for index, (pool_name, path) in enumerate(zip(args.pool_names, args.reservation_paths, strict=True), 1)
        ]
        self.register_outputs({"names": [pool.name for pool in self.pools]})
