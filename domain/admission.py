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
    one LWS created at once (one `order`) are one arrival: each is tried in turn (by
    name) before the re-tries that follow their preemptions (A7), since they sit in
    Kueue's queue above the victims. Groups an autoscaler adds later (a later `order`)
    are a later arrival of the same LWS.
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
    servers serve), node health (but for A9), admission checks and the slice controller's
    provisioning time are ignored, and there is no quota limit.
A9. A cube's hosts failing while the workloads run (`faults`, each a step after the arrivals).
    Every workload with a piece on the cube loses pods. Kueue's TAS failed-node replacement
    looks for a healthy node in the piece's own domain, finds none, and with the program's
    fail-fast gate evicts the workload, reason NodeFailures (kueue@v0.19.2
    pkg/scheduler/scheduler.go handleFailedTASReplacement; settings/rules_recovery.py). An LWS
    group is made again by LWS and queued again at its creation time's place (pkg/workload/
    workload.go GetQueueOrderTimestamp: the creation time unless evicted by PodsReadyTimeout
    or an admission check); a JobSet runs no restart (the program's checks: maxRestarts 0),
    so its Job fails on the lost pod and the workload ends ("failed"). The cube then offers no
    domain (Kueue keeps only Ready nodes: tas_nodes_cache.go) and holds nothing preemptable;
    every pending workload is tried again in queue order, as after a preemption (A7), and may
    preempt. A repaired cube is free again and the pending workloads are tried once more.
    Which of Kueue's and JobSet's reactions comes first for a JobSet is a race the model does
    not play: the plane judges only LWS groups on a failing cube (tests/test_cube_failure.py).
    A group whose two PodSets are one pod each (a 2x2x2 group: a leader and one worker) is not
    evicted by Kueue v0.19.2: each failed host is replaced alone wherever a pod fits ("no domain
    to comply with", tas_flavor_snapshot.go requiredReplacementDomain), which can split it across
    partitions; the model counts it as placed again, and plan/unhealthy.py says the caution.

The model by concern, each module citing the Kueue source it follows:
- domain/admission_requests.py: the requests, events, placements and the prediction (A1);
- domain/admission_cubes.py: the cubes, their aligned blocks and Kueue's best-fit placement (A2-A4);
- domain/admission_preemption.py: the holders by priority and whom a request preempts (A6);
- domain/admission_replay.py: the queue's replay, its re-tries, failed cubes and `predict` (A5, A7-A9);
- domain/admission_render.py: the narrative, the cube map and the event details, in words.
This module re-exports what the rest of the project uses.
"""

from __future__ import annotations

from domain.admission_render import DEFAULT_PRIORITY_NAMES, cube_span, narrative, plural_s, render_map, symbols
from domain.admission_replay import predict
from domain.admission_requests import (
    LWS_KIND,
    Action,
    CubeFault,
    Event,
    Placement,
    Prediction,
    Request,
    WorkloadLike,
    requests_from_workloads,
    with_added_groups,
)

__all__ = [
    "DEFAULT_PRIORITY_NAMES",
    "LWS_KIND",
    "Action",
    "CubeFault",
    "Event",
    "Placement",
    "Prediction",
    "Request",
    "WorkloadLike",
    "cube_span",
    "narrative",
    "plural_s",
    "predict",
    "render_map",
    "requests_from_workloads",
    "symbols",
    "with_added_groups",
]
