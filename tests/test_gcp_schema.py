"""tests/standins/gcp_schema.py against the program's plans, its source and the provider's rules.

The rules checked here are the ones a hand-written FORCE_NEW set got wrong; each was read at
gcp_schema.UPSTREAM.commit (the row's `source` says where). Tests that need Google's discovery
documents fetch the pinned google.golang.org/api module on demand (tools/gcpdata/fetch.sh).
"""

from __future__ import annotations

import ast
import copy
import functools
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from plan import document, engine
from plan.stacks import stack_files
from tests.control_plane import load_stack
from tests.standins import gcp_schema as gs

pytestmark = pytest.mark.gcp_standin

ROOT = Path(__file__).resolve().parents[1]
STACKS = sorted(stack_files(ROOT))
PROGRAM_DIRS = ("infra", "workloads", "observability")
# Resource types the program can register that have no rows yet: opt-in, in no stack's plan.
UNMODELLED = frozenset({"monitoring.AlertPolicy"})

NP = gs.NODE_POOL.token
CL = gs.CLUSTER.token
RP = gs.RESOURCE_POLICY.token


@functools.cache
def plan_resources() -> list[tuple[str, str, str, dict[str, Any]]]:
    """(stack, key, token, inputs) of every Google resource the program plans for each stack file,
    planned now under the mock engine (not read from tests/golden): the inputs as the plan document
    writes them, camelCase as the provider receives them."""
    found = []
    for stack in STACKS:
        planned = document.document(engine.run_stack(stack), load_stack(stack))
        for key, resource in planned["resources"].items():
            if str(resource.get("type", "")).startswith("gcp:"):
                found.append((stack, key, resource["type"], resource.get("inputs") or {}))
    return found


def top(path: str) -> str:
    return path.partition(".")[0]


def with_value(inputs: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of `inputs` with `path` (dotted; MaxItems 1 blocks are objects) set, or removed if None."""
    out = copy.deepcopy(inputs)
    node = out
    *parents, last = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    if value is None:
        node.pop(last, None)
    else:
        node[last] = value
    return out


@pytest.fixture(scope="module")
def api_enums() -> dict[tuple[str, str], tuple[str, ...]]:
    """The discovery documents' enums, from the Go module cache; downloaded first if not there."""
    if gs.api_module_dir() is None and shutil.which("go") is None:
        pytest.skip("google.golang.org/api is not in the module cache and there is no Go to fetch it")
    module_dir = gs.api_module_dir(download=True)
    assert module_dir is not None, "tools/gcpdata/fetch.sh printed no module directory"
    return gs.load_enums(module_dir)


# --- the table itself -------------------------------------------------------------------------------


def test_the_tables_pins_agree() -> None:
    module, version = gs.api_pin()
    assert f"{module}@{version}" == gs.UPSTREAM.api
    assert re.fullmatch(r"[0-9a-f]{40}", gs.UPSTREAM.commit)


def test_every_row_cites_a_line_and_has_its_parent_block() -> None:
    for resource in gs.SCHEMA.values():
        paths = {f.path: f for f in resource.fields}
        assert len(paths) == len(resource.fields), f"{resource.token}: a path twice"
        for row in resource.fields:
            assert re.fullmatch(r"google-beta/[\w/]+\.go:\d+", row.source), row
            if row.parent:
                assert paths[row.parent].kind in gs.BLOCKS, f"{resource.token} {row.path}: no parent block"
            assert not (row.required and row.computed), row
            assert not row.allowed or row.kind == "string", row


def test_every_gcp_type_the_program_plans_has_a_schema() -> None:
    types = {token for _, _, token, _ in plan_resources()}
    assert types, "no gcp resources in any stack's plan"
    assert types <= set(gs.SCHEMA), sorted(types - set(gs.SCHEMA))


@pytest.mark.parametrize("stack", STACKS)
def test_every_input_path_the_program_sets_has_a_row(stack: str) -> None:
    missing = sorted(
        f"{token} {path}"
        for name, _, token, inputs in plan_resources()
        if name == stack and token in gs.SCHEMA
        for path in gs.input_paths(token, inputs)[1]
    )
    assert not missing, f"{stack}: input paths without a row in tests/standins/gcp_schema.py: {missing}"


def _module_and_class(node: ast.expr) -> tuple[str, str] | None:
    # gcp.<module>.<Class>
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
        inner = node.value
        if isinstance(inner.value, ast.Name) and inner.value.id == "gcp":
            return inner.attr, node.attr
    return None


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _args_types() -> dict[tuple[str, str], tuple[gs.Resource, str]]:
    """(module, Args class) -> (resource, block path) as pulumi-gcp names them: resource class, then
    each block's Terraform name in PascalCase (singular), then "Args"."""
    found = {}
    for resource in gs.SCHEMA.values():
        module = resource.token.split(":")[1].split("/")[0]
        name = resource.token.rsplit(":", 1)[-1]
        found[(module, name)] = (resource, "")
        found[(module, name + "Args")] = (resource, "")
        for row in resource.fields:
            if row.kind in gs.BLOCKS:
                pascal = "".join(p.title() for p in row.tf.replace(".", "_").split("_"))
                found[(module, name + pascal + "Args")] = (resource, row.path)
    return found


def test_every_argument_the_program_passes_has_a_row() -> None:
    """Reads the program (infra/, workloads/, observability/): every keyword given to a pulumi-gcp
    resource or Args class must name a row, set in a stack's plan or not."""
    known = _args_types()
    missing: list[str] = []
    unmodelled: set[str] = set()
    for folder in PROGRAM_DIRS:
        for source in sorted((ROOT / folder).glob("*.py")):
            for node in ast.walk(ast.parse(source.read_text())):
                if not isinstance(node, ast.Call) or (named := _module_and_class(node.func)) is None:
                    continue
                module, cls = named
                if not cls[:1].isupper():
                    continue  # a function such as get_engine_versions_output
                if named not in known:
                    unmodelled.add(f"{module}.{cls}")
                    continue
                resource, prefix = known[named]
                for keyword in node.keywords:
                    if keyword.arg is None or keyword.arg == "opts":
                        continue
                    path = f"{prefix}.{_camel(keyword.arg)}" if prefix else _camel(keyword.arg)
                    if resource.field(path) is None:
                        missing.append(f"{source.relative_to(ROOT)}:{node.lineno} {resource.token} {path}")
    assert not missing, missing
    assert unmodelled == UNMODELLED, f"pulumi-gcp classes without a schema: {sorted(unmodelled - UNMODELLED)}"


# --- NodePool: what the old stand-in's FORCE_NEW got wrong -------------------------------------------

POOL: dict[str, Any] = {
    "name": "dev-tpu-1",
    "project": "example-tpu-project",
    "cluster": "cluster-id",
    "location": "us-central1",
    "nodeLocations": ["us-central1-ai1a"],
    "nodeCount": 16,
    "management": {"autoRepair": True, "autoUpgrade": True},
    "placementPolicy": {"type": "COMPACT", "tpuTopology": "4x4x4"},
    "nodeConfig": {
        "machineType": "tpu7x-standard-4t",
        "imageType": "COS_CONTAINERD",
        "serviceAccount": "nodes@example-tpu-project.iam.gserviceaccount.com",
        "oauthScopes": ["https://www.googleapis.com/auth/cloud-platform"],
        "labels": {"tpu-slicing/role": "tpu"},
        "reservationAffinity": {
            "consumeReservationType": "SPECIFIC_RESERVATION",
            "key": "compute.googleapis.com/reservation-name",
            "values": ["projects/p/reservations/r/reservationBlocks/b/reservationSubBlocks/s-0"],
        },
        "workloadMetadataConfig": {"mode": "GKE_METADATA"},
    },
}


def test_the_placement_block_replaces_only_when_added_or_removed() -> None:
    removed = gs.diff(NP, POOL, with_value(POOL, "placementPolicy", None))
    assert removed.replaces == ("placementPolicy",)
    assert removed.detailed["placementPolicy"] == "delete-replace"
    added = gs.diff(NP, with_value(POOL, "placementPolicy", None), POOL)
    assert added.replaces == ("placementPolicy",)
    # type and tpu_topology are not ForceNew (resource_container_node_pool.go:389, :400): in place.
    for path, value in (("placementPolicy.type", "TYPE_UNSPECIFIED"), ("placementPolicy.tpuTopology", "2x2x2")):
        changed = gs.diff(NP, POOL, with_value(POOL, path, value))
        assert (changed.changed, changed.replaces) == (("placementPolicy",), ()), path
        assert changed.detailed == {path: "update"}
    # policy_name is ForceNew (:394).
    named = gs.diff(NP, POOL, with_value(POOL, "placementPolicy.policyName", "wp"))
    assert named.replaces == ("placementPolicy",)


@pytest.mark.parametrize(
    ("path", "value"), [("nodeConfig.machineType", "tpu7x-standard-1t"), ("nodeConfig.imageType", "UBUNTU_CONTAINERD")]
)
def test_machine_and_image_type_update_in_place(path: str, value: str) -> None:
    row = gs.field(NP, path)
    assert row is not None and not row.force_new and row.computed
    changed = gs.diff(NP, POOL, with_value(POOL, path, value))
    assert (changed.changed, changed.replaces, dict(changed.detailed)) == (("nodeConfig",), (), {path: "update"})


def test_image_type_compares_ignoring_case() -> None:  # CaseDiffSuppress, node_config.go:393
    assert gs.diff(NP, POOL, with_value(POOL, "nodeConfig.imageType", "cos_containerd")).changed == ()


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("name", "dev-tpu-9"),
        ("location", "us-east5"),
        ("cluster", "other-cluster"),
        ("project", "other-project"),
        ("nodeConfig.reservationAffinity.consumeReservationType", "ANY_RESERVATION"),
        ("nodeConfig.reservationAffinity.key", "other-key"),
        ("nodeConfig.reservationAffinity.values", ["projects/p/reservations/r/reservationBlocks/b/s-1"]),
        ("nodeConfig.serviceAccount", "other@example-tpu-project.iam.gserviceaccount.com"),
        ("nodeConfig.oauthScopes", ["https://www.googleapis.com/auth/devstorage.read_only"]),
        ("nodeConfig.metadata", {"disable-legacy-endpoints": "true"}),
        ("nodeConfig.spot", True),
    ],
)
def test_node_pool_fields_that_replace(path: str, value: Any) -> None:
    row = gs.field(NP, path)
    assert row is not None and row.force_new, path
    changed = gs.diff(NP, POOL, with_value(POOL, path, value))
    assert changed.replaces == (top(path),)
    assert changed.detailed[path].endswith("-replace")


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("nodeCount", 8),
        ("nodeLocations", ["us-central1-ai1b"]),
        ("management.autoUpgrade", False),
        ("nodeConfig.labels", {"tpu-slicing/role": "other"}),
        ("nodeConfig.workloadMetadataConfig.mode", "GCE_METADATA"),
    ],
)
def test_node_pool_fields_that_update_in_place(path: str, value: Any) -> None:
    changed = gs.diff(NP, POOL, with_value(POOL, path, value))
    assert changed.changed == (top(path),) and changed.replaces == ()


def test_placement_type_and_topology_are_not_computed() -> None:
    for path in ("placementPolicy.type", "placementPolicy.tpuTopology"):
        row = gs.field(NP, path)
        assert row is not None and not row.computed, path
    # Under a workload policy GKE reports a topology the program does not set: a removal, planned as an
    # in-place update (not a replacement), which the program's ignore_changes suppresses.
    news = with_value(POOL, "placementPolicy", {"type": "", "policyName": "dev-wp"})
    olds = with_value(news, "placementPolicy.tpuTopology", "4x4x4")
    reported = gs.diff(NP, olds, news)
    assert (reported.changed, reported.replaces) == (("placementPolicy",), ())
    assert reported.detailed == {"placementPolicy.tpuTopology": "delete"}
    ignored = ["placementPolicy.type", "placementPolicy.tpuTopology"]
    assert gs.diff(NP, olds, news, ignore_changes=ignored).changed == ()


def test_what_gke_reports_on_tpu_pools() -> None:
    """Of what GKE fills in on a TPU pool (tests/standins/gcp_provider.py), only advanced machine
    features is neither Computed nor left alone: its absence from the inputs replaces the pool."""
    reported = {
        "advancedMachineFeatures": {"threadsPerCore": 1},
        "guestAccelerators": [],
        "kubeletConfig": {"cpuCfsQuota": True, "podPidsLimit": 0},
        "shieldedInstanceConfig": {"enableIntegrityMonitoring": True, "enableSecureBoot": False},
    }
    olds = {**POOL, "nodeConfig": {**reported, **POOL["nodeConfig"]}, "upgradeSettings": {"maxSurge": 1}}
    planned = gs.diff(NP, olds, POOL)
    assert dict(planned.detailed) == {
        "nodeConfig.advancedMachineFeatures": "delete-replace",
        "nodeConfig.advancedMachineFeatures.threadsPerCore": "delete-replace",
    }
    assert planned.replaces == ("nodeConfig",)
    assert gs.diff(NP, olds, POOL, ignore_changes=["nodeConfig.advancedMachineFeatures"]).changed == ()


def test_ignore_changes_take_pulumi_indices() -> None:
    olds = with_value(POOL, "nodeConfig.oauthScopes", ["a"])
    assert gs.diff(NP, olds, POOL, ignore_changes=["nodeConfig.oauthScopes[0]"]).changed == ()


# --- Cluster and ResourcePolicy -------------------------------------------------------------------


CLUSTER: dict[str, Any] = {
    "name": "dev-gke",
    "project": "example-tpu-project",
    "location": "us-central1",
    "network": "projects/p/global/networks/dev-vpc",
    "subnetwork": "projects/p/regions/us-central1/subnetworks/dev-nodes",
    "initialNodeCount": 1,
    "removeDefaultNodePool": True,
    "deletionProtection": True,
    "datapathProvider": "ADVANCED_DATAPATH",
    "minMasterVersion": "1.36.1-gke.100",
    "releaseChannel": {"channel": "RAPID"},
    "gatewayApiConfig": {"channel": "CHANNEL_STANDARD"},
    "ipAllocationPolicy": {"clusterSecondaryRangeName": "pods", "servicesSecondaryRangeName": "services"},
    "workloadIdentityConfig": {"workloadPool": "example-tpu-project.svc.id.goog"},
    "monitoringConfig": {"enableComponents": ["SYSTEM_COMPONENTS"], "managedPrometheus": {"enabled": True}},
    "addonsConfig": {"dnsCacheConfig": {"enabled": True}, "sliceControllerConfig": {"enabled": True}},
    "maintenancePolicy": {
        "dailyMaintenanceWindow": {"startTime": "03:00"},
        "maintenanceExclusions": [
            {
                "exclusionName": "freeze",
                "startTime": "2026-09-01T00:00:00Z",
                "exclusionOptions": {"scope": "NO_MINOR_UPGRADES"},
            }
        ],
    },
}


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("name", "other"),
        ("location", "us-east5"),
        ("project", "other"),
        ("network", "other-vpc"),
        ("subnetwork", "other-subnet"),
        ("initialNodeCount", 2),
        ("datapathProvider", "LEGACY_DATAPATH"),
        ("ipAllocationPolicy.clusterSecondaryRangeName", "pods-2"),
        ("ipAllocationPolicy.servicesSecondaryRangeName", "services-2"),
    ],
)
def test_cluster_fields_that_replace(path: str, value: Any) -> None:
    assert gs.diff(CL, CLUSTER, with_value(CLUSTER, path, value)).replaces == (top(path),)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("releaseChannel.channel", "REGULAR"),
        ("minMasterVersion", "1.36.2-gke.200"),
        ("gatewayApiConfig.channel", "CHANNEL_DISABLED"),
        ("monitoringConfig.enableComponents", ["SYSTEM_COMPONENTS", "APISERVER"]),
        ("addonsConfig.sliceControllerConfig.enabled", False),
        ("maintenancePolicy.dailyMaintenanceWindow.startTime", "05:00"),
        ("deletionProtection", False),
        ("workloadIdentityConfig.workloadPool", "other.svc.id.goog"),
    ],
)
def test_cluster_fields_that_update_in_place(path: str, value: Any) -> None:
    changed = gs.diff(CL, CLUSTER, with_value(CLUSTER, path, value))
    assert changed.changed == (top(path),) and changed.replaces == ()


def test_a_maintenance_exclusion_changes_in_place() -> None:
    later = copy.deepcopy(CLUSTER)
    later["maintenancePolicy"]["maintenanceExclusions"][0]["exclusionOptions"]["scope"] = "NO_UPGRADES"
    changed = gs.diff(CL, CLUSTER, later)
    assert changed.changed == ("maintenancePolicy",) and changed.replaces == ()


def test_an_omitted_min_master_version_is_a_removal_unless_ignored() -> None:
    # Optional, not Computed (resource_container_cluster.go:1799): what infra/cluster.py ignores.
    news = with_value(CLUSTER, "minMasterVersion", None)
    assert gs.diff(CL, CLUSTER, news).detailed == {"minMasterVersion": "delete"}
    assert gs.diff(CL, CLUSTER, news, ignore_changes=["minMasterVersion"]).changed == ()


POLICY: dict[str, Any] = {
    "name": "dev-wp",
    "project": "example-tpu-project",
    "region": "us-central1",
    "workloadPolicy": {
        "type": "HIGH_THROUGHPUT",
        "acceleratorTopology": "4x4x4",
        "acceleratorTopologyMode": "PROVISION_ONLY",
    },
}


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("workloadPolicy.type", "HIGH_AVAILABILITY"),
        ("workloadPolicy.acceleratorTopology", "2x2x2"),
        ("workloadPolicy.acceleratorTopologyMode", "AUTO_CONNECT"),
        ("region", "us-east5"),
        ("project", "other"),
        ("workloadPolicy", None),  # the block is not ForceNew (:459); its Required ForceNew type is
    ],
)
def test_resource_policy_fields_that_replace(path: str, value: Any) -> None:
    assert gs.diff(RP, POLICY, with_value(POLICY, path, value)).replaces == (top(path),)


def test_a_resource_policy_name_updates_in_place() -> None:
    row = gs.field(RP, "name")
    assert row is not None and row.required and not row.force_new  # resource_compute_resource_policy.go:151
    changed = gs.diff(RP, POLICY, with_value(POLICY, "name", "dev-wp-2"))
    assert (changed.changed, changed.replaces) == (("name",), ())


# --- other resources ----------------------------------------------------------------------------


def test_a_subnetwork_range_replaces_only_when_it_shrinks() -> None:
    token = gs.SUBNETWORK.token
    subnet = {"name": "n", "network": "v", "region": "r", "ipCidrRange": "10.0.0.0/20"}
    assert gs.diff(token, subnet, {**subnet, "ipCidrRange": "10.0.0.0/19"}).replaces == ()
    assert gs.diff(token, subnet, {**subnet, "ipCidrRange": "10.0.0.0/21"}).replaces == ("ipCidrRange",)


@pytest.mark.parametrize("token", [gs.PROJECT_IAM_MEMBER.token, gs.BUCKET_IAM_MEMBER.token])
def test_iam_member_role_member_and_condition_replace(token: str) -> None:
    member = {"role": "roles/storage.objectUser", "member": "serviceAccount:a@p.iam.gserviceaccount.com"}
    for path, value in (("role", "roles/storage.objectViewer"), ("member", "user:b@example.com")):
        assert gs.diff(token, member, {**member, path: value}).replaces == (path,)
    assert gs.diff(token, member, {**member, "member": member["member"].upper()}).changed == ()
    conditioned = {**member, "condition": {"title": "t", "expression": "true"}}
    assert gs.diff(token, member, conditioned).replaces == ("condition",)


def test_json_and_upper_cased_fields_compare_as_the_provider_stores_them() -> None:
    dashboard = {"dashboardJson": '{"displayName": "d", "mosaicLayout": {"columns": 48}}'}
    spaced = {"dashboardJson": json.dumps(json.loads(dashboard["dashboardJson"]), indent=2)}
    assert gs.diff(gs.DASHBOARD.token, dashboard, spaced).changed == ()
    bucket = {"name": "b", "location": "US-CENTRAL1"}
    assert gs.diff(gs.BUCKET.token, bucket, {**bucket, "location": "us-central1"}).changed == ()


def test_plans_diff_no_change_against_themselves() -> None:
    for stack, urn, token, inputs in plan_resources():
        planned = gs.diff(token, inputs, inputs)
        assert planned.changed == (), f"{stack} {urn}: {dict(planned.detailed)}"


# --- validate ---------------------------------------------------------------------------------------


def test_validate_refuses_a_value_outside_the_providers_list() -> None:
    bad = with_value(POOL, "nodeConfig.reservationAffinity.consumeReservationType", "BOGUS")
    assert gs.validate(NP, bad) == [
        "expected node_config.0.reservation_affinity.0.consume_reservation_type to be one of"
        ' ["UNSPECIFIED" "NO_RESERVATION" "ANY_RESERVATION" "SPECIFIC_RESERVATION" "ANY_RESERVATION_THEN_FAIL"],'
        " got BOGUS"
    ]
    policy = with_value(POLICY, "workloadPolicy.type", "BOGUS")
    assert gs.validate(RP, policy) == [
        'expected workload_policy.0.type to be one of ["HIGH_AVAILABILITY" "HIGH_THROUGHPUT"], got BOGUS'
    ]


def test_validate_refuses_a_missing_required_argument() -> None:
    assert gs.validate(NP, with_value(POOL, "placementPolicy", {"tpuTopology": "4x4x4"})) == [
        'The argument "placement_policy.0.type" is required, but no definition was found.'
    ]
    assert gs.validate(NP, with_value(POOL, "cluster", None)) == [
        'The argument "cluster" is required, but no definition was found.'
    ]


def test_placement_type_bogus_is_refused_by_the_api_not_the_provider(api_enums: Any) -> None:
    bad = with_value(POOL, "placementPolicy.type", "BOGUS")
    assert gs.validate(NP, bad) == []  # no ValidateFunc on type: resource_container_node_pool.go:389
    [message] = gs.validate(NP, bad, api_enums)
    assert message.startswith('expected placement_policy.0.type to be one of ["TYPE_UNSPECIFIED" "COMPACT"], got BOGUS')
    # "" is what the program sends under a workload policy: omitted from the request, not refused.
    assert gs.validate(NP, with_value(POOL, "placementPolicy.type", ""), api_enums) == []


def test_the_providers_lists_are_within_the_apis_enums(api_enums: Any) -> None:
    for resource in gs.SCHEMA.values():
        for row in resource.fields:
            if row.allowed and row.api is not None:
                api = set(api_enums[(resource.token, row.path)])
                assert set(row.allowed) - {""} <= api, f"{resource.token} {row.path}: {row.api.source}"


def test_every_planned_value_is_in_the_apis_enums(api_enums: Any) -> None:
    for stack, urn, token, inputs in plan_resources():
        assert gs.validate(token, inputs, api_enums) == [], f"{stack} {urn}"
