"""tpu-slicing: TPU serving on GKE as one dependency graph.

This file only loads the configuration, composes the components and exports
outputs; every rule lives in `settings/`, every resource in a component.
"""

from dataclasses import replace

import pulumi

from backends import REGISTRY
from backends.foundation import Foundation
from infra.alerts import Alerts, AlertsArgs
from infra.apis import ProjectApis, ProjectApisArgs
from infra.cluster import Cluster, ClusterArgs
from infra.dashboard import Dashboard, DashboardArgs
from infra.network import Network, NetworkArgs
from infra.tpu_pools import TpuPools, TpuPoolsArgs
from infra.workload_policy import WorkloadPolicy, WorkloadPolicyArgs
from k8s.controllers import Controllers, ControllersArgs
from k8s.kueue_queues import LOCAL_QUEUE, KueueQueues, KueueQueuesArgs
from k8s.network_policies import NetworkPolicies, NetworkPoliciesArgs
from k8s.pod_monitoring import PodMonitorings, PodMonitoringsArgs
from k8s.provider import cluster_provider
from k8s.slice_controller import SliceController, SliceControllerArgs
from k8s.slicing_checks import SliceCheck, SlicingChecks, SlicingChecksArgs, network_allowances
from settings.loader import from_runtime

# Validation happens here, before the first resource is registered.
config = from_runtime()
names = config.names
net = config.network

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
serving = config.serving
versions = config.versions
provider = cluster_provider(cluster)  # needs the cluster only: software installs while TPU pools provision

if serving.dynamic_slicing:
    # TPU7x cubes carved into dynamic slices by Kueue and the slice controller.
    policy = WorkloadPolicy(
        "workload-policy",
        WorkloadPolicyArgs(
            project=config.project,
            region=config.location,
            name=names.workload_policy,
            cube_topology=config.tpu.cube_topology,
            depends_on=apis.ready,
        ),
    )
    generation = config.tpu.generation
    machine = generation.machine_type(config.tpu.machine_type)
    pool_count, nodes_per_pool = config.tpu.cubes, config.tpu.vms_per_cube
else:
    # Saxml / JetStream: one node pool per multi-host slice of a fixed topology.
    generation = serving.slice.generation
    machine = generation.machine_type(serving.slice.machine_type)
    pool_count, nodes_per_pool = serving.slices, generation.vms(serving.slice.shape)

tpu_pools = TpuPools(
    "tpu-pools",
    TpuPoolsArgs(
        project=config.project,
        region=config.location,
        zone=config.zone,
        cluster=cluster.cluster,
        pool_names=[names.tpu_pool(i + 1) for i in range(pool_count)],
        reservation_paths=config.pool_paths(),
        machine_type=machine.name,
        nodes_per_pool=nodes_per_pool,
        service_account=cluster.node_account.email,
        node_role=cluster.node_role,
        protect=config.cluster.protect,
        accelerator_label=generation.accelerator_label,
        policy=policy.policy if serving.dynamic_slicing else None,
        tpu_topology=None if serving.dynamic_slicing else serving.slice.topology,
    ),
)
backend = REGISTRY[serving.backend]
controllers = Controllers(
    "controllers",
    ControllersArgs(
        provider=provider,
        versions={
            name: {"jobset": versions.jobset, "kueue": versions.kueue, "lws": versions.lws}[name]
            for name in backend.controllers
        },
        install=config.controllers.install,
    ),
)
foundation = Foundation(config, provider, network, cluster, tpu_pools, controllers, generation, machine)

if serving.dynamic_slicing:
    slice_controller = SliceController(
        "slice-controller",
        SliceControllerArgs(
            provider=provider,
            image=versions.slice_controller_image,
            pod_cidr=str(net.pod_cidr),
            # Also on the TPU pools, for the teardown: workloads, then the slice controller, then
            # the pools, then the cluster (tests/test_teardown.py).
            depends_on=[*controllers.ready(), tpu_pools],
        ),
    )
    vms = pool_count * nodes_per_pool
    queues = KueueQueues(
        "kueue",
        KueueQueuesArgs(
            provider=provider,
            names=names,
            namespace=serving.namespace,
            topology_levels=config.kueue.topology_levels,
            accelerator_label=generation.accelerator_label,
            priorities=config.kueue.priorities.items(),
            tpu_chips=config.tpu.total_chips,
            vcpus=vms * machine.vcpus,
            memory_gib=vms * machine.memory_gib,
            kueue=controllers.ready("kueue"),
            slice_controller=slice_controller,
        ),
    )
    priority = dict(config.kueue.priorities.items())
    checks = [
        SliceCheck(name, cfg.topology, replicas, names.priority_class(level, priority[level]))
        for name, cfg, replicas, level in (
            ("subslicing-check", config.checks.subslicing, config.checks.subslicing.replicas, "low"),
            ("superslicing-check", config.checks.superslicing, 1, "medium"),
        )
        if cfg.enabled
    ]
    # Ingress is denied in the serving namespace except for what serving and the checks need.
    serving_policies = NetworkPolicies(
        "serving-network-policies",
        NetworkPoliciesArgs(
            provider=provider,
            namespace=serving.namespace,
            allowances=[*network_allowances(checks), *backend.allowances(config)],
            depends_on=[queues.namespace],
        ),
    )
    if checks:
        SlicingChecks(
            "slicing-checks",
            SlicingChecksArgs(
                provider=provider,
                namespace=serving.namespace,
                local_queue=LOCAL_QUEUE,
                generation=generation,
                image=versions.jax_tpu_image,
                checks=checks,
                # TPU consumers wait for the pools, so a destroy removes them first.
                depends_on=[tpu_pools, slice_controller, *controllers.ready("jobset"), queues, serving_policies],
            ),
        )
    foundation = replace(
        foundation, slice_controller=slice_controller, queues=queues, serving_policies=serving_policies
    )

served = backend.deploy(foundation)
for key, value in served.outputs.items():
    pulumi.export(key, value)

# Observability: what Managed Prometheus scrapes, a dashboard, and opt-in alerts.
observability = config.observability
if observability.pod_monitoring and served.monitored_after is not None:
    PodMonitorings(
        "pod-monitoring",
        PodMonitoringsArgs(
            provider=provider,
            namespace=serving.namespace,
            backend=serving.backend.value,
            depends_on=served.monitored_after,
        ),
    )
if observability.dashboard:
    dashboard = Dashboard(
        "dashboard",
        DashboardArgs(
            project=config.project,
            prefix=config.name_prefix,
            backend=serving.backend.value,
            node_pools=[names.tpu_pool(i + 1) for i in range(pool_count)],
            cluster_name=names.cluster,
            namespace=serving.namespace,
        ),
        opts=pulumi.ResourceOptions(depends_on=apis.ready),
    )
    pulumi.export("dashboardUrl", dashboard.url)
if observability.alerts.enabled:
    Alerts(
        "alerts",
        AlertsArgs(
            project=config.project,
            prefix=config.name_prefix,
            namespace=serving.namespace,
            notification_channels=observability.alerts.notification_channels,
            queue_threshold=observability.alerts.queue_threshold,
            backend=serving.backend.value,
            cluster_name=names.cluster,
            smoke_test=serving.smoke_test.enabled,
        ),
        opts=pulumi.ResourceOptions(depends_on=apis.ready),
    )

pulumi.export("clusterName", cluster.cluster.name)
pulumi.export("location", cluster.cluster.location)
pulumi.export("endpoint", cluster.cluster.endpoint)
pulumi.export("kubeconfig", cluster.kubeconfig)
pulumi.export("nodePools", [pool.name for pool in tpu_pools.pools])
pulumi.export("totalChips", pool_count * nodes_per_pool * machine.chips_per_vm)
