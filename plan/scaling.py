"""Autoscaled serving at its ceiling: what Kueue admits, leaves pending and preempts when every
autoscaled role reaches its `max` (settings/vllm.py AutoscalingConfig).

The stack is created at each role's `min` (the admission preview of plan/render.py); an autoscaler
then adds groups to a running LeaderWorkerSet, each a new Workload that arrives after what the
stack created (domain/admission_requests.py `with_added_groups`). Kueue admits them into the cubes
or leaves them pending, preempting lower-priority work to make room. The picture here is that
replay: a reviewer reads before merging what scaling out will evict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from domain import admission, autoscaling
from settings import capacity
from settings.model import Backend, StackConfig

HIGH = "high"
WARNED = ("medium", "high")  # preempting these is worth a warning; low-priority batch is meant to yield


@dataclass(frozen=True)
class Ceiling:
    """The replay at `max`, and what it means for the stack's workloads."""

    prediction: admission.Prediction
    bounds: dict[str, tuple[int, int]]  # LWS -> (min, max) groups
    chips_at_min: int
    chips_at_max: int
    total_chips: int
    pending_high: tuple[str, ...]  # groups of a high-priority workload left pending at max
    preempted: tuple[tuple[str, str, str], ...]  # by scaling out: (workload, its priority level, the LWS that took it)
    names: dict[int, str]


def bounds(config: StackConfig) -> dict[str, tuple[int, int]]:
    """Each autoscaled role's LeaderWorkerSet and its (min, max) groups; empty when none is."""
    if config.serving.backend is not Backend.VLLM_PD:
        return {}
    found = {}
    for role in ("prefill", "decode"):
        scaling = getattr(config.serving, role).autoscaling
        if scaling is not None:
            found[f"vllm-{role}"] = (scaling.min, scaling.max)
    return found


def ceiling(config: StackConfig) -> Ceiling | None:
    """The admission replay with every autoscaled role at its max, or None when no role autoscales."""
    scaled = bounds(config)
    if not scaled:
        return None
    priorities = dict(config.kueue.priorities.items())
    names = {value: level for level, value in priorities.items()}
    at_min = admission.requests_from_workloads(capacity.workloads(config), priorities)
    requests = admission.with_added_groups(at_min, {lws: hi - lo for lws, (lo, hi) in scaled.items() if hi > lo})
    prediction = admission.predict(requests, config.tpu.cubes, config.tpu.generation)
    before = admission.predict(at_min, config.tpu.cubes, config.tpu.generation)
    owner = {r.name: r.lws or r.name for r in prediction.requests}
    level = {r.name: names.get(r.priority, str(r.priority)) for r in prediction.requests}
    # What scaling out evicts: the preemptions the added groups' arrivals cause, not those the stack's
    # own creation at min already caused (an event's `step` is the arrival that caused it).
    created = len({(r.lws or r.name, r.order) for r in at_min})
    preempted = {
        (owner[e.workload], level[e.workload], owner[e.by])
        for e in prediction.events
        if e.action == "preempted" and e.step > created
    }
    pending_high = tuple(r for r in prediction.pending if level[r] == HIGH)
    return Ceiling(
        prediction=prediction,
        bounds=scaled,
        chips_at_min=before.chips_in_use,
        chips_at_max=prediction.chips_in_use,
        total_chips=config.tpu.total_chips,
        pending_high=pending_high,
        preempted=tuple(sorted(preempted)),
        names=names,
    )


def scale_out_lines(config: StackConfig) -> list[str]:
    """How long a group the autoscaler adds takes to serve, and what shortens it (domain/autoscaling.py),
    so a reviewer can set the scale-up policy against the model's load time."""
    out = autoscaling.SCALE_OUT
    streaming = config.serving.vllm.load_format == "runai_streamer"
    bucket = config.serving.model.weights_bucket
    return [
        f"  a group the autoscaler adds serves after ~{out.seconds // 60} min: slice activation "
        f"~{out.activation_seconds // 60} min, then image pull, weight load and compiles ~{out.load_seconds // 60} min",
        "  shorter with: the XLA compilation cache (gs://"
        f"{bucket}/xla_cache/, written by the first groups, read by later ones), weight streaming "
        f"(serving.vllm.loadFormat runai_streamer{', set' if streaming else ', not set'})",
    ]


def warnings(top: Ceiling) -> list[str]:
    """What a reviewer must hear before merging: serving that cannot reach its max, or important work
    that reaching it evicts."""
    found = []
    if top.pending_high:
        found.append(
            f"at autoscaling max, {len(top.pending_high)} high-priority serving group(s) stay pending "
            f"({', '.join(top.pending_high)}): the cubes are full of work Kueue may not preempt"
        )
    for workload, level, by in top.preempted:
        if level in WARNED:
            found.append(f"at autoscaling max, `{by}` preempts {level}-priority `{workload}`")
    return found


def lines(config: StackConfig) -> list[str]:
    """The plan's section: each role's bounds, chips at min and at max, and the replay at max."""
    top = ceiling(config)
    if top is None:
        return ["  no role autoscales (serving.prefill / serving.decode.autoscaling)"]
    shown = [
        f"  {lws}: {lo} to {hi} groups (HorizontalPodAutoscaler; Kueue admits within the cubes)"
        for lws, (lo, hi) in top.bounds.items()
    ]
    shown.append(
        f"  chips in use at min {top.chips_at_min} of {top.total_chips}, at max {top.chips_at_max} of {top.total_chips}"
    )
    shown += scale_out_lines(config)
    shown += [f"  warning: {w}" for w in warnings(top)]
    shown.append("  at max, in arrival order (the added groups arrive after everything the stack created):")
    shown += [f"    {line}" for line in admission.narrative(top.prediction, top.names)]
    shown += [f"    {line}" for line in admission.render_map(top.prediction, priority_names=top.names)]
    return shown


def facts(config: StackConfig) -> dict[str, Any] | None:
    """The plan document's `impact.atMax` (JSON-safe), or None when no role autoscales."""
    top = ceiling(config)
    if top is None:
        return None
    return {
        "bounds": {lws: {"min": lo, "max": hi} for lws, (lo, hi) in top.bounds.items()},
        "chips": {"atMin": top.chips_at_min, "atMax": top.chips_at_max, "total": top.total_chips},
        "scaleOutSeconds": autoscaling.SCALE_OUT.seconds,
        "pendingHigh": list(top.pending_high),
        "preempted": [{"workload": w, "priority": p, "by": b} for w, p, b in top.preempted],
        "warnings": warnings(top),
        "admission": admission.narrative(top.prediction, top.names),
        "admissionMap": admission.render_map(top.prediction, priority_names=top.names),
    }
