"""Every namespace the program creates enforces the strictest Pod Security level its pods meet."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import pytest

from contracts import pod_security as ps
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


def test_with_both_slicing_checks_and_an_autoscaled_role_too(run_dev: DevRunner) -> None:
    check(run_dev(CHECKS))


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


# The pods that call the Kubernetes API: the endpoint picker (pods, its InferencePool), the
# slice controller and the metrics adapter. Every other pod runs without a ServiceAccount token.
API_CLIENTS = {"pd-disaggregation-epp", "slice-controller-controller-manager", "custom-metrics-stackdriver-adapter"}
# Both slicing checks, and an autoscaled role, which brings the metrics adapter.
CHECKS = {
    "checks": {"subslicing": {"enabled": True, "replicas": 4}, "superslicing": {"enabled": True}},
    "serving": {"decode": {"autoscaling": {"min": 2, "max": 4, "metric": "vllm:num_requests_waiting", "target": 8}}},
}


def workload_pods(plan: engine.PlanResult) -> list[tuple[str, Mapping[str, Any]]]:
    return [
        ((body.get("metadata") or {}).get("name", ""), spec)
        for _, body in manifests.objects(plan, masked=False)
        for spec in ps.pod_specs(body)
    ]


def every_plan(run_dev: DevRunner) -> list[engine.PlanResult]:
    return [*(engine.run_stack(stack) for stack in STACKS), run_dev(CHECKS)]


def test_every_container_is_hardened(run_dev: DevRunner) -> None:
    """No privilege escalation, the runtime's default seccomp profile, and no capabilities beyond
    what its kind allows: none for CPU containers, the default set minus NET_RAW for TPU ones."""
    for plan in every_plan(run_dev):
        for name, spec in workload_pods(plan):
            pod_seccomp = ((spec.get("securityContext") or {}).get("seccompProfile") or {}).get("type")
            for container in [*(spec.get("initContainers") or []), *spec["containers"]]:
                context = container.get("securityContext") or {}
                where = f"{name}/{container['name']}"
                assert context.get("allowPrivilegeEscalation") is False, where
                assert not context.get("privileged"), where
                assert (context.get("seccompProfile") or {}).get("type", pod_seccomp) == "RuntimeDefault", where
                capabilities = context.get("capabilities") or {}
                assert not capabilities.get("add"), where
                tpu = ps.TPU_RESOURCE in ((container.get("resources") or {}).get("limits") or {})
                assert set(capabilities.get("drop") or []) >= ({"NET_RAW"} if tpu else {"ALL"}), where


def _projects_a_token(spec: Mapping[str, Any]) -> bool:
    return any(
        "serviceAccountToken" in source
        for volume in spec.get("volumes") or []
        for source in (volume.get("projected") or {}).get("sources") or []
    )


def _watches_slices(spec: Mapping[str, Any]) -> bool:
    """The smoke test of serving on dynamic slices reads its Workloads (pods/slice_watch.py)."""
    return any(env["name"] == "SMOKE_SLICE_CHECK" for c in spec["containers"] for env in c.get("env") or [])


def test_a_token_is_mounted_only_where_the_pod_calls_the_api(run_dev: DevRunner) -> None:
    seen, watching = set(), 0
    for plan in every_plan(run_dev):
        for name, spec in workload_pods(plan):
            seen.add(name)
            assert spec.get("automountServiceAccountToken") is (name in API_CLIENTS), name
            # The smoke test's slice watch projects its own token instead, into its container only.
            assert _projects_a_token(spec) is _watches_slices(spec), name
            watching += _watches_slices(spec)
    assert seen >= API_CLIENTS and watching > 0


def test_no_pod_runs_as_its_namespace_default_service_account(run_dev: DevRunner) -> None:
    for plan in every_plan(run_dev):
        accounts = {
            (body["metadata"].get("namespace"), body["metadata"]["name"])
            for _, body in manifests.objects(plan, masked=False)
            if body["kind"] == "ServiceAccount"
        }
        for _, body in manifests.objects(plan, masked=False):
            for spec in ps.pod_specs(body):
                account = spec.get("serviceAccountName")
                assert account not in (None, "default"), body["metadata"]["name"]
                assert (body["metadata"].get("namespace"), account) in accounts, (body["metadata"]["name"], account)
