"""Autoscaled serving roles: bounds, the metric and target, and how far the reservation lets them grow.

A role scales between `min` and `max` groups (settings/vllm.py AutoscalingConfig). The rules refuse
what an HPA would accept and then never act on sensibly:

- a `max` the cubes can never hold beside the other role at its `min` (both serve at high priority,
  so neither preempts the other: the groups past it would wait forever);
- a metric vLLM does not export, or that does not measure the role's work;
- a target that is not a value of its metric, or one the engine can never reach;
- a scale-down window shorter than a new group's way to its first answer: a burst that ends
  sooner would remove the group the burst added, after paying for its slice and weight load and
  before it served (LeaderWorkerSet removes the highest group indexes first, the newest).

Plain Python over pydantic models; settings/vllm.py and settings/model.py call these rules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from domain import autoscaling, topology
from settings.refused import RefusedClass

if TYPE_CHECKING:
    from settings.model import StackConfig
    from settings.vllm import AutoscalingConfig

# Names a user may know from other guides, and what vLLM v0.26.0 exports instead.
RENAMED = {
    "vllm:gpu_cache_usage_perc": "vllm:kv_cache_usage_perc",  # domain/metric_catalog.py: hidden since 0.10
    "vllm:prompt_tokens": "vllm:prompt_tokens_total",
    "vllm:generation_tokens": "vllm:generation_tokens_total",
}


def known_metric(value: str) -> str:
    """autoscaling.metric: one of the vLLM metrics a role scales on, by the name vLLM gives it."""
    if value in autoscaling.METRICS:
        return value
    allowed = ", ".join(autoscaling.METRICS)
    inner = value.split("|")[1] if value.count("|") == 2 else None
    if inner is not None and inner in autoscaling.METRICS:
        return _refuse(f"{value!r} is the adapter's name, which the program writes itself", inner)
    if value in RENAMED:
        return _refuse(f"{value!r} is not exported by vLLM v0.26.0", RENAMED[value])
    raise ValueError(f"{value!r} is not a vLLM metric a serving role scales on; allowed: {allowed}")


def _refuse(said: str, instead: str) -> str:
    raise ValueError(f"{said}; allowed: {instead!r} (or another of {', '.join(autoscaling.METRICS)})")


def thousandths(value: float) -> float:
    """autoscaling.scaleUpTolerance / scaleDownTolerance: written as a Kubernetes quantity in
    thousandths (contracts/quantities.py), as the target is."""
    if abs(round(value * 1000) - value * 1000) > 1e-6:
        raise ValueError(f"{value!r} is finer than thousandths; allowed: 0 to 0.999 in thousandths, e.g. 0.05")
    return value


def scale_down_window(value: int) -> int:
    """autoscaling.scaleDownStabilizationSeconds: at least a new group's way to its first answer."""
    needed = autoscaling.SCALE_OUT.seconds
    if value < needed:
        raise ValueError(
            f"{value} s would let the autoscaler remove a group it added before the group serves: a new "
            f"group answers after about {needed} s (slice activation {autoscaling.SCALE_OUT.activation_seconds} s, "
            f"image pull and model load {autoscaling.SCALE_OUT.load_seconds} s; domain/autoscaling.py), and "
            f"LeaderWorkerSet removes the newest groups first; allowed: {needed} to "
            f"{autoscaling.MAX_STABILIZATION_SECONDS}"
        )
    return value


def min_within_max(cfg: AutoscalingConfig) -> None:
    """AutoscalingConfig: min is at most max (the HPA's own validation refuses the rest at apply)."""
    if cfg.min > cfg.max:
        raise ValueError(f"min {cfg.min} is above max {cfg.max}; allowed: min at most max")


def replicas_or_autoscaling(data: Any) -> Any:
    """RoleConfig, before its fields: `replicas` or `autoscaling`, never both (RoleConfig then counts
    the role at the autoscaler's validated `min`)."""
    if isinstance(data, dict) and data.get("autoscaling") is not None and "replicas" in data:
        raise ValueError(
            f"replicas {data['replicas']!r} and autoscaling are both set: once the role exists the autoscaler "
            "owns its number of groups; allowed: one of them (the role starts at autoscaling.min)"
        )
    return data


def largest_max(config: StackConfig, role: str) -> int:
    """The most groups of `role` the cubes hold beside the other role at its minimum (whether n groups
    fit only gets harder as n grows, so a binary search over 0..1000)."""
    serving, generation = config.serving, config.tpu.generation
    other = "decode" if role == "prefill" else "prefill"
    shape = generation.subslice(getattr(serving, role).topology)
    rest = [generation.subslice(getattr(serving, other).topology).chips] * getattr(serving, other).replicas
    cube_chips, cubes = config.tpu.chips_per_cube, config.tpu.cubes

    def fits(count: int) -> bool:
        return topology.pack_into_cubes(rest + [shape.chips] * count, cube_chips, cubes) is not None

    low, high = 0, 1000  # fits(low) holds when the serving rules passed; find the last count that fits
    if not fits(low):
        return 0
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle) else (low, middle - 1)
    return low


def check_autoscaling(config: StackConfig) -> None:
    """vllm-pd: each autoscaled role's metric, target and max (settings/model.py runs it after the
    serving sub-slices are judged, so the shapes are valid)."""
    serving = config.serving
    for role in autoscaling.ROLES:
        cfg = getattr(serving, role).autoscaling
        if cfg is None:
            continue
        key = f"serving.{role}.autoscaling"
        if not config.observability.pod_monitoring:
            raise ValueError(
                f"{key} reads vLLM's metrics from Managed Service for Prometheus, which scrapes them only "
                "through the stack's PodMonitorings, and observability.podMonitoring is false: the autoscaler "
                "would never see a value and never scale; allowed: observability.podMonitoring true, or "
                f"serving.{role}.replicas instead of autoscaling"
            )
        metric = autoscaling.METRICS[cfg.metric]
        if role not in metric.roles:
            why = autoscaling.NOT_THE_ROLES_WORK.get((role, cfg.metric), "")
            fits = ", ".join(m.name for m in autoscaling.METRICS.values() if role in m.roles)
            raise ValueError(
                f"{key}.metric {cfg.metric} does not measure a {role} group's work ({why}); allowed: {fits}"
            )
        tolerance = autoscaling.HPA_TOLERANCE if cfg.scale_up_tolerance is None else cfg.scale_up_tolerance
        problem = autoscaling.check_target(metric, cfg.target, serving.vllm.max_num_seqs, tolerance)
        if problem:
            raise ValueError(
                f"{key}.target {cfg.target:g} is out of range: {problem}; allowed: "
                f"{autoscaling.allowed_range(metric, serving.vllm.max_num_seqs, tolerance)}"
            )
        most = largest_max(config, role)
        if cfg.max > most:
            other = "decode" if role == "prefill" else "prefill"
            raise ValueError(
                f"{key}.max {cfg.max} groups of {getattr(serving, role).topology} can never all run: beside "
                f"serving.{other} at its {getattr(serving, other).replicas} groups the stack's {config.tpu.cubes} "
                f"cubes of {config.tpu.chips_per_cube} chips hold {most}, and Kueue would leave the rest pending; "
                f"allowed: at most {most}"
            )


def _autoscaled(role: str, **fields: Any) -> dict[str, Any]:
    base = {"min": 2, "max": 4, "metric": "vllm:num_requests_waiting", "target": 8}
    return {"serving": {role: {"autoscaling": {**base, **fields}}}}


REFUSED = [
    RefusedClass(
        "A serving role with both a fixed replica count and an autoscaler",
        replicas_or_autoscaling,
        {
            "serving": {
                "decode": {
                    "replicas": 4,
                    "autoscaling": {"min": 2, "max": 4, "metric": "vllm:num_requests_waiting", "target": 8},
                }
            }
        },
        "serving.decode",
        "one of them",
    ),
    RefusedClass(
        "An autoscaler whose min is above its max",
        min_within_max,
        _autoscaled("decode", min=5, max=3),
        "serving.decode.autoscaling",
        "min at most max",
    ),
    RefusedClass(
        "An autoscaler on a metric vLLM does not export",
        known_metric,
        _autoscaled("decode", metric="vllm:gpu_cache_usage_perc", target=0.8),
        "serving.decode.autoscaling.metric",
        "vllm:kv_cache_usage_perc",
    ),
    RefusedClass(
        "An autoscaler on a metric that does not measure the role's work",
        check_autoscaling,
        _autoscaled("prefill", metric="vllm:generation_tokens_total", target=500),
        "serving.prefill.autoscaling.metric",
        "vllm:prompt_tokens_total",
    ),
    RefusedClass(
        "An autoscaler on the KV cache's use given as a percentage",
        check_autoscaling,
        _autoscaled("decode", metric="vllm:kv_cache_usage_perc", target=80),
        "serving.decode.autoscaling.target",
        "at most 0.909",
    ),
    RefusedClass(
        "An autoscaler targeting more running requests than the engine runs at once",
        check_autoscaling,
        _autoscaled("decode", metric="vllm:num_requests_running", target=600),
        "serving.decode.autoscaling.target",
        "1 to 465.454",
    ),
    RefusedClass(
        "An autoscaler with nothing scraping the metric it reads",
        check_autoscaling,
        {**_autoscaled("decode"), "observability": {"podMonitoring": False}},
        "serving.decode.autoscaling",
        "observability.podMonitoring true",
    ),
    RefusedClass(
        "An autoscaler whose max the cubes can never hold",
        check_autoscaling,
        _autoscaled("decode", max=20),
        "serving.decode.autoscaling.max",
        "at most",
    ),
    RefusedClass(
        "An autoscaler tolerance finer than its quantity is written",
        thousandths,
        _autoscaled("decode", scaleUpTolerance=0.0125),
        "serving.decode.autoscaling.scaleUpTolerance",
        "in thousandths",
    ),
    RefusedClass(
        "An autoscaler that may remove a group before it serves",
        scale_down_window,
        _autoscaled("decode", scaleDownStabilizationSeconds=300),
        "serving.decode.autoscaling.scaleDownStabilizationSeconds",
        f"{autoscaling.SCALE_OUT.seconds} to {autoscaling.MAX_STABILIZATION_SECONDS}",
    ),
]
