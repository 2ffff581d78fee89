"""The Custom Metrics Stackdriver Adapter: the metrics API an autoscaled role's HPA reads.

The HPA of a serving role (workloads/role_autoscaler.py) reads a `Pods` metric from
`custom.metrics.k8s.io`. On GKE that API is served by the adapter, which answers from Cloud
Monitoring, where Managed Service for Prometheus keeps what it scrapes of the vLLM leaders
(observability/pod_monitoring.py). The objects are the upstream production manifest's
(GoogleCloudPlatform/k8s-stackdriver custom-metrics-stackdriver-adapter/deploy/production/
adapter_new_resource_model.yaml at tag cm-sd-adapter-v0.16.9), written natively with the image
pinned in `versions.metricsAdapterImage`, and three departures, each from the adapter's own flags
(the last two are not flags but what a least-privilege install needs):

- it serves on 6443, not 443, and runs as a non-root user under the restricted Pod Security
  level: `--secure-port` and `--cert-dir` are the generic API server's serving flags, which the
  adapter embeds (sigs.k8s.io/custom-metrics-apiserver v1.35.0 pkg/cmd/options/options.go
  `NewSecureServingOptions`; k8s.io/apiserver pkg/server/options/serving.go binds 443 by default),
  and its self-signed serving certificate goes to a writable emptyDir;
- its Google identity is its Kubernetes service account itself (Workload Identity Federation, as
  for the model servers, workloads/model_access.py) with `roles/monitoring.viewer` on the project,
  the role the adapter's README asks for, instead of a Google service account to impersonate;
- a NetworkPolicy admits the control plane to the serving port and nothing else.

The image is closed here: that it starts as configured is for a real cluster to show (the README
says so); the local plane serves the same API from a stand-in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as kubernetes
from pulumi_kubernetes.apiregistration import v1 as apiregistration
from pulumi_kubernetes.apps import v1 as apps
from pulumi_kubernetes.core import v1 as core
from pulumi_kubernetes.meta import v1 as meta
from pulumi_kubernetes.rbac import v1 as rbac

from contracts import pod_security
from contracts.labels import COMMON_LABELS
from contracts.network_policies import Allowance, NetworkPolicies, NetworkPoliciesArgs, control_plane

NAMESPACE = "custom-metrics"
NAME = "custom-metrics-stackdriver-adapter"  # the Deployment, its ServiceAccount and Service
SELECTOR = {"k8s-app": NAME}
SERVING_PORT = 6443
CERT_DIR = "/var/run/serving-cert"
MONITORING_ROLE = "roles/monitoring.viewer"
# The API versions it serves that an HPA's `Pods` metric reads, as the upstream manifest registers
# them: (group, version, priority). The manifest also registers external.metrics.k8s.io and grants
# the HPA controller to read it; a role's autoscaler reads no external metric, so the adapter
# serves none (`--enable-external-metrics-api`, on by default in its adapter.go) and neither is made.
# The HPA controller's own bootstrap role already lists custom metrics (kubernetes v1.36.3
# plugin/pkg/auth/authorizer/rbac/bootstrappolicy/controller_policy.go, horizontal-pod-autoscaler).
API_SERVICES = (
    ("custom.metrics.k8s.io", "v1beta1", 100),
    ("custom.metrics.k8s.io", "v1beta2", 200),
)
ARGS = (
    "--use-new-resource-model=true",
    "--fallback-for-container-metrics=true",
    "--enable-external-metrics-api=false",
    f"--secure-port={SERVING_PORT}",
    f"--cert-dir={CERT_DIR}",
)
NONROOT_UID = 65532  # distroless's nonroot user
WATCH = ("get", "list", "watch")


@dataclass(frozen=True)
class MetricsAdapterArgs:
    provider: kubernetes.Provider
    image: str
    project: str
    principal: pulumi.Input[str]  # the adapter's Kubernetes service account as an IAM principal
    pod_cidr: str  # what NetworkPolicies treat as in-cluster
    depends_on: Sequence[pulumi.Resource] = ()


def _meta(name: str, namespace: str | None = NAMESPACE) -> meta.ObjectMetaArgs:
    return meta.ObjectMetaArgs(name=name, namespace=namespace, labels={**COMMON_LABELS, **SELECTOR})


def _binding_meta(name: str, namespace: str | None = None) -> meta.ObjectMetaArgs:
    return _meta(name, namespace)


class MetricsAdapter(pulumi.ComponentResource):
    deployment: apps.Deployment
    api_services: list[apiregistration.APIService]

    def __init__(self, name: str, args: MetricsAdapterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tpu-slicing:k8s:MetricsAdapter", name, None, opts)
        first = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=list(args.depends_on))
        namespace = core.Namespace(
            "namespace",
            metadata=meta.ObjectMetaArgs(
                name=NAMESPACE,
                labels={**COMMON_LABELS, **pod_security.namespace_labels(pod_security.METRICS_ADAPTER)},
            ),
            opts=first,
        )
        policies = NetworkPolicies(
            "network-policies",
            NetworkPoliciesArgs(
                provider=args.provider,
                namespace=NAMESPACE,
                allowances=[
                    Allowance("api-from-control-plane", SELECTOR, control_plane(args.pod_cidr), (SERVING_PORT,))
                ],
                depends_on=[namespace],
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )
        child = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[namespace, policies])
        account = core.ServiceAccount("service-account", metadata=_meta(NAME), opts=child)
        reader = gcp.projects.IAMMember(
            "monitoring-viewer",
            gcp.projects.IAMMemberArgs(project=args.project, role=MONITORING_ROLE, member=args.principal),
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )
        subject = rbac.SubjectArgs(kind="ServiceAccount", name=NAME, namespace=NAMESPACE)
        ref = rbac.RoleRefArgs
        grants: list[pulumi.Resource] = [
            # An aggregated API server checks its callers' tokens and rights with the API server.
            rbac.ClusterRoleBinding(
                "auth-delegator",
                metadata=_binding_meta("custom-metrics:system:auth-delegator"),
                role_ref=ref(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="system:auth-delegator"),
                subjects=[subject],
                opts=child,
            ),
            rbac.RoleBinding(
                "auth-reader",
                metadata=_binding_meta("custom-metrics-auth-reader", "kube-system"),
                role_ref=ref(
                    api_group="rbac.authorization.k8s.io", kind="Role", name="extension-apiserver-authentication-reader"
                ),
                subjects=[subject],
                opts=child,
            ),
            # It maps each pod of a query to its Monitoring series.
            rbac.ClusterRole(
                "resource-reader",
                metadata=_binding_meta("custom-metrics-resource-reader"),
                rules=[rbac.PolicyRuleArgs(api_groups=[""], resources=["pods", "nodes", "nodes/stats"], verbs=WATCH)],
                opts=child,
            ),
        ]
        grants.append(
            rbac.ClusterRoleBinding(
                "resource-reader-binding",
                metadata=_binding_meta("custom-metrics-resource-reader"),
                role_ref=ref(
                    api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="custom-metrics-resource-reader"
                ),
                subjects=[subject],
                opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[grants[-1]])),
            )
        )
        service = core.Service(
            "service",
            metadata=_meta(NAME),
            spec=core.ServiceSpecArgs(
                selector=SELECTOR,
                ports=[core.ServicePortArgs(port=443, target_port=SERVING_PORT, protocol="TCP")],
            ),
            opts=child,
        )
        self.deployment = apps.Deployment(
            "adapter",
            metadata=_meta(NAME),
            spec=_deployment_spec(args.image),
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=args.provider,
                depends_on=[account, reader, service, *grants],
                custom_timeouts=pulumi.CustomTimeouts(create="10m", update="10m"),
            ),
        )
        # Registered once the server behind them is ready: an APIService without a ready server
        # makes discovery of its group fail for every client of the cluster.
        self.api_services = [
            apiregistration.APIService(
                f"{group.split('.')[0]}-{version}",
                metadata=_meta(f"{version}.{group}", None),
                spec=apiregistration.APIServiceSpecArgs(
                    group=group,
                    version=version,
                    group_priority_minimum=100,
                    version_priority=priority,
                    # As the upstream manifest: the adapter serves a self-signed certificate.
                    insecure_skip_tls_verify=True,
                    service=apiregistration.ServiceReferenceArgs(name=NAME, namespace=NAMESPACE, port=443),
                ),
                opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[self.deployment]),
            )
            for group, version, priority in API_SERVICES
        ]
        self.register_outputs({"apiServices": [f"{v}.{g}" for g, v, _ in API_SERVICES]})


def _deployment_spec(image: str) -> apps.DeploymentSpecArgs:
    return apps.DeploymentSpecArgs(
        replicas=1,
        selector=meta.LabelSelectorArgs(match_labels=SELECTOR),
        template=core.PodTemplateSpecArgs(
            metadata=meta.ObjectMetaArgs(labels={**SELECTOR, **COMMON_LABELS}),
            spec=core.PodSpecArgs(
                service_account_name=NAME,
                automount_service_account_token=True,  # an API server: it calls the API
                security_context=core.PodSecurityContextArgs(
                    run_as_non_root=True,
                    run_as_user=NONROOT_UID,
                    seccomp_profile=core.SeccompProfileArgs(type="RuntimeDefault"),
                ),
                containers=[
                    core.ContainerArgs(
                        name="pod-custom-metrics-stackdriver-adapter",
                        image=image,
                        command=["/adapter", *ARGS],
                        ports=[core.ContainerPortArgs(name="https", container_port=SERVING_PORT, protocol="TCP")],
                        readiness_probe=core.ProbeArgs(
                            http_get=core.HTTPGetActionArgs(path="/healthz", port=SERVING_PORT, scheme="HTTPS"),
                            # The upstream manifest's timings: with one replica, a probe that flaps
                            # makes the APIService unavailable to every client of the cluster.
                            initial_delay_seconds=40,
                            timeout_seconds=5,
                            period_seconds=10,
                        ),
                        resources=core.ResourceRequirementsArgs(
                            requests={"cpu": "250m", "memory": "200Mi"}, limits={"cpu": "250m", "memory": "200Mi"}
                        ),
                        security_context=core.SecurityContextArgs(
                            allow_privilege_escalation=False,
                            read_only_root_filesystem=True,
                            capabilities=core.CapabilitiesArgs(drop=["ALL"]),
                        ),
                        volume_mounts=[core.VolumeMountArgs(name="serving-cert", mount_path=CERT_DIR)],
                    )
                ],
                volumes=[core.VolumeArgs(name="serving-cert", empty_dir=core.EmptyDirVolumeSourceArgs())],
            ),
        ),
    )
