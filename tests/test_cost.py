"""What a stack's chips cost, and the idle part (domain/cost.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.cost import HOURS_PER_MONTH, BlockCost, ChipCost, money

PRICES = st.floats(0.01, 100, allow_nan=False)


@given(reserved=st.integers(0, 10_000), share=st.floats(0, 1), price=PRICES)
def test_idle_is_what_workloads_do_not_hold_and_never_negative(reserved: int, share: float, price: float) -> None:
    held = int(reserved * share)
    cost = ChipCost(reserved, held, price)
    assert cost.idle == reserved - held >= 0
    assert cost.idle_monthly == pytest.approx(cost.monthly - held * price * HOURS_PER_MONTH)
    assert 0 <= cost.idle_monthly <= cost.monthly + 1e-6


@given(stacks=st.lists(st.tuples(st.integers(0, 512), st.floats(0, 1)), min_size=1, max_size=6), price=PRICES)
def test_stacks_on_one_block_add_up(stacks: list[tuple[int, float]], price: float) -> None:
    """Several stacks on one reservation block: their costs sum to the block's chips at one price."""
    costs = [ChipCost(chips, int(chips * share), price) for chips, share in stacks]
    block = ChipCost(sum(c.reserved for c in costs), sum(c.held for c in costs), price)
    assert sum(c.monthly for c in costs) == pytest.approx(block.monthly)
    assert sum(c.idle_monthly for c in costs) == pytest.approx(block.idle_monthly)


def test_a_month_of_one_chip() -> None:
    assert ChipCost(1, 0, 2.0).monthly == 2.0 * 730 == 1460
    assert money(1_234_567.891, "USD") == "USD 1,234,568"


@pytest.mark.parametrize(("reserved", "held", "price"), [(4, 5, 1.0), (4, -1, 1.0), (-1, 0, 1.0), (4, 0, -0.5)])
def test_impossible_figures_are_refused(reserved: int, held: int, price: float) -> None:
    with pytest.raises(ValueError):
        ChipCost(reserved, held, price)


NESTED = st.tuples(*(st.integers(0, 1000),) * 4).map(sorted)


@given(chips=NESTED, price=PRICES)
def test_a_blocks_four_parts_sum_to_its_bill(chips: list[int], price: float) -> None:
    """serving <= held <= in pools <= in the block: the parts are each non-negative and sum to the block."""
    serving, held, pools, block = chips
    share = BlockCost(block, pools, held, serving, price)
    assert all(part >= 0 for part in share.parts().values())
    assert sum(share.parts().values()) == block
    assert sum(share.monthly(c) for c in share.parts().values()) == pytest.approx(share.monthly(block))


@given(first=NESTED, second=NESTED, price=PRICES)
def test_two_stacks_shares_of_one_block_add_as_the_fleet_sees_them(
    first: list[int], second: list[int], price: float
) -> None:
    block = first[3] + second[3]  # room for both stacks' pools
    one = BlockCost(block, first[2], first[1], first[0], price)
    two = BlockCost(block, second[2], second[1], second[0], price)
    both = one + two
    assert both.parts()["unclaimed"] == block - first[2] - second[2]
    assert both.serving == first[0] + second[0] and both.idle == one.idle + two.idle


def test_chips_that_do_not_nest_are_refused() -> None:
    with pytest.raises(ValueError, match="must nest"):
        BlockCost(block=128, pools=192, held=64, serving=64, chip_hour=1.0)
    with pytest.raises(ValueError, match="differ"):
        _ = BlockCost(256, 128, 64, 64, 1.0) + BlockCost(512, 128, 64, 64, 1.0)
