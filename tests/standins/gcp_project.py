"""A bare Google Cloud project for the stand-in GCP provider: it refuses what GCP refuses.

The stand-in provider (tests/standins/gcp_provider.py) accepts everything. This model says, for
one project, which creates and invokes the real APIs would refuse, and with which error, as the
bridged Terraform provider surfaces it (`googleapi: Error <code>: <message>, <reason>`). It is a
plain class: the provider wires it in (call `refuse_*` before answering, `created`/`updated`/
`deleted` after, `reported` on Read). Every rule is in a table below with its upstream source.

State is a JSON file, because the engine starts the provider anew for every `pulumi` command
(`up`, then `preview`, then `destroy`): every public method loads it, acts and saves it, under an
exclusive `fcntl.flock` on a sidecar `.lock` file, since the engine calls Create from threads.
`Project.at(None)` is the same project in memory only.

API (all tokens are Pulumi tokens, all inputs camelCase as the engine sends them):

    Project.at(path: Path | None, project_id=..., number=...) -> Project   # bare if the file is new
    refuse_create(token, inputs) -> GcpError | None    # records the refusal it returns
    try_create(token, inputs, state, resource_id=None) -> GcpError | None   # check + created(), one lock
    created(token, inputs, state, resource_id=None)    # the create succeeded: remember the resource
    updated(token, inputs, state, resource_id=None)    # same record, new state
    deleted(token, state)                               # forget it (a Service with disableOnDestroy=false stays on)
    reported(token, state) -> dict                     # what Read returns: the state as GCP reports it
    exists(token, state) -> bool                       # the resource is still in the project
    refuse_invoke(token, args) -> GcpError | None
    answer_invoke(token, args) -> dict                 # plan.engine.cloud_invoke with this project's facts
    declare_reservation(path, zone=..., machine_type=..., sub_blocks={block: {sub_block: SubBlock(...)}})
    declare_bucket(name, project=None)                 # a bucket that exists outside the stack
    refuse_token_exchange(google_account)              # a Workload Identity pod asks for a Google token
    enable(service) / enabled(service) -> bool
    services, enabled_order, refusals, resources, unprovisioned   # read-only views for assertions

Rules (each table names its source):
    SERVICE_OF_TOKEN / SERVICE_OF_INVOKE: the API a call needs, from the provider's base path.
    DEFAULT_SERVICES: what a new project has on.
    IDENTITY: the name a create collides on (409).
    RULES: the order refuse_create checks them in, with their sources.
    PROVISIONING_RULES: what becomes of a create GCP accepts (a pool on an unhealthy sub-block is
    created and its VMs stay unprovisioned: `unprovisioned`).
    TPU_CHIPS_PER_VM and the TPU constants: the facts the pool rules compare.

What it does not model: IAM permissions (it remembers IAM members; gcp_access.py judges a pod's
Cloud Storage access with them), quotas, propagation delays (an API enabled a moment ago
can still answer SERVICE_DISABLED), org policies, field validation, and the consumer project of
the credentials (it treats every call as billed to this project). The provider's Read of a
gcp:projects/service:Service also calls Cloud Resource Manager's projects.get
(resource_google_project_service.go, `resourceGoogleProjectServiceRead`); that call is billed to
the credentials' project, so it is not refused here.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import json
import os
import re
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from plan.engine import PLACEHOLDER_PROJECT_NUMBER, cloud_invoke

FORMAT = 1
DEFAULT_PROJECT = "example-tpu-project"  # the committed stacks' project

CLUSTER = "gcp:container/cluster:Cluster"
NODE_POOL = "gcp:container/nodePool:NodePool"
NETWORK = "gcp:compute/network:Network"
SUBNETWORK = "gcp:compute/subnetwork:Subnetwork"
FIREWALL = "gcp:compute/firewall:Firewall"
RESOURCE_POLICY = "gcp:compute/resourcePolicy:ResourcePolicy"
PREVIEW_FEATURE = "gcp:compute/previewFeature:PreviewFeature"
SERVICE = "gcp:projects/service:Service"
PROJECT_IAM_MEMBER = "gcp:projects/iAMMember:IAMMember"
ACCOUNT = "gcp:serviceaccount/account:Account"
ACCOUNT_IAM_MEMBER = "gcp:serviceaccount/iAMMember:IAMMember"
DASHBOARD = "gcp:monitoring/dashboard:Dashboard"
BUCKET = "gcp:storage/bucket:Bucket"
BUCKET_IAM_MEMBER = "gcp:storage/bucketIAMMember:BucketIAMMember"
GET_ENGINE_VERSIONS = "gcp:container/getEngineVersions:getEngineVersions"
GET_PROJECT = "gcp:organizations/getProject:getProject"
# pulumi-gcp 10.2.0 (sdk/python/pulumi_gcp/compute/get_reservation_block.py, get_reservation_sub_block.py).
GET_RESERVATION_BLOCK = "gcp:compute/getReservationBlock:getReservationBlock"
GET_RESERVATION_SUB_BLOCK = "gcp:compute/getReservationSubBlock:getReservationSubBlock"
GET_BUCKET = "gcp:storage/getBucket:getBucket"
GET_CLUSTER = "gcp:container/getCluster:getCluster"

CONTAINER = "container.googleapis.com"
COMPUTE = "compute.googleapis.com"
IAM = "iam.googleapis.com"
RESOURCE_MANAGER = "cloudresourcemanager.googleapis.com"
MONITORING = "monitoring.googleapis.com"
STORAGE = "storage.googleapis.com"
SERVICE_USAGE = "serviceusage.googleapis.com"
IAM_CREDENTIALS = "iamcredentials.googleapis.com"

# Where each resource's API calls go: the provider's base path of the service that implements it.
# Source: terraform-provider-google-beta google-beta/transport/config.go, `DefaultBasePaths`
# (ContainerBasePathKey https://container.googleapis.com/, ComputeBasePathKey compute..., IAMBasePathKey
# iam..., ResourceManagerBasePathKey cloudresourcemanager... (project IAM: getIamPolicy/setIamPolicy on
# projects), MonitoringBasePathKey monitoring..., StorageBasePathKey storage.googleapis.com/storage/v1,
# ServiceUsageBasePathKey serviceusage...); a Service is enabled through serviceusage
# (google-beta/services/resourcemanager/resource_google_project_service.go, `BatchRequestEnableService`).
SERVICE_OF_TOKEN: dict[str, str] = {
    CLUSTER: CONTAINER,
    NODE_POOL: CONTAINER,
    NETWORK: COMPUTE,
    SUBNETWORK: COMPUTE,
    FIREWALL: COMPUTE,
    RESOURCE_POLICY: COMPUTE,
    PREVIEW_FEATURE: COMPUTE,
    ACCOUNT: IAM,
    ACCOUNT_IAM_MEMBER: IAM,  # serviceAccounts.getIamPolicy/setIamPolicy
    PROJECT_IAM_MEMBER: RESOURCE_MANAGER,
    DASHBOARD: MONITORING,
    BUCKET: STORAGE,
    BUCKET_IAM_MEMBER: STORAGE,
    SERVICE: SERVICE_USAGE,
}
# getEngineVersions is GKE's GetServerConfig (container, data_source_google_container_engine_versions.go);
# getProject reads projects.get of Cloud Resource Manager (data_source_google_project.go).
SERVICE_OF_INVOKE: dict[str, str] = {
    GET_ENGINE_VERSIONS: CONTAINER,
    GET_CLUSTER: CONTAINER,  # projects.locations.clusters.get (data_source_google_container_cluster.go)
    GET_PROJECT: RESOURCE_MANAGER,
    GET_BUCKET: STORAGE,
    # compute/v1 reservationBlocks.get and reservationSubBlocks.get: the Compute API's.
    GET_RESERVATION_BLOCK: COMPUTE,
    GET_RESERVATION_SUB_BLOCK: COMPUTE,
}

# What a project created with the console or gcloud has on. Source: Google Cloud, "Enabled services",
# section "Services enabled by default", https://cloud.google.com/service-usage/docs/enabled-service#default
# (Cloud Storage = storage-component, Cloud Storage API = storage, Google Cloud Storage JSON API =
# storage-api; Cloud Logging and Cloud Monitoring are on too). Neither container, compute, iam nor
# cloudresourcemanager is.
DEFAULT_SERVICES: tuple[str, ...] = (
    "analyticshub.googleapis.com",
    "bigquery.googleapis.com",
    "bigqueryconnection.googleapis.com",
    "bigquerydatapolicy.googleapis.com",
    "bigquerydatatransfer.googleapis.com",
    "bigquerymigration.googleapis.com",
    "bigqueryreservation.googleapis.com",
    "bigquerystorage.googleapis.com",
    "cloudapis.googleapis.com",
    "cloudtrace.googleapis.com",
    "dataform.googleapis.com",
    "dataplex.googleapis.com",
    "datastore.googleapis.com",
    "logging.googleapis.com",
    "monitoring.googleapis.com",
    "servicemanagement.googleapis.com",
    "serviceusage.googleapis.com",
    "sql-component.googleapis.com",
    "storage-api.googleapis.com",
    "storage-component.googleapis.com",
    "storage.googleapis.com",
)
# Names that reach the same API: storage.googleapis.com is the newer name of the JSON API.
ALIASES: dict[str, tuple[str, ...]] = {STORAGE: ("storage-api.googleapis.com",)}
# What enabling a service turns on besides itself (GCP enables dependencies, e.g. cloudfunctions
# enables pubsub and storage: xebia.com/blog/how-to-find-google-cloud-platform-services-dependencies).
# Empty until a dependency list is cited; the program enables each API it needs itself.
DEPENDENCIES: dict[str, tuple[str, ...]] = {}

# The title the 403 names. Source: the texts in banzaicloud/cloudinfo#378 (Kubernetes Engine API),
# appvia/kore#286 (Cloud Resource Manager API), openshift/installer#2187 (IAM API), exekube/exekube#90
# (Service Usage API).
SERVICE_TITLES: dict[str, str] = {
    CONTAINER: "Kubernetes Engine API",
    COMPUTE: "Compute Engine API",
    IAM: "Identity and Access Management (IAM) API",
    RESOURCE_MANAGER: "Cloud Resource Manager API",
    MONITORING: "Cloud Monitoring API",
    STORAGE: "Cloud Storage API",
    SERVICE_USAGE: "Service Usage API",
    IAM_CREDENTIALS: "IAM Service Account Credentials API",  # google/kctf#194
    "file.googleapis.com": "Cloud Filestore API",
    "networkservices.googleapis.com": "Network Services API",
    "logging.googleapis.com": "Cloud Logging API",
}

# Resources a bare project gets when Compute Engine is enabled: the auto-mode `default` network and
# its four firewall rules (Google Cloud VPC docs, "Default network"; a create of `default` then
# fails with 409, as in GoogleCloudPlatform/magic-modules#6901).
DEFAULT_NETWORK = "default"
DEFAULT_FIREWALLS = ("default-allow-internal", "default-allow-ssh", "default-allow-rdp", "default-allow-icmp")

RESERVATION_KEY = "compute.googleapis.com/reservation-name"
HEALTHY = "HEALTHY"


@dataclass(frozen=True)
class GcpError:
    """A refusal as the provider surfaces it: `message` is the text the engine would show."""

    code: int  # HTTP status
    status: str  # google.rpc code name: PERMISSION_DENIED, ALREADY_EXISTS, NOT_FOUND, ...
    reason: str  # the googleapi reason: accessNotConfigured, alreadyExists, notFound, badRequest, ...
    message: str
    rule: str  # the RULES entry that refused

    def __str__(self) -> str:
        return self.message


def googleapi(code: int, detail: str, reason: str, prefix: str = "") -> str:
    # google.golang.org/api/googleapi Error.Error(): "googleapi: Error <code>: <message>, <reason>".
    return f"{prefix}googleapi: Error {code}: {detail}, {reason}"


@dataclass(frozen=True)
class SubBlock:
    """One reservation sub-block, with the fields `gcloud beta compute reservations sub-blocks list`
    returns and xpk reads (AI-Hypercomputer/xpk src/xpk/core/reservation.py, `list_healthy_sub_blocks`:
    name, count, inUseCount, healthInfo.healthStatus=HEALTHY)."""

    count: int
    in_use_count: int = 0
    health: str = HEALTHY
    # All Capacity maintenance is announced per sub-block (GKE "Manage maintenance of TPU7x" and the
    # compute/v1 discovery document: `reservationSubBlockMaintenance` is a GroupMaintenanceInfo with
    # `maintenancePendingCount` hosts and `upcomingGroupMaintenance.windowStartTime`/`windowEndTime`,
    # RFC 3339). None: nothing due.
    maintenance_window: tuple[str, str] | None = None

    def as_json(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = {
            "name": name,
            "count": self.count,
            "inUseCount": self.in_use_count,
            "healthInfo": {"healthStatus": self.health},
        }
        if self.maintenance_window is not None:
            start, end = self.maintenance_window
            found["reservationSubBlockMaintenance"] = {
                "maintenancePendingCount": self.count,
                "maintenanceOngoingCount": 0,
                "schedulingType": "GROUPED",
                "upcomingGroupMaintenance": {
                    "type": "SCHEDULED",
                    "maintenanceStatus": "PENDING",
                    "canReschedule": True,
                    "windowStartTime": start,
                    "windowEndTime": end,
                },
            }
        return found


@dataclass(frozen=True)
class Rule:
    name: str
    source: str


# The order refuse_create checks in, as the API would: the service first, then what the call names.
RULES: tuple[Rule, ...] = (
    Rule(
        "api-disabled",
        "terraform-provider-google-beta google-beta/transport/config.go DefaultBasePaths; Google Cloud "
        "'Enabled services' (services enabled by default); message and reason from banzaicloud/cloudinfo#378 "
        "and terraform-google-modules/terraform-example-foundation#1133 (ErrorInfo reason SERVICE_DISABLED)",
    ),
    Rule(
        "already-exists",
        "GKE: hashicorp/terraform-provider-google#7851 form, cilium/cilium#25918 (cluster), "
        "terraform-google-modules/terraform-google-kubernetes-engine#367 (node pool); compute: "
        "ContainerSolutions/terraform-mesos#53 (network), GoogleCloudPlatform/terraform-dynamic-python-webapp#60 "
        "(subnetwork); IAM: GoogleCloudPlatform/marketing-analytics-jumpstart#200; GCS: gitpod-io/gitpod#15578, "
        "GoogleCloudPlatform/gsutil#59 (name taken elsewhere)",
    ),
    Rule(
        "cluster-not-found",
        "hashicorp/terraform-provider-google#12472 and #7851: 'error creating NodePool: googleapi: Error 404: "
        "Not found: projects/P/locations/L/clusters/C., notFound'",
    ),
    Rule(
        "ai-zone-hidden",
        "Compute Engine 'Manage access to AI zones' (docs.cloud.google.com/compute/docs/regions-zones/"
        "manage-ai-zones): to use AI zones you must turn them on for the project, which is the preview feature "
        "ai-zones-visibility (google-beta resource_compute_preview_feature.go); the page's later revision, "
        "'Manage AI zone visibility', says the switch hides AI zones from listings and the REST API but does "
        "not restrict API endpoints once the parent region is active, so a project that already uses the "
        "region may not be refused (not modelled). GKE's text for a location it does not know: "
        'estafette/estafette-gke-node-pool-shifter#12, \'googleapi: Error 400: Location "" does not exist., '
        "badRequest'",
    ),
    Rule(
        "placement-policy-not-found",
        "GKE Ironwood docs (--placement-policy names a workload policy of the pool's region); a reference to a "
        "resource that does not exist is GCP's 400 invalid, not a 404: hashicorp/terraform-provider-google#6406 "
        "('googleapi: Error 400: Invalid value for 'entity.policyResource.networks[0]': 'projects/P/global/networks/"
        "N', invalid')",
    ),
    Rule(
        "tpu7x-needs-workload-policy",
        "vllm-project/ci-infra#547: a tpu7x-standard-4t multi-host pool placed COMPACT went to ERROR with 'Creation "
        "of a managed instance group with tpu7x-standard-4t machine type with placement policy is not supported. "
        "Use workload policy instead.' (modelled as a refused create; code ours)",
    ),
    Rule(
        "workload-policy-not-for-tpu",
        "GKE Ironwood docs, 'Workload policy for multi-host node pools': Ironwood (TPU7x) supports the High "
        "throughput workload policy, whose accelerator topology replaces --tpu-topology; GKE dynamic slicing "
        "docs: with PROVISION_ONLY a node pool is one sub-block, 16 VMs of a 4x4x4 topology; gcloud compute "
        "resource-policies create workload-policy (types HIGH_AVAILABILITY, HIGH_THROUGHPUT); wording ours",
    ),
    Rule(
        "provision-only-needs-specific-reservation",
        "GKE 'Use dynamic slicing with a custom scheduler', 'Create node pools with incremental provisioning': "
        "each PROVISION_ONLY pool is bound to its reservation sub-block by --reservation-affinity=specific (the "
        "README's prerequisite: a PROVISION_ONLY workload policy only works with a specific reservation); "
        "compute/v1 ResourcePolicyWorkloadPolicy.acceleratorTopologyMode (PROVISION_ONLY: chips not connected "
        "at VM creation); wording ours",
    ),
    Rule(
        "tpu-topology-size",
        "vllm-project/ci-infra#545: 'Maximum node count 0 is not a valid size of TPU pod slice with topology "
        "2x2x2' (GKE checks a multi-host pool's VM count against its topology: VMs x chips per VM = the "
        "topology's chips); GoogleCloudPlatform/cluster-toolkit#3817 (node count = topology chips / chips per "
        "machine); GKE 'Plan TPUs in GKE': multi-host v5e slices run on ct5lp-hightpu-4t only; chips per VM in "
        "TPU_CHIPS_PER_VM",
    ),
    Rule(
        "reservation-not-found",
        "GoogleCloudPlatform/cluster-toolkit#5043: 'googleapi: Error 404: Google Compute Engine: reservation "
        '"R/reservationBlocks/B" not found for node pool "NP" at zone "Z".\'; path grammar from xpk '
        "src/xpk/core/reservation.py `_try_parse_reservation`",
    ),
    Rule(
        "reservation-machine-type",
        "GoogleCloudPlatform/gsutil#1000: a GKE pool whose VMs do not match the specific reservation's (there: "
        "local SSDs) gets the reservation-insufficient 429 for its whole count ('required 1 and short of 1 VM "
        "count of machine type n2-standard-2'); a reservation holds one machine type (compute/v1 "
        "AllocationSpecificSKUReservation.instanceProperties.machineType)",
    ),
    Rule(
        "reservation-insufficient",
        "GoogleCloudPlatform/gsutil#1000: 'code=429, message=Reservation does not have enough resources for the "
        'request: specific reservation "R" is insufficient for node pool "NP" at zone "Z": required N and '
        "short of M VM count of machine type T.'; free = count - inUseCount as xpk src/xpk/core/capacity.py "
        "`_assess_healthy_and_fitting_sub_blocks_in_block` counts it",
    ),
    Rule(
        "bucket-not-found",
        "googleapis/google-cloud-dotnet#2421 (a wrong bucket name is a 404, notFound); the text 'The specified "
        "bucket does not exist.' is GCS's usual one, not seen verbatim in an issue here",
    ),
    Rule(
        "reservation-read-not-found",
        "compute/v1 reservationBlocks.get and reservationSubBlocks.get (discovery document: the block or "
        "sub-block by name, in a reservation of a zone); a missing resource is the Compute API's 404 with reason "
        "notFound, \"The resource '<path>' was not found\" (the GCE form, e.g. hashicorp/terraform-provider-google"
        "#4328); the path as the stand-in writes it is its own",
    ),
    Rule(
        "condition-needs-uniform-access",
        "Cloud Storage docs, 'IAM Conditions' (storage/docs/access-control/iam#conditions): conditions on a "
        "bucket's IAM policy need uniform bucket-level access on that bucket; the 400 text here is the stand-in's "
        "own wording, GCS's was not seen verbatim in an issue here",
    ),
    Rule(
        "identity-pool-missing",
        "terraform-google-modules/terraform-google-kubernetes-engine#916, googleforgames/global-multiplayer-demo#39, "
        "google/kctf#193: the pool <project>.svc.id.goog exists once a cluster with Workload Identity does; the "
        "principal:// form names the same pool (same message assumed: only the serviceAccount: form's text seen)",
    ),
)
RULE_NAMES = tuple(r.name for r in RULES)

# Not a create: what the GKE metadata server answers a pod (refuse_token_exchange).
TOKEN_RULES: tuple[Rule, ...] = (
    Rule(
        "token-api-disabled",
        "GKE 'Authenticate to Google Cloud APIs from GKE workloads' (a Kubernetes ServiceAccount annotated "
        "iam.gke.io/gcp-service-account impersonates that IAM service account); google/kctf#194: the metadata "
        "server's 'Unable to generate access token; IAM returned 403 Forbidden: IAM Service Account Credentials "
        "API has not been used in project N before or it is disabled.' while iamcredentials.googleapis.com is off",
    ),
)

# Not a refusal: what becomes of a create GCP accepts (Project.unprovisioned).
PROVISIONING_RULES: tuple[Rule, ...] = (
    Rule(
        "sub-block-unhealthy",
        "No GCP refusal of a pool on an unhealthy sub-block has been seen; in All Capacity mode the customer "
        "watches slice health and reschedules off unhealthy hardware (docs.cloud.google.com/tpu/docs/"
        "capacity-modes, the modes' table) and only HEALTHY sub-blocks are usable (xpk "
        "src/xpk/core/reservation.py `list_healthy_sub_blocks`): the pool is created and its VMs stay "
        "unprovisioned",
    ),
)

# Chips per VM of the TPU machine types the pool rules judge. tpu7x-standard-4t: four chips per
# VM (GKE Ironwood docs, "NUMA binding"); ct5lp-hightpu-1t/4t/8t: 1, 4 and 8 chips (GKE "Plan TPUs
# in GKE", TPU v5e machine types). A machine type not listed is not judged by tpu-topology-size.
TPU_CHIPS_PER_VM: dict[str, int] = {
    "tpu7x-standard-4t": 4,
    "ct5lp-hightpu-1t": 1,
    "ct5lp-hightpu-4t": 4,
    "ct5lp-hightpu-8t": 8,
}
V5E_MULTI_HOST_MACHINE = "ct5lp-hightpu-4t"  # GKE "Plan TPUs in GKE": multi-host v5e slices
TPU_WORKLOAD_POLICY_TYPES = ("HIGH_THROUGHPUT",)  # GKE Ironwood docs: the High throughput policy
PROVISION_ONLY_TOPOLOGY = "4x4x4"  # GKE dynamic slicing: a PROVISION_ONLY pool is one 4x4x4 sub-block
AI_ZONES_FEATURE = "ai-zones-visibility"
_AI_ZONE = re.compile(r"^[a-z]+-[a-z]+[0-9]+-ai[0-9]+[a-z]$")  # us-central1-ai1a


def is_ai_zone(zone: str) -> bool:
    return bool(_AI_ZONE.match(zone))


def topology_chips(topology: str) -> int | None:
    """The chips of an `AxB` or `AxBxC` topology, or None when it is not one."""
    sides = topology.split("x")
    if len(sides) not in (2, 3) or not all(side.isdigit() and int(side) > 0 for side in sides):
        return None
    chips = 1
    for side in sides:
        chips *= int(side)
    return chips


# --- identities (rule already-exists): what a create collides on, and how each API words the 409.


def _project(inputs: Mapping[str, Any], default: str) -> str:
    return str(inputs.get("project") or default)


def _last(value: Any) -> str:
    return str(value or "").rstrip("/").rsplit("/", 1)[-1]


def region_of(location: str) -> str:
    """us-central1 for us-central1, us-central1-ai1a and us-central1-a."""
    parts = location.split("-")
    return "-".join(parts[:2]) if len(parts) > 2 else location


Identity = Callable[["Project", Mapping[str, Any]], str | None]


def _cluster_identity(p: Project, i: Mapping[str, Any]) -> str:
    return f"projects/{_project(i, p.project_id)}/locations/{i.get('location')}/clusters/{i.get('name')}"


def _pool_identity(p: Project, i: Mapping[str, Any]) -> str:
    return f"{p.cluster_path(i)}/nodePools/{i.get('name')}"


def _account_email(p: Project, i: Mapping[str, Any]) -> str:
    project = _project(i, p.project_id)
    return f"{i.get('accountId')}@{project}.iam.gserviceaccount.com"


def _member_identity(resource: str, i: Mapping[str, Any]) -> str:
    condition = (i.get("condition") or {}).get("title")
    return " ".join(str(part) for part in (resource, i.get("role"), i.get("member"), condition) if part)


IDENTITY: dict[str, Identity] = {
    CLUSTER: _cluster_identity,
    NODE_POOL: _pool_identity,
    NETWORK: lambda p, i: f"projects/{_project(i, p.project_id)}/global/networks/{i.get('name')}",
    SUBNETWORK: lambda p, i: (
        f"projects/{_project(i, p.project_id)}/regions/{i.get('region')}/subnetworks/{i.get('name')}"
    ),
    FIREWALL: lambda p, i: f"projects/{_project(i, p.project_id)}/global/firewalls/{i.get('name')}",
    RESOURCE_POLICY: lambda p, i: (
        f"projects/{_project(i, p.project_id)}/regions/{i.get('region')}/resourcePolicies/{i.get('name')}"
    ),
    ACCOUNT: lambda p, i: f"projects/{_project(i, p.project_id)}/serviceAccounts/{_account_email(p, i)}",
    BUCKET: lambda p, i: f"b/{i.get('name')}",  # global namespace
    SERVICE: lambda p, i: f"projects/{_project(i, p.project_id)}/services/{i.get('service')}",
    PREVIEW_FEATURE: lambda p, i: f"projects/{_project(i, p.project_id)}/global/previewFeatures/{i.get('name')}",
    # An IAM member is one (role, member, condition) of its resource's policy (the provider's id:
    # google-beta/tpgiamresource/resource_iam_member.go, `<resource> <role> <member>[ <condition title>]`);
    # the access judge (tests/standins/gcp_access.py) reads them back.
    BUCKET_IAM_MEMBER: lambda p, i: _member_identity(f"b/{_last(i.get('bucket'))}", i),
    ACCOUNT_IAM_MEMBER: lambda p, i: _member_identity(str(i.get("serviceAccountId")), i),
    PROJECT_IAM_MEMBER: lambda p, i: _member_identity(f"projects/{_project(i, p.project_id)}", i),
    # Dashboards get a server-side id.
}
# Creates whose identity may already exist without a 409 (enabling an enabled API succeeds:
# resource_google_project_service.go checks the enabled list first; a preview feature is a
# project-wide switch the provider updates, and its delete leaves it on: infra/apis.py; an IAM member
# is a read-modify-write of its resource's policy, resource_iam_member.go).
IDEMPOTENT = frozenset({SERVICE, PREVIEW_FEATURE, PROJECT_IAM_MEMBER, ACCOUNT_IAM_MEMBER, BUCKET_IAM_MEMBER})

# The provider's own prefix on errors, where an issue shows it (same sources as already-exists).
PROVIDER_PREFIX: dict[str, str] = {
    NODE_POOL: "error creating NodePool: ",
    NETWORK: "Error creating Network: ",
    SUBNETWORK: "Error creating Subnetwork: ",
    FIREWALL: "Error creating Firewall: ",
    RESOURCE_POLICY: "Error creating ResourcePolicy: ",
    ACCOUNT: "Error creating service account: ",
}


def _already_exists(data: Mapping[str, Any], token: str, identity: str, inputs: Mapping[str, Any]) -> GcpError:
    prefix = PROVIDER_PREFIX.get(token, "")
    if token in {CLUSTER, NODE_POOL}:
        detail, reason = f"Already exists: {identity}.", "alreadyExists"
    elif token == ACCOUNT:
        project = _project(inputs, data["projectId"])
        detail = f"Service account {inputs.get('accountId')} already exists within project projects/{project}."
        reason = "alreadyExists"
    elif token == BUCKET:
        owner = (data["resources"].get(f"{token} {identity}") or {}).get("project")
        if owner in (None, _project(inputs, data["projectId"])):
            detail = "Your previous request to create the named bucket succeeded and you already own it."
        else:
            detail = (
                "The requested bucket name is not available. The bucket namespace is shared by all users of the "
                "system. Please select a different name and try again."
            )
        reason = "conflict"
    else:  # compute
        detail, reason = f"The resource '{identity}' already exists", "alreadyExists"
    return GcpError(409, "ALREADY_EXISTS", reason, googleapi(409, detail, reason, prefix), "already-exists")


# --- Workload Identity (rule identity-pool-missing)

_WI_SERVICE_ACCOUNT = re.compile(r"^serviceAccount:(?P<pool>[^\[]+\.svc\.id\.goog)\[[^/\]]+/[^\]]+\]$")
_WI_PRINCIPAL = re.compile(
    r"^principal(Set)?://iam\.googleapis\.com/projects/[^/]+/locations/global/workloadIdentityPools/(?P<pool>[^/]+\.svc\.id\.goog)/"
)
IAM_MEMBER_TOKENS = frozenset({PROJECT_IAM_MEMBER, ACCOUNT_IAM_MEMBER, BUCKET_IAM_MEMBER})


def workload_pool_of(member: str) -> str | None:
    """The GKE workload identity pool a member names, e.g. `p.svc.id.goog`, or None."""
    found = _WI_SERVICE_ACCOUNT.match(member) or _WI_PRINCIPAL.match(member)
    return found.group("pool") if found else None


# --- reservations (rules reservation-*)

_RESERVATION = re.compile(
    r"^(?:projects/(?P<project>[^/]+)/reservations/)?(?P<name>[^/]+)"
    r"(?:/reservationBlocks/(?P<block>[^/]+)(?:/reservationSubBlocks/(?P<sub>[^/]+))?)?$"
)


# --- Read (reported): what GKE returns for fields it normalises. Extend per token here.


def _report_node_pool(state: dict[str, Any]) -> dict[str, Any]:
    placement = dict(state.get("placementPolicy") or {})
    if placement.get("policyName"):
        placement["type"] = ""  # a workload policy: GKE stores no placement type
        placement.pop("tpuTopology", None)
    elif placement.get("type") == "COMPACT" and placement.get("tpuTopology"):
        placement["tpuTopology"] = str(placement["tpuTopology"])  # read back as sent
    if placement:
        state["placementPolicy"] = placement
    return state


READ_BACK: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {NODE_POOL: _report_node_pool}


def _empty(project_id: str, number: str) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "projectId": project_id,
        "number": number,
        "services": list(DEFAULT_SERVICES),
        "enabledOrder": [],
        "resources": {},
        "ids": {},
        "reservations": {},
        "unprovisioned": {},
        "refusals": [],
    }


class Project:
    """One project's services, resources and reservations; see the module docstring."""

    def __init__(self, path: Path | None, project_id: str = DEFAULT_PROJECT, number: str = PLACEHOLDER_PROJECT_NUMBER):
        self.path = path
        self._memory = _empty(project_id, number)
        self._data = self._memory
        self._thread_lock = threading.RLock()
        if path is not None:
            with self._locked():
                pass  # creates the file as a bare project if it is new

    @classmethod
    def at(
        cls, path: Path | None, project_id: str = DEFAULT_PROJECT, number: str = PLACEHOLDER_PROJECT_NUMBER
    ) -> Project:
        return cls(Path(path) if path is not None else None, project_id, number)

    # --- persistence

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        with self._thread_lock:
            if self.path is None:
                yield self._memory
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            lock_path = self.path.with_name(self.path.name + ".lock")
            with open(lock_path, "a+") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                try:
                    if self.path.exists() and self.path.stat().st_size:
                        self._data = json.loads(self.path.read_text())
                    else:
                        self._data = _empty(self._memory["projectId"], self._memory["number"])
                    yield self._data
                    self._write(self._data)
                finally:
                    fcntl.flock(lock, fcntl.LOCK_UN)

    def _write(self, data: dict[str, Any]) -> None:
        assert self.path is not None
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name, suffix=".tmp")
        with os.fdopen(fd, "w") as out:
            json.dump(data, out, indent=1, sort_keys=True)
        os.replace(tmp, self.path)

    def _snapshot(self) -> dict[str, Any]:
        with self._locked() as data:
            return copy.deepcopy(data)

    # --- read-only views

    @property
    def project_id(self) -> str:
        return str(self._data["projectId"])

    @property
    def number(self) -> str:
        return str(self._data["number"])

    @property
    def services(self) -> frozenset[str]:
        return frozenset(self._snapshot()["services"])

    @property
    def enabled_order(self) -> list[str]:
        """Services enabled through gcp:projects/service:Service, in order (defaults not included)."""
        return list(self._snapshot()["enabledOrder"])

    @property
    def refusals(self) -> list[dict[str, Any]]:
        """Every refused call: token, rule, code, message."""
        return list(self._snapshot()["refusals"])

    @property
    def unprovisioned(self) -> dict[str, int]:
        """Pools GCP created whose VMs it could not provision (rule sub-block-unhealthy): identity -> VMs."""
        return dict(self._snapshot().get("unprovisioned") or {})

    @property
    def resources(self) -> dict[str, dict[str, Any]]:
        """Existing resources by `"<token> <identity>"`: token, identity, id, project, state."""
        return dict(self._snapshot()["resources"])

    @staticmethod
    def _key(token: str, identity: str) -> str:
        return f"{token} {identity}"

    # --- services

    def enabled(self, service: str) -> bool:
        with self._locked() as data:
            return self._is_on(data, service)

    @staticmethod
    def _is_on(data: Mapping[str, Any], service: str) -> bool:
        return any(s in data["services"] for s in (service, *ALIASES.get(service, ())))

    def enable(self, service: str) -> None:
        with self._locked() as data:
            self._enable(data, service)

    def _enable(self, data: dict[str, Any], service: str) -> None:
        for name in (service, *DEPENDENCIES.get(service, ())):
            if name in data["services"]:
                continue
            data["services"].append(name)
            data["enabledOrder"].append(name)
            if name == COMPUTE:
                self._add_default_network(data)

    def _add_default_network(self, data: dict[str, Any]) -> None:
        project = data["projectId"]
        network = f"projects/{project}/global/networks/{DEFAULT_NETWORK}"
        data["resources"][self._key(NETWORK, network)] = {
            "token": NETWORK,
            "identity": network,
            "id": network,
            "project": project,
            "state": {"name": DEFAULT_NETWORK, "autoCreateSubnetworks": True, "project": project},
        }
        for name in DEFAULT_FIREWALLS:
            rule = f"projects/{project}/global/firewalls/{name}"
            data["resources"][self._key(FIREWALL, rule)] = {
                "token": FIREWALL,
                "identity": rule,
                "id": rule,
                "project": project,
                "state": {"name": name, "network": network, "project": project},
            }

    # --- what the test declares

    def declare_reservation(
        self,
        path: str,
        *,
        zone: str,
        machine_type: str,
        sub_blocks: Mapping[str, Mapping[str, SubBlock]] | None = None,
        count: int | None = None,
        in_use_count: int = 0,
    ) -> None:
        """A READY reservation `projects/P/reservations/R` of `machine_type` VMs in `zone`, with blocks of
        sub-blocks (`{"block-0": {"sub-block-0": SubBlock(16)}}`); `count` defaults to the sub-blocks' total.
        tests/standins/reservations.py declares the reservations the stacks' owner holds."""
        found = _RESERVATION.match(path)
        if not found or found.group("block"):
            raise ValueError(f"declare a reservation by its path projects/P/reservations/R, not {path!r}")
        project = found.group("project") or self.project_id
        blocks: dict[str, Any] = {}
        for block, subs in (sub_blocks or {}).items():
            blocks[block] = {
                "name": block,
                "count": sum(s.count for s in subs.values()),
                "inUseCount": sum(s.in_use_count for s in subs.values()),
                "subBlocks": {name: sub.as_json(name) for name, sub in subs.items()},
            }
        total = count if count is not None else sum(b["count"] for b in blocks.values())
        with self._locked() as data:
            data["reservations"][f"projects/{project}/reservations/{found.group('name')}"] = {
                "name": found.group("name"),
                "zone": zone,
                "machineType": machine_type,
                "status": "READY",
                "deploymentType": "DENSE",
                "specificReservation": {"count": total, "inUseCount": in_use_count},
                "blocks": blocks,
                "consumers": {},  # node pool identity -> (path, hosts)
            }

    def declare_bucket(self, name: str, project: str | None = None, *, uniform_access: bool = True) -> None:
        """A bucket that exists outside the stack (e.g. the model weights), owned by `project`, with
        uniform bucket-level access on or off (`uniformBucketLevelAccess`, storage/v1 Bucket.iamConfiguration)."""
        with self._locked() as data:
            identity = f"b/{name}"
            owner = project or data["projectId"]
            data["resources"][self._key(BUCKET, identity)] = {
                "token": BUCKET,
                "identity": identity,
                "id": name,
                "project": owner,
                "state": {"name": name, "project": owner, "uniformBucketLevelAccess": uniform_access},
                "declared": True,
            }

    # --- Workload Identity tokens (rule token-api-disabled)

    def refuse_token_exchange(self, google_account: str | None) -> GcpError | None:
        """A Workload Identity pod asks the GKE metadata server for a token. Bound to a Google service
        account (`google_account`, the KSA's iam.gke.io/gcp-service-account), the server mints that
        account's token through the IAM Service Account Credentials API, which refuses while it is off
        (google/kctf#194). A KSA that is itself the principal (principal://..., no annotation) gets a
        federated token without that API: None. IAM bindings and STS are not modelled."""
        with self._locked() as data:
            if google_account is None or self._is_on(data, IAM_CREDENTIALS):
                return None
            number = data["number"]
            message = (
                "Unable to generate access token; IAM returned 403 Forbidden: IAM Service Account Credentials API "
                f"has not been used in project {number} before or it is disabled. Enable it by visiting "
                f"https://console.developers.google.com/apis/api/{IAM_CREDENTIALS}/overview?project={number} then "
                "retry. If you enabled this API recently, wait a few minutes for the action to propagate to our "
                "systems and retry."
            )
            error = GcpError(403, "PERMISSION_DENIED", "accessNotConfigured", message, "token-api-disabled")
            data["refusals"].append(
                {"token": google_account, "rule": error.rule, "code": error.code, "message": error.message}
            )
            return error

    # --- references

    def cluster_path(self, inputs: Mapping[str, Any]) -> str:
        """The cluster a node pool names: a full path, a recorded resource id, or a bare name."""
        ref = str(inputs.get("cluster") or "")
        if ref.startswith("projects/"):
            return ref
        known = self._data["ids"].get(f"{CLUSTER} {ref}")
        if known:
            return str(known)
        return f"projects/{_project(inputs, self.project_id)}/locations/{inputs.get('location')}/clusters/{_last(ref)}"

    def identity(self, token: str, inputs: Mapping[str, Any]) -> str | None:
        make = IDENTITY.get(token)
        return make(self, inputs) if make else None

    # --- refusals

    def refuse_create(self, token: str, inputs: Mapping[str, Any]) -> GcpError | None:
        with self._locked() as data:
            return self._refuse_create(data, token, inputs)

    def try_create(
        self, token: str, inputs: Mapping[str, Any], state: Mapping[str, Any], resource_id: str | None = None
    ) -> GcpError | None:
        """refuse_create and, when nothing refuses, created(), under one lock (no race between them)."""
        with self._locked() as data:
            error = self._refuse_create(data, token, inputs)
            if error is None:
                self._created(data, token, inputs, state, resource_id)
            return error

    def _refuse_create(self, data: dict[str, Any], token: str, inputs: Mapping[str, Any]) -> GcpError | None:
        error = (
            self._api_disabled(data, SERVICE_OF_TOKEN.get(token), token)
            or self._duplicate(data, token, inputs)
            or self._missing_reference(data, token, inputs)
            or self._pool_identity_missing(data, token, inputs)
        )
        if error is not None:
            data["refusals"].append({"token": token, "rule": error.rule, "code": error.code, "message": error.message})
        return error

    def refuse_invoke(self, token: str, args: Mapping[str, Any]) -> GcpError | None:
        with self._locked() as data:
            error = self._api_disabled(data, SERVICE_OF_INVOKE.get(token), token)
            if error is None and token == GET_BUCKET and not self._bucket_exists(data, str(args.get("name") or "")):
                error = _bucket_not_found()
            if error is None and token in (GET_RESERVATION_BLOCK, GET_RESERVATION_SUB_BLOCK):
                error = self._reservation_read_refusal(data, token, args)
            if error is not None:
                data["refusals"].append(
                    {"token": token, "rule": error.rule, "code": error.code, "message": error.message}
                )
            return error

    def _api_disabled(self, data: dict[str, Any], service: str | None, token: str) -> GcpError | None:
        if service is None or self._is_on(data, service):
            return None
        number = data["number"]
        title = SERVICE_TITLES.get(service, service)
        detail = (
            f"{title} has not been used in project {number} before or it is disabled. Enable it by visiting "
            f"https://console.developers.google.com/apis/api/{service}/overview?project={number} then retry. "
            "If you enabled this API recently, wait a few minutes for the action to propagate to our systems and "
            "retry.\nDetails:\n"
            + json.dumps(
                [
                    {
                        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                        "domain": "googleapis.com",
                        "metadata": {"consumer": f"projects/{number}", "service": service},
                        "reason": "SERVICE_DISABLED",
                    }
                ],
                indent=2,
            )
            + "\n"
        )
        prefix = PROVIDER_PREFIX.get(token, "")
        return GcpError(
            403,
            "PERMISSION_DENIED",
            "accessNotConfigured",
            googleapi(403, detail, "accessNotConfigured", prefix),
            "api-disabled",
        )

    def _duplicate(self, data: dict[str, Any], token: str, inputs: Mapping[str, Any]) -> GcpError | None:
        identity = self.identity(token, inputs)
        if identity is None or token in IDEMPOTENT or self._key(token, identity) not in data["resources"]:
            return None
        return _already_exists(data, token, identity, inputs)

    def _missing_reference(self, data: dict[str, Any], token: str, inputs: Mapping[str, Any]) -> GcpError | None:
        if token == NODE_POOL:
            return self._pool_references(data, inputs)
        if token == BUCKET_IAM_MEMBER:
            bucket = _last(inputs.get("bucket"))
            if not self._bucket_exists(data, bucket):
                return _bucket_not_found()
            if inputs.get("condition") and not self._bucket_uniform(data, bucket):
                detail = f"IAM conditions need uniform bucket-level access on bucket {bucket}, which is off."
                return GcpError(
                    400, "BAD_REQUEST", "invalid", googleapi(400, detail, "invalid"), "condition-needs-uniform-access"
                )
        return None

    def _pool_references(self, data: dict[str, Any], inputs: Mapping[str, Any]) -> GcpError | None:
        prefix = PROVIDER_PREFIX[NODE_POOL]
        cluster = self.cluster_path(inputs)
        if self._key(CLUSTER, cluster) not in data["resources"]:
            detail = f"Not found: {cluster}."
            return GcpError(
                404, "NOT_FOUND", "notFound", googleapi(404, detail, "notFound", prefix), "cluster-not-found"
            )
        hidden = self._hidden_zone(data, inputs)
        if hidden is not None:
            detail = f'Location "{hidden}" does not exist.'
            return _bad_request(detail, "ai-zone-hidden")
        policy: Mapping[str, Any] | None = None
        name = (inputs.get("placementPolicy") or {}).get("policyName")
        if name:
            location = str(inputs.get("location") or cluster.split("/locations/")[1].split("/")[0])
            path = (
                f"projects/{_project(inputs, self.project_id)}/regions/{region_of(location)}/resourcePolicies/"
                f"{_last(name)}"
            )
            record = data["resources"].get(self._key(RESOURCE_POLICY, path))
            if record is None:
                detail = f"Invalid value for 'nodePool.placementPolicy.policyName': '{path}'"
                reason = "invalid"
                return GcpError(
                    400,
                    "INVALID_ARGUMENT",
                    reason,
                    googleapi(400, detail, reason, prefix),
                    "placement-policy-not-found",
                )
            policy = record["state"].get("workloadPolicy") or {}
        return self._tpu_placement_refusal(inputs, policy) or self._reservation_refusal(data, inputs)

    def _hidden_zone(self, data: Mapping[str, Any], inputs: Mapping[str, Any]) -> str | None:
        """The first AI zone the pool names while the project cannot see AI zones, else None."""
        feature = data["resources"].get(
            self._key(
                PREVIEW_FEATURE,
                f"projects/{_project(inputs, data['projectId'])}/global/previewFeatures/{AI_ZONES_FEATURE}",
            )
        )
        if feature is not None and feature["state"].get("activationStatus") == "ENABLED":
            return None
        zones = [str(z) for z in inputs.get("nodeLocations") or []] + [str(inputs.get("location") or "")]
        return next((zone for zone in zones if is_ai_zone(zone)), None)

    @staticmethod
    def _tpu_placement_refusal(inputs: Mapping[str, Any], policy: Mapping[str, Any] | None) -> GcpError | None:
        """The TPU rules a pool's placement meets: a workload policy GKE takes for TPUs, only with a
        specific reservation when PROVISION_ONLY, and VMs x chips per VM = the slice's topology."""
        machine = str((inputs.get("nodeConfig") or {}).get("machineType") or "")
        nodes = int(inputs.get("nodeCount") or inputs.get("initialNodeCount") or 0)
        placement = inputs.get("placementPolicy") or {}
        if policy is None and machine.startswith("tpu7x-") and placement.get("type") == "COMPACT" and nodes > 1:
            detail = (
                f"Creation of a managed instance group with {machine} machine type with placement policy is not "
                "supported. Use workload policy instead."
            )
            return _bad_request(detail, "tpu7x-needs-workload-policy")
        if policy is not None:
            topology = str(policy.get("acceleratorTopology") or "")
            return _workload_policy_refusal(inputs, policy, machine) or _topology_refusal(machine, nodes, topology)
        if placement.get("type") == "COMPACT":
            return _topology_refusal(machine, nodes, str(placement.get("tpuTopology") or ""))
        return None

    def _reservation_refusal(self, data: dict[str, Any], inputs: Mapping[str, Any]) -> GcpError | None:
        node_config = inputs.get("nodeConfig") or {}
        affinity = node_config.get("reservationAffinity") or {}
        if affinity.get("consumeReservationType") != "SPECIFIC_RESERVATION":
            return None
        prefix = PROVIDER_PREFIX[NODE_POOL]
        pool = str(inputs.get("name"))
        zones = [str(z) for z in inputs.get("nodeLocations") or []]
        zone = zones[0] if zones else str(inputs.get("location"))
        values = [str(v) for v in affinity.get("values") or []]
        where = f'for node pool "{pool}" at zone "{zone}"'
        located = self._locate(data, affinity, values, [*zones, zone])
        if located is None:
            shown = (",".join(values) or "<none>").split("/reservations/", 1)[-1]
            detail = f'Google Compute Engine: reservation "{shown}" not found {where}.'
            return GcpError(
                404, "NOT_FOUND", "notFound", googleapi(404, detail, "notFound", prefix), "reservation-not-found"
            )
        free, shown, machine = located
        wanted = int(inputs.get("nodeCount") or inputs.get("initialNodeCount") or 0)
        asked = str(node_config.get("machineType", ""))
        rule = "reservation-insufficient"
        if asked != machine:  # nothing in the reservation matches the pool's VMs
            free, rule = 0, "reservation-machine-type"
        if free is None or free >= wanted:  # None: an unhealthy sub-block, whose VMs stay unprovisioned
            return None
        detail = (
            f'Reservation does not have enough resources for the request: specific reservation "{shown}" is '
            f"insufficient {where}: required {wanted} and short of {wanted - free} VM count of machine type "
            f"{asked}."
        )
        reason = "rateLimitExceeded"
        return GcpError(429, "RESOURCE_EXHAUSTED", reason, googleapi(429, detail, reason, prefix), rule)

    def _locate(
        self, data: Mapping[str, Any], affinity: Mapping[str, Any], values: list[str], zones: list[str]
    ) -> tuple[int | None, str, str] | None:
        """(free hosts or None when unhealthy, path as GCE shows it, the reservation's machine type) where
        the pool points; None: nowhere."""
        found = _RESERVATION.match(values[0]) if len(values) == 1 else None
        if affinity.get("key") != RESERVATION_KEY or found is None:
            return None
        path = f"projects/{found.group('project') or data['projectId']}/reservations/{found.group('name')}"
        reservation = data["reservations"].get(path)
        if reservation is None or reservation.get("zone") not in zones:
            return None
        free = self._free(reservation, found.group("block"), found.group("sub"))
        return None if free is None else (*free, str(reservation.get("machineType") or ""))

    @staticmethod
    def _free(reservation: Mapping[str, Any], block: str | None, sub: str | None) -> tuple[int | None, str] | None:
        """Free hosts where the path points (healthy sub-blocks only; None when the sub-block is
        unhealthy) and the path as GCE shows it, or None if the path points nowhere."""
        name = str(reservation["name"])
        if block is None:
            spec = reservation["specificReservation"]
            return int(spec["count"]) - int(spec["inUseCount"]), name
        found = reservation["blocks"].get(block)
        if found is None:
            return None
        subs = found["subBlocks"]
        if sub is None:
            healthy = [s for s in subs.values() if s["healthInfo"]["healthStatus"] == HEALTHY]
            return sum(int(s["count"]) - int(s["inUseCount"]) for s in healthy), f"{name}/reservationBlocks/{block}"
        one = subs.get(sub)
        if one is None:
            return None
        shown = f"{name}/reservationBlocks/{block}/reservationSubBlocks/{sub}"
        if one["healthInfo"]["healthStatus"] != HEALTHY:
            return None, shown
        return int(one["count"]) - int(one["inUseCount"]), shown

    def _pool_identity_missing(self, data: dict[str, Any], token: str, inputs: Mapping[str, Any]) -> GcpError | None:
        if token not in IAM_MEMBER_TOKENS:
            return None
        pool = workload_pool_of(str(inputs.get("member") or ""))
        if pool is None or pool in self._workload_pools(data):
            return None
        detail = (
            f"Identity Pool does not exist ({pool}). Please check that you specified a valid resource name as "
            "returned in the `name` attribute in the configuration API."
        )
        return GcpError(400, "BAD_REQUEST", "badRequest", googleapi(400, detail, "badRequest"), "identity-pool-missing")

    @staticmethod
    def _workload_pools(data: Mapping[str, Any]) -> set[str]:
        return {
            str(pool)
            for r in data["resources"].values()
            if r["token"] == CLUSTER
            and (pool := ((r["state"].get("workloadIdentityConfig") or {}).get("workloadPool")))
        }

    def _bucket_exists(self, data: Mapping[str, Any], name: str) -> bool:
        return self._key(BUCKET, f"b/{name}") in data["resources"]

    def _bucket_uniform(self, data: Mapping[str, Any], name: str) -> bool:
        record = data["resources"][self._key(BUCKET, f"b/{name}")]
        return bool(record["state"].get("uniformBucketLevelAccess"))

    # --- lifecycle

    def created(
        self, token: str, inputs: Mapping[str, Any], state: Mapping[str, Any], resource_id: str | None = None
    ) -> None:
        with self._locked() as data:
            self._created(data, token, inputs, state, resource_id)

    updated = created  # an update keeps the identity and replaces the recorded state

    def _created(
        self,
        data: dict[str, Any],
        token: str,
        inputs: Mapping[str, Any],
        state: Mapping[str, Any],
        resource_id: str | None,
    ) -> None:
        if token == SERVICE:
            self._enable(data, str(inputs.get("service")))
        identity = self.identity(token, inputs)
        if identity is None:
            return
        data["resources"][self._key(token, identity)] = {
            "token": token,
            "identity": identity,
            "id": resource_id or identity,
            "project": _project(inputs, data["projectId"]),
            "state": dict(state),
        }
        if resource_id:
            data["ids"][f"{token} {resource_id}"] = identity
        if token == NODE_POOL:
            self._consume(data, identity, inputs)

    def _consume(self, data: dict[str, Any], pool: str, inputs: Mapping[str, Any]) -> None:
        """Mark a reserved pool's hosts in use on its sub-block (or block, or reservation)."""
        self._release(data, pool)
        affinity = (inputs.get("nodeConfig") or {}).get("reservationAffinity") or {}
        values = affinity.get("values") or []
        found = _RESERVATION.match(str(values[0])) if values else None
        if affinity.get("consumeReservationType") != "SPECIFIC_RESERVATION" or not found:
            return
        reservation = data["reservations"].get(
            f"projects/{found.group('project') or data['projectId']}/reservations/{found.group('name')}"
        )
        if reservation is None:
            return
        hosts = int(inputs.get("nodeCount") or inputs.get("initialNodeCount") or 0)
        block, sub = found.group("block"), found.group("sub")
        one = (reservation["blocks"].get(block) or {}).get("subBlocks", {}).get(sub) if block and sub else None
        if one is not None and one["healthInfo"]["healthStatus"] != HEALTHY:
            data.setdefault("unprovisioned", {})[pool] = hosts  # rule sub-block-unhealthy: created, no VMs
            return
        reservation["consumers"][pool] = {"block": block, "sub": sub, "hosts": hosts}
        self._count(reservation, block, sub, hosts)

    def _release(self, data: dict[str, Any], pool: str) -> None:
        data.setdefault("unprovisioned", {}).pop(pool, None)
        for reservation in data["reservations"].values():
            used = reservation["consumers"].pop(pool, None)
            if used:
                self._count(reservation, used["block"], used["sub"], -int(used["hosts"]))

    @staticmethod
    def _count(reservation: dict[str, Any], block: str | None, sub: str | None, hosts: int) -> None:
        reservation["specificReservation"]["inUseCount"] += hosts
        if block and block in reservation["blocks"]:
            found = reservation["blocks"][block]
            found["inUseCount"] += hosts
            if sub is None:  # GKE picks the sub-blocks; take the first healthy ones that fit
                for one in found["subBlocks"].values():
                    if one["healthInfo"]["healthStatus"] == HEALTHY and hosts > 0:
                        take = min(hosts, int(one["count"]) - int(one["inUseCount"]))
                        one["inUseCount"] += take
                        hosts -= take
            elif sub in found["subBlocks"]:
                found["subBlocks"][sub]["inUseCount"] += hosts

    def deleted(self, token: str, state: Mapping[str, Any]) -> None:
        with self._locked() as data:
            if token == SERVICE:
                # resource_google_project_service.go `resourceGoogleProjectServiceDelete`: with
                # disable_on_destroy false the service stays enabled.
                service = str(state.get("service"))
                if state.get("disableOnDestroy") and service in data["services"]:
                    data["services"].remove(service)
            identity = self.identity(token, state)
            if identity is None or token == PREVIEW_FEATURE:  # a deleted preview feature stays on (infra/apis.py)
                return
            record = data["resources"].pop(self._key(token, identity), None)
            if record is not None:
                data["ids"] = {k: v for k, v in data["ids"].items() if not (k.startswith(token) and v == identity)}
            if token == NODE_POOL:
                self._release(data, identity)

    def exists(self, token: str, state: Mapping[str, Any]) -> bool:
        with self._locked() as data:
            identity = self.identity(token, state)
            return identity is None or self._key(token, identity) in data["resources"]

    def reported(self, token: str, state: Mapping[str, Any]) -> dict[str, Any]:
        """What a Read returns: the recorded state (or the given one), as GCP normalises it."""
        with self._locked() as data:
            identity = self.identity(token, state)
            record = data["resources"].get(self._key(token, identity)) if identity else None
            found = copy.deepcopy(dict(record["state"] if record else state))
        read_back = READ_BACK.get(token)
        return read_back(found) if read_back else found

    # --- invokes

    def set_sub_block(
        self,
        path: str,
        block: str,
        sub_block: str,
        *,
        health: str | None = None,
        in_use: int | None = None,
        maintenance_window: tuple[str, str] | None = None,
    ) -> None:
        """What Google changes under a running stack: a sub-block turns DEGRADED, hosts are taken by
        hand or by another project's stack (`inUseCount`), or maintenance is announced."""
        with self._locked() as data:
            one = data["reservations"][path]["blocks"][block]["subBlocks"][sub_block]
            if maintenance_window is not None:
                announced = SubBlock(int(one["count"]), maintenance_window=maintenance_window).as_json(sub_block)
                one["reservationSubBlockMaintenance"] = announced["reservationSubBlockMaintenance"]
            if health is not None:
                one["healthInfo"]["healthStatus"] = health
            if in_use is not None:
                data["reservations"][path]["blocks"][block]["inUseCount"] += in_use - int(one["inUseCount"])
                one["inUseCount"] = in_use

    def _reservation_of(self, data: Mapping[str, Any], args: Mapping[str, Any]) -> Mapping[str, Any] | None:
        path = f"projects/{args.get('project') or data['projectId']}/reservations/{args.get('reservation')}"
        reservation = data["reservations"].get(path)
        return reservation if reservation is not None and reservation.get("zone") == args.get("zone") else None

    def _reservation_read_refusal(
        self, data: Mapping[str, Any], token: str, args: Mapping[str, Any]
    ) -> GcpError | None:
        """A read of a block or sub-block that is not there: the Compute API's 404 ("The resource '...'
        was not found", reason notFound; the GCE error form the provider surfaces for any get)."""
        reservation = self._reservation_of(data, args)
        block_name = args.get("name") if token == GET_RESERVATION_BLOCK else args.get("reservationBlock")
        block = (reservation or {}).get("blocks", {}).get(block_name) if reservation else None
        found = block is not None and (
            token == GET_RESERVATION_BLOCK or args.get("name") in (block.get("subBlocks") or {})
        )
        if found:
            return None
        where = (
            f"projects/{args.get('project') or data['projectId']}/zones/{args.get('zone')}/reservations/"
            f"{args.get('reservation')}/reservationBlocks/{block_name}"
        )
        if token == GET_RESERVATION_SUB_BLOCK:
            where += f"/reservationSubBlocks/{args.get('name')}"
        detail = f"The resource '{where}' was not found"
        return GcpError(404, "NOT_FOUND", "notFound", googleapi(404, detail, "notFound"), "reservation-read-not-found")

    def _reservation_answer(self, data: Mapping[str, Any], token: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """The provider's answer in its own field names (pulumi-gcp 10.2.0's GetReservationSubBlockResult:
        `subBlockCount` is the API's `count`, `healthInfos` and `reservationSubBlockMaintenances` are
        lists), from the API's fields the project keeps. The provider's maintenance result has no
        `upcomingGroupMaintenance`, so the window is not in the answer: what the program cannot see."""
        reservation = self._reservation_of(data, args) or {}
        if token == GET_RESERVATION_BLOCK:
            block = reservation["blocks"][args.get("name")]
            return {
                "name": block["name"],
                "subBlockNames": list(block["subBlocks"]),
                "reservationSubBlockCount": len(block["subBlocks"]),
                "reservationSubBlockInUseCount": sum(1 for s in block["subBlocks"].values() if s["inUseCount"]),
                "status": "READY",
                "zone": args.get("zone"),
            }
        one = reservation["blocks"][args.get("reservationBlock")]["subBlocks"][args.get("name")]
        maintenance = dict(one.get("reservationSubBlockMaintenance") or {})
        maintenance.pop("upcomingGroupMaintenance", None)
        return {
            "name": one["name"],
            "subBlockCount": one["count"],
            "inUseCount": one["inUseCount"],
            "healthInfos": [one["healthInfo"]],
            "reservationSubBlockMaintenances": [maintenance] if maintenance else [],
            "status": "READY",
            "zone": args.get("zone"),
        }

    @staticmethod
    def _cluster_answer(data: Mapping[str, Any], args: Mapping[str, Any]) -> dict[str, Any]:
        """The data source's cluster with the node pools it runs (the provider flattens each pool's
        blocks into lists: `nodeConfigs`, `reservationAffinities`; pulumi-gcp 10.2.0
        GetClusterNodePoolResult), from the pools this project holds under that cluster."""
        prefix = f"projects/{args.get('project') or data['projectId']}/locations/{args.get('location')}/clusters/"
        prefix += f"{args.get('name')}/nodePools/"
        pools = []
        for record in data["resources"].values():
            if record["token"] != NODE_POOL or not str(record["identity"]).startswith(prefix):
                continue
            state = record["state"]
            config = state.get("nodeConfig") or {}
            affinity = config.get("reservationAffinity")
            pools.append(
                {
                    "name": str(record["identity"]).rsplit("/", 1)[-1],
                    "nodeCount": int(state.get("nodeCount") or state.get("initialNodeCount") or 0),
                    "nodeConfigs": [{"reservationAffinities": [affinity] if affinity else []}],
                }
            )
        return {"name": args.get("name"), "location": args.get("location"), "nodePools": pools}

    def answer_invoke(self, token: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """plan.engine.cloud_invoke's answer, with this project's number, buckets and reservations."""
        with self._locked() as data:
            if token in (GET_RESERVATION_BLOCK, GET_RESERVATION_SUB_BLOCK):
                return self._reservation_answer(data, token, args)
            if token == GET_CLUSTER:
                return self._cluster_answer(data, args)
            if token == GET_BUCKET:
                record = data["resources"].get(self._key(BUCKET, f"b/{args.get('name')}")) or {}
                return {**dict(record.get("state") or {}), "name": args.get("name"), "project": record.get("project")}
            answer = cloud_invoke(token, args)
            if token == GET_PROJECT:
                answer["number"] = data["number"]
            return answer


def _workload_policy_refusal(inputs: Mapping[str, Any], policy: Mapping[str, Any], machine: str) -> GcpError | None:
    """A workload policy GKE takes for a TPU pool (rule workload-policy-not-for-tpu), and PROVISION_ONLY
    only with a specific reservation (rule provision-only-needs-specific-reservation)."""
    kind, topology = str(policy.get("type") or ""), str(policy.get("acceleratorTopology") or "")
    mode = str(policy.get("acceleratorTopologyMode") or "")
    if (
        kind not in TPU_WORKLOAD_POLICY_TYPES
        or topology_chips(topology) is None
        or (mode == "PROVISION_ONLY" and topology != PROVISION_ONLY_TOPOLOGY)
    ):
        detail = (
            f"Workload policy of type {kind or '<none>'} with accelerator topology {topology or '<none>'} "
            f"({mode or 'AUTO_CONNECT'}) is not supported for TPU machine type {machine}."
        )
        return _bad_request(detail, "workload-policy-not-for-tpu")
    affinity = (inputs.get("nodeConfig") or {}).get("reservationAffinity") or {}
    if mode == "PROVISION_ONLY" and affinity.get("consumeReservationType") != "SPECIFIC_RESERVATION":
        detail = (
            "Workload policy with accelerator topology mode PROVISION_ONLY requires a specific reservation: "
            f"reservation affinity is {affinity.get('consumeReservationType') or 'unset'}."
        )
        return _bad_request(detail, "provision-only-needs-specific-reservation")
    return None


def _topology_refusal(machine: str, nodes: int, topology: str) -> GcpError | None:
    """Rule tpu-topology-size: the pool's VMs x chips per VM make its topology; multi-host v5e on the
    multi-host machine type."""
    per_vm = TPU_CHIPS_PER_VM.get(machine)
    chips = topology_chips(topology) if topology else None
    if per_vm is None or chips is None:
        return None
    if nodes * per_vm != chips:
        detail = f"Node count {nodes} is not a valid size of TPU pod slice with topology {topology}."
        return _bad_request(detail, "tpu-topology-size")
    if machine.startswith("ct5lp-") and nodes > 1 and machine != V5E_MULTI_HOST_MACHINE:
        detail = (
            f"Machine type {machine} is not supported for multi-host TPU pod slice with topology {topology}: "
            f"use {V5E_MULTI_HOST_MACHINE}."
        )
        return _bad_request(detail, "tpu-topology-size")
    return None


def _bad_request(detail: str, rule: str) -> GcpError:
    return GcpError(
        400, "BAD_REQUEST", "badRequest", googleapi(400, detail, "badRequest", PROVIDER_PREFIX[NODE_POOL]), rule
    )


def _bucket_not_found() -> GcpError:
    return GcpError(
        404,
        "NOT_FOUND",
        "notFound",
        googleapi(404, "The specified bucket does not exist.", "notFound"),
        "bucket-not-found",
    )
