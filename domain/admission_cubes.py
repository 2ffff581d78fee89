"""The cubes of the reservation block and Kueue's topology-aware placement on them (A2-A4).

Assumptions A2-A4 of domain/admission.py: a sub-slice takes an aligned partition of one cube, a
super-slice whole free cubes, and the partitions are chosen as Kueue's BestFit for a required
topology chooses domains (kueue@v0.19.2 pkg/cache/scheduler/tas_flavor_snapshot.go
findTopologyAssignment, sortedDomains, updateCountsToMinimumGeneric, findBestFitDomainBy).
Each cube is a bit mask of occupied cells; the free aligned blocks of every level are counted
per mask once and kept in step as cells are taken and freed.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from domain.admission_requests import Request
from domain.topology import Generation, TopologyError


@dataclass(frozen=True)
class Geometry:
    """A generation's cube counted in cells, a cell being its smallest sub-slice (A2)."""

    cube_chips: int
    cell_chips: int
    levels: int  # a cube is 2**levels cells; level L is an aligned block of 2**L cells

    @classmethod
    def of(cls, generation: Generation) -> Geometry:
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
class Demand:
    """What one request asks of the cubes: its pieces, each an aligned block of one level (A2, A3)."""

    level: int  # block level of one piece
    per_slice: int  # pieces per slice: 1 for a sub-slice, the cube count for a super-slice
    blocks: int  # pieces in all
    chips: int
    superslice: bool


def demand_of(request: Request, generation: Generation, geometry: Geometry) -> Demand:
    """A sub-slice's shape is one aligned block; a super-slice's, its number of whole cubes."""
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
    return Demand(level, per_slice, blocks, blocks * (geometry.cell_chips << level), superslice)


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


class Cubes:
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

    def fail(self, cube: int) -> None:
        """`cube`'s hosts fail (A9): every cell taken, by no workload, so that no search places a piece
        there or counts one as preemptable. Its holders are evicted first."""
        if self.masks[cube]:
            raise ValueError(f"cube {cube} still holds workloads: evict them before it fails")
        self._set(cube, (1 << self.width) - 1)

    def repair(self, cube: int) -> None:
        """`cube`'s hosts are healthy again: all its cells free."""
        if self.masks[cube] != (1 << self.width) - 1:
            raise ValueError(f"cube {cube} has not failed")
        self._set(cube, 0)


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


class FreeBlocks(dict[int, int]):
    """Cell mask -> free aligned blocks of one level in it (a dict lookup is cheaper than `_profile`)."""

    def __init__(self, level: int, levels: int) -> None:
        super().__init__()
        self.level, self.levels = level, levels

    def __missing__(self, mask: int) -> int:
        count = self[mask] = _profile(mask, self.levels).counts[self.level]
        return count
