"""The reservation-health model (domain/reservation_health.py): what a new pool may bind."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain import reservation_health as rh

KEY = "tpu-slicing:reservation.subBlocks"
T0 = datetime(2026, 9, 18, tzinfo=UTC)


def window(start_day: int, days: int) -> rh.Window:
    return rh.Window(T0 + timedelta(days=start_day), T0 + timedelta(days=start_day + days))


readings = st.builds(
    rh.Reading,
    sub_block=st.sampled_from([f"sub-block-{i}" for i in range(4)]),
    health=st.sampled_from(["HEALTHY", "DEGRADED", "HEALTH_STATUS_UNSPECIFIED"]),
    count=st.integers(0, 32),
    in_use=st.integers(0, 32),
    maintenance=st.builds(
        rh.Maintenance,
        pending_hosts=st.integers(0, 16),
        ongoing_hosts=st.integers(0, 2),
        window=st.none() | st.builds(window, st.integers(-30, 120), st.integers(1, 13)),
    ),
)
windows = st.lists(st.builds(window, st.integers(-30, 120), st.integers(1, 13)), max_size=3)


@given(readings, st.integers(1, 32), windows)
def test_a_new_pool_is_refused_exactly_when_unhealthy_short_or_in_a_no_go_window(
    reading: rh.Reading, hosts: int, no_go: list[rh.Window]
) -> None:
    verdict = rh.judge(KEY, [reading], hosts, no_go=no_go)
    clash = (
        reading.maintenance.due
        and bool(no_go)
        and (reading.maintenance.window is None or any(reading.maintenance.window.overlaps(w) for w in no_go))
    )
    refused = reading.health != "HEALTHY" or reading.free < hosts or clash
    line = verdict.refusal(reading.sub_block)
    assert (line is not None) == refused
    if line is not None:
        # One line naming the key, the sub-block and what to do.
        assert "\n" not in line and KEY in line and reading.sub_block in line and "Allowed:" in line
    # A running pool is warned of health and maintenance, never of the hosts it holds itself.
    warned = any(reading.sub_block in w and "kept" in w for w in verdict.warnings)
    assert warned == (reading.health != "HEALTHY" or clash)


@given(readings, st.integers(1, 32), windows)
def test_acceptance_lets_health_and_maintenance_through_but_never_missing_hosts(
    reading: rh.Reading, hosts: int, no_go: list[rh.Window]
) -> None:
    verdict = rh.judge(KEY, [reading], hosts, no_go=no_go, accepted={reading.sub_block: "drain test"})
    assert (verdict.refusal(reading.sub_block) is not None) == (reading.free < hosts)


def test_refusal_lines_say_what_was_read() -> None:
    degraded = rh.Reading("sub-block-1", "DEGRADED", 16, 0)
    full = rh.Reading("sub-block-2", "HEALTHY", 16, 4)
    due = rh.Reading("sub-block-3", "HEALTHY", 16, 0, rh.Maintenance(16, 0, window(2, 3)))
    verdict = rh.judge(KEY, [degraded, full, due], 16, no_go=[window(0, 7)])
    assert "sub-block-1 is DEGRADED" in verdict.refusals["sub-block-1"]
    assert "has 12 free hosts of 16 (4 in use), a pool needs 16" in verdict.refusals["sub-block-2"]
    assert "maintenance due 2026-09-20T00:00Z..2026-09-23T00:00Z" in verdict.refusals["sub-block-3"]
    assert rh.judge(KEY, [due], 16, no_go=[window(10, 3)]).refusals == {}


def test_a_sub_block_not_read_is_a_warning_not_a_refusal() -> None:
    verdict = rh.judge(KEY, [rh.not_read("sub-block-0")], 16)
    assert verdict.refusals == {} and "not read" in verdict.warnings[0]


@given(st.lists(readings, max_size=4), st.integers(0, 80))
def test_a_block_counts_only_healthy_free_hosts(found: list[rh.Reading], needed: int) -> None:
    line = rh.block_refusal("tpu-slicing:reservation.block", "block-0", found, needed)
    free = sum(max(r.count - r.in_use, 0) for r in found if r.health == "HEALTHY")
    assert (line is not None) == (bool(found) and free < needed)


def api_entry(name: str, reservation: str = "r", block: str = "block-0", **extra: object) -> dict[str, object]:
    return {
        "name": name,
        "selfLink": f"https://www.googleapis.com/compute/v1/projects/p/zones/z/reservations/{reservation}/reservationBlocks/{block}/reservationSubBlocks/{name}",
        "count": 16,
        "inUseCount": 3,
        "healthInfo": {"healthStatus": "HEALTHY"},
        **extra,
    }


def test_a_snapshot_reads_as_the_api_and_the_provider_answer_alike() -> None:
    maintenance = {
        "maintenancePendingCount": 16,
        "upcomingGroupMaintenance": {
            "windowStartTime": "2026-09-18T00:00:00.000-07:00",
            "windowEndTime": "2026-09-30T00:00:00Z",
        },
    }
    snapshot = rh.read_snapshot(
        json.dumps([api_entry("sb-0", reservationSubBlockMaintenance=maintenance)]), "f.json", "r", "block-0"
    )
    reading = snapshot.reading("sb-0")
    assert (reading.health, reading.free, reading.maintenance.pending_hosts) == ("HEALTHY", 13, 16)
    assert str(reading.maintenance.window) == "2026-09-18T07:00Z..2026-09-30T00:00Z"
    back = rh.from_provider(snapshot.as_provider("sb-0"))
    assert (back.health, back.count, back.in_use, back.maintenance.pending_hosts) == ("HEALTHY", 16, 3, 16)
    assert not snapshot.reading("sb-9").read


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{not json", "not JSON"),
        ('{"name": "sb-0"}', "not a list of sub-blocks"),
        (json.dumps([{"name": "sb-0"}]), "no selfLink"),
        (json.dumps([api_entry("sb-0", reservation="other")]), "is in reservation other block block-0"),
        (json.dumps([api_entry("sb-0", block="block-1")]), "block block-1, the stack binds"),
    ],
)
def test_a_malformed_or_foreign_snapshot_is_refused_in_one_line(text: str, says: str) -> None:
    with pytest.raises(rh.SnapshotError) as err:
        rh.read_snapshot(text, "f.json", "r", "block-0")
    assert (
        says in str(err.value)
        and "\n" not in str(err.value)
        and "gcloud compute reservations sub-blocks list" in str(err.value)
    )


def test_the_table_and_the_changes() -> None:
    before = [rh.Reading("sb-0", "HEALTHY", 16, 16), rh.Reading("sb-1", "HEALTHY", 16, 0)]
    after = [
        rh.Reading("sb-0", "HEALTHY", 16, 16),
        rh.Reading("sb-1", "DEGRADED", 16, 0, rh.Maintenance(16, 0, window(0, 3))),
    ]
    rows = rh.table(after, {"sb-0": ["dev"]})
    assert rows[0].split() == ["SUB-BLOCK", "HEALTH", "FREE/USED/HOSTS", "STACKS", "MAINTENANCE"]
    assert rows[1].split()[:4] == ["sb-0", "HEALTHY", "0/16/16", "dev"]
    assert rh.changes(before, after) == [
        "sb-1: HEALTHY → DEGRADED",
        "sb-1: maintenance due 2026-09-18T00:00Z..2026-09-21T00:00Z (16 pending, 0 ongoing)",
    ]
