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

from domain.topology import Generation, Topology
from shared import network_policies, pod_security, quantities
from shared.kubernetes_object import KubernetesObject
from shared.labels import COMMON_LABELS, GUIDE_LABEL, ROLE_LABEL, SERVING_LABEL
from shared.ports import DECODE_VLLM_PORT, POOL_PORT
from workloads import vllm_command
from workloads.vllm_command import VllmServe

LWS_API = "leaderworkerset.x-k8s.io/v1"
HF_SECRET = "hf-token"

# A 397B model streams from GCS and compiles for tens of minutes: allow an hour to start.
STARTUP_PERIOD_SECONDS = 30
STARTUP_FAILURES = 120


@dataclass(frozen=True)
class RolePlan:
    serve: VllmServe
    replicas: int
    topology: str


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
    depends_on: Sequence[pulumi.Resource] = ()


def pool_selector(guide: str) -> dict[str, str]:
    return {GUIDE_LABEL: guide, SERVING_LABEL: "true"}


PREFILL_METRICS_SERVICE = "vllm-prefill-leaders"


def prefill_metrics_service_body(guide: str, namespace: str) -> dict[str, Any]:
    """A headless Service of the prefill leaders: one DNS address per ready leader, so the smoke
    test can read every prefill pod's prompt-token counter (pods/smoke_test.py)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": PREFILL_METRICS_SERVICE, "namespace": namespace, "labels": dict(COMMON_LABELS)},
        "spec": {
            "clusterIP": "None",
            "selector": {**pool_selector(guide), ROLE_LABEL: "prefill"},
            "ports": [{"name": "metrics", "port": POOL_PORT, "targetPort": POOL_PORT}],
        },
    }


def prefill_metrics_url(namespace: str) -> str:
    return f"http://{PREFILL_METRICS_SERVICE}.{namespace}.svc.cluster.local:{POOL_PORT}/metrics"


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
    - the decode leader's routing sidecar: the prefill leaders' pool port (it sends the prefill
      there before decoding locally, llm-d-routing-sidecar);
    - prefill and decode pods: each other's KV-transfer and side-channel ports, which both
      sides of tpu-inference's TPU connector listen on;
    - Managed Prometheus: the vLLM metrics port of each leader (observability/pod_monitoring.py);
    - the pods of one LWS group: each other on every port (Ray's head and workers, JAX), and
      no other group's;
    - the smoke test: the prefill leaders' metrics, to prove a prefill pod did the prefill.
    """
    leaders = pool_selector(guide)
    prefill_leaders = {**leaders, ROLE_LABEL: "prefill"}
    decode_leaders = {**leaders, ROLE_LABEL: "decode"}
    gateway = network_policies.addresses([proxy_cidr, *network_policies.HEALTH_CHECK_RANGES])
    prometheus = network_policies.gmp_collectors()
    kv_ports = (vllm_command.KV_TRANSFER_PORT, vllm_command.SIDE_CHANNEL_PORT)
    allowances = [
        network_policies.Allowance("vllm-pool-from-gateway", leaders, (gateway,), (POOL_PORT,)),
        network_policies.Allowance("vllm-pool-from-picker", leaders, (network_policies.pods(picker),), (POOL_PORT,)),
    ]
    if "prefill" in replicas and "decode" in replicas:
        prefill = {GUIDE_LABEL: guide, ROLE_LABEL: "prefill"}
        decode = {GUIDE_LABEL: guide, ROLE_LABEL: "decode"}
        allowances += [
            network_policies.Allowance(
                "vllm-prefill-from-decode-sidecar",
                prefill_leaders,
                (network_policies.pods(decode_leaders),),
                (POOL_PORT,),
            ),
            network_policies.Allowance("vllm-kv-to-prefill", prefill, (network_policies.pods(decode),), kv_ports),
            network_policies.Allowance("vllm-kv-to-decode", decode, (network_policies.pods(prefill),), kv_ports),
        ]
    metrics_ports = {"prefill": POOL_PORT, "decode": DECODE_VLLM_PORT}
    for role in replicas:
        allowances.append(
            network_policies.Allowance(
                f"vllm-{role}-metrics-from-prometheus",
                {**leaders, ROLE_LABEL: role},
                (prometheus,),
                (metrics_ports[role],),
            )
        )
    for role, count in replicas.items():
        allowances += network_policies.within_groups(
            f"vllm-{role}",
            {network_policies.LWS_NAME_LABEL: f"vllm-{role}"},
            network_policies.LWS_GROUP_INDEX_LABEL,
            count,
        )
    if smoke_test_job is not None and "prefill" in replicas:
        allowances.append(
            network_policies.Allowance(
                "vllm-prefill-metrics-from-smoke-test",
                prefill_leaders,
                (network_policies.pods({network_policies.JOB_NAME_LABEL: smoke_test_job}),),
                (POOL_PORT,),
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


KV_PORTS = [
    {"name": "tpu-kv-transfer", "containerPort": vllm_command.KV_TRANSFER_PORT},
    {"name": "tpu-pd-coord", "containerPort": vllm_command.SIDE_CHANNEL_PORT},
    # GKE reports TPU duty cycle and HBM use only for containers that declare the runtime's metrics port.
    {"name": "tpu-metrics", "containerPort": 8431},
]


def _pod_spec(args: VllmPdArgs, container: dict[str, Any]) -> dict[str, Any]:
    return {
        "serviceAccountName": args.service_account,
        "nodeSelector": {"cloud.google.com/gke-tpu-accelerator": args.generation.accelerator_label},
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
    annotations = {"cloud.google.com/gke-tpu-slice-topology": plan.topology}

    leader = _container(args, "vllm-leader", vllm_command.leader_script(plan.serve), chips)
    port = plan.serve.port
    leader["ports"] = [{"name": "modelserver" if role == "prefill" else "vllm", "containerPort": port}, *KV_PORTS]
    leader["startupProbe"] = _probe("/health", port, STARTUP_PERIOD_SECONDS, STARTUP_FAILURES)
    leader["readinessProbe"] = _probe("/health", port, 10, 3)
    leader["livenessProbe"] = _probe("/health", port, 30, 5)
    leader_spec = _pod_spec(args, leader)
    if role == "decode":
        # Native sidecar: owns the pool port, sends prefill to a prefill pod, then decodes locally.
        leader_spec["initContainers"] = [
            {
                "name": "routing-proxy",
                "image": args.sidecar_image,
                "restartPolicy": "Always",
                "args": [
                    f"--port={POOL_PORT}",
                    f"--vllm-port={DECODE_VLLM_PORT}",
                    "--connector=nixlv2",
                    "--zap-log-level=1",
                    "--secure-proxy=false",
                ],
                "ports": [{"name": "modelserver", "containerPort": POOL_PORT, "protocol": "TCP"}],
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
    worker["ports"] = list(KV_PORTS)
    return {
        "apiVersion": LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": {
            "name": f"vllm-{role}",
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
            "replicas": plan.replicas,
            "leaderWorkerTemplate": {
                "size": size,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {
                    "metadata": {"labels": {**labels, SERVING_LABEL: "true"}, "annotations": annotations},
                    "spec": pod_security.harden(leader_spec),
                },
                "workerTemplate": {
                    "metadata": {"labels": labels, "annotations": annotations},
                    "spec": pod_security.harden(_pod_spec(args, worker)),
                },
            },
        },
    }


class VllmPd(pulumi.ComponentResource):
    sets: dict[str, KubernetesObject]
    prefill_metrics: KubernetesObject | None

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
        self.prefill_metrics = None
        if "prefill" in self.sets:
            self.prefill_metrics = KubernetesObject(
                "prefill-metrics-service",
                prefill_metrics_service_body(args.guide, args.namespace),
                pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=depends),
            )
        self.register_outputs({"leaderWorkerSets": [f"vllm-{role}" for role in self.sets]})
