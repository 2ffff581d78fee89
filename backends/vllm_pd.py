"""Disaggregated prefill/decode vLLM on dynamic TPU7x sub-slices, behind llm-d's router and an
internal Gateway (the llm-d `pd-disaggregation` guide)."""

from __future__ import annotations

import pulumi

from backends.foundation import Foundation, Served
from contracts.addresses import http_url
from contracts.network_policies import Allowance
from k8s.controllers import CHARTS as CONTROLLER_CHARTS
from k8s.inference_crds import InferenceCrds, InferenceCrdsArgs
from k8s.inference_gateway import InferenceGateway, InferenceGatewayArgs
from k8s.kueue_queues import LOCAL_QUEUE
from k8s.metrics_adapter import NAME as ADAPTER_ACCOUNT
from k8s.metrics_adapter import NAMESPACE as ADAPTER_NAMESPACE
from k8s.metrics_adapter import MetricsAdapter, MetricsAdapterArgs
from k8s.router import Router, RouterArgs, epp_allowances, epp_selector
from settings.model import StackConfig
from settings.vllm import AutoscalingConfig
from workloads.benchmark_job import BenchmarkJob, BenchmarkJobArgs
from workloads.model_access import BenchmarkAccess, ModelAccess, ModelAccessArgs, workload_principal_output
from workloads.role_autoscaler import AutoscalerPlan
from workloads.smoke_job import JOB_NAME as SMOKE_JOB
from workloads.smoke_job import SliceWatchArgs, SmokeJob, SmokeJobArgs
from workloads.vllm_command import VllmServe
from workloads.vllm_pd import (
    RolePlan,
    VllmPd,
    VllmPdArgs,
    decode_metrics_url,
    lws_name,
    pool_selector,
    prefill_metrics_url,
)
from workloads.vllm_pd import network_allowances as vllm_allowances

GUIDE = "pd-disaggregation"  # the llm-d guide this backend follows; names its router and pool


def allowances(config: StackConfig) -> list[Allowance]:
    """What the serving namespace admits for the picker and the model servers."""
    serving, proxy_cidr = config.serving, str(config.network.proxy_cidr)
    return [
        *epp_allowances(GUIDE, proxy_cidr),
        *vllm_allowances(
            GUIDE,
            # Every group the role may run: an autoscaler's new groups need their allowances in place.
            {role: getattr(serving, role).max_replicas for role in ("prefill", "decode")},
            picker=epp_selector(GUIDE),
            proxy_cidr=proxy_cidr,
            smoke_test_job=SMOKE_JOB if serving.smoke_test.enabled else None,
        ),
    ]


def _roles(base: Foundation) -> list[RolePlan]:
    serving, generation = base.config.serving, base.generation
    model, vllm = serving.model, serving.vllm
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
                autoscaler=_autoscaler(role.autoscaling),
            )
        )
    return roles


def _autoscaler(scaling: AutoscalingConfig | None) -> AutoscalerPlan | None:
    if scaling is None:
        return None
    return AutoscalerPlan(
        min=scaling.min,
        max=scaling.max,
        metric=scaling.metric,
        target=scaling.target,
        scale_up_stabilization_seconds=scaling.scale_up_stabilization_seconds,
        scale_down_stabilization_seconds=scaling.scale_down_stabilization_seconds,
        scale_up_tolerance=scaling.scale_up_tolerance,
        scale_down_tolerance=scaling.scale_down_tolerance,
    )


def _benchmark(base: Foundation, gateway_address: pulumi.Output[str], after: list[pulumi.Resource]) -> BenchmarkJob:
    """The benchmark Job and its own identity: read the bucket, write under the stack's own
    benchmarks/<namePrefix>/ only."""
    config, serving = base.config, base.config.serving
    assert serving.model.weights_bucket is not None
    access = BenchmarkAccess(
        "benchmark-access",
        ModelAccessArgs(
            provider=base.provider,
            project=config.project,
            bucket=serving.model.weights_bucket,
            namespace=serving.namespace,
            service_account=config.names.benchmark_account,
            depends_on=after[0],
            identity_pool=base.cluster.cluster,
            write_prefix=config.names.benchmark_prefix,
        ),
    )
    return BenchmarkJob(
        "benchmark",
        BenchmarkJobArgs(
            provider=base.provider,
            namespace=serving.namespace,
            project=config.project,
            gateway_address=gateway_address,
            served_model=serving.model.name,
            bucket=serving.model.weights_bucket,
            prefix=config.names.benchmark_prefix,
            service_account=config.names.benchmark_account,
            model_path=serving.model.path,
            image=config.versions.benchmark_image,
            config=serving.benchmark,
            # What is measured: the serving stack as the smoke test sees it, and how it is measured.
            serving_spec=[
                serving.model_dump(mode="json", exclude={"saxml": True, "jetstream": True, "smoke_test": True}),
                config.versions.vllm_image,
            ],
            depends_on=[*after, *access.members],
        ),
    )


def deploy(base: Foundation) -> Served:
    config, provider = base.config, base.provider
    serving, versions, names = config.serving, config.versions, config.names
    model = serving.model
    queues, slice_controller, policies = base.queues, base.slice_controller, base.serving_policies
    # Validated: vllm-pd runs on the dynamic-slicing platform and reads its weights from a bucket.
    assert queues is not None and slice_controller is not None and policies is not None
    assert model.weights_bucket is not None
    access = ModelAccess(
        "model-access",
        ModelAccessArgs(
            provider=provider,
            project=config.project,
            bucket=model.weights_bucket,
            namespace=serving.namespace,
            service_account=names.model_server_account,
            depends_on=queues.namespace,
            identity_pool=base.cluster.cluster,
        ),
    )
    inference_crds = InferenceCrds(
        "inference-crds",
        InferenceCrdsArgs(
            kubeconfig=base.cluster.kubeconfig,
            version=versions.gateway_api_inference_extension,
            depends_on=[base.cluster.cluster, base.cluster.system_pool],
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
            depends_on=[queues.namespace, base.network.proxy_subnet],
        ),
    )
    router = Router(
        "router",
        RouterArgs(
            provider=provider,
            name=GUIDE,
            namespace=serving.namespace,
            gateway_name=serving.gateway.name,
            pool_selector=pool_selector(GUIDE),
            image=versions.endpoint_picker_image,
            depends_on=[inference_crds, queues.namespace, policies],
            gateway=gateway.gateway,
        ),
    )
    pd = VllmPd(
        "vllm-pd",
        VllmPdArgs(
            provider=provider,
            namespace=serving.namespace,
            guide=GUIDE,
            model_label=model.label,
            generation=base.generation,
            machine_vcpus=base.machine.vcpus,
            machine_memory_gib=base.machine.memory_gib,
            image=versions.vllm_image,
            sidecar_image=versions.routing_sidecar_image,
            service_account=names.model_server_account,
            bucket=model.weights_bucket,
            log_level=serving.vllm.log_level,
            local_queue=LOCAL_QUEUE,
            priority_class=names.priority_class("high"),
            roles=_roles(base),
            hf_token=config.hf_token.get_secret_value() if config.hf_token else None,
            force_delete_on_unreachable_host=config.kueue.recovery.force_delete_on_unreachable_host,
            # TPU consumers: after the pools (so destroyed before them), the slice
            # controller's webhooks, LWS, the queue and the priority classes.
            depends_on=[
                base.tpu_pools,
                slice_controller,
                *base.controllers.ready("lws"),
                queues,
                access,
                policies,
            ],
        ),
    )
    if config.controllers.install and any(getattr(serving, role).autoscaling for role in ("prefill", "decode")):
        # The metrics API the roles' autoscalers read (k8s/metrics_adapter.py), cluster-wide: in a
        # shared cluster (controllers.install false) the platform team serves custom.metrics.k8s.io,
        # as it runs the controllers; two adapters would claim one APIService (docs/deploy.md).
        MetricsAdapter(
            "metrics-adapter",
            MetricsAdapterArgs(
                provider=provider,
                image=versions.metrics_adapter_image,
                project=config.project,
                principal=workload_principal_output(
                    config.project, ADAPTER_NAMESPACE, ADAPTER_ACCOUNT, [base.cluster.cluster]
                ),
                pod_cidr=str(config.network.pod_cidr),
                depends_on=[base.cluster.cluster, base.cluster.system_pool],
            ),
        )
    smoke = None
    if serving.smoke_test.enabled:
        smoke = SmokeJob(
            "smoke-test",
            SmokeJobArgs(
                provider=provider,
                namespace=serving.namespace,
                gateway_address=gateway.address,
                model=model.name,
                image=versions.smoke_test_image,
                deadline_seconds=serving.smoke_test.deadline_seconds,
                # The controllers' charts are not what it tests: a Kueue, JobSet or LWS upgrade is
                # an in-place Helm upgrade that leaves every serving object as it is, and must not
                # replace the Job (tests/test_cluster_up_installed.py found the needless re-run).
                # Nor is the number of groups: a scale-up's new groups enter the picker's pool only
                # once their readiness probes pass, and a scale-down leaves groups already tested,
                # so a replica change re-ran the Job for nothing (the README's Operations recipes); the
                # same holds for the autoscaler's bounds, which only change how many groups there are.
                # Nor are the other backends' blocks, which a vllm-pd stack may not set (settings'
                # backend keys): only their defaults, so a new key there re-ran the Job for nothing.
                serving_spec=[
                    serving.model_dump(
                        mode="json",
                        exclude={
                            "prefill": {"replicas", "autoscaling"},
                            "decode": {"replicas", "autoscaling"},
                            "saxml": True,
                            "jetstream": True,
                            # The benchmark is not what the smoke test proves: its own Job re-runs.
                            "benchmark": True,
                        },
                    ),
                    versions.model_dump(
                        mode="json", exclude={*CONTROLLER_CHARTS, "metrics_adapter_image", "benchmark_image"}
                    ),
                ],
                depends_on=[pd, router, slice_controller],
                prefill_metrics_url=prefill_metrics_url(serving.namespace),
                decode_metrics_url=decode_metrics_url(serving.namespace),
                # A slice that fails to come up stops the test (and `pulumi up`) at once, naming it,
                # rather than after the deadline that counts one activation.
                slice_watch=SliceWatchArgs(
                    admission_check=names.admission_check, leader_worker_sets=tuple(lws_name(r) for r in pd.sets)
                ),
            ),
        )
    address: pulumi.Output[str] = gateway.address
    benchmark_outputs: dict[str, pulumi.Input[str]] = {}
    if serving.benchmark.enabled:
        # Validated: the benchmark runs after the smoke test (settings/benchmark.py).
        assert smoke is not None
        benchmark = _benchmark(base, gateway.address, after=[smoke])
        benchmark_outputs["benchmarkResult"] = benchmark.job.metadata.apply(lambda _: benchmark.result)
    return Served(
        outputs={
            **benchmark_outputs,
            "gatewayIp": address,
            "completionsUrl": address.apply(lambda ip: http_url(ip, "/v1/completions")),
            "chatCompletionsUrl": address.apply(lambda ip: http_url(ip, "/v1/chat/completions")),
        },
        monitored_after=[queues.namespace],
    )
