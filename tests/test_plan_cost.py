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
    assert "pricing.chipHour.tpu7x.onDemand is not set" in message and "without a reservation" in message


def test_the_diff_headline_carries_the_monthly_and_idle_cost() -> None:
    before = {"impact": {"cost": cost.facts(config_with(PRICED))}}
    cheaper = {**PRICED, "serving": {"decode": {"replicas": 2}}}
    after = {"impact": {"cost": cost.facts(config_with(cheaper))}}
    line = impact.headline(impact.compare(before, after))[1]
    assert line == "**Monthly TPU cost**: USD 303,680 -> USD 303,680; idle chips USD 151,840 -> USD 189,800"
    unpriced = impact.headline(impact.compare({"impact": {}}, {"impact": {}}))
    assert not any("Monthly TPU cost" in text for text in unpriced)


def test_the_block_is_priced_whole_in_four_parts() -> None:
    """dev binds 2 sub-blocks of a 4-cube block (blockCubes 4, 64 chips a cube): the reservation bills
    all 256 chips. At the planned load serving holds 64, the subslicing check 6 x 8 = 48, 16 of the
    stack's pools are idle, and 128 chips are in none of its pools."""
    config = config_with({**PRICED, "checks": {"subslicing": {"enabled": True}}})
    lines = cost.lines(config)
    at = lines.index("  the block: 256 chips, USD 607,360 a month whatever uses them")
    assert lines[at + 1 :] == [
        "       64 chips held by serving roles: USD 151,840",
        "       48 chips held by slicing checks: USD 113,880",
        "       16 chips in this stack's pools, held by nothing: USD 37,960",
        "      128 chips in none of this stack's pools (another stack's, or none): USD 303,680",
    ]
    facts = cost.facts(config)
    assert facts is not None and facts["block"] == {
        "chips": 256,
        "monthly": 607360.0,
        "servingChips": 64,
        "checksChips": 48,
        "idleChips": 16,
        "unclaimedChips": 128,
    }


def test_without_the_blocks_size_the_block_is_not_priced() -> None:
    config = config_with({**PRICED, "reservation": {"blockCubes": None}})
    assert not any("the block" in line for line in cost.lines(config))


def test_a_committed_use_price_is_the_one_charged_when_the_stack_buys_by_it() -> None:
    committed = {
        "pricing": {
            "currency": "USD",
            "chipHour": {"tpu7x": {"reserved": 3.25, "committedThreeYears": 1.5}},
            "source": "a 3-year commitment",
            "buying": "committedThreeYears",
        }
    }
    lines = cost.lines(config_with(committed))
    assert (
        lines[0] == "  128 chips at USD 1.5 a chip-hour (committedThreeYears, a 3-year commitment): USD 140,160 a month"
    )
    message = refusal({**committed, "pricing": {**committed["pricing"], "chipHour": {"tpu7x": {"reserved": 3.25}}}})
    assert "pricing.chipHour.tpu7x.committedThreeYears is not set" in message


def test_calendar_and_reserved_prices_need_a_reservation() -> None:
    for way in ("calendar", "reserved"):
        priced = {"currency": "USD", "chipHour": {"tpu7x": {way: 2.0}}, "source": "a quote", "buying": way}
        message = refusal({"pricing": priced, "reservation": None})
        assert f"pricing.buying {way!r} needs a reservation" in message
