"""The stack configuration contract: one strict pydantic v2 model tree.

YAML keys are camelCase (`namePrefix`), Python attributes snake_case. Unknown keys are errors with a
"did you mean" hint, and every cross-field rule runs from here, so a bad stack file fails before a
single resource is registered. The rules live beside what they guard, one module per concern, each
with the classes it refuses (settings/refusals.py collects them): `rules_network.py`,
`rules_cluster.py`, `rules_capacity.py`, `rules_kueue.py`, `rules_versions.py`, `rules_backends.py`,
`rules_serving.py`, `rules_autoscaling.py`, `rules_observability.py`, `rules_waits.py`, `rules_recovery.py` and
`rules_reservation.py`. This module keeps
the tree and the order they run in.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, Field, SecretStr, ValidationInfo, field_validator, model_validator

from domain import topology
from domain.serving_budget import BUDGET
from domain.topology import Generation, MachineType, Topology
from settings import (
    benchmark,
    oci_registry,
    pricing,
    rules_autoscaling,
    rules_backends,
    rules_capacity,
    rules_cluster,
    rules_kueue,
    rules_network,
    rules_observability,
    rules_recovery,
    rules_reservation,
    rules_serving,
    rules_storage,
    rules_versions,
    rules_waits,
)
from settings.base import OWN_CHARACTERS, ProblemsError, Shape, StrictModel
from settings.benchmark import BenchmarkConfig
from settings.names import NameRule
from settings.naming import Names
from settings.pricing import PricingConfig
from settings.rules_backends import Backend
from settings.rules_cluster import SUBSLICING_MIN_GKE, SUPERSLICING_MIN_GKE, ExclusionScope, ReleaseChannel
from settings.rules_kueue import DEFAULT_TOPOLOGY_LEVELS
from settings.rules_serving import SMOKE_DEADLINE_MAX
from settings.serving_model import ModelConfig
from settings.vllm import RoleConfig, VllmConfig

RFC1035 = NameRule(
    r"[a-z]([-a-z0-9]*[a-z0-9])?", "lowercase letters, digits and '-', starting with a letter, not ending with '-'"
)
RFC1123 = NameRule(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", "lowercase letters, digits and '-', starting and ending with a letter or digit"
)


def _rfc1035(value: str) -> str:
    if not RFC1035.matches(value):
        raise ValueError(f"{value!r} is not a valid name: {RFC1035.allowed}")
    return value


ChartVersion = Annotated[str, AfterValidator(rules_versions.pinned_chart)]
# settings/pins.py names the whitespace and control characters of an image in the API server's words.
Image = Annotated[str, AfterValidator(rules_versions.pinned_image), OWN_CHARACTERS]
DnsLabel = Annotated[str, Field(max_length=63), AfterValidator(_rfc1035)]


def _rfc1123(value: str) -> str:
    # Namespace names are RFC 1123 labels (k8s.io/apimachinery validation ValidateNamespaceName ->
    # IsDNS1123Label): a leading digit is allowed, unlike the RFC 1035 labels of Service names.
    if not RFC1123.matches(value):
        raise ValueError(f"{value!r} is not a namespace name: {RFC1123.allowed}")
    return value


Namespace = Annotated[str, Field(max_length=63), AfterValidator(_rfc1123)]
PrivateRange = Annotated[ipaddress.IPv4Network, AfterValidator(rules_network.private_range)]


class NetworkConfig(StrictModel):
    mtu: int = Field(8896, ge=1300, le=8896)
    node_cidr: PrivateRange = ipaddress.IPv4Network("10.10.0.0/18")
    pod_cidr: PrivateRange = ipaddress.IPv4Network("10.16.0.0/14")
    service_cidr: PrivateRange = ipaddress.IPv4Network("10.20.0.0/20")
    proxy_cidr: Annotated[PrivateRange, AfterValidator(rules_network.proxy_size)] = ipaddress.IPv4Network(
        "172.16.0.0/26"
    )

    @model_validator(mode="after")
    def _disjoint(self) -> NetworkConfig:
        rules_network.disjoint(self)
        return self

    @property
    def internal_ranges(self) -> list[str]:
        return [str(r) for r in (self.node_cidr, self.pod_cidr, self.service_cidr, self.proxy_cidr)]


class MaintenanceExclusion(StrictModel):
    """A GKE maintenance exclusion: a dated window, or until end of support."""

    name: DnsLabel
    scope: ExclusionScope
    start: datetime
    end: datetime | None = None
    until_end_of_support: bool = False

    @model_validator(mode="after")
    def _window(self) -> MaintenanceExclusion:
        rules_cluster.exclusion_window(self)
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


class ClusterConfig(StrictModel):
    # An exact pin; by default the version is chosen at plan time from what the channel offers
    # (domain/gke_versions.py) and kept in state, so a later preview never upgrades on its own.
    version: Annotated[str | None, AfterValidator(rules_cluster.gke_version)] = None
    version_prefix: str | None = Field(None, pattern=r"^[0-9]+\.[0-9]+\.([0-9]+-gke\.)?$")
    # Default: RAPID for TPU7x dynamic slicing (the only channel offering it), REGULAR otherwise.
    release_channel: ReleaseChannel | None = None
    # The shape of a GCE machine type name; settings/machines.py judges the rest (a predefined type of a
    # series GKE leaves untainted, large enough for the backend's system pods).
    system_machine_type: str = Field("n2-standard-32", pattern=r"^[a-z][a-z0-9]*(-[a-z0-9]+)+$")
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

    @model_validator(mode="after")
    def _prefix_agrees(self) -> ClusterConfig:
        rules_cluster.prefix_agrees(self)
        return self


class NoGoWindow(StrictModel):
    """A span in which a bound sub-block must have no maintenance due (settings/rules_reservation.py)."""

    start: Annotated[datetime, BeforeValidator(rules_reservation.instant)]
    end: Annotated[datetime, BeforeValidator(rules_reservation.instant)]

    @model_validator(mode="after")
    def _window(self) -> NoGoWindow:
        rules_reservation.no_go_window(self)
        return self


class ReservationConfig(StrictModel):
    project: str | None = Field(None, pattern=r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$")
    name: DnsLabel
    block: DnsLabel | None = None
    sub_blocks: Annotated[list[DnsLabel] | None, AfterValidator(rules_capacity.unique_sub_blocks)] = None
    block_cubes: int | None = Field(None, ge=1, le=144)
    # What was read of the reservation is judged at plan time and in `pulumi up` (infra/reservation.py):
    # a new pool is refused on a sub-block that is not HEALTHY, lacks its hosts, or has maintenance due
    # inside one of these windows; `accept` (sub-block -> reason) binds one anyway; `snapshot` is what
    # the offline plan reads instead of the live reservation.
    maintenance_no_go: list[NoGoWindow] | None = None
    accept: dict[DnsLabel, str] | None = None
    snapshot: Annotated[str | None, AfterValidator(rules_reservation.snapshot_file)] = None

    @model_validator(mode="after")
    def _accept(self) -> ReservationConfig:
        rules_reservation.check_accept(self)
        rules_reservation.no_go_needs_sub_blocks(self)
        return self

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
    machine_type: Annotated[str, AfterValidator(rules_capacity.tpu_machine)] = "tpu7x-standard-4t"
    cubes: int = Field(2, ge=1, le=144)
    cube_topology: Shape = "4x4x4"

    @property
    def generation(self) -> topology.Generation:
        return topology.generation_of(self.machine_type)

    @model_validator(mode="after")
    def _cube(self) -> TpuConfig:
        rules_capacity.cube(self)
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
    # The metrics API of autoscaled serving roles (k8s/metrics_adapter.py): the build of release
    # cm-sd-adapter-v0.16.9 (GoogleCloudPlatform/k8s-stackdriver), which its production manifest
    # names from commit af49d863 on (the tag's own manifest still named v0.16.7-gke.0).
    metrics_adapter_image: Image = "gcr.io/gke-release/custom-metrics-stackdriver-adapter:v0.16.9-gke.0"
    # The newest JAX AI image tag evidenced on TPU7x (jax 0.8.1, libtpu 0.0.30).
    jax_tpu_image: Image = "us-docker.pkg.dev/cloud-tpu-images/jax-ai-image/tpu:jax0.8.1-rev1"
    gateway_api_inference_extension: Annotated[ChartVersion, AfterValidator(rules_versions.known_inference_release)] = (
        "v1.5.0"
    )
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
    # inference-perf's release image (its publish-on-release workflow tags quay.io/inference-perf/
    # inference-perf with the release tag); the tests run the same release from PyPI (tools/loadgen).
    benchmark_image: Image = "quay.io/inference-perf/inference-perf:v0.7.0"
    smoke_test_image: Image = (
        "python:3.12.13-slim@sha256:423ed6ab25b1921a477529254bfeeabf5855151dc2c3141699a1bfc852199fbf"
    )

    @model_validator(mode="after")
    def _controller_floors(self) -> Versions:
        rules_versions.controller_floors(self)
        return self

    @model_validator(mode="after")
    def _one_llm_d_release(self) -> Versions:
        rules_versions.one_llm_d_release(self)
        return self


class Priorities(StrictModel):
    low: int = Field(1000, ge=0, le=1_000_000_000)
    medium: int = Field(2000, ge=0, le=1_000_000_000)
    high: int = Field(3000, ge=0, le=1_000_000_000)

    @model_validator(mode="after")
    def _ordered(self) -> Priorities:
        rules_kueue.priorities_ordered(self)
        return self

    def items(self) -> list[tuple[str, int]]:
        return [("low", self.low), ("medium", self.medium), ("high", self.high)]


PodsReadyTimeout = Annotated[
    int, Field(le=rules_recovery.PODS_READY_MAX_SECONDS), AfterValidator(rules_recovery.pods_ready_timeout)
]


class KueueRecoveryConfig(StrictModel):
    """What Kueue does with a group that is not Ready, or stops being Ready (settings/rules_recovery.py)."""

    # From admission to every pod Ready; past it Kueue evicts and re-queues the group.
    pods_ready_timeout_seconds: PodsReadyTimeout = rules_recovery.PODS_READY_MIN_SECONDS
    # From a running group's pod failing to its replacement Ready (a host lost, the group reloading).
    recovery_timeout_seconds: PodsReadyTimeout = rules_recovery.PODS_READY_MIN_SECONDS
    # Kueue force-deletes a serving pod left Terminating on an unreachable host, so its group is
    # made again without a person (settings/rules_recovery.py FORCE_DELETE_GATE).
    force_delete_on_unreachable_host: bool = True
    backoff_base_seconds: int = Field(rules_recovery.BACKOFF_BASE_DEFAULT, ge=1, le=3600)
    backoff_max_seconds: int = Field(rules_recovery.BACKOFF_MAX_DEFAULT, ge=1, le=rules_recovery.BACKOFF_MAX_LIMIT)

    @model_validator(mode="after")
    def _backoff(self) -> KueueRecoveryConfig:
        rules_recovery.backoff_bounds(self)
        return self


class KueueConfig(StrictModel):
    topology_levels: list[str] = Field(
        default_factory=lambda: list(DEFAULT_TOPOLOGY_LEVELS), min_length=1, max_length=16
    )
    priorities: Priorities = Field(default_factory=lambda: Priorities.model_validate({}))
    recovery: KueueRecoveryConfig = Field(default_factory=lambda: KueueRecoveryConfig.model_validate({}))


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


class SmokeTestConfig(StrictModel):
    enabled: bool = True
    deadline_seconds: Annotated[int, Field(le=SMOKE_DEADLINE_MAX), AfterValidator(rules_serving.smoke_deadline)] = (
        BUDGET.smoke_deadline_min_seconds
    )
    # Tells one smoke-test run from another; unset means no run id.
    run_id: Annotated[str | None, AfterValidator(rules_serving.run_id)] = None


class GatewayConfig(StrictModel):
    name: DnsLabel = "inference-gateway"
    address_timeout_seconds: Annotated[
        int,
        Field(ge=rules_waits.ADDRESS_TIMEOUT_MIN, le=rules_waits.ADDRESS_TIMEOUT_MAX),
        BeforeValidator(rules_waits.address_timeout),
    ] = 1200


class SliceConfig(StrictModel):
    """One multi-host TPU slice per node pool (Saxml and JetStream backends)."""

    machine_type: str = "ct5lp-hightpu-4t"
    topology: Shape = "4x8"

    @model_validator(mode="after")
    def _shape(self) -> SliceConfig:
        rules_backends.slice_shape(self)
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


class HttpExposure(StrictModel):
    """How a backend's HTTP service is reached: an internal load balancer unless told otherwise."""

    type: Literal["internal", "external"] = "internal"
    source_ranges: list[ipaddress.IPv4Network] = Field(default_factory=list, max_length=64)

    @model_validator(mode="after")
    def _restricted(self) -> HttpExposure:
        rules_network.restricted_exposure(self)
        return self


class SaxmlConfig(StrictModel):
    model_key: str = Field("/sax/test/spmd", pattern=r"^/sax/[a-z0-9_-]+/[A-Za-z0-9_.-]+$")
    model_path: str = Field("saxml.server.pax.lm.params.lm_cloud.LmCloudSpmd175B32Test", pattern=r"^[A-Za-z0-9_.]+$")
    # "None" is Saxml's literal for a test model with random weights.
    checkpoint: Annotated[str, AfterValidator(rules_backends.checkpoint)] = "None"
    # At least its model servers' image pull and start (domain/serving_budget.py, settings/rules_waits.py).
    publish_deadline_seconds: Annotated[
        int,
        Field(ge=BUDGET.saxml_publish_min_seconds, le=rules_waits.PUBLISH_DEADLINE_MAX),
        BeforeValidator(rules_waits.publish_deadline),
    ] = 3600

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
        rules_backends.jetstream_lengths(self)
        return self


class ServingConfig(StrictModel):
    backend: Backend = Backend.VLLM_PD
    namespace: Annotated[Namespace, AfterValidator(rules_serving.own_namespace)] = "llm-d-pd-disaggregation"
    model: ModelConfig = Field(default_factory=lambda: ModelConfig.model_validate({}))
    prefill: RoleConfig = Field(default_factory=lambda: RoleConfig.model_validate({}))
    decode: RoleConfig = Field(default_factory=lambda: RoleConfig.model_validate({}))
    vllm: VllmConfig = Field(default_factory=lambda: VllmConfig.model_validate({}))
    gateway: GatewayConfig = Field(default_factory=lambda: GatewayConfig.model_validate({}))
    smoke_test: SmokeTestConfig = Field(default_factory=lambda: SmokeTestConfig.model_validate({}))
    benchmark: BenchmarkConfig = Field(default_factory=lambda: BenchmarkConfig.model_validate({}))
    slices: int = Field(2, ge=1, le=64)
    slice: SliceConfig = Field(default_factory=lambda: SliceConfig.model_validate({}))
    http: HttpExposure = Field(default_factory=lambda: HttpExposure.model_validate({}))
    saxml: SaxmlConfig = Field(default_factory=lambda: SaxmlConfig.model_validate({}))
    jetstream: JetstreamConfig = Field(default_factory=lambda: JetstreamConfig.model_validate({}))

    @property
    def dynamic_slicing(self) -> bool:
        """The TPU7x cube platform (vllm-pd, or none); otherwise one pool per multi-host slice."""
        return self.backend in (Backend.VLLM_PD, Backend.NONE)


class AlertsConfig(StrictModel):
    enabled: bool = False
    notification_channels: list[str] = Field(default_factory=list, max_length=16)
    queue_threshold: int = Field(32, ge=1, le=100_000)

    @field_validator("notification_channels")
    @classmethod
    def _channels(cls, value: list[str]) -> list[str]:
        return rules_observability.notification_channels(value)


class ObservabilityConfig(StrictModel):
    pod_monitoring: bool = True
    dashboard: bool = True
    alerts: AlertsConfig = Field(default_factory=lambda: AlertsConfig.model_validate({}))


class ControllersConfig(StrictModel):
    """Whether the program installs JobSet, Kueue and LeaderWorkerSet (its pinned Helm charts), or
    uses the ones a platform team already runs in a shared cluster (at the `versions` pinned here:
    the program cannot check an installed controller's version, so the README says who must)."""

    install: bool = True
    # A mirror of registry.k8s.io (an Artifact Registry remote repository) in its place: each chart is
    # <chartRegistry>/<component>/charts/<component> (k8s/controllers.py), its version still versions.*.
    chart_registry: Annotated[str, AfterValidator(rules_versions.chart_registry), OWN_CHARACTERS] = oci_registry.DEFAULT


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
    pricing: PricingConfig | None = None  # no default price: settings/pricing.py
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

    def jetstream_tensor_parallelism(self) -> int:
        """MaxText's ici_tensor_parallelism for the JetStream engine (settings/rules_backends.py)."""
        return rules_backends.jetstream_tensor_parallelism(self)

    @model_validator(mode="after")
    def _cross_field(self, info: ValidationInfo) -> StackConfig:
        # Each rule raises with the key, the bad value and what is allowed; every rule runs, so a
        # stack file with several problems hears of them all at once. `now` (the loader's clock, in the
        # validation context) is the moment time-bound rules judge at.
        now: datetime | None = (info.context or {}).get("now")
        rules = (
            rules_cluster.check_region,
            rules_backends.check_backend_platform,
            rules_backends.check_slice_model,
            rules_serving.check_serving_model,
            rules_storage.check_model_snapshot,
            rules_storage.check_model_storage,
            rules_cluster.check_names,
            rules_capacity.check_sub_blocks,
            rules_cluster.check_versions_for_features,
            _check_slices,
            rules_network.check_network_capacity,
            rules_network.check_service_range,
            rules_kueue.check_topology_levels,
            rules_cluster.check_system_machine,
            rules_cluster.check_upgrade_policy,
            partial(rules_cluster.check_hold_in_force, now=now),
            rules_waits.check_smoke_fits,
            rules_observability.check_alerts,
            rules_versions.check_controllers,
            rules_versions.check_images,
            pricing.check_pricing,
            benchmark.check_benchmark,
        )
        problems: list[str] = []
        for rule in rules:
            try:
                rule(self)
            except ValueError as err:
                problems += err.problems if isinstance(err, ProblemsError) else [str(err)]
            except Exception:
                # A later rule may rest on what an earlier one refused; that problem is already said.
                if not problems:
                    raise
        if problems:
            raise ProblemsError(problems)
        return self


def _check_slices(config: StackConfig) -> None:
    """One rule: the slicing checks in the cubes, then vllm-pd's serving sub-slices, which are not judged
    when a check already does not fit, then its autoscaled roles, judged on valid shapes."""
    rules_capacity.check_slices(config)
    if config.serving.backend is Backend.VLLM_PD:
        rules_serving.check_serving(config)
        rules_autoscaling.check_autoscaling(config)
