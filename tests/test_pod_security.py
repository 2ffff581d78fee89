"""Every namespace the program creates enforces the strictest Pod Security level its pods meet."""

from __future__ import annotations

from collections import defaultdict

import pytest

from k8s import pod_security as ps
from plan import engine, manifests
from tests.conftest import DevRunner

NAMESPACE = "kubernetes:core/v1:Namespace"
STACKS = ("dev", "saxml-v5e", "jetstream-v5e")


def levels_by_namespace(plan: engine.PlanResult) -> dict[str, list[str]]:
    found: dict[str, list[str]] = defaultdict(list)
    for _, body in manifests.objects(plan, masked=False):
        for spec in ps.pod_specs(body):
            found[(body.get("metadata") or {}).get("namespace", "")].append(ps.level(spec))
    return found


def check(plan: engine.PlanResult) -> None:
    levels = levels_by_namespace(plan)
    namespaces = plan.of_type(NAMESPACE)
    assert namespaces
    for namespace in namespaces:
        name = namespace.get("metadata.name")
        labels = namespace.get("metadata.labels")
        assert labels[ps.WARN] == labels[ps.AUDIT] == "restricted", name
        # Every pod meets the enforced level, and the level is as strict as they all allow.
        assert labels[ps.ENFORCE] == ps.strictest(levels.get(name, [])), (name, levels.get(name))
        assert labels[ps.ENFORCE] != "privileged", name


@pytest.mark.parametrize("stack", STACKS)
def test_namespaces_enforce_the_strictest_level_their_pods_meet(stack: str) -> None:
    check(engine.run_stack(stack))


def test_with_both_slicing_checks_too(run_dev: DevRunner) -> None:
    check(run_dev({"checks": {"subslicing": {"enabled": True, "replicas": 4}, "superslicing": {"enabled": True}}}))


def test_every_generated_pod_meets_baseline() -> None:
    for stack in STACKS:
        for namespace, levels in levels_by_namespace(engine.run_stack(stack)).items():
            assert "privileged" not in levels, (stack, namespace)


def test_the_checks_catch_what_baseline_forbids() -> None:
    pod = {"containers": [{"name": "c", "securityContext": {"privileged": True}}], "hostNetwork": True}
    assert ps.level(pod) == "privileged"
    assert ps.baseline_problems(pod) == ["spec.hostNetwork", "c: privileged"]
    restricted = {
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {"name": "c", "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}
        ],
    }
    assert ps.level(restricted) == "restricted"
    assert ps.level({**restricted, "volumes": [{"name": "h", "hostPath": {"path": "/"}}]}) == "privileged"
