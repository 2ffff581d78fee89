"""Who holds the cubes, by priority, and Kueue's choice of whom to preempt (A6).

Preemption is LowerPriority within the ClusterQueue (assumption A6 of domain/admission.py):
the candidates are the admitted workloads of strictly lower priority, in the order of Kueue's
classic preemption (kueue@v0.19.2 pkg/scheduler/preemption/common/ordering.go
CandidatesOrdering): lowest priority first, then most recently admitted first. They are taken
greedily until the request fits, and the targets then minimised by walking them in reverse
(pkg/scheduler/preemption/preemption.go). Where the pieces go is domain/admission_cubes.py's.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Mapping
from typing import NamedTuple

from domain.admission_cubes import Cubes, Demand, FreeBlocks, Geometry
from domain.admission_render import plural_s
from domain.admission_requests import Request


class Holding(NamedTuple):  # a tuple: built on every admission, so cheap to build
    """What an admitted request holds: its pieces' blocks and the cells they cover per cube."""

    request: Request
    level: int  # the block level of each of its pieces (all alike)
    blocks: tuple[int, ...]  # each piece's block index at `level`, cube-major, in allocation order
    spans: tuple[tuple[int, int], ...]  # (cube, occupied-cell bits) per cube, ascending cube
    cubes: tuple[int, ...]  # the cubes of `spans`


class Search(NamedTuple):
    """Whether a request fits, after evicting `victims` (in Kueue's order), or `reason` why not."""

    fits: bool
    victims: tuple[Holding, ...] = ()
    reason: str = ""


FITS = Search(True)


_new_tuple = tuple.__new__


class Holders:
    """The admitted workloads and the blocks they hold, indexed by priority rank (0 the lowest).

    Releasing cells never lowers a free-block count, so the greedy search of A6 fits exactly
    when evicting every strictly lower-priority workload would, and that count is the free
    blocks plus the occupied blocks whose top holder ranks below the request: per block level,
    a count of occupied blocks per top holder's rank and the sorted list of the ranks present
    (no longer than the level's blocks, whatever the number of requests). "Does it reach
    `need`?" walks that list from the lowest rank and stops after at most `need` steps; an
    update is O(1) plus a bisection and a short list insertion. A failed search costs that
    instead of a sort of all priorities and a walk over the holdings.
    """

    def __init__(
        self,
        geometry: Geometry,
        cubes: int,
        ranks: int,
        info: Mapping[str, tuple[int, int, int]],
        demands: Mapping[str, Demand],
    ) -> None:
        levels = geometry.levels
        self.geometry = geometry
        self.info = info  # request -> (block level, block count, rank): what the replay reads of it most
        self.demands = demands
        self.block = Cubes(cubes, levels)
        self.holdings: dict[str, Holding] = {}
        self.free = [FreeBlocks(level, levels) for level in range(levels + 1)]  # cell mask -> free blocks
        self.by_rank: list[dict[str, Holding]] = [{} for _ in range(ranks)]  # admitted, in admission order
        self.active: list[int] = []  # ranks that have an admitted workload, ascending
        # counts[L][p]: the occupied aligned blocks of level L whose top holder has rank p (a block
        # strictly inside a piece counts too, its top being the piece's holder); held[L]: the ranks
        # p with counts[L][p] > 0, ascending, at most one per occupied block whatever the number of
        # requests; held_ranks: the rank of each admitted workload, ascending. A level-0 block is a
        # cell, so counts[0] counts cells.
        self.counts = [[0] * ranks for _ in range(levels + 1)]
        self.held: list[list[int]] = [[] for _ in range(levels + 1)]
        self.held_ranks: list[int] = []
        # tops[L][i]: the highest rank holding a cell of aligned block i of level L (cube-major), -1 if
        # free; a block strictly inside one piece is never read and keeps -1 (see _hold)
        self.tops = [[-1] * (cubes << (levels - level)) for level in range(levels + 1)]

    # -- indexes

    def _usable(self, rank: int, level: int) -> int:
        """Free `level` blocks once every workload ranked below `rank` is evicted."""
        return self.block.avail[level] + self.below(level, rank, len(self.tops[level]))

    def below(self, level: int, rank: int, cap: int) -> int:
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

    # -- searching

    def search(self, request: Request, *, explain: bool = True) -> Search:
        """Does `request` fit now, or after evicting which lower-priority workloads (A6)?"""
        level, need, rank = self.info[request.name]
        have = self.block.avail[level]
        if have >= need:
            return FITS
        if have + self.below(level, rank, need - have) < need:  # even evicting all of them would not do
            return Search(False, reason=self._reason(request, rank) if explain else "")
        # Only the count of free blocks at the request's own level decides, so only it is tracked.
        current, free, by_rank = self.block.masks, self.free[level], self.by_rank
        masks: dict[int, int] = {}
        get = masks.get
        chosen: list[Holding] = []
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
        return Search(True, tuple(reversed(kept)))

    def _reason(self, request: Request, rank: int) -> str:
        """Why `request` waits: what it needs, what is free, and what preempting would leave."""
        demand = self.demands[request.name]
        have = self.block.avail[demand.level]
        if demand.superslice:
            need = f"needs {demand.blocks} completely free cube{plural_s(demand.blocks)}"
        else:
            need = f"needs {demand.blocks} free aligned {request.shape} partition{plural_s(demand.blocks)}"
        text = f"{need} ({demand.chips} chips); {have} free"
        victims = bisect_left(self.held_ranks, rank)
        if not victims:
            return text + ", and no lower-priority workload to preempt"
        cells = self.block.free_cells + self.below(0, rank, len(self.tops[0]))
        chips = cells * self.geometry.cell_chips
        lower = f"{victims} lower-priority workload{plural_s(victims)}"
        if chips < demand.chips:
            return text + f", and even preempting all {lower} leaves only {chips} chips"
        after_all = self._usable(rank, demand.level)
        return text + f", and {after_all} even after preempting all {lower}"

    # -- changing state

    def take(self, request: Request) -> Holding:
        """Place `request` on the cubes (A4) and record what it holds."""
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
        holding = _new_tuple(Holding, (request, level, blocks, spans, cubes))
        self._hold(rank, level, blocks)
        self.holdings[name] = holding
        same = self.by_rank[rank]
        if not same:
            insort(self.active, rank)
        same[name] = holding
        return holding

    def drop(self, victim: Holding) -> None:
        """Free the cells of an evicted holding and forget it."""
        name = victim.request.name
        rank = self.info[name][2]
        self.block.release(victim.spans)
        self._unhold(rank, victim.level, victim.blocks)
        del self.holdings[name]
        same = self.by_rank[rank]
        del same[name]
        if not same:
            del self.active[bisect_left(self.active, rank)]
