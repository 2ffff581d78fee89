"""The serving budgets read back from the generated objects: no wait ends before what it watches
(domain/serving_budget.py says where each figure comes from)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from domain.serving_budget import BUDGET, JAX_INIT_TIMEOUT_DEFAULT_SECONDS, ServingBudget
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
    env = {e["name"]: e["value"] for e in job.get("spec.template.spec.containers.0.env") if "value" in e}
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


@pytest.fixture(scope="module")
def checks_plan() -> PlanResult:
    from plan import engine
    from tests.conftest import dev_raw, merged

    raw, secrets = dev_raw()
    both = {
        "checks": {"subslicing": {"enabled": True}, "superslicing": {"enabled": True}},
        "serving": {"backend": "none"},
    }
    return engine.run(merged(both, raw), stack="dev", secret_keys=secrets)


@pytest.mark.parametrize("check", ["subslicing-check", "superslicing-check"])
def test_a_slice_checks_rendezvous_outlasts_a_peer_that_pulls_its_image_late(
    checks_plan: PlanResult, check: str
) -> None:
    from pods import slice_check

    jobset = checks_plan.one("kubernetes:jobset.x-k8s.io/v1alpha2:JobSet", check).inputs
    pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    # The program in the pod reads the figures as the pod gives them (its own refusals included).
    settings = slice_check.parse_settings([], env)
    # JAX's own 300 s would fail a slice whose last host is still pulling the image.
    assert settings.init_timeout_seconds > slice_check_default_init_seconds() == 300
    assert settings.init_timeout_seconds >= BUDGET.admission_and_pull_seconds
    assert settings.deadline_seconds >= settings.init_timeout_seconds + BUDGET.slice_check_run_seconds
    # Not restarted: a rendezvous that times out is reported once, as the check's result.
    assert jobset["spec"]["failurePolicy"] == {"maxRestarts": 0}


def slice_check_default_init_seconds() -> int:
    """JAX's default, as the pinned jax (requirements-dev.txt) declares it in its signature."""
    import inspect

    import jax

    default = inspect.signature(jax.distributed.initialize).parameters["initialization_timeout"].default
    assert default == JAX_INIT_TIMEOUT_DEFAULT_SECONDS, default
    return int(default)
