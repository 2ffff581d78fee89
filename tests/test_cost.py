"""What a stack's chips cost, and the idle part (domain/cost.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.cost import HOURS_PER_MONTH, ChipCost, money

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
