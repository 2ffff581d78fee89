"""TPU node pools: one pool per TPU7x cube bound to a reservation block (dynamic slicing), or one
pool per multi-host slice of a fixed topology (Saxml and JetStream backends), reserved or on demand."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from infra.cluster import IMAGE_TYPE
from infra.reservation import ReservationCheck

RESERVATION_KEY = "compute.googleapis.com/reservation-name"

# Fields GKE fills in and reports back on a TPU pool, which the program does not set: tracked,
# each reads as a change on the next preview, and some (advancedMachineFeatures: GKE turns SMT
# off on TPU hosts) force a replacement of the whole pool. From vllm-project/ci-infra,
# terraform/gcp_old/tpu-inference/k8s/workers.tf (`worker_tpu`, lifecycle.ignore_changes).
GKE_REPORTED = (
    "nodeConfig.advancedMachineFeatures",
    "nodeConfig.guestAccelerators",
    "nodeConfig.kubeletConfig",
    "nodeConfig.shieldedInstanceConfig",
    "upgradeSettings",
)

# Placement fields that are neither Computed nor updatable in the provider
# (resource_container_node_pool.go, `placement_policy`), which GKE fills in on a pool under a
# workload policy: it derives the type (magic-modules PR #17643, open, would read it back) and
# reports the policy's topology. Set once at create; a value read back must not plan a change.
GKE_FILLED_WITH_A_WORKLOAD_POLICY = ("placementPolicy.type", "placementPolicy.tpuTopology")


@dataclass(frozen=True)
class TpuPoolsArgs:
    project: str
    region: str
    zone: str
    cluster: gcp.container.Cluster
    pool_keys: Sequence[str]  # what each pool binds (its sub-block), else its position: the URN's name
    pool_names: Sequence[str]
    reservation_paths: Sequence[str | None]  # None: on-demand capacity
    machine_type: str
    nodes_per_pool: int
    service_account: pulumi.Input[str]
    accelerator_label: str
    # The node service account's role binding: the first TPU node must not boot without it.
    node_role: pulumi.Resource | None = None
    protect: bool = True  # Pulumi protect: a mistaken destroy stops before the first pool
    # Exactly one: a workload policy (TPU7x cubes) or a fixed slice topology.
    policy: gcp.compute.ResourcePolicy | None = None
    tpu_topology: str | None = None
    # The reservation read before a pool is created (TPU7x cubes): each new pool is refused by its
    # before_create hook when its sub-block cannot take it; a running pool is only warned about.
    reservation_check: ReservationCheck | None = None


def placement(args: TpuPoolsArgs) -> gcp.container.NodePoolPlacementPolicyArgs:
    """How GKE places a pool's VMs: a workload policy by name (TPU7x), or one compact slice.

    A workload policy is attached by name alone: GKE's Ironwood docs pass `--placement-policy`
    and no placement type; xpk dropped COMPACT with a workload policy on purpose
    (src/xpk/core/nodepool.py, "Stop using GPP if WP is used", #676: group placement and
    workload policy are mutually exclusive, and no --tpu-topology either); tpu7x refuses a type
    and GKE stores none (vllm-project/ci-infra workers.tf). The provider requires `type`
    (resource_container_node_pool.go), and "" is what GKE returns for it, so "" it is: sending
    COMPACT would differ from the stored value on every preview, on a block that forces
    replacement. The first real apply must confirm: `gcloud container node-pools describe
    <pool> --format='value(placementPolicy)'` shows the policy name and no type.
    Up to v6e, COMPACT with a topology is how one multi-host slice is made (GKE TPU docs).
    """
    if args.policy is not None:
        return gcp.container.NodePoolPlacementPolicyArgs(type="", policy_name=args.policy.name)
    return gcp.container.NodePoolPlacementPolicyArgs(type="COMPACT", tpu_topology=args.tpu_topology)


def reservation_affinity(path: str | None) -> gcp.container.NodePoolNodeConfigReservationAffinityArgs:
    if path is None:
        # On demand: never eat into a reservation another team counts on.
        return gcp.container.NodePoolNodeConfigReservationAffinityArgs(consume_reservation_type="NO_RESERVATION")
    return gcp.container.NodePoolNodeConfigReservationAffinityArgs(
        consume_reservation_type="SPECIFIC_RESERVATION", key=RESERVATION_KEY, values=[path]
    )


def _labels(key: str, pool_name: str) -> dict[str, str]:
    """The pool's node labels; a name shortened to GKE's limit (settings/naming.py `tpu_pool`) keeps
    its whole sub-block here. Pools whose name holds it get no new label: no update of a live pool."""
    labels = {"tpu-slicing/role": "tpu"}
    if not pool_name.endswith(f"-tpu-{key}"):
        labels["tpu-slicing/sub-block"] = key
    return labels


class TpuPools(pulumi.ComponentResource):
    pools: list[gcp.container.NodePool]

    def __init__(self, name: str, args: TpuPoolsArgs, opts: pulumi.ResourceOptions | None = None):
        check = args.reservation_check
        # The bound sub-blocks' health, for the policy pack (infra/reservation.py `bound`).
        props = {"reservation": check.bound()} if check is not None and check.args.sub_blocks else None
        super().__init__("tpu-slicing:infra:TpuPools", name, props, opts)
        if not len(args.pool_keys) == len(args.pool_names) == len(args.reservation_paths):
            raise ValueError("one key, name and reservation path per pool is needed")
        if (args.policy is None) == (args.tpu_topology is None):
            raise ValueError("give either a workload policy or a TPU topology")
        waits: list[pulumi.Resource] = [args.cluster]
        waits += [args.policy] if args.policy is not None else []
        waits += [args.node_role] if args.node_role is not None else []
        # A pool registers once the reservation has been read and judged (its hook reads the verdict).
        cluster_id = check.gate(args.cluster.id) if check is not None else args.cluster.id
        if check is not None:
            check.own_pools(args.cluster, args.pool_names)
        ignored = list(GKE_REPORTED)
        if args.policy is not None:
            ignored += list(GKE_FILLED_WITH_A_WORKLOAD_POLICY)
        self.pools = [
            gcp.container.NodePool(
                f"cube-{key}",
                gcp.container.NodePoolArgs(
                    name=pool_name,
                    project=args.project,
                    cluster=cluster_id,
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
                        image_type=IMAGE_TYPE,
                        service_account=args.service_account,
                        oauth_scopes=["https://www.googleapis.com/auth/cloud-platform"],
                        reservation_affinity=reservation_affinity(path),
                        workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(
                            mode="GKE_METADATA"
                        ),
                        labels=_labels(key, pool_name),
                    ),
                ),
                opts=pulumi.ResourceOptions(
                    parent=self,
                    depends_on=waits,
                    ignore_changes=ignored,
                    protect=args.protect,
                    # The name is fixed and ForceNew: a replacement created first would meet its
                    # predecessor's name (GKE answers 409), so the old pool goes first.
                    delete_before_replace=True,
                    hooks=_reservation_hooks(check, key, pool_name),
                ),
            )
            for key, pool_name, path in zip(args.pool_keys, args.pool_names, args.reservation_paths, strict=True)
        ]
        self.register_outputs({"names": [pool.name for pool in self.pools]})


def _reservation_hooks(check: ReservationCheck | None, key: str, pool_name: str) -> pulumi.ResourceHookBinding | None:
    """The pool's before_create hook: runs only when the pool is to be created, in preview too."""
    if check is None:
        return None
    sub_block = key if check.args.sub_blocks else None
    return pulumi.ResourceHookBinding(
        before_create=[
            pulumi.ResourceHook(
                f"reservation-{key}",
                check.refuse_create(sub_block, pool_name),
                pulumi.ResourceHookOptions(on_dry_run=True),
            )
        ]
    )
