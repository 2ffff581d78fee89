"""What a stack holds and what its workloads ask for, in chips, VMs and HBM (no Pulumi)."""

from __future__ import annotations

from dataclasses import dataclass

from domain import topology
from settings.model import Backend, StackConfig


@dataclass(frozen=True)
class Workload:
    """One group of identical slices that Kueue admits (a JobSet or an LWS)."""

    name: str
    kind: str
    priority: str
    shape: str
    slices: int
    chips_per_slice: int
    vms_per_slice: int
    hbm_gib_per_slice: int
    serves: bool = True  # a serving role's (the chips a token is charged with), not a slicing check's

    @property
    def chips(self) -> int:
        return self.slices * self.chips_per_slice


@dataclass(frozen=True)
class Capacity:
    """The TPU node pools of a stack: cubes (dynamic slicing) or fixed slices."""

    generation: str
    unit: str  # "cube" or "slice"
    pools: int
    pool_topology: str
    vms: int
    chips: int
    devices: int
    hbm_gib: int
    reservation_paths: tuple[str | None, ...]  # None: on demand


@dataclass(frozen=True)
class NodePools:
    """The TPU node pools to create: the machine and how many of them make one pool."""

    generation: topology.Generation
    machine: topology.MachineType
    pools: int
    nodes_per_pool: int

    @property
    def vms(self) -> int:
        return self.pools * self.nodes_per_pool

    @property
    def chips(self) -> int:
        return self.vms * self.machine.chips_per_vm


def node_pools(config: StackConfig) -> NodePools:
    if config.serving.dynamic_slicing:
        # TPU7x cubes, carved into dynamic slices by Kueue and the slice controller.
        generation = config.tpu.generation
        return NodePools(
            generation, generation.machine_type(config.tpu.machine_type), config.tpu.cubes, config.tpu.vms_per_cube
        )
    # Saxml / JetStream: one node pool per multi-host slice of a fixed topology.
    serving = config.serving
    generation = serving.slice.generation
    return NodePools(generation, serving.slice.machine, serving.slices, serving.slice.vms)


def capacity(config: StackConfig) -> Capacity:
    if config.serving.dynamic_slicing:
        generation, shape, pools, unit = (
            config.tpu.generation,
            topology.Topology.parse(config.tpu.cube_topology),
            config.tpu.cubes,
            "cube",
        )
        vms_per_pool = config.tpu.vms_per_cube
    else:
        generation, shape, pools, unit = (
            config.serving.slice.generation,
            config.serving.slice.shape,
            config.serving.slices,
            "slice",
        )
        vms_per_pool = config.serving.slice.vms
    chips = pools * shape.chips
    return Capacity(
        generation=generation.name,
        unit=unit,
        pools=pools,
        pool_topology=str(shape),
        vms=pools * vms_per_pool,
        chips=chips,
        devices=chips * generation.devices_per_chip,
        hbm_gib=chips * generation.hbm_gib_per_chip,
        reservation_paths=tuple(config.pool_paths()),
    )


def _workload(
    config: StackConfig,
    *,
    name: str,
    kind: str,
    priority: str,
    shape_text: str,
    slices: int,
    machine: str | None = None,
    serves: bool = True,
) -> Workload:
    generation = config.tpu.generation if config.serving.dynamic_slicing else config.serving.slice.generation
    shape = topology.Topology.parse(shape_text)
    return Workload(
        name=name,
        kind=kind,
        priority=priority,
        shape=shape_text,
        slices=slices,
        chips_per_slice=shape.chips,
        vms_per_slice=generation.vms(shape, machine),
        hbm_gib_per_slice=shape.chips * generation.hbm_gib_per_chip,
        serves=serves,
    )


def workloads(config: StackConfig) -> list[Workload]:
    """Every TPU workload the stack would create, in the order Kueue would see them."""
    found = []
    sub, sup = config.checks.subslicing, config.checks.superslicing
    if sub.enabled:
        found.append(
            _workload(
                config,
                name="subslicing-check",
                kind="JobSet",
                priority="low",
                shape_text=sub.topology,
                slices=sub.replicas,
                serves=False,
            )
        )
    if sup.enabled:
        found.append(
            _workload(
                config,
                name="superslicing-check",
                kind="JobSet",
                priority="medium",
                shape_text=sup.topology,
                slices=1,
                serves=False,
            )
        )
    backend = config.serving.backend
    if backend in (Backend.SAXML, Backend.JETSTREAM):
        kind = "JobSet" if backend is Backend.SAXML else "LeaderWorkerSet"
        found.append(
            _workload(
                config,
                name=f"{backend.value}-model-servers",
                kind=kind,
                priority="-",
                shape_text=config.serving.slice.topology,
                slices=config.serving.slices,
                machine=config.serving.slice.machine_type,
            )
        )
    if backend is Backend.VLLM_PD:
        for role in ("prefill", "decode"):
            cfg = getattr(config.serving, role)
            found.append(
                _workload(
                    config,
                    name=f"vllm-{role}",
                    kind="LeaderWorkerSet",
                    priority="high",
                    shape_text=cfg.topology,
                    slices=cfg.replicas,
                )
            )
    return found
