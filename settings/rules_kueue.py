"""Kueue on the TPU7x cubes: the Topology levels it admits workloads by, and the priority classes.

Guards `kueue.topologyLevels` (labels GKE puts on the generation's cube nodes, widest first, each
once, with every level the stack's shapes and Kueue itself need) and `kueue.priorities` (rising).
"""

from __future__ import annotations

import difflib
import itertools
from typing import TYPE_CHECKING, Any

from domain.topology import Generation, Topology
from settings.refused import RefusedClass
from settings.rules_backends import Backend

if TYPE_CHECKING:
    from settings.model import Priorities, StackConfig

DEFAULT_TOPOLOGY_LEVELS = (
    "cloud.google.com/gce-topology-block",
    "cloud.google.com/gke-tpu-partition-4x4x4-id",
    "cloud.google.com/gke-tpu-partition-2x4x4-id",
    "cloud.google.com/gke-tpu-partition-2x2x4-id",
    "cloud.google.com/gke-tpu-partition-2x2x2-id",
    "cloud.google.com/gke-tpu-partition-2x2x1-id",
    "kubernetes.io/hostname",
)
HOSTNAME_LEVEL = "kubernetes.io/hostname"
BLOCK_LEVEL = "cloud.google.com/gce-topology-block"
ZONE_LEVEL = "topology.kubernetes.io/zone"
NODEPOOL_LEVEL = "cloud.google.com/gke-nodepool"


def topology_level_order(generation: Generation) -> tuple[str, ...]:
    """Every node label a Kueue Topology level may name on `generation`'s cube nodes, widest domain first.

    GKE labels TPU7x cube nodes with their reservation block, sub-block and host
    (cloud.google.com/ai-hypercomputer/docs/workloads/schedule-gke-workloads-tas) and with one
    `gke-tpu-partition-<shape>-id` per sub-slice shape (dynamic-slicing.md §8, the reference's seven
    levels; domain/topology.py `partition_label`). Kueue reads levels top down, each nested in the one
    above (kubernetes-sigs/kueue keps/2724-topology-aware-scheduling), so a sub-block (one cube) sits
    between the block and the partitions, the largest partition first, and the host and node last.
    """
    partitions = sorted(
        (Topology.parse(s) for s in generation.subslice_shapes), key=lambda t: (-t.chips, tuple(-d for d in t.dims))
    )
    return (
        ZONE_LEVEL,  # labels every GKE node carries (well-known labels; GKE node pools), widest first
        BLOCK_LEVEL,
        NODEPOOL_LEVEL,  # one pool per cube or per block share (infra/tpu_pools.py): inside a block
        "cloud.google.com/gce-topology-subblock",
        *(generation.partition_label(shape) for shape in partitions),
        "cloud.google.com/gce-topology-host",
        HOSTNAME_LEVEL,
    )


def topology_levels_problem(levels: list[str], generation: Generation, required: dict[str, str]) -> str | None:
    """Why Kueue would never admit the stack's workloads with these Topology levels, or None.

    `required` maps a level to what asks for it (a shape key of the stack, or Kueue itself).
    """
    order = topology_level_order(generation)
    allowed = (
        f"allowed, widest first: {', '.join(order)}; required here: {', '.join(sorted(required, key=order.index))}"
    )
    for level in levels:
        if level not in order:
            close = difflib.get_close_matches(level, order, n=1, cutoff=0.8)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            return f"has {level!r}, which is no label GKE puts on {generation.name} cube nodes{hint}; {allowed}"
    for level in levels:
        if levels.count(level) > 1:
            return f"lists {level!r} twice; {allowed}"
    for above, below in itertools.pairwise(levels):
        if order.index(above) > order.index(below):
            return f"puts {above!r} above {below!r}, but Kueue's levels go from the widest domain down; {allowed}"
    for level, reason in sorted(required.items(), key=lambda item: order.index(item[0])):
        if level not in levels:
            return f"lacks {level!r}, which {reason} needs, so its workloads would never be admitted; {allowed}"
    return None


def priorities_ordered(priorities: Priorities) -> None:
    if not priorities.low < priorities.medium < priorities.high:
        raise ValueError(
            f"priorities must rise low < medium < high; got {priorities.low}, {priorities.medium}, {priorities.high}"
        )


def check_topology_levels(config: StackConfig) -> None:
    if not config.serving.dynamic_slicing:
        return
    generation = config.tpu.generation
    required = {HOSTNAME_LEVEL: "Kueue (it assigns pods to nodes by the lowest level)"}
    uses: list[tuple[str, str]] = []
    if config.serving.backend is Backend.VLLM_PD:
        uses += [("serving.prefill.topology", config.serving.prefill.topology)]
        uses += [("serving.decode.topology", config.serving.decode.topology)]
    if config.checks.subslicing.enabled:
        uses.append(("checks.subslicing.topology", config.checks.subslicing.topology))
    if config.checks.superslicing.enabled:
        uses.append(("checks.superslicing.topology", config.checks.superslicing.topology))
    for key, shape in uses:
        level = generation.partition_label(Topology.parse(shape))
        required.setdefault(level, f"{key} {shape}")
    problem = topology_levels_problem(config.kueue.topology_levels, generation, required)
    if problem:
        raise ValueError(f"kueue.topologyLevels {config.kueue.topology_levels} {problem}")


def _levels(*levels: str) -> dict[str, Any]:
    return {"kueue": {"topologyLevels": list(levels)}}


_D = DEFAULT_TOPOLOGY_LEVELS

REFUSED: tuple[RefusedClass, ...] = (
    RefusedClass(
        "priorities not rising", priorities_ordered, {"kueue": {"priorities": {"low": 5000}}}, "kueue.priorities", "<"
    ),
    RefusedClass(
        "topology levels reversed",
        topology_levels_problem,
        _levels(*reversed(_D)),
        "kueue.topologyLevels",
        "allowed, widest first",
    ),
    RefusedClass(
        "topology level misspelled",
        topology_levels_problem,
        _levels(*(level.replace("block", "blok") for level in _D)),
        "kueue.topologyLevels",
        "did you mean 'cloud.google.com/gce-topology-block'",
    ),
    RefusedClass(
        "topology level listed twice",
        topology_levels_problem,
        _levels(*_D[:2], *_D[1:]),
        "kueue.topologyLevels",
        "twice",
    ),
    RefusedClass(
        "topology levels without a level the stack's shapes use",
        topology_levels_problem,
        _levels(*(level for level in _D if "2x2x2" not in level)),
        "kueue.topologyLevels",
        "which serving.prefill.topology 2x2x2 needs",
    ),
    RefusedClass(
        "topology levels without the node level",
        topology_levels_problem,
        _levels(*_D[:-1]),
        "kueue.topologyLevels",
        "required here",
    ),
)
