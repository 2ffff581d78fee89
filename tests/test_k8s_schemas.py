"""Every Kubernetes object the program registers is valid for the pinned upstream schemas."""

from __future__ import annotations

from typing import Any

import pytest

from plan import engine, manifests
from settings.model import Versions
from tests.conftest import dev_raw, merged
from tests.crd_schema import CrdRegistry, crd_root, validate_core
from tests.gke_schema import validate_gke
from tests.gmp_schema import validate_pod_monitoring

ROOT = crd_root()
if ROOT is None:
    pytest.skip(
        "upstream CRD schemas not found: run `make crds` (or set TPU_SLICING_CRDS)",
        allow_module_level=True,
    )

GKE_GROUPS = ("networking.gke.io", "monitoring.googleapis.com")
CRD_GROUPS = (
    "kueue.x-k8s.io",
    "jobset.x-k8s.io",
    "leaderworkerset.x-k8s.io",
    "gateway.networking.k8s.io",
    "inference.networking.k8s.io",
)

# Every stack shape whose objects must validate: defaults, both checks, nothing but the platform.
VARIANTS: dict[str, dict[str, Any]] = {
    "dev": {},
    "checks": {"checks": {"subslicing": {"enabled": True}, "superslicing": {"enabled": True}}},
    "platform-only": {"serving": {"backend": "none"}},
}


def pins(versions: Versions) -> dict[str, str]:
    """CRD directories for the versions the program deploys."""
    return {
        "kueue": f"v{versions.kueue.removeprefix('v')}",
        "jobset": f"v{versions.jobset.removeprefix('v')}",
        "lws": f"v{versions.lws.removeprefix('v')}",
        "gateway-api": "v1.6.1",
        "gateway-api-inference-extension": "v1.5.0",
    }


@pytest.fixture(scope="module")
def registry() -> CrdRegistry:
    assert ROOT is not None
    return CrdRegistry.load(ROOT, pins(Versions.model_validate({})))


STACKS = ("saxml-v5e", "jetstream-v5e")


def objects(variant: str) -> list[dict[str, Any]]:
    if variant in STACKS:
        result = engine.run_stack(variant)
    else:
        raw, secrets = dev_raw()
        result = engine.run(merged(VARIANTS[variant], raw), stack="dev", secret_keys=secrets)
    return [obj for _, obj in manifests.objects(result, masked=False)]


@pytest.mark.parametrize("variant", [*sorted(VARIANTS), *STACKS])
def test_custom_resources_match_their_crds(registry: CrdRegistry, variant: str) -> None:
    custom = [o for o in objects(variant) if o["apiVersion"].split("/")[0] in CRD_GROUPS]
    assert custom, "expected custom resources"
    problems = {f"{o['kind']}/{o['metadata']['name']}": registry.validate(o) for o in custom}
    assert {k: v for k, v in problems.items() if v} == {}


@pytest.mark.parametrize("variant", [*sorted(VARIANTS), *STACKS])
def test_core_objects_match_the_kubernetes_schema(variant: str) -> None:
    core = [o for o in objects(variant) if o["apiVersion"].split("/")[0] not in (*CRD_GROUPS, *GKE_GROUPS)]
    assert core, "expected core objects"
    problems = {f"{o['kind']}/{o['metadata']['name']}": validate_core(o) for o in core}
    assert {k: v for k, v in problems.items() if v} == {}


@pytest.mark.parametrize("variant", ["dev", "jetstream-v5e"])
def test_pod_monitorings_match_our_structural_schema(variant: str) -> None:
    monitors = [o for o in objects(variant) if o["kind"] == "PodMonitoring"]
    assert monitors
    assert {o["metadata"]["name"]: validate_pod_monitoring(o) for o in monitors} == {
        o["metadata"]["name"]: [] for o in monitors
    }


def test_gke_policies_match_our_structural_schemas() -> None:
    policies = [o for o in objects("dev") if o["apiVersion"].split("/")[0] == "networking.gke.io"]
    assert {o["kind"] for o in policies} == {"HealthCheckPolicy", "GCPBackendPolicy"}
    assert {o["kind"]: validate_gke(o) for o in policies} == {"HealthCheckPolicy": [], "GCPBackendPolicy": []}


def test_gke_schema_catches_mistakes() -> None:
    policy = next(o for o in objects("dev") if o["kind"] == "HealthCheckPolicy")
    policy["spec"]["default"]["config"]["httpHealthCheck"]["requestPth"] = "/x"
    policy["spec"]["default"]["timeoutSec"] = 30
    del policy["spec"]["targetRef"]["group"]
    errors = validate_gke(policy)
    assert any("requestPth" in e for e in errors)
    assert any("timeoutSec must not exceed" in e for e in errors)
    assert any("'group' is a required property" in e for e in errors)


def test_every_registered_kind_is_covered() -> None:
    kinds = {(o["apiVersion"], o["kind"]) for variant in (*VARIANTS, *STACKS) for o in objects(variant)}
    groups = {api.split("/")[0] for api, _ in kinds if "/" in api}
    checked = {*CRD_GROUPS, *GKE_GROUPS, "apps", "rbac.authorization.k8s.io", "admissionregistration.k8s.io", "batch"}
    checked |= {"networking.k8s.io", "policy"}  # NetworkPolicies, PodDisruptionBudgets: in kubernetes-validate
    unknown = groups - checked
    assert unknown == set(), f"objects with no schema check: {unknown}"


def test_validation_would_catch_a_bad_cluster_queue(registry: CrdRegistry) -> None:
    queue = next(o for o in objects("dev") if o["kind"] == "ClusterQueue")
    queue["spec"]["preemption"]["withinClusterQueue"] = "Sometimes"
    queue["spec"]["cohort"] = "x"
    errors = registry.validate(queue)
    assert any("withinClusterQueue" in e for e in errors) and any("cohort" in e for e in errors)
