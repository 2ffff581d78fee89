"""Where the cluster runs and how it is kept: its location, GKE version, upgrades, system pool and names.

Guards `zone` and `region` (a zone with the TPU generation's capacity, a region that contains it),
`cluster` (a well-formed GKE version the prefix agrees with, at or above the floor dynamic slicing
needs on the RAPID channel; a maintenance exclusion GKE accepts, which holds the TPU nodes' upgrades
back unless `allowTpuNodeUpgrades` says otherwise, in force at the loader's clock and for a week yet;
a system machine the largest CPU pod fits on) and
`namePrefix` (every name derived from it within its limit, settings/naming.py).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING

from domain import tpu_zones
from domain.gke_versions import version_key as gke_version_key
from settings import machines
from settings.refused import RefusedClass

if TYPE_CHECKING:
    from settings.model import ClusterConfig, MaintenanceExclusion, StackConfig

# GKE versions from the dynamic-slicing docs: super-slicing needs 1.35.2-gke.1842000,
# sub-slicing 1.36.0-gke.3712000 (see ../shared/reference/dynamic-slicing.md §14.6).
SUPERSLICING_MIN_GKE = "1.35.2-gke.1842000"
SUBSLICING_MIN_GKE = "1.36.0-gke.3712000"


class ExclusionScope(StrEnum):
    NO_UPGRADES = "NO_UPGRADES"
    NO_MINOR_UPGRADES = "NO_MINOR_UPGRADES"
    NO_MINOR_OR_NODE_UPGRADES = "NO_MINOR_OR_NODE_UPGRADES"


class ReleaseChannel(StrEnum):
    RAPID = "RAPID"
    REGULAR = "REGULAR"
    STABLE = "STABLE"
    EXTENDED = "EXTENDED"


def gke_version(value: str | None) -> str | None:
    if value is not None:
        gke_version_key(value)
    return value


def prefix_agrees(cluster: ClusterConfig) -> None:
    # infra/cluster.py creates the cluster at `version` and only narrows the channel's choice by the
    # prefix when no version is pinned: a prefix the pin contradicts is ignored without a word.
    if cluster.version and cluster.version_prefix and not cluster.version.startswith(cluster.version_prefix):
        raise ValueError(
            f"cluster.versionPrefix {cluster.version_prefix!r} contradicts cluster.version {cluster.version!r}, "
            "which wins; allowed: a prefix of the pinned version, or only one of the two"
        )


def exclusion_window(exclusion: MaintenanceExclusion) -> None:
    if exclusion.start.tzinfo is None or (exclusion.end is not None and exclusion.end.tzinfo is None):
        raise ValueError("start and end need a time zone, e.g. 2026-12-01T00:00:00Z")
    if exclusion.until_end_of_support == (exclusion.end is not None):
        raise ValueError("set exactly one of end and untilEndOfSupport")
    if exclusion.until_end_of_support and exclusion.scope is ExclusionScope.NO_UPGRADES:
        raise ValueError("untilEndOfSupport is only allowed with NO_MINOR_UPGRADES or NO_MINOR_OR_NODE_UPGRADES")
    # An end that has passed is accepted: the stack must keep previewing after its own window ends.
    # infra/cluster.py leaves such an exclusion out of the cluster's policy, with a warning (`over`).
    if exclusion.end is not None:
        if exclusion.end <= exclusion.start:
            raise ValueError(f"end {exclusion.end.isoformat()} is not after start {exclusion.start.isoformat()}")
        # GKE: a NO_UPGRADES exclusion may last at most 30 days; the others
        # at most until end of support, which we approximate as 180 days.
        longest = timedelta(days=30 if exclusion.scope is ExclusionScope.NO_UPGRADES else 180)
        if exclusion.end - exclusion.start > longest:
            raise ValueError(
                f"a {exclusion.scope.value} exclusion may last at most {longest.days} days; "
                f"this one lasts {(exclusion.end - exclusion.start).days}"
            )


def check_region(config: StackConfig) -> None:
    generation = config.tpu.generation if config.serving.dynamic_slicing else config.serving.slice.generation
    problem = tpu_zones.zone_problem(generation.name, config.zone)
    if problem:
        raise ValueError(
            f"zone {config.zone!r} has no {generation.name} TPUs: {problem} (domain/tpu_zones.py, from "
            "cloud.google.com/tpu/docs/regions-zones); allowed: the zone of your reservation, one of those"
        )
    derived = config.zone.rsplit("-", 1)[0]
    if config.region is not None and config.region != derived:
        raise ValueError(
            f"region {config.region!r} does not contain zone {config.zone!r}; use {derived!r} or leave it out"
        )


def check_names(config: StackConfig) -> None:
    for what, name, limit in config.names.limits(config.pool_keys()):
        if len(name) > limit:
            raise ValueError(
                f"namePrefix {config.name_prefix!r} is too long: the {what} name {name!r} has {len(name)} "
                f"characters, the limit is {limit}"
            )


def check_versions_for_features(config: StackConfig) -> None:
    if not config.serving.dynamic_slicing:
        return
    floor = config.platform.version_floor
    version = config.cluster.version
    if version is not None and floor is not None and gke_version_key(version) < gke_version_key(floor):
        needs = (
            "dynamic sub-slicing (checks.subslicing, serving backend vllm-pd)"
            if floor == SUBSLICING_MIN_GKE
            else "the TPU slice controller (super-slicing)"
        )
        raise ValueError(f"cluster.version {version} is below {floor}, which {needs} needs")
    if config.cluster.release_channel not in (None, ReleaseChannel.RAPID):
        raise ValueError(
            f"cluster.releaseChannel {config.cluster.release_channel} is not allowed: "
            "GKE dynamic slicing is only offered on RAPID"
        )


def check_system_machine(config: StackConfig) -> None:
    problem = machines.system_machine_problem(config.cluster.system_machine_type, config.serving.backend.value)
    if problem:
        raise ValueError(f"cluster.systemMachineType {problem}")


def check_upgrade_policy(config: StackConfig) -> None:
    # Every TPU pool auto-upgrades (infra/tpu_pools.py); only a maintenance exclusion holds
    # node upgrades back. cluster-toolkit's TPU7x example holds them until end of support
    # (examples/gke-tpu-7x/gke-tpu-7x.yaml, NO_MINOR_OR_NODE_UPGRADES).
    cluster = config.cluster
    exclusion = cluster.maintenance_exclusion
    holds_nodes = exclusion is not None and exclusion.scope is not ExclusionScope.NO_MINOR_UPGRADES
    if holds_nodes or cluster.allow_tpu_node_upgrades:
        return
    found = "is not set"
    if exclusion is not None:
        found = f"has scope {exclusion.scope.value}, which lets node upgrades run"
    raise ValueError(
        f"cluster.maintenanceExclusion {found}: GKE node upgrades recreate the TPU VMs and the slices "
        "serving on them; allowed: an exclusion with scope NO_MINOR_OR_NODE_UPGRADES (untilEndOfSupport: "
        "true) or NO_UPGRADES, or cluster.allowTpuNodeUpgrades: true to let GKE upgrade them at its cadence"
    )


# The hold must be in force when the stack is planned and last long enough to matter. GKE blocks an
# upgrade only while "current time is within the exclusion time period"; once an exclusion expires
# "that exclusion will no longer prevent GKE updates" and the cluster "will gradually upgrade"
# (cloud.google.com/kubernetes-engine/docs/concepts/maintenance-windows-and-exclusions, "Multiple
# exclusions", "Exclusion expiration"). A week left: GKE's own lead time for an exclusion ("starts one
# week before the event", same page, "Maintenance exclusions"), and a quarter of the longest NO_UPGRADES
# window (30 days, "Limitations"), so a dated hold is renewed before it lapses, not after.
# infra/cluster.py sets these as the provider's maintenance_exclusions[] start_time / end_time /
# exclusion_options.{scope, end_time_behavior=UNTIL_END_OF_SUPPORT} (pulumi-gcp container/_inputs.py).
HOLD_MIN_REMAINING = timedelta(days=7)
_RENEW = (
    "allowed: a window in force now (start at or before now) that ends at least "
    f"{HOLD_MIN_REMAINING.days} days from now (NO_UPGRADES lasts at most 30 days), untilEndOfSupport: true "
    "with NO_MINOR_OR_NODE_UPGRADES, or cluster.allowTpuNodeUpgrades: true"
)


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def check_hold_in_force(config: StackConfig, now: datetime | None = None) -> None:
    """The exclusion check_upgrade_policy requires holds the TPU nodes now, and for a while yet.

    `now` is the plan's moment, read once by the loader (settings/loader.py) and passed in, so a test
    fixes it. The messages never print it: the settings and the plan read the clock apart, and their
    verdicts must match. An untilEndOfSupport hold ends at the minor version's end of support, which
    GKE computes; it is taken as holding.
    """
    cluster = config.cluster
    exclusion = cluster.maintenance_exclusion
    if exclusion is None or cluster.allow_tpu_node_upgrades or exclusion.scope is ExclusionScope.NO_MINOR_UPGRADES:
        return  # not required, or already refused by check_upgrade_policy
    now = now or datetime.now(UTC)
    what = f"cluster.maintenanceExclusion {exclusion.name!r}"
    if exclusion.start > now:
        raise ValueError(
            f"{what} start {_stamp(exclusion.start)} is in the future: until then it holds nothing and GKE may "
            f"upgrade the TPU nodes, recreating the slices serving on them; {_RENEW}"
        )
    if exclusion.end is None:
        return
    if exclusion.end <= now:
        raise ValueError(
            f"{what} end {_stamp(exclusion.end)} has passed: an expired exclusion holds nothing and GKE upgrades "
            f"the TPU nodes at its cadence; {_RENEW}"
        )
    if exclusion.end - now < HOLD_MIN_REMAINING:
        raise ValueError(
            f"{what} end {_stamp(exclusion.end)} is less than {HOLD_MIN_REMAINING.days} days away: the hold lapses "
            f"before it is likely renewed; {_RENEW}"
        )


REFUSED: tuple[RefusedClass, ...] = (
    # --- location and names
    RefusedClass("region without the zone", check_region, {"region": "europe-west4"}, "region", "us-central1"),
    RefusedClass(
        "zone without the generation's TPUs",
        check_region,
        {"zone": "us-central1-b"},
        "zone",
        "allowed: the zone of your reservation",
    ),
    # --- the GKE version and upgrades
    RefusedClass(
        "versionPrefix the pinned version contradicts",
        prefix_agrees,
        {"cluster": {"version": "1.36.1-gke.1000000", "versionPrefix": "1.35."}},
        "cluster.versionPrefix",
        "a prefix of the pinned version",
    ),
    RefusedClass(
        "GKE version below the features' floor",
        check_versions_for_features,
        {"cluster": {"version": "1.35.2-gke.1842000"}},
        "cluster.version",
        SUBSLICING_MIN_GKE,
    ),
    RefusedClass("malformed GKE version", gke_version, {"cluster": {"version": "1.36"}}, "cluster.version", "GKE"),
    RefusedClass(
        "release channel without dynamic slicing",
        check_versions_for_features,
        {"cluster": {"releaseChannel": "STABLE"}},
        "cluster.releaseChannel",
        "RAPID",
    ),
    RefusedClass(
        "maintenance exclusion too long",
        exclusion_window,
        {
            "cluster": {
                "maintenanceExclusion": {
                    "scope": "NO_UPGRADES",
                    "end": "2027-02-01T00:00:00Z",
                    "untilEndOfSupport": None,
                }
            }
        },
        "cluster.maintenanceExclusion",
        "30 days",
    ),
    RefusedClass(
        "TPU node upgrades left to GKE's cadence unstated",
        check_upgrade_policy,
        {"cluster": {"maintenanceExclusion": None}},
        "cluster.maintenanceExclusion",
        "cluster.allowTpuNodeUpgrades: true",
        stack="saxml-v5e",
    ),
    RefusedClass(
        "required upgrade hold not yet in force",
        check_hold_in_force,
        {"cluster": {"maintenanceExclusion": {"start": "2099-01-01T00:00:00Z"}}},
        "cluster.maintenanceExclusion",
        "a window in force now",
    ),
    RefusedClass(
        "required upgrade hold already over",
        check_hold_in_force,
        {
            "cluster": {
                "maintenanceExclusion": {
                    "scope": "NO_UPGRADES",
                    "start": "2020-01-01T00:00:00Z",
                    "end": "2020-01-20T00:00:00Z",
                    "untilEndOfSupport": None,
                }
            }
        },
        "cluster.maintenanceExclusion",
        "cluster.allowTpuNodeUpgrades: true",
    ),
    # --- the system pool
    RefusedClass(
        "system machine smaller than the largest CPU pod",
        machines.system_machine_problem,
        {"cluster": {"systemMachineType": "e2-standard-4"}},
        "cluster.systemMachineType",
        "allowed: a machine type with at least 4 vCPU and 8 GiB allocatable, e.g. e2-standard-8",
    ),
    RefusedClass(
        "system machine of an unknown family or size",
        machines.machine,
        {"cluster": {"systemMachineType": "m3-ultramem-32"}},
        "cluster.systemMachineType",
        "known: e2-standard-N",
    ),
    RefusedClass(
        "system machine of a series GKE taints",
        machines.machine,
        {"cluster": {"systemMachineType": "t2a-standard-8"}},
        "cluster.systemMachineType",
        "GKE taints such nodes kubernetes.io/arch=arm64:NoSchedule",
    ),
)
