"""Disaggregated prefill/decode vLLM as two LeaderWorkerSets on dynamic sub-slices.

One LWS replica is one sub-slice: its leader and workers are the slice's VMs,
Kueue admits the group as a whole into a cube partition, and the slice
controller links its chips. The leader serves the InferencePool's port (vLLM
for prefill, llm-d's routing sidecar for decode) and is the only pod the pool
selects; workers only join the leader's Ray cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes

from contracts import network_policies, pod_security, quantities
from contracts.kubernetes_object import KubernetesObject
from contracts.labels import COMMON_LABELS, GUIDE_LABEL, ROLE_LABEL, SERVING_LABEL
from contracts.ports import DECODE_VLLM_PORT, POOL_PORT
from domain.serving_budget import BUDGET
from domain.topology import Generation, Topology
from settings.rules_recovery import force_delete_annotations, healthy_selector
from workloads import vllm_command, vllm_listeners
from workloads.role_autoscaler import AutoscalerPlan, hpa_body
from workloads.vllm_command import VllmServe

LWS_API = "leaderworkerset.x-k8s.io/v1"
SIDECAR_RESOURCES = {"cpu": "1", "memory": "1Gi"}
HF_SECRET = "hf-token"
SKIP_TPU_WEBHOOK = "cloud.google.com/skip-tpu-webhook-check"

# The leader's startup probe outlasts its own script: Ray's wait for the workers, then the
# engine's (domain/serving_budget.py).
STARTUP_PERIOD_SECONDS = BUDGET.probe_period_seconds
STARTUP_FAILURES = BUDGET.startup_failures


@dataclass(frozen=True)
class RolePlan:
    serve: VllmServe
    replicas: int  # the groups of a fixed role; an autoscaled role's LWS carries none (below)
    topology: str
    autoscaler: AutoscalerPlan | None = None


@dataclass(frozen=True)
class VllmPdArgs:
    provider: kubernetes.Provider
    namespace: str
    guide: str
    model_label: str
    generation: Generation
    machine_vcpus: int
    machine_memory_gib: int
    image: str
    sidecar_image: str
    service_account: str
    bucket: str
    log_level: str
    local_queue: str
    priority_class: str
    roles: Sequence[RolePlan]
    hf_token: pulumi.Input[str] | None
    # kueue.recovery.forceDeleteOnUnreachableHost: Kueue may force-delete a pod left on a dead host.
    force_delete_on_unreachable_host: bool
    depends_on: Sequence[pulumi.Resource] = ()


def lws_name(role: str) -> str:
    """The LeaderWorkerSet of a role (`prefill`, `decode`)."""
    return f"vllm-{role}"


def pool_selector(guide: str) -> dict[str, str]:
    return {GUIDE_LABEL: guide, SERVING_LABEL: "true"}


PREFILL_METRICS_SERVICE = "vllm-prefill-leaders"
DECODE_METRICS_SERVICE = "vllm-decode-leaders"
# The port each role's vLLM serves /metrics on: decode's vLLM sits behind the sidecar's pool port.
METRICS_PORTS = {"prefill": POOL_PORT, "decode": DECODE_VLLM_PORT}
METRICS_SERVICES = {"prefill": PREFILL_METRICS_SERVICE, "decode": DECODE_METRICS_SERVICE}


def metrics_service_body(guide: str, namespace: str, role: str) -> dict[str, Any]:
    """A headless Service of one role's leaders: one DNS address per ready leader, so the smoke
    test can read every leader's vLLM counters (pods/smoke_request.py): prompt tokens on prefill, the
    prompt tokens decode took from the KV connector on decode."""
    port = METRICS_PORTS[role]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": METRICS_SERVICES[role], "namespace": namespace, "labels": dict(COMMON_LABELS)},
        "spec": {
            "clusterIP": "None",
            "selector": {**pool_selector(guide), ROLE_LABEL: role},
            "ports": [{"name": "metrics", "port": port, "targetPort": port}],
        },
    }


def metrics_url(namespace: str, role: str) -> str:
    return f"http://{METRICS_SERVICES[role]}.{namespace}.svc.cluster.local:{METRICS_PORTS[role]}/metrics"


def prefill_metrics_url(namespace: str) -> str:
    return metrics_url(namespace, "prefill")


def decode_metrics_url(namespace: str) -> str:
    return metrics_url(namespace, "decode")


def network_allowances(
    guide: str,
    replicas: Mapping[str, int],
    picker: Mapping[str, str],
    proxy_cidr: str,
    smoke_test_job: str | None,
) -> list[network_policies.Allowance]:
    """Who may reach the model servers of `guide` (roles -> LWS replicas), and on which ports.

    - the gateway's proxies and Google's probers: the pool port of the leaders (the pool's
      members), which is where the HealthCheckPolicy probes;
    - the endpoint picker: the pool port, whose /metrics it scores pods by;
    - the decode pods: every port of the prefill pods. Decode host k pulls its KV from prefill host
      k through the transfer server, the bulk-transport listeners tpu-inference binds to port 0
      and the side channel, and the decode leader's sidecar sends the prefill to a prefill leader
      (workloads/vllm_listeners.py says where each is opened). A NetworkPolicy cannot name the
      ports the kernel picks, so this one source is admitted on all TCP ports; prefill never
      connects to decode, so nothing is admitted the other way;
    - Managed Prometheus: the vLLM metrics port of each leader (observability/pod_monitoring.py);
    - the pods of one LWS group: each other on every port (Ray's head and workers, JAX), and
      no other group's;
    - the smoke test: each role's vLLM metrics, to prove a prefill pod did the prefill and the
      decode pod took its KV.
    """
    leaders = pool_selector(guide)
    gateway = network_policies.addresses([proxy_cidr, *network_policies.HEALTH_CHECK_RANGES])
    prometheus = network_policies.gmp_collectors()
    allowances = [
        network_policies.Allowance("vllm-pool-from-gateway", leaders, (gateway,), (POOL_PORT,)),
        network_policies.Allowance("vllm-pool-from-picker", leaders, (network_policies.pods(picker),), (POOL_PORT,)),
    ]
    if "prefill" in replicas and "decode" in replicas:
        prefill = {GUIDE_LABEL: guide, ROLE_LABEL: "prefill"}
        decode = {GUIDE_LABEL: guide, ROLE_LABEL: "decode"}
        allowances.append(
            network_policies.Allowance(
                "vllm-prefill-from-decode", prefill, (network_policies.pods(decode),), all_tcp=True
            )
        )
    for role in replicas:
        allowances.append(
            network_policies.Allowance(
                f"vllm-{role}-metrics-from-prometheus",
                {**leaders, ROLE_LABEL: role},
                (prometheus,),
                (METRICS_PORTS[role],),
            )
        )
    for role, count in replicas.items():
        allowances += network_policies.within_groups(
            lws_name(role),
            {network_policies.LWS_NAME_LABEL: lws_name(role)},
            network_policies.LWS_GROUP_INDEX_LABEL,
            count,
        )
    if smoke_test_job is not None:
        smoke = network_policies.pods({network_policies.JOB_NAME_LABEL: smoke_test_job})
        for role in replicas:
            allowances.append(
                network_policies.Allowance(
                    f"vllm-{role}-metrics-from-smoke-test",
                    {**leaders, ROLE_LABEL: role},
                    (smoke,),
                    (METRICS_PORTS[role],),
                )
            )
    return allowances


def _probe(path: str, port: int, period: int, failures: int) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": port}, "periodSeconds": period, "failureThreshold": failures}


def _env(args: VllmPdArgs) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": name, "value": value} for name, value in vllm_command.environment(args.bucket, args.log_level)
    ]
    if args.hf_token is not None:
        env.insert(0, {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": HF_SECRET, "key": "HF_TOKEN"}}})
    return env


def _resources(args: VllmPdArgs, chips: int) -> dict[str, Any]:
    # Leave a few cores and ~110 GiB per VM to the kubelet, system pods and Ray (reference: 220 CPU, 850Gi).
    amounts = {
        "google.com/tpu": str(chips),
        "cpu": str(args.machine_vcpus - 4),
        "memory": quantities.binary(args.machine_memory_gib - 110),
    }
    return {"requests": dict(amounts), "limits": dict(amounts)}


def _declared_ports(pod: str) -> list[dict[str, Any]]:
    """The fixed ports of workloads/vllm_listeners.py a pod's vLLM container opens, named. GKE
    reports TPU duty cycle and HBM use only for containers that declare the runtime's port."""
    return [
        {"name": listener.name, "containerPort": listener.port}
        for listener in vllm_listeners.opened_by(pod)
        if not listener.ephemeral and listener.name in DECLARED
    ]


DECLARED = ("tpu-kv-transfer", "tpu-pd-coord", "tpu-metrics")


def _pod_spec(args: VllmPdArgs, container: dict[str, Any], shape: Topology) -> dict[str, Any]:
    return {
        "serviceAccountName": args.service_account,
        # HEALTHY partitions only: the slice controller would otherwise allow DEGRADED ones too
        # (settings/rules_recovery.py); both templates select it, as llm-d's TPU7x recipes do.
        "nodeSelector": {
            "cloud.google.com/gke-tpu-accelerator": args.generation.accelerator_label,
            **healthy_selector(args.generation, shape),
        },
        "tolerations": [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [container],
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "100Gi"}}],
    }


def _container(args: VllmPdArgs, name: str, script: str, chips: int) -> dict[str, Any]:
    return {
        "name": name,
        "image": args.image,
        "command": ["sh", "-c", script],
        "env": _env(args),
        "resources": _resources(args, chips),
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }


def lws_body(args: VllmPdArgs, plan: RolePlan) -> dict[str, Any]:
    role = plan.serve.role
    shape = Topology.parse(plan.topology)
    size = args.generation.vms(shape)
    chips = args.generation.host_machine(shape).chips_per_vm
    labels = {
        GUIDE_LABEL: args.guide,
        "llm-d.ai/model": args.model_label,
        ROLE_LABEL: role,
        "inference.networking.k8s.io/engine-type": "vllm",
    }
    # A dynamic-slice pod has no static gke-tpu-topology nodeSelector, which GKE's TPU admission
    # webhook otherwise requires: the slice controller's own LWS webhook adds the skip annotation on
    # create (AI-Hypercomputer/xpk slice/internal/webhooks/leaderworkerset_webhook.go, PR #1173) and
    # llm-d's TPU7x dynamic-slice LWS carry it on both templates (guides/optimized-baseline/modelserver/
    # tpu/v7-dynamic-slice/vllm/2x2x2/lws.yaml). Declared here so it never depends on a create-only
    # webhook; JobSets (the slicing checks) stay without it, as upstream's Job/JobSet webhooks leave them.
    annotations = {
        "cloud.google.com/gke-tpu-slice-topology": plan.topology,
        SKIP_TPU_WEBHOOK: "true",
        # Released by Kueue once left Terminating on an unreachable host (settings/rules_recovery.py).
        **force_delete_annotations(args.force_delete_on_unreachable_host),
    }

    leader = _container(args, "vllm-leader", vllm_command.leader_script(plan.serve), chips)
    port = plan.serve.port
    leader["ports"] = [
        {"name": "modelserver" if role == "prefill" else "vllm", "containerPort": port},
        *_declared_ports(f"{role} leader"),
    ]
    leader["startupProbe"] = _probe("/health", port, STARTUP_PERIOD_SECONDS, STARTUP_FAILURES)
    leader["readinessProbe"] = _probe("/health", port, 10, 3)
    leader["livenessProbe"] = _probe("/health", port, 30, 5)
    leader_spec = _pod_spec(args, leader, shape)
    if role == "decode":
        # Native sidecar: owns the pool port, sends prefill to a prefill pod, then decodes locally.
        leader_spec["initContainers"] = [
            {
                "name": "routing-proxy",
                "image": args.sidecar_image,
                "restartPolicy": "Always",
                # Flags of llm-d-router v0.9.0 pkg/sidecar/proxy/options.go (`--connector` is
                # deprecated there for `--kv-connector`); it listens on --port alone
                # (pkg/sidecar/proxy/proxy_helpers.go `net.Listen`).
                "args": [
                    f"--port={POOL_PORT}",
                    f"--vllm-port={DECODE_VLLM_PORT}",
                    "--kv-connector=nixlv2",
                    "--zap-log-level=1",
                    "--secure-proxy=false",
                ],
                "ports": [{"name": "modelserver", "containerPort": POOL_PORT, "protocol": "TCP"}],
                # A native sidecar's restart restarts the group (LWS v0.8.0 pkg/utils/pod/pod_utils.go
                # counts it as a container restart): requests equal to limits, so the kubelet never
                # evicts it first and its memory has room for long prompts in flight.
                "resources": {"requests": dict(SIDECAR_RESOURCES), "limits": dict(SIDECAR_RESOURCES)},
                "readinessProbe": {"tcpSocket": {"port": POOL_PORT}, "periodSeconds": 10},
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "runAsNonRoot": True,
                    "capabilities": {"drop": ["ALL"]},
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
            }
        ]
    worker = _container(args, "vllm-worker", vllm_command.worker_script(), chips)
    worker["ports"] = _declared_ports(f"{role} worker")
    return {
        "apiVersion": LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": {
            "name": lws_name(role),
            "namespace": args.namespace,
            "labels": {
                **COMMON_LABELS,
                **labels,
                "kueue.x-k8s.io/queue-name": args.local_queue,
                "kueue.x-k8s.io/priority-class": args.priority_class,
            },
            "annotations": {
                # One group per slice: the slice controller keys exclusivity on the slice.
                "leaderworkerset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-tpu-slice",
                # Loading takes tens of minutes and Kueue decides when groups start; the
                # smoke test, not `pulumi up`'s await, proves the groups serve.
                "pulumi.com/skipAwait": "true",
            },
        },
        "spec": {
            # An autoscaled role's LWS says no number of groups: the HPA owns it. Were the program to
            # write one, every later `up` would apply it again (ignore_changes keeps the stored
            # input, which the provider still applies) and take the field back from the HPA.
            **({} if plan.autoscaler else {"replicas": plan.replicas}),
            "leaderWorkerTemplate": {
                "size": size,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {
                    "metadata": {"labels": {**labels, SERVING_LABEL: "true"}, "annotations": annotations},
                    "spec": pod_security.harden(leader_spec),
                },
                "workerTemplate": {
                    "metadata": {"labels": labels, "annotations": annotations},
                    "spec": pod_security.harden(_pod_spec(args, worker, shape)),
                },
            },
        },
    }


class VllmPd(pulumi.ComponentResource):
    sets: dict[str, KubernetesObject]
    autoscalers: dict[str, KubernetesObject]
    metrics_services: dict[str, KubernetesObject]

    def __init__(self, name: str, args: VllmPdArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tpu-slicing:workloads:VllmPd", name, None, opts)
        depends: list[pulumi.Resource] = list(args.depends_on)
        if args.hf_token is not None:
            depends.append(
                kubernetes.core.v1.Secret(
                    "hf-token",
                    metadata=kubernetes.meta.v1.ObjectMetaArgs(
                        name=HF_SECRET, namespace=args.namespace, labels=dict(COMMON_LABELS)
                    ),
                    type="Opaque",
                    string_data={"HF_TOKEN": pulumi.Output.secret(args.hf_token)},
                    opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=list(args.depends_on)),
                )
            )
        self.sets = {
            plan.serve.role: KubernetesObject(
                f"{plan.serve.role}-lws",
                lws_body(args, plan),
                pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=depends),
            )
            for plan in args.roles
        }
        self.autoscalers = {
            plan.serve.role: KubernetesObject(
                f"{plan.serve.role}-autoscaler",
                hpa_body(
                    args.namespace,
                    LWS_API,
                    lws_name(plan.serve.role),
                    {GUIDE_LABEL: args.guide, ROLE_LABEL: plan.serve.role},
                    plan.autoscaler,
                ),
                pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[self.sets[plan.serve.role]]),
            )
            for plan in args.roles
            if plan.autoscaler is not None
        }
        # The prefill Service keeps the resource name it had alone: a new name would replace it.
        self.metrics_services = {
            role: KubernetesObject(
                f"{role}-metrics-service",
                metrics_service_body(args.guide, args.namespace, role),
                pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=depends),
            )
            for role in self.sets
        }
        self.register_outputs({"leaderWorkerSets": [lws_name(role) for role in self.sets]})
