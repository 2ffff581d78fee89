"""What a serving role may scale on, and how long a group it adds takes to serve (no Pulumi).

A HorizontalPodAutoscaler per role (prefill, decode) scales the role's LeaderWorkerSet between
`min` and `max` groups on one vLLM metric, averaged over the groups' leaders (the LWS's
`hpaPodSelector` selects leaders only; each group's API server, and so its /metrics, runs on the
leader). Kueue stays the ceiling: a group the HPA adds is one more Workload, admitted into the
cubes or left pending, and it may preempt lower-priority work (domain/admission.py).

The metrics are vLLM's own (vllm v0.26.0 vllm/v1/metrics/loggers.py; domain/metric_catalog.py
lists them for the dashboard) as Managed Service for Prometheus stores them, read through the
metrics API the Custom Metrics Stackdriver Adapter serves. A gauge is read as it is; a counter as
its rate per second (the adapter aligns a cumulative metric with ALIGN_RATE).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Role = Literal["prefill", "decode"]
ROLES: tuple[Role, ...] = ("prefill", "decode")


@dataclass(frozen=True)
class ScalingMetric:
    """One vLLM metric a role may scale on, and the targets that can ever be met."""

    name: str  # as vLLM's /metrics names it
    instrument: Literal["gauge", "counter"]
    unit: str  # of the target: per group
    low: float  # the target must be above this (or equal, when `low_inclusive`)
    high: float | None  # ...and at most this; None: the engine's own cap decides (see `check_target`)
    roles: frozenset[str]
    meaning: str
    low_inclusive: bool = True

    @property
    def adapter_name(self) -> str:
        """The metric's name in an HPA `Pods` metric, as the Custom Metrics Stackdriver Adapter reads
        Managed Prometheus: `prometheus.googleapis.com|<name>|<kind>` (its Cloud Monitoring type with
        `/` written as `|`, as GKE's autoscaling guides name vLLM's and JetStream's metrics)."""
        return f"prometheus.googleapis.com|{self.name}|{self.instrument}"


METRICS: dict[str, ScalingMetric] = {
    metric.name: metric
    for metric in (
        ScalingMetric(
            "vllm:num_requests_waiting",
            "gauge",
            "requests waiting",
            1,
            None,
            frozenset(ROLES),
            "the engine's queue: requests that arrived but are not yet in a batch",
        ),
        ScalingMetric(
            "vllm:num_requests_running",
            "gauge",
            "requests running",
            1,
            None,
            frozenset(ROLES),
            "requests in the engine's batch, at most serving.vllm.maxNumSeqs",
        ),
        ScalingMetric(
            "vllm:kv_cache_usage_perc",
            "gauge",
            "fraction of the KV cache in use",
            0,
            1,
            frozenset(ROLES),
            "KV-cache blocks in use, a fraction from 0 to 1",
            low_inclusive=False,
        ),
        ScalingMetric(
            "vllm:prompt_tokens_total",
            "counter",
            "prompt tokens per second",
            1,
            None,
            frozenset({"prefill"}),
            "prompt tokens processed per second: a prefill group's work",
        ),
        ScalingMetric(
            "vllm:generation_tokens_total",
            "counter",
            "generated tokens per second",
            1,
            None,
            frozenset({"decode"}),
            "tokens generated per second: a decode group's work",
        ),
    )
}

# Why a role does not scale on the other role's token rate: the decode leader's sidecar sends
# prefill each request with a one-token budget and decode generates the rest, so prefill's
# generation rate counts requests, not work, and decode's prompt counter counts prompts whose KV
# it received instead of computing (llm-d-router v0.9.0 pkg/sidecar/proxy, the P/D connector).
NOT_THE_ROLES_WORK = {
    ("prefill", "vllm:generation_tokens_total"): "prefill generates one token a request; decode generates the rest",
    ("decode", "vllm:prompt_tokens_total"): "decode receives the prompt's KV cache from prefill; prefill computes it",
}


# The HPA scales out only when a metric's average passes its target by more than the controller's
# tolerance (kube-controller-manager's --horizontal-pod-autoscaler-tolerance, 0.1 by default:
# kubernetes v1.36.3 cmd/kube-controller-manager/app/options/hpacontroller.go and
# pkg/controller/podautoscaler/config/v1alpha1/defaults.go; GKE's managed control plane does not
# let a user change it), or by the HPA's own `behavior.scaleUp.tolerance` where set (the
# HPAConfigurableTolerance gate, beta and on by default from Kubernetes 1.35: v1.36.3
# pkg/features/kube_features.go; dynamic slicing needs GKE 1.35.2 or later, so every cluster the
# role autoscales on has it). A metric that can never exceed `ceiling` therefore needs a
# target below ceiling / (1 + tolerance) to ever add a group.
HPA_TOLERANCE = 0.1


def ceiling(metric: ScalingMetric, max_num_seqs: int) -> float | None:
    """The most a leader's value of `metric` can be, or None when it has no bound."""
    if metric.name == "vllm:num_requests_running":
        return max_num_seqs  # a vLLM engine runs at most maxNumSeqs requests at once
    return metric.high


def highest_target(metric: ScalingMetric, max_num_seqs: int, tolerance: float = HPA_TOLERANCE) -> float | None:
    """The largest target, in thousandths, whose metric can still pass it by the scale-up tolerance."""
    top = ceiling(metric, max_num_seqs)
    if top is None:
        return None
    return int(top / (1 + tolerance) * 1000) / 1000


def check_target(
    metric: ScalingMetric, target: float, max_num_seqs: int, tolerance: float = HPA_TOLERANCE
) -> str | None:
    """Why `target` can never be met or is not a value of `metric`, or None when it is in range."""
    if abs(round(target * 1000) - target * 1000) > 1e-6:
        # The HPA's averageValue is a Kubernetes quantity, written in thousandths (contracts/quantities.py).
        return f"{target!r} has more than three decimals, finer than the autoscaler's target is written"
    if metric.name == "vllm:kv_cache_usage_perc" and target > 1:
        return f"{metric.name} is a fraction of the KV cache, from 0 to 1 (for {target:g}%, write {target / 100:g})"
    below = target < metric.low if metric.low_inclusive else target <= metric.low
    if below:
        return f"{metric.name} targets {allowed_range(metric, max_num_seqs, tolerance)} {metric.unit}"
    top, highest = ceiling(metric, max_num_seqs), highest_target(metric, max_num_seqs, tolerance)
    if top is not None and highest is not None and target > highest:
        bound = (
            f"a vLLM engine runs at most serving.vllm.maxNumSeqs {max_num_seqs} requests at once"
            if metric.name == "vllm:num_requests_running"
            else f"{metric.name} is at most {top:g}"
        )
        return (
            f"{bound}, and the HPA adds a group only when the average passes the target by more than its "
            f"scale-up tolerance ({tolerance:g}), so the role would never scale out"
        )
    return None


def allowed_range(metric: ScalingMetric, max_num_seqs: int, tolerance: float = HPA_TOLERANCE) -> str:
    """The targets `check_target` allows, as a message says them."""
    high = highest_target(metric, max_num_seqs, tolerance)
    low = f"{metric.low:g}" if metric.low_inclusive else f"above {metric.low:g}"
    if high is None:
        return f"at least {low}" if metric.low_inclusive else low
    return f"{low} to {high:g}" if metric.low_inclusive else f"{low}, at most {high:g}"


# The HorizontalPodAutoscaler's own limits (kubernetes v1.36.3 pkg/apis/autoscaling/validation/
# validation.go MaxStabilizationWindowSeconds: a stabilization window of at most an hour).
MAX_STABILIZATION_SECONDS = 3600


@dataclass(frozen=True)
class ScaleOut:
    """How long a group the HPA adds takes to answer its first request, typically (estimates for
    review, not bounds: the bounds are domain/serving_budget.py's timeouts, hours long)."""

    # The slice controller activates a sub-slice's partition before Kueue's admission check passes;
    # GKE's first slice-controller manifest gave that six minutes (`--activation-timeout=6m`,
    # ../shared/reference/dynamic-slicing.md), the expected case well inside it.
    activation_seconds: int = 360
    # From the pods created to the first answer: image pull, Ray, weight streaming and compiles of
    # the 397B FP8 model, ~30 min: the reference's 1800 s start-up wait and its llm-d guide (plan/
    # timing.py reads it for the first `up` too).
    load_seconds: int = 1800

    @property
    def seconds(self) -> int:
        return self.activation_seconds + self.load_seconds


SCALE_OUT = ScaleOut()


# The HPA's default scale-up policy (kubernetes v1.36.3 pkg/apis/autoscaling/v2/defaults.go): every
# 15 s (the controller's sync) at most 4 pods more or 100% more, whichever adds more.
HPA_SYNC_SECONDS = 15
SCALE_UP_PODS, SCALE_UP_PERCENT = 4, 100


def desired_groups(
    current: int,
    serving: int,
    value: float,
    target: float,
    *,
    pending: int = 0,
    tolerance: float = HPA_TOLERANCE,
    down_tolerance: float = HPA_TOLERANCE,
) -> int:
    """The group count the HPA asks for on a `Pods` metric (kubernetes v1.36.3 pkg/controller/
    podautoscaler/replica_calculator.go calcPlainMetricReplicas, groupPods): `serving` of the
    `current` groups' leaders report `value` each; `pending` groups wait in Kueue (their leaders are
    Pending pods: unready, ignored, and on a scale-up counted at zero) and the rest load their model
    (Running without a series in Monitoring: missing, counted at zero on a scale-up and at the target
    on a scale-down). Values are the API's thousandths, the average an integer division, as there."""
    if not 0 < serving <= current - pending:
        raise ValueError(f"{serving} serving of {current} groups with {pending} pending: the HPA has no metric")
    loading = current - pending - serving
    target_milli = round(target * 1000)
    metrics = [round(value * 1000)] * serving

    def ratio(found: list[int]) -> float:
        return (sum(found) // len(found)) / target_milli

    def within(usage: float) -> bool:
        return 1 - down_tolerance <= usage <= 1 + tolerance

    first = ratio(metrics)
    up_with_unready = pending > 0 and first > 1
    if not up_with_unready and loading == 0:
        return current if within(first) else math.ceil(first * serving)
    if loading and first != 1:
        metrics += [target_milli if first < 1 else 0] * loading
    if up_with_unready:
        metrics += [0] * pending
    again = ratio(metrics)
    if within(again) or (first < 1 < again) or (first > 1 > again):
        return current
    wanted = math.ceil(again * len(metrics))
    if (again < 1 and wanted > current) or (again > 1 and wanted < current):
        return current
    return wanted


def reaction(serving: int, value: float, target: float, most: int, *, tolerance: float = HPA_TOLERANCE) -> list[int]:
    """The role's group count at each of the HPA's syncs while a sustained `value` holds at the
    `serving` groups and the groups it adds do not serve yet (pending in Kueue or loading: about
    SCALE_OUT.seconds, far longer than the syncs), under the default scale-up policy, up to `most`."""
    sizes = [serving]
    while True:
        current = sizes[-1]
        limit = max(current + SCALE_UP_PODS, current * (100 + SCALE_UP_PERCENT) // 100)
        wanted = desired_groups(current, serving, value, target, tolerance=tolerance)
        following = max(min(wanted, limit, most), current)
        if following == current:
            return sizes
        sizes.append(following)
