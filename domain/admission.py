"""Predict what Kueue's topology-aware admission does with a stack's TPU workloads (no Pulumi).

The stack puts every TPU workload (the slicing checks, the model servers) into one
ClusterQueue with `preemption.withinClusterQueue: LowerPriority` and a Topology whose
levels are the reservation block, then the 4x4x4, 2x4x4, 2x2x4, 2x2x2 and 2x2x1
partitions of each cube (reference §8). Quotas are effectively unlimited, so what
decides admission is whether the slices fit on the cubes. `predict` replays the
workloads in creation order and says which ones Kueue admits, which it preempts and
which stay pending, and where each slice lands.

Assumptions (the model is deliberately small; each point names how real Kueue differs):

A1. All-or-nothing workloads. A `Request` is a group of `slices` identical slices
    admitted together or not at all: a JobSet's replicas (Kueue makes one Workload per
    JobSet), or one group of a LeaderWorkerSet. Kueue makes a Workload per LWS group, all
    created at once with one leader and one worker PodSet (kueue@v0.19.2
    pkg/controller/jobs/leaderworkerset/leaderworkerset_reconciler.go filterWorkloads,
    podSets), so it admits and preempts an LWS's groups one by one and can run part of
    an LWS. `requests_from_workloads` turns an LWS of n replicas into n one-slice
    requests `<lws>/0` .. `<lws>/<n-1>` with `lws` set; they arrive together (A5). Kueue
    orders a group's equal Workloads by UID, so which group index runs is not knowable,
    only how many: `Prediction.groups` says that.
A2. Sub-slices sit inside one cube, aligned like a buddy allocator. A shape that the
    generation lists in `subslice_shapes` (2x2x1 .. 4x4x4 for tpu7x) occupies one of
    the aligned partitions of that shape inside a single cube: a 2x2x2 slice takes one
    of the 8 aligned 2x2x2 partitions of a 4x4x4 cube, and so on. The partition levels
    nest (each is two of the next smaller one) and their chip counts double, so
    counting free aligned partitions by chip count is exact. The map's unit ("cell")
    is the smallest sub-slice (2x2x1 = 4 chips = one VM), so a tpu7x cube is 16 cells.
A3. Super-slices take whole free cubes. A multiple of the cube (4x4x8 = 2 cubes)
    needs that many completely free cubes per slice. All cubes are in one reservation
    block (the Topology's top level), connected so any free cubes can form the slice.
A4. Placement is Kueue's BestFit for a required topology (kueue@v0.19.2
    pkg/cache/scheduler/tas_flavor_snapshot.go findTopologyAssignment; default feature
    gates). A domain's slice count is the free aligned partitions of the slice's shape in
    it, its pod count the free hosts (one pod per host). The block holds the workload
    when its slice count reaches the slices asked (findLevelWithFitDomains at the
    required level, the reservation block). Then level by level, cubes first, down to
    the slice's partitions: the children of the domains chosen one level up are pooled
    and sorted most slices first, then fewest free pods, then by label values
    (sortedDomains); they are taken whole until one holds the rest, and that one is
    swapped for the first of the domains with the fewest slices that still hold the
    rest (updateCountsToMinimumGeneric, findBestFitDomainBy). So one cube or partition
    that holds the whole workload is preferred, the tightest such; a workload that no
    single domain holds is spread over the fullest free ones. Each level is given the
    whole slice count again, not each parent's share, as Kueue does. Label values are
    opaque GKE ids; the model orders equal domains by cube number and offset, which is
    the order of the ids when they sort like numbers, so where two domains tie on both
    counts the cube can differ from the real one while what fits does not.
A5. Queue order. Requests arrive one at a time in `order` (ties by name), each after
    the previous one has settled, like creating the objects one by one. An arrival
    that fits is admitted; otherwise it may preempt; otherwise it waits. The groups of
    one LWS are one arrival: each is tried in turn (by name) before the re-tries that
    follow their preemptions (A7), since they sit in Kueue's queue above the victims.
A6. Preemption is LowerPriority within the ClusterQueue: only admitted workloads
    with strictly lower priority are candidates. As in Kueue's classic preemption
    (kueue@v0.19.2 pkg/scheduler/preemption/common/ordering.go CandidatesOrdering),
    candidates are ordered lowest priority first, then most recently admitted first
    (the QuotaReserved condition's time, whole seconds), then by Workload UID, which
    no preview can know: two candidates of one priority admitted within one second are
    a coin toss in Kueue, and the model takes the later admission in its replay. They
    are taken greedily until the request fits (preemption.go, re-running the topology
    assignment with the candidates removed, which for these shapes fits exactly when the
    free partitions suffice), and the targets are then minimised by walking them in
    reverse and keeping out any whose space is not needed. No exhaustive search: greedy plus minimisation, as in
    Kueue. Evictions take effect at once and the victims go back to pending.
A7. Re-tries. After a preemption, pending workloads that could have gained from it
    (those below the preemptor's priority, including the victims) are re-tried in
    Kueue's queue order, highest priority first, then `order`; a re-try may preempt
    too. Re-tries after an admission without eviction, and of workloads at or above
    the preemptor's priority, are skipped because they provably cannot succeed:
    the cells a workload may use (free ones plus those of strictly lower-priority
    workloads) do not grow in those cases, and the greedy search fits a workload
    exactly when evicting every lower-priority workload would.
A8. Nothing finishes: workloads run until preempted (the checks sleep forever and the
    servers serve), node health, admission checks and the slice controller's
    provisioning time are ignored, and there is no quota limit.
"""

from __future__ import annotations

import bisect
import gc
from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol

from domain.topology import Generation, TopologyError

Action = Literal["admitted", "waiting", "preempted"]

# The WorkloadPriorityClass values of the reference demo (§8): low, medium, high.
DEFAULT_PRIORITY_NAMES: Mapping[int, str] = {1000: "low", 2000: "medium", 3000: "high"}

_SYMBOLS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
_OVERFLOW_SYMBOL = "+"
_FREE_SYMBOL = "."
_CELLS_PER_GROUP = 4


@dataclass(frozen=True)
class Request:
    """One Kueue workload: `slices` identical slices of `shape`, admitted all-or-nothing (A1)."""

    name: str
    priority: int
    shape: str
    slices: int
    order: int  # creation order; Kueue sees lower first
    lws: str = ""  # the LeaderWorkerSet this is one group of; its groups arrive together (A5)

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a request needs a name")
        if self.slices < 1:
            raise ValueError(f"{self.name}: slices must be at least 1, got {self.slices}")


@dataclass(frozen=True)
class Event:
    """One thing that happened, in sequence. `step` is the arrival (1-based) that caused it."""

    step: int
    workload: str
    action: Action
    detail: str
    cubes: tuple[int, ...] = ()  # admitted: the cubes it now uses; preempted: the cubes it left
    victims: tuple[str, ...] = ()  # admitted by preemption: whom it evicted, in Kueue's order
    by: str = ""  # preempted: the preemptor

    if not TYPE_CHECKING:  # hidden from the type checker, which would then accept any attribute

        def __getattr__(self, name: str) -> Any:
            """Only reached for an attribute that is not set: `predict`'s events leave `detail` unset
            and keep what it is made of (`_detail`: a function and its arguments, all immutable), so
            the text is written when first read, not once per admission and eviction of the replay."""
            if name == "detail":
                lazy = self.__dict__.get("_detail")
                if lazy is not None:
                    text = self.__dict__["detail"] = lazy[0](*lazy[1:])
                    return text
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


@dataclass(frozen=True)
class Placement:
    """Where one slice (or, for a super-slice, one of its cubes) sits."""

    workload: str
    slice_index: int
    cube: int
    offset_chips: int
    chips: int


@dataclass(frozen=True)
class Prediction:
    """What the model predicts: the events in sequence and the state once the queue settles."""

    events: tuple[Event, ...]
    final: Mapping[str, str]  # workload -> "admitted" | "pending"
    reasons: Mapping[str, str]  # workload -> where it runs, or why it waits
    placements: tuple[Placement, ...]  # admitted workloads only, by request order, slice, cube
    cubes: int
    cube_chips: int
    cell_chips: int
    requests: tuple[Request, ...]  # in queue order

    @property
    def admitted(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.requests if self.final[r.name] == "admitted")

    @property
    def pending(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.requests if self.final[r.name] == "pending")

    @property
    def chips_in_use(self) -> int:
        return sum(p.chips for p in self.placements)

    def members(self, workload: str) -> tuple[Request, ...]:
        """The requests of one workload: its LWS groups, or the request of that name."""
        found = tuple(r for r in self.requests if r.lws == workload)
        return found or tuple(r for r in self.requests if r.name == workload and not r.lws)

    def groups(self, workload: str) -> tuple[int, int]:
        """(admitted, all) of a workload's requests: an LWS's groups, or (0 or 1, 1) for a JobSet."""
        members = self.members(workload)
        if not members:
            raise KeyError(workload)
        return sum(self.final[r.name] == "admitted" for r in members), len(members)

    def where(self, workload: str) -> str:
        """The chip ranges a workload's admitted requests hold, cube by cube, adjacent pieces merged."""
        names = {r.name for r in self.members(workload)}
        by_cube: dict[int, list[tuple[int, int]]] = {}
        for p in self.placements:
            if p.workload in names:
                by_cube.setdefault(p.cube, []).append((p.offset_chips, p.offset_chips + p.chips))
        parts = []
        for cube in sorted(by_cube):
            runs: list[list[int]] = []
            for start, end in sorted(by_cube[cube]):
                if runs and runs[-1][1] == start:
                    runs[-1][1] = end
                else:
                    runs.append([start, end])
            parts.append(f"cube {cube} " + " ".join(f"[{a}-{b})" for a, b in runs))
        return ", ".join(parts) or "nowhere"


class WorkloadLike(Protocol):
    """What `requests_from_workloads` reads (settings.capacity.Workload has it)."""

    @property
    def name(self) -> str: ...
    @property
    def priority(self) -> str: ...
    @property
    def shape(self) -> str: ...
    @property
    def slices(self) -> int: ...
    @property
    def kind(self) -> str: ...


LWS_KIND = "LeaderWorkerSet"


def requests_from_workloads(workloads: Iterable[WorkloadLike], priorities: Mapping[str, int]) -> list[Request]:
    """Turn capacity.workloads() (already in creation order) into requests.

    `priorities` maps a level name ("low", "medium", "high") to its WorkloadPriorityClass
    value; a workload with no class ("-") gets Kueue's default priority 0. A LeaderWorkerSet
    becomes one one-slice request per group, as Kueue makes one Workload per group (A1).
    """
    found = []
    for order, workload in enumerate(workloads):
        if workload.priority == "-":
            value = 0
        elif workload.priority in priorities:
            value = priorities[workload.priority]
        else:
            known = ", ".join(sorted(priorities)) or "none"
            raise ValueError(f"{workload.name}: unknown priority level {workload.priority!r}; known: {known}")
        if workload.kind == LWS_KIND:
            found += [
                Request(f"{workload.name}/{group}", value, workload.shape, 1, order, lws=workload.name)
                for group in range(workload.slices)
            ]
        else:
            found.append(Request(workload.name, value, workload.shape, workload.slices, order))
    return found


# ---------------------------------------------------------------- geometry


@dataclass(frozen=True)
class _Geometry:
    cube_chips: int
    cell_chips: int
    levels: int  # a cube is 2**levels cells; level L is an aligned block of 2**L cells

    @classmethod
    def of(cls, generation: Generation) -> _Geometry:
        cube = generation.cube_topology
        if cube is None or not generation.subslice_shapes:
            raise TopologyError(f"{generation.name} has no cubes, so Kueue's cube partitions do not apply")
        cell = min(generation.subslice(s).chips for s in generation.subslice_shapes)
        ratio = cube.chips // cell
        if cube.chips % cell or ratio & (ratio - 1):
            raise TopologyError(f"{generation.name}: the cube is not a power-of-two number of {cell}-chip cells")
        for text in generation.subslice_shapes:
            chips = generation.subslice(text).chips
            if chips % cell or (chips // cell) & (chips // cell - 1):
                raise TopologyError(f"{generation.name}: sub-slice {text} is not a buddy block of the cube")
        return cls(cube_chips=cube.chips, cell_chips=cell, levels=ratio.bit_length() - 1)

    @property
    def cells(self) -> int:
        return 1 << self.levels


@dataclass(frozen=True)
class _Demand:
    level: int  # block level of one piece
    per_slice: int  # pieces per slice: 1 for a sub-slice, the cube count for a super-slice
    blocks: int  # pieces in all
    chips: int
    superslice: bool


def _demand(request: Request, generation: Generation, geometry: _Geometry) -> _Demand:
    if request.shape in generation.subslice_shapes:
        cells = generation.subslice(request.shape).chips // geometry.cell_chips
        level, per_slice, superslice = cells.bit_length() - 1, 1, False
    else:
        try:
            per_slice = generation.superslice_cubes(request.shape)
        except TopologyError as error:
            raise TopologyError(f"{request.name}: {error}") from error
        level, superslice = geometry.levels, True
    blocks = per_slice * request.slices
    return _Demand(level, per_slice, blocks, blocks * (geometry.cell_chips << level), superslice)


@dataclass(frozen=True)
class _Profile:
    counts: tuple[int, ...]  # free aligned blocks per level: the cube's slice count for slices of that level
    free_cells: int  # its free pods (one pod per host, a host per cell)
    inside: tuple[tuple[tuple[int, ...], ...], ...]  # inside[M][i][L]: free L-blocks in block i of level M


@lru_cache(maxsize=1 << 17)
def _profile(mask: int, levels: int) -> _Profile:
    """Free-space summary of one cube whose occupied cells are the set bits of `mask`."""
    cells = 1 << levels
    free: list[list[bool]] = []
    for level in range(levels + 1):
        size = 1 << level
        block = (1 << size) - 1
        free.append([(mask >> offset) & block == 0 for offset in range(0, cells, size)])
    # bottom-up: a block's free L-blocks are its two halves' (L below its own level), or itself
    rows: list[tuple[tuple[int, ...], ...]] = [tuple((int(is_free),) for is_free in free[0])]
    for size in range(1, levels + 1):
        halves = rows[-1]
        rows.append(
            tuple(
                (*(a + b for a, b in zip(halves[2 * i], halves[2 * i + 1], strict=True)), int(free[size][i]))
                for i in range(cells >> size)
            )
        )
    inside = tuple(rows)
    return _Profile(tuple(sum(row) for row in free), cells - mask.bit_count(), inside)


# ---------------------------------------------------------------- simulation


class _Holding(NamedTuple):  # a tuple: built on every admission, so cheap to build
    request: Request
    level: int  # the block level of each of its pieces (all alike)
    blocks: tuple[int, ...]  # each piece's block index at `level`, cube-major, in allocation order
    spans: tuple[tuple[int, int], ...]  # (cube, occupied-cell bits) per cube, ascending cube
    cubes: tuple[int, ...]  # the cubes of `spans`


class _Search(NamedTuple):
    fits: bool
    victims: tuple[_Holding, ...] = ()
    reason: str = ""


_FITS = _Search(True)


class _Profiles(dict[int, _Profile]):
    """Cell mask -> `_profile` of it, for one cube size (a dict hit is cheaper than the lru_cache call)."""

    def __init__(self, levels: int) -> None:
        super().__init__()
        self.levels = levels

    def __missing__(self, mask: int) -> _Profile:
        profile = self[mask] = _profile(mask, self.levels)
        return profile


_KEY_FIELD = 1 << 10  # the cubes and the cells per cube a best-fit key holds (a reservation block has 144 cubes)
_KEY_FREE, _KEY_SLICES = 10, 20  # bit offsets of the free cells and the slice count in a key
_KEY_CUBE = _KEY_FIELD - 1
_Change = tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int, int], ...], int, int, _Profile]


class _Cubes:
    """Occupancy of the block: one bit mask per cube, free-block counts and, per slice level, the
    cubes that hold a slice of it keyed as Kueue's best fit compares them (A4)."""

    def __init__(self, cubes: int, levels: int) -> None:
        self.levels = levels
        self.width = 1 << levels  # cells per cube
        self.masks = [0] * cubes
        self.profile_of = _Profiles(levels)
        empty = self.profile_of[0]
        self.profiles = [empty] * cubes  # _profile(masks[cube]) for each cube
        self.avail = [count * cubes for count in empty.counts]
        self.free_cells = cubes << levels
        # keys[L]: (slices of level L the cube holds, its free cells, cube) for each cube holding one,
        # packed in one int (_KEY_SLICES, _KEY_FREE) and ascending: the order of tas_flavor_snapshot.go
        # sortedDomains read backwards by slice count
        if cubes > _KEY_FIELD or self.width > _KEY_FIELD:
            raise TopologyError(f"the admission model handles up to {_KEY_FIELD} cubes of {_KEY_FIELD} cells")
        self.keys = [
            [(empty.counts[L] << _KEY_SLICES) | (empty.free_cells << _KEY_FREE) | cube for cube in range(cubes)]
            for L in range(levels + 1)
        ]
        # (old mask, new mask) -> the free-block count changes, the levels whose keys change (level,
        # slices before, after) with the free cells before and after, and the new mask's profile: a
        # cube's masks repeat (aligned pieces), so each change is worked out once
        self.changes: dict[int, _Change] = {}
        self.within: dict[int, tuple[int, ...]] = {}  # (mask, level, count) -> block indexes in that one cube

    def _change(self, old: int, new: int) -> _Change:
        before, after = self.profile_of[old], self.profile_of[new]
        pairs = tuple(enumerate(zip(before.counts, after.counts, strict=True)))
        counts = tuple((L, n - m) for L, (m, n) in pairs if n != m)
        touched = tuple((L, m, n) for L, (m, n) in pairs if m or n)
        change = self.changes[(old << self.width) | new] = (counts, touched, before.free_cells, after.free_cells, after)
        return change

    def _set(self, cube: int, new: int) -> None:
        """Give `cube` the cell mask `new`, keeping the counts and the best-fit keys in step."""
        old = self.masks[cube]
        counts, touched, free_before, free_after, after = self.changes.get((old << self.width) | new) or self._change(
            old, new
        )
        avail, keys = self.avail, self.keys
        for changed, delta in counts:
            avail[changed] += delta
        before_rest, after_rest = (free_before << _KEY_FREE) | cube, (free_after << _KEY_FREE) | cube
        for level, slices_before, slices_after in touched:
            row = keys[level]
            if slices_before:
                del row[bisect_left(row, (slices_before << _KEY_SLICES) | before_rest)]
            if slices_after:
                insort(row, (slices_after << _KEY_SLICES) | after_rest)
        self.masks[cube], self.profiles[cube] = new, after
        self.free_cells += free_after - free_before

    def _cubes_for(self, level: int, count: int) -> list[int]:
        """The cubes Kueue's best fit gives `count` slices of `level` (tas_flavor_snapshot.go
        updateCountsToMinimumGeneric over sortedDomains: most slices first, then fewest free pods,
        then the domain's label values; the last one swapped for the tightest that holds the rest)."""
        row = self.keys[level]
        if row[-1] >> _KEY_SLICES >= count:  # one cube holds them all: the tightest such (findBestFitDomainBy)
            return [row[bisect_left(row, count << _KEY_SLICES)] & _KEY_CUBE]
        chosen: list[int] = []
        taken: set[int] = set()
        rest, high = count, len(row)
        while True:  # the groups of equal slice count, most slices first; each in ascending order
            slices = row[high - 1] >> _KEY_SLICES
            low = bisect_left(row, slices << _KEY_SLICES)
            for index in range(low, high):
                if slices >= rest:
                    best = bisect_left(row, rest << _KEY_SLICES)
                    while row[best] & _KEY_CUBE in taken:
                        best += 1
                    chosen.append(row[best] & _KEY_CUBE)
                    return chosen
                cube = row[index] & _KEY_CUBE
                chosen.append(cube)
                taken.add(cube)
                rest -= slices
            high = low

    def allocate(self, level: int, count: int) -> list[tuple[int, int, int, int]]:
        """Kueue's placement (A4) of `count` slices of `level`: (cube, offset, 1, bits) per piece.

        The cubes first, then each level below them: the children of every domain chosen one level
        up are pooled, sorted and given the whole count again (tas_flavor_snapshot.go
        findTopologyAssignment's descent above the slice level), down to the free blocks of `level`.
        """
        cubes = self._cubes_for(level, count)
        if level == self.levels:  # whole cubes: nothing below to choose
            domains = [(cube, 0) for cube in cubes]
        elif len(cubes) == 1:  # the pieces then depend on that cube's mask alone: worked out once per mask
            cube = cubes[0]
            key = (self.masks[cube] << 16) | (level << 8) | count
            within = self.within.get(key)
            if within is None:
                within = self.within[key] = tuple(index for _, index in self._descend([cube], level, count))
            domains = [(cube, index) for index in within]
        else:
            domains = self._descend(cubes, level, count)
        runs = []
        for cube, index in sorted(domains):
            offset = index << level
            runs.append((cube, offset, 1, ((1 << (1 << level)) - 1) << offset))
        by_cube: dict[int, int] = {}
        for cube, _, _, bits in runs:
            by_cube[cube] = by_cube.get(cube, 0) | bits
        masks = self.masks
        for cube, bits in by_cube.items():
            self._set(cube, masks[cube] | bits)
        return runs

    def _descend(self, cubes: Sequence[int], level: int, count: int) -> list[tuple[int, int]]:
        """(cube, block index) of the `level` blocks Kueue's descent from `cubes` gives `count` slices."""
        profiles = self.profiles
        domains = [(cube, 0) for cube in cubes]  # (cube, block index at the current level)
        for below in range(self.levels - 1, level - 1, -1):
            pooled = []
            for cube, index in domains:
                inside = profiles[cube].inside[below]
                for child in (2 * index, 2 * index + 1):
                    counts = inside[child]
                    if counts[level]:
                        pooled.append((-counts[level], counts[0], cube, child))
            pooled.sort()
            domains = _best_fit(pooled, count)
        return domains

    def release(self, spans: Iterable[tuple[int, int]]) -> None:
        """Free the cells of (cube, bits) spans."""
        masks = self.masks
        for cube, bits in spans:
            self._set(cube, masks[cube] & ~bits)


def _best_fit(domains: Sequence[tuple[int, int, int, int]], count: int) -> list[tuple[int, int]]:
    """updateCountsToMinimumGeneric (tas_flavor_snapshot.go) on domains sorted as sortedDomains sorts
    them, each (-slices, free cells, cube, block): take them whole, most slices first, until one holds
    the rest; that one is swapped for the first of the smallest that do (findBestFitDomainBy)."""
    chosen = []
    rest = count
    for index, (negative, _, cube, block) in enumerate(domains):
        if -negative >= rest:
            best = None
            for candidate in domains[index:]:
                if -candidate[0] >= rest and (best is None or candidate[0] > best[0]):
                    best = candidate
            assert best is not None
            chosen.append((best[2], best[3]))
            return chosen
        chosen.append((cube, block))
        rest += negative
    raise AssertionError("allocate() called without enough free blocks")  # callers check avail first


class _FreeBlocks(dict[int, int]):
    """Cell mask -> free aligned blocks of one level in it (a dict lookup is cheaper than `_profile`)."""

    def __init__(self, level: int, levels: int) -> None:
        super().__init__()
        self.level, self.levels = level, levels

    def __missing__(self, mask: int) -> int:
        count = self[mask] = _profile(mask, self.levels).counts[self.level]
        return count


class _Simulator:
    """The replay (A5-A7), with indexes that keep it near-linear in the number of requests.

    Two facts make it fast without changing a verdict. (1) Releasing cells never lowers a
    free-block count, so the greedy search of A6 fits exactly when evicting every strictly
    lower-priority workload would, and that count is the free blocks plus the occupied
    blocks whose top holder ranks below the request: per block level, a count of occupied
    blocks per top holder's rank and the sorted list of the ranks present (no longer than
    the level's blocks, whatever the number of requests). "Does it reach `need`?" walks that
    list from the lowest rank and stops after at most `need` steps; an update is O(1) plus a
    bisection and a short list insertion. A failed search costs that instead of a sort of all
    priorities and a walk over the holdings. (2) A re-try pass (A7) pops pending
    workloads in queue order and admits exactly those that fit when popped; the others
    change nothing. So the pass jumps straight to the next pending workload that fits
    (`_next_fit`) instead of re-trying every pending workload after every preemption,
    which is what made rising priorities O(n^3).
    """

    def __init__(self, requests: Sequence[Request], cubes: int, generation: Generation) -> None:
        self.geometry = _Geometry.of(generation)
        self.generation = generation
        self.requests = sorted(requests, key=lambda r: (r.order, r.name))
        names = [r.name for r in self.requests]
        if len(set(names)) != len(names):
            duplicates = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(f"request names must be unique; repeated: {', '.join(duplicates)}")
        if cubes < 0:
            raise ValueError(f"cubes must be >= 0, got {cubes}")
        # The arrivals (A5): one request, or every group of one LWS at its first group's place.
        self.arrivals: list[list[Request]] = []
        sets: dict[str, list[Request]] = {}
        for r in self.requests:
            if not r.lws:
                self.arrivals.append([r])
            elif r.lws in sets:
                first = sets[r.lws][0]
                if (r.priority, r.shape, r.slices, r.order) != (first.priority, first.shape, first.slices, first.order):
                    raise ValueError(
                        f"{r.name}: the groups of LWS {r.lws} must share priority, shape, slices and order"
                    )
                sets[r.lws].append(r)
            else:
                sets[r.lws] = [r]
                self.arrivals.append(sets[r.lws])
        self.cubes = cubes
        levels = self.geometry.levels
        by_shape: dict[tuple[str, int], _Demand] = {}  # one parse per shape and slice count, not per request
        self.demands = {}
        for r in self.requests:
            demand = by_shape.get((r.shape, r.slices))
            if demand is None:
                demand = by_shape[r.shape, r.slices] = _demand(r, generation, self.geometry)
            self.demands[r.name] = demand
        self.block = _Cubes(cubes, levels)
        self.holdings: dict[str, _Holding] = {}
        self.pending: dict[str, Request] = {}
        self.events: list[Event] = []
        self.free = [_FreeBlocks(level, levels) for level in range(levels + 1)]  # cell mask -> free blocks
        # Priorities as dense ranks, 0 the lowest.
        distinct = sorted({r.priority for r in self.requests})
        rank_of = {p: rank for rank, p in enumerate(distinct)}
        self.rank = {r.name: rank_of[r.priority] for r in self.requests}
        # request -> (block level, block count, rank): what the replay reads of it most
        self.info = {
            r.name: (d.level, d.blocks, self.rank[r.name]) for r in self.requests for d in (self.demands[r.name],)
        }
        self.by_rank: list[dict[str, _Holding]] = [{} for _ in distinct]  # admitted, in admission order
        self.active: list[int] = []  # ranks that have an admitted workload, ascending
        # counts[L][p]: the occupied aligned blocks of level L whose top holder has rank p (a block
        # strictly inside a piece counts too, its top being the piece's holder); held[L]: the ranks
        # p with counts[L][p] > 0, ascending, at most one per occupied block whatever the number of
        # requests; held_ranks: the rank of each admitted workload, ascending. A level-0 block is a
        # cell, so counts[0] counts cells.
        self.counts = [[0] * len(distinct) for _ in range(levels + 1)]
        self.held: list[list[int]] = [[] for _ in range(levels + 1)]
        self.held_ranks: list[int] = []
        # tops[L][i]: the highest rank holding a cell of aligned block i of level L (cube-major), -1 if
        # free; a block strictly inside one piece is never read and keeps -1 (see _hold)
        self.tops = [[-1] * (cubes << (levels - level)) for level in range(levels + 1)]
        # Kueue's queue order (A7): highest priority first, then creation order, then name.
        queue = sorted(self.requests, key=lambda r: (-r.priority, r.order, r.name))
        self.queue = queue
        self.position = {r.name: index for index, r in enumerate(queue)}
        self.queue_rank = [self.rank[r.name] for r in queue]
        self.queue_blocks = [self.demands[r.name].blocks for r in queue]
        self.queue_key = [-r.priority for r in queue]
        # The queue positions of pending workloads, ascending, grouped by (block level, block count);
        # per level, the groups in ascending block count.
        shapes = sorted({(d.level, d.blocks) for d in self.demands.values()})
        self.waiting: dict[tuple[int, int], list[int]] = {shape: [] for shape in shapes}
        self.by_level: list[list[tuple[int, list[int]]]] = [[] for _ in range(levels + 1)]
        for (level, blocks), positions in self.waiting.items():
            self.by_level[level].append((blocks, positions))
        self.level_waiting: list[list[int]] = [[] for _ in range(levels + 1)]  # the union of each level's groups
        self.slots = {  # request -> its group's list, its level's list and its queue position
            r.name: (self.waiting[d.level, d.blocks], self.level_waiting[d.level], self.position[r.name])
            for r in self.requests
            for d in (self.demands[r.name],)
        }
        self.texts = _Texts(self.geometry.cell_chips, self.geometry.cells)
        self.admitted_text = self.texts.admitted

    # -- indexes

    def _usable(self, rank: int, level: int) -> int:
        """Free `level` blocks once every workload ranked below `rank` is evicted."""
        return self.block.avail[level] + self._below(level, rank, len(self.tops[level]))

    def _below(self, level: int, rank: int, cap: int) -> int:
        """Occupied `level` blocks whose top holder ranks below `rank`, counted up to `cap`.

        Each step adds at least one block, so this takes at most `cap` steps, and never more than
        the block has blocks of that level: the callers ask whether a count reaches a request's
        block count, which is small, and only the reasons count all of them.
        """
        counts, total = self.counts[level], 0
        if cap <= 0:
            return 0
        for holder in self.held[level]:
            if holder >= rank:
                break
            total += counts[holder]
            if total >= cap:
                break
        return total

    def _hold(self, rank: int, piece_level: int, blocks: tuple[int, ...]) -> None:
        """Keep `tops`, `counts` and `held` in step with a holding of `blocks` being admitted."""
        levels, tops, held, counts = self.geometry.levels, self.tops, self.held, self.counts
        # The blocks inside its pieces, their own blocks included, are held by it alone.
        pieces = len(blocks)
        for level in range(piece_level + 1):
            row = counts[level]
            before = row[rank]
            row[rank] = before + (pieces << (piece_level - level))
            if not before:
                insort(held[level], rank)
        # The enclosing blocks: their top holder may change. Only a piece's own block records its
        # rank in `tops`: a block strictly inside a piece is never read there while the piece is
        # there (it is no other piece's ancestor or sibling), and reads -1, free, before and after.
        own_row = tops[piece_level]
        insort(self.held_ranks, rank)
        for block in blocks:
            own_row[block] = rank
            level, index = piece_level, block
            while level < levels:
                level += 1
                index >>= 1
                row = tops[level]
                old = row[index]
                if old >= rank:
                    break  # and so for every larger block: each one's top is its halves' larger top
                row[index] = rank
                count = counts[level]
                if old >= 0:
                    left = count[old] - 1
                    count[old] = left
                    if not left:
                        del held[level][bisect_left(held[level], old)]
                before = count[rank]
                count[rank] = before + 1
                if not before:
                    insort(held[level], rank)

    def _unhold(self, rank: int, piece_level: int, blocks: tuple[int, ...]) -> None:
        """Keep `tops`, `counts` and `held` in step with a holding of `blocks` being evicted."""
        levels, tops, held, counts = self.geometry.levels, self.tops, self.held, self.counts
        pieces = len(blocks)
        for level in range(piece_level + 1):
            row = counts[level]
            left = row[rank] - (pieces << (piece_level - level))
            row[rank] = left
            if not left:
                del held[level][bisect_left(held[level], rank)]
        ranks = self.held_ranks
        del ranks[bisect_left(ranks, rank)]
        own_row = tops[piece_level]
        for block in blocks:
            own_row[block] = -1
            below, level, index = own_row, piece_level, block
            while level < levels:
                level += 1
                index >>= 1
                row = tops[level]
                old, left, right = row[index], below[2 * index], below[2 * index + 1]
                new = left if left > right else right
                if new == old:
                    break
                row[index] = new
                count = counts[level]
                rest = count[old] - 1  # old >= 0: the piece was in it
                count[old] = rest
                if not rest:
                    del held[level][bisect_left(held[level], old)]
                if new >= 0:
                    before = count[new]
                    count[new] = before + 1
                    if not before:
                        insort(held[level], new)
                below = row

    def _wait(self, request: Request, waiting: bool) -> None:
        """Mark `request` pending (or not) in its (level, block count) group."""
        positions, union, position = self.slots[request.name]
        if waiting:
            bisect.insort(positions, position)
            bisect.insort(union, position)
        else:
            del positions[bisect.bisect_left(positions, position)]
            del union[bisect.bisect_left(union, position)]

    def _next_fit(self, start: int) -> int | None:
        """The first queue position >= `start` whose pending workload fits now (with preemption).

        Later positions have lower priority and so fewer usable blocks: within one (level, block
        count) group, if the first pending position from `start` does not fit, none after it does.
        And a group asking for more blocks at the same level can only win with an earlier position
        than every group already looked at, so only that frontier is checked. The level's first
        pending position from `start` bounds the usable blocks of all later ones: if it fits, it
        is the level's answer; if not, only the groups asking for no more than it could use are
        looked at.
        """
        ranks, avail, below, bisect_left = self.queue_rank, self.block.avail, self._below, bisect.bisect_left
        best = len(ranks)
        for level, groups in enumerate(self.by_level):
            union = self.level_waiting[level]
            index = bisect_left(union, start)
            if index == len(union) or union[index] >= best:
                continue
            first, free = union[index], avail[level]
            usable = free + below(level, ranks[first], groups[-1][0] - free)  # capped at the level's largest ask
            if self.queue_blocks[first] <= usable:
                best = first
                continue
            frontier = best
            for blocks, positions in groups:  # ascending block counts
                if blocks > usable:
                    break
                if not positions:
                    continue
                index = bisect_left(positions, start)
                if index == len(positions) or positions[index] >= frontier:
                    continue
                frontier = positions[index]
                if free + below(level, ranks[frontier], blocks - free) >= blocks:
                    best = frontier
        return best if best < len(ranks) else None

    # -- searching

    def search(self, request: Request, *, explain: bool = True) -> _Search:
        """Does `request` fit now, or after evicting which lower-priority workloads (A6)?"""
        level, need, rank = self.info[request.name]
        have = self.block.avail[level]
        if have >= need:
            return _FITS
        if have + self._below(level, rank, need - have) < need:  # even evicting all of them would not do
            return _Search(False, reason=self._reason(request, rank) if explain else "")
        # Only the count of free blocks at the request's own level decides, so only it is tracked.
        current, free, by_rank = self.block.masks, self.free[level], self.by_rank
        masks: dict[int, int] = {}
        get = masks.get
        chosen: list[_Holding] = []
        for lower in self.active:  # Kueue's order: lowest priority first, most recently admitted first
            if lower >= rank:
                raise AssertionError(f"{request.name}: the usable-block index and the search disagree")
            for holding in reversed(by_rank[lower].values()):
                for cube, bits in holding.spans:  # release it in the scratch masks
                    old = get(cube, current[cube])
                    masks[cube] = new = old & ~bits
                    have += free[new] - free[old]
                chosen.append(holding)
                if have >= need:
                    break
            else:
                continue
            break
        # Minimise: the last one chosen stays (without it the request did not fit); walk back from
        # there, putting back each one the request can do without.
        kept = [chosen[-1]]
        for holding in reversed(chosen[:-1]):
            back, occupied = have, []
            for cube, bits in holding.spans:  # its cubes are in `masks`: it was released there
                old = masks[cube]
                back += free[old | bits] - free[old]
                occupied.append((cube, old | bits))
            if back < need:
                kept.append(holding)
            else:
                masks.update(occupied)
                have = back
        return _Search(True, tuple(reversed(kept)))

    def _reason(self, request: Request, rank: int) -> str:
        demand = self.demands[request.name]
        have = self.block.avail[demand.level]
        if demand.superslice:
            need = f"needs {demand.blocks} completely free cube{_s(demand.blocks)}"
        else:
            need = f"needs {demand.blocks} free aligned {request.shape} partition{_s(demand.blocks)}"
        text = f"{need} ({demand.chips} chips); {have} free"
        victims = bisect.bisect_left(self.held_ranks, rank)
        if not victims:
            return text + ", and no lower-priority workload to preempt"
        cells = self.block.free_cells + self._below(0, rank, len(self.tops[0]))
        chips = cells * self.geometry.cell_chips
        if chips < demand.chips:
            return text + (
                f", and even preempting all {victims} lower-priority workload{_s(victims)} leaves only {chips} chips"
            )
        after_all = self._usable(rank, demand.level)
        return text + f", and {after_all} even after preempting all {victims} lower-priority workload{_s(victims)}"

    # -- changing state

    def admit(self, request: Request, victims: tuple[_Holding, ...], step: int, *, readmission: bool) -> None:
        for victim in victims:
            self.evict(victim, request, step)
        name = request.name
        level, count, rank = self.info[name]
        shift = self.geometry.levels - level
        runs = self.block.allocate(level, count)
        if len(runs) == 1:
            cube, offset, count, bits = runs[0]
            first = (cube << shift) + (offset >> level)
            blocks: tuple[int, ...] = tuple(range(first, first + count))
            spans: tuple[tuple[int, int], ...] = ((cube, bits),)
            cubes: tuple[int, ...] = (cube,)
        else:
            indexes: list[int] = []
            by_cube: dict[int, int] = {}
            for cube, offset, count, bits in runs:
                first = (cube << shift) + (offset >> level)
                indexes += range(first, first + count)
                by_cube[cube] = by_cube.get(cube, 0) | bits
            blocks, spans = tuple(indexes), tuple(sorted(by_cube.items()))
            cubes = tuple(cube for cube, _ in spans)
        holding = _new_tuple(_Holding, (request, level, blocks, spans, cubes))
        self._hold(rank, level, blocks)
        self.holdings[name] = holding
        same = self.by_rank[rank]
        if not same:
            insort(self.active, rank)
        same[name] = holding
        if self.pending.pop(name, None) is not None:
            positions, union, position = self.slots[name]
            del positions[bisect_left(positions, position)]
            del union[bisect_left(union, position)]
        names = tuple([v.request.name for v in victims]) if victims else ()
        event = _new(Event)
        event.__dict__.update(
            step=step,
            workload=name,
            action="admitted",
            cubes=cubes,
            victims=names,
            by="",
            _detail=(self.admitted_text, spans, readmission, names),
        )
        self.events.append(event)

    def evict(self, victim: _Holding, preemptor: Request, step: int) -> None:
        request = victim.request
        name = request.name
        rank = self.info[name][2]
        self.block.release(victim.spans)
        self._unhold(rank, victim.level, victim.blocks)
        del self.holdings[name]
        same = self.by_rank[rank]
        del same[name]
        if not same:
            del self.active[bisect_left(self.active, rank)]
        self.pending[name] = request
        positions, union, position = self.slots[name]
        insort(positions, position)
        insort(union, position)
        event = _new(Event)
        event.__dict__.update(
            step=step,
            workload=name,
            action="preempted",
            cubes=victim.cubes,
            victims=(),
            by=preemptor.name,
            _detail=(_preempted_text, preemptor.name, preemptor.priority, request.priority),
        )
        self.events.append(event)

    def _queue(self, request: Request) -> None:
        self.pending[request.name] = request
        self._wait(request, True)

    # -- the queue

    def run(self) -> None:
        for step, arrival in enumerate(self.arrivals, start=1):
            preempted = False
            for request in arrival:  # an LWS's groups share a priority: one re-try pass after them all
                found = self.search(request)
                if found.fits:
                    self.admit(request, found.victims, step, readmission=False)
                    preempted = preempted or bool(found.victims)
                else:
                    self._queue(request)
                    self.events.append(_event(step, request.name, "waiting", found.reason))
            if preempted:
                self.retry(step, arrival[0].priority)

    def retry(self, step: int, below: int) -> None:
        """Re-try pending workloads under priority `below`, in Kueue's queue order (A7).

        Kueue's pass pops them one by one; a victim goes back into the queue at its own
        place, which is always later (it ranks below its preemptor). Only the pops that fit
        change anything, so the cursor jumps from one fitting workload to the next.
        """
        cursor = bisect.bisect_right(self.queue_key, -below)  # the first position under `below`
        while True:
            position = self._next_fit(cursor)
            if position is None:
                return
            request = self.queue[position]
            found = self.search(request, explain=False)
            if not found.fits:
                raise AssertionError(f"{request.name}: the pending index and the search disagree")
            self.admit(request, found.victims, step, readmission=True)
            cursor = position + 1

    def prediction(self) -> Prediction:
        final: dict[str, str] = {}
        reasons: dict[str, str] = {}
        placements: list[Placement] = []
        cell = self.geometry.cell_chips
        for request in self.requests:
            holding = self.holdings.get(request.name)
            if holding is None:
                final[request.name] = "pending"
                reasons[request.name] = self.search(request).reason
                continue
            final[request.name] = "admitted"
            reasons[request.name] = self.texts.where(holding.spans)
            level, per_slice = holding.level, self.demands[request.name].per_slice
            shift, chips = self.geometry.levels - level, cell << level
            pieces = sorted(  # (slice, cube, offset in cells) of each piece, in allocation order before the sort
                (k // per_slice, block >> shift, (block & ((1 << shift) - 1)) << level)
                for k, block in enumerate(holding.blocks)
            )
            placements += [Placement(request.name, s, cube, offset * cell, chips) for s, cube, offset in pieces]
        return Prediction(
            events=tuple(self.events),
            final=final,
            reasons=reasons,
            placements=tuple(placements),
            cubes=self.cubes,
            cube_chips=self.geometry.cube_chips,
            cell_chips=cell,
            requests=tuple(self.requests),
        )


def _event(step: int, workload: str, action: Action, detail: str) -> Event:
    """Event(...) without the frozen dataclass's __init__, which sets each field through
    object.__setattr__: the replay makes one per admission and eviction, and this is 3x cheaper."""
    event = _new(Event)
    event.__dict__.update(step=step, workload=workload, action=action, detail=detail, cubes=(), victims=(), by="")
    return event


_new = object.__new__
_new_tuple = tuple.__new__


def _preempted_text(by: str, priority: int, own: int) -> str:
    """An eviction's detail (written when first read, see Event)."""
    return f"by {by} (priority {priority} > {own}); back to pending"


class _Texts:
    """The chip ranges of cube masks, as event details and reasons write them; remembered per mask."""

    def __init__(self, cell_chips: int, cells: int) -> None:
        self.cell_chips, self.cells = cell_chips, cells
        self.span_text: dict[int, str] = {}  # cube << cells | mask -> "cube 3 [0-32)"
        self.range_text: dict[int, str] = {}  # cell mask -> "[0-32) [48-64)"

    def admitted(self, spans: tuple[tuple[int, int], ...], readmission: bool, victims: tuple[str, ...]) -> str:
        """An admission's detail (written when first read, see Event)."""
        detail = ("re-admitted; " if readmission else "") + self.where(spans)
        if victims:
            detail = f"preempts {', '.join(victims)}; {detail}"
        return detail

    def where(self, spans: Iterable[tuple[int, int]]) -> str:
        """Each cube with the chip ranges used there, adjacent pieces merged."""
        texts, width, parts = self.span_text, self.cells, []
        for cube, bits in spans:  # in cube order
            text = texts.get((cube << width) | bits)
            if text is None:
                text = texts[(cube << width) | bits] = f"cube {cube} {self.ranges(bits)}"
            parts.append(text)
        return ", ".join(parts)

    def ranges(self, bits: int) -> str:
        """'[0-32) [48-64)': the runs of set bits (cells) of one cube's mask, in chips."""
        text = self.range_text.get(bits)
        if text is None:
            cell, runs, offset, rest = self.cell_chips, [], 0, bits
            while rest:
                skip = (rest & -rest).bit_length() - 1  # free cells before the next run
                offset, rest = offset + skip, rest >> skip
                length = (~rest & (rest + 1)).bit_length() - 1  # the run's cells
                runs.append(f"[{offset * cell}-{(offset + length) * cell})")
                offset, rest = offset + length, rest >> length
            text = self.range_text[bits] = " ".join(runs)
        return text


def _s(count: int) -> str:
    return "" if count == 1 else "s"


# ---------------------------------------------------------------- public entry points


def predict(requests: Sequence[Request], cubes: int, generation: Generation) -> Prediction:
    """Replay `requests` through the admission model (A1-A8) on `cubes` cubes of `generation`."""
    simulator = _Simulator(requests, cubes, generation)
    # The replay allocates a few objects per event (holdings, events, their tuples) and keeps most
    # of them, in no reference cycle: the cyclic collector's passes during it (about 5% of its
    # time at 2,000 requests) would find nothing to free. Reference counting still frees the rest.
    enabled = gc.isenabled()
    gc.disable()
    try:
        simulator.run()
        return simulator.prediction()
    finally:
        if enabled:
            gc.enable()


def cube_span(cubes: Iterable[int]) -> str:
    """Name a set of cubes compactly: cube 3, cubes 0-1, cubes 0, 2-4."""
    ordered = sorted(set(cubes))
    if not ordered:
        return "no cube"
    runs: list[list[int]] = []
    for cube in ordered:
        if runs and runs[-1][1] == cube - 1:
            runs[-1][1] = cube
        else:
            runs.append([cube, cube])
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
    return f"cube {text}" if len(ordered) == 1 else f"cubes {text}"


def _priority(value: int, names: Mapping[int, str]) -> str:
    return names.get(value, str(value))


def _label(request: Request, names: Mapping[int, str]) -> str:
    size = request.shape if request.slices == 1 else f"{request.slices} x {request.shape}"
    return f"{request.name} ({_priority(request.priority, names)}, {size})"


def _owner(request: Request) -> str:
    """The workload a request belongs to in the stack: its LWS, or itself."""
    return request.lws or request.name


def _workload_label(prediction: Prediction, owner: str, names: Mapping[int, str]) -> str:
    """A map legend's label: an LWS by how many of its groups hold cells."""
    members = prediction.members(owner)
    first = members[0]
    if not first.lws:
        return _label(first, names)
    running, total = prediction.groups(owner)
    count = f"{total}" if running == total else f"{running} of {total}"
    return f"{owner} ({_priority(first.priority, names)}, {count} group{_s(total)} x {first.shape})"


def _group_run(requests: Sequence[Request]) -> str:
    """Name requests for a sentence: 'a/1' alone, or 'a groups 0-2, 5' for several groups of one LWS."""
    if len(requests) == 1:
        return requests[0].name
    indexes = [int(r.name.rsplit("/", 1)[1]) for r in requests]
    runs: list[list[int]] = []
    for index in sorted(indexes):
        if runs and runs[-1][1] == index - 1:
            runs[-1][1] = index
        else:
            runs.append([index, index])
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
    return f"{requests[0].lws} groups {text}"


def _run_label(requests: Sequence[Request], names: Mapping[int, str]) -> str:
    """'x (high, 2x2x2)' for one request, 'x groups 0-3 (high, 2x2x2 each)' for several groups."""
    if len(requests) == 1:
        return _label(requests[0], names)
    first = requests[0]
    return f"{_group_run(requests)} ({_priority(first.priority, names)}, {first.shape} each)"


def symbols(prediction: Prediction) -> dict[str, str]:
    """The map letter of each workload holding cells (an LWS's groups share one), in queue order
    ('+' once letters run out)."""
    owners = list(dict.fromkeys(_owner(r) for r in prediction.requests if prediction.final[r.name] == "admitted"))
    return {name: _SYMBOLS[i] if i < len(_SYMBOLS) else _OVERFLOW_SYMBOL for i, name in enumerate(owners)}


def render_map(
    prediction: Prediction, cubes: int | None = None, priority_names: Mapping[int, str] = DEFAULT_PRIORITY_NAMES
) -> list[str]:
    """One line per cube (the first `cubes` of them; all by default), then a legend.

    Each character is one cell (`cell_chips` chips, a 2x2x1 on tpu7x), grouped by 4;
    a letter marks the workload holding it (one letter for all groups of an LWS) and '.'
    a free cell.
    """
    shown = prediction.cubes if cubes is None else max(0, min(cubes, prediction.cubes))
    cells = prediction.cube_chips // prediction.cell_chips
    letters = symbols(prediction)
    owner = {r.name: _owner(r) for r in prediction.requests}
    grid = [[_FREE_SYMBOL] * cells for _ in range(shown)]
    for placement in prediction.placements:
        if placement.cube >= shown:
            continue
        first = placement.offset_chips // prediction.cell_chips
        for cell in range(first, first + placement.chips // prediction.cell_chips):
            grid[placement.cube][cell] = letters[owner[placement.workload]]
    width = len(str(max(shown - 1, 0)))
    lines = []
    for index, row in enumerate(grid):
        groups = " ".join("".join(row[i : i + _CELLS_PER_GROUP]) for i in range(0, cells, _CELLS_PER_GROUP))
        lines.append(f"cube {index:>{width}} | {groups} |")
    if shown < prediction.cubes:
        lines.append(f"... {prediction.cubes - shown} more cube{_s(prediction.cubes - shown)} not shown")
    for name, letter in letters.items():
        lines.append(f"{letter} = {_workload_label(prediction, name, priority_names)}")
    lines.append(f"{_FREE_SYMBOL} = free; one cell = {prediction.cell_chips} chips, {cells} cells per cube")
    by_name = {r.name: r for r in prediction.requests}
    for run in _runs([by_name[n] for n in prediction.pending], lambda r: ""):
        lines.append(f"pending: {_run_label(run, priority_names)}")
    return lines


def _runs(requests: Sequence[Request], key: Callable[[Request], object]) -> list[list[Request]]:
    """Consecutive requests of one LWS with equal `key`, as runs (a request of no LWS is a run alone)."""
    runs: list[list[Request]] = []
    last: object = None
    for request in requests:
        mark = (request.lws, key(request)) if request.lws else None
        if runs and mark is not None and mark == last:
            runs[-1].append(request)
        else:
            runs.append([request])
        last = mark
    return runs


def narrative(prediction: Prediction, priority_names: Mapping[int, str] = DEFAULT_PRIORITY_NAMES) -> list[str]:
    """The events as sentences, then what stays pending and the final use of the block.

    Consecutive like events of one LWS's groups (admitted or re-admitted without preempting,
    waiting for the same reason) make one sentence; an admission that preempts is told alone.
    """
    by_name = {r.name: r for r in prediction.requests}
    preempted: set[str] = set()
    told: list[tuple[str, bool, Event]] = []  # (what kind of sentence, comes back?, event)
    for event in prediction.events:
        again = event.workload in preempted  # preempted before this event
        if event.action == "preempted":
            preempted.add(event.workload)
        elif event.action == "waiting":
            told.append((f"wait: {event.detail}", again, event))
        else:  # an admission that preempts is told alone: it names its own victims
            told.append(("" if event.victims else "admitted", again, event))
    chunks: list[list[tuple[bool, Event]]] = []
    last: tuple[str, str, bool] | None = None
    for kind, again, event in told:
        lws = by_name[event.workload].lws
        mark = (lws, kind, again) if lws and kind else None
        if chunks and mark is not None and mark == last:
            chunks[-1].append((again, event))
        else:
            chunks.append([(again, event)])
        last = mark
    lines = []
    for chunk in chunks:
        (back, event), requests = chunk[0], [by_name[e.workload] for _, e in chunk]
        subject, one = _run_label(requests, priority_names), len(chunk) == 1
        cubes = cube_span(c for _, e in chunk for c in e.cubes)
        if event.action == "waiting":
            lines.append(f"{subject} wait{'s' if one else ''}: {event.detail}.")
        elif event.victims:
            victims = ", ".join(f"{v} ({_priority(by_name[v].priority, priority_names)})" for v in event.victims)
            lines.append(f"{subject}{' comes back and' if back else ''} preempts {victims} to take {cubes}.")
        else:
            lines.append(f"{subject} {'is' if one else 'are'} {'re-' if back else ''}admitted into {cubes}.")
    for run in _runs([by_name[n] for n in prediction.pending], lambda r: prediction.reasons[r.name]):
        verb = "stays" if len(run) == 1 else "stay"
        lines.append(f"{_run_label(run, priority_names)} {verb} pending: {prediction.reasons[run[0].name]}.")
    total = prediction.cubes * prediction.cube_chips
    lines.append(
        f"Final: {len(prediction.admitted)} admitted, {len(prediction.pending)} pending; "
        f"{prediction.chips_in_use} of {total} chips in use."
    )
    return lines
