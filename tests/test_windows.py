"""The upgrade hold the program requires holds now, and for a while yet, judged at a clock the test fixes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from settings.loader import ConfigError, load
from settings.rules_cluster import HOLD_MIN_REMAINING
from tests.conftest import dev_raw, merged

NOW = datetime(2027, 3, 10, 12, 0, tzinfo=UTC)


def _at(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def _verdict(exclusion: dict[str, Any], now: datetime = NOW, **cluster: Any) -> str | None:
    raw, secrets = dev_raw()
    raw = merged({"cluster": {"maintenanceExclusion": exclusion, **cluster}}, raw)
    try:
        load(raw, stack="dev", project="example-tpu-project", secret_keys=secrets, clock=lambda: now)
    except ConfigError as err:
        return str(err)
    return None


def _dated(start: datetime, end: datetime, scope: str = "NO_UPGRADES") -> dict[str, Any]:
    return {"scope": scope, "start": _at(start), "end": _at(end), "untilEndOfSupport": None}


def test_a_hold_that_starts_later_holds_nothing_now() -> None:
    later = NOW + timedelta(days=3)
    message = _verdict({"start": _at(later)})  # dev's NO_MINOR_OR_NODE_UPGRADES until end of support
    assert message is not None
    assert "tpu-slicing:cluster.maintenanceExclusion 'hold-minor-upgrades'" in message
    assert f"start {_at(later)} is in the future" in message and "allowed: a window in force now" in message


def test_a_hold_whose_end_has_passed_is_refused() -> None:
    message = _verdict(_dated(NOW - timedelta(days=20), NOW - timedelta(seconds=1)))
    assert message is not None and "has passed" in message and "cluster.allowTpuNodeUpgrades: true" in message
    # The end itself is already over: GKE holds while the current time is within the window.
    assert _verdict(_dated(NOW - timedelta(days=20), NOW)) is not None


@pytest.mark.parametrize("left", [timedelta(seconds=1), timedelta(days=3), HOLD_MIN_REMAINING - timedelta(seconds=1)])
def test_a_hold_that_ends_too_soon_is_refused(left: timedelta) -> None:
    message = _verdict(_dated(NOW - timedelta(days=10), NOW + left))
    assert message is not None
    assert f"is less than {HOLD_MIN_REMAINING.days} days away" in message
    assert f"ends at least {HOLD_MIN_REMAINING.days} days from now" in message


def test_a_hold_in_force_for_long_enough_passes() -> None:
    assert _verdict(_dated(NOW, NOW + HOLD_MIN_REMAINING)) is None  # starts this very moment
    assert _verdict(_dated(NOW - timedelta(days=10), NOW + timedelta(days=20))) is None
    assert _verdict({"start": _at(NOW - timedelta(days=400))}) is None  # until end of support: GKE's date
    assert _verdict(_dated(NOW - timedelta(days=1), NOW + timedelta(days=90), "NO_MINOR_OR_NODE_UPGRADES")) is None


def test_the_verdict_moves_with_the_clock_not_the_wall() -> None:
    window = _dated(datetime(2030, 1, 1, tzinfo=UTC), datetime(2030, 1, 25, tzinfo=UTC))
    assert _verdict(window, now=datetime(2030, 1, 2, tzinfo=UTC)) is None
    assert _verdict(window, now=datetime(2029, 12, 31, tzinfo=UTC)) is not None  # not yet
    assert _verdict(window, now=datetime(2030, 1, 20, tzinfo=UTC)) is not None  # five days left


def test_a_hold_that_is_not_required_is_not_judged_in_time() -> None:
    # With the opt-out, an expired window is left out of the cluster's policy with a warning (infra/cluster.py).
    over = _dated(NOW - timedelta(days=20), NOW - timedelta(days=1))
    assert _verdict(over, allowTpuNodeUpgrades=True) is None


def test_every_time_problem_is_named_with_the_other_problems() -> None:
    raw, secrets = dev_raw()
    later = {"maintenanceExclusion": {"start": _at(NOW + timedelta(days=1))}}
    raw = merged({"cluster": later, "region": "europe-west4"}, raw)
    with pytest.raises(ConfigError) as caught:
        load(raw, stack="dev", project="example-tpu-project", secret_keys=secrets, clock=lambda: NOW)
    assert "tpu-slicing:region" in str(caught.value) and "is in the future" in str(caught.value)
