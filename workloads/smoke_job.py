"""The serving smoke test as a Kubernetes Job that `pulumi up` waits for.

It posts the reference's completion and chat requests to the internal gateway
from inside the cluster (the address is not reachable from outside the VPC),
retrying with backoff until its deadline; a failed Job fails `pulumi up`. With
`api="jetstream"` it sends one completion through JetStream's HTTP front instead
(`POST /generate`, pods/smoke_request.py).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_kubernetes as kubernetes
from pulumi_kubernetes.batch import v1 as batch
from pulumi_kubernetes.core import v1 as core
from pulumi_kubernetes.meta import v1 as meta
from pulumi_kubernetes.rbac import v1 as rbac

from contracts.addresses import http_url
from contracts.labels import COMMON_LABELS

PODS = Path(__file__).resolve().parent.parent / "pods"
SCRIPT = PODS / "smoke_request.py"
WATCH_SCRIPT = PODS / "slice_watch.py"  # loaded by the script from its own directory
MOUNT = "/opt/smoke-test"
# The slice watch's credentials: a projected token of the Job's own ServiceAccount and the cluster's
# CA (the `kube-root-ca.crt` ConfigMap kube-controller-manager publishes in every namespace), only
# in a Job that watches slices; the ServiceAccount itself mounts nothing.
KUBE_API_MOUNT = "/var/run/secrets/tpu-slicing/kube-api"
TOKEN_SECONDS = 3600  # the kubelet renews a projected token at 80 % of its life; the script rereads it
ROOT_CA_CONFIG_MAP = "kube-root-ca.crt"


JOB_NAME = "serving-smoke-test"
OPENAI_API = "openai"  # pods/smoke_request.py OPENAI_API: the program's default, so no env var says it
JETSTREAM_API = "jetstream"  # pods/smoke_request.py JETSTREAM_API


@dataclass(frozen=True)
class SliceWatchArgs:
    """What the smoke test watches besides the gateway (pods/slice_watch.py): the Kueue Workloads of
    these LeaderWorkerSets, for this admission check of the slice controller."""

    admission_check: str
    leader_worker_sets: tuple[str, ...]


@dataclass(frozen=True)
class SmokeJobArgs:
    provider: kubernetes.Provider
    namespace: str
    # The load balancer's address (`http://<address>`), or, with `base_url`, nothing.
    gateway_address: pulumi.Input[str] | None
    model: str
    image: str
    deadline_seconds: int
    serving_spec: object  # whatever defines the serving stack: a change re-runs the test
    depends_on: Sequence[pulumi.Resource] = ()
    # The server's API as pods/smoke_request.py names it, and its URL when it is not the gateway's.
    api: str = OPENAI_API
    base_url: str | None = None
    # Disaggregated serving: the prefill leaders' /metrics, so the test proves a prefill happened,
    # and the decode leaders' vLLM /metrics, so it proves decode took the prompt's KV from prefill.
    prefill_metrics_url: str | None = None
    decode_metrics_url: str | None = None
    # Serving on dynamic slices: stop at once when a slice fails to come up (pods/slice_watch.py).
    slice_watch: SliceWatchArgs | None = None


def watch_role_rules() -> list[rbac.PolicyRuleArgs]:
    """All the slice watch reads: the namespace's Workloads (pods/slice_watch.py `list_workloads`)."""
    return [rbac.PolicyRuleArgs(api_groups=["kueue.x-k8s.io"], resources=["workloads"], verbs=["get", "list"])]


def _watch_env(watch: SliceWatchArgs) -> list[core.EnvVarArgs]:
    return [
        core.EnvVarArgs(name="SMOKE_SLICE_CHECK", value=watch.admission_check),
        core.EnvVarArgs(name="SMOKE_SLICE_OWNERS", value=",".join(watch.leader_worker_sets)),
        core.EnvVarArgs(name="SMOKE_KUBE_API_DIR", value=KUBE_API_MOUNT),
        core.EnvVarArgs(
            name="SMOKE_NAMESPACE",
            value_from=core.EnvVarSourceArgs(field_ref=core.ObjectFieldSelectorArgs(field_path="metadata.namespace")),
        ),
    ]


def _watch_volume() -> core.VolumeArgs:
    return core.VolumeArgs(
        name="kube-api",
        projected=core.ProjectedVolumeSourceArgs(
            sources=[
                core.VolumeProjectionArgs(
                    service_account_token=core.ServiceAccountTokenProjectionArgs(
                        path="token", expiration_seconds=TOKEN_SECONDS
                    )
                ),
                core.VolumeProjectionArgs(
                    config_map=core.ConfigMapProjectionArgs(
                        name=ROOT_CA_CONFIG_MAP, items=[core.KeyToPathArgs(key="ca.crt", path="ca.crt")]
                    )
                ),
            ]
        ),
    )


class SmokeJob(pulumi.ComponentResource):
    job: batch.Job

    def __init__(self, name: str, args: SmokeJobArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tpu-slicing:workloads:SmokeJob", name, None, opts)
        if args.api not in (OPENAI_API, JETSTREAM_API):
            raise ValueError(f"smoke test api must be {OPENAI_API!r} or {JETSTREAM_API!r}, not {args.api!r}")
        if (args.gateway_address is None) == (args.base_url is None):
            raise ValueError("the smoke test needs exactly one of gateway_address and base_url")
        base_url = (
            args.base_url
            if args.base_url is not None
            else pulumi.Output.from_input(args.gateway_address).apply(lambda address: http_url(str(address)))
        )
        watch = args.slice_watch
        scripts = {SCRIPT.name: SCRIPT.read_text()}
        if watch is not None:
            scripts[WATCH_SCRIPT.name] = WATCH_SCRIPT.read_text()
        script = "".join(scripts.values())
        first = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=list(args.depends_on))
        metadata = meta.ObjectMetaArgs(name=JOB_NAME, namespace=args.namespace, labels=dict(COMMON_LABELS))
        config = core.ConfigMap("script", metadata=metadata, data=scripts, opts=first)
        # Its own identity, mounting nothing: the test speaks HTTP to the gateway and the pods, and
        # only a slice watch reads the API, with the projected token below and the Role's one rule.
        account = core.ServiceAccount(
            "service-account", metadata=metadata, automount_service_account_token=False, opts=first
        )
        access: list[pulumi.Resource] = []
        if watch is not None:
            role = rbac.Role("watch-role", metadata=metadata, rules=watch_role_rules(), opts=first)
            access = [
                role,
                rbac.RoleBinding(
                    "watch-role-binding",
                    metadata=metadata,
                    role_ref=rbac.RoleRefArgs(api_group="rbac.authorization.k8s.io", kind="Role", name=JOB_NAME),
                    subjects=[rbac.SubjectArgs(kind="ServiceAccount", name=JOB_NAME, namespace=args.namespace)],
                    opts=pulumi.ResourceOptions(
                        parent=self, provider=args.provider, depends_on=[*args.depends_on, role, account]
                    ),
                ),
            ]
        fingerprint = hashlib.sha256(json.dumps([args.serving_spec, script], sort_keys=True, default=str).encode())
        self.job = batch.Job(
            "job",
            metadata=meta.ObjectMetaArgs(
                name=JOB_NAME,
                namespace=args.namespace,
                labels=dict(COMMON_LABELS),
                annotations={"tpu-slicing/serving-fingerprint": fingerprint.hexdigest()[:16]},
            ),
            spec=batch.JobSpecArgs(
                backoff_limit=0,
                active_deadline_seconds=args.deadline_seconds + 300,
                template=core.PodTemplateSpecArgs(
                    metadata=meta.ObjectMetaArgs(labels=dict(COMMON_LABELS)),
                    spec=core.PodSpecArgs(
                        restart_policy="Never",
                        service_account_name=JOB_NAME,
                        automount_service_account_token=False,
                        security_context=core.PodSecurityContextArgs(
                            run_as_non_root=True,
                            run_as_user=65534,
                            seccomp_profile=core.SeccompProfileArgs(type="RuntimeDefault"),
                        ),
                        containers=[
                            core.ContainerArgs(
                                name="smoke-test",
                                image=args.image,
                                command=["python3", f"{MOUNT}/smoke_request.py"],
                                # A failed run's last log lines become the container's termination
                                # message, which the provider's Job await prints in the failed
                                # `pulumi up` (kubelet kuberuntime_container.go; pulumi/cloud-ready-
                                # checks pkg/kubernetes/pod/check.go containerTerminatedError).
                                termination_message_policy="FallbackToLogsOnError",
                                env=[
                                    core.EnvVarArgs(name="SMOKE_BASE_URL", value=base_url),
                                    *(
                                        [core.EnvVarArgs(name="SMOKE_API", value=args.api)]
                                        if args.api != OPENAI_API
                                        else []
                                    ),
                                    core.EnvVarArgs(name="SMOKE_MODEL", value=args.model),
                                    core.EnvVarArgs(name="SMOKE_DEADLINE_SECONDS", value=str(args.deadline_seconds)),
                                    *(
                                        core.EnvVarArgs(name=name, value=url)
                                        for name, url in (
                                            ("SMOKE_PREFILL_METRICS_URL", args.prefill_metrics_url),
                                            ("SMOKE_DECODE_METRICS_URL", args.decode_metrics_url),
                                        )
                                        if url
                                    ),
                                    *(_watch_env(watch) if watch is not None else []),
                                ],
                                resources=core.ResourceRequirementsArgs(
                                    requests={"cpu": "100m", "memory": "128Mi"}, limits={"memory": "256Mi"}
                                ),
                                security_context=core.SecurityContextArgs(
                                    allow_privilege_escalation=False,
                                    read_only_root_filesystem=True,
                                    capabilities=core.CapabilitiesArgs(drop=["ALL"]),
                                ),
                                volume_mounts=[
                                    core.VolumeMountArgs(name="script", mount_path=MOUNT, read_only=True),
                                    *(
                                        [
                                            core.VolumeMountArgs(
                                                name="kube-api", mount_path=KUBE_API_MOUNT, read_only=True
                                            )
                                        ]
                                        if watch is not None
                                        else []
                                    ),
                                ],
                            )
                        ],
                        volumes=[
                            core.VolumeArgs(name="script", config_map=core.ConfigMapVolumeSourceArgs(name=JOB_NAME)),
                            *([_watch_volume()] if watch is not None else []),
                        ],
                    ),
                ),
            ),
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=args.provider,
                depends_on=[*args.depends_on, config, account, *access],
                # A Job runs once: any change (including the fingerprint) runs a new one.
                replace_on_changes=["*"],
                delete_before_replace=True,
                custom_timeouts=pulumi.CustomTimeouts(create=f"{args.deadline_seconds // 60 + 10}m"),
            ),
        )
        self.register_outputs({"job": self.job.metadata.name})
