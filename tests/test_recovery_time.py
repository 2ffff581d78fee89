"""The recovery-time model of domain/recovery_time.py: each term from its source, and the sums."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain import recovery_time
from domain.serving_budget import BUDGET
from plan import unhealthy
from tests.conftest import config_with


def test_a_person_releases_the_pods_once_they_are_terminating() -> None:
    person = recovery_time.recovery(recovery_time.PERSON)
    # Kubernetes' defaults: the node lifecycle grace period, then the default unreachable toleration.
    assert [t.seconds for t in person.before_restart] == [50, 300, 0]
    assert person.restart_seconds == 350


def test_auto_repair_alone_starts_after_about_ten_minutes_not_ready() -> None:
    repair = recovery_time.recovery(recovery_time.AUTO_REPAIR)
    assert repair.restart_seconds == 600


def test_kueue_releases_the_pods_a_minute_past_their_deletion_timestamp() -> None:
    """Kueue v0.19.2's forcefulTerminationGracePeriod (a minute) after the deletion timestamp, which
    the eviction's delete sets the pods' default 30 s grace period ahead."""
    kueue = recovery_time.recovery(recovery_time.KUEUE)
    assert [t.seconds for t in kueue.before_restart] == [50, 300, 90]
    assert kueue.restart_seconds == 440


def test_an_unknown_release_is_refused() -> None:
    with pytest.raises(ValueError, match="allowed: kueue, person, auto-repair"):
        recovery_time.recovery("operator")


def test_a_whole_cube_is_tainted_a_node_every_ten_seconds() -> None:
    """At --node-eviction-rate 0.1, the last of a cube's 16 hosts is tainted 150 s after the first."""
    person = recovery_time.recovery(recovery_time.PERSON, hosts=16)
    assert person.before_restart[0].seconds == 50 + 150
    assert person.restart_seconds == 50 + 150 + 300
    assert recovery_time.recovery(recovery_time.AUTO_REPAIR, hosts=16).restart_seconds == 600


def test_the_reload_is_the_startup_budget_an_upper_bound() -> None:
    for release in recovery_time.RELEASES:
        found = recovery_time.recovery(release)
        assert found.reload.seconds == BUDGET.admission_and_pull_seconds + BUDGET.startup_seconds
        assert found.serving_seconds == found.restart_seconds + found.reload.seconds


@given(st.integers(min_value=0, max_value=10 * 86_400))
def test_durations_read_back_to_their_seconds_or_whole_minutes_past_an_hour(seconds: int) -> None:
    parts = recovery_time.duration(seconds).split()
    units = {"h": 3600, "min": 60, "s": 1}
    read = sum(int(n) * units[u] for n, u in zip(parts[::2], parts[1::2], strict=True))
    assert read == (seconds if seconds < 3600 else seconds - seconds % 60)


def test_the_cube_failure_preview_says_how_long_recovery_takes() -> None:
    said = "\n".join(unhealthy.failure_lines(config_with(), 0))
    assert "evicted by Kueue (NodeFailures)" in said
    assert "the last of 16 nodes at 0.1 a second" in said
    assert "made again after 8 min 20 s" in said and "made again after about 10 min" in said
    assert "up to 4 h 10 min more" in said
    assert "by Kueue (FailureRecoveryPolicy" in said and "made again within 9 min 50 s" in said


def test_the_preview_leaves_kueue_out_when_the_stack_turns_its_forced_deletion_off() -> None:
    config = config_with({"kueue": {"recovery": {"forceDeleteOnUnreachableHost": False}}})
    said = "\n".join(unhealthy.failure_lines(config, 0))
    assert "by Kueue (FailureRecoveryPolicy" not in said and "forceDeleteOnUnreachableHost is off" in said
    assert "made again after 8 min 20 s" in said
