"""The reservations the stand-in project holds: what the stacks' owner was sold, declared here.

A fixture, written down from how Google describes these reservations, and never derived from the
program (no import of `domain/` or `settings/`) or from a stack file: the stand-in judges a stack
against it, so a wrong zone, machine type, sub-block or VM count in the program is refused as GCP
would refuse it, instead of being agreed with.

- **TPU7x, All Capacity mode** (`TPU7X`). A reservation lives in one zone and is listed by
  `gcloud beta compute reservations sub-blocks list` as blocks of sub-blocks with `count`,
  `inUseCount` and `healthInfo.healthStatus` (the fields xpk reads: AI-Hypercomputer/xpk
  src/xpk/core/reservation.py `list_healthy_sub_blocks`). GKE's dynamic-slicing guide calls a
  sub-block the basic unit of Ironwood (TPU7x) capacity, 16 TPU VM nodes whose chips form a 4x4x4
  topology, and maps one node pool to one sub-block (docs.cloud.google.com/kubernetes-engine/docs/
  how-to/use-gke-dynamic-slicing, "What is dynamic slicing?"); each TPU7x VM, `tpu7x-standard-4t`, holds
  four chips (docs.cloud.google.com/kubernetes-engine/docs/concepts/tpu-ironwood, "NUMA binding").
  The example reservation sits in the AI zone `us-central1-ai1a` (AI zones: docs.cloud.google.com/
  compute/docs/regions-zones/ai-zones) and has one block of four such sub-blocks, all healthy and
  free.
- **TPU v5e** (`V5E`): a plain specific reservation, no blocks (All Capacity mode is v6e and TPU7x
  only: docs.cloud.google.com/tpu/docs/all-capacity-overview, "Supported TPU versions"), of
  `ct5lp-hightpu-4t` VMs, the machine type of multi-host v5e slices (GKE "Plan TPUs in GKE", v5e
  rows), in `us-west4-a`, a v5e zone (docs.cloud.google.com/tpu/docs/regions-zones): 16 VMs,
  two 4x8 slices of 8 VMs (a 4x8 slice is 32 chips, four to a VM).

What changes under a stack is the project's to model (tests/standins/gcp_project.py): `inUseCount` rises
when a pool is created on a sub-block and falls when it is deleted, and `Project.set_sub_block` plays what
Google does meanwhile: a sub-block turns DEGRADED, hosts are taken by hand, or All Capacity maintenance is
announced for a sub-block (compute/v1 `reservationSubBlockMaintenance`, a GroupMaintenanceInfo whose
`upcomingGroupMaintenance` has the window; GKE's TPU7x maintenance docs announce it per sub-block, about 90
days ahead). It answers pulumi-gcp 10.2.0's getReservationBlock and getReservationSubBlock, whose
maintenance result has counts and no window, as the real provider's does. It cannot show: how long GCP
takes to report a degraded host, what ongoing maintenance does to running VMs, healthy/degraded host
counts within a sub-block (only its status), the physical topology hashes, GKE's dated rule for pending
maintenance before sub-slicing works (the dynamic-slicing guide's 2026-09-18..30 note), or a reservation
shared with another project.

`declare(project)` puts every one into a stand-in project, under the project's own id (an owner's
reservation sits in the owner's project).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tests.standins.gcp_project import Project, SubBlock

TPU7X_SUB_BLOCK_HOSTS = 16  # one 4x4x4 sub-block: 64 chips, four per tpu7x-standard-4t VM


@dataclass(frozen=True)
class Reservation:
    name: str
    zone: str
    machine_type: str
    blocks: Mapping[str, Mapping[str, SubBlock]] = field(default_factory=dict)
    count: int | None = None  # a reservation without blocks: its VM count

    def path(self, project: str) -> str:
        return f"projects/{project}/reservations/{self.name}"


TPU7X = Reservation(
    name="example-tpu7x-reservation",
    zone="us-central1-ai1a",
    machine_type="tpu7x-standard-4t",
    blocks={"block-0": {f"sub-block-{i}": SubBlock(TPU7X_SUB_BLOCK_HOSTS) for i in range(4)}},
)

V5E = Reservation(name="example-v5e-reservation", zone="us-west4-a", machine_type="ct5lp-hightpu-4t", count=16)

RESERVATIONS: tuple[Reservation, ...] = (TPU7X, V5E)


def declare(project: Project, reservations: tuple[Reservation, ...] = RESERVATIONS) -> Project:
    """Every reservation of the fixture, in `project`, as its owner holds it before the first `up`."""
    for reservation in reservations:
        project.declare_reservation(
            reservation.path(project.project_id),
            zone=reservation.zone,
            machine_type=reservation.machine_type,
            sub_blocks=reservation.blocks,
            count=reservation.count,
        )
    return project
