"""JetStream (MaxText engine) serving on whole TPU slices, one slice per replica.

Two shapes, chosen by how many VMs the slice has (reference saxml-jetstream.md §5.3):

- one VM: a Deployment whose pods run the MaxText engine server (gRPC 9000) and
  the `jetstream-http` sidecar (8000), each pod taking every chip of its host;
- several VMs: a LeaderWorkerSet, one group per slice. Pathways gives a single
  JAX controller (the leader's `jax-tpu` container) all chips of the slice: the
  leader also runs the Pathways resource manager and proxy, and each worker runs
  a Pathways server on one TPU VM.

The model is fixed by container arguments, so serving is fully declarative: no
publish step. A LoadBalancer Service in front of the serving pods (Deployment
pods or LWS leaders, never Pathways workers) carries HTTP and gRPC.

The `*_body` functions build whole Kubernetes objects as plain dicts, with no
Pulumi in them, so tests check exactly what is applied. The typed ServiceAccount,
Deployment and Service resources take those dicts' metadata and spec as they are
(the SDK passes camelCase keys through unchanged), which keeps pulumi-kubernetes'
await logic: `pulumi up` waits for the load balancer's address. The
LeaderWorkerSet is registered whole through KubernetesObject.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as kubernetes
from pulumi_kubernetes.apps import v1 as apps
from pulumi_kubernetes.core import v1 as core

from contracts import network_policies, pod_security
from contracts.awaits import LOAD_BALANCER_ADDRESS
from contracts.kubernetes_object import KubernetesObject
from contracts.labels import (
    COMMON_LABELS,
    COMPONENT_LABEL,
    JETSTREAM_APP,
    JETSTREAM_SERVER_COMPONENT,
    JETSTREAM_SERVER_LABELS,
    NAME_LABEL,
)
from contracts.network_policies import NetworkPolicies, NetworkPoliciesArgs
from contracts.ports import JETSTREAM_PROMETHEUS_PORT
from domain.serving_budget import BUDGET
from domain.topology import Generation, Topology
from settings import storage_names
from workloads.bucket_access import Grant, grants, uniform_bucket
from workloads.model_access import workload_principal_output

APP = JETSTREAM_APP
SERVICE_NAME = "jetstream-svc"
LWS_API = "leaderworkerset.x-k8s.io/v1"

SERVER_COMPONENT = JETSTREAM_SERVER_COMPONENT
WORKER_COMPONENT = "pathways-worker"

HTTP_PORT = 8000
GRPC_PORT = 9000
PATHWAYS_RM_PORT = 38677
PATHWAYS_WORKER_PORT = 38679
PATHWAYS_PROXY_PORT = 38681

TPU_RESOURCE = "google.com/tpu"
ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
INTERNAL_LB_ANNOTATION = "networking.gke.io/load-balancer-type"
SKIP_AWAIT = "pulumi.com/skipAwait"

# Pathways names a slice `<type>:<topology>`; keyed by the GKE accelerator label.

# The jetstream-pathways image takes the MaxText config file as its first argument;
# the maxengine-server image's entrypoint already passes it.
MAXTEXT_BASE_CONFIG = "MaxText/configs/base.yml"

# Restoring a checkpoint from GCS and compiling takes minutes (single host) to tens of minutes,
# for the largest models hours (a Pathways slice): the startup probe allows 30 min on one host, and
# on a slice the MaxText model load of domain/serving_budget.py with its margin, which the smoke
# Job's deadline outlasts.
STARTUP_PERIOD_SECONDS = BUDGET.probe_period_seconds
SINGLE_HOST_STARTUP_FAILURES = 60
MULTI_HOST_STARTUP_FAILURES = BUDGET.jetstream_startup_failures
# A restart reloads the whole model (and recreates the whole LWS group), so only
# a server that stays unhealthy for ten minutes is restarted.
LIVENESS_PERIOD_SECONDS = 60
LIVENESS_FAILURES = 10

# The Pathways resource manager and workers write compilation and transfer scratch
# data under gs://<bucket>/pathways-scratch, so multi-host also writes, there only.
SCRATCH_PREFIX = storage_names.PATHWAYS_SCRATCH_PREFIX

IMAGE_KEYS = ("maxengine", "http", "pathways", "pathways_server", "pathways_proxy")
EXPOSURES = ("internal", "external")
QUANTIZATIONS = ("", "int8")


@dataclass(frozen=True)
class JetstreamArgs:
    provider: kubernetes.Provider
    project: str
    namespace: str
    service_account: str  # the stack's own principal (settings/naming.py jetstream_account)
    generation: Generation
    topology: str  # slice shape, e.g. "2x4" (one v5e 8-chip VM) or "4x8" (eight 4-chip VMs)
    machine_type: str  # the node pool's: a v6e 2x4 is one ct6e-standard-8t VM or two ct6e-standard-4t
    slices: int  # replicas: each one a whole slice
    bucket: str  # weights bucket
    checkpoint_path: str  # object path of the MaxText unscanned checkpoint items inside the bucket
    maxtext_model: str
    tokenizer_path: str
    per_device_batch_size: int
    max_prefill_predict_length: int
    max_target_length: int
    quantization: str  # "" or "int8"
    images: Mapping[str, str]  # keys: IMAGE_KEYS
    exposure: str  # "internal" or "external"
    source_ranges: Sequence[str]  # CIDRs allowed to reach an external load balancer
    pod_cidr: str  # the cluster's pod range: what NetworkPolicies treat as in-cluster
    depends_on: Sequence[pulumi.Resource] = ()
    # Only the TPU servers wait for these (the pools), so everything else installs meanwhile.
    tpu_pools: Sequence[pulumi.Resource] = ()
    # The cluster whose workload pool the principal names: IAM refuses members of a pool that
    # does not exist yet (workloads/model_access.py), and the project read needs its APIs.
    identity_pool: Sequence[pulumi.Resource] = ()
    # MaxText's ici_tensor_parallelism (settings: StackConfig.jetstream_tensor_parallelism, at most
    # the model's KV heads); None: all the slice's devices on a Pathways slice, 1 on one host.
    tensor_parallelism: int | None = None
    # The smoke Job (workloads/smoke_job.py) whose pods may reach the HTTP front; None: no such Job.
    smoke_test_job: str | None = None


def slice_shape(args: JetstreamArgs) -> Topology:
    return args.generation.allowed_shape(args.topology)


def is_multi_host(args: JetstreamArgs) -> bool:
    return args.generation.vms(slice_shape(args), args.machine_type) > 1


def server_labels() -> dict[str, str]:
    """The labels the Service selects: serving pods only."""
    return dict(JETSTREAM_SERVER_LABELS)


def worker_labels() -> dict[str, str]:
    return {NAME_LABEL: APP, COMPONENT_LABEL: WORKER_COMPONENT}


def network_allowances(args: JetstreamArgs) -> list[network_policies.Allowance]:
    """Load-balancer clients (filtered by the Service's source ranges) reach the HTTP and gRPC
    ports of the serving pods, Managed Prometheus their engine metrics, the smoke Job's pods the
    HTTP port (through the Service's cluster IP, so from their pod address), and the pods of one
    Pathways group (one LWS group, one slice) each other on every port."""
    server = server_labels()
    smoke = (
        [
            network_policies.Allowance(
                "jetstream-http-from-smoke-test",
                server,
                (network_policies.pods({network_policies.JOB_NAME_LABEL: args.smoke_test_job}),),
                (HTTP_PORT,),
            )
        ]
        if args.smoke_test_job is not None
        else []
    )
    allowances = [
        *smoke,
        network_policies.Allowance(
            "jetstream-from-clients", server, (network_policies.outside_pods(args.pod_cidr),), (HTTP_PORT, GRPC_PORT)
        ),
        network_policies.Allowance(
            "jetstream-metrics-from-prometheus",
            server,
            (network_policies.gmp_collectors(),),
            (JETSTREAM_PROMETHEUS_PORT,),
        ),
    ]
    if is_multi_host(args):
        allowances += network_policies.within_groups(
            APP, {network_policies.LWS_NAME_LABEL: APP}, network_policies.LWS_GROUP_INDEX_LABEL, args.slices
        )
    return allowances


def bucket_grants(args: JetstreamArgs) -> list[Grant]:
    return grants(args.bucket, SCRATCH_PREFIX if is_multi_host(args) else None)


def checkpoint_uri(args: JetstreamArgs) -> str:
    return f"gs://{args.bucket}/{args.checkpoint_path.strip('/')}"


def pathways_scratch(args: JetstreamArgs) -> str:
    return f"gs://{args.bucket}/{SCRATCH_PREFIX.rstrip('/')}"


def pathways_instance_type(args: JetstreamArgs) -> str:
    """The resource manager's `--instance_type`, e.g. `tpuv6e:4x4`."""
    label = args.generation.accelerator_label
    if args.generation.pathways_type is None:
        raise ValueError(f"no Pathways TPU type is known for {args.generation.name} ({label})")
    return f"{args.generation.pathways_type}:{slice_shape(args)}"


def _image(args: JetstreamArgs, key: str) -> str:
    if key not in args.images:
        raise ValueError(f"JetStream images need the key {key!r}; expected keys: {', '.join(IMAGE_KEYS)}")
    return args.images[key]


def maxtext_args(args: JetstreamArgs) -> list[str]:
    """MaxText engine flags (reference §5.3a), plus the single-controller ones on a Pathways slice."""
    if args.quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization must be one of {QUANTIZATIONS}, not {args.quantization!r}")
    multi_host = is_multi_host(args)
    # One controller sees every device of the slice through Pathways; tensor parallelism shards
    # the model's KV heads, and autoregressive parallelism (-1) takes the other devices (on one host, all).
    tensor = args.tensor_parallelism
    if tensor is None:
        tensor = args.generation.devices(slice_shape(args)) if multi_host else 1
    flags = [
        f"model_name={args.maxtext_model}",
        f"tokenizer_path={args.tokenizer_path}",
        f"per_device_batch_size={args.per_device_batch_size}",
        f"max_prefill_predict_length={args.max_prefill_predict_length}",
        f"max_target_length={args.max_target_length}",
        "async_checkpointing=false",
        "ici_fsdp_parallelism=1",
        "ici_autoregressive_parallelism=-1",
        f"ici_tensor_parallelism={tensor}",
        "scan_layers=false",
        "weight_dtype=bfloat16",
        f"load_parameters_path={checkpoint_uri(args)}",
        "attention=dot_product",
        f"prometheus_port={JETSTREAM_PROMETHEUS_PORT}",
    ]
    if args.quantization:
        flags.append(f"quantization={args.quantization}")
    if multi_host:
        return [MAXTEXT_BASE_CONFIG, *flags, "enable_single_controller=true"]
    return flags


def _healthcheck(period: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": "/healthcheck", "port": HTTP_PORT},
        "periodSeconds": period,
        "failureThreshold": failures,
    }


def http_container(args: JetstreamArgs, startup_failures: int) -> dict[str, Any]:
    """The HTTP front (`POST /generate`); it dials the engine on 127.0.0.1:9000, so it shares the pod."""
    return {
        "name": "jetstream-http",
        "image": _image(args, "http"),
        "ports": [{"name": "http", "containerPort": HTTP_PORT}],
        # /healthcheck answers 500 until the engine behind it is live.
        "startupProbe": _healthcheck(STARTUP_PERIOD_SECONDS, startup_failures),
        "readinessProbe": _healthcheck(10, 3),
        "livenessProbe": _healthcheck(LIVENESS_PERIOD_SECONDS, LIVENESS_FAILURES),
    }


def _engine_ports() -> list[dict[str, Any]]:
    return [
        {"name": "grpc", "containerPort": GRPC_PORT},
        {"name": "metrics", "containerPort": JETSTREAM_PROMETHEUS_PORT},
    ]


def _tpus(chips: int) -> dict[str, Any]:
    return {"requests": {TPU_RESOURCE: str(chips)}, "limits": {TPU_RESOURCE: str(chips)}}


def _tpu_pod_spec(args: JetstreamArgs, containers: list[dict[str, Any]]) -> dict[str, Any]:
    """A pod on the slice's node pool; pods that request no TPU (LWS leaders) need the toleration."""
    spec = {
        "serviceAccountName": args.service_account,
        "nodeSelector": {ACCELERATOR_LABEL: args.generation.accelerator_label, TOPOLOGY_LABEL: args.topology},
        "tolerations": [{"key": TPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
        "containers": containers,
    }
    # Workload Identity needs no token in the pod (the GKE metadata server knows the pod), and
    # nothing here calls the Kubernetes API.
    return pod_security.harden(spec)


def _metadata(args: JetstreamArgs, name: str, annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": args.namespace,
        "labels": {**COMMON_LABELS, NAME_LABEL: APP},
    }
    if annotations:
        metadata["annotations"] = dict(annotations)
    return metadata


def service_account_body(args: JetstreamArgs) -> dict[str, Any]:
    """The Workload Identity principal of every JetStream pod (no Google service account)."""
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _metadata(args, args.service_account)}


def deployment_body(args: JetstreamArgs) -> dict[str, Any]:
    """Single-host serving (reference §5.3a): one pod per slice, holding every chip of its VM."""
    shape = slice_shape(args)
    if args.generation.vms(shape, args.machine_type) != 1:
        raise ValueError(f"{args.generation.name} {shape} spans several VMs: serve it with lws_body")
    chips = args.generation.host_machine(shape, args.machine_type).chips_per_vm
    engine = {
        "name": "maxengine-server",
        "image": _image(args, "maxengine"),
        "args": maxtext_args(args),
        "ports": _engine_ports(),
        "resources": _tpus(chips),
    }
    labels = server_labels()
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        # Loading weights can outlast pulumi's Deployment await; the probes gate traffic.
        "metadata": _metadata(args, APP, {SKIP_AWAIT: "true"}),
        "spec": {
            "replicas": args.slices,
            "selector": {"matchLabels": labels},
            # Every pod fills a whole TPU host: a surge pod would wait for a host that
            # does not exist, so roll by replacing one replica at a time.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": labels},
                "spec": _tpu_pod_spec(args, [engine, http_container(args, SINGLE_HOST_STARTUP_FAILURES)]),
            },
        },
    }


def _leader_containers(args: JetstreamArgs) -> list[dict[str, Any]]:
    resource_manager = f"$(LWS_LEADER_ADDRESS):{PATHWAYS_RM_PORT}"
    return [
        {
            "name": "pathways-proxy",
            "image": _image(args, "pathways_proxy"),
            # The proxy hands JAX programs from the `jax-tpu` controller to the resource manager.
            "args": [
                f"--resource_manager_address={resource_manager}",
                f"--server_port={PATHWAYS_PROXY_PORT}",
                f"--gcs_scratch_location={pathways_scratch(args)}",
            ],
            "ports": [{"name": "pw-proxy", "containerPort": PATHWAYS_PROXY_PORT}],
        },
        {
            "name": "pathways-rm",
            "image": _image(args, "pathways_server"),
            "args": [
                f"--server_port={PATHWAYS_RM_PORT}",
                f"--gcs_scratch_location={pathways_scratch(args)}",
                "--node_type=resource_manager",
                "--instance_count=1",  # one slice per LWS group
                f"--instance_type={pathways_instance_type(args)}",
            ],
            "env": [
                {"name": "HOST_ADDRESS", "value": "$(LWS_LEADER_ADDRESS)"},
                # The resource manager drives no chips itself: skip the TPU metadata-server query.
                {"name": "TPU_SKIP_MDS_QUERY", "value": "true"},
            ],
            "ports": [{"name": "pw-rm", "containerPort": PATHWAYS_RM_PORT}],
        },
        {
            "name": "jax-tpu",
            "image": _image(args, "pathways"),
            "args": maxtext_args(args),
            "ports": _engine_ports(),
        },
        http_container(args, MULTI_HOST_STARTUP_FAILURES),
    ]


def _worker_container(args: JetstreamArgs, chips: int) -> dict[str, Any]:
    return {
        "name": "pathways-worker",
        "image": _image(args, "pathways_server"),
        "args": [
            f"--server_port={PATHWAYS_WORKER_PORT}",
            f"--resource_manager_address=$(LWS_LEADER_ADDRESS):{PATHWAYS_RM_PORT}",
            f"--gcs_scratch_location={pathways_scratch(args)}",
        ],
        "ports": [{"name": "pw-worker", "containerPort": PATHWAYS_WORKER_PORT}],
        "resources": _tpus(chips),
    }


def lws_body(args: JetstreamArgs) -> dict[str, Any]:
    """Multi-host serving (reference §5.3c): one LWS group per slice, a leader plus one worker per VM."""
    shape = slice_shape(args)
    vms = args.generation.vms(shape, args.machine_type)
    if vms == 1:
        raise ValueError(f"{args.generation.name} {shape} is a single VM: serve it with deployment_body")
    chips = args.generation.host_machine(shape, args.machine_type).chips_per_vm
    annotations = {
        # One group per node pool, that is per slice, and no two groups in one slice.
        "leaderworkerset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool",
        # Loading takes tens of minutes and an LWS has no await logic: the probes gate traffic.
        SKIP_AWAIT: "true",
    }
    return {
        "apiVersion": LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": _metadata(args, APP, annotations),
        "spec": {
            "replicas": args.slices,
            "leaderWorkerTemplate": {
                # The leader (controller, resource manager, proxy) shares a VM with one worker.
                "size": vms + 1,
                # A restarted Pathways server loses the slice's state: restart the group together.
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {
                    "metadata": {"labels": server_labels()},
                    "spec": _tpu_pod_spec(args, _leader_containers(args)),
                },
                "workerTemplate": {
                    "metadata": {"labels": worker_labels()},
                    "spec": _tpu_pod_spec(args, [_worker_container(args, chips)]),
                },
            },
        },
    }


def service_body(args: JetstreamArgs) -> dict[str, Any]:
    """A LoadBalancer on the serving pods: internal to the VPC, or external limited to `source_ranges`."""
    if args.exposure not in EXPOSURES:
        raise ValueError(f"exposure must be one of {EXPOSURES}, not {args.exposure!r}")
    internal = args.exposure == "internal"
    if not internal and not args.source_ranges:
        # The HTTP sidecar has no authentication: never open it to the whole internet.
        raise ValueError("an external JetStream load balancer needs source_ranges")
    spec: dict[str, Any] = {
        "type": "LoadBalancer",
        "selector": server_labels(),
        "ports": [
            {"name": "jetstream-http", "port": HTTP_PORT, "targetPort": HTTP_PORT, "protocol": "TCP"},
            {"name": "jetstream-grpc", "port": GRPC_PORT, "targetPort": GRPC_PORT, "protocol": "TCP"},
        ],
    }
    if not internal:
        spec["loadBalancerSourceRanges"] = list(args.source_ranges)
    annotations = {**LOAD_BALANCER_ADDRESS, **({INTERNAL_LB_ANNOTATION: "Internal"} if internal else {})}
    return {"apiVersion": "v1", "kind": "Service", "metadata": _metadata(args, SERVICE_NAME, annotations), "spec": spec}


def service_url(args: JetstreamArgs) -> str:
    """The HTTP front's in-cluster URL (the Service's DNS name; its cluster IP reaches the leaders)."""
    return f"http://{SERVICE_NAME}.{args.namespace}.svc:{HTTP_PORT}"


def ingress_ip(status: Any) -> str:
    """`status.loadBalancer.ingress[0].ip` of a typed Service status.

    pulumi-kubernetes waits for a LoadBalancer Service's ingress before it reports
    the status, so this is empty only where no cloud ran (the offline plan's mocks).
    """
    load_balancer = getattr(status, "load_balancer", None)
    ingress = getattr(load_balancer, "ingress", None) or []
    return str(getattr(ingress[0], "ip", None) or "") if ingress else ""


def _service_name(metadata: Any) -> str:
    return str(getattr(metadata, "name", None) or SERVICE_NAME)


class Jetstream(pulumi.ComponentResource):
    namespace: core.Namespace
    network_policies: NetworkPolicies
    service_account: core.ServiceAccount
    members: list[gcp.storage.BucketIAMMember]
    server: apps.Deployment | KubernetesObject
    service: core.Service
    address: pulumi.Output[str]
    service_name: pulumi.Output[str]

    def __init__(self, name: str, args: JetstreamArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tpu-slicing:workloads:Jetstream", name, None, opts)
        multi_host = is_multi_host(args)
        self.namespace = namespace = core.Namespace(
            f"{name}-namespace",
            metadata={
                "name": args.namespace,
                "labels": {**COMMON_LABELS, **pod_security.namespace_labels(pod_security.SERVING)},
            },
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=list(args.depends_on)),
        )
        # Default deny before any pod exists; the servers wait for their allowances.
        self.network_policies = NetworkPolicies(
            f"{name}-network-policies",
            NetworkPoliciesArgs(
                provider=args.provider,
                namespace=args.namespace,
                allowances=network_allowances(args),
                depends_on=[namespace],
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )
        depends = [*args.depends_on, namespace, self.network_policies]
        child = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=depends)

        account = service_account_body(args)
        self.service_account = core.ServiceAccount(f"{name}-service-account", metadata=account["metadata"], opts=child)
        principal = workload_principal_output(args.project, args.namespace, args.service_account, args.identity_pool)
        # Bound on the weights bucket only: no project-wide storage access. A conditional grant
        # (multi-host's scratch prefix) needs uniform bucket-level access, read before it registers.
        grants_made = bucket_grants(args)
        bucket: pulumi.Input[str] = args.bucket
        if any(grant.condition is not None for grant in grants_made):
            bucket = uniform_bucket(args.bucket, args.identity_pool)
        self.members = [
            gcp.storage.BucketIAMMember(
                f"{name}-{grant.name}",
                gcp.storage.BucketIAMMemberArgs(
                    bucket=bucket, role=grant.role, member=principal, condition=grant.condition
                ),
                opts=pulumi.ResourceOptions(parent=self, depends_on=[*depends, *args.identity_pool]),
            )
            for grant in grants_made
        ]

        # Pods start only once their identity can read the checkpoint.
        workload = pulumi.ResourceOptions(
            parent=self,
            provider=args.provider,
            depends_on=[*depends, *args.tpu_pools, self.service_account, *self.members],
        )
        if multi_host:
            self.server = KubernetesObject(f"{name}-lws", lws_body(args), workload)
        else:
            deployment = deployment_body(args)
            self.server = apps.Deployment(
                f"{name}-deployment", metadata=deployment["metadata"], spec=deployment["spec"], opts=workload
            )

        service = service_body(args)
        self.service = core.Service(f"{name}-service", metadata=service["metadata"], spec=service["spec"], opts=child)
        self.address = self.service.status.apply(ingress_ip)
        self.service_name = self.service.metadata.apply(_service_name)
        self.register_outputs(
            {
                "address": self.address,
                "serviceName": self.service_name,
                "kind": "LeaderWorkerSet" if multi_host else "Deployment",
                "principal": principal,
            }
        )
