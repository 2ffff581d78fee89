"""The bridged GCP provider's schema, for the inputs this program sets, and the plan it makes of them.

`pulumi-resource-gcp` bridges terraform-provider-google-beta: every rule below is a fact read from
that provider's source at UPSTREAM.commit and cited as "file:line" there (no upstream code is kept
here). `diff` applies terraform-plugin-sdk/v2's diff rules (SDK below) to these rows; `validate`
refuses what the provider's schema refuses and, given `load_enums`, what Google's API enums refuse.

Pin. pulumi-gcp v10.2.0 is not in the snapshots this was read from (pulumi/pulumi-gcp ends after
v9.35.0, which wraps google-beta v7.45.0 = 3dc173a397 via its `upstream` submodule). v10 is the major
that takes google-beta 8.x; the newest 8.x commit there is the release-8.0.0 branch head 93c65b2d60
(main after the 8.0.0 feature-branch merge c48a71b06b). The rows were compared with v7.45.0 too:
line numbers in the container files differ, and one rule: monitoringConfig.enableComponents is a
list there, a set here (order-insensitive). When v10.2.0's `upstream` commit can be read, re-check
the lines and set UPSTREAM.commit to it.

What it does not model: DiffSuppressFuncs beyond case folding and JSON equality (self link against
name, the node pool's label and scope suppressions are plain comparisons here), CustomizeDiffs but
the subnetwork's CIDR shrink, the API's refusals beyond its enums, and output-only fields (ignored
in the state).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal


@dataclass(frozen=True)
class Upstream:
    repo: str
    commit: str
    ref: str
    sdk: str  # the terraform-plugin-sdk/v2 its go.mod requires (go.mod:30)
    api: str  # the google.golang.org/api its go.mod requires (go.mod:41)


UPSTREAM = Upstream(
    repo="hashicorp/terraform-provider-google-beta",
    commit="93c65b2d60fea598528f2769b5b09de856f8cb8c",
    ref="release-8.0.0",
    sdk="github.com/hashicorp/terraform-plugin-sdk/v2@v2.40.1",
    api="google.golang.org/api@v0.293.0",
)
# The SDK rules `diff` follows, in helper/schema/schema.go at UPSTREAM.sdk. (pulumi-gcp replaces the
# SDK with pulumi/terraform-plugin-sdk, a fork with the same diff functions; not read here.)
SDK_RULES = MappingProxyType(
    {
        "ForceNew: RequiresNew when old != new, removals included": "schema.go:575 (finalizeDiff)",
        "a block added or removed (its count) takes the block's ForceNew": "schema.go:1393 (diffList), 1656 (diffSet)",
        "a block's fields are diffed with their own ForceNew": "schema.go:1430 (diffList), 1678 (diffSet)",
        "elements of a list or set of primitives take its ForceNew": "schema.go:1445 (diffList), 1691 (diffSet)",
        "omitted Optional+Computed list or set: no diff": "schema.go:1351 (diffList), 1592 (diffSet)",
        "omitted Optional+Computed map: no diff": "schema.go:1535 (diffMap)",
        "omitted Optional+Computed value: no diff": "schema.go:1750 (diffString)",
        "equal lists, equal values: no diff": "schema.go:1373 (diffList), 1733 (diffString)",
        "Required argument missing: refused": "schema.go:1872 (schemaMap.validate)",
        "StringInSlice / ValidateEnum message": "validation/strings.go:149; google-beta/verify/validation.go:121",
    }
)

_GB = "google-beta/"
_NP = _GB + "services/container/resource_container_node_pool.go"
_NC = _GB + "services/container/node_config.go"
_CL = _GB + "services/container/resource_container_cluster.go"
_RP = _GB + "services/compute/resource_compute_resource_policy.go"
_NW = _GB + "services/compute/resource_compute_network.go"
_SN = _GB + "services/compute/resource_compute_subnetwork.go"
_FW = _GB + "services/compute/resource_compute_firewall.go"
_PF = _GB + "services/compute/resource_compute_preview_feature.go"
_PS = _GB + "services/resourcemanager/resource_google_project_service.go"
_SA = _GB + "services/resourcemanager/resource_google_service_account.go"
_IM = _GB + "tpgiamresource/resource_iam_member.go"  # IamMemberBaseSchema, merged by ResourceIamMember (:271)
_IP = _GB + "services/resourcemanager/iam_project.go"
_IS = _GB + "services/resourcemanager/iam_service_account.go"
_IB = _GB + "services/storage/iam_storage_bucket.go"
_SB = _GB + "services/storage/resource_storage_bucket.go"
_MD = _GB + "services/monitoring/resource_monitoring_dashboard.go"

# Discovery documents in the google.golang.org/api module.
CONTAINER_API = "container/v1beta1/container-api.json"
COMPUTE_API = "compute/v1/compute-api.json"

Kind = Literal["string", "bool", "int", "map", "list", "set", "block", "blocks", "block_set"]
LEAVES = frozenset({"string", "bool", "int"})
BLOCKS = frozenset({"block", "blocks", "block_set"})
# What the Pulumi engine sends for a value not known before apply.
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"


@dataclass(frozen=True)
class ApiEnum:
    """Where a field's allowed values are in a discovery document: schemas.<schema>.properties.<prop>."""

    doc: str
    schema: str
    prop: str
    items: bool = False  # an array property: the enum is on its items

    @property
    def source(self) -> str:
        return f"{self.doc}#schemas.{self.schema}.properties.{self.prop}" + (".items" if self.items else "")


@dataclass(frozen=True)
class Field:
    """One schema attribute, at its Pulumi path (camelCase, list elements elided; MaxItems 1 blocks are
    objects in Pulumi, kind "block")."""

    path: str
    kind: Kind
    source: str  # file:line of the attribute at UPSTREAM.commit
    required: bool = False
    computed: bool = False
    force_new: bool = False
    default: str | bool | int | None = None  # schema Default; None: none
    allowed: tuple[str, ...] = ()  # the provider's StringInSlice / ValidateEnum
    api: ApiEnum | None = None
    fold_case: bool = False  # CaseDiffSuppress or an upper-casing StateFunc: compared case-insensitively
    json: bool = False  # a JSON document compared as data (DiffSuppress + StateFunc normalising it)
    cidr_shrink_replaces: bool = False  # CustomizeDiff ForceNewIfChange(IsShrinkageIpCidr)

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1]

    @property
    def parent(self) -> str:
        return self.path.rpartition(".")[0]

    @property
    def tf(self) -> str:
        return ".".join(_tf_name(part) for part in self.path.split("."))


# Pulumi pluralises list and set names; these are the ones the program meets.
_PLURALS = {
    "allows": "allow",
    "secondaryIpRanges": "secondary_ip_range",
    "maintenanceExclusions": "maintenance_exclusion",
    "guestAccelerators": "guest_accelerator",
}


def _tf_name(pulumi_name: str) -> str:
    return _PLURALS.get(pulumi_name) or re.sub(r"(?<!^)([A-Z])", r"_\1", pulumi_name).lower()


@dataclass(frozen=True)
class Resource:
    token: str
    tf_type: str
    source: str
    fields: tuple[Field, ...]

    def field(self, path: str) -> Field | None:
        return _index(self).get(path)

    def children(self, parent: str) -> tuple[Field, ...]:
        return tuple(f for f in self.fields if f.parent == parent)


@cache
def _index(resource: Resource) -> dict[str, Field]:
    return {f.path: f for f in resource.fields}


def _row(
    source: str,
    path: str,
    kind: Kind,
    flags: str = "",
    *,
    default: str | bool | int | None = None,
    allowed: Sequence[str] = (),
    api: ApiEnum | None = None,
) -> Field:
    """flags: R Required (else Optional), C Computed, F ForceNew, I compared ignoring case, J JSON."""
    return Field(
        path=path,
        kind=kind,
        source=source,
        required="R" in flags,
        computed="C" in flags,
        force_new="F" in flags,
        default=default,
        allowed=tuple(allowed),
        api=api,
        fold_case="I" in flags,
        json="J" in flags,
    )


def _at(file: str) -> Any:
    return lambda line: f"{file}:{line}"


np_, nc, cl, rp = _at(_NP), _at(_NC), _at(_CL), _at(_RP)
nw, sn, fw, pf, ps, sa, im, sb, md = (_at(f) for f in (_NW, _SN, _FW, _PF, _PS, _SA, _IM, _SB, _MD))
_K = ApiEnum  # brevity in the tables

NODE_POOL = Resource(
    "gcp:container/nodePool:NodePool",
    "google_container_node_pool",
    np_(206),
    (
        _row(np_(239), "project", "string", "CF"),
        _row(np_(246), "cluster", "string", "RF"),
        _row(np_(252), "location", "string", "CF"),
        _row(np_(527), "name", "string", "CF"),
        _row(np_(553), "nodeCount", "int", "C"),
        _row(np_(435), "nodeLocations", "set", "C"),
        _row(np_(480), "initialNodeCount", "int", "CF"),
        _row(np_(502), "management", "block", "C"),
        _row(np_(510), "management.autoRepair", "bool", default=True),
        _row(np_(517), "management.autoUpgrade", "bool", default=True),
        # The block is ForceNew, `type` and `tpu_topology` are not (and not Computed): only adding or
        # removing the block, or a new policy name, replaces. nodePoolUpdate (:1798) sends neither
        # type nor topology, so a change of either plans an update that never converges.
        _row(np_(381), "placementPolicy", "block", "F"),
        _row(np_(389), "placementPolicy.type", "string", "R", api=_K(CONTAINER_API, "PlacementPolicy", "type")),
        _row(np_(394), "placementPolicy.policyName", "string", "F"),
        _row(np_(400), "placementPolicy.tpuTopology", "string"),
        _row(np_(443), "upgradeSettings", "block", "C"),
        _row(np_(451), "upgradeSettings.maxSurge", "int", "C"),
        _row(np_(459), "upgradeSettings.maxUnavailable", "int", "C"),
        _row(
            np_(467),
            "upgradeSettings.strategy",
            "string",
            default="SURGE",
            allowed=("SURGE", "BLUE_GREEN"),
            api=_K(CONTAINER_API, "UpgradeSettings", "strategy"),
        ),
        # schemaNodeConfig(): Optional, Computed, ForceNew, MaxItems 1 (:280-286).
        _row(nc(279), "nodeConfig", "block", "CF"),
        _row(nc(555), "nodeConfig.machineType", "string", "C"),  # updated in place (:4122)
        _row(nc(389), "nodeConfig.imageType", "string", "CI"),  # updated in place (:4667)
        _row(nc(643), "nodeConfig.serviceAccount", "string", "CF"),
        _row(nc(579), "nodeConfig.oauthScopes", "set", "CF"),
        _row(nc(562), "nodeConfig.metadata", "map", "CF"),
        _row(nc(420), "nodeConfig.labels", "map", "C"),  # updated in place (:4383)
        _row(nc(430), "nodeConfig.resourceLabels", "map"),
        _row(nc(635), "nodeConfig.spot", "bool", "F", default=False),
        _row(nc(595), "nodeConfig.preemptible", "bool", "F", default=False),
        _row(nc(291), "nodeConfig.diskSizeGb", "int", "C"),
        _row(nc(299), "nodeConfig.diskType", "string", "C"),
        _row(nc(438), "nodeConfig.localSsdCount", "int", "CF"),
        _row(nc(651), "nodeConfig.tags", "list"),
        _row(nc(602), "nodeConfig.reservationAffinity", "block", "F"),
        _row(
            nc(610),
            "nodeConfig.reservationAffinity.consumeReservationType",
            "string",
            "RF",
            allowed=(
                "UNSPECIFIED",
                "NO_RESERVATION",
                "ANY_RESERVATION",
                "SPECIFIC_RESERVATION",
                "ANY_RESERVATION_THEN_FAIL",
            ),
            api=_K(CONTAINER_API, "ReservationAffinity", "consumeReservationType"),
        ),
        _row(nc(617), "nodeConfig.reservationAffinity.key", "string", "F"),
        _row(nc(623), "nodeConfig.reservationAffinity.values", "set", "F"),
        _row(nc(743), "nodeConfig.workloadMetadataConfig", "block", "C"),
        _row(
            nc(751),
            "nodeConfig.workloadMetadataConfig.mode",
            "string",
            "R",
            allowed=("MODE_UNSPECIFIED", "GCE_METADATA", "GKE_METADATA"),
            api=_K(CONTAINER_API, "WorkloadMetadataConfig", "mode"),
        ),
        _row(nc(665), "nodeConfig.shieldedInstanceConfig", "block", "CF"),
        _row(nc(674), "nodeConfig.shieldedInstanceConfig.enableSecureBoot", "bool", "F", default=False),
        _row(nc(681), "nodeConfig.shieldedInstanceConfig.enableIntegrityMonitoring", "bool", "F", default=True),
        # What GKE reports on TPU pools (tests/standins/gcp_provider.py): only this one is not Computed.
        _row(nc(1307), "nodeConfig.advancedMachineFeatures", "block", "F"),
        _row(nc(1315), "nodeConfig.advancedMachineFeatures.threadsPerCore", "int", "RF"),
        _row(nc(1321), "nodeConfig.advancedMachineFeatures.enableNestedVirtualization", "bool", "F"),
        _row(
            nc(1327),
            "nodeConfig.advancedMachineFeatures.performanceMonitoringUnit",
            "string",
            allowed=("ARCHITECTURAL", "STANDARD", "ENHANCED"),
        ),
        _row(nc(316), "nodeConfig.guestAccelerators", "blocks", "CF"),
        _row(nc(324), "nodeConfig.guestAccelerators.count", "int", "RF"),
        _row(nc(330), "nodeConfig.guestAccelerators.type", "string", "RF"),
        _row(nc(356), "nodeConfig.guestAccelerators.gpuPartitionSize", "string", "F"),
        _row(nc(795), "nodeConfig.kubeletConfig", "block", "C"),
        _row(nc(850), "nodeConfig.kubeletConfig.cpuCfsQuota", "bool", "C"),
        _row(nc(856), "nodeConfig.kubeletConfig.cpuCfsQuotaPeriod", "string"),
        _row(nc(862), "nodeConfig.kubeletConfig.podPidsLimit", "int"),
        _row(nc(803), "nodeConfig.kubeletConfig.cpuManagerPolicy", "string", allowed=("static", "none", "")),
        _row(nc(539), "nodeConfig.gvnic", "block"),
        _row(nc(546), "nodeConfig.gvnic.enabled", "bool", "R"),
    ),
)

_EXCLUSION_OPTIONS = "MaintenanceExclusionOptions"
CLUSTER = Resource(
    "gcp:container/cluster:Cluster",
    "google_container_cluster",
    cl(248),
    (
        _row(cl(295), "name", "string", "RF"),
        _row(cl(328), "location", "string", "CF"),
        _row(cl(2020), "project", "string", "CF"),
        _row(cl(1814), "network", "string", "F", default="default"),  # CompareSelfLinkOrResourceName
        _row(cl(2028), "subnetwork", "string", "CF"),
        _row(cl(344), "deletionProtection", "bool", default=True),
        _row(cl(1232), "initialNodeCount", "int", "F"),
        # "node_config": schemaNodeConfig() (:1848), the node pool's rows below; the default pool's.
        _row(nc(279), "nodeConfig", "block", "CF"),
        _row(nc(643), "nodeConfig.serviceAccount", "string", "CF"),
        _row(nc(579), "nodeConfig.oauthScopes", "set", "CF"),
        _row(cl(2241), "removeDefaultNodePool", "bool"),
        _row(cl(1799), "minMasterVersion", "string"),
        _row(
            cl(2626),
            "datapathProvider",
            "string",
            "CF",
            allowed=("DATAPATH_PROVIDER_UNSPECIFIED", "LEGACY_DATAPATH", "ADVANCED_DATAPATH"),
            api=_K(CONTAINER_API, "NetworkConfig", "datapathProvider"),
        ),
        _row(cl(2544), "releaseChannel", "block", "C"),
        _row(
            cl(2552),
            "releaseChannel.channel",
            "string",
            "R",
            allowed=("UNSPECIFIED", "RAPID", "REGULAR", "STABLE", "EXTENDED"),
            api=_K(CONTAINER_API, "ReleaseChannel", "channel"),
        ),
        _row(cl(2774), "gatewayApiConfig", "block", "C"),
        _row(
            cl(2782),
            "gatewayApiConfig.channel",
            "string",
            "R",
            allowed=("CHANNEL_DISABLED", "CHANNEL_EXPERIMENTAL", "CHANNEL_STANDARD"),
            api=_K(CONTAINER_API, "GatewayAPIConfig", "channel"),
        ),
        _row(cl(1588), "monitoringConfig", "block", "C"),
        _row(
            cl(1596),
            "monitoringConfig.enableComponents",
            "set",
            "C",
            api=_K(CONTAINER_API, "MonitoringComponentConfig", "enableComponents", items=True),
        ),
        _row(cl(1606), "monitoringConfig.managedPrometheus", "block", "C"),
        _row(cl(1614), "monitoringConfig.managedPrometheus.enabled", "bool", "R"),
        _row(cl(1639), "monitoringConfig.advancedDatapathObservabilityConfig", "block", "C"),
        _row(cl(1647), "monitoringConfig.advancedDatapathObservabilityConfig.enableMetrics", "bool", "R"),
        _row(cl(1652), "monitoringConfig.advancedDatapathObservabilityConfig.enableRelay", "bool", "R"),
        _row(cl(2449), "workloadIdentityConfig", "block", "C"),
        _row(cl(2460), "workloadIdentityConfig.workloadPool", "string"),
        _row(cl(2061), "ipAllocationPolicy", "block", "CF"),
        _row(cl(2093), "ipAllocationPolicy.clusterSecondaryRangeName", "string", "CF"),
        _row(cl(2102), "ipAllocationPolicy.servicesSecondaryRangeName", "string", "CF"),
        _row(cl(351), "addonsConfig", "block", "C"),
        _row(cl(359), "addonsConfig.httpLoadBalancing", "block", "C"),
        _row(cl(368), "addonsConfig.httpLoadBalancing.disabled", "bool", "R"),
        _row(cl(375), "addonsConfig.horizontalPodAutoscaling", "block", "C"),
        _row(cl(384), "addonsConfig.horizontalPodAutoscaling.disabled", "bool", "R"),
        _row(cl(408), "addonsConfig.gcpFilestoreCsiDriverConfig", "block", "C"),
        _row(cl(417), "addonsConfig.gcpFilestoreCsiDriverConfig.enabled", "bool", "R"),
        _row(cl(510), "addonsConfig.gcsFuseCsiDriverConfig", "block", "C"),
        _row(cl(519), "addonsConfig.gcsFuseCsiDriverConfig.enabled", "bool", "R"),
        _row(cl(445), "addonsConfig.dnsCacheConfig", "block", "C"),
        _row(cl(455), "addonsConfig.dnsCacheConfig.enabled", "bool", "R"),
        _row(cl(662), "addonsConfig.sliceControllerConfig", "block", "C"),
        _row(cl(671), "addonsConfig.sliceControllerConfig.enabled", "bool", "R"),
        _row(cl(1297), "maintenancePolicy", "block"),
        _row(cl(1304), "maintenancePolicy.dailyMaintenanceWindow", "block"),
        _row(cl(1316), "maintenancePolicy.dailyMaintenanceWindow.startTime", "string", "R"),
        _row(cl(1427), "maintenancePolicy.maintenanceExclusions", "block_set"),
        _row(cl(1434), "maintenancePolicy.maintenanceExclusions.exclusionName", "string", "R"),
        _row(cl(1438), "maintenancePolicy.maintenanceExclusions.startTime", "string", "R"),
        _row(cl(1443), "maintenancePolicy.maintenanceExclusions.endTime", "string"),
        _row(cl(1448), "maintenancePolicy.maintenanceExclusions.exclusionOptions", "block"),
        _row(
            cl(1461),
            "maintenancePolicy.maintenanceExclusions.exclusionOptions.scope",
            "string",
            "R",
            allowed=("NO_UPGRADES", "NO_MINOR_UPGRADES", "NO_MINOR_OR_NODE_UPGRADES"),
            api=_K(CONTAINER_API, _EXCLUSION_OPTIONS, "scope"),
        ),
        _row(
            cl(1455),
            "maintenancePolicy.maintenanceExclusions.exclusionOptions.endTimeBehavior",
            "string",
            allowed=("UNTIL_END_OF_SUPPORT",),
            api=_K(CONTAINER_API, _EXCLUSION_OPTIONS, "endTimeBehavior"),
        ),
    ),
)

RESOURCE_POLICY = Resource(
    "gcp:compute/resourcePolicy:ResourcePolicy",
    "google_compute_resource_policy",
    rp(104),
    (
        _row(rp(151), "name", "string", "R"),  # not ForceNew: resourceComputeResourcePolicyUpdate (:784) PATCHes
        _row(rp(162), "description", "string"),
        _row(rp(295), "region", "string", "CF"),
        _row(rp(507), "project", "string", "CF"),
        # The block is not ForceNew; each of its fields is, `type` Required: a change, an added or a
        # removed block all replace through them.
        _row(rp(459), "workloadPolicy", "block"),
        _row(
            rp(466),
            "workloadPolicy.type",
            "string",
            "RF",
            allowed=("HIGH_AVAILABILITY", "HIGH_THROUGHPUT"),
            api=_K(COMPUTE_API, "ResourcePolicyWorkloadPolicy", "type"),
        ),
        _row(rp(473), "workloadPolicy.acceleratorTopology", "string", "F"),
        _row(
            rp(481),
            "workloadPolicy.acceleratorTopologyMode",
            "string",
            "F",
            allowed=("AUTO_CONNECT", "PROVISION_ONLY", ""),
            api=_K(COMPUTE_API, "ResourcePolicyWorkloadPolicy", "acceleratorTopologyMode"),
        ),
        _row(
            rp(495),
            "workloadPolicy.maxTopologyDistance",
            "string",
            "F",
            allowed=("BLOCK", "CLUSTER", "SUBBLOCK", ""),
            api=_K(COMPUTE_API, "ResourcePolicyWorkloadPolicy", "maxTopologyDistance"),
        ),
    ),
)

NETWORK = Resource(
    "gcp:compute/network:Network",
    "google_compute_network",
    nw(98),
    (
        _row(nw(140), "name", "string", "RF"),
        _row(nw(301), "project", "string", "CF"),
        _row(nw(153), "autoCreateSubnetworks", "bool", "F", default=True),
        _row(nw(165), "description", "string", "F"),
        _row(nw(189), "mtu", "int", "C"),
        _row(
            nw(265),
            "routingMode",
            "string",
            "C",
            allowed=("REGIONAL", "GLOBAL", ""),
            api=_K(COMPUTE_API, "NetworkRoutingConfig", "routingMode"),
        ),
    ),
)

_ip_cidr_range = Field(path="ipCidrRange", kind="string", source=sn(598), computed=True, cidr_shrink_replaces=True)
SUBNETWORK = Resource(
    "gcp:compute/subnetwork:Subnetwork",
    "google_compute_subnetwork",
    sn(494),
    (
        _row(sn(544), "name", "string", "RF"),
        _row(sn(744), "region", "string", "CF"),
        _row(sn(899), "project", "string", "CF"),
        _row(sn(557), "network", "string", "RF"),
        _row(sn(574), "description", "string", "F"),
        _ip_cidr_range,  # CustomizeDiff ForceNewIfChange when the range shrinks (:512, IsShrinkageIpCidr :63)
        _row(sn(718), "privateIpGoogleAccess", "bool", "C"),
        _row(sn(731), "purpose", "string", "C", api=_K(COMPUTE_API, "Subnetwork", "purpose")),
        _row(sn(767), "role", "string", allowed=("ACTIVE", "BACKUP", ""), api=_K(COMPUTE_API, "Subnetwork", "role")),
        _row(sn(777), "secondaryIpRanges", "blocks", "C"),
        _row(sn(791), "secondaryIpRanges.rangeName", "string", "R"),
        _row(sn(800), "secondaryIpRanges.ipCidrRange", "string", "C"),
    ),
)

FIREWALL = Resource(
    "gcp:compute/firewall:Firewall",
    "google_compute_firewall",
    fw(200),
    (
        _row(fw(246), "name", "string", "RF"),
        _row(fw(472), "project", "string", "CF"),
        _row(fw(259), "network", "string", "R"),
        _row(fw(265), "allows", "block_set"),
        _row(fw(502), "allows.protocol", "string", "RI"),
        _row(fw(511), "allows.ports", "list"),
        _row(fw(284), "description", "string"),
        _row(
            fw(302),
            "direction",
            "string",
            "CF",
            allowed=("INGRESS", "EGRESS", ""),
            api=_K(COMPUTE_API, "Firewall", "direction"),
        ),
        _row(fw(360), "priority", "int", default=1000),
        _row(fw(372), "sourceRanges", "set"),
    ),
)

PREVIEW_FEATURE = Resource(
    "gcp:compute/previewFeature:PreviewFeature",
    "google_compute_preview_feature",
    pf(98),
    (
        _row(pf(145), "name", "string", "RF"),
        _row(pf(177), "project", "string", "CF"),
        _row(
            pf(139),
            "activationStatus",
            "string",
            "R",
            allowed=("ENABLED", "ACTIVATION_STATE_UNSPECIFIED"),
            api=_K(COMPUTE_API, "PreviewFeature", "activationStatus"),
        ),
        _row(pf(151), "rolloutOperation", "block"),
        _row(pf(158), "rolloutOperation.rolloutInput", "block"),
        _row(
            pf(165),
            "rolloutOperation.rolloutInput.predefinedRolloutPlan",
            "string",
            "R",
            allowed=("ROLLOUT_PLAN_FAST_ROLLOUT",),
            api=_K(COMPUTE_API, "PreviewFeatureRolloutOperationRolloutInput", "predefinedRolloutPlan"),
        ),
    ),
)

PROJECT_SERVICE = Resource(
    "gcp:projects/service:Service",
    "google_project_service",
    ps(93),
    (
        _row(ps(133), "service", "string", "RF"),
        _row(ps(139), "project", "string", "CF"),
        _row(ps(147), "disableDependentServices", "bool"),
        _row(ps(152), "disableOnDestroy", "bool"),
    ),
)

SERVICE_ACCOUNT = Resource(
    "gcp:serviceaccount/account:Account",
    "google_service_account",
    sa(40),
    (
        _row(sa(90), "accountId", "string", "RF"),
        _row(sa(114), "project", "string", "CF"),
        _row(sa(97), "displayName", "string"),
        _row(sa(108), "description", "string"),
    ),
)

# IamMemberBaseSchema: role, member and the condition block all ForceNew.
_IAM_MEMBER = (
    _row(im(64), "role", "string", "RF"),
    _row(im(69), "member", "string", "RFI"),  # iamMemberCaseDiffSuppress
    _row(im(76), "condition", "block", "F"),
    _row(im(83), "condition.expression", "string", "RF"),
    _row(im(88), "condition.title", "string", "RF"),
    _row(im(93), "condition.description", "string", "F"),
)
PROJECT_IAM_MEMBER = Resource(
    "gcp:projects/iAMMember:IAMMember",
    "google_project_iam_member",
    f"{_IM}:271",
    (_row(f"{_IP}:35", "project", "string", "RF"), *_IAM_MEMBER),
)
SERVICE_ACCOUNT_IAM_MEMBER = Resource(
    "gcp:serviceaccount/iAMMember:IAMMember",
    "google_service_account_iam_member",
    f"{_IM}:271",
    (_row(f"{_IS}:37", "serviceAccountId", "string", "RF"), *_IAM_MEMBER),
)
BUCKET_IAM_MEMBER = Resource(
    "gcp:storage/bucketIAMMember:BucketIAMMember",
    "google_storage_bucket_iam_member",
    f"{_IM}:271",
    (_row(f"{_IB}:33", "bucket", "string", "RF"), *_IAM_MEMBER),
)

BUCKET = Resource(
    "gcp:storage/bucket:Bucket",
    "google_storage_bucket",
    sb(70),
    (
        _row(sb(132), "name", "string", "RF"),
        _row(sb(193), "location", "string", "RFI"),  # StateFunc upper-cases it (:197)
        _row(sb(203), "project", "string", "CF"),
        _row(sb(164), "forceDestroy", "bool", default=False),
        _row(sb(561), "uniformBucketLevelAccess", "bool", "C"),
        _row(sb(596), "publicAccessPrevention", "string", "C"),
    ),
)

DASHBOARD = Resource(
    "gcp:monitoring/dashboard:Dashboard",
    "google_monitoring_dashboard",
    md(76),
    (
        _row(md(99), "dashboardJson", "string", "RJ"),  # StringIsJSON; monitoringDashboardDiffSuppress
        _row(md(110), "project", "string", "CF"),
    ),
)

SCHEMA: Mapping[str, Resource] = MappingProxyType(
    {
        r.token: r
        for r in (
            NODE_POOL,
            CLUSTER,
            RESOURCE_POLICY,
            NETWORK,
            SUBNETWORK,
            FIREWALL,
            PREVIEW_FEATURE,
            PROJECT_SERVICE,
            SERVICE_ACCOUNT,
            PROJECT_IAM_MEMBER,
            SERVICE_ACCOUNT_IAM_MEMBER,
            BUCKET_IAM_MEMBER,
            BUCKET,
            DASHBOARD,
        )
    }
)


def field(token: str, path: str) -> Field | None:
    resource = SCHEMA.get(token)
    return resource.field(_elide(path)) if resource else None


def _elide(path: str) -> str:
    return re.sub(r"\[\d+\]", "", path)


# --- what the program sets --------------------------------------------------------------------------


def input_paths(token: str, inputs: Mapping[str, Any]) -> tuple[set[str], set[str]]:
    """The input paths set in `inputs` (list elements elided), as (with a row, without one). A map
    or JSON field is one path: its keys are data."""
    resource = SCHEMA[token]
    known: set[str] = set()
    unknown: set[str] = set()

    def walk(node: Mapping[str, Any], prefix: str) -> None:
        for key, value in node.items():
            if key.startswith("__") or value is None:
                continue  # the bridge's own bookkeeping (`__defaults`)
            path = f"{prefix}{key}"
            row = resource.field(path)
            if row is None:
                unknown.add(path)
                continue
            known.add(path)
            if row.kind in BLOCKS:
                for element in _elements(value):
                    walk(element, path + ".")

    walk(inputs, "")
    return known, unknown


def _elements(value: Any) -> list[Mapping[str, Any]]:
    if isinstance(value, Mapping):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, Mapping)]
    return []


# --- diff -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Diff:
    changed: tuple[str, ...]  # top-level property keys that change
    replaces: tuple[str, ...]  # top-level property keys whose change replaces the resource
    detailed: Mapping[str, str]  # row path -> add | delete | update, "-replace" appended when it replaces


def diff(token: str, olds: Mapping[str, Any], news: Mapping[str, Any], ignore_changes: Iterable[str] = ()) -> Diff:
    """What the bridged provider plans for `news` (checked inputs) against `olds` (the state).

    A set value that differs is a change; an omitted Optional+Computed value is not; an omitted
    Optional value the state has is a removal; a schema Default stands in for an omitted value.
    ForceNew replaces by terraform-plugin-sdk/v2's rules (SDK_RULES). `ignore_changes` paths, dotted
    as Pulumi sends them (`[n]` indices allowed), suppress the changes at and below them.
    """
    differ = _Differ(SCHEMA[token])
    differ.object("", olds, news, new_exists=True)
    ignored = [_elide(i) for i in ignore_changes]
    kept = {p: k for p, k in sorted(differ.found.items()) if not any(p == i or p.startswith(i + ".") for i in ignored)}
    return Diff(
        changed=tuple(sorted({p.split(".")[0] for p in kept})),
        replaces=tuple(sorted({p.split(".")[0] for p, k in kept.items() if k.endswith("-replace")})),
        detailed=MappingProxyType(kept),
    )


def _present(node: Mapping[str, Any], key: str) -> tuple[bool, Any]:
    value = node.get(key)
    return value is not None, value


@dataclass(frozen=True)
class _Side:
    present: bool
    value: Any


class _Differ:
    """schemaMap.diff over the rows: one walk of the state and the inputs together."""

    def __init__(self, resource: Resource):
        self.resource = resource
        self.found: dict[str, str] = {}

    def object(self, prefix: str, old: Mapping[str, Any], new: Mapping[str, Any], *, new_exists: bool) -> None:
        rows = self.resource.children(prefix.rstrip("."))
        for row in rows:
            o, n = _Side(*_present(old, row.name)), _Side(*_present(new, row.name))
            if not n.present and new_exists and row.default is not None:
                n = _Side(True, row.default)
            self.field(row, o, n)
        names = {r.name for r in rows}
        for key, value in new.items():  # no row: compared as a value, never a replacement
            if key not in names and not key.startswith("__") and value is not None and old.get(key) != value:
                self.record(prefix + key, key in old, True, False)

    def field(self, row: Field, o: _Side, n: _Side) -> None:
        if not n.present and row.computed:
            return  # schema.go:1351 (lists), 1592 (sets), 1535 (maps), 1750 (values)
        if n.value == UNKNOWN:
            self.record(row.path, o.present, True, row.force_new)  # NewComputed: schema.go:575
        elif row.kind in LEAVES:
            self.leaf(row, o, n)
        elif row.kind == "map":
            if dict(o.value or {}) != dict(n.value or {}):
                self.record(row.path, o.present, n.present, row.force_new)
        elif row.kind in ("list", "set"):
            ov, nv = list(o.value or []), list(n.value or [])
            if row.kind == "set":
                ov, nv = sorted(ov, key=_canon), sorted(nv, key=_canon)
            if ov != nv:
                self.record(row.path, bool(ov), bool(nv), row.force_new)  # schema.go:1445, 1691
        elif row.kind == "block_set":
            self.block_set(row, _elements(o.value), _elements(n.value))
        else:
            self.blocks(row, _elements(o.value), _elements(n.value))

    def leaf(self, row: Field, o: _Side, n: _Side) -> None:
        ov = o.value if o.present else _ZERO[row.kind]
        nv = n.value if n.present else _ZERO[row.kind]
        if _same(row, ov, nv):
            return  # schema.go:1733: equal values, removals of a zero value included
        shrink = row.cidr_shrink_replaces and o.present and n.present and _shrinks(str(ov), str(nv))
        self.record(row.path, o.present, n.present, row.force_new or shrink)

    def blocks(self, row: Field, old: list[Mapping[str, Any]], new: list[Mapping[str, Any]]) -> None:
        if old == new:
            return  # schema.go:1373
        if len(old) != len(new):
            self.record(row.path, bool(old), bool(new), row.force_new)  # schema.go:1393
        for i in range(max(len(old), len(new))):
            old_element = old[i] if i < len(old) else {}
            new_element = new[i] if i < len(new) else {}
            self.object(row.path + ".", old_element, new_element, new_exists=i < len(new))

    def block_set(self, row: Field, old: list[Mapping[str, Any]], new: list[Mapping[str, Any]]) -> None:
        old_codes, new_codes = {_canon(e) for e in old}, {_canon(e) for e in new}
        if len(old) != len(new):
            self.record(row.path, bool(old), bool(new), row.force_new)  # schema.go:1656
        for element in old:
            if _canon(element) not in new_codes:
                self.object(row.path + ".", element, {}, new_exists=False)
        for element in new:
            if _canon(element) not in old_codes:
                self.object(row.path + ".", {}, element, new_exists=True)

    def record(self, path: str, in_old: bool, in_new: bool, replaces: bool) -> None:
        kind = "add" if not in_old else "delete" if not in_new else "update"
        kind += "-replace" if replaces else ""
        if not self.found.get(path, "").endswith("-replace"):
            self.found[path] = kind


_ZERO: Mapping[str, Any] = MappingProxyType({"string": "", "bool": False, "int": 0})


def _same(row: Field, old: Any, new: Any) -> bool:
    if row.json:
        try:
            return bool(json.loads(str(old)) == json.loads(str(new)))
        except ValueError:
            return bool(old == new)
    if row.fold_case and isinstance(old, str) and isinstance(new, str):
        return old.casefold() == new.casefold()
    return bool(old == new)


def _shrinks(old: str, new: str) -> bool:
    try:
        old_net, new_net = ipaddress.ip_network(old, strict=False), ipaddress.ip_network(new, strict=False)
    except ValueError:
        return False
    return not (old_net.version == new_net.version and old_net.subnet_of(new_net))  # type: ignore[arg-type]


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


# --- validate ---------------------------------------------------------------------------------------


def _go_list(values: Iterable[str]) -> str:
    """A []string as Go's %q prints it: ["A" "B"]."""
    return "[" + " ".join(json.dumps(v) for v in values) + "]"


def validate(
    token: str, inputs: Mapping[str, Any], enums: Mapping[tuple[str, str], tuple[str, ...]] | None = None
) -> list[str]:
    """What the provider refuses in `inputs`, in its words: a missing Required argument
    (schema.go:1876) or a value outside a StringInSlice / ValidateEnum (validation/strings.go:149),
    named by the Terraform key. With `enums` (load_enums), also a value outside the Google API's
    enum, which the provider sends on and the API refuses (an empty string is not sent at all)."""
    resource = SCHEMA[token]
    problems: list[str] = []

    def walk(node: Mapping[str, Any], prefix: str, tf_prefix: str) -> None:
        for row in resource.children(prefix.rstrip(".")):
            key = tf_prefix + _tf_name(row.name)
            present, value = _present(node, row.name)
            if not present:
                if row.required:
                    problems.append(f'The argument "{key}" is required, but no definition was found.')
                continue
            if value == UNKNOWN:
                continue
            if row.kind in BLOCKS:
                for i, element in enumerate(_elements(value)):
                    walk(element, row.path + ".", f"{key}.{i}.")
                continue
            values = value if isinstance(value, list) else [value]
            for v in values:
                if not isinstance(v, str):
                    continue
                if row.allowed and v not in row.allowed:
                    problems.append(f"expected {key} to be one of {_go_list(row.allowed)}, got {v}")
                    continue
                api = (enums or {}).get((token, row.path))
                if api and v and v not in api:
                    problems.append(
                        f"expected {key} to be one of {_go_list(api)}, got {v}"
                        f" (Google API enum {row.api.source if row.api else '?'}; the provider does not check it)"
                    )

    walk(inputs, "", "")
    return problems


# --- Google's API enums, from the pinned google.golang.org/api module ----------------------------------

REPO = Path(__file__).resolve().parents[2]
GCPDATA = REPO / "tools" / "gcpdata"


def api_pin() -> tuple[str, str]:
    """(module, version) from tools/gcpdata/go.mod."""
    for line in (GCPDATA / "go.mod").read_text().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "require":
            return parts[1], parts[2]
    raise LookupError(f"no require line in {GCPDATA / 'go.mod'}")


def api_module_dir(download: bool = False) -> Path | None:
    """The pinned module's directory in the Go module cache; with `download`, fetched first if it is
    not there (tools/gcpdata/fetch.sh). None when it is not there and may not, or cannot, be fetched."""
    module, version = api_pin()
    cache_dir = os.environ.get("GOMODCACHE")
    go = shutil.which("go")
    if not cache_dir and go:
        cache_dir = subprocess.run([go, "env", "GOMODCACHE"], capture_output=True, text=True, check=True).stdout.strip()
    if cache_dir:
        found = Path(cache_dir) / f"{module}@{version}"
        if (found / CONTAINER_API).is_file():
            return found
    if not download or not go:
        return None
    out = subprocess.run(
        ["bash", str(GCPDATA / "fetch.sh")], capture_output=True, text=True, check=True, timeout=600
    ).stdout.split()
    return Path(out[-1]) if out else None


def load_enums(module_dir: Path) -> dict[tuple[str, str], tuple[str, ...]]:
    """(token, path) -> the API's allowed values, for every row with an `api` reference."""
    docs: dict[str, Any] = {}
    enums: dict[tuple[str, str], tuple[str, ...]] = {}
    for resource in SCHEMA.values():
        for row in resource.fields:
            if row.api is None:
                continue
            if row.api.doc not in docs:
                docs[row.api.doc] = json.loads((module_dir / row.api.doc).read_text())
            prop = docs[row.api.doc]["schemas"][row.api.schema]["properties"][row.api.prop]
            enums[(resource.token, row.path)] = tuple((prop["items"] if row.api.items else prop)["enum"])
    return enums
