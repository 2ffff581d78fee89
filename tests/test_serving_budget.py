"""The serving budgets read back from the generated objects: no wait ends before what it watches
(domain/serving_budget.py says where each figure comes from)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from domain.serving_budget import BUDGET, ServingBudget
from plan.engine import PlanResult
from settings.loader import ConfigError
from tests.conftest import config_with

LWS = "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet"


def _seconds(text: str) -> int:
    value, unit = re.fullmatch(r"(\d+)([smh])", text).groups()  # type: ignore[union-attr]
    return int(value) * {"s": 1, "m": 60, "h": 3600}[unit]


def _leader(plan: PlanResult, role: str) -> dict[str, Any]:
    spec = plan.one(LWS, f"{role}-lws").inputs["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
    return next(c for c in spec["containers"] if c["name"] == "vllm-leader")


def _ray_wait(script: str) -> int:
    (seconds,) = set(re.findall(r"--ray_init_timeout=(\d+)", script))
    return int(seconds)


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_a_leaders_startup_probe_outlasts_ray_and_the_engine(dev_plan: PlanResult, role: str) -> None:
    leader = _leader(dev_plan, role)
    probe = leader["startupProbe"]
    allowed = probe["periodSeconds"] * probe["failureThreshold"]
    env = {e["name"]: e.get("value") for e in leader["env"]}
    waits = _ray_wait(leader["command"][2]) + int(env["VLLM_ENGINE_READY_TIMEOUT_S"])
    assert allowed >= waits + BUDGET.startup_margin_seconds, (allowed, waits)
    # tpu-inference's own runs of this model give the engine 10800 s (nightly_benchmarking.sh).
    assert int(env["VLLM_ENGINE_READY_TIMEOUT_S"]) >= 10800


def test_the_smoke_deadline_outlasts_activation_and_startup(dev_plan: PlanResult) -> None:
    controller = dev_plan.one("kubernetes:apps/v1:Deployment", "controller-manager")
    args = controller.get("spec.template.spec.containers.0.args")
    (activation,) = [_seconds(a.split("=", 1)[1]) for a in args if a.startswith("--activation-timeout=")]
    probe = _leader(dev_plan, "prefill")["startupProbe"]
    startup = probe["periodSeconds"] * probe["failureThreshold"]
    job = dev_plan.one("kubernetes:batch/v1:Job")
    env = {e["name"]: e["value"] for e in job.get("spec.template.spec.containers.0.env")}
    deadline = int(env["SMOKE_DEADLINE_SECONDS"])
    assert deadline >= activation + startup + BUDGET.admission_and_pull_seconds, (deadline, activation, startup)
    assert job.get("spec.activeDeadlineSeconds") > deadline  # the Job outlives its program's own deadline


def test_a_smoke_deadline_below_the_budget_is_refused_with_its_parts() -> None:
    with pytest.raises(ConfigError) as refused:
        config_with({"serving": {"smokeTest": {"deadlineSeconds": 3600}}})
    text = str(refused.value)
    assert "serving.smokeTest.deadlineSeconds" in text and f"allowed are {BUDGET.smoke_deadline_min_seconds}" in text
    assert "slice activation 3600 s" in text and "engine 10800 s" in text


def test_the_budget_sums_its_parts() -> None:
    budget = ServingBudget(
        ray_init_seconds=10,
        engine_ready_seconds=20,
        startup_margin_seconds=5,
        activation_seconds=100,
        admission_and_pull_seconds=1000,
        probe_period_seconds=30,
    )
    assert (budget.startup_seconds, budget.startup_failures, budget.smoke_deadline_min_seconds) == (35, 2, 1135)
