"""What the admission model reads and answers: requests, events, placements and the prediction.

A `Request` is one Kueue Workload (assumption A1 of domain/admission.py). A LeaderWorkerSet
becomes one request per group, as Kueue makes one Workload per LWS group, all created at once
with one leader and one worker PodSet (kueue@v0.19.2
pkg/controller/jobs/leaderworkerset/leaderworkerset_reconciler.go filterWorkloads, podSets).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

Action = Literal["admitted", "waiting", "preempted", "evicted", "failed"]


@dataclass(frozen=True)
class CubeFault:
    """A cube's hosts failing, or coming back, while the workloads run (A9 of domain/admission.py)."""

    cube: int
    repaired: bool = False  # False: every host of the cube fails; True: they are all healthy again


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
    cubes: tuple[int, ...] = ()  # admitted: the cubes it now uses; preempted, evicted, failed: the cubes it left
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
    final: Mapping[str, str]  # workload -> "admitted" | "pending" | "failed" (ended on a failed cube, A9)
    reasons: Mapping[str, str]  # workload -> where it runs, or why it waits
    placements: tuple[Placement, ...]  # admitted workloads only, by request order, slice, cube
    cubes: int
    cube_chips: int
    cell_chips: int
    requests: tuple[Request, ...]  # in queue order
    down: frozenset[int] = frozenset()  # the cubes whose hosts have failed and are not repaired (A9)

    @property
    def admitted(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.requests if self.final[r.name] == "admitted")

    @property
    def pending(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.requests if self.final[r.name] == "pending")

    @property
    def failed(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.requests if self.final[r.name] == "failed")

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

    def pending_groups(self, workload: str) -> int:
        """How many of a workload's requests wait (an ended one does not)."""
        return sum(self.final[r.name] == "pending" for r in self.members(workload))

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


def with_added_groups(requests: list[Request], added: Mapping[str, int]) -> list[Request]:
    """`requests`, then `added[lws]` more groups of each LeaderWorkerSet, arriving after all of them.

    An autoscaler scales a running LWS out: its new groups are new Workloads, created together when
    it raises `replicas` (A5), after what the stack created at first; they are numbered on from the
    LWS's last group, with its priority and shape. Each LWS named must have a group in `requests`.
    """
    found = list(requests)
    order = max((r.order for r in requests), default=-1)
    for lws, count in added.items():
        members = [r for r in requests if r.lws == lws]
        if not members:
            raise ValueError(f"{lws}: no group of it to add to")
        order += 1
        first = members[0]
        found += [
            Request(f"{lws}/{len(members) + k}", first.priority, first.shape, 1, order, lws=lws) for k in range(count)
        ]
    return found
