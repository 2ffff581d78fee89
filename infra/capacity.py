"""What a stack holds and what its workloads ask for, in chips, VMs and HBM (no Pulumi)."""

from __future__ import annotations

from dataclasses import dataclass

from infra import topology
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

    @property
    def chips(self) -> int:
        return self.slices * self.chips_per_slice


@dataclass(frozen=True)
class Capacity:
    generation: str
    cubes: int
    vms: int
    chips: int
    devices: int
    hbm_gib: int
    cube_topology: str
    reservation_paths: tuple[str, ...]


def capacity(config: StackConfig) -> Capacity:
    generation = config.tpu.generation
    cube = topology.Topology.parse(config.tpu.cube_topology)
    return Capacity(
        generation=generation.name,
        cubes=config.tpu.cubes,
        vms=config.tpu.cubes * generation.vms(cube),
        chips=config.tpu.total_chips,
        devices=config.tpu.total_chips * generation.devices_per_chip,
        hbm_gib=config.tpu.total_chips * generation.hbm_gib_per_chip,
        cube_topology=str(cube),
        reservation_paths=tuple(config.reservation.pool_paths(config.reservation_project, config.tpu.cubes)),
    )


def _workload(config: StackConfig, *, name: str, kind: str, priority: str, shape_text: str, slices: int) -> Workload:
    generation = config.tpu.generation
    shape = topology.Topology.parse(shape_text)
    return Workload(
        name=name,
        kind=kind,
        priority=priority,
        shape=shape_text,
        slices=slices,
        chips_per_slice=shape.chips,
        vms_per_slice=generation.vms(shape),
        hbm_gib_per_slice=shape.chips * generation.hbm_gib_per_chip,
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
            )
        )
    if sup.enabled:
        found.append(
            _workload(
                config, name="superslicing-check", kind="JobSet", priority="medium", shape_text=sup.topology, slices=1
            )
        )
    if config.serving.backend is Backend.VLLM_PD:
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
