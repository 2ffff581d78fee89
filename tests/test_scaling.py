"""The admission picture at each autoscaled role's max (plan/scaling.py), in the plan and the PR diff."""

from __future__ import annotations

from typing import Any

from plan import impact, scaling
from tests.conftest import config_with

WAITING = {"metric": "vllm:num_requests_waiting", "target": 8}
THREE_CUBES: dict[str, Any] = {
    "tpu": {"cubes": 3},
    "reservation": {"subBlocks": ["sub-block-0", "sub-block-1", "sub-block-2"]},
    "checks": {"superslicing": {"enabled": True}},
}


def _scaled(decode_max: int, prefill_max: int | None = None, **extra: Any) -> dict[str, Any]:
    serving: dict[str, Any] = {"decode": {"autoscaling": {"min": 2, "max": decode_max, **WAITING}}}
    if prefill_max is not None:
        serving["prefill"] = {"autoscaling": {"min": 2, "max": prefill_max, **WAITING}}
    return {"serving": serving, **extra}


def test_a_stack_with_fixed_replicas_has_no_ceiling() -> None:
    config = config_with()
    assert scaling.bounds(config) == {} and scaling.ceiling(config) is None and scaling.facts(config) is None


def test_scaling_out_preempts_the_low_priority_check_and_says_so_without_a_warning() -> None:
    """Batch that fills the gaps yields to serving: preempted, listed, not warned about."""
    config = config_with(_scaled(10, 4, checks={"subslicing": {"enabled": True}}))
    top = scaling.ceiling(config)
    assert top is not None
    assert top.bounds == {"vllm-prefill": (2, 4), "vllm-decode": (2, 10)}
    # At min: the check (6 x 8 chips) beside 2 + 2 serving groups; at max 14 serving groups.
    assert (top.chips_at_min, top.chips_at_max, top.total_chips) == (80, 112, 128)
    assert top.preempted == (("subslicing-check", "low", "vllm-decode"),)
    assert top.pending_high == ()
    assert scaling.warnings(top) == []
    lines = scaling.lines(config)
    assert any("vllm-decode/6 (high, 2x2x2) preempts subslicing-check (low)" in line for line in lines)


def test_reaching_max_warns_when_it_preempts_medium_work_or_leaves_serving_pending() -> None:
    # Three cubes: the super-slice check (medium) holds two beside serving at min; decode's max needs them.
    config = config_with(_scaled(10, **THREE_CUBES))
    top = scaling.ceiling(config)
    assert top is not None
    assert top.preempted == (("superslicing-check", "medium", "vllm-decode"),)
    assert "at autoscaling max, `vllm-decode` preempts medium-priority `superslicing-check`" in scaling.warnings(top)
    # Both roles at their largest max, one at a time allowed, together more than the cubes hold.
    both = scaling.ceiling(config_with(_scaled(12, 12)))
    assert both is not None and len(both.pending_high) == 8
    assert "8 high-priority serving group(s) stay pending" in scaling.warnings(both)[0]


def test_the_pr_diff_shows_the_ceiling_and_warns_once() -> None:
    before: dict[str, Any] = {"impact": {"atMax": None, "workloads": [], "usage": {}}}
    top = scaling.facts(config_with(_scaled(10, **THREE_CUBES)))
    assert top is not None
    after = {"impact": {"atMax": top, "workloads": [], "usage": {}}}
    report = impact.compare(before, after)
    assert any("preempts medium-priority `superslicing-check`" in w for w in report["warnings"])
    text = "\n".join(impact.markdown(report))
    assert "| autoscaled groups (min-max) | fixed | `vllm-decode` 2-10 |" in text
    assert "| reaching max preempts | n/a | medium `superslicing-check` |" in text
    assert "Admission at max, after the change" in text
    # Said before the change too: not a new warning.
    again = impact.compare(after, after)
    assert not any("superslicing-check" in w for w in again["warnings"])


def test_what_creation_at_min_preempts_is_not_blamed_on_scaling() -> None:
    """The two-cube super-slice check yields to serving as soon as the stack is created: at min."""
    top = scaling.ceiling(config_with(_scaled(10, checks={"superslicing": {"enabled": True}})))
    assert top is not None and top.preempted == ()


def test_the_plan_says_how_long_an_added_group_takes_to_serve_and_what_shortens_it() -> None:
    overrides = _scaled(6)
    overrides["serving"]["vllm"] = {"loadFormat": "auto"}
    config = config_with(overrides)
    lines = scaling.lines(config)
    assert lines[2].startswith("  a group the autoscaler adds serves after ~36 min: slice activation ~6 min")
    assert "serving.vllm.loadFormat runai_streamer, not set" in lines[3]
    facts = scaling.facts(config)
    assert facts is not None and facts["scaleOutSeconds"] == 2160
    text = "\n".join(impact.markdown(impact.compare({"impact": {}}, {"impact": {"atMax": facts}})))
    assert "| a group added serves after (domain/autoscaling.py) | n/a | ~36 min |" in text
