"""The plan's cost section and `make diff`'s cost line (plan/cost.py)."""

from __future__ import annotations

from typing import Any

from plan import cost, impact
from tests.conftest import config_with, refusal

PRICED = {"pricing": {"currency": "USD", "chipHour": {"tpu7x": {"reserved": 3.25}}, "source": "an example"}}


def test_without_pricing_the_plan_says_so_and_shows_no_money() -> None:
    config = config_with()
    assert cost.lines(config) == [cost.NOT_SET] and cost.facts(config) is None


def test_the_dev_stack_priced_shows_its_chips_their_month_and_the_idle_part() -> None:
    lines = cost.lines(config_with(PRICED))
    # dev: 2 cubes of 64 chips; prefill and decode hold 4 + 4 groups of 8 chips at the planned load.
    assert lines[0] == "  128 chips at USD 3.25 a chip-hour (reserved, an example): USD 303,680 a month"
    assert lines[1] == "  planned: workloads hold 64 chips; 64 idle (50%) cost USD 151,840 a month"


def test_autoscaled_roles_add_the_idle_cost_at_max() -> None:
    scaled: dict[str, Any] = {
        **PRICED,
        "serving": {
            "decode": {"autoscaling": {"min": 2, "max": 12, "metric": "vllm:num_requests_waiting", "target": 8}}
        },
    }
    facts = cost.facts(config_with(scaled))
    assert facts is not None
    # At max: 4 prefill + 12 decode groups of 8 chips = all 128 chips.
    assert (facts["idleMonthly"], facts["idleMonthlyAtMax"]) == (80 * 3.25 * 730, 0)


def test_on_demand_capacity_needs_the_on_demand_price() -> None:
    message = refusal({**PRICED, "reservation": None})
    assert "pricing.chipHour.tpu7x.onDemand is not set" in message and "on demand" in message


def test_the_diff_headline_carries_the_monthly_and_idle_cost() -> None:
    before = {"impact": {"cost": cost.facts(config_with(PRICED))}}
    cheaper = {**PRICED, "serving": {"decode": {"replicas": 2}}}
    after = {"impact": {"cost": cost.facts(config_with(cheaper))}}
    line = impact.headline(impact.compare(before, after))[1]
    assert line == "**Monthly TPU cost**: USD 303,680 -> USD 303,680; idle chips USD 151,840 -> USD 189,800"
    unpriced = impact.headline(impact.compare({"impact": {}}, {"impact": {}}))
    assert not any("Monthly TPU cost" in text for text in unpriced)
