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
    admitted together or not at all, like a JobSet's replicas (one Kueue Workload per
    JobSet). Real Kueue represents a LeaderWorkerSet "as a separate, independent
    workload for each group" (Kueue docs, "Run LeaderWorkerSet"), so it can admit some
    of an LWS's groups and leave the rest pending; the model still admits or holds an
    LWS as a whole, so it can predict pending where Kueue would run part of an LWS.
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
A4. Placement is best fit: a sub-slice goes into the smallest maximal free aligned
    block that holds it (the classic buddy rule), ties to the lowest cube and offset;
    a super-slice takes the lowest-numbered free cubes. Kueue's default for required
    topology is its own BestFit profile, so cube numbers can differ from the real
    assignment while the counts (what fits, what is preempted) agree under A1-A3.
A5. Queue order. Requests arrive one at a time in `order` (ties by name), each after
    the previous one has settled, like creating the objects one by one. An arrival
    that fits is admitted; otherwise it may preempt; otherwise it waits.
A6. Preemption is LowerPriority within the ClusterQueue: only admitted workloads
    with strictly lower priority are candidates. As in Kueue's classic preemption
    (Kueue docs, "Preemption"), candidates are ordered lowest priority first, then
    most recently admitted first; they are taken greedily until the request fits, and
    the targets are then minimised by walking them in reverse and keeping out any
    whose space is not needed. No exhaustive search: greedy plus minimisation, as in
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

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, Protocol

from infra.topology import Generation, TopologyError

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


class WorkloadLike(Protocol):
    """What `requests_from_workloads` reads (infra.capacity.Workload has it)."""

    @property
    def name(self) -> str: ...
    @property
    def priority(self) -> str: ...
    @property
    def shape(self) -> str: ...
    @property
    def slices(self) -> int: ...


def requests_from_workloads(workloads: Iterable[WorkloadLike], priorities: Mapping[str, int]) -> list[Request]:
    """Turn capacity.workloads() (already in creation order) into requests.

    `priorities` maps a level name ("low", "medium", "high") to its WorkloadPriorityClass
    value; a workload with no class ("-") gets Kueue's default priority 0.
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
    counts: tuple[int, ...]  # free aligned blocks per level
    first_maximal: tuple[int, ...]  # cell offset of the lowest maximal free block per level, -1 if none


@lru_cache(maxsize=1 << 17)
def _profile(mask: int, levels: int) -> _Profile:
    """Free-space summary of one cube whose occupied cells are the set bits of `mask`."""
    cells = 1 << levels
    free: list[list[bool]] = []
    for level in range(levels + 1):
        size = 1 << level
        block = (1 << size) - 1
        free.append([(mask >> offset) & block == 0 for offset in range(0, cells, size)])
    first = []
    for level in range(levels + 1):
        found = -1
        for index, is_free in enumerate(free[level]):
            if is_free and (level == levels or not free[level + 1][index // 2]):
                found = index << level
                break
        first.append(found)
    return _Profile(tuple(sum(row) for row in free), tuple(first))


def _bits(offset: int, level: int) -> int:
    return ((1 << (1 << level)) - 1) << offset


# ---------------------------------------------------------------- simulation


@dataclass(frozen=True)
class _Piece:
    slice_index: int
    cube: int
    offset: int  # cells
    level: int


@dataclass(frozen=True)
class _Holding:
    request: Request
    seq: int  # admission sequence number: larger is more recent
    pieces: tuple[_Piece, ...]


@dataclass(frozen=True)
class _Search:
    fits: bool
    victims: tuple[_Holding, ...] = ()
    reason: str = ""


class _Cubes:
    """Occupancy of the block: one bit mask per cube plus free-block counts and best-fit heaps."""

    def __init__(self, cubes: int, levels: int) -> None:
        self.levels = levels
        self.masks = [0] * cubes
        empty = _profile(0, levels)
        self.avail = [count * cubes for count in empty.counts]
        self.free_cells = cubes << levels
        # heaps[L]: cubes that have (or recently had: lazy deletion) a maximal free block of level L
        self.heaps: list[list[int]] = [
            list(range(cubes)) if empty.first_maximal[L] >= 0 else [] for L in range(levels + 1)
        ]
        self.in_heap = [set(heap) for heap in self.heaps]

    def _set(self, cube: int, mask: int) -> None:
        old, new = _profile(self.masks[cube], self.levels), _profile(mask, self.levels)
        for level in range(self.levels + 1):
            self.avail[level] += new.counts[level] - old.counts[level]
            if new.first_maximal[level] >= 0 and cube not in self.in_heap[level]:
                heapq.heappush(self.heaps[level], cube)
                self.in_heap[level].add(cube)
        self.masks[cube] = mask

    def _lowest(self, level: int) -> int | None:
        heap, members = self.heaps[level], self.in_heap[level]
        while heap and _profile(self.masks[heap[0]], self.levels).first_maximal[level] < 0:
            members.discard(heapq.heappop(heap))
        return heap[0] if heap else None

    def allocate(self, level: int) -> tuple[int, int]:
        """Best fit (A4): the smallest maximal free block that holds a `level` block."""
        for size in range(level, self.levels + 1):
            cube = self._lowest(size)
            if cube is not None:
                offset = _profile(self.masks[cube], self.levels).first_maximal[size]
                self._set(cube, self.masks[cube] | _bits(offset, level))
                self.free_cells -= 1 << level
                return cube, offset
        raise AssertionError("allocate() called without a free block")  # callers check avail first

    def release(self, piece: _Piece) -> None:
        self._set(piece.cube, self.masks[piece.cube] & ~_bits(piece.offset, piece.level))
        self.free_cells += 1 << piece.level


class _Simulator:
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
        self.cubes = cubes
        self.demands = {r.name: _demand(r, generation, self.geometry) for r in self.requests}
        self.block = _Cubes(cubes, self.geometry.levels)
        self.holdings: dict[str, _Holding] = {}
        self.by_priority: dict[int, dict[str, None]] = {}  # admitted names per priority, in admission order
        self.chips_by_priority: dict[int, int] = {}
        self.pending: dict[str, Request] = {}
        self.events: list[Event] = []
        self.seq = 0
        self.failed: set[tuple[int, int, int]] = set()  # search() failures since the last state change

    # -- searching

    def search(self, request: Request, *, explain: bool = True) -> _Search:
        """Does `request` fit now, or after evicting which lower-priority workloads (A6)?

        Without `explain` a failure carries no reason, and failures are remembered per
        (priority, block level, block count) until the next admission or eviction: the
        outcome depends on nothing else, and a pass of re-tries meets many equal requests.
        """
        demand = self.demands[request.name]
        block = self.block
        if block.avail[demand.level] >= demand.blocks:
            return _Search(True)
        key = (request.priority, demand.level, demand.blocks)
        if not explain and key in self.failed:
            return _Search(False)
        lower = [p for p in sorted(self.by_priority) if p < request.priority and self.by_priority[p]]
        room = block.free_cells * self.geometry.cell_chips + sum(self.chips_by_priority[p] for p in lower)
        if room < demand.chips:
            self.failed.add(key)
            reason = self._reason(request, block.avail[demand.level], lower, None) if explain else ""
            return _Search(False, reason=reason)
        masks: dict[int, int] = {}
        avail = list(block.avail)
        chosen: list[_Holding] = []
        fits = False
        for priority in lower:
            for name in reversed(self.by_priority[priority]):
                holding = self.holdings[name]
                self._toggle(holding, masks, avail, release=True)
                chosen.append(holding)
                if avail[demand.level] >= demand.blocks:
                    fits = True
                    break
            if fits:
                break
        if not fits:
            self.failed.add(key)
            reason = self._reason(request, block.avail[demand.level], lower, avail[demand.level]) if explain else ""
            return _Search(False, reason=reason)
        kept = []
        for holding in reversed(chosen):
            self._toggle(holding, masks, avail, release=False)
            if avail[demand.level] < demand.blocks:
                self._toggle(holding, masks, avail, release=True)
                kept.append(holding)
        return _Search(True, tuple(reversed(kept)))

    def _toggle(self, holding: _Holding, masks: dict[int, int], avail: list[int], *, release: bool) -> None:
        levels = self.geometry.levels
        for piece in holding.pieces:
            old = masks.get(piece.cube, self.block.masks[piece.cube])
            bits = _bits(piece.offset, piece.level)
            new = old & ~bits if release else old | bits
            before, after = _profile(old, levels).counts, _profile(new, levels).counts
            for level in range(levels + 1):
                avail[level] += after[level] - before[level]
            masks[piece.cube] = new

    def _reason(self, request: Request, have: int, lower: list[int], after_all: int | None) -> str:
        demand = self.demands[request.name]
        if demand.superslice:
            need = f"needs {demand.blocks} completely free cube{_s(demand.blocks)}"
        else:
            need = f"needs {demand.blocks} free aligned {request.shape} partition{_s(demand.blocks)}"
        text = f"{need} ({demand.chips} chips); {have} free"
        victims = sum(len(self.by_priority[p]) for p in lower)
        if not victims:
            return text + ", and no lower-priority workload to preempt"
        if after_all is None:
            chips = self.block.free_cells * self.geometry.cell_chips + sum(self.chips_by_priority[p] for p in lower)
            return text + (
                f", and even preempting all {victims} lower-priority workload{_s(victims)} leaves only {chips} chips"
            )
        return text + f", and {after_all} even after preempting all {victims} lower-priority workload{_s(victims)}"

    # -- changing state

    def admit(self, request: Request, victims: tuple[_Holding, ...], step: int, *, readmission: bool) -> None:
        self.failed.clear()
        for victim in victims:
            self.evict(victim, request, step)
        demand = self.demands[request.name]
        pieces = []
        for index in range(request.slices):
            for _ in range(demand.per_slice):
                cube, offset = self.block.allocate(demand.level)
                pieces.append(_Piece(index, cube, offset, demand.level))
        self.seq += 1
        holding = _Holding(request, self.seq, tuple(pieces))
        self.holdings[request.name] = holding
        self.by_priority.setdefault(request.priority, {})[request.name] = None
        self.chips_by_priority[request.priority] = self.chips_by_priority.get(request.priority, 0) + demand.chips
        self.pending.pop(request.name, None)
        where = self._where(holding)
        detail = ("re-admitted; " if readmission else "") + where
        if victims:
            detail = f"preempts {', '.join(v.request.name for v in victims)}; {detail}"
        names = tuple(v.request.name for v in victims)
        self.events.append(Event(step, request.name, "admitted", detail, _cubes_of(holding), names))

    def evict(self, victim: _Holding, preemptor: Request, step: int) -> None:
        name = victim.request.name
        for piece in victim.pieces:
            self.block.release(piece)
        del self.holdings[name]
        del self.by_priority[victim.request.priority][name]
        self.chips_by_priority[victim.request.priority] -= self.demands[name].chips
        self.pending[name] = victim.request
        detail = f"by {preemptor.name} (priority {preemptor.priority} > {victim.request.priority}); back to pending"
        self.events.append(Event(step, name, "preempted", detail, _cubes_of(victim), by=preemptor.name))

    def _where(self, holding: _Holding) -> str:
        cell = self.geometry.cell_chips
        spans: dict[int, list[tuple[int, int]]] = {}
        for piece in sorted(holding.pieces, key=lambda p: (p.cube, p.offset)):
            start, end = piece.offset * cell, (piece.offset + (1 << piece.level)) * cell
            ranges = spans.setdefault(piece.cube, [])
            if ranges and ranges[-1][1] == start:
                ranges[-1] = (ranges[-1][0], end)
            else:
                ranges.append((start, end))
        return ", ".join(
            f"cube {cube} " + " ".join(f"[{a}-{b})" for a, b in ranges) for cube, ranges in sorted(spans.items())
        )

    # -- the queue

    def run(self) -> None:
        for step, request in enumerate(self.requests, start=1):
            found = self.search(request)
            if found.fits:
                self.admit(request, found.victims, step, readmission=False)
                if found.victims:
                    self.retry(step, request.priority)
            else:
                self.pending[request.name] = request
                self.events.append(Event(step, request.name, "waiting", found.reason))

    def retry(self, step: int, below: int) -> None:
        """Re-try pending workloads under priority `below`, in Kueue's queue order (A7)."""
        queue = [(-r.priority, r.order, r.name) for r in self.pending.values() if r.priority < below]
        heapq.heapify(queue)
        while queue:
            name = heapq.heappop(queue)[2]
            request = self.pending.get(name)
            if request is None:
                continue
            found = self.search(request, explain=False)
            if not found.fits:
                continue
            self.admit(request, found.victims, step, readmission=True)
            for victim in found.victims:
                r = victim.request
                heapq.heappush(queue, (-r.priority, r.order, r.name))

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
            reasons[request.name] = self._where(holding)
            pieces = sorted(holding.pieces, key=lambda p: (p.slice_index, p.cube, p.offset))
            placements += [
                Placement(request.name, p.slice_index, p.cube, p.offset * cell, cell << p.level) for p in pieces
            ]
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


def _cubes_of(holding: _Holding) -> tuple[int, ...]:
    return tuple(sorted({p.cube for p in holding.pieces}))


def _s(count: int) -> str:
    return "" if count == 1 else "s"


# ---------------------------------------------------------------- public entry points


def predict(requests: Sequence[Request], cubes: int, generation: Generation) -> Prediction:
    """Replay `requests` through the admission model (A1-A8) on `cubes` cubes of `generation`."""
    simulator = _Simulator(requests, cubes, generation)
    simulator.run()
    return simulator.prediction()


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


def symbols(prediction: Prediction) -> dict[str, str]:
    """The map letter of each admitted workload, in queue order ('+' once letters run out)."""
    admitted = prediction.admitted
    return {name: _SYMBOLS[i] if i < len(_SYMBOLS) else _OVERFLOW_SYMBOL for i, name in enumerate(admitted)}


def render_map(
    prediction: Prediction, cubes: int | None = None, priority_names: Mapping[int, str] = DEFAULT_PRIORITY_NAMES
) -> list[str]:
    """One line per cube (the first `cubes` of them; all by default), then a legend.

    Each character is one cell (`cell_chips` chips, a 2x2x1 on tpu7x), grouped by 4;
    a letter marks the workload holding it and '.' a free cell.
    """
    shown = prediction.cubes if cubes is None else max(0, min(cubes, prediction.cubes))
    cells = prediction.cube_chips // prediction.cell_chips
    letters = symbols(prediction)
    grid = [[_FREE_SYMBOL] * cells for _ in range(shown)]
    for placement in prediction.placements:
        if placement.cube >= shown:
            continue
        first = placement.offset_chips // prediction.cell_chips
        for cell in range(first, first + placement.chips // prediction.cell_chips):
            grid[placement.cube][cell] = letters[placement.workload]
    width = len(str(max(shown - 1, 0)))
    lines = []
    for index, row in enumerate(grid):
        groups = " ".join("".join(row[i : i + _CELLS_PER_GROUP]) for i in range(0, cells, _CELLS_PER_GROUP))
        lines.append(f"cube {index:>{width}} | {groups} |")
    if shown < prediction.cubes:
        lines.append(f"... {prediction.cubes - shown} more cube{_s(prediction.cubes - shown)} not shown")
    by_name = {r.name: r for r in prediction.requests}
    for name, letter in letters.items():
        lines.append(f"{letter} = {_label(by_name[name], priority_names)}")
    lines.append(f"{_FREE_SYMBOL} = free; one cell = {prediction.cell_chips} chips, {cells} cells per cube")
    for name in prediction.pending:
        lines.append(f"pending: {_label(by_name[name], priority_names)}")
    return lines


def narrative(prediction: Prediction, priority_names: Mapping[int, str] = DEFAULT_PRIORITY_NAMES) -> list[str]:
    """The events as sentences, then what stays pending and the final use of the block."""
    by_name = {r.name: r for r in prediction.requests}
    preempted: set[str] = set()
    lines = []
    for event in prediction.events:
        request = by_name[event.workload]
        label = _label(request, priority_names)
        if event.action == "preempted":
            preempted.add(event.workload)
            continue
        if event.action == "waiting":
            lines.append(f"{label} waits: {event.detail}.")
        elif event.victims:
            victims = ", ".join(f"{v} ({_priority(by_name[v].priority, priority_names)})" for v in event.victims)
            again = " comes back and" if event.workload in preempted else ""
            lines.append(f"{label}{again} preempts {victims} to take {cube_span(event.cubes)}.")
        elif event.workload in preempted:
            lines.append(f"{label} is re-admitted into {cube_span(event.cubes)}.")
        else:
            lines.append(f"{label} is admitted into {cube_span(event.cubes)}.")
    for name in prediction.pending:
        lines.append(f"{_label(by_name[name], priority_names)} stays pending: {prediction.reasons[name]}.")
    total = prediction.cubes * prediction.cube_chips
    lines.append(
        f"Final: {len(prediction.admitted)} admitted, {len(prediction.pending)} pending; "
        f"{prediction.chips_in_use} of {total} chips in use."
    )
    return lines
