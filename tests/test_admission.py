"""The Kueue admission model: the reference story, preemption order, and invariants checked from scratch."""

from __future__ import annotations

import random
import re
from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.admission import (
    Event,
    Placement,
    Prediction,
    Request,
    cube_span,
    narrative,
    predict,
    render_map,
    requests_from_workloads,
    with_added_groups,
)
from domain.topology import CATALOG, TopologyError
from settings.capacity import Workload

TPU7X = CATALOG["tpu7x"]
CUBE = 64

REFERENCE = [
    Request("subslicing-check", 1000, "2x2x2", 6, 0),
    Request("superslicing-check", 2000, "4x4x8", 1, 1),
    Request("vllm-prefill", 3000, "2x2x2", 4, 2),
    Request("vllm-decode", 3000, "2x2x2", 4, 3),
]


@pytest.fixture(scope="module")
def reference() -> Prediction:
    return predict(REFERENCE, 2, TPU7X)


def test_reference_story_events(reference: Prediction) -> None:
    assert [(e.step, e.workload, e.action, e.by, e.victims) for e in reference.events] == [
        (1, "subslicing-check", "admitted", "", ()),
        (2, "subslicing-check", "preempted", "superslicing-check", ()),
        (2, "superslicing-check", "admitted", "", ("subslicing-check",)),
        (3, "superslicing-check", "preempted", "vllm-prefill", ()),
        (3, "vllm-prefill", "admitted", "", ("superslicing-check",)),
        (3, "subslicing-check", "admitted", "", ()),  # re-fits in the 96 chips the super-slice left
        (4, "vllm-decode", "admitted", "", ()),  # fits beside prefill without preempting anyone
    ]
    assert reference.events[5].detail.startswith("re-admitted")
    assert reference.events[2].cubes == (0, 1)


def test_reference_story_final_state(reference: Prediction) -> None:
    assert reference.final == {
        "subslicing-check": "admitted",
        "superslicing-check": "pending",
        "vllm-prefill": "admitted",
        "vllm-decode": "admitted",
    }
    assert reference.chips_in_use == 48 + 32 + 32
    assert reference.reasons["superslicing-check"].startswith("needs 2 completely free cubes (128 chips); 0 free")
    by_workload = defaultdict(list)
    for p in reference.placements:
        by_workload[p.workload].append((p.cube, p.offset_chips, p.chips))
    assert by_workload == {
        # re-admitted after vllm-prefill took half of cube 0: the empty cube 1 is the one domain
        # that holds all six slices (cube 0's half holds four), so Kueue's best fit puts it there whole
        "subslicing-check": [(1, 0, 8), (1, 8, 8), (1, 16, 8), (1, 24, 8), (1, 32, 8), (1, 40, 8)],
        "vllm-prefill": [(0, 0, 8), (0, 8, 8), (0, 16, 8), (0, 24, 8)],
        # cube 0's free half holds exactly four, the tightest fit (cube 1 has only two left)
        "vllm-decode": [(0, 32, 8), (0, 40, 8), (0, 48, 8), (0, 56, 8)],
    }


def test_reference_map(reference: Prediction) -> None:
    assert render_map(reference) == [
        "cube 0 | BBBB BBBB CCCC CCCC |",
        "cube 1 | AAAA AAAA AAAA .... |",
        "A = subslicing-check (low, 6 x 2x2x2)",
        "B = vllm-prefill (high, 4 x 2x2x2)",
        "C = vllm-decode (high, 4 x 2x2x2)",
        ". = free; one cell = 4 chips, 16 cells per cube",
        "pending: superslicing-check (medium, 4x4x8)",
    ]
    assert render_map(reference, cubes=1)[:2] == ["cube 0 | BBBB BBBB CCCC CCCC |", "... 1 more cube not shown"]


def test_reference_narrative(reference: Prediction) -> None:
    lines = narrative(reference)
    assert lines[:5] == [
        "subslicing-check (low, 6 x 2x2x2) is admitted into cube 0.",
        "superslicing-check (medium, 4x4x8) preempts subslicing-check (low) to take cubes 0-1.",
        "vllm-prefill (high, 4 x 2x2x2) preempts superslicing-check (medium) to take cube 0.",
        "subslicing-check (low, 6 x 2x2x2) is re-admitted into cube 1.",
        "vllm-decode (high, 4 x 2x2x2) is admitted into cube 0.",
    ]
    assert lines[5].startswith("superslicing-check (medium, 4x4x8) stays pending: needs 2 completely free cubes")
    assert lines[-1] == "Final: 3 admitted, 1 pending; 112 of 128 chips in use."


def test_requests_from_capacity_workloads() -> None:
    workloads = [
        Workload("subslicing-check", "JobSet", "low", "2x2x2", 6, 8, 2, 1536),
        Workload("vllm-prefill", "LeaderWorkerSet", "-", "2x2x2", 3, 8, 2, 1536),
    ]
    # A JobSet is one Workload; an LWS is one per group (Kueue's leaderworkerset_reconciler.go).
    assert requests_from_workloads(workloads, {"low": 1000}) == [
        Request("subslicing-check", 1000, "2x2x2", 6, 0),
        *(Request(f"vllm-prefill/{g}", 0, "2x2x2", 1, 1, lws="vllm-prefill") for g in range(3)),
    ]
    with pytest.raises(ValueError, match="unknown priority level 'low'"):
        requests_from_workloads(workloads[:1], {"high": 3000})


def test_an_lws_is_admitted_group_by_group() -> None:
    # Kueue makes one Workload per LWS group, so two of three 2x4x4 groups run on one cube.
    groups = [Request(f"x/{g}", 3000, "2x4x4", 1, 0, lws="x") for g in range(3)]
    result = predict(groups, 1, TPU7X)
    assert result.groups("x") == (2, 3)
    assert result.final == {"x/0": "admitted", "x/1": "admitted", "x/2": "pending"}
    assert result.where("x") == "cube 0 [0-64)"
    # Like events of one LWS's groups make one sentence; the map gives the LWS one letter.
    assert narrative(result)[0] == "x groups 0-1 (high, 2x4x4 each) are admitted into cube 0."
    assert render_map(result) == [
        "cube 0 | AAAA AAAA AAAA AAAA |",
        "A = x (high, 2 of 3 groups x 2x4x4)",
        ". = free; one cell = 4 chips, 16 cells per cube",
        "pending: x/2 (high, 2x4x4)",
    ]
    with pytest.raises(KeyError):
        result.groups("y")
    with pytest.raises(ValueError, match="must share priority"):
        predict([*groups, Request("x/3", 1000, "2x4x4", 1, 0, lws="x")], 1, TPU7X)


def test_an_lws_groups_are_tried_before_the_re_tries_of_their_victims() -> None:
    # The cube is full of lows and w waits. x/0 preempts d; x/1, still in Kueue's queue above w,
    # takes the rest of d's partition before w is re-tried, so w is never admitted (A5, A7).
    lows = [Request("a", 1000, "2x4x4", 1, 0), Request("c", 1000, "2x2x4", 1, 1), Request("d", 1000, "2x2x4", 1, 2)]
    waiting = Request("w", 1000, "2x2x1", 1, 3)
    groups = [Request(f"x/{g}", 3000, "2x2x2", 1, 4, lws="x") for g in range(2)]
    result = predict([*lows, waiting, *groups], 1, TPU7X)
    assert result.groups("x") == (2, 2)
    assert [(e.workload, e.action) for e in result.events if e.workload in ("w", "d")] == [
        ("d", "admitted"),
        ("w", "waiting"),
        ("d", "preempted"),
    ]
    # Two separate arrivals instead: w is re-admitted between them and preempted by the second.
    apart = [Request("x0", 3000, "2x2x2", 1, 4), Request("x1", 3000, "2x2x2", 1, 5)]
    assert ("w", "preempted") in [(e.workload, e.action) for e in predict([*lows, waiting, *apart], 1, TPU7X).events]


def test_preemption_takes_lowest_priority_most_recent_then_minimises() -> None:
    # cube 0: d (low, whole cube); cube 1: a (low, half) + b (medium, half).
    requests = [
        Request("d", 1000, "4x4x4", 1, 0),
        Request("a", 1000, "2x4x4", 1, 1),
        Request("b", 2000, "2x4x4", 1, 2),
        Request("h", 3000, "4x4x4", 1, 3),
    ]
    result = predict(requests, 2, TPU7X)
    # Kueue's order tries a (low, newest) first, which is not enough; d makes room and a is dropped again.
    admitted = next(e for e in result.events if e.workload == "h" and e.action == "admitted")
    assert admitted.victims == ("d",)
    assert result.final == {"d": "pending", "a": "admitted", "b": "admitted", "h": "admitted"}


def test_a_preempted_workload_may_preempt_a_lower_one_when_retried() -> None:
    requests = [
        Request("l", 1000, "2x4x4", 1, 0),  # cube 0, first half
        Request("x", 3000, "2x4x4", 1, 1),  # cube 0, second half
        Request("m", 2000, "2x4x4", 1, 2),  # cube 1
        Request("m2", 2000, "2x4x4", 1, 3),  # cube 1
        Request("n", 2000, "4x4x4", 1, 4),  # cube 2
        Request("h", 3000, "4x4x8", 1, 5),  # needs two whole cubes: l's half cube is no use to it
    ]
    result = predict(requests, 3, TPU7X)
    assert [(e.workload, e.action, e.victims) for e in result.events if e.step == 6] == [
        ("n", "preempted", ()),
        ("m2", "preempted", ()),
        ("m", "preempted", ()),
        ("h", "admitted", ("n", "m2", "m")),  # Kueue's order: newest medium first; l was tried and dropped
        ("l", "preempted", ()),
        ("m", "admitted", ("l",)),  # re-tried before m2 (same priority, created earlier)
    ]
    assert result.pending == ("l", "m2", "n")
    assert "m (medium, 2x4x4) comes back and preempts l (low) to take cube 0." in narrative(result)


def test_equal_priority_never_preempts() -> None:
    result = predict([Request("x", 1000, "4x4x4", 1, 0), Request("y", 1000, "2x2x1", 1, 1)], 1, TPU7X)
    assert [e.action for e in result.events] == ["admitted", "waiting"]
    assert result.reasons["y"] == (
        "needs 1 free aligned 2x2x1 partition (4 chips); 0 free, and no lower-priority workload to preempt"
    )


def test_oversized_request_waits_and_bad_inputs_are_refused() -> None:
    result = predict([Request("big", 1000, "4x8x8", 1, 0)], 2, TPU7X)
    assert result.final == {"big": "pending"}
    assert result.placements == ()
    with pytest.raises(TopologyError, match="odd"):
        predict([Request("odd", 1, "3x3x3", 1, 0)], 2, TPU7X)
    with pytest.raises(TopologyError, match="no cubes"):
        predict([], 2, CATALOG["v5p"])
    with pytest.raises(ValueError, match="repeated: x"):
        predict([Request("x", 1, "2x2x1", 1, 0), Request("x", 1, "2x2x1", 1, 1)], 1, TPU7X)
    with pytest.raises(ValueError, match="slices"):
        Request("x", 1, "2x2x1", 0, 0)


def test_cube_span() -> None:
    assert cube_span([3]) == "cube 3"
    assert cube_span([1, 0]) == "cubes 0-1"
    assert cube_span([0, 2, 3, 4]) == "cubes 0, 2-4"
    assert cube_span([]) == "no cube"


def test_event_and_placement_are_frozen(reference: Prediction) -> None:
    with pytest.raises(AttributeError):
        reference.events[0].step = 9  # type: ignore[misc]
    assert isinstance(reference.events[0], Event)
    assert isinstance(reference.placements[0], Placement)


# ---------------------------------------------------------------- properties


def _arrivals(requests: list[Request]) -> list[list[Request]]:
    """A5's arrivals from scratch: one request, or all of an LWS's groups at its first group's place."""
    ordered = sorted(requests, key=lambda r: (r.order, r.name))
    found: list[list[Request]] = []
    for request in ordered:
        same = [a for a in found if request.lws and a[0].lws == request.lws]
        if same:
            same[0].append(request)
        else:
            found.append([request])
    return found


def _as_groups(draw: st.DrawFn, requests: list[Request]) -> list[Request]:
    """Some requests become LeaderWorkerSets: one one-slice request per group, arriving together (A1)."""
    found: list[Request] = []
    for r in requests:
        if draw(st.integers(min_value=0, max_value=3)) == 0:
            found += [Request(f"{r.name}/{g}", r.priority, r.shape, 1, r.order, lws=r.name) for g in range(r.slices)]
        else:
            found.append(r)
    return found


SHAPES = ["2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8", "4x8x8"]
SUPER_CUBES = {"4x4x8": 2, "4x8x8": 4}
CHIPS = {"2x2x1": 4, "2x2x2": 8, "2x2x4": 16, "2x4x4": 32, "4x4x4": 64}


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[Request], int]:
    cubes = draw(st.integers(min_value=1, max_value=4))
    count = draw(st.integers(min_value=0, max_value=10))
    requests = [
        Request(
            name=f"w{i}",
            priority=draw(st.sampled_from([0, 1000, 2000, 3000])),
            shape=draw(st.sampled_from(SHAPES)),
            slices=draw(st.integers(min_value=1, max_value=5)),
            order=draw(st.integers(min_value=0, max_value=20)),
        )
        for i in range(count)
    ]
    return _as_groups(draw, requests), cubes


def _cells(requests: list[Request], result: Prediction) -> dict[tuple[int, int], str]:
    """Occupied 4-chip cells -> owner, checking the placement rules on the way."""
    owner: dict[tuple[int, int], str] = {}
    by_name = {r.name: r for r in requests}
    for p in result.placements:
        request = by_name[p.workload]
        assert 0 <= p.cube < result.cubes
        assert p.offset_chips >= 0
        assert p.offset_chips + p.chips <= CUBE
        if request.shape in SUPER_CUBES:
            assert (p.offset_chips, p.chips) == (0, CUBE)
        else:
            assert p.chips == CHIPS[request.shape]
            assert p.offset_chips % p.chips == 0  # aligned partition inside one cube
        for cell in range(p.offset_chips // 4, (p.offset_chips + p.chips) // 4):
            assert (p.cube, cell) not in owner, "two placements overlap"
            owner[p.cube, cell] = p.workload
    return owner


def _room(request: Request, cubes: int, taken: set[tuple[int, int]]) -> bool:
    """From scratch: does `request` fit when the cells in `taken` are unavailable?"""
    if request.shape in SUPER_CUBES:
        free_cubes = sum(all((c, i) not in taken for i in range(16)) for c in range(cubes))
        return free_cubes >= SUPER_CUBES[request.shape] * request.slices
    size = CHIPS[request.shape] // 4
    blocks = sum(
        all((c, i) not in taken for i in range(start, start + size))
        for c in range(cubes)
        for start in range(0, 16, size)
    )
    return blocks >= request.slices


@settings(max_examples=100, deadline=None)
@given(scenarios())
def test_invariants(scenario: tuple[list[Request], int]) -> None:
    requests, cubes = scenario
    result = predict(requests, cubes, TPU7X)
    owner = _cells(requests, result)
    by_name = {r.name: r for r in requests}

    assert result.chips_in_use == 4 * len(owner) <= cubes * CUBE
    assert set(result.final) == set(by_name)
    for name, state in result.final.items():
        request = by_name[name]
        placed = [p for p in result.placements if p.workload == name]
        if state == "pending":
            assert not placed
            # Sound: even evicting every strictly lower-priority admitted workload would not make room.
            taken = {cell for cell, who in owner.items() if by_name[who].priority >= request.priority}
            assert not _room(request, cubes, taken), name
        else:
            assert state == "admitted"
            per_slice = SUPER_CUBES.get(request.shape, 1)
            assert len(placed) == request.slices * per_slice  # all or nothing
            for index in range(request.slices):
                assert len({p.cube for p in placed if p.slice_index == index}) == per_slice

    for event in result.events:
        if event.action == "preempted":
            assert by_name[event.by].priority > by_name[event.workload].priority
    arrivals = [e for e in result.events if e.action in ("admitted", "waiting")]
    assert len({e.step for e in arrivals}) == len(_arrivals(requests))  # every arrival decided
    for step, arrival in enumerate(_arrivals(requests), start=1):  # each of its requests once, first
        first = [e.workload for e in result.events if e.step == step and e.action != "preempted"][: len(arrival)]
        assert first == [r.name for r in arrival]


@settings(max_examples=30, deadline=None)
@given(scenarios(), st.randoms(use_true_random=False))
def test_deterministic_and_independent_of_input_order(scenario: tuple[list[Request], int], rng: random.Random) -> None:
    requests, cubes = scenario
    first = predict(requests, cubes, TPU7X)
    assert predict(list(requests), cubes, TPU7X) == first
    shuffled = list(requests)
    rng.shuffle(shuffled)
    assert predict(shuffled, cubes, TPU7X) == first
    assert render_map(predict(shuffled, cubes, TPU7X)) == render_map(first)
    assert narrative(predict(shuffled, cubes, TPU7X)) == narrative(first)


@settings(max_examples=30, deadline=None)
@given(scenarios())
def test_map_matches_placements(scenario: tuple[list[Request], int]) -> None:
    requests, cubes = scenario
    result = predict(requests, cubes, TPU7X)
    lines = render_map(result)
    rows = [line.split("|")[1].replace(" ", "") for line in lines[:cubes]]
    assert all(len(row) == 16 for row in rows)
    free = sum(row.count(".") for row in rows)
    assert free * 4 == cubes * CUBE - result.chips_in_use
    legend = [line for line in lines if " = " in line and not line.startswith(".")]
    assert len(legend) == len({r.lws or r.name for r in result.requests if result.final[r.name] == "admitted"})


# ---------------------------------------------------------------- pinned outcomes (issue 15)

# Each scenario's exact outcome, worked out by hand from A1-A8 and matching the model before its
# indexes were added: (events as (step, workload, action, cubes, victims, by), final, placements
# as (workload, slice, cube, offset_chips, chips), reasons of the pending workloads).
NO_LOWER = "0 free, and no lower-priority workload to preempt"
PINNED: dict[
    str, tuple[list[Request], int, list[tuple[object, ...]], dict[str, str], list[tuple[object, ...]], dict[str, str]]
] = {
    # Rising priorities: each arrival evicts the lowest admitted; the victim has nothing below it to take.
    "rising": (
        [Request(f"w{i}", i, "4x4x4", 1, i) for i in range(5)],
        3,
        [
            (1, "w0", "admitted", (0,), (), ""),
            (2, "w1", "admitted", (1,), (), ""),
            (3, "w2", "admitted", (2,), (), ""),
            (4, "w0", "preempted", (0,), (), "w3"),
            (4, "w3", "admitted", (0,), ("w0",), ""),
            (5, "w1", "preempted", (1,), (), "w4"),
            (5, "w4", "admitted", (1,), ("w1",), ""),
        ],
        {"w0": "pending", "w1": "pending", "w2": "admitted", "w3": "admitted", "w4": "admitted"},
        [("w2", 0, 2, 0, 64), ("w3", 0, 0, 0, 64), ("w4", 0, 1, 0, 64)],
        {
            "w0": f"needs 1 free aligned 4x4x4 partition (64 chips); {NO_LOWER}",
            "w1": f"needs 1 free aligned 4x4x4 partition (64 chips); {NO_LOWER}",
        },
    ),
    # Falling priorities: nothing is ever preempted; the late arrivals wait.
    "falling": (
        [Request(f"w{i}", 10 - i, "4x4x4", 1, i) for i in range(4)],
        2,
        [
            (1, "w0", "admitted", (0,), (), ""),
            (2, "w1", "admitted", (1,), (), ""),
            (3, "w2", "waiting", (), (), ""),
            (4, "w3", "waiting", (), (), ""),
        ],
        {"w0": "admitted", "w1": "admitted", "w2": "pending", "w3": "pending"},
        [("w0", 0, 0, 0, 64), ("w1", 0, 1, 0, 64)],
        {
            "w2": f"needs 1 free aligned 4x4x4 partition (64 chips); {NO_LOWER}",
            "w3": f"needs 1 free aligned 4x4x4 partition (64 chips); {NO_LOWER}",
        },
    ),
    # A super-slice evicts two priorities at once (lowest first); neither victim can come back.
    "superslice": (
        [Request("a", 1, "2x4x4", 2, 0), Request("b", 2, "2x4x4", 2, 1), Request("c", 3, "4x4x8", 1, 2)],
        2,
        [
            (1, "a", "admitted", (0,), (), ""),
            (2, "b", "admitted", (1,), (), ""),
            (3, "a", "preempted", (0,), (), "c"),
            (3, "b", "preempted", (1,), (), "c"),
            (3, "c", "admitted", (0, 1), ("a", "b"), ""),
        ],
        {"a": "pending", "b": "pending", "c": "admitted"},
        [("c", 0, 0, 0, 64), ("c", 0, 1, 0, 64)],
        {
            "a": f"needs 2 free aligned 2x4x4 partitions (64 chips); {NO_LOWER}",
            "b": f"needs 2 free aligned 2x4x4 partitions (64 chips); {NO_LOWER}",
        },
    ),
    # Kueue's best fit, level by level: the domain with the fewest slices that still holds them all
    # (tas_flavor_snapshot.go findBestFitDomainBy), most slices first when none does.
    "best fit": (
        [
            Request("x", 0, "2x2x2", 1, 0),
            Request("big", 0, "2x4x4", 1, 1),  # the free half of cube 0, not the empty cube 1
            # cube 0 (6 free cells) over cube 1 (16); in it the 2x2x4 [16-32) (4 cells) over the
            # fragment [8-16) (2): its first 2x2x2 whole, then the best fit of the other for the third
            Request("y", 0, "2x2x1", 3, 2),
            Request("z", 0, "2x2x4", 1, 3),  # cube 0 has no free 2x2x4 left: cube 1
        ],
        2,
        [
            (1, "x", "admitted", (0,), (), ""),
            (2, "big", "admitted", (0,), (), ""),
            (3, "y", "admitted", (0,), (), ""),
            (4, "z", "admitted", (1,), (), ""),
        ],
        {"x": "admitted", "big": "admitted", "y": "admitted", "z": "admitted"},
        [
            ("x", 0, 0, 0, 8),
            ("big", 0, 0, 32, 32),
            ("y", 0, 0, 16, 4),
            ("y", 1, 0, 20, 4),
            ("y", 2, 0, 24, 4),
            ("z", 0, 1, 0, 16),
        ],
        {},
    ),
    # h needs a cube: Kueue's order tries l, then m2, then m; l is dropped again by the minimisation.
    # The re-try pass then lets m (created before m2) come back by preempting l.
    "retry cascade": (
        [
            Request("l", 1, "2x4x4", 1, 0),
            Request("f", 3, "2x4x4", 1, 1),
            Request("m", 2, "2x4x4", 1, 2),
            Request("m2", 2, "2x4x4", 1, 3),
            Request("h", 4, "4x4x4", 1, 4),
        ],
        2,
        [
            (1, "l", "admitted", (0,), (), ""),
            (2, "f", "admitted", (0,), (), ""),
            (3, "m", "admitted", (1,), (), ""),
            (4, "m2", "admitted", (1,), (), ""),
            (5, "m2", "preempted", (1,), (), "h"),
            (5, "m", "preempted", (1,), (), "h"),
            (5, "h", "admitted", (1,), ("m2", "m"), ""),
            (5, "l", "preempted", (0,), (), "m"),
            (5, "m", "admitted", (0,), ("l",), ""),
        ],
        {"l": "pending", "f": "admitted", "m": "admitted", "m2": "pending", "h": "admitted"},
        [("f", 0, 0, 32, 32), ("m", 0, 0, 0, 32), ("h", 0, 1, 0, 64)],
        {
            "l": f"needs 1 free aligned 2x4x4 partition (32 chips); {NO_LOWER}",
            "m2": f"needs 1 free aligned 2x4x4 partition (32 chips); {NO_LOWER}",
        },
    ),
    # Two cubes for h: l (lowest, newest) first, then s1, then s2 empties cube 0; m (priority 3) is spared.
    "mixed": (
        [
            Request("s1", 1, "2x2x1", 4, 0),
            Request("s2", 2, "2x2x2", 3, 1),
            Request("m", 3, "4x4x4", 1, 2),
            Request("l", 1, "4x4x4", 1, 3),
            Request("h", 4, "4x4x8", 1, 4),
        ],
        3,
        [
            (1, "s1", "admitted", (0,), (), ""),
            (2, "s2", "admitted", (0,), (), ""),
            (3, "m", "admitted", (1,), (), ""),
            (4, "l", "admitted", (2,), (), ""),
            (5, "l", "preempted", (2,), (), "h"),
            (5, "s1", "preempted", (0,), (), "h"),
            (5, "s2", "preempted", (0,), (), "h"),
            (5, "h", "admitted", (0, 2), ("l", "s1", "s2"), ""),
        ],
        {"s1": "pending", "s2": "pending", "m": "admitted", "l": "pending", "h": "admitted"},
        [("m", 0, 1, 0, 64), ("h", 0, 0, 0, 64), ("h", 0, 2, 0, 64)],
        {
            "s1": f"needs 4 free aligned 2x2x1 partitions (16 chips); {NO_LOWER}",
            "s2": f"needs 3 free aligned 2x2x2 partitions (24 chips); {NO_LOWER}",
            "l": f"needs 1 free aligned 4x4x4 partition (64 chips); {NO_LOWER}",
        },
    ),
}


@pytest.mark.parametrize("name", list(PINNED))
def test_pinned_outcomes(name: str) -> None:
    requests, cubes, events, final, placements, reasons = PINNED[name]
    result = predict(list(reversed(requests)), cubes, TPU7X)
    assert [(e.step, e.workload, e.action, e.cubes, e.victims, e.by) for e in result.events] == events
    assert result.final == final
    assert [(p.workload, p.slice_index, p.cube, p.offset_chips, p.chips) for p in result.placements] == placements
    assert {name: result.reasons[name] for name in result.pending} == reasons


# ---------------------------------------------------------------- replayed from scratch

ALL_SHAPES = [*SHAPES, "4x4x12", "8x8x8"]
ALL_SUPER = {**SUPER_CUBES, "4x4x12": 3, "8x8x8": 8}
_SPAN = re.compile(r"cube (\d+) ((?:\[\d+-\d+\) ?)+)")


@st.composite
def orderings(draw: st.DrawFn) -> tuple[list[Request], int]:
    """Up to 30 requests on up to 8 cubes, priorities random, rising, falling or all equal."""
    cubes = draw(st.integers(min_value=1, max_value=8))
    count = draw(st.integers(min_value=0, max_value=30))
    mode = draw(st.sampled_from(["random", "rising", "falling", "equal"]))
    requests = []
    for i in range(count):
        priority = {"rising": i, "falling": -i, "equal": 7}.get(mode)
        requests.append(
            Request(
                name=f"w{i}",
                priority=draw(st.sampled_from([0, 1, 2, 3])) if priority is None else priority,
                shape=draw(st.sampled_from(ALL_SHAPES)),
                slices=draw(st.integers(min_value=1, max_value=4)),
                order=draw(st.integers(min_value=0, max_value=count)) if mode == "random" else i,
            )
        )
    return _as_groups(draw, requests), cubes


def _blocks(request: Request, cubes: int, taken: set[tuple[int, int]]) -> tuple[int, int]:
    """(free blocks of the request's kind, blocks it needs) when the cells in `taken` are unavailable."""
    if request.shape in ALL_SUPER:
        free = sum(all((c, i) not in taken for i in range(16)) for c in range(cubes))
        return free, ALL_SUPER[request.shape] * request.slices
    size = CHIPS[request.shape] // 4
    free = sum(
        all((c, i) not in taken for i in range(start, start + size))
        for c in range(cubes)
        for start in range(0, 16, size)
    )
    return free, request.slices


def _fits(request: Request, cubes: int, taken: set[tuple[int, int]]) -> bool:
    free, need = _blocks(request, cubes, taken)
    return free >= need


@settings(max_examples=80, deadline=None)
@given(orderings())
def test_events_replay_to_the_final_state(scenario: tuple[list[Request], int]) -> None:
    """Replays the events cell by cell and checks each decision against A1-A7 from scratch."""
    requests, cubes = scenario
    result = predict(requests, cubes, TPU7X)
    by_name = {r.name: r for r in requests}
    batches = _arrivals(requests)
    holding: dict[str, set[tuple[int, int]]] = {}  # admitted workload -> its cells

    def taken(exclude: frozenset[str] | set[str] = frozenset()) -> set[tuple[int, int]]:
        return {cell for who, cells in holding.items() if who not in exclude for cell in cells}

    decided: dict[int, int] = {}  # step -> how many of its arrival's requests were decided
    preempted_now: list[str] = []
    for event in result.events:
        request = by_name[event.workload]
        if event.action == "preempted":
            assert event.workload in holding
            assert by_name[event.by].priority > request.priority  # LowerPriority only (A6)
            assert {c for c, _ in holding[event.workload]} == set(event.cubes)
            preempted_now.append(event.workload)
            continue
        batch = batches[event.step - 1]
        if decided.get(event.step, 0) < len(batch):  # a step's first decisions are its arrival's (A5)
            assert request is batch[decided.get(event.step, 0)]
            decided[event.step] = decided.get(event.step, 0) + 1
            assert not event.detail.startswith("re-admitted")
        else:  # then come re-tries, only after a preemption, only of lower priorities (A7)
            assert event.action == "admitted" and "re-admitted" in event.detail
            assert request.priority < batch[0].priority
            members = {r.name for r in batch}
            assert any(e.step == event.step and e.workload in members and e.victims for e in result.events)
        if event.action == "waiting":
            assert event.workload not in holding
            lower = {who for who in holding if by_name[who].priority < request.priority}
            assert not _fits(request, cubes, taken(lower))  # even evicting every lower one (A6)
            assert preempted_now == []
            continue
        # admitted: the victims are exactly the evictions just before, in order, all lower
        assert list(event.victims) == preempted_now
        before = taken()
        for victim in event.victims:
            assert by_name[victim].priority < request.priority
        evicted = {victim: holding.pop(victim) for victim in event.victims}
        if evicted:
            # Preempting was needed, it was enough, and each victim was needed (the minimisation).
            assert not _fits(request, cubes, before)
            assert _fits(request, cubes, taken())
            for cells_of_victim in evicted.values():
                assert not _fits(request, cubes, taken() | cells_of_victim)
        else:
            assert _fits(request, cubes, before)
        cells = set()
        for cube, ranges in _SPAN.findall(event.detail.rsplit("; ", 1)[-1]):
            for start, end in re.findall(r"\[(\d+)-(\d+)\)", ranges):
                cells |= {(int(cube), i) for i in range(int(start) // 4, int(end) // 4)}
        assert len(cells) * 4 == CHIPS.get(request.shape, CUBE * ALL_SUPER.get(request.shape, 0)) * request.slices
        assert not cells & taken(), "placed on occupied cells"
        assert {c for c, _ in cells} == set(event.cubes)
        holding[event.workload] = cells
        preempted_now = []

    assert preempted_now == []
    assert decided == {step: len(batch) for step, batch in enumerate(batches, start=1)}
    assert set(result.admitted) == set(holding)
    placed = {
        (p.cube, i) for p in result.placements for i in range(p.offset_chips // 4, (p.offset_chips + p.chips) // 4)
    }
    assert placed == taken()
    for cube in range(cubes):  # no cube over capacity
        assert sum(p.chips for p in result.placements if p.cube == cube) <= CUBE
    for name in result.pending:  # settled: no pending workload fits, even by preempting (A7)
        request = by_name[name]
        lower = {who for who in holding if by_name[who].priority < request.priority}
        assert not _fits(request, cubes, taken(lower))
        assert result.reasons[name].startswith("needs ")
        for other in result.admitted:  # so a pending one never outranks an admitted twin
            twin = by_name[other]
            if (twin.shape, twin.slices) == (request.shape, request.slices):
                assert twin.priority >= request.priority


# ---------------------------------------------------------------- the same model, written plainly

LEVELS = {"2x2x1": 0, "2x2x2": 1, "2x2x4": 2, "2x4x4": 3, "4x4x4": 4}  # a block of level L is 2**L cells


class _Plain:
    """A1-A8 read literally, with none of predict's indexes: a cell -> owner map, every fit counted
    from scratch, Kueue's candidate order by sorting, and after every arrival a pass over every
    pending workload in queue order (A7's skipped re-tries are claimed to admit nothing; this
    checks that too). Quadratic and more, and small enough to read against the docstring."""

    def __init__(self, requests: list[Request], cubes: int) -> None:
        self.cubes = cubes
        self.requests = sorted(requests, key=lambda r: (r.order, r.name))
        self.queue = sorted(requests, key=lambda r: (-r.priority, r.order, r.name))
        self.owner: dict[tuple[int, int], str] = {}
        self.pieces: dict[str, list[tuple[int, int, int, int]]] = {}  # admitted -> (slice, cube, cell, level)
        self.seq: dict[str, int] = {}  # admitted -> when (larger is more recent)
        self.pending: set[str] = set()
        self.events: list[Event] = []
        self.by_name = {r.name: r for r in requests}

    @staticmethod
    def demand(request: Request) -> tuple[int, int, int]:
        """(block level, blocks in all, blocks per slice)."""
        if request.shape in ALL_SUPER:
            return 4, ALL_SUPER[request.shape] * request.slices, ALL_SUPER[request.shape]
        return LEVELS[request.shape], request.slices, 1

    def cells(self, names: set[str] | list[str]) -> set[tuple[int, int]]:
        return {cell for cell, who in self.owner.items() if who in names}

    def free_blocks(self, level: int, taken: set[tuple[int, int]]) -> int:
        size = 1 << level
        return sum(
            all((c, i) not in taken for i in range(start, start + size))
            for c in range(self.cubes)
            for start in range(0, 16, size)
        )

    def fits(self, request: Request, taken: set[tuple[int, int]]) -> bool:
        level, blocks, _ = self.demand(request)
        return self.free_blocks(level, taken) >= blocks

    def lower(self, request: Request) -> list[str]:
        return [n for n in self.pieces if self.by_name[n].priority < request.priority]

    def search(self, request: Request) -> tuple[bool, list[str]]:
        taken = set(self.owner)
        if self.fits(request, taken):
            return True, []
        lower = self.lower(request)
        if not self.fits(request, taken - self.cells(lower)):
            return False, []
        order = sorted(lower, key=lambda n: (self.by_name[n].priority, -self.seq[n]))  # A6
        chosen: list[str] = []
        released: set[tuple[int, int]] = set()
        for name in order:
            chosen.append(name)
            released |= self.cells([name])
            if self.fits(request, taken - released):
                break
        kept = [chosen[-1]]
        for name in reversed(chosen[:-1]):
            without = released - self.cells([name])
            if self.fits(request, taken - without):
                released = without
            else:
                kept.append(name)
        return True, list(reversed(kept))

    def place(self, level: int, count: int) -> list[tuple[int, int]]:
        """A4: Kueue's best fit, level by level from the cubes down: (cube, first cell) per piece."""
        taken = set(self.owner)

        def slices(domain: tuple[int, int, int]) -> int:  # free aligned `level` blocks inside
            cube, size, index = domain
            return sum(
                all((cube, i) not in taken for i in range(start, start + (1 << level)))
                for start in range(index << size, (index + 1) << size, 1 << level)
            )

        def pods(domain: tuple[int, int, int]) -> int:
            cube, size, index = domain
            return sum((cube, i) not in taken for i in range(index << size, (index + 1) << size))

        def fit(domains: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
            ordered = sorted(domains, key=lambda d: (-slices(d), pods(d), d[0], d[2]))
            chosen, rest = [], count
            for i, domain in enumerate(ordered):
                if slices(domain) >= rest:
                    fitting = [d for d in ordered[i:] if slices(d) >= rest]
                    chosen.append(min(fitting, key=lambda d: (slices(d), ordered.index(d))))
                    return chosen
                chosen.append(domain)
                rest -= slices(domain)
            raise AssertionError("no room")

        chosen = fit([(cube, 4, 0) for cube in range(self.cubes)])
        for size in range(3, level - 1, -1):
            chosen = fit([(cube, size, 2 * index + half) for cube, _, index in chosen for half in (0, 1)])
        return sorted((cube, index << level) for cube, _, index in chosen)

    def where(self, name: str) -> tuple[tuple[int, ...], str]:
        by_cube: dict[int, list[int]] = defaultdict(list)
        for cube, cell in sorted(self.cells([name])):
            by_cube[cube].append(cell)
        texts = []
        for cube, cells in sorted(by_cube.items()):
            runs: list[list[int]] = []
            for cell in cells:
                if runs and runs[-1][1] == cell:
                    runs[-1][1] = cell + 1
                else:
                    runs.append([cell, cell + 1])
            texts.append(f"cube {cube} " + " ".join(f"[{4 * a}-{4 * b})" for a, b in runs))
        return tuple(sorted(by_cube)), ", ".join(texts)

    def admit(self, request: Request, victims: list[str], step: int, readmission: bool) -> None:
        for victim in victims:
            cubes, _ = self.where(victim)
            for cell in self.cells([victim]):
                del self.owner[cell]
            del self.pieces[victim], self.seq[victim]
            self.pending.add(victim)
            v = self.by_name[victim]
            detail = f"by {request.name} (priority {request.priority} > {v.priority}); back to pending"
            self.events.append(Event(step, victim, "preempted", detail, cubes, by=request.name))
        level, blocks, per_slice = self.demand(request)
        self.pieces[request.name] = []
        for k, (cube, start) in enumerate(self.place(level, blocks)):
            for i in range(start, start + (1 << level)):
                self.owner[cube, i] = request.name
            self.pieces[request.name].append((k // per_slice, cube, start, level))
        self.seq[request.name] = len(self.events)
        self.pending.discard(request.name)
        cubes, where = self.where(request.name)
        detail = ("re-admitted; " if readmission else "") + where
        if victims:
            detail = f"preempts {', '.join(victims)}; {detail}"
        self.events.append(Event(step, request.name, "admitted", detail, cubes, tuple(victims)))

    def reason(self, request: Request) -> str:
        level, blocks, _ = self.demand(request)
        taken = set(self.owner)
        chips = blocks * (4 << level)
        if request.shape in ALL_SUPER:
            text = f"needs {blocks} completely free cube{'' if blocks == 1 else 's'}"
        else:
            text = f"needs {blocks} free aligned {request.shape} partition{'' if blocks == 1 else 's'}"
        text += f" ({chips} chips); {self.free_blocks(level, taken)} free"
        lower = self.lower(request)
        if not lower:
            return text + ", and no lower-priority workload to preempt"
        many = f"{len(lower)} lower-priority workload{'' if len(lower) == 1 else 's'}"
        room = 4 * (self.cubes * 16 - len(taken) + len(self.cells(lower)))
        if room < chips:
            return text + f", and even preempting all {many} leaves only {room} chips"
        after = self.free_blocks(level, taken - self.cells(lower))
        return text + f", and {after} even after preempting all {many}"

    def run(self) -> Prediction:
        for step, arrival in enumerate(_arrivals(self.requests), start=1):
            for request in arrival:  # an LWS's groups, each in turn, before any re-try (A5)
                fits, victims = self.search(request)
                if fits:
                    self.admit(request, victims, step, readmission=False)
                else:
                    self.events.append(Event(step, request.name, "waiting", self.reason(request)))
                    self.pending.add(request.name)
            arrived = {r.name for r in arrival}
            for waiting in self.queue:  # one pass, in Kueue's queue order; victims come later in it
                if waiting.name in self.pending and waiting.name not in arrived:
                    fits, victims = self.search(waiting)
                    if fits:
                        self.admit(waiting, victims, step, readmission=True)
        placements = [
            Placement(r.name, s, cube, 4 * start, 4 << level)
            for r in self.requests
            if r.name in self.pieces
            for s, cube, start, level in sorted(self.pieces[r.name])
        ]
        return Prediction(
            events=tuple(self.events),
            final={r.name: "admitted" if r.name in self.pieces else "pending" for r in self.requests},
            reasons={r.name: self.where(r.name)[1] if r.name in self.pieces else self.reason(r) for r in self.requests},
            placements=tuple(placements),
            cubes=self.cubes,
            cube_chips=CUBE,
            cell_chips=4,
            requests=tuple(self.requests),
        )


@st.composite
def crowded(draw: st.DrawFn) -> tuple[list[Request], int]:
    """Like `orderings`, but more demand than cubes on average, mostly small shapes: long preemption chains."""
    cubes = draw(st.integers(min_value=1, max_value=4))
    count = draw(st.integers(min_value=1, max_value=40))
    mode = draw(st.sampled_from(["random", "rising", "falling", "rising", "two"]))
    requests = []
    for i in range(count):
        priority = {"rising": i, "falling": -i}.get(mode)
        if priority is None:
            priority = draw(st.sampled_from([0, 1, 2, 3] if mode == "random" else [0, 1]))
        requests.append(
            Request(
                name=f"w{i}",
                priority=priority,
                shape=draw(st.sampled_from([*SHAPES[:4], *SHAPES[:4], *ALL_SHAPES])),
                slices=draw(st.integers(min_value=1, max_value=6)),
                order=i,
            )
        )
    return _as_groups(draw, requests), cubes


@settings(max_examples=150, deadline=None)
@given(st.one_of(orderings(), crowded()))
def test_predict_equals_the_plain_model(scenario: tuple[list[Request], int]) -> None:
    """The whole prediction (events with their details, final states, reasons, placements) is the plain model's."""
    requests, cubes = scenario
    assert predict(requests, cubes, TPU7X) == _Plain(requests, cubes).run()


def test_groups_an_autoscaler_adds_are_a_later_arrival_of_the_same_lws() -> None:
    """`with_added_groups`: numbered on from the LWS's last group, arriving after everything, told
    apart in the narrative, and counted with the first groups in the LWS's totals."""
    first = [
        Request("low", 1000, "2x4x4", 1, 0),
        *(Request(f"x/{g}", 3000, "2x4x4", 1, 1, lws="x") for g in range(2)),
    ]
    requests = with_added_groups(first, {"x": 3})
    assert [r.name for r in requests[3:]] == ["x/2", "x/3", "x/4"]
    assert {r.order for r in requests[3:]} == {2} and all(r.lws == "x" for r in requests[3:])
    result = predict(requests, 3, TPU7X)  # two 2x4x4 slices a cube: 1 low + 5 high fit in three
    assert result.groups("x") == (5, 5)
    story = narrative(result)
    assert story[1] == "x groups 0-1 (high, 2x4x4 each) are admitted into cubes 0-1."
    assert story[2] == "x groups 2-4 (high, 2x4x4 each) are admitted into cubes 1-2."
    with pytest.raises(ValueError, match="no group of it"):
        with_added_groups(first, {"y": 1})
