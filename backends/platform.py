"""The platform every serving backend runs on: the Google Cloud half (APIs, network, cluster, TPU
node pools), the cluster's Kubernetes provider and the batch controllers a backend asks for.

Composition only: each function registers the components `__main__.py` registered at module level
before, with the same names, parents and dependencies (tests/test_plan_golden.py holds every
stack's plan to the copy made before the move). Nothing here is a ComponentResource of its own:
one would add itself to every URN below it.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as kubernetes

from domain.reservation_health import Window
from infra.apis import ProjectApis, ProjectApisArgs
from infra.cluster import Cluster, ClusterArgs
from infra.network import Network, NetworkArgs
from infra.reservation import ReservationCheck, ReservationCheckArgs
from infra.tpu_pools import TpuPools, TpuPoolsArgs
from infra.workload_policy import WorkloadPolicy, WorkloadPolicyArgs
from k8s.controllers import Controllers, ControllersArgs
from settings import rules_recovery
from settings.capacity import NodePools
from settings.model import StackConfig


@dataclass(frozen=True)
class GoogleCloud:
    apis: ProjectApis
    network: Network
    cluster: Cluster


def google_cloud(config: StackConfig) -> GoogleCloud:
    """The project's APIs, the VPC and the GKE cluster with its system pool."""
    names, net = config.names, config.network
    apis = ProjectApis("apis", ProjectApisArgs(project=config.project, ai_zones=config.platform.ai_zones))
    network = Network(
        "network",
        NetworkArgs(
            project=config.project,
            region=config.location,
            names=names,
            mtu=net.mtu,
            node_cidr=str(net.node_cidr),
            pod_cidr=str(net.pod_cidr),
            service_cidr=str(net.service_cidr),
            proxy_cidr=str(net.proxy_cidr),
            depends_on=apis.ready,
        ),
    )
    cluster = Cluster(
        "cluster",
        ClusterArgs(
            project=config.project,
            region=config.location,
            names=names,
            network=network.network.id,
            subnetwork=network.node_subnet.id,
            version=config.cluster.version,
            platform=config.platform,
            system_machine_type=config.cluster.system_machine_type,
            system_nodes_per_zone=config.cluster.system_nodes_per_zone,
            deletion_protection=config.cluster.deletion_protection,
            maintenance_window_start=config.cluster.maintenance_window_start,
            protect=config.cluster.protect,
            maintenance_exclusion=config.cluster.maintenance_exclusion,
            depends_on=apis.ready,
        ),
    )
    return GoogleCloud(apis, network, cluster)


def cluster_provider(cluster: Cluster) -> kubernetes.Provider:
    """A provider that depends on the cluster and its system pool only.

    Not on the TPU pools: controllers install while the TPU pools are still
    provisioning; only objects that consume TPUs wait for the pools.
    """
    return kubernetes.Provider(
        "gke",
        kubernetes.ProviderArgs(
            kubeconfig=cluster.kubeconfig,
            enable_server_side_apply=True,
            # Identifies the cluster across kubeconfig changes: an in-place cluster update makes
            # the kubeconfig unknown during preview, which would otherwise plan a replacement of
            # every object (pulumi-kubernetes, Provider `clusterIdentifier`).
            cluster_identifier=cluster.cluster.id,
            # Not delete_unreachable: a transient auth or network failure during a
            # refresh would drop every object from state. After deleting a cluster out
            # of band, run `PULUMI_K8S_DELETE_UNREACHABLE=true pulumi destroy` (README).
        ),
        opts=pulumi.ResourceOptions(parent=cluster, depends_on=[cluster.cluster, cluster.system_pool]),
    )


def tpu_node_pools(config: StackConfig, cloud: GoogleCloud, nodes: NodePools) -> TpuPools:
    """The TPU node pools: cubes under a workload policy (dynamic slicing), or one pool per slice
    of a fixed topology."""
    names, serving = config.names, config.serving
    policy = None
    if serving.dynamic_slicing:
        policy = WorkloadPolicy(
            "workload-policy",
            WorkloadPolicyArgs(
                project=config.project,
                region=config.location,
                name=names.workload_policy,
                cube_topology=config.tpu.cube_topology,
                depends_on=cloud.apis.ready,
            ),
        )
    return TpuPools(
        "tpu-pools",
        TpuPoolsArgs(
            project=config.project,
            region=config.location,
            zone=config.zone,
            cluster=cloud.cluster.cluster,
            pool_keys=config.pool_keys(),
            pool_names=config.pool_names(),
            reservation_paths=config.pool_paths(),
            machine_type=nodes.machine.name,
            nodes_per_pool=nodes.nodes_per_pool,
            service_account=cloud.cluster.node_account.email,
            node_role=cloud.cluster.node_role,
            protect=config.cluster.protect,
            accelerator_label=nodes.generation.accelerator_label,
            policy=policy.policy if policy is not None else None,
            tpu_topology=None if serving.dynamic_slicing else serving.slice.topology,
            reservation_check=reservation_check(config, cloud, nodes.nodes_per_pool) if policy is not None else None,
        ),
    )


def reservation_check(config: StackConfig, cloud: GoogleCloud, hosts_per_pool: int) -> ReservationCheck | None:
    """The read of the reservation's bound sub-blocks (TPU7x cubes on a block), after the APIs."""
    reservation = config.reservation
    if reservation is None or reservation.block is None:
        return None
    return ReservationCheck(
        ReservationCheckArgs(
            project=config.reservation_project,
            zone=config.zone,
            reservation=reservation.name,
            block=reservation.block,
            sub_blocks=reservation.sub_blocks,
            hosts_per_pool=hosts_per_pool,
            # The Compute API answers the reads, and an AI zone is hidden without the preview feature:
            # those two of what every call to the project's APIs waits for.
            after=[
                r for r in cloud.apis.ready if r in (cloud.apis.services["compute.googleapis.com"], cloud.apis.ai_zones)
            ],
            no_go=[Window(w.start, w.end) for w in reservation.maintenance_no_go or []],
            accepted=dict(reservation.accept or {}),
        )
    )


def batch_controllers(config: StackConfig, provider: kubernetes.Provider, wanted: tuple[str, ...]) -> Controllers:
    """JobSet, Kueue and LWS: those of `wanted` (the backend's), at the pinned versions."""
    versions = config.versions
    pinned = {"jobset": versions.jobset, "kueue": versions.kueue, "lws": versions.lws}
    return Controllers(
        "controllers",
        ControllersArgs(
            provider=provider,
            versions={name: pinned[name] for name in wanted},
            chart_registry=config.controllers.chart_registry,
            install=config.controllers.install,
            kueue_recovery=rules_recovery.kueue_manager_config(config.kueue.recovery),
        ),
    )
