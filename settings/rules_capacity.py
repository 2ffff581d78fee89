"""The TPU capacity a stack binds: the reservation, the TPU7x cubes, and the slicing checks in them.

Guards `reservation` (sub-blocks listed once and one per cube, no more cubes than the block holds),
`tpu` (a known machine type, the cube topology its generation builds) and `checks` (the sub-slicing
replicas and the super-slice fit in `tpu.cubes`). How Kueue admits onto the cubes is
settings/rules_kueue.py's; vLLM's serving sub-slices in them, settings/rules_serving.py's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from domain import topology
from settings.refused import RefusedClass

if TYPE_CHECKING:
    from settings.model import StackConfig, TpuConfig


def unique_sub_blocks(value: list[str] | None) -> list[str] | None:
    if value is not None:
        if not value:
            raise ValueError("subBlocks is empty: leave it out to bind pools to the whole block")
        duplicates = sorted({v for v in value if value.count(v) > 1})
        if duplicates:
            raise ValueError(f"sub-block {duplicates[0]!r} is listed twice")
    return value


def tpu_machine(value: str) -> str:
    try:
        topology.generation_of(value)
    except topology.TopologyError as err:
        raise ValueError(str(err)) from None
    return value


def cube(tpu: TpuConfig) -> None:
    generation = tpu.generation
    if generation.cube is None:
        raise ValueError(
            f"{tpu.machine_type} ({generation.name}) has no reservation cubes; the dynamic-slicing "
            "backends need tpu7x (use serving.backend saxml or jetstream for other generations)"
        )
    if tpu.cube_topology != generation.cube:
        raise ValueError(f"cubeTopology {tpu.cube_topology!r} must be {generation.cube!r} for {generation.name}")


def as_subslice(generation: topology.Generation, text: str, key: str) -> topology.Topology:
    try:
        return generation.subslice(text)
    except topology.TopologyError as err:
        raise ValueError(f"{key}: {err}") from None


def check_sub_blocks(config: StackConfig) -> None:
    if config.reservation is None or not config.serving.dynamic_slicing:
        return
    subs = config.reservation.sub_blocks
    if subs is not None and len(subs) != config.tpu.cubes:
        raise ValueError(
            f"reservation.subBlocks lists {len(subs)} sub-blocks but tpu.cubes is {config.tpu.cubes}: "
            "give one sub-block per cube"
        )
    if config.reservation.block_cubes is not None and config.tpu.cubes > config.reservation.block_cubes:
        raise ValueError(
            f"tpu.cubes {config.tpu.cubes} exceeds reservation.blockCubes {config.reservation.block_cubes}"
        )


def check_slices(config: StackConfig) -> None:
    """checks.subslicing and checks.superslicing: what they ask for fits in tpu.cubes."""
    generation = config.tpu.generation
    cube_chips = config.tpu.chips_per_cube
    sub = config.checks.subslicing
    if sub.enabled:
        shape = as_subslice(generation, sub.topology, "checks.subslicing.topology")
        if topology.pack_into_cubes([shape.chips] * sub.replicas, cube_chips, config.tpu.cubes) is None:
            per_cube = cube_chips // shape.chips
            raise ValueError(
                f"checks.subslicing.replicas {sub.replicas} of {sub.topology} do not fit: "
                f"{config.tpu.cubes} cubes hold at most {per_cube * config.tpu.cubes}"
            )
    sup = config.checks.superslicing
    if sup.enabled:
        try:
            cubes = generation.superslice_cubes(sup.topology)
        except topology.TopologyError as err:
            raise ValueError(f"checks.superslicing.topology: {err}") from None
        if cubes > config.tpu.cubes:
            raise ValueError(
                f"checks.superslicing.topology {sup.topology} spans {cubes} cubes but the stack holds "
                f"{config.tpu.cubes} (tpu.cubes)"
            )


REFUSED: tuple[RefusedClass, ...] = (
    RefusedClass(
        "sub-blocks not one per cube",
        check_sub_blocks,
        {"reservation": {"subBlocks": ["sb-0"]}},
        "reservation.subBlocks",
        "one sub-block per cube",
    ),
    RefusedClass(
        "sub-block listed twice",
        unique_sub_blocks,
        {"reservation": {"subBlocks": ["sb-0", "sb-0"]}},
        "reservation.subBlocks",
        "twice",
    ),
    RefusedClass(
        "unknown TPU machine type",
        tpu_machine,
        {"tpu": {"machineType": "tpu7x-standard-8t"}},
        "tpu.machineType",
        "tpu7x-standard-4t",
    ),
    RefusedClass("cube topology of another shape", cube, {"tpu": {"cubeTopology": "4x4x8"}}, "tpu", "4x4x4"),
    RefusedClass(
        "sub-slices that do not fit the cubes",
        check_slices,
        {"checks": {"subslicing": {"enabled": True, "replicas": 17}}},
        "checks.subslicing.replicas",
        "at most 16",
    ),
    RefusedClass(
        "super-slice larger than the cubes",
        check_slices,
        {"checks": {"superslicing": {"enabled": True, "topology": "4x8x8"}}},
        "checks.superslicing.topology",
        "tpu.cubes",
    ),
)
