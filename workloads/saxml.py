"""Saxml on multi-host TPU slices (the GKE tutorial's design), with its security gaps closed.

Admin server and HTTP server on CPU nodes, one model-server Job per TPU slice in
a JobSet, the Sax admin state in a bucket of this stack, and publishing the
model as an in-cluster Job that `pulumi up` waits for. Unlike the tutorial:
bucket-scoped roles instead of project-wide storage.admin, an internal load
balancer by default, unprivileged pods and pinned images.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as kubernetes
from pulumi_kubernetes.apps import v1 as apps
from pulumi_kubernetes.batch import v1 as batch
from pulumi_kubernetes.core import v1 as core
from pulumi_kubernetes.meta import v1 as meta

from contracts import network_policies, pod_security
from contracts.awaits import LOAD_BALANCER_ADDRESS
from contracts.kubernetes_object import KubernetesObject
from contracts.labels import COMMON_LABELS
from contracts.network_policies import NetworkPolicies, NetworkPoliciesArgs
from domain.topology import Generation, Topology
from workloads.jetstream import ingress_ip
from workloads.model_access import workload_principal_output

PUBLISH_SCRIPT = Path(__file__).resolve().parent.parent / "pods" / "saxml_publish.py"
# sax-http reads the cell's admin address from the bucket on every call (saxml common/addr.go
# FetchAddr: <root>/sax/<cell>/location.proto through the platform's GCS reader), so its account is
# a Workload Identity principal with read access to the admin bucket, and no more.
PUBLISH_ACCOUNT = "sax-publish"  # no Google access: the Job only calls sax-http
HTTP_PORT = 8888
ADMIN_PORT = 10000
MODEL_PORT = 10001
MODEL_SERVER_SET = "sax-model-server-set"
INTERNAL_LB = {"networking.gke.io/load-balancer-type": "Internal"}


@dataclass(frozen=True)
class SaxmlArgs:
    provider: kubernetes.Provider
    project: str
    region: str
    namespace: str
    bucket_name: str
    google_account_id: str
    # The stack's own Kubernetes service accounts (settings/naming.py): the cell's, which acts as the
    # Google account (admin and model servers use the bucket), and sax-http's.
    cell_account: str
    http_account: str
    generation: Generation
    topology: str
    machine_type: str  # the node pool's: with the shape it fixes the VMs (pods) per slice
    slices: int
    cell: str
    model_key: str
    model_path: str
    checkpoint: str
    weights_bucket: str | None
    publish_deadline_seconds: int
    images: Mapping[str, str]  # admin, model, http, publish
    exposure: str
    source_ranges: Sequence[str]
    pod_cidr: str  # the cluster's pod range: what NetworkPolicies treat as in-cluster
    depends_on: Sequence[pulumi.Resource] = ()
    # Only the model servers wait for these (the pools): the rest installs meanwhile.
    tpu_pools: Sequence[pulumi.Resource] = ()
    # The cluster whose workload pool the Workload Identity binding names. IAM refuses the member
    # `serviceAccount:<project>.svc.id.goog[ns/sa]` until a cluster with that pool exists
    # (terraform-google-modules/terraform-google-kubernetes-engine#916;
    # googleforgames/global-multiplayer-demo#39), and the cluster waits for the project's APIs.
    identity_pool: Sequence[pulumi.Resource] = ()


# The admin and HTTP servers run as their images' user; they need no capability (ports above 1024).
CPU_CONTEXT = core.SecurityContextArgs(
    allow_privilege_escalation=False,
    capabilities=core.CapabilitiesArgs(drop=["ALL"]),
    seccomp_profile=core.SeccompProfileArgs(type="RuntimeDefault"),
)


def _labels(app: str) -> dict[str, str]:
    return {**COMMON_LABELS, "app": app}


def network_allowances(slices: int, pod_cidr: str) -> list[network_policies.Allowance]:
    """Who may reach the Sax cell's servers: its clients the admin server (model servers register
    there, sax-http and the publish Job look models up), the admin server and sax-http the model
    servers, load-balancer clients (already filtered by the Service's source ranges) and the publish
    Job sax-http, and the hosts of one slice (one JobSet child Job) each other on every port."""
    admin, model, http, publish = (
        {"app": app} for app in ("sax-admin-server", "sax-model-server", "sax-http", "sax-publish")
    )
    pods = network_policies.pods
    return [
        network_policies.Allowance(
            "sax-admin-from-cell", admin, (pods(model), pods(http), pods(publish)), (ADMIN_PORT,)
        ),
        network_policies.Allowance("sax-model-from-admin-and-http", model, (pods(admin), pods(http)), (MODEL_PORT,)),
        network_policies.Allowance(
            "sax-http-from-clients", http, (network_policies.outside_pods(pod_cidr), pods(publish)), (HTTP_PORT,)
        ),
        *network_policies.within_groups(
            "sax-model-server",
            {network_policies.JOBSET_NAME_LABEL: MODEL_SERVER_SET},
            network_policies.JOBSET_JOB_INDEX_LABEL,
            slices,
        ),
    ]


def sax_root(bucket: str) -> str:
    return f"gs://{bucket}/sax-root"


def model_server_body(args: SaxmlArgs) -> dict[str, Any]:
    shape = Topology.parse(args.topology)
    pods = args.generation.vms(shape, args.machine_type)
    chips = args.generation.host_machine(shape, args.machine_type).chips_per_vm
    chip = args.generation.saxml_chip
    if chip is None:  # the configuration refuses these generations for Saxml
        raise ValueError(f"Saxml has no --platform_chip for {args.generation.name}")
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": MODEL_SERVER_SET,
            "namespace": args.namespace,
            "labels": _labels("sax-model-server"),
            "annotations": {
                # One child Job per node pool, i.e. per slice, and no sharing.
                "alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool",
                # The publish Job, not the JobSet await, proves the servers work.
                "pulumi.com/skipAwait": "true",
            },
        },
        "spec": {
            "failurePolicy": {"maxRestarts": 4},
            "network": {"enableDNSHostnames": True},
            "replicatedJobs": [
                {
                    "name": "sax-model-server",
                    "replicas": args.slices,
                    "template": {
                        "spec": {
                            "parallelism": pods,
                            "completions": pods,
                            "backoffLimit": 0,
                            "template": {
                                "metadata": {"labels": _labels("sax-model-server")},
                                "spec": pod_security.harden(
                                    {
                                        "serviceAccountName": args.cell_account,
                                        # No hostNetwork (unlike the tutorial): host-network pods bypass
                                        # Workload Identity and would run as the node's service account,
                                        # which has no access to the Sax bucket. JobSet's DNS hostnames
                                        # give the TPU runtime its peers.
                                        "nodeSelector": {
                                            "cloud.google.com/gke-tpu-accelerator": args.generation.accelerator_label,
                                            "cloud.google.com/gke-tpu-topology": args.topology,
                                        },
                                        "tolerations": [
                                            {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}
                                        ],
                                        "containers": [
                                            {
                                                "name": "sax-model-server",
                                                "image": args.images["model"],
                                                "args": [
                                                    f"--port={MODEL_PORT}",
                                                    f"--sax_cell={args.cell}",
                                                    f"--platform_chip={chip}",
                                                    f"--platform_topology={args.topology}",
                                                ],
                                                "ports": [{"containerPort": MODEL_PORT}, {"containerPort": 8471}],
                                                "env": [
                                                    {"name": "SAX_ROOT", "value": sax_root(args.bucket_name)},
                                                    # Each replicated Job is its own slice, not one Multislice job.
                                                    {"name": "MEGASCALE_NUM_SLICES", "value": ""},
                                                ],
                                                "resources": {
                                                    "requests": {"google.com/tpu": str(chips)},
                                                    "limits": {"google.com/tpu": str(chips)},
                                                },
                                            }
                                        ],
                                    }
                                ),
                            },
                        }
                    },
                }
            ],
        },
    }


class Saxml(pulumi.ComponentResource):
    bucket: gcp.storage.Bucket
    network_policies: NetworkPolicies
    http_service: core.Service
    address: pulumi.Output[str]

    def __init__(self, name: str, args: SaxmlArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tpu-slicing:workloads:Saxml", name, None, opts)
        # The Google half (bucket, account, grants) comes after the cluster: the binding needs its
        # workload pool, and the cluster is what waits for the IAM and Storage APIs.
        gcp_child = pulumi.ResourceOptions(parent=self, depends_on=list(args.identity_pool))
        self.bucket = gcp.storage.Bucket(
            "admin-bucket",
            gcp.storage.BucketArgs(
                name=args.bucket_name,
                project=args.project,
                location=args.region,
                uniform_bucket_level_access=True,
                public_access_prevention="enforced",
                # Emptied on destroy, on purpose: it holds only the cell's own state (the admin's
                # address and the published-model registry, saxml-jetstream.md §7 gotcha 6), which
                # the next `pulumi up` rebuilds by publishing again. A non-empty bucket would stop a
                # destroy halfway. Model weights live in `model.weightsBucket`, which is not ours.
                force_destroy=True,
            ),
            opts=gcp_child,
        )
        account = gcp.serviceaccount.Account(
            "google-account",
            gcp.serviceaccount.AccountArgs(
                account_id=args.google_account_id,
                project=args.project,
                display_name="Saxml admin, model and HTTP servers",
            ),
            opts=gcp_child,
        )
        grants = [
            gcp.storage.BucketIAMMember(
                "admin-bucket-object-admin",
                gcp.storage.BucketIAMMemberArgs(
                    bucket=self.bucket.name, role="roles/storage.objectAdmin", member=account.member
                ),
                opts=gcp_child,
            )
        ]
        if args.weights_bucket:
            grants.append(
                gcp.storage.BucketIAMMember(
                    "weights-object-viewer",
                    gcp.storage.BucketIAMMemberArgs(
                        bucket=args.weights_bucket, role="roles/storage.objectViewer", member=account.member
                    ),
                    opts=gcp_child,
                )
            )
        grants.append(
            gcp.serviceaccount.IAMMember(
                "workload-identity",
                gcp.serviceaccount.IAMMemberArgs(
                    service_account_id=account.name,
                    role="roles/iam.workloadIdentityUser",
                    member=f"serviceAccount:{args.project}.svc.id.goog[{args.namespace}/{args.cell_account}]",
                ),
                opts=gcp_child,
            )
        )
        k8s_first = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=list(args.depends_on))
        namespace = core.Namespace(
            "namespace",
            metadata=meta.ObjectMetaArgs(
                name=args.namespace, labels={**COMMON_LABELS, **pod_security.namespace_labels(pod_security.SERVING)}
            ),
            opts=k8s_first,
        )
        ksa = core.ServiceAccount(
            "service-account",
            metadata=meta.ObjectMetaArgs(
                name=args.cell_account,
                namespace=args.namespace,
                labels=dict(COMMON_LABELS),
                annotations={"iam.gke.io/gcp-service-account": account.email},
            ),
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[namespace]),
        )
        # Default deny before any pod exists; the servers wait for their allowances.
        self.network_policies = NetworkPolicies(
            "network-policies",
            NetworkPoliciesArgs(
                provider=args.provider,
                namespace=args.namespace,
                allowances=network_allowances(args.slices, args.pod_cidr),
                depends_on=[namespace],
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )
        ready = [*args.depends_on, namespace, ksa, *grants, self.bucket, self.network_policies]
        child = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=ready)
        admin = self._deployment(
            "admin-server",
            "sax-admin-server",
            core.ContainerArgs(
                name="sax-admin-server",
                image=args.images["admin"],
                ports=[core.ContainerPortArgs(container_port=ADMIN_PORT)],
                env=[
                    core.EnvVarArgs(name="GSBUCKET", value=self.bucket.name),
                    # Set explicitly: newer images default to another cell (gotcha 1).
                    core.EnvVarArgs(name="SAX_CELL", value=args.cell),
                ],
                resources=core.ResourceRequirementsArgs(requests={"cpu": "1", "memory": "2Gi"}),
                security_context=CPU_CONTEXT,
            ),
            args,
            child,
        )
        model_servers = KubernetesObject(
            "model-server-set",
            model_server_body(args),
            pulumi.ResourceOptions(
                parent=self,
                provider=args.provider,
                depends_on=[*ready, *args.tpu_pools, admin],
                # JobSet specs are immutable: a change is a new JobSet.
                replace_on_changes=["spec"],
                delete_before_replace=True,
            ),
        )
        http_account = core.ServiceAccount(
            "http-service-account",
            metadata=meta.ObjectMetaArgs(name=args.http_account, namespace=args.namespace, labels=dict(COMMON_LABELS)),
            automount_service_account_token=False,
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[namespace]),
        )
        http_reader = gcp.storage.BucketIAMMember(
            "admin-bucket-http-viewer",
            gcp.storage.BucketIAMMemberArgs(
                bucket=self.bucket.name,
                role="roles/storage.objectViewer",
                member=workload_principal_output(args.project, args.namespace, args.http_account, args.identity_pool),
            ),
            opts=gcp_child,
        )
        http = self._deployment(
            "http-server",
            "sax-http",
            core.ContainerArgs(
                name="sax-http",
                image=args.images["http"],
                ports=[core.ContainerPortArgs(container_port=HTTP_PORT)],
                env=[core.EnvVarArgs(name="SAX_ROOT", value=sax_root(args.bucket_name))],
                readiness_probe=core.ProbeArgs(tcp_socket=core.TCPSocketActionArgs(port=HTTP_PORT), period_seconds=10),
                resources=core.ResourceRequirementsArgs(requests={"cpu": "1", "memory": "2Gi"}),
                security_context=CPU_CONTEXT,
            ),
            args,
            pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[http_account, http_reader])),
            account=args.http_account,
        )
        self.http_service = core.Service(
            "http-service",
            metadata=meta.ObjectMetaArgs(
                name="sax-http",
                namespace=args.namespace,
                labels=_labels("sax-http"),
                annotations={**LOAD_BALANCER_ADDRESS, **(INTERNAL_LB if args.exposure == "internal" else {})},
            ),
            spec=core.ServiceSpecArgs(
                type="LoadBalancer",
                selector={"app": "sax-http"},
                ports=[core.ServicePortArgs(name="http", port=HTTP_PORT, target_port=HTTP_PORT, protocol="TCP")],
                load_balancer_source_ranges=list(args.source_ranges) if args.exposure == "external" else None,
            ),
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[*ready, http]),
        )
        self.address = self.http_service.status.apply(ingress_ip)
        self._publish_job(args, [admin, model_servers, http, self.http_service], ready)
        self.register_outputs({"address": self.address, "modelKey": args.model_key})

    def _deployment(
        self,
        logical: str,
        app: str,
        container: core.ContainerArgs,
        args: SaxmlArgs,
        opts: pulumi.ResourceOptions,
        *,
        account: str | None = None,
    ) -> apps.Deployment:
        return apps.Deployment(
            logical,
            metadata=meta.ObjectMetaArgs(name=app, namespace=args.namespace, labels=_labels(app)),
            spec=apps.DeploymentSpecArgs(
                replicas=1,
                selector=meta.LabelSelectorArgs(match_labels={"app": app}),
                template=core.PodTemplateSpecArgs(
                    metadata=meta.ObjectMetaArgs(labels=_labels(app)),
                    spec=core.PodSpecArgs(
                        service_account_name=account or args.cell_account,
                        # Workload Identity needs no token in the pod; nothing here calls the API.
                        automount_service_account_token=False,
                        containers=[container],
                    ),
                ),
            ),
            opts=opts,
        )

    def _publish_job(self, args: SaxmlArgs, servers: list[pulumi.Resource], ready: list[pulumi.Resource]) -> None:
        script = core.ConfigMap(
            "publish-script",
            metadata=meta.ObjectMetaArgs(name="sax-publish", namespace=args.namespace, labels=_labels("sax-publish")),
            data={"saxml_publish.py": PUBLISH_SCRIPT.read_text()},
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=ready),
        )
        env = {
            "SAX_HTTP_URL": f"http://sax-http.{args.namespace}.svc:{HTTP_PORT}",
            "SAX_MODEL_KEY": args.model_key,
            "SAX_MODEL_PATH": args.model_path,
            "SAX_CHECKPOINT": args.checkpoint,
            "SAX_REPLICAS": str(args.slices),
            "SAX_PUBLISH_DEADLINE_SECONDS": str(args.publish_deadline_seconds),
        }
        account = core.ServiceAccount(
            "publish-service-account",
            metadata=meta.ObjectMetaArgs(name=PUBLISH_ACCOUNT, namespace=args.namespace, labels=dict(COMMON_LABELS)),
            automount_service_account_token=False,
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=ready),
        )
        batch.Job(
            "publish",
            metadata=meta.ObjectMetaArgs(name="sax-publish", namespace=args.namespace, labels=_labels("sax-publish")),
            spec=batch.JobSpecArgs(
                backoff_limit=0,
                active_deadline_seconds=args.publish_deadline_seconds + 300,
                template=core.PodTemplateSpecArgs(
                    metadata=meta.ObjectMetaArgs(labels=_labels("sax-publish")),
                    spec=core.PodSpecArgs(
                        restart_policy="Never",
                        service_account_name=PUBLISH_ACCOUNT,
                        automount_service_account_token=False,
                        security_context=core.PodSecurityContextArgs(
                            run_as_non_root=True,
                            run_as_user=65534,
                            seccomp_profile=core.SeccompProfileArgs(type="RuntimeDefault"),
                        ),
                        containers=[
                            core.ContainerArgs(
                                name="publish",
                                image=args.images["publish"],
                                command=["python3", "/opt/sax-publish/saxml_publish.py"],
                                env=[core.EnvVarArgs(name=k, value=v) for k, v in env.items()],
                                security_context=core.SecurityContextArgs(
                                    allow_privilege_escalation=False,
                                    read_only_root_filesystem=True,
                                    capabilities=core.CapabilitiesArgs(drop=["ALL"]),
                                ),
                                volume_mounts=[
                                    core.VolumeMountArgs(name="script", mount_path="/opt/sax-publish", read_only=True)
                                ],
                            )
                        ],
                        volumes=[
                            core.VolumeArgs(
                                name="script", config_map=core.ConfigMapVolumeSourceArgs(name="sax-publish")
                            )
                        ],
                    ),
                ),
            ),
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=args.provider,
                depends_on=[*servers, script, account],
                replace_on_changes=["*"],
                delete_before_replace=True,
                custom_timeouts=pulumi.CustomTimeouts(create=f"{args.publish_deadline_seconds // 60 + 10}m"),
            ),
        )
