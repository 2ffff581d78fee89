"""A cube failing, and coming back, while the workloads run (A9 of domain/admission.py).

Real Kueue judges the model's answer on the plane (tests/test_admission_oracle.py, the failing cube);
these are the model's own invariants, from scratch, on random scenarios.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.admission import CubeFault, Prediction, Request, narrative, predict, render_map
from tests.test_admission import CUBE, TPU7X, _cells, _room, scenarios

CELLS = CUBE // 4


def _taken_down(prediction: Prediction) -> set[tuple[int, int]]:
    return {(cube, cell) for cube in prediction.down for cell in range(CELLS)}


def _sound(requests: list[Request], result: Prediction) -> None:
    """Every pending workload waits for want of room: even evicting every strictly lower-priority
    workload, on the cubes that are up, would not make room."""
    owner = _cells(requests, result)
    by_name = {r.name: r for r in requests}
    for name in result.pending:
        request = by_name[name]
        taken = {cell for cell, who in owner.items() if by_name[who].priority >= request.priority}
        assert not _room(request, result.cubes, taken | _taken_down(result)), name


@settings(max_examples=100, deadline=None)
@given(scenarios(), st.data())
def test_a_failed_cube_holds_nothing_and_what_it_held_is_evicted_or_ends(
    scenario: tuple[list[Request], int], data: st.DataObject
) -> None:
    requests, cubes = scenario
    cube = data.draw(st.integers(min_value=0, max_value=cubes - 1))
    before = predict(requests, cubes, TPU7X)
    after = predict(requests, cubes, TPU7X, [CubeFault(cube)])
    step = max((e.step for e in before.events), default=0) + 1
    assert after.events[: len(before.events)] == before.events  # the arrivals are replayed alike
    on_cube = {p.workload for p in before.placements if p.cube == cube}
    by_name = {r.name: r for r in requests}
    assert after.down == {cube}
    assert all(p.cube != cube for p in after.placements)
    lost = {e.workload: e.action for e in after.events if e.action in ("evicted", "failed")}
    assert set(lost) == on_cube
    for name, action in lost.items():
        assert action == ("evicted" if by_name[name].lws else "failed"), name
    assert set(after.failed) == {n for n in on_cube if not by_name[n].lws}
    assert all(e.step == step for e in after.events[len(before.events) :])
    for event in after.events:
        if event.action == "preempted":
            assert by_name[event.by].priority > by_name[event.workload].priority
    _sound(requests, after)
    text = "\n".join(render_map(after) + narrative(after))
    assert "#" * 4 in text and "failed" in text


@settings(max_examples=60, deadline=None)
@given(scenarios(), st.data())
def test_a_repaired_cube_is_offered_again_and_nothing_pending_fits(
    scenario: tuple[list[Request], int], data: st.DataObject
) -> None:
    requests, cubes = scenario
    cube = data.draw(st.integers(min_value=0, max_value=cubes - 1))
    failed = predict(requests, cubes, TPU7X, [CubeFault(cube)])
    repaired = predict(requests, cubes, TPU7X, [CubeFault(cube), CubeFault(cube, repaired=True)])
    assert repaired.down == frozenset()
    assert set(repaired.failed) == set(failed.failed)  # an ended workload stays ended
    assert repaired.events[: len(failed.events)] == failed.events
    by_name = {r.name: r for r in requests}
    for event in repaired.events[len(failed.events) :]:  # a waiting workload the room lets back may preempt
        assert event.action in ("admitted", "preempted"), event
        if event.action == "preempted":
            assert by_name[event.by].priority > by_name[event.workload].priority
            assert event.by in failed.pending
    assert set(repaired.pending) <= set(failed.pending) | {
        e.workload for e in repaired.events if e.action == "preempted"
    }
    _sound(requests, repaired)


def test_high_groups_on_a_failed_cube_preempt_low_work_and_the_repair_takes_it_back() -> None:
    requests = [
        Request("batch", 1000, "2x2x4", 4, 0),  # a JobSet filling one cube
        *(Request(f"decode/{g}", 3000, "2x2x4", 1, 1, lws="decode") for g in range(4)),
        Request("prefill/0", 3000, "4x4x4", 1, 2, lws="prefill"),
        *(Request(f"spare/{g}", 2000, "2x2x2", 1, 3, lws="spare") for g in range(4)),
    ]
    before = predict(requests, 4, TPU7X)
    (cube,) = {p.cube for p in before.placements if p.workload.startswith("decode/")}
    failed = predict(requests, 4, TPU7X, [CubeFault(cube)])
    assert failed.final["batch"] == "pending"
    assert failed.groups("decode") == (4, 4) and failed.groups("spare") == (4, 4)
    assert [e.workload for e in failed.events if e.action == "preempted"] == ["batch"]
    repaired = predict(requests, 4, TPU7X, [CubeFault(cube), CubeFault(cube, repaired=True)])
    assert repaired.final["batch"] == "admitted"
    assert {p.cube for p in repaired.placements if p.workload == "batch"} == {cube}


def test_faults_that_cannot_happen_are_refused() -> None:
    requests = [Request("a", 0, "2x2x1", 1, 0)]
    with pytest.raises(ValueError, match="cube 2 is not one of the 2 cubes"):
        predict(requests, 2, TPU7X, [CubeFault(2)])
    with pytest.raises(ValueError, match="cube 0 has not failed"):
        predict(requests, 2, TPU7X, [CubeFault(0, repaired=True)])
    with pytest.raises(ValueError, match="cube 1 has failed already"):
        predict(requests, 2, TPU7X, [CubeFault(1), CubeFault(1)])
