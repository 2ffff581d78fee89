"""NetworkPolicies: every namespace the program creates denies ingress by default, then admits
exactly the connections serving needs.

The builders here are plain functions over Kubernetes bodies (no Pulumi), so the workload modules
can state their own allowances next to the ports they open, and the tests can compute who
reaches what (tests/network_reachability.py). `NetworkPolicies` registers them.

Enforced by GKE Dataplane V2 (the cluster's `ADVANCED_DATAPATH`, infra/cluster.py), which
implements the networking.k8s.io/v1 semantics: a pod selected by any policy with `Ingress` in
its types accepts only what one of those policies allows. Two things it never filters, so no
rule is needed for them: kubelet probes and host-network agents on the pod's own node (GKE's
TPU metrics agent reads the runtime's port this way).

Egress stays open on purpose: model servers pull weights from Cloud Storage or Hugging Face,
whose addresses no `ipBlock` can name, and the ingress side already closes every in-cluster port.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes

from contracts.kubernetes_object import KubernetesObject
from contracts.labels import COMMON_LABELS

API = "networking.k8s.io/v1"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set by the API server on every namespace

# Google Cloud's health-check probers (cloud.google.com/load-balancing/docs/health-check-concepts,
# "Probe IP ranges and firewall rules"): they probe load-balanced pods directly.
HEALTH_CHECK_RANGES = ("35.191.0.0/16", "130.211.0.0/22")

# Managed Service for Prometheus scrapes from its collector DaemonSet
# (GoogleCloudPlatform/prometheus-engine, manifests/operator.yaml: namespace gmp-system, pod
# label app.kubernetes.io/name=collector, not host-network).
GMP_NAMESPACE = "gmp-system"
GMP_COLLECTOR = {"app.kubernetes.io/name": "collector"}

# The GKE control plane reaches in-cluster webhooks and aggregated APIs through the
# konnectivity-agent pods in kube-system, so such a call arrives from a pod address, inside the pod
# range (GKE labels them k8s-app=konnectivity-agent; kubernetes-sigs/apiserver-network-proxy
# examples/kubernetes/konnectivity-agent.yaml; tigera/operator#5212, cilium/cilium#19439).
KONNECTIVITY_NAMESPACE = "kube-system"
KONNECTIVITY_AGENT = {"k8s-app": "konnectivity-agent"}

# Labels the controllers put on the pods they create, which the group allowances select.
# kubernetes-sigs/lws v0.8.0 api/leaderworkerset/v1/leaderworkerset_types.go
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
# kubernetes-sigs/jobset v0.12.0 api/jobset/v1alpha2/jobset_types.go
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOBSET_JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
# kubernetes/kubernetes pkg/controller/job (batch.kubernetes.io/job-name on every Job's pods)
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"


@dataclass(frozen=True)
class Peer:
    """Who may connect: pods by labels (in the policy's namespace, or in `namespace`), or
    addresses (`cidrs`, minus `excluded`)."""

    pods: Mapping[str, str] | None = None
    namespace: str | None = None
    cidrs: tuple[str, ...] = ()
    excluded: tuple[str, ...] = ()

    def bodies(self) -> list[dict[str, Any]]:
        if self.cidrs:
            return [_ip_block(cidr, self.excluded) for cidr in self.cidrs]
        peer: dict[str, Any] = {"podSelector": {"matchLabels": dict(self.pods or {})}}
        if self.namespace is not None:
            peer["namespaceSelector"] = {"matchLabels": {NAMESPACE_NAME_LABEL: self.namespace}}
        return [peer]


def _ip_block(cidr: str, excluded: Sequence[str]) -> dict[str, Any]:
    network = ipaddress.ip_network(cidr)
    # `except` must lie inside `cidr` (the API server refuses anything else).
    inside = [e for e in excluded if ipaddress.ip_network(e).subnet_of(network)]  # type: ignore[arg-type]
    block: dict[str, Any] = {"cidr": str(network)}
    if inside:
        block["except"] = inside
    return {"ipBlock": block}


def pods(labels: Mapping[str, str]) -> Peer:
    return Peer(pods=dict(labels))


def gmp_collectors() -> Peer:
    return Peer(pods=dict(GMP_COLLECTOR), namespace=GMP_NAMESPACE)


def addresses(cidrs: Iterable[str], excluded: Iterable[str] = ()) -> Peer:
    return Peer(cidrs=tuple(cidrs), excluded=tuple(excluded))


def outside_pods(pod_cidr: str) -> Peer:
    """Anything that is not a pod of this cluster: load-balancer clients (already filtered by the
    Service's source ranges and Google's firewall), the control plane, nodes."""
    return addresses(["0.0.0.0/0"], [pod_cidr])


def konnectivity_agents() -> Peer:
    return Peer(pods=dict(KONNECTIVITY_AGENT), namespace=KONNECTIVITY_NAMESPACE)


def control_plane(pod_cidr: str) -> tuple[Peer, ...]:
    """The sources a call from the cluster's control plane (a webhook call, an aggregated API read)
    arrives from: the konnectivity agents' pod addresses, GKE's path, and, where the API server
    dials in directly, an address outside the pod range."""
    return (konnectivity_agents(), outside_pods(pod_cidr))


@dataclass(frozen=True)
class Allowance:
    """One ingress rule: `sources` may open `ports` (all ports and protocols when empty, every TCP
    port with `all_tcp`) on pods with `to`."""

    name: str
    to: Mapping[str, str]
    sources: tuple[Peer, ...]
    ports: tuple[int, ...] = field(default=())
    # Every TCP port and no other protocol: for peers that reach ports the kernel picks.
    all_tcp: bool = False


def default_deny(namespace: str) -> dict[str, Any]:
    """Selects every pod in the namespace for ingress and allows nothing."""
    return _body("default-deny-ingress", namespace, {}, None)


def allow(namespace: str, allowance: Allowance) -> dict[str, Any]:
    rule: dict[str, Any] = {"from": [body for peer in allowance.sources for body in peer.bodies()]}
    if allowance.ports and allowance.all_tcp:
        raise ValueError(f"{allowance.name}: all_tcp admits every TCP port; give no ports with it")
    if allowance.ports:
        rule["ports"] = [{"protocol": "TCP", "port": port} for port in sorted(set(allowance.ports))]
    elif allowance.all_tcp:
        rule["ports"] = [{"protocol": "TCP"}]
    return _body(allowance.name, namespace, allowance.to, [rule])


def within_groups(name: str, selector: Mapping[str, str], index_label: str, groups: int) -> list[Allowance]:
    """The pods of one group (an LWS group, a JobSet child Job) reach each other on every port, and
    no other group's pods. A NetworkPolicy cannot say "the same group as me", so there is one
    allowance per group index; changing the replica count adds or removes them."""
    allowances = []
    for index in range(groups):
        members = {**selector, index_label: str(index)}
        allowances.append(Allowance(f"{name}-group-{index}", members, (pods(members),)))
    return allowances


def _body(name: str, namespace: str, selector: Mapping[str, str], ingress: list[dict[str, Any]] | None):
    spec: dict[str, Any] = {"podSelector": {"matchLabels": dict(selector)} if selector else {}}
    spec["policyTypes"] = ["Ingress"]
    if ingress is not None:
        spec["ingress"] = ingress
    return {
        "apiVersion": API,
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(COMMON_LABELS)},
        "spec": spec,
    }


def policy_bodies(namespace: str, allowances: Iterable[Allowance]) -> list[dict[str, Any]]:
    """The namespace's default deny, then each allowance; names are unique within the namespace."""
    bodies = [default_deny(namespace), *(allow(namespace, a) for a in allowances)]
    names = [b["metadata"]["name"] for b in bodies]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"NetworkPolicy names repeat in {namespace}: {duplicates}")
    return bodies


@dataclass(frozen=True)
class NetworkPoliciesArgs:
    provider: kubernetes.Provider
    namespace: str
    allowances: Sequence[Allowance]
    depends_on: Sequence[pulumi.Resource] = ()


class NetworkPolicies(pulumi.ComponentResource):
    """One namespace's default deny and its allowances, registered before the pods they admit."""

    policies: list[KubernetesObject]

    def __init__(self, name: str, args: NetworkPoliciesArgs, opts: pulumi.ResourceOptions | None = None):
        # The type token names the package the component was first in: it is part of every URN below it.
        super().__init__("tpu-slicing:k8s:NetworkPolicies", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=list(args.depends_on))
        bodies = policy_bodies(args.namespace, args.allowances)
        # Child names carry the component's, so two namespaces' policies never share a URN.
        self.policies = [KubernetesObject(f"{name}-{body['metadata']['name']}", body, child) for body in bodies]
        self.register_outputs({"policies": [body["metadata"]["name"] for body in bodies]})
