"""A HorizontalPodAutoscaler per autoscaled serving role, scaling its LeaderWorkerSet's groups.

The HPA targets the LWS's scale subresource: `spec.replicas` is the number of groups, and the
pods the HPA averages its metric over are the scale's selector, the LWS's `status.hpaPodSelector`,
which selects the groups' leaders (sigs.k8s.io/lws api/leaderworkerset/v1 leaderworkerset_types.go,
the `+kubebuilder:subresource:scale` marker). A leader runs the group's vLLM API server and so
serves its /metrics; Managed Service for Prometheus scrapes it (observability/pod_monitoring.py)
and the Custom Metrics Stackdriver Adapter serves the series to the HPA as a `Pods` metric
(domain/autoscaling.py names it).

Kueue stays the ceiling: each group the HPA adds is a new Workload that Kueue admits into the cubes,
preempting lower-priority work, or leaves pending (plan/scaling.py previews it). The program
writes no `spec.replicas` on the LWS, which the HPA owns: it starts at one group (the CRD's
default) and the HPA raises it to `min` at its first sync (workloads/vllm_pd.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from contracts import quantities
from contracts.labels import COMMON_LABELS
from domain import autoscaling

HPA_API = "autoscaling/v2"


@dataclass(frozen=True)
class AutoscalerPlan:
    """One role's autoscaler, as settings/vllm.py AutoscalingConfig gives it."""

    min: int
    max: int
    metric: str  # vLLM's name (domain/autoscaling.py METRICS)
    target: float  # per group
    scale_up_stabilization_seconds: int
    scale_down_stabilization_seconds: int
    scale_up_tolerance: float | None = None  # None: kube-controller-manager's (0.1)
    scale_down_tolerance: float | None = None


def hpa_body(
    namespace: str, lws_api: str, lws_name: str, labels: dict[str, str], plan: AutoscalerPlan
) -> dict[str, Any]:
    """The HorizontalPodAutoscaler of one LeaderWorkerSet.

    Only the stabilization windows are written of `behavior`: the scale-up and scale-down policies
    stay the API server's defaults (kubernetes pkg/apis/autoscaling/v2/defaults.go: up to 4 pods or
    100% more per 15 s, down to 100% fewer per 15 s), and the windows decide: the scale-down window
    is at least a new group's way to its first answer (settings/rules_autoscaling.py)."""
    metric = autoscaling.METRICS[plan.metric]
    return {
        "apiVersion": HPA_API,
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": lws_name, "namespace": namespace, "labels": {**COMMON_LABELS, **labels}},
        "spec": {
            "scaleTargetRef": {"apiVersion": lws_api, "kind": "LeaderWorkerSet", "name": lws_name},
            "minReplicas": plan.min,
            "maxReplicas": plan.max,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": metric.adapter_name},
                        "target": {"type": "AverageValue", "averageValue": quantities.decimal(plan.target)},
                    },
                }
            ],
            "behavior": {
                "scaleUp": _rules(plan.scale_up_stabilization_seconds, plan.scale_up_tolerance),
                "scaleDown": _rules(plan.scale_down_stabilization_seconds, plan.scale_down_tolerance),
            },
        },
    }


def _rules(window: int, tolerance: float | None) -> dict[str, Any]:
    """One direction's HPAScalingRules: its window, and its tolerance when the stack sets one
    (`tolerance`, a quantity: kubernetes v1.36.3 pkg/apis/autoscaling/types.go HPAScalingRules)."""
    rules: dict[str, Any] = {"stabilizationWindowSeconds": window}
    if tolerance is not None:
        rules["tolerance"] = quantities.decimal(tolerance)
    return rules
