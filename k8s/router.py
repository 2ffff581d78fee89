"""llm-d's router for prefill/decode disaggregation, built natively at a pinned endpoint-picker image.

The reference installs it from a chart tag that moves (`v0`) with an image at
`main`; the same objects are built here from the reference's facts
(dynamic-slicing.md §10.5): the InferencePool, the endpoint picker (EPP) with
its P/D plugin configuration, Service and RBAC, the HTTPRoute from the Gateway
to the pool, and GKE's health-check and backend policies for the pool.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes
import yaml
from pulumi_kubernetes.apps import v1 as apps
from pulumi_kubernetes.core import v1 as core
from pulumi_kubernetes.meta import v1 as meta
from pulumi_kubernetes.rbac import v1 as rbac

from contracts import network_policies
from contracts.kubernetes_object import KubernetesObject
from contracts.labels import COMMON_LABELS
from contracts.ports import EPP_METRICS_PORT, POOL_PORT
from k8s import epp_config
from k8s.epp_config import Plugin

EPP_GRPC_PORT = 9002
EPP_HEALTH_PORT = 9003
EPP_CONFIG_FILE = "pd-config.yaml"
INFERENCE_GROUP = "inference.networking.k8s.io"

# llm-d's P/D scheduling: a prefix-aware decider sends long uncached prompts to a
# prefill pod first; the profiles pick pods by their `llm-d.ai/role` label. Listed here in any
# order: `epp_config.config` puts each plugin after the ones it names, as the loader requires.
PREFILL_THRESHOLD_TOKENS = 16  # uncached prompt tokens from which the decider sends a prompt to prefill
PD_PLUGIN_SET = (
    Plugin("approx-prefix-cache-producer", {"maxPrefixTokensToMatch": 4096, "lruCapacityPerServer": 31250}),
    Plugin("prefix-cache-scorer"),
    Plugin("queue-scorer"),
    Plugin("prefill-filter"),
    Plugin("decode-filter"),
    Plugin("max-score-picker"),
    Plugin("disagg-profile-handler", {"deciders": {"prefill": "prefix-based-pd-decider"}}),
    Plugin("prefix-based-pd-decider", {"nonCachedTokens": PREFILL_THRESHOLD_TOKENS}),
)
PD_PROFILES = [
    {
        "name": role,
        "plugins": [
            {"pluginRef": f"{role}-filter"},
            {"pluginRef": "max-score-picker"},
            {"pluginRef": "prefix-cache-scorer", "weight": 2},
            {"pluginRef": "queue-scorer", "weight": 1},
        ],
    }
    for role in ("prefill", "decode")
]
PD_PLUGINS: dict[str, Any] = epp_config.config(PD_PLUGIN_SET, PD_PROFILES)


@dataclass(frozen=True)
class RouterArgs:
    provider: kubernetes.Provider
    name: str  # the InferencePool's name; the EPP is `<name>-epp`
    namespace: str
    gateway_name: str
    gateway: pulumi.Resource  # only the HTTPRoute waits for it
    pool_selector: Mapping[str, str]
    image: str
    depends_on: Sequence[pulumi.Resource] = ()


def pool_body(args: RouterArgs) -> dict[str, Any]:
    return {
        "apiVersion": f"{INFERENCE_GROUP}/v1",
        "kind": "InferencePool",
        "metadata": {"name": args.name, "namespace": args.namespace, "labels": dict(COMMON_LABELS)},
        "spec": {
            "selector": {"matchLabels": dict(args.pool_selector)},
            "targetPorts": [{"number": POOL_PORT}],
            "appProtocol": "http",
            "endpointPickerRef": {
                "name": f"{args.name}-epp",
                "port": {"number": EPP_GRPC_PORT},
                # Serve without smart routing rather than fail when the EPP is down.
                "failureMode": "FailOpen",
            },
        },
    }


def _pool_ref(args: RouterArgs) -> dict[str, str]:
    return {"group": INFERENCE_GROUP, "kind": "InferencePool", "name": args.name}


def route_body(args: RouterArgs) -> dict[str, Any]:
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": args.name, "namespace": args.namespace, "labels": dict(COMMON_LABELS)},
        "spec": {
            "parentRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": args.gateway_name}],
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                    "backendRefs": [_pool_ref(args)],
                }
            ],
        },
    }


def health_check_body(args: RouterArgs) -> dict[str, Any]:
    return {
        "apiVersion": "networking.gke.io/v1",
        "kind": "HealthCheckPolicy",
        "metadata": {"name": args.name, "namespace": args.namespace, "labels": dict(COMMON_LABELS)},
        "spec": {
            "targetRef": _pool_ref(args),
            "default": {
                "timeoutSec": 2,
                "checkIntervalSec": 2,
                "config": {"type": "HTTP", "httpHealthCheck": {"requestPath": "/health", "port": POOL_PORT}},
            },
        },
    }


def backend_policy_body(args: RouterArgs) -> dict[str, Any]:
    return {
        "apiVersion": "networking.gke.io/v1",
        "kind": "GCPBackendPolicy",
        "metadata": {"name": args.name, "namespace": args.namespace, "labels": dict(COMMON_LABELS)},
        # Long generations: the load balancer's default 30 s would cut responses off.
        "spec": {"targetRef": _pool_ref(args), "default": {"timeoutSec": 300, "logging": {"enabled": True}}},
    }


def epp_args(args: RouterArgs) -> list[str]:
    return [
        "--pool-name", args.name,
        "--pool-namespace", args.namespace,
        "--pool-group", INFERENCE_GROUP,
        "--zap-encoder", "json",
        "--config-file", f"/config/{EPP_CONFIG_FILE}",
        "--grpc-health-port", str(EPP_HEALTH_PORT),
        "--v=2",
        "--tracing=false",
        # Managed Prometheus scrapes without a token; the port is cluster-internal.
        "--metrics-endpoint-auth=false",
    ]  # fmt: skip


def epp_selector(name: str) -> dict[str, str]:
    """The endpoint picker's pod labels (also what the model servers admit it by)."""
    return {"app.kubernetes.io/name": f"{name}-epp"}


def epp_allowances(name: str, proxy_cidr: str) -> list[network_policies.Allowance]:
    """The gateway's proxies call the picker's ext_proc port, Google's probers its health port
    (a GKE Inference Gateway health-checks the picker as a backend); Managed Prometheus reads
    its metrics."""
    selector = epp_selector(name)
    gateway = network_policies.addresses([proxy_cidr, *network_policies.HEALTH_CHECK_RANGES])
    return [
        network_policies.Allowance("picker-from-gateway", selector, (gateway,), (EPP_GRPC_PORT, EPP_HEALTH_PORT)),
        network_policies.Allowance(
            "picker-metrics-from-prometheus", selector, (network_policies.gmp_collectors(),), (EPP_METRICS_PORT,)
        ),
    ]


class Router(pulumi.ComponentResource):
    pool: KubernetesObject
    route: KubernetesObject
    epp: apps.Deployment

    def __init__(self, name: str, args: RouterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tpu-slicing:k8s:Router", name, None, opts)
        epp = f"{args.name}-epp"
        selector = epp_selector(args.name)
        labels = {**COMMON_LABELS, **selector}

        def meta_for(object_name: str) -> meta.ObjectMetaArgs:
            return meta.ObjectMetaArgs(name=object_name, namespace=args.namespace, labels=labels)

        child = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=list(args.depends_on))
        # The pool comes first: the EPP reports ready only once it has synced its pool,
        # so a pool created after the EPP's rollout would never let the rollout finish.
        self.pool = KubernetesObject("inference-pool", pool_body(args), child)
        account = core.ServiceAccount("epp-service-account", metadata=meta_for(epp), opts=child)
        role = rbac.Role(
            "epp-role",
            metadata=meta_for(epp),
            rules=[
                rbac.PolicyRuleArgs(
                    api_groups=[INFERENCE_GROUP], resources=["inferencepools"], verbs=["get", "list", "watch"]
                ),
                # v0.9.0 watches these kinds in the legacy group or, when its CRDs exist, in llm-d.ai
                # (llm-d-router v0.9.0 pkg/epp/server/controller_config.go); its chart grants both
                # (config/charts/llm-d-router-gateway/templates/rbac.yaml).
                rbac.PolicyRuleArgs(
                    api_groups=["inference.networking.x-k8s.io", "llm-d.ai"],
                    resources=["inferenceobjectives", "inferencemodelrewrites"],
                    verbs=["get", "list", "watch"],
                ),
                rbac.PolicyRuleArgs(api_groups=[""], resources=["pods"], verbs=["get", "list", "watch"]),
                rbac.PolicyRuleArgs(
                    api_groups=["coordination.k8s.io"],
                    resources=["leases"],
                    verbs=["get", "list", "watch", "create", "update", "patch", "delete"],
                ),
            ],
            opts=child,
        )
        binding = rbac.RoleBinding(
            "epp-role-binding",
            metadata=meta_for(epp),
            role_ref=rbac.RoleRefArgs(api_group="rbac.authorization.k8s.io", kind="Role", name=epp),
            subjects=[rbac.SubjectArgs(kind="ServiceAccount", name=epp, namespace=args.namespace)],
            opts=child,
        )
        config = core.ConfigMap(
            "epp-config",
            metadata=meta_for(epp),
            data={EPP_CONFIG_FILE: yaml.safe_dump(PD_PLUGINS, sort_keys=False)},
            opts=child,
        )
        service = core.Service(
            "epp-service",
            metadata=meta_for(epp),
            spec=core.ServiceSpecArgs(
                type="ClusterIP",
                selector=selector,
                # No appProtocol: neither upstream chart sets one on the picker's Service
                # (llm-d-router v0.9.0 config/charts/routerlib/templates/_service.yaml; the
                # inference extension's inferencepool chart), whose proxy speaks gRPC to it anyway.
                ports=[
                    core.ServicePortArgs(name="grpc-ext-proc", port=EPP_GRPC_PORT, target_port=EPP_GRPC_PORT),
                    core.ServicePortArgs(name="http-metrics", port=EPP_METRICS_PORT, target_port=EPP_METRICS_PORT),
                ],
            ),
            opts=child,
        )
        grpc_probe = core.GRPCActionArgs(port=EPP_HEALTH_PORT, service="inference-extension")
        self.epp = apps.Deployment(
            "epp",
            metadata=meta_for(epp),
            spec=apps.DeploymentSpecArgs(
                replicas=1,
                strategy=apps.DeploymentStrategyArgs(type="Recreate"),
                selector=meta.LabelSelectorArgs(match_labels=selector),
                template=core.PodTemplateSpecArgs(
                    metadata=meta.ObjectMetaArgs(labels=labels),
                    spec=core.PodSpecArgs(
                        service_account_name=epp,
                        automount_service_account_token=True,  # it watches pods and its InferencePool
                        termination_grace_period_seconds=130,
                        containers=[
                            core.ContainerArgs(
                                name="epp",
                                image=args.image,
                                args=epp_args(args),
                                env=[
                                    core.EnvVarArgs(
                                        name="NAMESPACE",
                                        value_from=core.EnvVarSourceArgs(
                                            field_ref=core.ObjectFieldSelectorArgs(field_path="metadata.namespace")
                                        ),
                                    ),
                                    core.EnvVarArgs(
                                        name="POD_NAME",
                                        value_from=core.EnvVarSourceArgs(
                                            field_ref=core.ObjectFieldSelectorArgs(field_path="metadata.name")
                                        ),
                                    ),
                                ],
                                ports=[
                                    core.ContainerPortArgs(name="grpc", container_port=EPP_GRPC_PORT),
                                    core.ContainerPortArgs(name="grpc-health", container_port=EPP_HEALTH_PORT),
                                    core.ContainerPortArgs(name="metrics", container_port=EPP_METRICS_PORT),
                                ],
                                liveness_probe=core.ProbeArgs(
                                    grpc=grpc_probe, initial_delay_seconds=5, period_seconds=10
                                ),
                                readiness_probe=core.ProbeArgs(grpc=grpc_probe, period_seconds=2),
                                resources=core.ResourceRequirementsArgs(
                                    requests={"cpu": "4", "memory": "8Gi"}, limits={"memory": "16Gi"}
                                ),
                                security_context=core.SecurityContextArgs(
                                    allow_privilege_escalation=False,
                                    run_as_non_root=True,
                                    capabilities=core.CapabilitiesArgs(drop=["ALL"]),
                                    # Pod Security "restricted": the container runtime's default profile.
                                    seccomp_profile=core.SeccompProfileArgs(type="RuntimeDefault"),
                                ),
                                volume_mounts=[
                                    core.VolumeMountArgs(name="config", mount_path="/config", read_only=True)
                                ],
                            )
                        ],
                        volumes=[core.VolumeArgs(name="config", config_map=core.ConfigMapVolumeSourceArgs(name=epp))],
                    ),
                ),
            ),
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=args.provider,
                depends_on=[*args.depends_on, account, role, binding, config, self.pool],
            ),
        )
        after_pool = pulumi.ResourceOptions(
            parent=self, provider=args.provider, depends_on=[*args.depends_on, self.pool]
        )
        # Traffic only once the picker answers and the Gateway exists.
        self.route = KubernetesObject(
            "http-route",
            route_body(args),
            pulumi.ResourceOptions(
                parent=self, provider=args.provider, depends_on=[*args.depends_on, self.epp, service, args.gateway]
            ),
        )
        KubernetesObject("health-check-policy", health_check_body(args), after_pool)
        KubernetesObject("backend-policy", backend_policy_body(args), after_pool)
        self.register_outputs({"pool": args.name})
