"""The replay of the queue: arrivals, waiting, re-tries and the prediction (A5, A7).

Requests arrive one at a time in creation order (assumption A5 of domain/admission.py); each
that fits is admitted, may preempt (domain/admission_preemption.py) or waits. After a preemption
the pending workloads below the preemptor are re-tried in Kueue's queue order, highest priority
first, then creation order (A7). Placement is domain/admission_cubes.py's; the words,
domain/admission_render.py's.
"""

from __future__ import annotations

import bisect
import gc
from bisect import bisect_left, insort
from collections.abc import Sequence
from typing import Any

from domain.admission_cubes import Demand, Geometry, demand_of
from domain.admission_preemption import Holders, Holding
from domain.admission_render import Texts, preempted_text
from domain.admission_requests import Action, CubeFault, Event, Placement, Prediction, Request
from domain.topology import Generation


class Simulator:
    """The replay (A5-A7), with indexes that keep it near-linear in the number of requests.

    Two facts make it fast without changing a verdict. (1) A search that cannot fit costs a
    walk of a short index, not of the holdings (`Holders`). (2) A re-try pass (A7) pops pending
    workloads in queue order and admits exactly those that fit when popped; the others
    change nothing. So the pass jumps straight to the next pending workload that fits
    (`_next_fit`) instead of re-trying every pending workload after every preemption,
    which is what made rising priorities O(n^3).
    """

    def __init__(self, requests: Sequence[Request], cubes: int, generation: Generation) -> None:
        self.geometry = Geometry.of(generation)
        self.generation = generation
        self.requests = sorted(requests, key=lambda r: (r.order, r.name))
        names = [r.name for r in self.requests]
        if len(set(names)) != len(names):
            duplicates = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(f"request names must be unique; repeated: {', '.join(duplicates)}")
        if cubes < 0:
            raise ValueError(f"cubes must be >= 0, got {cubes}")
        # The arrivals (A5): one request, or every group of one LWS created at once, at its first
        # group's place; groups an autoscaler adds later are a later arrival of the same LWS.
        self.arrivals: list[list[Request]] = []
        sets: dict[tuple[str, int], list[Request]] = {}
        kinds: dict[str, Request] = {}
        for r in self.requests:
            if not r.lws:
                self.arrivals.append([r])
                continue
            first = kinds.setdefault(r.lws, r)
            if (r.priority, r.shape, r.slices) != (first.priority, first.shape, first.slices):
                raise ValueError(f"{r.name}: the groups of LWS {r.lws} must share priority, shape and slices")
            if (r.lws, r.order) in sets:
                sets[r.lws, r.order].append(r)
            else:
                sets[r.lws, r.order] = [r]
                self.arrivals.append(sets[r.lws, r.order])
        self.cubes = cubes
        levels = self.geometry.levels
        by_shape: dict[tuple[str, int], Demand] = {}  # one parse per shape and slice count, not per request
        self.demands = {}
        for r in self.requests:
            demand = by_shape.get((r.shape, r.slices))
            if demand is None:
                demand = by_shape[r.shape, r.slices] = demand_of(r, generation, self.geometry)
            self.demands[r.name] = demand
        # Priorities as dense ranks, 0 the lowest.
        distinct = sorted({r.priority for r in self.requests})
        rank_of = {p: rank for rank, p in enumerate(distinct)}
        rank = {r.name: rank_of[r.priority] for r in self.requests}
        # request -> (block level, block count, rank): what the replay reads of it most
        info = {r.name: (d.level, d.blocks, rank[r.name]) for r in self.requests for d in (self.demands[r.name],)}
        self.holders = Holders(self.geometry, cubes, len(distinct), info, self.demands)
        self.pending: dict[str, Request] = {}
        self.failed: set[str] = set()  # workloads that ended on a failed cube (A9)
        self.down: set[int] = set()  # the cubes whose hosts have failed
        self.events: list[Event] = []
        # Kueue's queue order (A7): highest priority first, then creation order, then name.
        queue = sorted(self.requests, key=lambda r: (-r.priority, r.order, r.name))
        self.queue = queue
        self.position = {r.name: index for index, r in enumerate(queue)}
        self.queue_rank = [rank[r.name] for r in queue]
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
        self.texts = Texts(self.geometry.cell_chips, self.geometry.cells)
        self.admitted_text = self.texts.admitted

    # -- the pending index

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
        ranks, avail, below, bisect_left = (
            self.queue_rank,
            self.holders.block.avail,
            self.holders.below,
            bisect.bisect_left,
        )
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

    # -- changing state

    def admit(self, request: Request, victims: tuple[Holding, ...], step: int, *, readmission: bool) -> None:
        for victim in victims:
            self.evict(victim, request, step)
        name = request.name
        holding = self.holders.take(request)
        if self.pending.pop(name, None) is not None:
            positions, union, position = self.slots[name]
            del positions[bisect_left(positions, position)]
            del union[bisect_left(union, position)]
        names = tuple([v.request.name for v in victims]) if victims else ()
        detail = (self.admitted_text, holding.spans, readmission, names)
        self.events.append(_lazy_event(step, name, "admitted", cubes=holding.cubes, victims=names, detail=detail))

    def evict(self, victim: Holding, preemptor: Request, step: int) -> None:
        request = victim.request
        name = request.name
        self.holders.drop(victim)
        self.pending[name] = request
        positions, union, position = self.slots[name]
        insort(positions, position)
        insort(union, position)
        detail = (preempted_text, preemptor.name, preemptor.priority, request.priority)
        self.events.append(_lazy_event(step, name, "preempted", cubes=victim.cubes, by=preemptor.name, detail=detail))

    def _queue(self, request: Request) -> None:
        self.pending[request.name] = request
        self._wait(request, True)

    # -- the queue

    def run(self) -> None:
        for step, arrival in enumerate(self.arrivals, start=1):
            preempted = False
            for request in arrival:  # an LWS's groups share a priority: one re-try pass after them all
                found = self.holders.search(request)
                if found.fits:
                    self.admit(request, found.victims, step, readmission=False)
                    preempted = preempted or bool(found.victims)
                else:
                    self._queue(request)
                    self.events.append(_event(step, request.name, "waiting", found.reason))
            if preempted:
                self.retry(step, arrival[0].priority)

    def fault(self, fault: CubeFault, step: int) -> None:
        """A cube's hosts fail or come back while the workloads run (A9), then every pending
        workload is tried again in queue order, as after a preemption (A7)."""
        cube = fault.cube
        if not 0 <= cube < self.cubes:
            raise ValueError(f"cube {cube} is not one of the {self.cubes} cubes")
        if fault.repaired:
            if cube not in self.down:
                raise ValueError(f"cube {cube} has not failed, so it cannot be repaired")
            self.down.discard(cube)
            self.holders.block.repair(cube)
        else:
            if cube in self.down:
                raise ValueError(f"cube {cube} has failed already")
            self.down.add(cube)
            for holding in [h for h in self.holders.holdings.values() if cube in h.cubes]:
                self._lose(holding, cube, step)
            self.holders.block.fail(cube)
        self.retry(step, self.queue[0].priority + 1 if self.queue else 0)

    def _lose(self, holding: Holding, cube: int, step: int) -> None:
        """A workload with a piece on failed `cube` loses it (A9): an LWS group is evicted and waits
        to be placed again (LWS makes the group anew); a Job that runs no restart fails and ends."""
        request = holding.request
        self.holders.drop(holding)
        if request.lws:
            self._queue(request)
            action: Action = "evicted"
            text = f"its hosts on cube {cube} failed: Kueue evicts it (NodeFailures) and it waits to be placed again"
        else:
            self.failed.add(request.name)
            action, text = "failed", f"its hosts on cube {cube} failed: its Job fails (no restart) and it ends"
        self.events.append(_lazy_event(step, request.name, action, cubes=holding.cubes, detail=(str, text)))

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
            found = self.holders.search(request, explain=False)
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
            holding = self.holders.holdings.get(request.name)
            if request.name in self.failed:
                final[request.name] = "failed"
                reasons[request.name] = "ended when its cube failed"
                continue
            if holding is None:
                final[request.name] = "pending"
                reasons[request.name] = self.holders.search(request).reason
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
            down=frozenset(self.down),
        )


def _event(step: int, workload: str, action: Action, detail: str) -> Event:
    """Event(...) without the frozen dataclass's __init__, which sets each field through
    object.__setattr__: the replay makes one per admission and eviction, and this is 3x cheaper."""
    event = _new(Event)
    event.__dict__.update(step=step, workload=workload, action=action, detail=detail, cubes=(), victims=(), by="")
    return event


def _lazy_event(
    step: int,
    workload: str,
    action: Action,
    *,
    cubes: tuple[int, ...],
    victims: tuple[str, ...] = (),
    by: str = "",
    detail: Any,
) -> Event:
    """An admission's or eviction's Event, built as `_event` builds one, its detail written when
    first read: `detail` is a function and its arguments (see Event)."""
    event = _new(Event)
    event.__dict__.update(
        step=step, workload=workload, action=action, cubes=cubes, victims=victims, by=by, _detail=detail
    )
    return event


_new = object.__new__


def predict(
    requests: Sequence[Request], cubes: int, generation: Generation, faults: Sequence[CubeFault] = ()
) -> Prediction:
    """Replay `requests` through the admission model (A1-A8) on `cubes` cubes of `generation`, then
    `faults` one after another, each a step of its own after the arrivals (A9)."""
    simulator = Simulator(requests, cubes, generation)
    # The replay allocates a few objects per event (holdings, events, their tuples) and keeps most
    # of them, in no reference cycle: the cyclic collector's passes during it (about 5% of its
    # time at 2,000 requests) would find nothing to free. Reference counting still frees the rest.
    enabled = gc.isenabled()
    gc.disable()
    try:
        simulator.run()
        for step, fault in enumerate(faults, start=len(simulator.arrivals) + 1):
            simulator.fault(fault, step)
        return simulator.prediction()
    finally:
        if enabled:
            gc.enable()
