"""Every namespace the program creates denies ingress, and admits exactly what serving needs.

The reachability of every port of every generated pod is computed from every workload and from
the outside sources that matter (tests/network_reachability.py) and compared, per stack, with the
flow table in docs/architecture.md ("Network flows", read by tests/network_flows.py).
tests/test_network_flows.py asks an upstream matcher the same question.
"""

from __future__ import annotations

from typing import Any

import pytest

from contracts import network_policies as np
from plan import engine, manifests
from settings.loader import load
from settings.model import StackConfig
from tests import network_flows
from tests.conftest import DevRunner, config_with, dev_raw, merged
from tests.network_reachability import Pod, address_pods, allowed, pods_of, reachable
from workloads import vllm_listeners

POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
NAMESPACE = "kubernetes:core/v1:Namespace"


def _bodies(plan: engine.PlanResult) -> list[dict[str, Any]]:
    return [body for _, body in manifests.objects(plan, masked=False)]


def with_listeners(pod: Pod) -> Pod:
    """A vLLM pod with every port its programs open upstream (workloads/vllm_listeners.py), declared
    or not: a range stands as its first port (the kernel's ephemeral range as 32768)."""
    role = pod.role.removeprefix("vllm-")
    if not pod.role.startswith("vllm-") or role not in vllm_listeners.EVERY_POD:
        return pod
    opened = {listener.port: listener.name for listener in vllm_listeners.opened_by(role)}
    return Pod(pod.namespace, pod.role, pod.group, pod.labels, {**opened, **pod.ports}, pod.address)


def stack_pods(plan: engine.PlanResult, config: StackConfig) -> tuple[list[Pod], list[Pod]]:
    """The plan's pods (with every port their programs open) at addresses in the pod range, and
    every source: those pods and the outside ones of the flow table (tests/network_flows.py)."""
    net = config.network
    modelled = [with_listeners(pod) for body in _bodies(plan) for pod in pods_of(body)]
    targets = address_pods(modelled, str(net.pod_cidr))
    outsiders = network_flows.outside_sources(str(net.pod_cidr), str(net.proxy_cidr), config.serving.namespace)
    return targets, [*targets, *outsiders]


def matrix(plan: engine.PlanResult, config: StackConfig) -> set[str]:
    policies = [b for b in _bodies(plan) if b["kind"] == "NetworkPolicy"]
    targets, sources = stack_pods(plan, config)
    return reachable(policies, sources, targets)


def design(plan: engine.PlanResult, config: StackConfig) -> set[str]:
    """What the flow table in docs/architecture.md says this stack's pods accept."""
    _, sources = stack_pods(plan, config)
    admitted, _ = network_flows.read()
    return network_flows.expected(admitted, {pod.role for pod in sources})


# Every committed stack, and dev with an autoscaled role (the custom-metrics adapter's API).
STACKS = ("dev", "dev-b", "jetstream-v5e", "saxml-v5e")
DECODE_AUTOSCALED = {
    "serving": {
        "decode": {
            "autoscaling": {
                "min": 2,
                "max": 9,
                "metric": "vllm:kv_cache_usage_perc",
                "target": 0.8,
                "scaleUpStabilizationSeconds": 60,
            }
        }
    }
}


def _config(stack: str) -> StackConfig:
    raw, secrets = engine.read_stack_config(engine.stack_file(stack))
    return load(raw, stack=stack, project=raw.get("gcp:project"), secret_keys=secrets)


def stack_plan(stack: str) -> tuple[engine.PlanResult, StackConfig]:
    """A committed stack's plan and settings, or "dev+autoscaling": dev with DECODE_AUTOSCALED."""
    if stack == "dev+autoscaling":
        raw, secrets = dev_raw()
        return engine.run(merged(DECODE_AUTOSCALED, raw), stack="dev", secret_keys=secrets), config_with(
            DECODE_AUTOSCALED
        )
    return engine.run_stack(stack), _config(stack)


@pytest.mark.parametrize("stack", [*STACKS, "dev+autoscaling"])
def test_each_port_is_reachable_from_exactly_the_sources_the_flow_table_names(stack: str) -> None:
    plan, config = stack_plan(stack)
    found, wanted = matrix(plan, config), design(plan, config)
    assert wanted, f"the flow table names no flow of {stack}"
    assert sorted(found - wanted) == [], "reachable but not in docs/architecture.md, Network flows"
    assert sorted(wanted - found) == [], "in docs/architecture.md, Network flows, but not reachable"


@pytest.mark.parametrize("stack", STACKS)
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


@pytest.mark.parametrize("stack", STACKS)
def test_every_namespace_the_program_creates_denies_ingress_by_default(stack: str) -> None:
    plan = engine.run_stack(stack)
    namespaces = {ns.get("metadata.name") for ns in plan.of_type(NAMESPACE)}
    denies = {
        body["metadata"]["namespace"]
        for body in _bodies(plan)
        if body["kind"] == "NetworkPolicy" and body["spec"] == {"podSelector": {}, "policyTypes": ["Ingress"]}
    }
    assert namespaces and namespaces == denies


@pytest.mark.parametrize("stack", STACKS)
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


# Who stands for each kind of source a listener names (workloads/vllm_listeners.py).
SOURCES = {
    vllm_listeners.POOL_CLIENTS: ("gateway proxy", "health checker", "pd-disaggregation-epp"),
    vllm_listeners.PROMETHEUS: ("prometheus",),
    vllm_listeners.DECODE_PEERS: ("vllm-decode leader", "vllm-decode worker"),
    vllm_listeners.SMOKE_TEST: ("serving-smoke-test",),
}


def _required(listener: vllm_listeners.Listener, target: str) -> set[str]:
    """The lines a listener opened on `target` ("prefill leader") must appear as."""
    lines = set()
    for kind in listener.reached_by:
        if kind == vllm_listeners.DECODE_PEERS and target not in vllm_listeners.PREFILL:
            continue  # decode dials the prefill side's listeners only
        for source in SOURCES.get(kind, ()):
            if source != f"vllm-{target}":
                lines.add(f"{source} -> vllm-{target}:{listener.port}")
        if kind == vllm_listeners.GROUP:
            role, part = target.split(" ")
            other = {"leader": "worker", "worker": "leader"}[part]
            lines.add(f"vllm-{role} {other} (same group) -> vllm-{target}:{listener.port}")
    return lines


def _all_required() -> set[str]:
    return {
        line
        for listener in vllm_listeners.LISTENERS
        for target in listener.opened_by
        for line in _required(listener, target)
    }


def test_every_listener_upstream_opens_is_reachable_by_who_connects_to_it() -> None:
    """Each flow a pinned program makes (its listener, the peers that dial it) is admitted: the
    bulk-transport and Ray ports bound to port 0 included, where a port list would drop them."""
    found = matrix(engine.run_stack("dev"), _config("dev"))
    required = _all_required()
    assert sorted(required - found) == []


def test_only_decode_pods_reach_prefill_ports_nobody_dials() -> None:
    """The price of ports the kernel picks: decode pods reach every prefill port. A group's own
    pods reach every port of the group (Ray, the TPU runtime). Nothing else reaches a vLLM port
    that no listener's peers need."""
    found = matrix(engine.run_stack("dev"), _config("dev"))
    required = _all_required()
    vllm = {line for line in found if " -> vllm-" in line}
    extra = vllm - required
    by_design = [line for line in extra if "(same group)" in line or line.startswith("vllm-decode ")]
    assert all(" -> vllm-prefill " in line for line in by_design if "(same group)" not in line), by_design
    assert sorted(extra - set(by_design)) == []
    assert not [line for line in found if line.startswith("vllm-prefill") and " -> vllm-decode" in line]


def test_every_declared_vllm_port_is_an_upstream_listener(dev_plan: engine.PlanResult) -> None:
    """A container port with no upstream source is a guess; a fixed listener the pod opens but does not
    declare is fine (policies admit by number), except those GKE reads by declaration."""
    bodies = [b for b in _bodies(dev_plan) if b["kind"] == "LeaderWorkerSet"]
    for body in bodies:
        for pod in pods_of(body):
            role = pod.role.removeprefix("vllm-")
            opened = {(listener.port, listener.name) for listener in vllm_listeners.opened_by(role)}
            ports = {port for port, _name in opened}
            assert set(pod.ports) <= ports, (pod.role, sorted(set(pod.ports) - ports))
            assert vllm_listeners.TPU_RUNTIME_METRICS_PORT in pod.ports, pod.role


def test_a_listener_the_policies_miss_fails_the_design_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check is live: a new upstream listener on prefill pods that only the gateway may reach
    is not admitted from the gateway by today's policies, and the required-flows test names it."""
    extra = vllm_listeners.Listener(
        "new-upstream-port",
        (7777, 7777),
        vllm_listeners.PREFILL,
        frozenset({vllm_listeners.POOL_CLIENTS}),
        "a future release",
    )
    monkeypatch.setattr(vllm_listeners, "LISTENERS", (*vllm_listeners.LISTENERS, extra))
    found = matrix(engine.run_stack("dev"), _config("dev"))
    missing = _required(extra, "prefill leader") - found
    assert "gateway proxy -> vllm-prefill leader:7777" in missing
