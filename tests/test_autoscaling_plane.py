"""Autoscaled decode on the local plane: the real HPA controller, Kueue and LWS against plan/scaling.py.

One plane with a TPU7x stack's simulated nodes (`CUBES` cubes), the real Kueue, JobSet and LWS and
the program's Kueue objects (tests/test_admission_oracle.py `oracle_env`). The program's own
autoscaled objects are rendered from the dev stack with decode autoscaled and the sub-slicing check
on: the decode HorizontalPodAutoscaler as it is, and the metrics adapter's Namespace, Service and
APIServices, behind which tests/standins/custom_metrics.py plays the adapter's pod. The scenario:

1. at min: the low-priority check, then prefill (`PREFILL_GROUPS`) and decode at its `min`, each
   let settle in Kueue, as the stack creates them;
2. load rises: the stand-in reports a queue far above the target for every Ready decode leader; the
   HPA controller (kube-controller-manager's, every 15 s) raises the LWS's replicas to `max`, LWS
   creates the groups, Kueue admits them, preempting the check where they do not fit;
3. load falls: the stand-in reports an empty queue and the test shortens the HPA's scale-down
   window to 0 (the program's is an hour, which the settings require; what is proven here is the
   chain, not the window), the HPA returns the LWS to `min`, LWS deletes the newest groups and
   Kueue admits the check again.

Each state is compared with the preview: `scaling.ceiling` at max, the model's admission at min.
The decode groups present from the start and every prefill group keep their leader pods throughout.

What it cannot show: Monitoring's delay between a scrape and the value the adapter returns, the
HPA's tolerance and stabilization over real load curves, the real adapter (tests/standins/
custom_metrics.py says what its stand-in cannot), and serving itself (no model runs).
"""

from __future__ import annotations

import copy
import functools
import itertools
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from domain import admission
from plan import engine, manifests, scaling
from settings import capacity
from settings.loader import load
from settings.model import StackConfig
from tests import control_plane as cp
from tests.conftest import merged
from tests.standins.custom_metrics import CustomMetrics
from tests.test_admission_oracle import (
    AGREE_TIMEOUT,
    CUBES,
    JOBSETS,
    LWSS,
    STACK,
    Env,
    Observed,
    _condition,
    _observe,
    _past_the_last_reservation_second,
    _settle,
    _snapshot,
    _workloads,
    jobset,
    leader_worker_set,
    oracle_env,
)
from tests.test_admission_oracle import _stack_raw as stack_raw

# The first plane group: with the tests without a plane grown to 18.5 minutes in a cold run, the
# late group's worker was the suite's longer one (32:40 against 28:53); this module's 114 s evens
# them (tests/suite_order.py, CONTRIBUTING.md).
pytestmark = pytest.mark.xdist_group(cp.LATE_XDIST_GROUP)

PREFILL_GROUPS = 4
DECODE_MIN, DECODE_MAX = 2, 24
DECODE = {"min": DECODE_MIN, "max": DECODE_MAX, "metric": "vllm:num_requests_waiting", "target": 8}
CHECK_SLICES = 6
HIGH_LOAD, NO_LOAD = 800.0, 0.0  # waiting requests per decode leader
HPA_SECONDS = 300  # each scaling step: a few of the HPA controller's 15 s syncs, then LWS and Kueue
AUTOSCALING = "/apis/autoscaling/v2"
APISERVICES = "/apis/apiregistration.k8s.io/v1/apiservices"


@dataclass
class Timeline:
    config: StackConfig
    at_min: dict[str, Observed] = field(default_factory=dict)
    at_max: dict[str, Observed] = field(default_factory=dict)
    back_at_min: dict[str, Observed] = field(default_factory=dict)
    # Per step ("up", "down"): (seconds, the HPA's desiredReplicas, the LWS's replicas) at each change.
    decisions: dict[str, list[tuple[float, int | None, int]]] = field(default_factory=dict)
    queries: list[tuple[str, str, str, int]] = field(default_factory=list)
    leaders: dict[str, dict[str, str]] = field(default_factory=dict)  # step -> leader pod -> uid
    seconds: dict[str, float] = field(default_factory=dict)
    hpa: dict[str, Any] = field(default_factory=dict)


def _autoscaled_raw() -> tuple[dict[str, Any], list[str]]:
    raw, secret_keys = stack_raw(STACK, CUBES)
    overrides = {
        "checks": {"subslicing": {"enabled": True, "replicas": CHECK_SLICES, "topology": "2x2x2"}},
        "serving": {"prefill": {"replicas": PREFILL_GROUPS}, "decode": {"autoscaling": DECODE}},
    }
    return merged(overrides, raw), secret_keys


def _leaders(env: Env) -> dict[str, str]:
    pods = env.plane.request(
        "GET",
        f"/api/v1/namespaces/{env.namespace}/pods",
        query={"labelSelector": "leaderworkerset.sigs.k8s.io/worker-index=0"},
    )["items"]
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}


def _names(groups: Mapping[str, int]) -> list[str]:
    return ["subslicing-check", *(f"{lws}/{g}" for lws, count in groups.items() for g in range(count))]


def _scale_to(env: Env, timeline: Timeline, step: str, replicas: int, started: float) -> None:
    """Wait until the HPA has brought vllm-decode to `replicas` groups, recording its decisions."""
    hpa_path = f"{AUTOSCALING}/namespaces/{env.namespace}/horizontalpodautoscalers/vllm-decode"
    lws_path = f"{LWSS}/namespaces/{env.namespace}/leaderworkersets/vllm-decode"

    seen = timeline.decisions.setdefault(step, [])

    def reached() -> bool:
        env.running.check_alive()
        desired = (env.plane.request("GET", hpa_path).get("status") or {}).get("desiredReplicas")
        current = env.plane.request("GET", lws_path)["spec"]["replicas"]
        now = (round(time.monotonic() - started, 1), desired, current)
        if not seen or seen[-1][1:] != now[1:]:
            seen.append(now)
        return current == replicas

    env.plane.wait_for(f"the HPA to scale vllm-decode to {replicas}", reached, HPA_SECONDS, 1.0)


@pytest.fixture(scope="module")
def timeline() -> Iterator[Timeline]:
    raw, secret_keys = _autoscaled_raw()
    config = load(raw, stack=STACK, project=raw.get("gcp:project"), secret_keys=secret_keys)
    bodies = [b for _, b in manifests.objects(engine.run(raw, stack=STACK, secret_keys=secret_keys), masked=False)]
    hpa = next(b for b in bodies if b["kind"] == "HorizontalPodAutoscaler")
    adapter_namespace = next(
        b for b in bodies if b["kind"] == "Namespace" and b["metadata"]["name"] == "custom-metrics"
    )
    service = next(b for b in bodies if b["kind"] == "Service" and b["metadata"].get("namespace") == "custom-metrics")
    api_services = [b for b in bodies if b["kind"] == "APIService"]
    found = Timeline(config, hpa=hpa)
    preview = _previewed(config)
    with oracle_env(STACK, CUBES) as env:
        plane = env.plane
        assert hpa["metadata"]["namespace"] == env.namespace
        plane.apply("/api/v1/namespaces/custom-metrics", adapter_namespace)
        plane.apply(f"/api/v1/namespaces/custom-metrics/services/{service['metadata']['name']}", service)
        metrics = CustomMetrics(plane)
        metrics.start()
        try:
            for body in api_services:
                plane.apply(f"{APISERVICES}/{body['metadata']['name']}", body)
            for body in api_services:
                name = body["metadata"]["name"]
                plane.wait_for(f"APIService {name} Available", functools.partial(_available, plane, name), 60)
            # 1. As the stack creates them: the check, prefill, decode at min.
            started = time.monotonic()
            groups: dict[str, int] = {"vllm-prefill": PREFILL_GROUPS, "vllm-decode": DECODE_MIN}
            for name in ("subslicing-check", *groups):
                _past_the_last_reservation_second(env)
                if name in groups:
                    body = leader_worker_set(env, name, "high", "2x2x2", groups[name])
                    plane.request("POST", f"{LWSS}/namespaces/{env.namespace}/leaderworkersets", body)
                else:
                    body = jobset(env, name, "low", "2x2x2", CHECK_SLICES)
                    plane.request("POST", f"{JOBSETS}/namespaces/{env.namespace}/jobsets", body)
            _placed(env, _names(groups), preview["min"])
            found.at_min = _observe(env, _names(groups))
            found.leaders["min"] = _leaders(env)
            found.seconds["at min"] = time.monotonic() - started
            # 2. Load rises.
            metric = hpa["spec"]["metrics"][0]["pods"]["metric"]["name"]
            metrics.values[(env.namespace, metric)] = HIGH_LOAD
            started = time.monotonic()
            _past_the_last_reservation_second(env)
            plane.apply(f"{AUTOSCALING}/namespaces/{env.namespace}/horizontalpodautoscalers/vllm-decode", hpa)
            _scale_to(env, found, "up", DECODE_MAX, started)
            groups["vllm-decode"] = DECODE_MAX
            _placed(env, _names(groups), preview["max"])
            found.at_max = _observe(env, _names(groups))
            found.leaders["max"] = _leaders(env)
            found.seconds["to max"] = time.monotonic() - started
            # 3. Load falls.
            metrics.values[(env.namespace, metric)] = NO_LOAD
            started = time.monotonic()
            shorter = copy.deepcopy(hpa)
            shorter["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] = 0
            plane.apply(f"{AUTOSCALING}/namespaces/{env.namespace}/horizontalpodautoscalers/vllm-decode", shorter)
            _scale_to(env, found, "down", DECODE_MIN, started)
            groups["vllm-decode"] = DECODE_MIN
            _until_the_check_is_admitted_again(env, _names(groups))
            _placed(env, _names(groups), preview["back"])
            found.back_at_min = _observe(env, _names(groups))
            found.leaders["back"] = _leaders(env)
            found.seconds["back to min"] = time.monotonic() - started
            found.queries = list(metrics.queries)
            metrics.check()
        finally:
            metrics.stop()
        yield found
        print(f"\nautoscaling timeline: {found.decisions}; {found.seconds}", file=sys.stderr)


def _until_the_check_is_admitted_again(env: Env, names: list[str], timeout: float = 120.0) -> None:
    """Wait until the scaled-in groups' Workloads are gone and Kueue has admitted the check again.

    A quiet second alone was not enough: a cold CI run read the check still pending while LWS and
    Kueue were finalizing the 22 removed groups' Workloads, which the snapshot does not name. The
    wait names the outcome the preview expects and gives up at its deadline without failing, so that
    the test's comparison shows what Kueue did instead.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        env.running.check_alive()
        workloads = _workloads(env)
        if set(workloads) == set(names) and _condition(workloads["subslicing-check"], "Admitted") == "True":
            return
        time.sleep(0.2)


def _placed(env: Env, names: list[str], expected: Mapping[str, str]) -> None:
    """Wait until Kueue shows the preview's summary `expected`, no workload between reservation and
    admission or being evicted (`_snapshot`); if it never does within AGREE_TIMEOUT, until it holds
    still, so that the test compares the disagreement. A quiet second alone is no judge: a group
    Kueue parked as inadmissible is retried only after requeueBatchPeriod, itself 1 s (kueue@v0.19.2
    pkg/cache/queue/inadmissible_workloads.go), as tests/test_admission_oracle.py `_arrived` says."""

    def placed() -> bool:
        return _snapshot(env, names) is not None and _summary(_observe(env, names)) == expected

    try:
        env.plane.wait_for(f"Kueue to show the preview's {expected}", placed, AGREE_TIMEOUT, 0.1)
    except cp.ControlPlaneError:
        _settle(env, names, quiet=1.0)


def _previewed(config: StackConfig) -> dict[str, dict[str, str]]:
    """The preview's summary of each state: the model's admission at min, `scaling.ceiling` at max
    (the check preempted), and at min again (the check admitted after that preemption)."""
    priorities = dict(config.kueue.priorities.items())
    requests = admission.requests_from_workloads(capacity.workloads(config), priorities)
    at_min = admission.predict(requests, config.tpu.cubes, config.tpu.generation)
    top = scaling.ceiling(config)
    assert top is not None
    preempted = {workload for workload, _, _ in top.preempted}
    return {"min": _model(at_min, set()), "max": _model(top.prediction, preempted), "back": _model(at_min, preempted)}


def _available(plane: cp.ControlPlane, name: str) -> bool:
    status = plane.request("GET", f"{APISERVICES}/{name}").get("status") or {}
    return any(c["type"] == "Available" and c["status"] == "True" for c in status.get("conditions") or [])


def _summary(observed: Mapping[str, Observed]) -> dict[str, str]:
    """Per workload: a JobSet's state (starred if preempted); an LWS's admitted groups of all."""
    found: dict[str, list[Observed]] = {}
    for name, one in observed.items():
        found.setdefault(name.split("/")[0], []).append(one)
    shown: dict[str, str] = {}
    for name, seen in found.items():
        if name == "subslicing-check":
            shown[name] = seen[0].state + ("*" if seen[0].preempted else "")
        else:
            shown[name] = f"{sum(s.state == 'admitted' for s in seen)}/{len(seen)}"
    return shown


def _model(prediction: admission.Prediction, preempted: set[str]) -> dict[str, str]:
    shown: dict[str, str] = {}
    for name in ("subslicing-check", "vllm-prefill", "vllm-decode"):
        running, total = prediction.groups(name)
        if name == "subslicing-check":
            shown[name] = ("admitted" if running else "pending") + ("*" if name in preempted else "")
        else:
            shown[name] = f"{running}/{total}"
    return shown


def test_at_min_kueue_admits_what_the_preview_says(timeline: Timeline) -> None:
    top = scaling.ceiling(timeline.config)
    assert top is not None
    config = timeline.config
    priorities = dict(config.kueue.priorities.items())
    requests = admission.requests_from_workloads(capacity.workloads(config), priorities)
    at_min = admission.predict(requests, config.tpu.cubes, config.tpu.generation)
    assert (
        _summary(timeline.at_min)
        == _model(at_min, set())
        == {
            "subslicing-check": "admitted",
            "vllm-prefill": "4/4",
            "vllm-decode": "2/2",
        }
    )


def test_the_hpa_scales_decode_to_max_and_kueue_preempts_what_the_preview_says(timeline: Timeline) -> None:
    top = scaling.ceiling(timeline.config)
    assert top is not None
    preempted = {workload for workload, _, _ in top.preempted}
    assert (
        _summary(timeline.at_max)
        == _model(top.prediction, preempted)
        == {
            "subslicing-check": "pending*",
            "vllm-prefill": "4/4",
            "vllm-decode": "24/24",
        }
    )
    assert top.pending_high == () and scaling.warnings(top) == []
    # The HPA decided step by step, each the LWS's next size, within its default scale-up policy
    # (kubernetes v1.36.3 pkg/apis/autoscaling/v2/defaults.go: 4 pods or 100% more per 15 s).
    # The LWS's successive sizes: a decision is recorded when the HPA's desired count or the LWS's
    # size changes, so a size repeats when a poll reads the new desired count before the LWS took it
    # (seen in a cold CI run: 2, 6, 12, 12, 24).
    sizes = [size for size, _ in itertools.groupby(current for _, _, current in timeline.decisions["up"])]
    assert sizes[0] == DECODE_MIN and sizes[-1] == DECODE_MAX and sizes == sorted(set(sizes))
    assert all(after <= max(before + 4, 2 * before) for before, after in itertools.pairwise(sizes))


def test_load_falls_and_the_hpa_returns_decode_to_min_and_the_check_runs_again(timeline: Timeline) -> None:
    sizes = [current for _, _, current in timeline.decisions["down"]]
    assert sizes[0] == DECODE_MAX and sizes[-1] == DECODE_MIN  # the default scale-down policy: 100% per 15 s
    assert _summary(timeline.back_at_min) == {
        "subslicing-check": "admitted*",
        "vllm-prefill": "4/4",
        "vllm-decode": "2/2",
    }


def test_the_hpa_read_the_programs_metric_through_its_apiservice(timeline: Timeline) -> None:
    metric = timeline.hpa["spec"]["metrics"][0]["pods"]["metric"]["name"]
    assert metric == "prometheus.googleapis.com|vllm:num_requests_waiting|gauge"
    asked = {(m, s) for _, m, s, _ in timeline.queries}
    # The LWS's hpaPodSelector: the decode leaders only (lws v0.8.0 leaderworkerset_controller.go).
    assert (metric, "leaderworkerset.sigs.k8s.io/name=vllm-decode,leaderworkerset.sigs.k8s.io/worker-index=0") in asked
    assert max(answered for *_, answered in timeline.queries) >= DECODE_MIN


def test_no_group_that_stays_restarts(timeline: Timeline) -> None:
    """The groups present at min keep their leader pods through the scale-out and the scale-in."""
    kept = {
        name: uid for name, uid in timeline.leaders["min"].items() if name.startswith(("vllm-prefill", "vllm-decode"))
    }
    assert len(kept) == PREFILL_GROUPS + DECODE_MIN
    assert {n: timeline.leaders["back"].get(n) for n in kept} == kept
    assert {n: timeline.leaders["max"].get(n) for n in kept} == kept
