"""TPU generations and slice-shape arithmetic, with no Pulumi in it.

Everything that needs to know how many chips, VMs, devices or bytes of HBM a
slice shape stands for goes through this module, so the configuration checks,
the Pulumi components and the offline plan all agree.

Sources (checked 2026-11):
- TPU7x: https://docs.cloud.google.com/tpu/docs/tpu7x (192 GiB HBM, 2 TensorCores
  per chip exposed to JAX as two devices, 9,216 chips per pod, 224 vCPU / 960 GB per
  4-chip VM) and GKE dynamic slicing docs (a 4x4x4 cube is
  16 tpu7x-standard-4t VMs, sub-slices 2x2x1..2x4x4, super-slices tile cubes).
- v5p / v6e / v5e: Cloud TPU system architecture pages and the GKE TPU table
  (labels tpu-v5p-slice, tpu-v6e-slice, tpu-v5-lite-podslice) and the machine-type
  tables for vCPU and memory per VM.
- 3-D shape rule (one of four small shapes, or every side a multiple of 4 with
  A <= B <= C) and the cube limits: xpk `core/system_characteristics.py`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import reduce
from operator import mul

GIB = 1024**3

# Matched with `fullmatch` (`$` would let a final "\n" through; settings/names.py says why).
_SHAPE_RE = re.compile(r"[1-9][0-9]*(x[1-9][0-9]*){1,2}", re.ASCII)


class TopologyError(ValueError):
    """A slice shape that is malformed or not allowed for a TPU generation."""


@dataclass(frozen=True, order=True)
class Topology:
    """A slice shape such as 4x4x8 (chips along each ICI axis)."""

    dims: tuple[int, ...]

    @classmethod
    def parse(cls, text: str) -> Topology:
        if not isinstance(text, str) or not _SHAPE_RE.fullmatch(text):
            raise TopologyError(
                f"{text!r} is not a slice shape: expected AxB or AxBxC with positive integers, e.g. 2x2x2"
            )
        return cls(tuple(int(part) for part in text.split("x")))

    def __str__(self) -> str:
        return "x".join(str(d) for d in self.dims)

    @property
    def chips(self) -> int:
        return reduce(mul, self.dims, 1)

    def divides(self, other: Topology) -> bool:
        """True when copies of this shape tile `other` exactly, axis by axis."""
        return len(self.dims) == len(other.dims) and all(o % s == 0 for s, o in zip(self.dims, other.dims, strict=True))


@dataclass(frozen=True)
class MachineType:
    name: str
    chips_per_vm: int
    vcpus: int
    memory_gib: int


@dataclass(frozen=True)
class Generation:
    """One TPU generation as GKE exposes it."""

    name: str
    accelerator_label: str  # value of cloud.google.com/gke-tpu-accelerator
    dimensions: int
    hbm_gib_per_chip: int
    tensorcores_per_chip: int
    devices_per_chip: int  # devices JAX reports per chip
    machine_types: tuple[MachineType, ...]
    multi_host_machine_type: str
    small_shapes: tuple[str, ...]  # shapes allowed besides the cube-multiple rule
    max_chips: int
    cube: str | None = None  # the unit a reservation sub-block and a super-slice are made of
    max_cubes: int = 0
    subslice_shapes: tuple[str, ...] = ()  # shapes the slice controller carves inside one cube
    # Backend names for the chip, or None where the backend has none: Saxml's --platform_chip
    # (model_service_main.py lists no v5p/v6e/TPU7x string) and Pathways' --instance_type prefix.
    saxml_chip: str | None = None
    pathways_type: str | None = None
    # Shapes one VM could hold that GKE also builds from several VMs of the multi-host type
    # (v6e: 2x4 on two ct6e-standard-4t, docs.cloud.google.com/tpu/docs/v6e "Supported configurations").
    split_shapes: tuple[str, ...] = ()

    def machine_type(self, name: str) -> MachineType:
        for machine in self.machine_types:
            if machine.name == name:
                return machine
        allowed = ", ".join(m.name for m in self.machine_types)
        raise TopologyError(f"{name!r} is not a {self.name} machine type; allowed: {allowed}")

    @property
    def cube_topology(self) -> Topology | None:
        return Topology.parse(self.cube) if self.cube else None

    def allowed_shape(self, text: str) -> Topology:
        """Parse `text` and check it is a slice shape this generation can form."""
        shape = Topology.parse(text)
        if len(shape.dims) != self.dimensions:
            raise TopologyError(f"{text!r} has {len(shape.dims)} dimensions; {self.name} slices have {self.dimensions}")
        if text in self.small_shapes:
            return shape
        if self.dimensions == 3:
            ordered = list(shape.dims) == sorted(shape.dims)
            multiples = all(d % 4 == 0 for d in shape.dims)
            if ordered and multiples and shape.chips <= self.max_chips:
                return shape
            raise TopologyError(
                f"{text!r} is not a {self.name} shape: use one of {', '.join(self.small_shapes)} "
                f"or AxBxC with A<=B<=C, each a multiple of 4, at most {self.max_chips} chips"
            )
        raise TopologyError(f"{text!r} is not a {self.name} shape; allowed: {', '.join(self.small_shapes)}")

    def shapes(self) -> list[Topology]:
        """Every shape `allowed_shape` accepts, smallest first (3-D: all cube multiples)."""
        found = {Topology.parse(s) for s in self.small_shapes}
        if self.dimensions == 3:
            limit = self.max_chips
            for a in range(4, limit + 1, 4):
                for b in range(a, limit // a + 1, 4):
                    for c in range(b, limit // (a * b) + 1, 4):
                        found.add(Topology((a, b, c)))
        return sorted(found, key=lambda t: (t.chips, t.dims))

    def host_machines(self, shape: Topology) -> tuple[MachineType, ...]:
        """Every machine type GKE can build `shape` from, the default (`host_machine`) first."""
        default = self._default_host(shape)
        found = [default]
        multi = self.machine_type(self.multi_host_machine_type)
        if str(shape) in self.split_shapes and multi != default:
            found.append(multi)
        return tuple(found)

    def host_machine(self, shape: Topology, machine: str | None = None) -> MachineType:
        """The machine type a slice of `shape` runs on: `machine` when given (it must be one of
        `host_machines`), else one VM holding the shape, else 4-chip VMs."""
        if machine is None:
            return self._default_host(shape)
        hosts = self.host_machines(shape)
        for host in hosts:
            if host.name == machine:
                return host
        raise TopologyError(f"topology {shape} runs on {' or '.join(h.name for h in hosts)} VMs, not {machine}")

    def _default_host(self, shape: Topology) -> MachineType:
        for machine in self.machine_types:
            if machine.chips_per_vm == shape.chips:
                return machine
        return self.machine_type(self.multi_host_machine_type)

    def vms(self, shape: Topology, machine: str | None = None) -> int:
        host = self.host_machine(shape, machine)
        if shape.chips % host.chips_per_vm:
            raise TopologyError(
                f"{shape} ({shape.chips} chips) does not split into {host.name} VMs of {host.chips_per_vm} chips"
            )
        return shape.chips // host.chips_per_vm

    def devices(self, shape: Topology) -> int:
        return shape.chips * self.devices_per_chip

    def hbm_bytes(self, shape: Topology) -> int:
        return shape.chips * self.hbm_gib_per_chip * GIB

    def subslice(self, text: str) -> Topology:
        """A shape the slice controller can carve inside one cube."""
        if text not in self.subslice_shapes:
            allowed = ", ".join(self.subslice_shapes) or "none"
            raise TopologyError(f"{text!r} is not a {self.name} sub-slice shape; allowed: {allowed}")
        return Topology.parse(text)

    def superslice_cubes(self, text: str) -> int:
        """How many whole cubes a super-slice of shape `text` spans."""
        cube = self.cube_topology
        if cube is None:
            raise TopologyError(f"{self.name} has no cubes, so it cannot form super-slices")
        shape = self.allowed_shape(text)
        if not cube.divides(shape):
            raise TopologyError(
                f"{text!r} does not tile whole {cube} cubes: every side must be a multiple of the cube's"
            )
        count = shape.chips // cube.chips
        if count < 2:
            raise TopologyError(f"{text!r} is a single cube, not a super-slice: use at least 2 cubes")
        if count > self.max_cubes:
            raise TopologyError(f"{text!r} spans {count} cubes; {self.name} allows at most {self.max_cubes}")
        return count

    def partition_label(self, shape: Topology) -> str:
        """The node label Kueue's topology uses to keep a slice of `shape` together."""
        if str(shape) in self.subslice_shapes:
            return f"cloud.google.com/gke-tpu-partition-{shape}-id"
        # Larger than a cube: a super-slice is kept inside one reservation block.
        return "cloud.google.com/gce-topology-block"

    def smallest_shape_holding(self, needed_bytes: int) -> Topology | None:
        for shape in self.shapes():
            if self.hbm_bytes(shape) >= needed_bytes:
                return shape
        return None


def _v4_style_small_shapes() -> tuple[str, ...]:
    return ("2x2x1", "2x2x2", "2x2x4", "2x4x4")


_TWO_D_SHAPES = ("1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16")

CATALOG: dict[str, Generation] = {
    "tpu7x": Generation(
        name="tpu7x",
        accelerator_label="tpu7x",
        dimensions=3,
        hbm_gib_per_chip=192,
        tensorcores_per_chip=2,
        devices_per_chip=2,
        machine_types=(MachineType("tpu7x-standard-4t", 4, vcpus=224, memory_gib=960),),
        multi_host_machine_type="tpu7x-standard-4t",
        small_shapes=_v4_style_small_shapes(),
        max_chips=144 * 64,
        cube="4x4x4",
        max_cubes=144,
        subslice_shapes=("2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4"),
    ),
    "v5p": Generation(
        name="v5p",
        accelerator_label="tpu-v5p-slice",
        dimensions=3,
        hbm_gib_per_chip=95,
        tensorcores_per_chip=2,
        devices_per_chip=1,  # megacore: JAX sees one device per v5p chip
        machine_types=(MachineType("ct5p-hightpu-4t", 4, vcpus=208, memory_gib=448),),
        multi_host_machine_type="ct5p-hightpu-4t",
        small_shapes=_v4_style_small_shapes(),
        max_chips=8960,
        pathways_type="tpuv5p",
    ),
    "v6e": Generation(
        name="v6e",
        accelerator_label="tpu-v6e-slice",
        dimensions=2,
        hbm_gib_per_chip=32,
        tensorcores_per_chip=1,
        devices_per_chip=1,
        machine_types=(
            MachineType("ct6e-standard-1t", 1, vcpus=44, memory_gib=176),
            MachineType("ct6e-standard-4t", 4, vcpus=180, memory_gib=720),
            MachineType("ct6e-standard-8t", 8, vcpus=180, memory_gib=1440),
        ),
        multi_host_machine_type="ct6e-standard-4t",
        small_shapes=_TWO_D_SHAPES,
        max_chips=256,
        pathways_type="tpuv6e",
        split_shapes=("2x4",),
    ),
    "v5e": Generation(
        name="v5e",
        accelerator_label="tpu-v5-lite-podslice",
        dimensions=2,
        hbm_gib_per_chip=16,
        tensorcores_per_chip=1,
        devices_per_chip=1,
        machine_types=(
            MachineType("ct5lp-hightpu-1t", 1, vcpus=24, memory_gib=48),
            MachineType("ct5lp-hightpu-4t", 4, vcpus=112, memory_gib=192),
            MachineType("ct5lp-hightpu-8t", 8, vcpus=224, memory_gib=384),
        ),
        multi_host_machine_type="ct5lp-hightpu-4t",
        small_shapes=_TWO_D_SHAPES,
        max_chips=256,
        saxml_chip="tpuv5e",
        pathways_type="tpuv5e",
    ),
}


def generation_of(machine_type: str) -> Generation:
    for generation in CATALOG.values():
        if any(m.name == machine_type for m in generation.machine_types):
            return generation
    known = ", ".join(m.name for g in CATALOG.values() for m in g.machine_types)
    raise TopologyError(f"unknown TPU machine type {machine_type!r}; known: {known}")


def weights_bytes(parameters_billions: float, bytes_per_parameter: float) -> int:
    return math.ceil(parameters_billions * 1e9 * bytes_per_parameter)


def chips_needed(needed_bytes: int, generation: Generation) -> int:
    return max(1, math.ceil(needed_bytes / (generation.hbm_gib_per_chip * GIB)))


def pack_into_cubes(slice_chips: list[int], cube_chips: int, cubes: int) -> list[list[int]] | None:
    """Place sub-slices into cubes, biggest first; None when they do not fit.

    Sub-slice shapes form a chain (2x2x1 | 2x2x2 | 2x2x4 | 2x4x4 | 4x4x4) whose chip
    counts divide each other, so first-fit by decreasing size is exact here: it
    fails only when no packing exists.
    """
    bins: list[list[int]] = [[] for _ in range(cubes)]
    free = [cube_chips] * cubes
    for chips in sorted(slice_chips, reverse=True):
        if chips > cube_chips:
            return None
        for index, room in enumerate(free):
            if room >= chips:
                bins[index].append(chips)
                free[index] -= chips
                break
        else:
            return None
    return bins
