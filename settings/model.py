"""The stack configuration contract: one strict pydantic v2 model tree.

YAML keys are camelCase (`namePrefix`), Python attributes snake_case. Unknown keys
are errors with a "did you mean" hint, and every cross-field rule runs here, so a
bad stack file fails before a single resource is registered.
"""

from __future__ import annotations

import difflib
import ipaddress
import itertools
import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from domain import inference_releases, maxtext_models, saxml_servables, topology, tpu_zones
from domain.gke_versions import version_key as gke_version_key
from domain.serving_budget import BUDGET
from domain.topology import Generation, MachineType, Topology
from settings import exposure, machines, oci_registry, pins, storage_names
from settings.base import ProblemsError, Shape, StrictModel
from settings.naming import Names
from settings.serving_model import ModelConfig
from settings.vllm import RoleConfig, VllmConfig, check_engine, check_tensor_parallel

RFC1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
RFC1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

# GKE versions from the dynamic-slicing docs: super-slicing needs 1.35.2-gke.1842000,
# sub-slicing 1.36.0-gke.3712000 (see ../shared/reference/dynamic-slicing.md §14.6).
SUPERSLICING_MIN_GKE = "1.35.2-gke.1842000"
SUBSLICING_MIN_GKE = "1.36.0-gke.3712000"


def _pinned_chart(value: str) -> str:
    # One rule with the policy pack's pinned-images (settings/pins.py).
    if pins.chart_problem(value):
        raise ValueError(f"{value!r} is not a pinned release: use an exact version such as 0.11.1 or v0.17.4")
    return value


def _pinned_image(value: str) -> str:
    problem = pins.image_problem(value)
    if problem:
        raise ValueError(f"{value!r} has {problem}; {pins.IMAGE_ALLOWED}")
    return value


def _rfc1035(value: str) -> str:
    if not RFC1035.match(value):
        raise ValueError(f"{value!r} is not a valid name: lowercase letters, digits and '-', starting with a letter")
    return value


ChartVersion = Annotated[str, AfterValidator(_pinned_chart)]
Image = Annotated[str, AfterValidator(_pinned_image)]
DnsLabel = Annotated[str, Field(max_length=63), AfterValidator(_rfc1035)]


def _rfc1123(value: str) -> str:
    # Namespace names are RFC 1123 labels (k8s.io/apimachinery validation ValidateNamespaceName ->
    # IsDNS1123Label): a leading digit is allowed, unlike the RFC 1035 labels of Service names.
    if not RFC1123.match(value):
        raise ValueError(
            f"{value!r} is not a namespace name: lowercase letters, digits and '-', starting and ending with a "
            "letter or digit"
        )
    return value


Namespace = Annotated[str, Field(max_length=63), AfterValidator(_rfc1123)]


SHARED_ADDRESS_SPACE = ipaddress.IPv4Network("100.64.0.0/10")
VPC_RANGES = tuple(
    ipaddress.IPv4Network(block) for block in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10")
)
# GKE gives every node a /24 of the pod range at the default of 110 pods a node (GKE docs,
# "Configure maximum Pods per node"), so a pod range of /N holds 2^(24-N) nodes.
NODE_POD_PREFIX = 24
# A regional cluster's system pool has `systemNodesPerZone` nodes in each of the region's zones;
# three is what GKE regions have, the AI-zone regions among them.
REGION_ZONES = 3


class NetworkConfig(StrictModel):
    mtu: int = Field(8896, ge=1300, le=8896)
    node_cidr: ipaddress.IPv4Network = ipaddress.IPv4Network("10.10.0.0/18")
    pod_cidr: ipaddress.IPv4Network = ipaddress.IPv4Network("10.16.0.0/14")
    service_cidr: ipaddress.IPv4Network = ipaddress.IPv4Network("10.20.0.0/20")
    proxy_cidr: ipaddress.IPv4Network = ipaddress.IPv4Network("172.16.0.0/26")

    @field_validator("node_cidr", "pod_cidr", "service_cidr", "proxy_cidr")
    @classmethod
    def _private(cls, value: ipaddress.IPv4Network) -> ipaddress.IPv4Network:
        # RFC 1918, and the shared address space (RFC 6598) GKE also takes for VPC-native ranges. Not
        # Python's wider is_private: link-local 169.254/16 (the metadata server's), loopback, 198.18/15.
        if not any(value.subnet_of(block) for block in VPC_RANGES):
            raise ValueError(f"{value} is not a private range: allowed are RFC 1918 and 100.64.0.0/10 (RFC 6598)")
        return value

    @field_validator("proxy_cidr")
    @classmethod
    def _proxy_size(cls, value: ipaddress.IPv4Network) -> ipaddress.IPv4Network:
        if value.prefixlen > 26:
            raise ValueError(f"{value} is too small: the proxy-only subnet needs at least a /26")
        return value

    @model_validator(mode="after")
    def _disjoint(self) -> NetworkConfig:
        ranges = {
            "nodeCidr": self.node_cidr,
            "podCidr": self.pod_cidr,
            "serviceCidr": self.service_cidr,
            "proxyCidr": self.proxy_cidr,
        }
        items = list(ranges.items())
        for i, (a_key, a) in enumerate(items):
            for b_key, b in items[i + 1 :]:
                if a.overlaps(b):
                    raise ValueError(f"{a_key} {a} overlaps {b_key} {b}; the ranges must be disjoint")
        return self

    @property
    def internal_ranges(self) -> list[str]:
        return [str(r) for r in (self.node_cidr, self.pod_cidr, self.service_cidr, self.proxy_cidr)]


class ExclusionScope(StrEnum):
    NO_UPGRADES = "NO_UPGRADES"
    NO_MINOR_UPGRADES = "NO_MINOR_UPGRADES"
    NO_MINOR_OR_NODE_UPGRADES = "NO_MINOR_OR_NODE_UPGRADES"


class MaintenanceExclusion(StrictModel):
    """A GKE maintenance exclusion: a dated window, or until end of support."""

    name: DnsLabel
    scope: ExclusionScope
    start: datetime
    end: datetime | None = None
    until_end_of_support: bool = False

    @model_validator(mode="after")
    def _window(self) -> MaintenanceExclusion:
        if self.start.tzinfo is None or (self.end is not None and self.end.tzinfo is None):
            raise ValueError("start and end need a time zone, e.g. 2026-12-01T00:00:00Z")
        if self.until_end_of_support == (self.end is not None):
            raise ValueError("set exactly one of end and untilEndOfSupport")
        if self.until_end_of_support and self.scope is ExclusionScope.NO_UPGRADES:
            raise ValueError("untilEndOfSupport is only allowed with NO_MINOR_UPGRADES or NO_MINOR_OR_NODE_UPGRADES")
        # An end that has passed is accepted: the stack must keep previewing after its own window ends.
        # infra/cluster.py leaves such an exclusion out of the cluster's policy, with a warning (`over`).
        if self.end is not None:
            if self.end <= self.start:
                raise ValueError(f"end {self.end.isoformat()} is not after start {self.start.isoformat()}")
            # GKE: a NO_UPGRADES exclusion may last at most 30 days; the others
            # at most until end of support, which we approximate as 180 days.
            longest = timedelta(days=30 if self.scope is ExclusionScope.NO_UPGRADES else 180)
            if self.end - self.start > longest:
                raise ValueError(
                    f"a {self.scope.value} exclusion may last at most {longest.days} days; "
                    f"this one lasts {(self.end - self.start).days}"
                )
        return self

    def over(self, now: datetime) -> bool:
        """The window has ended: GKE refuses such an exclusion ("end time must be in the future"), and
        it would hold nothing back."""
        return self.end is not None and self.end <= now


@dataclass(frozen=True)
class Platform:
    """What a stack asks of GKE, derived from its backend and TPU generation."""

    ai_zones: bool  # the ai-zones-visibility preview feature (TPU7x lives in AI zones)
    slice_controller: bool  # GKE's TPU slice controller add-on (dynamic slicing)
    release_channel: str
    version_floor: str | None  # the oldest GKE version the features need
    version_prefix: str | None  # narrows the versions the channel offers


class ReleaseChannel(StrEnum):
    RAPID = "RAPID"
    REGULAR = "REGULAR"
    STABLE = "STABLE"
    EXTENDED = "EXTENDED"


class ClusterConfig(StrictModel):
    # An exact pin; by default the version is chosen at plan time from what the channel offers
    # (domain/gke_versions.py) and kept in state, so a later preview never upgrades on its own.
    version: str | None = None
    version_prefix: str | None = Field(None, pattern=r"^[0-9]+\.[0-9]+\.([0-9]+-gke\.)?$")
    # Default: RAPID for TPU7x dynamic slicing (the only channel offering it), REGULAR otherwise.
    release_channel: ReleaseChannel | None = None
    system_machine_type: str = Field("n2-standard-32", pattern=r"^[a-z0-9]+-[a-z0-9]+(-[0-9]+)?$")
    system_nodes_per_zone: int = Field(1, ge=1, le=10)
    deletion_protection: bool = True
    # Pulumi `protect` on the cluster and every node pool: the engine refuses a destroy (or a
    # replacement) of them before it deletes anything. Set false, `pulumi up`, then destroy.
    protect: bool = True
    maintenance_window_start: str = Field("03:00", pattern=r"^([01][0-9]|2[0-3]):[0-5][0-9]$")
    maintenance_exclusion: MaintenanceExclusion | None = None
    # The documented opt-out from `maintenanceExclusion`: GKE upgrades the TPU nodes at its own
    # cadence, and every node upgrade recreates the TPU VMs and the slices serving on them.
    allow_tpu_node_upgrades: bool = False

    @field_validator("version")
    @classmethod
    def _version(cls, value: str | None) -> str | None:
        if value is not None:
            gke_version_key(value)
        return value

    @model_validator(mode="after")
    def _prefix_agrees(self) -> ClusterConfig:
        # infra/cluster.py creates the cluster at `version` and only narrows the channel's choice by the
        # prefix when no version is pinned: a prefix the pin contradicts is ignored without a word.
        if self.version and self.version_prefix and not self.version.startswith(self.version_prefix):
            raise ValueError(
                f"cluster.versionPrefix {self.version_prefix!r} contradicts cluster.version {self.version!r}, "
                "which wins; allowed: a prefix of the pinned version, or only one of the two"
            )
        return self


class ReservationConfig(StrictModel):
    project: str | None = Field(None, pattern=r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$")
    name: DnsLabel
    block: DnsLabel | None = None
    sub_blocks: list[DnsLabel] | None = None
    block_cubes: int | None = Field(None, ge=1, le=144)

    @field_validator("sub_blocks")
    @classmethod
    def _unique(cls, value: list[str] | None) -> list[str] | None:
        if value is not None:
            if not value:
                raise ValueError("subBlocks is empty: leave it out to bind pools to the whole block")
            duplicates = sorted({v for v in value if value.count(v) > 1})
            if duplicates:
                raise ValueError(f"sub-block {duplicates[0]!r} is listed twice")
        return value

    def path(self, project: str) -> str:
        reservation = f"projects/{self.project or project}/reservations/{self.name}"
        return f"{reservation}/reservationBlocks/{self.block}" if self.block else reservation

    def pool_paths(self, project: str, pools: int) -> list[str]:
        """The reservation path each TPU pool binds to: a sub-block each, or the block."""
        block = self.path(project)
        if self.sub_blocks:
            return [f"{block}/reservationSubBlocks/{sub}" for sub in self.sub_blocks]
        return [block] * pools


class TpuConfig(StrictModel):
    machine_type: str = "tpu7x-standard-4t"
    cubes: int = Field(2, ge=1, le=144)
    cube_topology: Shape = "4x4x4"

    @field_validator("machine_type")
    @classmethod
    def _machine(cls, value: str) -> str:
        try:
            topology.generation_of(value)
        except topology.TopologyError as err:
            raise ValueError(str(err)) from None
        return value

    @property
    def generation(self) -> topology.Generation:
        return topology.generation_of(self.machine_type)

    @model_validator(mode="after")
    def _cube(self) -> TpuConfig:
        generation = self.generation
        if generation.cube is None:
            raise ValueError(
                f"{self.machine_type} ({generation.name}) has no reservation cubes; the dynamic-slicing "
                "backends need tpu7x (use serving.backend saxml or jetstream for other generations)"
            )
        if self.cube_topology != generation.cube:
            raise ValueError(f"cubeTopology {self.cube_topology!r} must be {generation.cube!r} for {generation.name}")
        return self

    @property
    def vms_per_cube(self) -> int:
        generation = self.generation
        return generation.vms(topology.Topology.parse(self.cube_topology))

    @property
    def chips_per_cube(self) -> int:
        return topology.Topology.parse(self.cube_topology).chips

    @property
    def total_chips(self) -> int:
        return self.cubes * self.chips_per_cube


class Versions(StrictModel):
    """Every chart, manifest and image the program deploys, pinned."""

    # Newer than the reference's 0.11.1 / v0.17.4: llm-d's dynamic-slicing guide asks for
    # JobSet >= v0.12.0 and Kueue >= v0.18.2 (dynamic-slicing.md §14.6).
    jobset: ChartVersion = "0.12.0"
    kueue: ChartVersion = "0.19.2"
    lws: ChartVersion = "v0.8.0"  # the LWS chart tags carry the v
    slice_controller_image: Image = "tpuongke/kueue-slice-controller:v0.8.0-200"
    # The newest JAX AI image tag evidenced on TPU7x (jax 0.8.1, libtpu 0.0.30).
    jax_tpu_image: Image = "us-docker.pkg.dev/cloud-tpu-images/jax-ai-image/tpu:jax0.8.1-rev1"
    gateway_api_inference_extension: ChartVersion = "v1.5.0"

    @field_validator("gateway_api_inference_extension")
    @classmethod
    def _known_inference_release(cls, value: str) -> str:
        return inference_releases.release(value).version

    # llm-d's v7 P/D guide pins this release for TPUConnectorHMA; the reference used an unpinned daily build.
    vllm_image: Image = "docker.io/vllm/vllm-tpu:v0.26.0"
    # One llm-d release: llm-d-router publishes the picker and the P/D sidecar from one tag
    # (llm-d-router v0.9.0 .github/workflows/ci-release.yaml, `<repo>-endpoint-picker` and
    # `<repo>-disagg-sidecar`); the sidecar's flags are that tag's (pkg/sidecar/proxy/options.go).
    routing_sidecar_image: Image = "ghcr.io/llm-d/llm-d-router-disagg-sidecar:v0.9.0"
    endpoint_picker_image: Image = "ghcr.io/llm-d/llm-d-router-endpoint-picker:v0.9.0"
    # Saxml is frozen upstream: the tutorial's tags (gotcha 1: newer images change the default cell).
    sax_admin_image: Image = "us-docker.pkg.dev/cloud-tpu-images/inference/sax-admin-server:v1.1.0"
    sax_model_image: Image = "us-docker.pkg.dev/cloud-tpu-images/inference/sax-model-server:v1.1.0"
    sax_http_image: Image = "us-docker.pkg.dev/cloud-tpu-images/inference/sax-http:v1.0.0"
    jetstream_maxengine_image: Image = "us-docker.pkg.dev/cloud-tpu-images/inference/maxengine-server:v0.2.2"
    jetstream_http_image: Image = "us-docker.pkg.dev/cloud-tpu-images/inference/jetstream-http:v0.2.3"
    jetstream_pathways_image: Image = "us-docker.pkg.dev/cloud-tpu-images/inference/jetstream-pathways:v0.2.0"
    pathways_server_image: Image = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server:jax-0.5.3"
    pathways_proxy_image: Image = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/proxy_server:jax-0.5.3"
    # Also runs the Saxml publish Job: standard library only.
    smoke_test_image: Image = (
        "python:3.12.13-slim@sha256:423ed6ab25b1921a477529254bfeeabf5855151dc2c3141699a1bfc852199fbf"
    )

    @model_validator(mode="after")
    def _controller_floors(self) -> Versions:
        # An older controller installs, then never admits or never runs a slice: the guide's floors.
        for key, floor in CONTROLLER_FLOORS.items():
            given = getattr(self, key)
            if _semver_key(given) < _semver_key(floor):
                raise ValueError(
                    f"versions.{to_camel(key)} {given} is below {floor}, the oldest llm-d's dynamic-slicing guide "
                    f"supports (dynamic-slicing.md §14.6); allowed: {floor} or newer"
                )
        return self

    @model_validator(mode="after")
    def _one_llm_d_release(self) -> Versions:
        picker_repo, picker_tag = _repository_and_tag(self.endpoint_picker_image)
        sidecar_repo, sidecar_tag = _repository_and_tag(self.routing_sidecar_image)
        wanted = picker_repo.removesuffix(PICKER_SUFFIX) + SIDECAR_SUFFIX
        if picker_repo.endswith(PICKER_SUFFIX) and (sidecar_repo, sidecar_tag) != (wanted, picker_tag):
            raise ValueError(
                f"versions.routingSidecarImage {self.routing_sidecar_image} is not from the endpoint picker's "
                f"llm-d release ({self.endpoint_picker_image}); allowed: {wanted}:{picker_tag}, the sidecar "
                "llm-d-router publishes with that picker (its flags and the picker's headers change together)"
            )
        return self


# llm-d's dynamic-slicing guide: JobSet >= v0.12.0, Kueue >= v0.18.2 (dynamic-slicing.md §14.6).
CONTROLLER_FLOORS = {"jobset": "0.12.0", "kueue": "0.18.2"}


def _semver_key(version: str) -> tuple[int, int, int]:
    major, minor, patch = re.match(r"^v?(\d+)\.(\d+)\.(\d+)", version).groups()  # type: ignore[union-attr]
    return int(major), int(minor), int(patch)


PICKER_SUFFIX = "-endpoint-picker"
SIDECAR_SUFFIX = "-disagg-sidecar"


def _repository_and_tag(image: str) -> tuple[str, str]:
    name = image.split("@", 1)[0]
    repository, _, tag = name.rpartition(":")
    return (repository, tag) if repository and "/" not in tag else (name, "")


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


class Priorities(StrictModel):
    low: int = Field(1000, ge=0, le=1_000_000_000)
    medium: int = Field(2000, ge=0, le=1_000_000_000)
    high: int = Field(3000, ge=0, le=1_000_000_000)

    @model_validator(mode="after")
    def _ordered(self) -> Priorities:
        if not self.low < self.medium < self.high:
            raise ValueError(f"priorities must rise low < medium < high; got {self.low}, {self.medium}, {self.high}")
        return self

    def items(self) -> list[tuple[str, int]]:
        return [("low", self.low), ("medium", self.medium), ("high", self.high)]


class KueueConfig(StrictModel):
    topology_levels: list[str] = Field(
        default_factory=lambda: list(DEFAULT_TOPOLOGY_LEVELS), min_length=1, max_length=16
    )
    priorities: Priorities = Field(default_factory=lambda: Priorities.model_validate({}))


class SubslicingCheck(StrictModel):
    enabled: bool = False
    topology: Shape = "2x2x2"
    replicas: int = Field(6, ge=1, le=1000)


class SuperslicingCheck(StrictModel):
    enabled: bool = False
    topology: Shape = "4x4x8"


class ChecksConfig(StrictModel):
    subslicing: SubslicingCheck = Field(default_factory=lambda: SubslicingCheck.model_validate({}))
    superslicing: SuperslicingCheck = Field(default_factory=lambda: SuperslicingCheck.model_validate({}))


class Backend(StrEnum):
    VLLM_PD = "vllm-pd"
    SAXML = "saxml"
    JETSTREAM = "jetstream"
    NONE = "none"


RUN_ID = re.compile(r"^[a-z0-9-]{1,32}$")


def _run_id(value: str | None) -> str | None:
    # The alphabet of Kubernetes names, so the smoke Job may carry it in object names and labels.
    if value is not None and not RUN_ID.match(value):
        raise ValueError(f"{value!r} is not a run id: allowed are 1 to 32 lowercase letters, digits and '-'")
    return value


def _smoke_deadline(value: int) -> int:
    # The Job starts with the LeaderWorkerSets, so its deadline must outlast what they wait for.
    least = BUDGET.smoke_deadline_min_seconds
    if value < least:
        raise ValueError(
            f"{value} s ends before the servers can answer: allowed are {least} to {SMOKE_DEADLINE_MAX} s "
            f"(Kueue admission and image pull {BUDGET.admission_and_pull_seconds} s + slice activation "
            f"{BUDGET.activation_seconds} s + a leader's startup {BUDGET.startup_seconds} s: Ray "
            f"{BUDGET.ray_init_seconds} s, engine {BUDGET.engine_ready_seconds} s, margin "
            f"{BUDGET.startup_margin_seconds} s; domain/serving_budget.py)"
        )
    return value


SMOKE_DEADLINE_MAX = 8 * 3600


class SmokeTestConfig(StrictModel):
    enabled: bool = True
    deadline_seconds: Annotated[int, Field(le=SMOKE_DEADLINE_MAX), AfterValidator(_smoke_deadline)] = (
        BUDGET.smoke_deadline_min_seconds
    )
    # Tells one smoke-test run from another; unset means no run id.
    run_id: Annotated[str | None, AfterValidator(_run_id)] = None


class GatewayConfig(StrictModel):
    name: DnsLabel = "inference-gateway"
    address_timeout_seconds: int = Field(1200, ge=60, le=7200)


class SliceConfig(StrictModel):
    """One multi-host TPU slice per node pool (Saxml and JetStream backends)."""

    machine_type: str = "ct5lp-hightpu-4t"
    topology: Shape = "4x8"

    @model_validator(mode="after")
    def _shape(self) -> SliceConfig:
        try:
            generation = topology.generation_of(self.machine_type)
            if generation.cube is not None:
                raise topology.TopologyError(
                    f"{self.machine_type} ({generation.name}) serves through dynamic slicing: "
                    "use serving.backend vllm-pd (or none) with the tpu block"
                )
            shape = generation.allowed_shape(self.topology)
            hosts = generation.host_machines(shape)
        except topology.TopologyError as err:
            raise ValueError(str(err)) from None
        if self.machine_type not in (host.name for host in hosts):
            plain = " or ".join(host.name for host in hosts)
            quoted = " or ".join(repr(host.name) for host in hosts)
            raise ValueError(
                f"topology {self.topology} runs on {plain} VMs, not {self.machine_type}: "
                f"set machineType {quoted} or pick a topology of {self.machine_type}"
            )
        return self

    @property
    def generation(self) -> Generation:
        return topology.generation_of(self.machine_type)

    @property
    def shape(self) -> Topology:
        return Topology.parse(self.topology)

    @property
    def machine(self) -> MachineType:
        return self.generation.host_machine(self.shape, self.machine_type)

    @property
    def vms(self) -> int:
        """VMs per slice: the shape on this machine type (a v6e 2x4 is one VM or two)."""
        return self.generation.vms(self.shape, self.machine_type)


# The widest block an external, unauthenticated service may be opened to: one rule with the policy pack.
MIN_SOURCE_PREFIX = exposure.MIN_SOURCE_PREFIX

# Namespaces the cluster, GKE or the controllers this program installs already own: a serving
# namespace there fails late (AlreadyExists) while TPU pools bill, or races the owner's chart.
RESERVED_NAMESPACES = frozenset(
    {"default", "kube-system", "kube-public", "kube-node-lease", "kueue-system", "jobset-system", "lws-system"}
    | {"slice-controller-system", "gmp-system", "gmp-public", "gke-managed-system"}
)
RESERVED_NAMESPACE_PREFIXES = ("kube-", "gke-", "gmp-")


def _own_namespace(value: str) -> str:
    if value in RESERVED_NAMESPACES or value.startswith(RESERVED_NAMESPACE_PREFIXES):
        raise ValueError(
            f"{value!r} is a namespace the cluster or its controllers own; allowed: any other DNS label "
            f"(not {', '.join(sorted(RESERVED_NAMESPACES))}, nor kube-*, gke-*, gmp-*)"
        )
    return value


class HttpExposure(StrictModel):
    """How a backend's HTTP service is reached: an internal load balancer unless told otherwise."""

    type: Literal["internal", "external"] = "internal"
    source_ranges: list[ipaddress.IPv4Network] = Field(default_factory=list, max_length=64)

    @model_validator(mode="after")
    def _restricted(self) -> HttpExposure:
        if self.type == "external" and not self.source_ranges:
            raise ValueError(
                "an external service needs sourceRanges: the Saxml/JetStream HTTP APIs have no authentication"
            )
        if self.type == "internal" and self.source_ranges:
            raise ValueError(
                f"sourceRanges {[str(r) for r in self.source_ranges]} do nothing on an internal service "
                "(GKE ignores them there): remove them, or use type external"
            )
        # By union, not by literal (settings/exposure.py, shared with the policy pack).
        problem = exposure.too_wide(self.source_ranges)
        if self.type == "external" and problem:
            shown = [str(r) for r in self.source_ranges]
            listed = shown if len(shown) <= 4 else [*shown[:3], f"... {len(shown) - 3} more"]
            raise ValueError(
                f"sourceRanges {listed} are {problem}: the Saxml/JetStream HTTP APIs have no authentication; "
                f"{exposure.SOURCE_RANGES_ALLOWED}"
            )
        return self


def _checkpoint(value: str) -> str:
    # "None" is Saxml's literal for a test model with random weights; else a gs:// object prefix.
    if value == "None":
        return value
    bucket, _, path = value.removeprefix("gs://").partition("/")
    problem = None if value.startswith("gs://") else "no gs:// scheme"
    problem = problem or storage_names.bucket_problem(bucket) or storage_names.object_path_problem(path)
    if problem:
        raise ValueError(
            f"{value!r} has {problem}; allowed: None (random weights) or gs://<bucket>/<path>, "
            f"the bucket {storage_names.BUCKET_ALLOWED.removeprefix('allowed: ')}, the path "
            f"{storage_names.OBJECT_ALLOWED.removeprefix('allowed: ')}"
        )
    return value


class SaxmlConfig(StrictModel):
    model_key: str = Field("/sax/test/spmd", pattern=r"^/sax/[a-z0-9_-]+/[A-Za-z0-9_.-]+$")
    model_path: str = Field("saxml.server.pax.lm.params.lm_cloud.LmCloudSpmd175B32Test", pattern=r"^[A-Za-z0-9_.]+$")
    # "None" is Saxml's literal for a test model with random weights.
    checkpoint: Annotated[str, AfterValidator(_checkpoint)] = "None"
    publish_deadline_seconds: int = Field(3600, ge=60, le=6 * 3600)

    @property
    def cell(self) -> str:
        return self.model_key.rsplit("/", 1)[0]


class JetstreamConfig(StrictModel):
    """MaxText engine settings; the checkpoint is serving.model.weightsBucket + path."""

    maxtext_model: str = Field("llama2-70b", pattern=r"^[a-z0-9][a-z0-9._-]*$")
    tokenizer_path: str = Field("assets/tokenizer.llama2", min_length=1)
    per_device_batch_size: int = Field(4, ge=1, le=1024)
    max_prefill_predict_length: int = Field(1024, ge=16, le=131_072)
    max_target_length: int = Field(2048, ge=32, le=262_144)
    quantization: Literal["", "int8"] = ""
    # MaxText's ici_tensor_parallelism; unset: 1 on one host (the single-host samples), and on a
    # Pathways slice the most the model's KV heads allow (StackConfig.jetstream_tensor_parallelism).
    tensor_parallelism: int | None = Field(None, ge=1, le=4096)

    @model_validator(mode="after")
    def _lengths(self) -> JetstreamConfig:
        if self.max_prefill_predict_length >= self.max_target_length:
            raise ValueError("maxPrefillPredictLength must be below maxTargetLength")
        return self


class ServingConfig(StrictModel):
    backend: Backend = Backend.VLLM_PD
    namespace: Annotated[Namespace, AfterValidator(_own_namespace)] = "llm-d-pd-disaggregation"
    model: ModelConfig = Field(default_factory=lambda: ModelConfig.model_validate({}))
    prefill: RoleConfig = Field(default_factory=lambda: RoleConfig.model_validate({}))
    decode: RoleConfig = Field(default_factory=lambda: RoleConfig.model_validate({}))
    vllm: VllmConfig = Field(default_factory=lambda: VllmConfig.model_validate({}))
    gateway: GatewayConfig = Field(default_factory=lambda: GatewayConfig.model_validate({}))
    smoke_test: SmokeTestConfig = Field(default_factory=lambda: SmokeTestConfig.model_validate({}))
    slices: int = Field(2, ge=1, le=64)
    slice: SliceConfig = Field(default_factory=lambda: SliceConfig.model_validate({}))
    http: HttpExposure = Field(default_factory=lambda: HttpExposure.model_validate({}))
    saxml: SaxmlConfig = Field(default_factory=lambda: SaxmlConfig.model_validate({}))
    jetstream: JetstreamConfig = Field(default_factory=lambda: JetstreamConfig.model_validate({}))

    @property
    def dynamic_slicing(self) -> bool:
        """The TPU7x cube platform (vllm-pd, or none); otherwise one pool per multi-host slice."""
        return self.backend in (Backend.VLLM_PD, Backend.NONE)


# Serving keys of the other platform, which a backend never reads (__main__.py): set in a stack
# file they would be ignored without a word. The backend-specific blocks (saxml, jetstream) stay
# allowed on either of the two slice backends, so a stack switches between them by one key.
_SLICE_KEYS = frozenset({"slices", "slice", "http"})
_CUBE_SERVING_KEYS = frozenset({"prefill", "decode", "vllm", "gateway", "smoke_test"})
IGNORED_KEYS: dict[Backend, frozenset[str]] = {
    Backend.VLLM_PD: _SLICE_KEYS | {"saxml", "jetstream"},
    # Nothing is served: the checks run in serving.namespace (backends/dynamic_slicing.py); the model block
    # stays allowed so that a stack pauses serving by one key.
    Backend.NONE: _SLICE_KEYS | _CUBE_SERVING_KEYS | {"saxml", "jetstream"},
    Backend.SAXML: _CUBE_SERVING_KEYS,
    # JetStream has its own smoke Job (backends/jetstream.py): serving.smokeTest turns it off or re-runs it.
    Backend.JETSTREAM: _CUBE_SERVING_KEYS - {"smoke_test"},
}


class AlertsConfig(StrictModel):
    enabled: bool = False
    notification_channels: list[str] = Field(default_factory=list, max_length=16)
    queue_threshold: int = Field(32, ge=1, le=100_000)

    @field_validator("notification_channels")
    @classmethod
    def _channels(cls, value: list[str]) -> list[str]:
        for channel in value:
            if not re.match(r"^projects/[a-z][-a-z0-9]{4,28}[a-z0-9]/notificationChannels/[0-9]+$", channel):
                raise ValueError(
                    f"{channel!r} is not a notification channel: projects/<project>/notificationChannels/<id>"
                )
        return value


class ObservabilityConfig(StrictModel):
    pod_monitoring: bool = True
    dashboard: bool = True
    alerts: AlertsConfig = Field(default_factory=lambda: AlertsConfig.model_validate({}))


def _chart_registry(value: str) -> str:
    problem = oci_registry.problem(value)
    if problem:
        raise ValueError(f"{oci_registry.shown(value)!r} {problem}; {oci_registry.ALLOWED}")
    return value


class ControllersConfig(StrictModel):
    """Whether the program installs JobSet, Kueue and LeaderWorkerSet (its pinned Helm charts), or
    uses the ones a platform team already runs in a shared cluster (at the `versions` pinned here:
    the program cannot check an installed controller's version, so the README says who must)."""

    install: bool = True
    # A mirror of registry.k8s.io (an Artifact Registry remote repository) in its place: each chart is
    # <chartRegistry>/<component>/charts/<component> (k8s/controllers.py), its version still versions.*.
    chart_registry: Annotated[str, AfterValidator(_chart_registry)] = oci_registry.DEFAULT


class StackConfig(StrictModel):
    zone: str = Field(..., pattern=r"^[a-z]+-[a-z]+[0-9]+-[a-z0-9]+$")
    region: str | None = Field(None, pattern=r"^[a-z]+-[a-z]+[0-9]+$")
    name_prefix: Annotated[str, Field(max_length=20), AfterValidator(_rfc1035)]
    project: str = Field(..., pattern=r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$")
    network: NetworkConfig = Field(default_factory=lambda: NetworkConfig.model_validate({}))
    cluster: ClusterConfig = Field(default_factory=lambda: ClusterConfig.model_validate({}))
    reservation: ReservationConfig | None = None
    tpu: TpuConfig = Field(default_factory=lambda: TpuConfig.model_validate({}))
    versions: Versions = Field(default_factory=lambda: Versions.model_validate({}))
    kueue: KueueConfig = Field(default_factory=lambda: KueueConfig.model_validate({}))
    controllers: ControllersConfig = Field(default_factory=lambda: ControllersConfig.model_validate({}))
    checks: ChecksConfig = Field(default_factory=lambda: ChecksConfig.model_validate({}))
    serving: ServingConfig = Field(default_factory=lambda: ServingConfig.model_validate({}))
    observability: ObservabilityConfig = Field(default_factory=lambda: ObservabilityConfig.model_validate({}))
    hf_token: SecretStr | None = None

    @property
    def location(self) -> str:
        return self.region or self.zone.rsplit("-", 1)[0]

    @property
    def platform(self) -> Platform:
        """What the backend needs of Google Cloud: derived from it, not from the TPU7x defaults."""
        if not self.serving.dynamic_slicing:
            channel = self.cluster.release_channel or ReleaseChannel.REGULAR
            return Platform(False, False, channel.value, None, self.cluster.version_prefix)
        uses_subslices = self.checks.subslicing.enabled or self.serving.backend is Backend.VLLM_PD
        floor = SUBSLICING_MIN_GKE if uses_subslices else SUPERSLICING_MIN_GKE
        return Platform(True, True, ReleaseChannel.RAPID.value, floor, self.cluster.version_prefix)

    @property
    def names(self) -> Names:
        return Names(self.name_prefix)

    @property
    def reservation_project(self) -> str:
        return (self.reservation.project if self.reservation else None) or self.project

    def pool_paths(self) -> list[str | None]:
        """The reservation each TPU pool consumes, or None for on-demand capacity."""
        pools = self.tpu.cubes if self.serving.dynamic_slicing else self.serving.slices
        if self.reservation is None:
            return [None] * pools
        return list(self.reservation.pool_paths(self.project, pools))

    def pool_keys(self) -> list[str]:
        """What names each TPU pool: the sub-block it binds, else its position (pools that share a
        block, or run on demand, are interchangeable). Retiring one sub-block then deletes that
        one pool and leaves the others as they are."""
        subs = self.reservation.sub_blocks if self.reservation is not None else None
        if subs and self.serving.dynamic_slicing:
            return list(subs)
        pools = self.tpu.cubes if self.serving.dynamic_slicing else self.serving.slices
        return [str(i) for i in range(1, pools + 1)]

    def pool_names(self) -> list[str]:
        return [self.names.tpu_pool(key) for key in self.pool_keys()]

    @model_validator(mode="after")
    def _cross_field(self) -> StackConfig:
        # Each rule raises with the key, the bad value and what is allowed; every rule runs, so a
        # stack file with several problems hears of them all at once.
        rules = (
            self._check_region,
            self._check_backend_platform,
            self._check_slice_model,
            self._check_serving_model,
            self._check_names,
            self._check_sub_blocks,
            self._check_versions_for_features,
            self._check_slices,
            self._check_network_capacity,
            self._check_topology_levels,
            self._check_system_machine,
            self._check_upgrade_policy,
            self._check_alerts,
            self._check_controllers,
        )
        problems: list[str] = []
        for rule in rules:
            try:
                rule()
            except ValueError as err:
                problems += err.problems if isinstance(err, ProblemsError) else [str(err)]
            except Exception:
                # A later rule may rest on what an earlier one refused; that problem is already said.
                if not problems:
                    raise
        if problems:
            raise ProblemsError(problems)
        return self

    def _check_upgrade_policy(self) -> None:
        # Every TPU pool auto-upgrades (infra/tpu_pools.py); only a maintenance exclusion holds
        # node upgrades back. cluster-toolkit's TPU7x example holds them until end of support
        # (examples/gke-tpu-7x/gke-tpu-7x.yaml, NO_MINOR_OR_NODE_UPGRADES).
        cluster = self.cluster
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

    def _check_alerts(self) -> None:
        observability = self.observability
        if not observability.alerts.enabled:
            return
        if not observability.alerts.notification_channels:
            raise ValueError(
                "observability.alerts.notificationChannels is empty: the alert policies would open incidents no "
                "one is told of; allowed: at least one projects/<project>/notificationChannels/<id>, or "
                "alerts.enabled false"
            )
        if not observability.pod_monitoring:
            raise ValueError(
                "observability.alerts needs observability.podMonitoring: its metric policies read the model servers' "
                "/metrics, which nothing would scrape, so they could never fire; allowed: podMonitoring true, "
                "or alerts.enabled false"
            )

    def _check_controllers(self) -> None:
        controllers = self.controllers
        # Set, not only changed: with install false no chart is pulled (k8s/controllers.py), so the key is
        # ignored whatever it says.
        if not controllers.install and "chart_registry" in controllers.model_fields_set:
            raise ValueError(
                f"controllers.chartRegistry {oci_registry.shown(controllers.chart_registry)!r} does nothing with "
                "controllers.install false (no chart is pulled: the platform team's controllers run already), so it "
                "would be ignored without a word; remove it, or set controllers.install true"
            )

    def _check_system_machine(self) -> None:
        problem = machines.system_machine_problem(self.cluster.system_machine_type, self.serving.backend.value)
        if problem:
            raise ValueError(f"cluster.systemMachineType {problem}")

    def _check_topology_levels(self) -> None:
        if not self.serving.dynamic_slicing:
            return
        generation = self.tpu.generation
        required = {HOSTNAME_LEVEL: "Kueue (it assigns pods to nodes by the lowest level)"}
        uses: list[tuple[str, str]] = []
        if self.serving.backend is Backend.VLLM_PD:
            uses += [("serving.prefill.topology", self.serving.prefill.topology)]
            uses += [("serving.decode.topology", self.serving.decode.topology)]
        if self.checks.subslicing.enabled:
            uses.append(("checks.subslicing.topology", self.checks.subslicing.topology))
        if self.checks.superslicing.enabled:
            uses.append(("checks.superslicing.topology", self.checks.superslicing.topology))
        for key, shape in uses:
            level = generation.partition_label(Topology.parse(shape))
            required.setdefault(level, f"{key} {shape}")
        problem = topology_levels_problem(self.kueue.topology_levels, generation, required)
        if problem:
            raise ValueError(f"kueue.topologyLevels {self.kueue.topology_levels} {problem}")

    def _check_network_capacity(self) -> None:
        if self.serving.dynamic_slicing:
            tpu_nodes, what = self.tpu.cubes * self.tpu.vms_per_cube, f"tpu.cubes {self.tpu.cubes}"
        else:
            tpu_nodes = self.serving.slices * self.serving.slice.vms
            what = f"serving.slices {self.serving.slices}"
        nodes = tpu_nodes + self.cluster.system_nodes_per_zone * REGION_ZONES
        pod_range = self.network.pod_cidr
        held = 2 ** max(0, NODE_POD_PREFIX - pod_range.prefixlen)
        if nodes > held:
            wanted = NODE_POD_PREFIX - (nodes - 1).bit_length()
            raise ValueError(
                f"network.podCidr {pod_range} holds {held} nodes (a /{NODE_POD_PREFIX} each), but {what} and the "
                f"system pool make {nodes}: node creation would hang; allowed: a pod range of /{wanted} or wider"
            )
        node_range = self.network.node_cidr
        if nodes > node_range.num_addresses - 4:  # GCP keeps four addresses of every subnet
            raise ValueError(
                f"network.nodeCidr {node_range} has {node_range.num_addresses - 4} usable addresses for {nodes} nodes"
            )

    def _check_region(self) -> None:
        generation = self.tpu.generation if self.serving.dynamic_slicing else self.serving.slice.generation
        problem = tpu_zones.zone_problem(generation.name, self.zone)
        if problem:
            raise ValueError(
                f"zone {self.zone!r} has no {generation.name} TPUs: {problem} (domain/tpu_zones.py, from "
                "cloud.google.com/tpu/docs/regions-zones); allowed: the zone of your reservation, one of those"
            )
        derived = self.zone.rsplit("-", 1)[0]
        if self.region is not None and self.region != derived:
            raise ValueError(
                f"region {self.region!r} does not contain zone {self.zone!r}; use {derived!r} or leave it out"
            )

    def _check_backend_platform(self) -> None:
        serving = self.serving
        unused = sorted(to_camel(name) for name in serving.model_fields_set & IGNORED_KEYS[serving.backend])
        if unused:
            platform = "TPU7x cubes" if serving.dynamic_slicing else "multi-host slices"
            raise ValueError(
                f"serving.{unused[0]} does nothing with serving.backend {serving.backend.value!r} (it runs on "
                f"{platform}), so it would be ignored without a word; remove it"
            )
        if serving.dynamic_slicing:
            if self.reservation is None or self.reservation.block is None:
                raise ValueError(
                    "reservation.name and reservation.block are required: TPU7x dynamic slicing binds each cube "
                    "to a reservation block (serving.backend saxml or jetstream may run on demand)"
                )
            return
        backend = serving.backend.value
        if "tpu" in self.model_fields_set:
            raise ValueError(f"tpu applies to the TPU7x cube platform; serving.backend {backend!r} uses serving.slice")
        if "kueue" in self.model_fields_set:
            # __main__.py installs Kueue for the cube platform only (needed_controllers).
            raise ValueError(
                f"kueue does nothing with serving.backend {backend!r} (Kueue queues only the TPU7x cubes), so it "
                "would be ignored without a word; remove it"
            )
        if self.checks.subslicing.enabled or self.checks.superslicing.enabled:
            raise ValueError(
                f"checks.* prove TPU7x dynamic slicing and cannot run with serving.backend {backend!r}; disable them"
            )
        if self.reservation is not None and self.reservation.sub_blocks:
            raise ValueError("reservation.subBlocks apply to TPU7x cubes only")
        if self.reservation is not None and self.reservation.block is not None:
            raise ValueError(
                f"reservation.block {self.reservation.block!r} applies to TPU7x cubes only: a "
                f"{serving.slice.generation.name} slice binds to the whole reservation; remove it"
            )
        generation = serving.slice.generation
        if serving.backend is Backend.SAXML and generation.saxml_chip is None:
            raise ValueError(
                f"serving.slice.machineType {serving.slice.machine_type}: Saxml has no chip name for {generation.name} "
                "(its model servers know tpuv5e); use a v5e slice or serving.backend jetstream"
            )
        multi_host = serving.slice.vms > 1
        if serving.backend is Backend.JETSTREAM and multi_host and generation.pathways_type is None:
            raise ValueError(
                f"serving.slice {serving.slice.topology} on {generation.name} spans several VMs, and Pathways "
                "(JetStream's multi-host path) has no instance type for it; use a single-host topology"
            )
        if serving.backend is Backend.SAXML and len(self.names.sax_account) < 6:
            raise ValueError(
                f"namePrefix {self.name_prefix!r} is too short: the Saxml service account id "
                f"{self.names.sax_account!r} needs 6 to 30 characters"
            )

    def _check_slice_model(self) -> None:
        """Saxml and JetStream: the model on one slice (its HBM, the servable's mesh, MaxText's cache)."""
        serving = self.serving
        if serving.dynamic_slicing:
            return
        generation = serving.slice.generation
        model = serving.model
        needed = model.weights_bytes / (1.0 - model.kv_cache_headroom)
        hbm = generation.hbm_bytes(serving.slice.shape)
        if needed > hbm:
            smallest = generation.smallest_shape_holding(int(needed))
            allowed = (
                f"the smallest {generation.name} topology that fits is {smallest}"
                if smallest
                else (f"no {generation.name} slice is large enough")
            )
            raise ValueError(
                f"serving.slice.topology {serving.slice.topology} holds {hbm / topology.GIB:.0f} GiB HBM, but model "
                f"{model.name!r} needs {model.weights_bytes / topology.GIB:.0f} GiB of weights plus "
                f"{model.kv_cache_headroom:.0%} headroom = {needed / topology.GIB:.0f} GiB; {allowed}"
            )
        if serving.backend is Backend.SAXML:  # after the size: a model that cannot fit is the first thing to say
            self._check_servable(generation)
        if serving.backend is Backend.JETSTREAM:
            self._check_maxtext(generation)

    def jetstream_tensor_parallelism(self) -> int:
        """MaxText's ici_tensor_parallelism for the JetStream engine (ici_autoregressive_parallelism=-1
        takes the slice's other devices). Given, it is checked by `_check_maxtext`. Unset: 1 on one host,
        as the single-host samples; on a Pathways slice the largest count dividing both the slice's
        devices and the model's KV heads, as GKE's JetStream + Pathways tutorial shards Llama 3.1 405B
        (8 KV heads) over a 16-chip v6e slice with ici_tensor_parallelism=8 and autoregressive 2; all
        the devices when the engine image is outside domain/maxtext_models.py's table."""
        jet, slice_ = self.serving.jetstream, self.serving.slice
        if jet.tensor_parallelism is not None:
            return jet.tensor_parallelism
        if slice_.vms == 1:
            return 1
        devices = slice_.generation.devices(slice_.shape)
        model = (maxtext_models.models_for(self.versions.jetstream_maxengine_image) or {}).get(jet.maxtext_model)
        return math.gcd(devices, model.kv_heads) if model is not None else devices

    def _check_maxtext(self, generation: topology.Generation) -> None:
        """The MaxText model name, its tensor parallelism and the KV cache MaxEngine allocates at start-up
        (domain/maxtext_models.py)."""
        jet, slice_, image = self.serving.jetstream, self.serving.slice, self.versions.jetstream_maxengine_image
        models = maxtext_models.models_for(image)
        if models is None:  # a tag the table does not know: its MaxText revision cannot be read here
            return
        engine = image.rsplit("/", 1)[-1]
        model = models.get(jet.maxtext_model)
        if model is None:
            raise ValueError(
                f"serving.jetstream.maxtextModel {jet.maxtext_model!r} is not a model {engine} knows: MaxText's "
                f"validate_model_name refuses it when every server starts; allowed: {', '.join(sorted(models))}"
            )
        devices = generation.devices(slice_.shape)
        self._check_tensor_parallelism(model, devices)
        per_sequence = jet.max_target_length * model.kv_bytes_per_token()
        kv = maxtext_models.kv_cache_bytes(
            model,
            per_device_batch_size=jet.per_device_batch_size,
            devices=devices,
            max_target_length=jet.max_target_length,
        )
        weights, hbm = self.serving.model.weights_bytes, generation.hbm_bytes(slice_.shape)
        if weights + kv <= hbm:
            return
        largest = (hbm - weights) // (devices * per_sequence)
        allowed = (
            f"perDeviceBatchSize at most {largest} with maxTargetLength {jet.max_target_length}"
            if largest >= 1
            else "a shorter maxTargetLength or a larger slice"
        )
        gib = topology.GIB
        raise ValueError(
            f"serving.jetstream.perDeviceBatchSize {jet.per_device_batch_size}: MaxEngine allocates the KV cache "
            f"of the whole batch when it starts, {jet.per_device_batch_size} x {devices} devices x "
            f"{jet.max_target_length} tokens x {model.kv_bytes_per_token() // 1024} KiB per token of "
            f"{jet.maxtext_model} = {kv / gib:.0f} GiB, beside {weights / gib:.0f} GiB of weights: more than the "
            f"{hbm / gib:.0f} GiB HBM of serving.slice.topology {slice_.topology}; allowed: {allowed}"
        )

    def _check_tensor_parallelism(self, model: maxtext_models.MaxTextModel, devices: int) -> None:
        """MaxText shards the key and value projections' heads axis and the KV cache's heads over the
        tensor axis (MaxText jetstream-v0.2.2 MaxText/layers/attentions.py, kernel_axes ("embed", "heads",
        "kv") of features (num_kv_heads, head_dim); configs/base.yml logical_axis_rules `heads` and
        `cache_heads` on 'tensor'), and the ici axes multiply to the slice's devices (pyconfig's mesh,
        ici_autoregressive_parallelism=-1 filling the rest): a count above the KV heads, or one that
        divides either unevenly, leaves a KV head split across chips or the mesh short of devices."""
        tp, heads = self.jetstream_tensor_parallelism(), model.kv_heads
        if tp <= heads and heads % tp == 0 and devices % tp == 0:
            return
        common = math.gcd(devices, heads)
        allowed = ", ".join(str(d) for d in range(1, common + 1) if common % d == 0)
        name, topology_ = self.serving.jetstream.maxtext_model, self.serving.slice.topology
        if tp > heads:
            reason = f"above the {heads} KV heads of {name} (MaxText shards the KV heads over tensor parallelism)"
        elif heads % tp:
            reason = f"not a divisor of the {heads} KV heads of {name} (MaxText shards them over tensor parallelism)"
        else:
            reason = f"not a divisor of the {devices} devices of serving.slice.topology {topology_}"
        raise ValueError(
            f"serving.jetstream.tensorParallelism {tp} is {reason}; allowed: {allowed} (divisors of both the "
            f"{heads} KV heads and the {devices} devices; ici_autoregressive_parallelism takes the other devices)"
        )

    def _check_servable(self, generation: topology.Generation) -> None:
        saxml, slice_ = self.serving.saxml, self.serving.slice
        servable = saxml_servables.SERVABLES.get(saxml.model_path)
        if servable is None:
            return
        devices = generation.devices(slice_.shape)
        if servable.devices != devices:
            fitting = sorted(p for p, s in saxml_servables.SERVABLES.items() if s.devices == devices)
            raise ValueError(
                f"serving.saxml.modelPath {saxml.model_path.removeprefix(saxml_servables.PREFIX)} shards over "
                f"{servable.devices} devices (its ICI_MESH_SHAPE), but serving.slice.topology {slice_.topology} has "
                f"{devices}: the model servers would fail to load it; allowed: "
                + (", ".join(p.removeprefix(saxml_servables.PREFIX) for p in fitting) or "a servable of that size")
                + f", or a {generation.name} topology of {servable.devices} chips"
            )
        if servable.test_mode and saxml.checkpoint != "None":
            raise ValueError(
                f"serving.saxml.checkpoint {saxml.checkpoint!r} would be ignored: "
                f"{saxml.model_path.rsplit('.', 1)[-1]} is a test-mode servable that serves random weights; "
                "allowed: checkpoint None for it, or a servable that loads a checkpoint"
            )

    def _check_serving_model(self) -> None:
        backend = self.serving.backend
        needs_bucket = backend in (Backend.VLLM_PD, Backend.JETSTREAM) or (
            backend is Backend.SAXML and self.serving.saxml.checkpoint != "None"
        )
        if needs_bucket and self.serving.model.weights_bucket is None:
            raise ValueError(
                f"serving.model.weightsBucket is required for serving.backend {backend.value!r} "
                "(the bucket that holds the weights), or set serving.backend to 'none'"
            )
        checkpoint = self.serving.saxml.checkpoint
        if backend is Backend.SAXML and checkpoint != "None":
            # workloads/saxml.py grants the Sax account objectViewer on serving.model.weightsBucket only.
            bucket = checkpoint.removeprefix("gs://").split("/", 1)[0]
            if bucket != self.serving.model.weights_bucket:
                raise ValueError(
                    f"serving.saxml.checkpoint {checkpoint!r} is in bucket {bucket!r}, but the model servers are "
                    f"granted read access to serving.model.weightsBucket {self.serving.model.weights_bucket!r} "
                    "only, so loading it would be refused; allowed: a checkpoint inside serving.model.weightsBucket"
                )
        if backend is Backend.SAXML:
            derived = self.names.sax_bucket(self.project)
            problem = storage_names.bucket_problem(derived)
            if problem:
                raise ValueError(
                    f"namePrefix {self.name_prefix!r} makes the Saxml admin bucket name {derived!r} "
                    f"(<project>-<namePrefix>-sax), which has {problem}; {storage_names.BUCKET_ALLOWED}"
                )

    def _check_names(self) -> None:
        for what, name, limit in self.names.limits(self.pool_keys()):
            if len(name) > limit:
                raise ValueError(
                    f"namePrefix {self.name_prefix!r} is too long: the {what} name {name!r} has {len(name)} "
                    f"characters, the limit is {limit}"
                )

    def _check_sub_blocks(self) -> None:
        if self.reservation is None or not self.serving.dynamic_slicing:
            return
        subs = self.reservation.sub_blocks
        if subs is not None and len(subs) != self.tpu.cubes:
            raise ValueError(
                f"reservation.subBlocks lists {len(subs)} sub-blocks but tpu.cubes is {self.tpu.cubes}: "
                "give one sub-block per cube"
            )
        if self.reservation.block_cubes is not None and self.tpu.cubes > self.reservation.block_cubes:
            raise ValueError(
                f"tpu.cubes {self.tpu.cubes} exceeds reservation.blockCubes {self.reservation.block_cubes}"
            )

    def _check_versions_for_features(self) -> None:
        if not self.serving.dynamic_slicing:
            return
        floor = self.platform.version_floor
        version = self.cluster.version
        if version is not None and floor is not None and gke_version_key(version) < gke_version_key(floor):
            needs = (
                "dynamic sub-slicing (checks.subslicing, serving backend vllm-pd)"
                if floor == SUBSLICING_MIN_GKE
                else "the TPU slice controller (super-slicing)"
            )
            raise ValueError(f"cluster.version {version} is below {floor}, which {needs} needs")
        if self.cluster.release_channel not in (None, ReleaseChannel.RAPID):
            raise ValueError(
                f"cluster.releaseChannel {self.cluster.release_channel} is not allowed: "
                "GKE dynamic slicing is only offered on RAPID"
            )

    def _check_slices(self) -> None:
        generation = self.tpu.generation
        cube_chips = self.tpu.chips_per_cube
        total = self.tpu.total_chips
        sub = self.checks.subslicing
        if sub.enabled:
            shape = _as_subslice(generation, sub.topology, "checks.subslicing.topology")
            if topology.pack_into_cubes([shape.chips] * sub.replicas, cube_chips, self.tpu.cubes) is None:
                per_cube = cube_chips // shape.chips
                raise ValueError(
                    f"checks.subslicing.replicas {sub.replicas} of {sub.topology} do not fit: "
                    f"{self.tpu.cubes} cubes hold at most {per_cube * self.tpu.cubes}"
                )
        sup = self.checks.superslicing
        if sup.enabled:
            try:
                cubes = generation.superslice_cubes(sup.topology)
            except topology.TopologyError as err:
                raise ValueError(f"checks.superslicing.topology: {err}") from None
            if cubes > self.tpu.cubes:
                raise ValueError(
                    f"checks.superslicing.topology {sup.topology} spans {cubes} cubes but the stack holds "
                    f"{self.tpu.cubes} (tpu.cubes)"
                )
        if self.serving.backend is Backend.VLLM_PD:
            self._check_serving(generation, cube_chips, total)

    def _check_serving(self, generation: topology.Generation, cube_chips: int, total: int) -> None:
        serving = self.serving
        shapes = {
            role: _as_subslice(generation, cfg.topology, f"serving.{role}.topology")
            for role, cfg in (("prefill", serving.prefill), ("decode", serving.decode))
        }
        if shapes["prefill"] != shapes["decode"]:
            raise ValueError(
                f"serving.prefill.topology {serving.prefill.topology} and serving.decode.topology "
                f"{serving.decode.topology} differ: tpu-inference's KV connector pairs decode host i with "
                "prefill host i and pulls each block with the decode side's sharding, asserting equal block "
                "counts (tpu-inference v0.26.0 tpu_inference/distributed/tpu_connector.py), so the KV cannot "
                "move between slices of different shapes or tensor parallelism; allowed: one topology for both"
            )
        chips = [shapes["prefill"].chips] * serving.prefill.replicas + [
            shapes["decode"].chips
        ] * serving.decode.replicas
        if topology.pack_into_cubes(chips, cube_chips, self.tpu.cubes) is None:
            raise ValueError(
                f"serving.prefill ({serving.prefill.replicas} x {serving.prefill.topology}) and serving.decode "
                f"({serving.decode.replicas} x {serving.decode.topology}) need {sum(chips)} chips in whole "
                f"sub-slices; the stack holds {total} chips in {self.tpu.cubes} cubes of {cube_chips}"
            )
        model = serving.model
        usable = 1.0 - model.kv_cache_headroom
        for role, shape in shapes.items():
            hbm = generation.hbm_bytes(shape)
            if model.weights_bytes > hbm * usable:
                needed = model.weights_bytes / usable
                chips_needed = topology.chips_needed(int(needed), generation)
                smallest = generation.smallest_shape_holding(int(needed))
                raise ValueError(
                    f"serving.{role}.topology {shape} holds {hbm / topology.GIB:.0f} GiB HBM, but model "
                    f"{model.name!r} needs {model.weights_bytes / topology.GIB:.0f} GiB of weights plus "
                    f"{model.kv_cache_headroom:.0%} KV-cache headroom = {needed / topology.GIB:.0f} GiB, i.e. at least "
                    f"{chips_needed} {generation.name} chips" + (f" (smallest shape: {smallest})" if smallest else "")
                )
        tp = serving.vllm.tensor_parallel_size
        if tp is not None:
            for role, shape in shapes.items():
                check_tensor_parallel(tp, model, generation, shape, role)
        check_engine(serving.vllm, model, generation, shapes["prefill"])  # one shape for both (above)


def _as_subslice(generation: topology.Generation, text: str, key: str) -> topology.Topology:
    try:
        return generation.subslice(text)
    except topology.TopologyError as err:
        raise ValueError(f"{key}: {err}") from None
