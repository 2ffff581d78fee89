"""The Kueue slice controller (admission check `accelerator.gke.io/slice`), as native objects.

Built from the facts of the upstream kustomize manifest (dynamic-slicing.md §7.4)
at a pinned image, instead of applying a manifest from a personal gist. Names stay
upstream's: the controller finds its webhook configuration and certificate
Secret by these names.

Its mutating webhooks fail closed for every Job, JobSet, LeaderWorkerSet and
StatefulSet in the cluster, so the webhook configuration is created only after
the Deployment is ready, and the component installs after the other controllers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_command as command
import pulumi_kubernetes as kubernetes
from pulumi_kubernetes import policy
from pulumi_kubernetes.admissionregistration import v1 as admission
from pulumi_kubernetes.apps import v1 as apps
from pulumi_kubernetes.core import v1 as core
from pulumi_kubernetes.meta import v1 as meta
from pulumi_kubernetes.rbac import v1 as rbac

from contracts import pod_security
from contracts.awaits import TIMEOUT_SECONDS, WAIT_FOR
from contracts.labels import COMMON_LABELS
from contracts.network_policies import Allowance, NetworkPolicies, NetworkPoliciesArgs, control_plane
from domain.serving_budget import SLICE_ACTIVATION_TIMEOUT_SECONDS
from k8s import slice_drain

NAMESPACE = "slice-controller-system"
WEBHOOK_PORT = 9443
# Namespaces whose Jobs, JobSets, LeaderWorkerSets and StatefulSets the webhooks never see.
EXEMPT_NAMESPACES = (
    "kube-system",
    "kube-public",
    "kube-node-lease",
    "gke-managed-system",
    "gmp-system",
    "gmp-public",
    NAMESPACE,
    "kueue-system",
    "jobset-system",
    "lws-system",
)
PREFIX = "slice-controller"
SERVICE_ACCOUNT = f"{PREFIX}-controller-manager"
DEPLOYMENT = f"{PREFIX}-controller-manager"
WEBHOOK_SERVICE = f"{PREFIX}-webhook-service"
CERT_SECRET = f"{PREFIX}-webhook-server-cert"
WEBHOOK_CONFIG = f"{PREFIX}-mutating-webhook-configuration"
SELECTOR = {"control-plane": "controller-manager", "app.kubernetes.io/name": "slice-controller"}
REPLICAS = 2

ARGS = (
    "--metrics-bind-address=:8443",
    "--leader-elect",
    "--health-probe-bind-address=:8081",
    "--zap-log-level=3",
    # Only gates the controller knows: it exits at start on an unknown one (AI-Hypercomputer/xpk
    # slice/cmd/main.go). ShorterSliceNameLength, in the v0.8.0-195 manifest, was removed at
    # v0.8.0-196 (slice/internal/features/features.go, 250d4b3c, #1183; names are now always short).
    "--feature-gates=UseRetryMechanismForSliceCreation=true",
    f"--activation-timeout={SLICE_ACTIVATION_TIMEOUT_SECONDS // 60}m",  # the smoke budget counts it
    "--default-slice-health-node-affinity=HEALTHY_AND_DEGRADED",
)

# (webhook name, path, API group, version, resource)
WEBHOOKS = (
    ("mjob.kb.io", "/mutate-batch-v1-job", "batch", "v1", "jobs"),
    ("mjobset.kb.io", "/mutate-jobset-x-k8s-io-v1alpha2-jobset", "jobset.x-k8s.io", "v1alpha2", "jobsets"),
    (
        "mleaderworkerset.kb.io",
        "/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
        "leaderworkerset.x-k8s.io",
        "v1",
        "leaderworkersets",
    ),
    ("mstatefulset.slice-controller.kb.io", "/mutate-apps-v1-statefulset", "apps", "v1", "statefulsets"),
)


def _rule(
    groups: Sequence[str], resources: Sequence[str], verbs: Sequence[str], names: Sequence[str] = ()
) -> rbac.PolicyRuleArgs:
    return rbac.PolicyRuleArgs(
        api_groups=list(groups), resources=list(resources), verbs=list(verbs), resource_names=list(names) or None
    )


WATCH = ("get", "list", "watch")
MANAGER_RULES = (
    _rule([""], ["events"], ["create", "patch", "update", "watch"]),
    _rule([""], ["nodes", "pods"], WATCH),
    _rule(["accelerator.gke.io"], ["slices"], ["create", "delete", "get", "list", "patch", "update", "watch"]),
    _rule(["accelerator.gke.io"], ["slices/finalizers"], ["update"]),
    # Reads webhook configurations, but writes its CA into its own only.
    _rule(["admissionregistration.k8s.io"], ["mutatingwebhookconfigurations"], ["list", "watch"]),
    _rule(["admissionregistration.k8s.io"], ["mutatingwebhookconfigurations"], ["get", "update"], [WEBHOOK_CONFIG]),
    _rule(["batch"], ["jobs"], [*WATCH, "patch", "update"]),
    _rule(["jobset.x-k8s.io"], ["jobsets"], [*WATCH, "patch", "update"]),
    _rule(["leaderworkerset.x-k8s.io"], ["leaderworkersets"], [*WATCH, "patch", "update"]),
    _rule(["kueue.x-k8s.io"], ["admissionchecks"], WATCH),
    _rule(["kueue.x-k8s.io"], ["admissionchecks/status", "workloads/status"], ["get", "patch", "update"]),
    _rule(["kueue.x-k8s.io"], ["workloads"], ["create", "get", "list", "patch", "update", "watch"]),
)
# Its serving certificate lives in one Secret of its own namespace. The reference manifest grants
# get/list/watch/update on every Secret of the cluster; the controller keeps its certificate the
# way Kueue does (open-policy-agent/cert-controller: an empty Secret it fills, and the CA written
# into its webhook configuration), and that rotator watches Secrets through a cache limited to the
# Secret's namespace (cert-controller v0.16.0 pkg/rotator/rotator.go, `DefaultNamespaces`), which
# is why Kueue v0.19.2 needs only a namespaced Role for them
# (config/components/rbac/manager_secrets_role.yaml). The image is closed: that it uses the same
# rotator is inferred from its manifest, and only a real cluster can prove it.
CERT_RULES = (
    _rule([""], ["secrets"], WATCH),
    _rule([""], ["secrets"], ["update"], [CERT_SECRET]),
)
LEADER_ELECTION_RULES = (
    _rule([""], ["configmaps"], ["get", "list", "watch", "create", "update", "patch", "delete"]),
    _rule(["coordination.k8s.io"], ["leases"], ["get", "list", "watch", "create", "update", "patch", "delete"]),
    _rule([""], ["events"], ["create", "patch"]),
)


@dataclass(frozen=True)
class SliceControllerArgs:
    provider: kubernetes.Provider
    image: str
    pod_cidr: str  # the cluster's pod range: what NetworkPolicies treat as in-cluster
    kubeconfig: pulumi.Input[str]  # for the destroy-time wait for the Slices (k8s/slice_drain.py)
    depends_on: Sequence[pulumi.Resource] = ()


def _meta(name: str, namespaced: bool = True) -> meta.ObjectMetaArgs:
    return meta.ObjectMetaArgs(
        name=name,
        namespace=NAMESPACE if namespaced else None,
        labels={**COMMON_LABELS, "app.kubernetes.io/name": "slice-controller"},
    )


class SliceController(pulumi.ComponentResource):
    deployment: apps.Deployment
    webhooks: admission.MutatingWebhookConfiguration
    drain: command.local.Command

    def __init__(self, name: str, args: SliceControllerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tpu-slicing:k8s:SliceController", name, None, opts)
        first = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=list(args.depends_on))
        namespace_meta = _meta(NAMESPACE, namespaced=False)
        namespace = core.Namespace(
            "namespace",
            metadata=meta.ObjectMetaArgs(
                name=namespace_meta.name,
                labels={**namespace_meta.labels, **pod_security.namespace_labels(pod_security.SLICE_CONTROLLER)},
            ),
            opts=first,
        )
        # Only the control plane calls the webhook server (on GKE through the konnectivity agents'
        # pods); nothing else reaches the manager.
        policies = NetworkPolicies(
            "network-policies",
            NetworkPoliciesArgs(
                provider=args.provider,
                namespace=NAMESPACE,
                allowances=[
                    Allowance("webhook-from-control-plane", SELECTOR, control_plane(args.pod_cidr), (WEBHOOK_PORT,))
                ],
                depends_on=[namespace],
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )
        child = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[namespace, policies])
        account = core.ServiceAccount("service-account", metadata=_meta(SERVICE_ACCOUNT), opts=child)
        subject = rbac.SubjectArgs(kind="ServiceAccount", name=SERVICE_ACCOUNT, namespace=NAMESPACE)
        rbac_objects: list[pulumi.Resource] = [account]

        # Its certificate Secret and its leader-election lease, both in its own namespace.
        for role, namespaced_rules in {"cert": CERT_RULES, "leader-election": LEADER_ELECTION_RULES}.items():
            role_name = f"{PREFIX}-{role}-role"
            rbac_objects.append(
                rbac.Role(f"{role}-role", metadata=_meta(role_name), rules=list(namespaced_rules), opts=child)
            )
            rbac_objects.append(
                rbac.RoleBinding(
                    f"{role}-binding",
                    metadata=_meta(f"{PREFIX}-{role}-rolebinding"),
                    role_ref=rbac.RoleRefArgs(api_group="rbac.authorization.k8s.io", kind="Role", name=role_name),
                    subjects=[subject],
                    opts=child,
                )
            )
        cluster_roles = {
            "manager": list(MANAGER_RULES),
            "metrics-auth": [
                _rule(["authentication.k8s.io"], ["tokenreviews"], ["create"]),
                _rule(["authorization.k8s.io"], ["subjectaccessreviews"], ["create"]),
            ],
        }
        for role, rules in cluster_roles.items():
            role_name = f"{PREFIX}-{role}-role"
            rbac_objects.append(
                rbac.ClusterRole(f"{role}-role", metadata=_meta(role_name, namespaced=False), rules=rules, opts=child)
            )
            rbac_objects.append(
                rbac.ClusterRoleBinding(
                    f"{role}-binding",
                    metadata=_meta(f"{PREFIX}-{role}-rolebinding", namespaced=False),
                    role_ref=rbac.RoleRefArgs(
                        api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=role_name
                    ),
                    subjects=[subject],
                    opts=child,
                )
            )
        rbac.ClusterRole(
            "metrics-reader",
            metadata=_meta(f"{PREFIX}-metrics-reader", namespaced=False),
            rules=[rbac.PolicyRuleArgs(non_resource_urls=["/metrics"], verbs=["get"])],
            opts=child,
        )
        # Empty on purpose: the controller writes its own serving certificate here.
        cert = core.Secret("webhook-cert", metadata=_meta(CERT_SECRET), type="Opaque", opts=child)
        core.Service(
            "metrics-service",
            metadata=_meta(f"{PREFIX}-controller-manager-metrics-service"),
            spec=core.ServiceSpecArgs(
                selector=SELECTOR,
                ports=[core.ServicePortArgs(name="https", port=8443, target_port=8443, protocol="TCP")],
            ),
            opts=child,
        )
        webhook_service = core.Service(
            "webhook-service",
            metadata=_meta(WEBHOOK_SERVICE),
            spec=core.ServiceSpecArgs(
                selector=SELECTOR,
                ports=[core.ServicePortArgs(port=443, target_port=WEBHOOK_PORT, protocol="TCP")],
            ),
            opts=child,
        )
        self.deployment = apps.Deployment(
            "controller-manager",
            metadata=_meta(DEPLOYMENT),
            spec=self._deployment_spec(args.image),
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=args.provider,
                depends_on=[*rbac_objects, cert, webhook_service],
                # Waiting for rollout is the default; say how long is too long.
                custom_timeouts=pulumi.CustomTimeouts(create="10m", update="10m"),
            ),
        )
        # A drain or upgrade never takes both replicas at once.
        policy.v1.PodDisruptionBudget(
            "disruption-budget",
            metadata=_meta(f"{PREFIX}-controller-manager"),
            spec=policy.v1.PodDisruptionBudgetSpecArgs(
                min_available=1, selector=meta.LabelSelectorArgs(match_labels=SELECTOR)
            ),
            opts=child,
        )
        webhook_meta = _meta(WEBHOOK_CONFIG, namespaced=False)
        self.webhooks = admission.MutatingWebhookConfiguration(
            "mutating-webhooks",
            metadata=meta.ObjectMetaArgs(
                name=webhook_meta.name,
                labels=webhook_meta.labels,
                # The controller writes the CA of its self-made serving certificate into this
                # object once it sees it (why its role may update webhook configurations; the
                # certificate goes into the empty Secret above). Until then the API server cannot
                # call the webhook: `pulumi up` waits for the CA before anything goes on.
                annotations={WAIT_FOR: "jsonpath={.webhooks[0].clientConfig.caBundle}", TIMEOUT_SECONDS: "600"},
            ),
            webhooks=[
                admission.MutatingWebhookArgs(
                    name=hook,
                    admission_review_versions=["v1"],
                    client_config=admission.WebhookClientConfigArgs(
                        service=admission.ServiceReferenceArgs(name=WEBHOOK_SERVICE, namespace=NAMESPACE, path=path),
                    ),
                    failure_policy="Fail",
                    side_effects="None",
                    # Fail closed, but never for the cluster's own machinery: a controller that is
                    # down must not stop kube-system, GKE's namespaces or the controllers that would
                    # bring it back from creating their Jobs and StatefulSets.
                    namespace_selector=meta.LabelSelectorArgs(
                        match_expressions=[
                            meta.LabelSelectorRequirementArgs(
                                key="kubernetes.io/metadata.name", operator="NotIn", values=list(EXEMPT_NAMESPACES)
                            )
                        ]
                    ),
                    rules=[
                        admission.RuleWithOperationsArgs(
                            api_groups=[group], api_versions=[version], operations=["CREATE"], resources=[resource]
                        )
                    ],
                )
                for hook, path, group, version, resource in WEBHOOKS
            ],
            # Only once the Deployment is ready: a fail-closed webhook with no
            # server behind it would block every Job in the cluster.
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[self.deployment]),
        )
        # Last child: a destroy deletes it (waiting for the Slices) after the workloads that depend
        # on this component and before the webhooks and the manager it depends on.
        self.drain = command.local.Command(
            "slice-drain",
            command.local.CommandArgs(
                delete=slice_drain.drain_script(),
                interpreter=["/bin/bash", "-c"],
                environment={"KUBECONFIG_DATA": args.kubeconfig},
                logging=command.local.Logging.STDERR,
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.deployment, self.webhooks]),
        )
        self.register_outputs({"deployment": self.deployment.metadata.name})

    @staticmethod
    def _deployment_spec(image: str) -> apps.DeploymentSpecArgs:
        return apps.DeploymentSpecArgs(
            # Two replicas: the webhooks fail closed, and controller-runtime serves them from every
            # replica (leader election only picks who reconciles), so one node going away no
            # longer blocks every Job, JobSet and LWS in the cluster.
            replicas=REPLICAS,
            selector=meta.LabelSelectorArgs(match_labels=SELECTOR),
            template=core.PodTemplateSpecArgs(
                metadata=meta.ObjectMetaArgs(
                    labels={**SELECTOR, **COMMON_LABELS},
                    annotations={"kubectl.kubernetes.io/default-container": "manager"},
                ),
                spec=core.PodSpecArgs(
                    topology_spread_constraints=[
                        core.TopologySpreadConstraintArgs(
                            max_skew=1,
                            topology_key="kubernetes.io/hostname",
                            when_unsatisfiable="ScheduleAnyway",
                            label_selector=meta.LabelSelectorArgs(match_labels=SELECTOR),
                        )
                    ],
                    service_account_name=SERVICE_ACCOUNT,
                    automount_service_account_token=True,  # a controller: it calls the API
                    termination_grace_period_seconds=10,
                    security_context=core.PodSecurityContextArgs(
                        run_as_non_root=True, seccomp_profile=core.SeccompProfileArgs(type="RuntimeDefault")
                    ),
                    containers=[
                        core.ContainerArgs(
                            name="manager",
                            image=image,
                            command=["/manager"],
                            args=list(ARGS),
                            ports=[
                                core.ContainerPortArgs(
                                    name="webhook-server", container_port=WEBHOOK_PORT, protocol="TCP"
                                )
                            ],
                            liveness_probe=core.ProbeArgs(
                                http_get=core.HTTPGetActionArgs(path="/healthz", port=8081),
                                initial_delay_seconds=15,
                                period_seconds=20,
                            ),
                            readiness_probe=core.ProbeArgs(
                                http_get=core.HTTPGetActionArgs(path="/readyz", port=8081),
                                initial_delay_seconds=5,
                                period_seconds=10,
                            ),
                            resources=core.ResourceRequirementsArgs(
                                requests={"cpu": "500m", "memory": "1Gi"}, limits={"cpu": "2", "memory": "4Gi"}
                            ),
                            security_context=core.SecurityContextArgs(
                                allow_privilege_escalation=False,
                                capabilities=core.CapabilitiesArgs(drop=["ALL"]),
                            ),
                            volume_mounts=[
                                core.VolumeMountArgs(
                                    name="cert", mount_path="/tmp/k8s-webhook-server/serving-certs", read_only=True
                                )
                            ],
                        )
                    ],
                    volumes=[
                        core.VolumeArgs(
                            name="cert", secret=core.SecretVolumeSourceArgs(secret_name=CERT_SECRET, default_mode=420)
                        )
                    ],
                ),
            ),
        )
