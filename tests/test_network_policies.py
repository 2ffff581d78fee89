"""Every namespace the program creates denies ingress, and admits exactly what serving needs.

The reachability of every port of every generated pod is computed from every workload and from
the outside sources that matter (tests/network_reachability.py) and compared with the table the
design calls for, per stack.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from plan import engine, manifests
from settings.loader import load
from settings.model import StackConfig
from shared import network_policies as np
from tests.conftest import DevRunner, config_with
from tests.network_reachability import Pod, address_pods, allowed, pods_of, reachable

POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
NAMESPACE = "kubernetes:core/v1:Namespace"


def _bodies(plan: engine.PlanResult) -> list[dict[str, Any]]:
    return [body for _, body in manifests.objects(plan, masked=False)]


def _pod_address(cidr: str, offset: int) -> str:
    return str(ipaddress.ip_network(cidr)[-offset])


def matrix(plan: engine.PlanResult, config: StackConfig) -> set[str]:
    net = config.network
    bodies = _bodies(plan)
    policies = [b for b in bodies if b["kind"] == "NetworkPolicy"]
    targets = address_pods([pod for body in bodies for pod in pods_of(body)], str(net.pod_cidr))
    pod_range = str(net.pod_cidr)
    outsiders = [
        Pod("", "gateway proxy", None, {}, address=str(ipaddress.ip_network(str(net.proxy_cidr))[5])),
        Pod("", "health checker", None, {}, address="35.191.0.10"),
        Pod("", "outside the pod range", None, {}, address="203.0.113.7"),  # LB clients, control plane
        Pod(np.GMP_NAMESPACE, "prometheus", None, dict(np.GMP_COLLECTOR), address=_pod_address(pod_range, 2)),
        Pod("default", "pod of another namespace", None, {"app": "x"}, address=_pod_address(pod_range, 3)),
        Pod(config.serving.namespace, "unlabelled pod", None, {}, address=_pod_address(pod_range, 4)),
    ]
    return reachable(policies, [*targets, *outsiders], targets)


# What each stack's pods accept, by source (the design in shared/network_policies.py and each
# workload's `network_allowances`). "same group": pods of one LWS group or JobSet child Job.
EXPECTED = {
    "dev": {
        "gateway proxy -> pd-disaggregation-epp:9002",
        "gateway proxy -> pd-disaggregation-epp:9003",
        "gateway proxy -> slice-controller-controller-manager:9443",
        "gateway proxy -> vllm-decode leader:8000",
        "gateway proxy -> vllm-prefill leader:8000",
        "health checker -> pd-disaggregation-epp:9002",
        "health checker -> pd-disaggregation-epp:9003",
        "health checker -> slice-controller-controller-manager:9443",
        "health checker -> vllm-decode leader:8000",
        "health checker -> vllm-prefill leader:8000",
        "outside the pod range -> slice-controller-controller-manager:9443",
        "pd-disaggregation-epp -> vllm-decode leader:8000",
        "pd-disaggregation-epp -> vllm-prefill leader:8000",
        "prometheus -> pd-disaggregation-epp:9090",
        "prometheus -> vllm-decode leader:8200",
        "prometheus -> vllm-prefill leader:8000",
        "serving-smoke-test -> vllm-prefill leader:8000",
        "vllm-decode leader (same group) -> vllm-decode worker:8431",
        "vllm-decode leader (same group) -> vllm-decode worker:9100",
        "vllm-decode leader (same group) -> vllm-decode worker:9600",
        "vllm-decode leader -> vllm-prefill leader:8000",
        "vllm-decode leader -> vllm-prefill leader:9100",
        "vllm-decode leader -> vllm-prefill leader:9600",
        "vllm-decode leader -> vllm-prefill worker:9100",
        "vllm-decode leader -> vllm-prefill worker:9600",
        "vllm-decode worker (same group) -> vllm-decode leader:8000",
        "vllm-decode worker (same group) -> vllm-decode leader:8200",
        "vllm-decode worker (same group) -> vllm-decode leader:8431",
        "vllm-decode worker (same group) -> vllm-decode leader:9100",
        "vllm-decode worker (same group) -> vllm-decode leader:9600",
        "vllm-decode worker -> vllm-prefill leader:9100",
        "vllm-decode worker -> vllm-prefill leader:9600",
        "vllm-decode worker -> vllm-prefill worker:9100",
        "vllm-decode worker -> vllm-prefill worker:9600",
        "vllm-prefill leader (same group) -> vllm-prefill worker:8431",
        "vllm-prefill leader (same group) -> vllm-prefill worker:9100",
        "vllm-prefill leader (same group) -> vllm-prefill worker:9600",
        "vllm-prefill leader -> vllm-decode leader:9100",
        "vllm-prefill leader -> vllm-decode leader:9600",
        "vllm-prefill leader -> vllm-decode worker:9100",
        "vllm-prefill leader -> vllm-decode worker:9600",
        "vllm-prefill worker (same group) -> vllm-prefill leader:8000",
        "vllm-prefill worker (same group) -> vllm-prefill leader:8431",
        "vllm-prefill worker (same group) -> vllm-prefill leader:9100",
        "vllm-prefill worker (same group) -> vllm-prefill leader:9600",
        "vllm-prefill worker -> vllm-decode leader:9100",
        "vllm-prefill worker -> vllm-decode leader:9600",
        "vllm-prefill worker -> vllm-decode worker:9100",
        "vllm-prefill worker -> vllm-decode worker:9600",
    },
    "saxml-v5e": {
        "gateway proxy -> sax-http:8888",
        "health checker -> sax-http:8888",
        "outside the pod range -> sax-http:8888",
        "sax-admin-server -> sax-model-server-set/sax-model-server:10001",
        "sax-http -> sax-admin-server:10000",
        "sax-http -> sax-model-server-set/sax-model-server:10001",
        "sax-model-server-set/sax-model-server (same group) -> sax-model-server-set/sax-model-server:10001",
        "sax-model-server-set/sax-model-server (same group) -> sax-model-server-set/sax-model-server:8471",
        "sax-model-server-set/sax-model-server -> sax-admin-server:10000",
        "sax-publish -> sax-admin-server:10000",
        "sax-publish -> sax-http:8888",
    },
    "jetstream-v5e": {
        "gateway proxy -> jetstream leader:8000",
        "gateway proxy -> jetstream leader:9000",
        "health checker -> jetstream leader:8000",
        "health checker -> jetstream leader:9000",
        "jetstream leader (same group) -> jetstream worker:38679",
        "jetstream worker (same group) -> jetstream leader:38677",
        "jetstream worker (same group) -> jetstream leader:38681",
        "jetstream worker (same group) -> jetstream leader:8000",
        "jetstream worker (same group) -> jetstream leader:9000",
        "jetstream worker (same group) -> jetstream leader:9100",
        "jetstream worker (same group) -> jetstream worker:38679",
        "outside the pod range -> jetstream leader:8000",
        "outside the pod range -> jetstream leader:9000",
        "prometheus -> jetstream leader:9100",
    },
}


def _config(stack: str) -> StackConfig:
    raw, secrets = engine.read_stack_config(engine.stack_file(stack))
    return load(raw, stack=stack, project=raw.get("gcp:project"), secret_keys=secrets)


@pytest.mark.parametrize("stack", sorted(EXPECTED))
def test_each_port_is_reachable_from_exactly_the_sources_the_design_names(stack: str) -> None:
    found = matrix(engine.run_stack(stack), _config(stack))
    assert sorted(found - EXPECTED[stack]) == [], "reachable but not in the design"
    assert sorted(EXPECTED[stack] - found) == [], "in the design but not reachable"


@pytest.mark.parametrize("stack", sorted(EXPECTED))
def test_strangers_reach_nothing_and_groups_only_themselves(stack: str) -> None:
    found = matrix(engine.run_stack(stack), _config(stack))
    assert not [line for line in found if line.startswith(("pod of another namespace", "unlabelled pod"))]
    assert not [line for line in found if "(other group)" in line]


def test_checks_and_more_replicas_keep_groups_apart(run_dev: DevRunner) -> None:
    overrides = {
        "checks": {"subslicing": {"enabled": True, "replicas": 3}, "superslicing": {"enabled": True}},
    }
    plan = run_dev(overrides)
    found = matrix(plan, config_with(overrides))
    assert not [line for line in found if "(other group)" in line]
    # The hosts of one checked slice talk to each other, on the ports the check opens or any.
    check_lines = [line for line in found if "subslicing-check" in line or "superslicing-check" in line]
    assert all("(same group)" in line for line in check_lines)
    names = {p["metadata"]["name"] for p in _bodies(plan) if p["kind"] == "NetworkPolicy"}
    assert {f"subslicing-check-group-{i}" for i in range(3)} <= names
    assert "superslicing-check-group-0" in names


@pytest.mark.parametrize("stack", sorted(EXPECTED))
def test_every_namespace_the_program_creates_denies_ingress_by_default(stack: str) -> None:
    plan = engine.run_stack(stack)
    namespaces = {ns.get("metadata.name") for ns in plan.of_type(NAMESPACE)}
    denies = {
        body["metadata"]["namespace"]
        for body in _bodies(plan)
        if body["kind"] == "NetworkPolicy" and body["spec"] == {"podSelector": {}, "policyTypes": ["Ingress"]}
    }
    assert namespaces and namespaces == denies


@pytest.mark.parametrize("stack", sorted(EXPECTED))
def test_pods_start_only_after_their_namespace_denies_ingress(stack: str) -> None:
    """A pod created before its namespace's default deny would be open meanwhile: every workload
    waits for it (so a destroy also removes the policies after the pods)."""
    plan = engine.run_stack(stack)
    objects = manifests.objects(plan, masked=False)
    denies = {
        body["metadata"]["namespace"]: resource
        for resource, body in objects
        if body["kind"] == "NetworkPolicy" and body["metadata"]["name"] == "default-deny-ingress"
    }
    workloads = [(resource, body) for resource, body in objects if list(pods_of(body))]
    assert workloads
    for resource, body in workloads:
        assert plan.depends_on(resource, denies[body["metadata"]["namespace"]]), resource.urn


def test_the_model_follows_the_networkpolicy_rules() -> None:
    """The evaluator itself, on the API reference's cases."""
    web = Pod("a", "web", None, {"app": "web"}, {80: "http"}, "10.0.0.1")
    same_ns = Pod("a", "client", None, {"app": "client"}, {}, "10.0.0.2")
    other_ns = Pod("b", "client", None, {"app": "client"}, {}, "10.0.0.3")
    outside = Pod("", "outside", None, {}, {}, "192.0.2.1")
    assert allowed([], other_ns, web, 80)  # selected by no policy: open
    deny = np.default_deny("a")
    assert not allowed([deny], same_ns, web, 80)
    by_pod = np.allow("a", np.Allowance("p", {"app": "web"}, (np.pods({"app": "client"}),), (80,)))
    assert allowed([deny, by_pod], same_ns, web, 80)
    assert not allowed([deny, by_pod], other_ns, web, 80)  # a bare podSelector: own namespace only
    across = np.allow("a", np.Allowance("q", {"app": "web"}, (np.Peer(pods={"app": "client"}, namespace="b"),)))
    assert allowed([deny, across], other_ns, web, 80) and not allowed([deny, across], same_ns, web, 80)
    block = np.allow("a", np.Allowance("r", {"app": "web"}, (np.addresses(["0.0.0.0/0"], ["10.0.0.0/8"]),), (80,)))
    assert allowed([deny, block], outside, web, 80) and not allowed([deny, block], other_ns, web, 80)
    named = {
        **by_pod,
        "spec": {
            **by_pod["spec"],
            "ingress": [{"from": by_pod["spec"]["ingress"][0]["from"], "ports": [{"port": "http"}]}],
        },
    }
    assert allowed([deny, named], same_ns, web, 80)
