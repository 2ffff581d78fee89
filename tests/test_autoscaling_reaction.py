"""How fast an autoscaled role grows (domain/autoscaling.py `desired_groups`, `reaction`): the HPA's
own arithmetic, with the groups it added counted as GKE shows them while they wait in Kueue or load."""

from __future__ import annotations

import itertools
import math

from hypothesis import given
from hypothesis import strategies as st

from domain import autoscaling


def test_the_planes_measured_steps_are_the_models() -> None:
    """tests/test_autoscaling_plane.py measured decode going 2, 6, 12, 24 under a queue of 800 per
    leader against a target of 8 (kube-controller-manager v1.36.3, the default scale-up policy)."""
    assert autoscaling.reaction(2, 800, 8, 24) == [2, 6, 12, 24]


def test_groups_that_do_not_serve_yet_count_as_zero_on_a_scale_up() -> None:
    """Two groups at three times the target: the HPA asks for 6; with the 4 new ones loading (no
    series) or pending in Kueue (Pending pods) the average is back at the target, so it holds at 6
    instead of doubling every 15 s until the new groups serve."""
    assert autoscaling.desired_groups(2, 2, 24, 8) == 6
    assert autoscaling.desired_groups(6, 2, 24, 8) == 6
    assert autoscaling.desired_groups(6, 2, 24, 8, pending=4) == 6
    assert autoscaling.reaction(2, 24, 8, 24) == [2, 6]
    # Were the 4 new groups counted at the serving groups' value, it would go on to 18.
    assert autoscaling.desired_groups(6, 6, 24, 8) == 18


def test_a_ratio_within_the_tolerance_changes_nothing() -> None:
    assert autoscaling.desired_groups(4, 4, 8.8, 8) == 4  # 1.1: the controller's 0.1 holds
    assert autoscaling.desired_groups(4, 4, 8.8, 8, tolerance=0.05) == 5


@given(
    serving=st.integers(1, 40),
    ratio=st.floats(1.2, 50, allow_nan=False),
    most=st.integers(1, 400),
)
def test_a_sustained_queue_settles_near_serving_times_the_ratio(serving: int, ratio: float, most: int) -> None:
    """With the added groups not serving, the role settles between serving x ratio / 1.1 and
    serving x ratio groups (the tolerance may stop it a step short), or at `max`; never beyond."""
    target = 8.0
    value = round(target * ratio, 3)
    sizes = autoscaling.reaction(serving, value, target, max(most, serving))
    exact = serving * (round(value * 1000) / round(target * 1000))
    top = max(most, serving)
    assert sizes == sorted(set(sizes)) and sizes[-1] <= min(top, math.ceil(exact))
    assert sizes[-1] >= min(top, math.floor(exact / (1 + autoscaling.HPA_TOLERANCE)))
    for before, after in itertools.pairwise(sizes):
        assert after <= max(before + 4, 2 * before)  # the default policy, per 15 s sync
