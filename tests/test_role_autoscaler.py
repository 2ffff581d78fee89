"""The autoscaler of a serving role, as the program registers it (workloads/role_autoscaler.py)."""

from __future__ import annotations

from typing import Any

from plan.engine import PlanResult
from tests.conftest import DevRunner, refusal

LWS = "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet"
HPA = "kubernetes:autoscaling/v2:HorizontalPodAutoscaler"
POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
APISERVICE = "kubernetes:apiregistration.k8s.io/v1:APIService"
IAM_MEMBER = "gcp:projects/iAMMember:IAMMember"
DECODE = {
    "min": 2,
    "max": 9,
    "metric": "vllm:kv_cache_usage_perc",
    "target": 0.8,
    "scaleUpStabilizationSeconds": 60,
}


def _scaled(run_dev: DevRunner, **extra: Any) -> PlanResult:
    return run_dev({"serving": {"decode": {"autoscaling": {**DECODE, **extra}}}})


def test_a_fixed_role_has_no_autoscaler_and_keeps_its_replicas(dev_plan: PlanResult) -> None:
    assert dev_plan.of_type(HPA) == []
    for name in ("prefill-lws", "decode-lws"):
        lws = dev_plan.one(LWS, name)
        assert lws.get("spec.replicas") == 4 and lws.ignore_changes == []


def test_an_autoscaled_role_gets_an_hpa_on_its_leaderworkerset(run_dev: DevRunner) -> None:
    plan = _scaled(run_dev)
    hpa = plan.one(HPA, "decode-autoscaler")
    assert hpa.get("metadata.name") == "vllm-decode"
    assert hpa.get("spec.scaleTargetRef") == {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "name": "vllm-decode",
    }
    assert (hpa.get("spec.minReplicas"), hpa.get("spec.maxReplicas")) == (2, 9)
    assert hpa.get("spec.metrics") == [
        {
            "type": "Pods",
            "pods": {
                "metric": {"name": "prometheus.googleapis.com|vllm:kv_cache_usage_perc|gauge"},
                "target": {"type": "AverageValue", "averageValue": "800m"},
            },
        }
    ]
    assert hpa.get("spec.behavior") == {
        "scaleUp": {"stabilizationWindowSeconds": 60},
        "scaleDown": {"stabilizationWindowSeconds": 3600},
    }
    lws = plan.one(LWS, "decode-lws")
    assert plan.depends_on(hpa, lws)
    # The HPA owns the number of groups: the program never writes it, so no `up` takes it back.
    assert "replicas" not in lws.get("spec") and lws.ignore_changes == []
    prefill = plan.one(LWS, "prefill-lws")
    assert prefill.get("spec.replicas") == 4 and prefill.ignore_changes == []
    assert [r.name for r in plan.of_type(HPA)] == ["decode-autoscaler"]


def test_every_group_the_autoscaler_may_add_has_its_network_allowance(run_dev: DevRunner, dev_plan: PlanResult) -> None:
    """Each LWS group's pods reach each other by a policy of their own (contracts/network_policies.py
    `within_groups`): groups up to `max` need theirs before the HPA creates them."""

    def groups(plan: PlanResult) -> set[str]:
        return {
            str(p.get("metadata.name"))
            for p in plan.of_type(POLICY)
            if str(p.get("metadata.name")).startswith("vllm-decode-group")
        }

    fixed, scaled = groups(dev_plan), groups(_scaled(run_dev))
    assert len(fixed) == 4 and len(scaled) == 9 and fixed < scaled


def test_changing_the_bounds_changes_only_the_autoscaler(run_dev: DevRunner) -> None:
    """A new min or max is an in-place update of the HPA: the LWS and the smoke test stay as they are."""
    before, after = _scaled(run_dev), _scaled(run_dev, min=3, max=6)
    for type_, name in ((LWS, "decode-lws"), (LWS, "prefill-lws"), ("kubernetes:batch/v1:Job", None)):
        old, new = before.one(type_, name), after.one(type_, name)
        assert old.inputs == new.inputs, name
    assert after.one(HPA).get("spec.minReplicas") == 3 and after.one(HPA).get("spec.maxReplicas") == 6


def test_the_metrics_adapter_comes_with_the_first_autoscaled_role(run_dev: DevRunner, dev_plan: PlanResult) -> None:
    """The HPA's `Pods` metric is served by the Custom Metrics Stackdriver Adapter, reading Cloud
    Monitoring as its own Kubernetes service account, with nothing wider than monitoring.viewer."""

    def viewers(plan: PlanResult) -> list[Any]:
        return [m for m in plan.of_type(IAM_MEMBER) if m.get("role") == "roles/monitoring.viewer"]

    assert dev_plan.of_type(APISERVICE) == [] and viewers(dev_plan) == []
    plan = _scaled(run_dev)
    services = {s.get("metadata.name"): s for s in plan.of_type(APISERVICE)}
    assert sorted(services) == ["v1beta1.custom.metrics.k8s.io", "v1beta2.custom.metrics.k8s.io"]
    adapter = plan.one("kubernetes:apps/v1:Deployment", "adapter")
    for service in services.values():
        assert service.get("spec.service") == {
            "name": "custom-metrics-stackdriver-adapter",
            "namespace": "custom-metrics",
            "port": 443,
        }
        # Registered only once the server behind it is ready.
        assert plan.depends_on(service, adapter)
    (member,) = viewers(plan)
    assert str(member.get("member")).endswith("/subject/ns/custom-metrics/sa/custom-metrics-stackdriver-adapter")
    (container,) = adapter.get("spec.template.spec.containers")
    assert container["image"] == "gcr.io/gke-release/custom-metrics-stackdriver-adapter:v0.16.9-gke.0"
    assert "--enable-external-metrics-api=false" in container["command"]
    # The APIServices reach port 443 of the Service (the plane proves that much); behind it, the
    # target port, the container's port, the port it serves on and the NetworkPolicy's must agree.
    serving = plan.one("kubernetes:core/v1:Service", "service")
    (port,) = serving.get("spec.ports")
    assert port["port"] == 443
    target = int(port["targetPort"])  # numbers come back from the engine as floats
    assert container["ports"][0]["containerPort"] == target
    assert f"--secure-port={target}" in container["command"]
    assert container["readinessProbe"]["httpGet"]["port"] == target
    policies = [p for p in plan.of_type(POLICY) if p.get("metadata.namespace") == "custom-metrics"]
    opened = {
        port["port"] for p in policies for rule in p.get("spec.ingress") or [] for port in rule.get("ports") or []
    }
    assert opened == {target}


def test_a_shared_cluster_gets_no_adapter(run_dev: DevRunner) -> None:
    """With controllers.install false the platform team serves custom.metrics.k8s.io (docs/deploy.md)."""
    plan = run_dev({"controllers": {"install": False}, "serving": {"decode": {"autoscaling": DECODE}}})
    assert plan.of_type(APISERVICE) == [] and len(plan.of_type(HPA)) == 1


def test_the_hpas_own_tolerances_are_written_and_widen_the_targets_it_allows(run_dev: DevRunner) -> None:
    """autoscaling.scaleUpTolerance / scaleDownTolerance become the HPA's behavior tolerances
    (HPAConfigurableTolerance, beta and on from Kubernetes 1.35); a KV-cache target of 0.95, which
    the controller's 0.1 never passes (1 / 1.1 = 0.909), is allowed with a tolerance of 0.05."""
    scaled = {"min": 2, "max": 4, "metric": "vllm:kv_cache_usage_perc", "target": 0.95}
    plan = run_dev(
        {"serving": {"decode": {"autoscaling": {**scaled, "scaleUpTolerance": 0.05, "scaleDownTolerance": 0.2}}}}
    )
    assert plan.one(HPA, "decode-autoscaler").get("spec.behavior") == {
        "scaleUp": {"stabilizationWindowSeconds": 0, "tolerance": "50m"},
        "scaleDown": {"stabilizationWindowSeconds": 3600, "tolerance": "200m"},
    }
    assert "at most 0.909" in refusal({"serving": {"decode": {"autoscaling": scaled}}})
