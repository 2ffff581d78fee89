"""Autoscaled serving roles: the settings they take, and the ones they refuse (settings/rules_autoscaling.py)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, reject, settings
from hypothesis import strategies as st

from domain import autoscaling, topology
from settings import rules_autoscaling
from settings.loader import ConfigError
from tests.conftest import config_with, refusal

WAITING = {"metric": "vllm:num_requests_waiting", "target": 8}


def _scaled(role: str, **fields: Any) -> dict[str, Any]:
    return {"serving": {role: {"autoscaling": {"min": 2, "max": 6, **WAITING, **fields}}}}


def test_an_autoscaled_role_starts_at_its_min_and_may_grow_to_its_max() -> None:
    config = config_with(_scaled("decode", min=3, max=9))
    decode, prefill = config.serving.decode, config.serving.prefill
    assert (decode.replicas, decode.max_replicas) == (3, 9)
    assert decode.autoscaling is not None
    assert decode.autoscaling.scale_down_stabilization_seconds == autoscaling.MAX_STABILIZATION_SECONDS
    assert decode.autoscaling.scale_up_stabilization_seconds == 0
    assert (prefill.replicas, prefill.max_replicas, prefill.autoscaling) == (4, 4, None)


def test_the_scale_down_window_must_outlast_a_new_groups_way_to_serving() -> None:
    needed = autoscaling.SCALE_OUT.seconds
    assert config_with(_scaled("decode", scaleDownStabilizationSeconds=needed)).serving.decode.autoscaling
    message = refusal(_scaled("decode", scaleDownStabilizationSeconds=needed - 1))
    assert "serving.decode.autoscaling.scaleDownStabilizationSeconds" in message
    assert f"allowed: {needed} to 3600" in message
    # The HPA's own ceiling (kubernetes validation.go): an hour.
    assert "scaleDownStabilizationSeconds" in refusal(_scaled("decode", scaleDownStabilizationSeconds=3601))


def test_every_problem_of_an_autoscaler_is_said_at_once() -> None:
    message = refusal(_scaled("prefill", min=0, metric="queue", target=2, scaleUpStabilizationSeconds=-1))
    for key in ("autoscaling.min", "autoscaling.metric", "autoscaling.scaleUpStabilizationSeconds"):
        assert f"serving.prefill.{key}" in message


def test_a_target_finer_than_thousandths_is_refused() -> None:
    message = refusal(_scaled("decode", metric="vllm:kv_cache_usage_perc", target=0.8005))
    assert "serving.decode.autoscaling.target 0.8005" in message and "three decimals" in message
    assert config_with(_scaled("decode", metric="vllm:kv_cache_usage_perc", target=0.805)).serving.decode.autoscaling


def test_each_role_scales_on_its_own_work() -> None:
    for role, metric in (("prefill", "vllm:prompt_tokens_total"), ("decode", "vllm:generation_tokens_total")):
        assert config_with(_scaled(role, metric=metric, target=2000)).serving
    assert "serving.decode.autoscaling.metric vllm:prompt_tokens_total" in refusal(
        _scaled("decode", metric="vllm:prompt_tokens_total", target=2000)
    )


def test_an_autoscaler_is_read_by_vllm_pd_only() -> None:
    message = refusal({**_scaled("decode"), "serving": {**_scaled("decode")["serving"], "backend": "none"}})
    assert "serving.decode" in message


@settings(max_examples=40, deadline=None)
@given(
    prefill=st.integers(1, 16),
    shape=st.sampled_from(["2x2x1", "2x2x2", "2x2x4", "2x4x4"]),
    cubes=st.integers(1, 4),
)
def test_the_largest_max_is_what_the_cubes_hold_beside_the_other_role(prefill: int, shape: str, cubes: int) -> None:
    """The bound the max rule names fits, and one more group does not (the cube packing, not a sum)."""

    def stack(decode: dict[str, Any]) -> dict[str, Any]:
        return {
            "tpu": {"cubes": cubes},
            "reservation": {"subBlocks": [f"sub-block-{i}" for i in range(cubes)]},
            "serving": {"prefill": {"replicas": prefill, "topology": shape}, "decode": {"topology": shape, **decode}},
        }

    try:
        config = config_with(stack({"replicas": 1}))
    except ConfigError:  # a shape the model does not fit, or more prefill than the cubes: not this rule's case
        reject()
    most = rules_autoscaling.largest_max(config, "decode")
    chips = config.tpu.generation.subslice(shape).chips
    assert most >= 1
    assert topology.pack_into_cubes([chips] * (prefill + most), config.tpu.chips_per_cube, cubes) is not None
    assert topology.pack_into_cubes([chips] * (prefill + most + 1), config.tpu.chips_per_cube, cubes) is None
    scaled = {"autoscaling": {"min": 1, "max": most, **WAITING}}
    assert config_with(stack(scaled)).serving.decode.max_replicas == most
    scaled["autoscaling"]["max"] = most + 1
    assert f"allowed: at most {most}" in refusal(stack(scaled))
