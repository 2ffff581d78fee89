"""Contradictions between stacks: stack files each valid alone that cannot all hold at once.

The settings and `pulumi preview` judge one stack; two stacks of one reservation block or one
project can each pass and still contradict each other. Each rule here sees every stack at once and
refuses one kind of contradiction, naming both stacks and the key to change. plan/stacks.py
gives each stack its `FleetStack` (its settings, and the Workload Identity principals its program
grants roles to, which only the components name) and runs `check`: `make stacks`, `make fleet`,
`python -m operate rollout` before its first step, and the `stacks` jobs of preview.yml and
deploy.yml (`make stacks`) all refuse by this one function.

Each rule's row in `CONTRADICTIONS` has an example (two stack files, each a committed one with a
change: tests/test_fleet_contradictions.py writes them and requires every command to refuse them,
naming both stacks and the key) and the source of the fact that makes the two contradict. Unlike
the `REFUSED` rows of the other rules_*.py modules, no single stack file is refused by these, so
settings/refusals.py does not collect them. Plain Python over the settings; no Pulumi.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from settings.model import ReservationConfig, StackConfig

ROLES = ("prefill", "decode")


@dataclass(frozen=True)
class Principal:
    """A Kubernetes service account that a stack's program grants Google Cloud roles to, as IAM
    names it: the project's workload pool, the namespace and the name, never the cluster."""

    namespace: str
    service_account: str
    key: str  # the stack-file key that decides it (serving.namespace for the serving identities)
    holder: str  # what runs as it
    allowed: str = ""  # what one of the two stacks may do instead (default: another `key`)

    def member(self, project: str) -> str:
        # IAM writes the project's number where PROJECT_NUMBER stands; the pool is named by the id.
        return (
            "principal://iam.googleapis.com/projects/PROJECT_NUMBER/locations/global/workloadIdentityPools/"
            f"{project}.svc.id.goog/subject/ns/{self.namespace}/sa/{self.service_account}"
        )


@dataclass(frozen=True)
class FleetStack:
    """One stack as the fleet's rules read it."""

    name: str
    config: StackConfig
    principals: tuple[Principal, ...] = ()


@dataclass(frozen=True)
class Contradiction:
    """What the fleet refuses: the stacks (two, or every stack of a block for its capacity), the
    stack-file key to change and why. An invalid stack file is one too, of one stack and no key."""

    stacks: tuple[str, ...]
    message: str
    key: str = ""

    def __str__(self) -> str:
        named = " and ".join(sorted(self.stacks))
        return f"{named}: {self.key}: {self.message}" if self.key else f"{named}: {self.message}"


Rule = Callable[[Sequence[FleetStack]], list[Contradiction]]


def block_path(config: StackConfig) -> str | None:
    """The reservation block a TPU7x stack's pools bind to; None for a stack that binds none."""
    reservation = config.reservation
    if reservation is None or reservation.block is None or not config.serving.dynamic_slicing:
        return None
    return reservation.path(config.project)  # projects/P/reservations/R/reservationBlocks/B


def _reservation(stack: FleetStack) -> ReservationConfig:
    reservation = stack.config.reservation
    assert reservation is not None  # blocks() keeps the stacks that bind a block
    return reservation


def blocks(stacks: Sequence[FleetStack]) -> dict[str, list[FleetStack]]:
    """The stacks that bind each reservation block, by the block's path, in the order given."""
    found: dict[str, list[FleetStack]] = defaultdict(list)
    for stack in stacks:
        path = block_path(stack.config)
        if path is not None:
            found[path].append(stack)
    return dict(sorted(found.items()))


def shared_principals(stacks: Sequence[FleetStack]) -> list[Contradiction]:
    # Source: GKE, "About Workload Identity Federation for GKE", identity sameness
    # (docs.cloud.google.com/kubernetes-engine/docs/concepts/workload-identity): a principal names the
    # project's pool PROJECT_ID.svc.id.goog, the namespace and the Kubernetes service account, not the
    # cluster, so one namespace and name in two clusters of a project is one IAM identity; the fleet
    # guide says it too (docs.cloud.google.com/kubernetes-engine/fleet-management/docs/
    # best-practices-workload-identity: "workloads running in a specific namespace share the same IAM
    # identity across clusters within a project").
    found = []
    owner: dict[tuple[str, str, str], tuple[str, Principal]] = {}
    for stack in stacks:
        project = stack.config.project
        for principal in stack.principals:
            identity = (project, principal.namespace, principal.service_account)
            first, had = owner.setdefault(identity, (stack.name, principal))
            if first == stack.name:
                continue
            keys = dict.fromkeys((had.key, principal.key))
            allowed = principal.allowed or had.allowed or f"another {principal.key} in one of them"
            held = (
                f"{had.holder} in both"
                if had.holder == principal.holder
                else f"{had.holder} of {first}, {principal.holder} of {stack.name}"
            )
            found.append(
                Contradiction(
                    (first, stack.name),
                    f"both grant Google Cloud roles to {principal.member(project)} ({held}): IAM names the "
                    "project's workload pool, the namespace and the service account, never the cluster (GKE "
                    "identity sameness), so the pods of each stack hold the other's grants, and where both grant "
                    f"one role on one resource, destroying either stack revokes it for the other; allowed: {allowed}",
                    " and ".join(keys),
                )
            )
    return found


def block_zones(stacks: Sequence[FleetStack]) -> list[Contradiction]:
    # Source: Compute Engine, "Reservations of Compute Engine zonal resources"
    # (docs.cloud.google.com/compute/docs/instances/reservations-overview, "How reservations work"):
    # a reservation is of one zone, and a VM consumes it only when its zone (and project, machine
    # type) match exactly; a block is a part of one reservation.
    found = []
    for where, group in blocks(stacks).items():
        first = group[0]
        for other in group[1:]:
            if other.config.zone != first.config.zone:
                found.append(
                    Contradiction(
                        (first.name, other.name),
                        f"claim {where} from zone {first.config.zone!r} ({first.name}) and zone "
                        f"{other.config.zone!r} ({other.name}): a reservation is of one zone and only VMs of "
                        "that zone consume it, so the pools of one of them never get its capacity; allowed: "
                        "the reservation's zone in both",
                        "zone",
                    )
                )
    return found


def block_sizes(stacks: Sequence[FleetStack]) -> list[Contradiction]:
    # Source: compute/v1 ReservationBlock `reservationSubBlockCount`, "the number of reservation
    # subBlocks associated with this reservation block" (one number per block), and GKE's dynamic
    # slicing guide: a sub-block is one TPU7x cube (docs.cloud.google.com/kubernetes-engine/docs/
    # how-to/use-gke-dynamic-slicing, "What is dynamic slicing?").
    found = []
    for where, group in blocks(stacks).items():
        declared = [(s, _reservation(s).block_cubes) for s in group if _reservation(s).block_cubes is not None]
        if not declared:
            continue
        first, size = declared[0]
        for other, theirs in declared[1:]:
            if theirs != size:
                found.append(
                    Contradiction(
                        (first.name, other.name),
                        f"declare different blockCubes for {where}: {size} ({first.name}) and {theirs} "
                        f"({other.name}); a block has one number of sub-blocks, one cube each, so the capacity "
                        "check of one of them is wrong; allowed: the block's reservationSubBlockCount in both",
                        "reservation.blockCubes",
                    )
                )
    return found


def whole_block_beside_sub_blocks(stacks: Sequence[FleetStack]) -> list[Contradiction]:
    # Source: GKE, "Consuming reserved zonal resources" (docs.cloud.google.com/kubernetes-engine/
    # docs/how-to/consuming-reservations): a pool whose reservation affinity names the block takes
    # its capacity wherever in the block GKE finds it; one that names a sub-block, from that sub-block
    # only (GKE's dynamic slicing guide maps one node pool to one sub-block). A pool bound to the whole
    # block may so take a sub-block another stack names, and that stack's pool then finds it full.
    found = []
    for where, group in blocks(stacks).items():
        whole = [s for s in group if not _reservation(s).sub_blocks]
        parts = [s for s in group if _reservation(s).sub_blocks]
        for binder in whole:
            for other in parts:
                subs = ", ".join(_reservation(other).sub_blocks or ())
                found.append(
                    Contradiction(
                        (binder.name, other.name),
                        f"{binder.name} binds its pools to the whole block {where} (no reservation.subBlocks) "
                        f"beside {other.name}'s sub-blocks {subs}: GKE places a pool bound to the block on any "
                        f"sub-block with room, {other.name}'s among them; allowed: sub-blocks in {binder.name} "
                        f"too, none of {other.name}'s",
                        "reservation.subBlocks",
                    )
                )
    return found


def overlapping_sub_blocks(stacks: Sequence[FleetStack]) -> list[Contradiction]:
    # Source: GKE's dynamic slicing guide maps one node pool to one sub-block, a cube of 16 TPU7x
    # VMs (docs.cloud.google.com/kubernetes-engine/docs/how-to/use-gke-dynamic-slicing, "What is
    # dynamic slicing?"): a second stack's pool on the same sub-block finds no VM free.
    found = []
    for where, group in blocks(stacks).items():
        owner: dict[str, str] = {}
        for stack in group:
            for sub in _reservation(stack).sub_blocks or ():
                first = owner.setdefault(sub, stack.name)
                if first != stack.name:
                    found.append(
                        Contradiction(
                            (first, stack.name),
                            f"both claim sub-block {sub!r} of {where}; allowed: disjoint sub-blocks",
                            "reservation.subBlocks",
                        )
                    )
    return found


def most_cubes(config: StackConfig) -> int:
    """The most cubes a stack holds: its TPU pools, one per cube, of a fixed size. An autoscaled
    role grows inside them (settings/rules_autoscaling.py refuses a `max` they cannot hold), so at
    every autoscaler's maximum the stack holds no more than `tpu.cubes`."""
    return config.tpu.cubes


def _autoscaled(config: StackConfig) -> str:
    serving = config.serving
    maxima = [
        f"{role} max {getattr(serving, role).autoscaling.max}" for role in ROLES if getattr(serving, role).autoscaling
    ]
    return f" with {' and '.join(maxima)} inside them" if maxima else ""


def block_capacity(stacks: Sequence[FleetStack]) -> list[Contradiction]:
    # Source: compute/v1 ReservationBlock `reservationSubBlockCount` (what reservation.blockCubes
    # states), one cube per sub-block (GKE's dynamic slicing guide, above); each TPU7x pool holds a
    # whole cube (docs.cloud.google.com/kubernetes-engine/docs/concepts/tpu-ironwood): past the count,
    # a pool waits for VMs the block does not have.
    found = []
    for where, group in blocks(stacks).items():
        sizes = {size for s in group if (size := _reservation(s).block_cubes) is not None}
        if len(sizes) != 1:
            continue  # unknown, or disagreeing: block_sizes refuses that
        size = sizes.pop()
        used = sum(most_cubes(s.config) for s in group)
        if used > size:
            detail = ", ".join(f"{s.name} {most_cubes(s.config)}{_autoscaled(s.config)}" for s in group)
            found.append(
                Contradiction(
                    tuple(s.name for s in group),
                    f"claim {used} cubes of {where} with every autoscaler at its max ({detail}), and it holds "
                    f"{size} (reservation.blockCubes); allowed: at most that many tpu.cubes in all",
                    "tpu.cubes",
                )
            )
    return found


def derived_names(stacks: Sequence[FleetStack]) -> list[Contradiction]:
    # Source: Compute Engine resource names are unique per project for the kind (networks,
    # firewalls, and per region for subnetworks and resource policies), GKE's cluster and node pool
    # names per project and location, and Cloud Storage bucket names globally
    # (docs.cloud.google.com/compute/docs/naming-resources, docs.cloud.google.com/storage/docs/
    # buckets#naming): a second stack's create of the same name fails, or adopts nothing.
    owner: dict[tuple[str, str, str], str] = {}
    shared: dict[tuple[str, str, str, str], list[str]] = defaultdict(list)
    for stack in stacks:
        config = stack.config
        for name in [*config.names.gcp_names(config.pool_keys()), config.names.sax_bucket(config.project)]:
            first = owner.setdefault((config.project, config.location, name), stack.name)
            if first != stack.name:
                shared[(first, stack.name, config.project, config.location)].append(name)
    return [
        Contradiction(
            (first, second),
            f"both derive the name(s) {', '.join(repr(n) for n in names)} in {project}/{location}; "
            "allowed: another namePrefix in one of them",
            "namePrefix",
        )
        for (first, second, project, location), names in shared.items()
    ]


@dataclass(frozen=True)
class FleetRule:
    """One row: the rule, two stack files that contradict by it alone (each the committed stack file
    named first with the change after it, written under the name that keys it), the key the refusal
    names and a fragment of what it says is allowed."""

    name: str
    rule: Rule
    example: Mapping[str, tuple[str, Mapping[str, Any]]]
    key: str
    allowed: str


# dev and dev-b share block-0 of one reservation (sub-blocks 0-1 and 2-3, blockCubes 4): each
# example changes one of them, or adds a copy of dev, so that exactly its own rule refuses.
DEV_TWIN = {"namePrefix": "dev2", "reservation": {"subBlocks": ["sub-block-2", "sub-block-3"]}}
AUTOSCALED_DEV = {
    "serving": {"decode": {"autoscaling": {"min": 1, "max": 2, "metric": "vllm:num_requests_waiting", "target": 4}}}
}
ADAPTER_ALLOWED = (
    "one stack per project with autoscaled roles and its own adapter (the adapter's namespace and name are "
    "fixed), or controllers.install false where the cluster's platform team serves the metrics API"
)
CONTRADICTIONS: tuple[FleetRule, ...] = (
    FleetRule(
        "one Workload Identity principal granted by two stacks of a project",
        shared_principals,
        # The custom metrics adapter's account is fixed by its upstream manifest; the stacks' own
        # accounts derive from namePrefix and part with it.
        {"dev": ("dev", AUTOSCALED_DEV), "dev2": ("dev", {**DEV_TWIN, **AUTOSCALED_DEV})},
        "serving.decode.autoscaling",
        ADAPTER_ALLOWED,
    ),
    FleetRule(
        "one block claimed from two zones",
        block_zones,
        {"dev": ("dev", {}), "dev-b": ("dev-b", {"zone": "us-central1-c"})},
        "zone",
        "the reservation's zone in both",
    ),
    FleetRule(
        "one block declared with two sizes",
        block_sizes,
        {"dev": ("dev", {}), "dev-b": ("dev-b", {"reservation": {"blockCubes": 8}})},
        "reservation.blockCubes",
        "the block's reservationSubBlockCount",
    ),
    FleetRule(
        "a whole-block binding beside sub-block bindings of the block",
        whole_block_beside_sub_blocks,
        {"dev": ("dev", {}), "dev-b": ("dev-b", {"reservation": {"subBlocks": None}})},
        "reservation.subBlocks",
        "sub-blocks in dev-b too",
    ),
    FleetRule(
        "one sub-block claimed by two stacks",
        overlapping_sub_blocks,
        {"dev": ("dev", {}), "dev-b": ("dev-b", {"reservation": {"subBlocks": ["sub-block-1", "sub-block-2"]}})},
        "reservation.subBlocks",
        "disjoint sub-blocks",
    ),
    FleetRule(
        "more cubes at the autoscalers' maxima than the block holds",
        block_capacity,
        {
            "dev": ("dev", {}),
            "dev-b": (
                "dev-b",
                {"tpu": {"cubes": 3}, "reservation": {"subBlocks": ["sub-block-2", "sub-block-3", "sub-block-4"]}},
            ),
        },
        "tpu.cubes",
        "at most that many tpu.cubes",
    ),
    FleetRule(
        "one derived name in a project and region",
        derived_names,
        {"dev": ("dev", {}), "dev-b": ("dev-b", {"namePrefix": "dev"})},
        "namePrefix",
        "another namePrefix",
    ),
)


def check(stacks: Sequence[FleetStack]) -> list[Contradiction]:
    """Every contradiction between the stacks, rule by rule."""
    return [found for row in CONTRADICTIONS for found in row.rule(stacks)]
