"""tpu-slicing: TPU serving on GKE as one dependency graph.

This file only loads the configuration, composes the components and exports
outputs; every rule lives in `settings/`, every resource in a component.
"""

import pulumi

from infra.alerts import Alerts, AlertsArgs
from infra.apis import ProjectApis, ProjectApisArgs
from infra.cluster import Cluster, ClusterArgs
from infra.dashboard import Dashboard, DashboardArgs
from infra.network import Network, NetworkArgs
from infra.tpu_pools import TpuPools, TpuPoolsArgs
from infra.workload_policy import WorkloadPolicy, WorkloadPolicyArgs
from k8s.controllers import Controllers, ControllersArgs
from k8s.inference_crds import InferenceCrds, InferenceCrdsArgs
from k8s.inference_gateway import InferenceGateway, InferenceGatewayArgs, http_url
from k8s.kueue_queues import LOCAL_QUEUE, KueueQueues, KueueQueuesArgs
from k8s.network_policies import NetworkPolicies, NetworkPoliciesArgs
from k8s.pod_monitoring import PodMonitorings, PodMonitoringsArgs
from k8s.provider import cluster_provider
from k8s.router import Router, RouterArgs, epp_allowances, epp_selector
from k8s.slice_controller import SliceController, SliceControllerArgs
from k8s.slicing_checks import SliceCheck, SlicingChecks, SlicingChecksArgs, network_allowances
from settings.loader import from_runtime
from settings.model import Backend
from workloads.jetstream import Jetstream, JetstreamArgs
from workloads.model_access import ModelAccess, ModelAccessArgs
from workloads.saxml import Saxml, SaxmlArgs
from workloads.smoke_job import JOB_NAME as SMOKE_JOB
from workloads.smoke_job import SmokeJob, SmokeJobArgs
from workloads.vllm_command import VllmServe
from workloads.vllm_pd import RolePlan, VllmPd, VllmPdArgs, pool_selector, prefill_metrics_url
from workloads.vllm_pd import network_allowances as vllm_allowances

GUIDE = "pd-disaggregation"  # the llm-d guide the vLLM backend follows; names its router and pool

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
needed_controllers = {
    Backend.VLLM_PD: ("jobset", "kueue", "lws"),
    Backend.NONE: ("jobset", "kueue", "lws"),
    Backend.SAXML: ("jobset",),
    Backend.JETSTREAM: ("lws",),
}[serving.backend]
controllers = Controllers(
    "controllers",
    ControllersArgs(
        provider=provider,
        versions={
            name: {"jobset": versions.jobset, "kueue": versions.kueue, "lws": versions.lws}[name]
            for name in needed_controllers
        },
        install=config.controllers.install,
    ),
)

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
    allowances = network_allowances(checks)
    if serving.backend is Backend.VLLM_PD:
        allowances += epp_allowances(GUIDE, str(net.proxy_cidr))
        allowances += vllm_allowances(
            GUIDE,
            {role: getattr(serving, role).replicas for role in ("prefill", "decode")},
            picker=epp_selector(GUIDE),
            proxy_cidr=str(net.proxy_cidr),
            smoke_test_job=SMOKE_JOB if serving.smoke_test.enabled else None,
        )
    serving_policies = NetworkPolicies(
        "serving-network-policies",
        NetworkPoliciesArgs(
            provider=provider, namespace=serving.namespace, allowances=allowances, depends_on=[queues.namespace]
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

if serving.backend is Backend.VLLM_PD:
    model = serving.model
    assert model.weights_bucket is not None  # validated: vllm-pd needs a bucket
    guide = GUIDE
    access = ModelAccess(
        "model-access",
        ModelAccessArgs(
            provider=provider,
            project=config.project,
            bucket=model.weights_bucket,
            namespace=serving.namespace,
            service_account="vllm-model-server",
            depends_on=queues.namespace,
        ),
    )
    inference_crds = InferenceCrds(
        "inference-crds",
        InferenceCrdsArgs(
            kubeconfig=cluster.kubeconfig,
            version=versions.gateway_api_inference_extension,
            depends_on=[cluster.cluster, cluster.system_pool],
        ),
    )
    gateway = InferenceGateway(
        "gateway",
        InferenceGatewayArgs(
            provider=provider,
            name=serving.gateway.name,
            namespace=serving.namespace,
            address_timeout_seconds=serving.gateway.address_timeout_seconds,
            # The internal load balancer needs the proxy-only subnet.
            depends_on=[queues.namespace, network.proxy_subnet],
        ),
    )
    router = Router(
        "router",
        RouterArgs(
            provider=provider,
            name=guide,
            namespace=serving.namespace,
            gateway_name=serving.gateway.name,
            pool_selector=pool_selector(guide),
            image=versions.endpoint_picker_image,
            depends_on=[inference_crds, queues.namespace, serving_policies],
            gateway=gateway.gateway,
        ),
    )
    vllm = serving.vllm
    roles = []
    for role_name in ("prefill", "decode"):
        role = getattr(serving, role_name)
        shape_devices = generation.devices(generation.subslice(role.topology))
        roles.append(
            RolePlan(
                serve=VllmServe(
                    role=role_name,
                    model_uri=f"gs://{model.weights_bucket}/{model.path}".rstrip("/"),
                    served_model_name=model.name,
                    tensor_parallel_size=vllm.tensor_parallel_size or shape_devices,
                    max_model_len=vllm.max_model_len,
                    max_num_batched_tokens=vllm.max_num_batched_tokens,
                    max_num_seqs=vllm.max_num_seqs,
                    kv_cache_dtype=vllm.kv_cache_dtype,
                    enable_expert_parallel=vllm.enable_expert_parallel,
                    load_format=vllm.load_format,
                ),
                replicas=role.replicas,
                topology=role.topology,
            )
        )
    pd = VllmPd(
        "vllm-pd",
        VllmPdArgs(
            provider=provider,
            namespace=serving.namespace,
            guide=guide,
            model_label=model.label,
            generation=generation,
            machine_vcpus=machine.vcpus,
            machine_memory_gib=machine.memory_gib,
            image=versions.vllm_image,
            sidecar_image=versions.routing_sidecar_image,
            service_account="vllm-model-server",
            bucket=model.weights_bucket,
            log_level=vllm.log_level,
            local_queue=LOCAL_QUEUE,
            priority_class=names.priority_class("high", priority["high"]),
            roles=roles,
            hf_token=config.hf_token.get_secret_value() if config.hf_token else None,
            # TPU consumers: after the pools (so destroyed before them), the slice
            # controller's webhooks, LWS, the queue and the priority classes.
            depends_on=[tpu_pools, slice_controller, *controllers.ready("lws"), queues, access, serving_policies],
        ),
    )
    if serving.smoke_test.enabled:
        SmokeJob(
            "smoke-test",
            SmokeJobArgs(
                provider=provider,
                namespace=serving.namespace,
                gateway_address=gateway.address,
                model=model.name,
                image=versions.smoke_test_image,
                deadline_seconds=serving.smoke_test.deadline_seconds,
                serving_spec=[serving.model_dump(mode="json"), versions.model_dump(mode="json")],
                depends_on=[pd, router, slice_controller],
                prefill_metrics_url=prefill_metrics_url(serving.namespace),
            ),
        )
    pulumi.export("gatewayIp", gateway.address)
    pulumi.export("completionsUrl", gateway.address.apply(lambda ip: http_url(ip, "/v1/completions")))
    pulumi.export("chatCompletionsUrl", gateway.address.apply(lambda ip: http_url(ip, "/v1/chat/completions")))

if serving.backend is Backend.SAXML:
    saxml = Saxml(
        "saxml",
        SaxmlArgs(
            provider=provider,
            project=config.project,
            region=config.location,
            namespace=serving.namespace,
            bucket_name=names.sax_bucket(config.project),
            google_account_id=names.sax_account,
            generation=generation,
            topology=serving.slice.topology,
            slices=serving.slices,
            cell=serving.saxml.cell,
            model_key=serving.saxml.model_key,
            model_path=serving.saxml.model_path,
            checkpoint=serving.saxml.checkpoint,
            weights_bucket=serving.model.weights_bucket,
            publish_deadline_seconds=serving.saxml.publish_deadline_seconds,
            images={
                "admin": versions.sax_admin_image,
                "model": versions.sax_model_image,
                "http": versions.sax_http_image,
                "publish": versions.smoke_test_image,
            },
            exposure=serving.http.type,
            source_ranges=[str(r) for r in serving.http.source_ranges],
            pod_cidr=str(net.pod_cidr),
            depends_on=controllers.ready("jobset"),
            tpu_pools=[tpu_pools],
        ),
    )
    pulumi.export("saxHttpAddress", saxml.address)
    pulumi.export("modelKey", serving.saxml.model_key)

if serving.backend is Backend.JETSTREAM:
    assert serving.model.weights_bucket is not None  # validated: jetstream needs its checkpoint bucket
    jetstream = Jetstream(
        "jetstream",
        JetstreamArgs(
            provider=provider,
            project=config.project,
            namespace=serving.namespace,
            generation=generation,
            topology=serving.slice.topology,
            slices=serving.slices,
            bucket=serving.model.weights_bucket,
            checkpoint_path=serving.model.path,
            maxtext_model=serving.jetstream.maxtext_model,
            tokenizer_path=serving.jetstream.tokenizer_path,
            per_device_batch_size=serving.jetstream.per_device_batch_size,
            max_prefill_predict_length=serving.jetstream.max_prefill_predict_length,
            max_target_length=serving.jetstream.max_target_length,
            quantization=serving.jetstream.quantization,
            images={
                "maxengine": versions.jetstream_maxengine_image,
                "http": versions.jetstream_http_image,
                "pathways": versions.jetstream_pathways_image,
                "pathways_server": versions.pathways_server_image,
                "pathways_proxy": versions.pathways_proxy_image,
            },
            exposure=serving.http.type,
            source_ranges=[str(r) for r in serving.http.source_ranges],
            pod_cidr=str(net.pod_cidr),
            depends_on=controllers.ready(),
            tpu_pools=[tpu_pools],
        ),
    )
    pulumi.export("jetstreamAddress", jetstream.address)

# Observability: what Managed Prometheus scrapes, a dashboard, and opt-in alerts.
observability = config.observability
serving_namespace = {
    Backend.VLLM_PD: lambda: [queues.namespace],
    Backend.JETSTREAM: lambda: [jetstream.namespace],
}.get(serving.backend)
if observability.pod_monitoring and serving_namespace is not None:
    PodMonitorings(
        "pod-monitoring",
        PodMonitoringsArgs(
            provider=provider,
            namespace=serving.namespace,
            backend=serving.backend.value,
            depends_on=serving_namespace(),
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
