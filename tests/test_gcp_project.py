"""The bare-project model of the stand-in GCP provider (tests/standins/gcp_project.py) on its own."""

from __future__ import annotations

import ast
import threading
from pathlib import Path
from typing import Any

import pytest

from infra.apis import REQUIRED_APIS
from plan.engine import cloud_state
from tests.standins import gcp_project as gp
from tests.standins import reservations
from tests.standins.gcp_project import GcpError, Project, SubBlock

pytestmark = pytest.mark.gcp_standin

P = "example-tpu-project"
POOL = f"{P}.svc.id.goog"
RESERVATION = f"projects/{P}/reservations/tpu7x"
SUB_BLOCK_0 = f"{RESERVATION}/reservationBlocks/block-0/reservationSubBlocks/sub-block-0"
ZONE = "us-central1-ai1a"


def service(name: str) -> dict[str, Any]:
    return {"project": P, "service": name, "disableOnDestroy": False, "disableDependentServices": False}


def cluster(name: str = "dev-gke", pool: str | None = POOL) -> dict[str, Any]:
    inputs: dict[str, Any] = {"name": name, "project": P, "location": "us-central1"}
    if pool:
        inputs["workloadIdentityConfig"] = {"workloadPool": pool}
    return inputs


def node_pool(name: str = "dev-tpu-1", path: str | None = SUB_BLOCK_0, nodes: int = 16, **extra: Any) -> dict[str, Any]:
    config: dict[str, Any] = {"machineType": "tpu7x-standard-4t"}
    if path is not None:
        config["reservationAffinity"] = {
            "consumeReservationType": "SPECIFIC_RESERVATION",
            "key": "compute.googleapis.com/reservation-name",
            "values": [path],
        }
    return {
        "name": name,
        "project": P,
        "cluster": "cluster-id",
        "location": "us-central1",
        "nodeLocations": [ZONE],
        "nodeCount": nodes,
        "nodeConfig": config,
        **extra,
    }


def wi_member(role: str = "roles/iam.workloadIdentityUser") -> dict[str, Any]:
    return {
        "serviceAccountId": f"projects/-/serviceAccounts/saxml@{P}.iam.gserviceaccount.com",
        "role": role,
        "member": f"serviceAccount:{POOL}[saxml/saxml]",
    }


def create(project: Project, token: str, inputs: dict[str, Any], name: str = "r") -> GcpError | None:
    """As the provider would: refuse, or record what cloud_state answers."""
    resource_id, state = cloud_state(token, name, inputs)
    return project.try_create(token, inputs, state, resource_id)


AI_ZONES = {"name": gp.AI_ZONES_FEATURE, "project": P, "activationStatus": "ENABLED"}


def with_gke(project: Project, *, ai_zones: bool = True) -> Project:
    for api in (gp.CONTAINER, gp.COMPUTE, gp.IAM, gp.RESOURCE_MANAGER):
        assert create(project, gp.SERVICE, service(api), api.split(".")[0]) is None
    if ai_zones:
        assert create(project, gp.PREVIEW_FEATURE, AI_ZONES, "ai-zones-visibility") is None
    return project


def workload_policy(mode: str = "PROVISION_ONLY", kind: str = "HIGH_THROUGHPUT", topology: str = "4x4x4") -> dict:
    policy: dict[str, Any] = {"type": kind, "acceleratorTopology": topology}
    if mode:
        policy["acceleratorTopologyMode"] = mode
    return {"name": "dev-cube-policy", "project": P, "region": "us-central1", "workloadPolicy": policy}


UNDER_POLICY = {"placementPolicy": {"policyName": "dev-cube-policy", "type": ""}}


def test_rules_are_unique_and_sourced() -> None:
    assert len(set(gp.RULE_NAMES)) == len(gp.RULES)
    assert all(rule.source for rule in (*gp.RULES, *gp.TOKEN_RULES))
    assert set(gp.SERVICE_OF_TOKEN) | set(gp.SERVICE_OF_INVOKE) >= {
        gp.CLUSTER,
        gp.NODE_POOL,
        gp.NETWORK,
        gp.SUBNETWORK,
        gp.FIREWALL,
        gp.RESOURCE_POLICY,
        gp.PREVIEW_FEATURE,
        gp.DASHBOARD,
        gp.PROJECT_IAM_MEMBER,
        gp.SERVICE,
        gp.ACCOUNT,
        gp.ACCOUNT_IAM_MEMBER,
        gp.BUCKET,
        gp.BUCKET_IAM_MEMBER,
        gp.GET_ENGINE_VERSIONS,
        gp.GET_PROJECT,
        gp.GET_RESERVATION_BLOCK,
        gp.GET_RESERVATION_SUB_BLOCK,
    }


def test_a_bare_project_has_only_the_default_services() -> None:
    project = Project.at(None)
    assert project.services == frozenset(gp.DEFAULT_SERVICES)
    assert not {gp.CONTAINER, gp.COMPUTE, gp.IAM, gp.RESOURCE_MANAGER} & project.services
    assert project.enabled(gp.MONITORING) and project.enabled(gp.STORAGE)
    # What is on by default needs no enabling: a dashboard and a bucket go through at once.
    assert create(project, gp.DASHBOARD, {"project": P, "dashboardJson": "{}"}) is None
    assert create(project, gp.BUCKET, {"name": "b", "project": P, "location": "us-central1"}) is None


def test_a_cluster_is_refused_before_the_container_api_and_accepted_after() -> None:
    project = Project.at(None)
    error = project.refuse_create(gp.CLUSTER, cluster())
    assert error is not None
    assert (error.code, error.status, error.reason, error.rule) == (
        403,
        "PERMISSION_DENIED",
        "accessNotConfigured",
        "api-disabled",
    )
    assert error.message.startswith(
        "googleapi: Error 403: Kubernetes Engine API has not been used in project 123456789012 before or it is "
        "disabled. Enable it by visiting https://console.developers.google.com/apis/api/container.googleapis.com/"
        "overview?project=123456789012 then retry."
    )
    assert '"reason": "SERVICE_DISABLED"' in error.message
    assert error.message.endswith(", accessNotConfigured")
    assert project.refusals == [{"token": gp.CLUSTER, "rule": "api-disabled", "code": 403, "message": error.message}]

    assert create(project, gp.SERVICE, service(gp.CONTAINER)) is None
    assert project.enabled_order == [gp.CONTAINER]
    assert project.refuse_create(gp.CLUSTER, cluster()) is None


def test_each_api_gates_its_resources() -> None:
    project = Project.at(None)
    for token, inputs in (
        (gp.NETWORK, {"name": "dev-net", "project": P}),
        (gp.ACCOUNT, {"accountId": "dev-gke-nodes", "project": P}),
        (gp.PROJECT_IAM_MEMBER, {"project": P, "role": "roles/viewer", "member": "user:a@example.com"}),
    ):
        error = project.refuse_create(token, inputs)
        assert error is not None and error.rule == "api-disabled"
        assert gp.SERVICE_OF_TOKEN[token] in error.message
    assert (
        "Error creating service account: googleapi: Error 403: Identity and Access Management (IAM) API"
        in (project.refusals[1]["message"])
    )


def test_get_engine_versions_is_refused_before_the_container_api() -> None:
    project = Project.at(None)
    args = {"project": P, "location": "us-central1", "versionPrefix": "1.36."}
    error = project.refuse_invoke(gp.GET_ENGINE_VERSIONS, args)
    assert error is not None and error.code == 403 and "Kubernetes Engine API" in error.message
    assert project.refuse_invoke(gp.GET_PROJECT, {"projectId": P}) is not None  # Cloud Resource Manager is off too
    project.enable(gp.CONTAINER)
    assert project.refuse_invoke(gp.GET_ENGINE_VERSIONS, args) is None
    answer = project.answer_invoke(gp.GET_ENGINE_VERSIONS, args)
    assert answer["validMasterVersions"] and all(v.startswith("1.36.") for v in answer["validMasterVersions"])
    project.enable(gp.RESOURCE_MANAGER)
    assert project.answer_invoke(gp.GET_PROJECT, {"projectId": P})["number"] == project.number


def test_a_workload_identity_member_waits_for_a_cluster_with_the_pool() -> None:
    project = with_gke(Project.at(None))
    error = project.refuse_create(gp.ACCOUNT_IAM_MEMBER, wi_member())
    assert error is not None
    assert (error.code, error.status, error.rule) == (400, "BAD_REQUEST", "identity-pool-missing")
    assert error.message == (
        f"googleapi: Error 400: Identity Pool does not exist ({POOL}). Please check that you specified a valid "
        "resource name as returned in the `name` attribute in the configuration API., badRequest"
    )
    # The principal:// form on a bucket names the same pool.
    principal = (
        f"principal://iam.googleapis.com/projects/123456789012/locations/global/workloadIdentityPools/{POOL}"
        "/subject/ns/serving/sa/vllm"
    )
    project.declare_bucket("weights")
    bucket_member = {"bucket": "weights", "role": "roles/storage.objectViewer", "member": principal}
    assert (project.refuse_create(gp.BUCKET_IAM_MEMBER, bucket_member) or GcpError(0, "", "", "", "")).rule == (
        "identity-pool-missing"
    )
    # A cluster without Workload Identity makes no pool; one with it does.
    assert create(project, gp.CLUSTER, cluster("plain", pool=None), "plain") is None
    assert project.refuse_create(gp.ACCOUNT_IAM_MEMBER, wi_member()) is not None
    assert create(project, gp.CLUSTER, cluster(), "cluster") is None
    assert project.refuse_create(gp.ACCOUNT_IAM_MEMBER, wi_member()) is None
    assert project.refuse_create(gp.BUCKET_IAM_MEMBER, bucket_member) is None


def test_an_ordinary_member_needs_no_pool() -> None:
    project = with_gke(Project.at(None))
    member = {"project": P, "role": "roles/viewer", "member": f"serviceAccount:n@{P}.iam.gserviceaccount.com"}
    assert project.refuse_create(gp.PROJECT_IAM_MEMBER, member) is None


@pytest.mark.parametrize(
    ("token", "inputs", "text"),
    [
        (gp.CLUSTER, cluster(), f"Already exists: projects/{P}/locations/us-central1/clusters/dev-gke., alreadyExists"),
        (
            gp.NETWORK,
            {"name": "dev-net", "project": P},
            f"Error creating Network: googleapi: Error 409: The resource 'projects/{P}/global/networks/dev-net' "
            "already exists, alreadyExists",
        ),
        (
            gp.SUBNETWORK,
            {"name": "dev-nodes", "project": P, "region": "us-central1"},
            f"The resource 'projects/{P}/regions/us-central1/subnetworks/dev-nodes' already exists",
        ),
        (gp.FIREWALL, {"name": "dev-allow-internal", "project": P}, "firewalls/dev-allow-internal' already exists"),
        (
            gp.RESOURCE_POLICY,
            {"name": "dev-cube-policy", "project": P, "region": "us-central1"},
            "resourcePolicies/dev-cube-policy' already exists",
        ),
        (
            gp.ACCOUNT,
            {"accountId": "dev-gke-nodes", "project": P},
            f"Service account dev-gke-nodes already exists within project projects/{P}., alreadyExists",
        ),
        (
            gp.BUCKET,
            {"name": "dev-admin", "project": P},
            "Your previous request to create the named bucket succeeded and you already own it., conflict",
        ),
    ],
)
def test_a_second_create_of_a_name_is_409_until_the_first_is_deleted(
    token: str, inputs: dict[str, Any], text: str
) -> None:
    project = with_gke(Project.at(None))
    assert create(project, token, inputs) is None
    error = project.refuse_create(token, inputs)
    assert error is not None
    assert (error.code, error.status, error.rule) == (409, "ALREADY_EXISTS", "already-exists")
    assert text in error.message
    _, state = cloud_state(token, "r", inputs)
    project.deleted(token, state)
    assert project.refuse_create(token, inputs) is None


def test_node_pools_collide_within_their_cluster_only() -> None:
    project = with_gke(Project.at(None))
    assert create(project, gp.CLUSTER, cluster(), "cluster") is None
    pool = node_pool(path=None)
    assert create(project, gp.NODE_POOL, pool, "cube-1") is None
    error = project.refuse_create(gp.NODE_POOL, pool)
    assert error is not None and error.message == (
        "error creating NodePool: googleapi: Error 409: Already exists: "
        f"projects/{P}/locations/us-central1/clusters/dev-gke/nodePools/dev-tpu-1., alreadyExists"
    )
    assert create(project, gp.CLUSTER, cluster("other"), "other") is None
    assert project.refuse_create(gp.NODE_POOL, {**pool, "cluster": "other-id"}) is None


def test_dashboards_never_collide_and_enabling_twice_is_fine() -> None:
    project = Project.at(None)
    dashboard = {"project": P, "dashboardJson": "{}"}
    assert create(project, gp.DASHBOARD, dashboard) is None
    assert create(project, gp.DASHBOARD, dashboard) is None
    assert create(project, gp.SERVICE, service(gp.COMPUTE)) is None
    assert create(project, gp.SERVICE, service(gp.COMPUTE)) is None
    assert project.enabled_order == [gp.COMPUTE]


def test_enabling_compute_brings_the_default_network() -> None:
    project = Project.at(None)
    project.enable(gp.COMPUTE)
    error = project.refuse_create(gp.NETWORK, {"name": "default", "project": P})
    assert error is not None and error.code == 409


def test_a_node_pool_needs_its_cluster_and_its_placement_policy() -> None:
    project = with_gke(Project.at(None))
    pool = node_pool(path=None, placementPolicy={"policyName": "dev-cube-policy", "type": ""})
    error = project.refuse_create(gp.NODE_POOL, pool)
    assert error is not None and error.rule == "cluster-not-found"
    assert error.message == (
        "error creating NodePool: googleapi: Error 404: Not found: "
        f"projects/{P}/locations/us-central1/clusters/cluster-id., notFound"
    )
    assert create(project, gp.CLUSTER, cluster(), "cluster") is None
    error = project.refuse_create(gp.NODE_POOL, pool)
    assert error is not None and (error.code, error.reason, error.rule) == (
        400,
        "invalid",
        "placement-policy-not-found",
    )
    assert error.message == (
        "error creating NodePool: googleapi: Error 400: Invalid value for 'nodePool.placementPolicy.policyName': "
        f"'projects/{P}/regions/us-central1/resourcePolicies/dev-cube-policy', invalid"
    )
    assert create(project, gp.RESOURCE_POLICY, workload_policy(mode=""), "policy") is None
    assert project.refuse_create(gp.NODE_POOL, pool) is None


def reserved_project(*, healthy: bool = True, free: int = 16) -> Project:
    project = with_gke(Project.at(None))
    project.declare_reservation(
        RESERVATION,
        zone=ZONE,
        machine_type="tpu7x-standard-4t",
        sub_blocks={
            "block-0": {
                "sub-block-0": SubBlock(count=16, in_use_count=16 - free, health=gp.HEALTHY if healthy else "DEGRADED"),
                "sub-block-1": SubBlock(count=16),
            }
        },
    )
    assert create(project, gp.CLUSTER, cluster(), "cluster") is None
    return project


def test_a_reservation_path_outside_the_declared_reservation_is_refused() -> None:
    project = reserved_project()
    assert project.refuse_create(gp.NODE_POOL, node_pool()) is None
    for path in (
        f"{RESERVATION}/reservationBlocks/block-0/reservationSubBlocks/sub-block-9",
        f"{RESERVATION}/reservationBlocks/block-1",
        f"projects/{P}/reservations/other",
        "not/a/reservation/path",
    ):
        error = project.refuse_create(gp.NODE_POOL, node_pool(path=path))
        assert error is not None and (error.code, error.rule) == (404, "reservation-not-found"), path
    error = project.refuse_create(gp.NODE_POOL, node_pool(path=f"{RESERVATION}/reservationBlocks/block-1"))
    assert error is not None and error.message == (
        'error creating NodePool: googleapi: Error 404: Google Compute Engine: reservation "tpu7x/reservationBlocks/'
        f'block-1" not found for node pool "dev-tpu-1" at zone "{ZONE}"., notFound'
    )
    # A reservation is zonal: a pool in another zone does not see it.
    elsewhere = {**node_pool(), "nodeLocations": ["us-central1-b"]}
    assert (project.refuse_create(gp.NODE_POOL, elsewhere) or GcpError(0, "", "", "", "")).rule == (
        "reservation-not-found"
    )


def test_a_pool_on_an_unhealthy_sub_block_is_created_and_its_vms_stay_unprovisioned() -> None:
    # GCP is not shown to refuse it (PROVISIONING_RULES): the pool exists, its VMs never come up.
    project = reserved_project(healthy=False)
    assert create(project, gp.NODE_POOL, node_pool(), "cube-0") is None
    pool = f"projects/{P}/locations/us-central1/clusters/dev-gke/nodePools/dev-tpu-1"
    assert project.unprovisioned == {pool: 16}
    assert project.refusals == []
    # The other, healthy sub-block of the block still takes a pool, and provisions it.
    other = node_pool("dev-tpu-2", path=SUB_BLOCK_0.replace("sub-block-0", "sub-block-1"))
    assert create(project, gp.NODE_POOL, other, "cube-1") is None
    assert project.unprovisioned == {pool: 16}
    _, state = cloud_state(gp.NODE_POOL, "cube-0", node_pool())
    project.deleted(gp.NODE_POOL, state)
    assert project.unprovisioned == {}


def test_a_sub_block_with_too_few_free_hosts_is_refused_and_pools_use_hosts_up() -> None:
    project = reserved_project(free=8)
    error = project.refuse_create(gp.NODE_POOL, node_pool())
    assert error is not None and (error.code, error.rule) == (429, "reservation-insufficient")
    assert "required 16 and short of 8 VM count of machine type tpu7x-standard-4t" in error.message
    assert project.refuse_create(gp.NODE_POOL, node_pool(nodes=8)) is None

    other = SUB_BLOCK_0.replace("sub-block-0", "sub-block-1")
    assert create(project, gp.NODE_POOL, node_pool("dev-tpu-2", path=other), "cube-2") is None
    second = project.refuse_create(gp.NODE_POOL, node_pool("dev-tpu-3", path=other))
    assert second is not None and second.rule == "reservation-insufficient"
    _, state = cloud_state(gp.NODE_POOL, "cube-2", node_pool("dev-tpu-2", path=other))
    project.deleted(gp.NODE_POOL, state)
    assert project.refuse_create(gp.NODE_POOL, node_pool("dev-tpu-3", path=other)) is None


def test_a_conditional_bucket_member_needs_uniform_access_on_the_bucket() -> None:
    project = Project.at(None)
    project.declare_bucket("weights", uniform_access=False)
    plain = {"bucket": "weights", "role": "roles/storage.objectViewer", "member": "user:a@example.com"}
    condition = {"title": "only xla_cache/", "expression": 'resource.name.startsWith("x")'}
    conditional = {**plain, "role": "roles/storage.objectUser", "condition": condition}
    assert project.refuse_create(gp.BUCKET_IAM_MEMBER, plain) is None
    error = project.refuse_create(gp.BUCKET_IAM_MEMBER, conditional)
    assert error is not None and error.rule == "condition-needs-uniform-access" and error.code == 400
    assert project.answer_invoke(gp.GET_BUCKET, {"name": "weights"})["uniformBucketLevelAccess"] is False
    project.declare_bucket("weights", uniform_access=True)
    assert project.refuse_create(gp.BUCKET_IAM_MEMBER, conditional) is None


def test_a_bucket_member_needs_the_bucket_and_get_bucket_answers_it() -> None:
    project = Project.at(None)
    member = {"bucket": "weights", "role": "roles/storage.objectViewer", "member": "user:a@example.com"}
    error = project.refuse_create(gp.BUCKET_IAM_MEMBER, member)
    assert error is not None and error.message == (
        "googleapi: Error 404: The specified bucket does not exist., notFound"
    )
    assert project.refuse_invoke(gp.GET_BUCKET, {"name": "weights"}) is not None
    project.declare_bucket("weights", project="elsewhere")
    assert project.refuse_create(gp.BUCKET_IAM_MEMBER, member) is None
    assert project.answer_invoke(gp.GET_BUCKET, {"name": "weights"})["project"] == "elsewhere"
    taken = project.refuse_create(gp.BUCKET, {"name": "weights", "project": P})
    assert taken is not None and "The requested bucket name is not available" in taken.message


def test_a_pod_bound_to_a_google_account_gets_its_token_once_the_program_enables_its_apis() -> None:
    project = Project.at(None)
    account = f"saxml@{P}.iam.gserviceaccount.com"
    error = project.refuse_token_exchange(account)
    assert error is not None and (error.code, error.rule) == (403, "token-api-disabled")
    assert error.message.startswith(
        "Unable to generate access token; IAM returned 403 Forbidden: IAM Service Account Credentials API has not "
        f"been used in project {project.number} before or it is disabled."
    )
    # A Kubernetes ServiceAccount that is itself the principal impersonates no Google account.
    assert project.refuse_token_exchange(None) is None
    for api in REQUIRED_APIS:
        assert create(project, gp.SERVICE, service(api), api.split(".")[0]) is None
    assert project.refuse_token_exchange(account) is None


def test_read_reports_what_gke_normalises() -> None:
    project = with_gke(Project.at(None))
    policy_pool = node_pool(path=None, placementPolicy={"policyName": "dev-cube-policy", "type": "COMPACT"})
    assert project.reported(gp.NODE_POOL, policy_pool)["placementPolicy"] == {
        "policyName": "dev-cube-policy",
        "type": "",
    }
    compact = node_pool(path=None, placementPolicy={"type": "COMPACT", "tpuTopology": "4x4"})
    assert project.reported(gp.NODE_POOL, compact)["placementPolicy"] == {"type": "COMPACT", "tpuTopology": "4x4"}


def test_a_service_kept_on_destroy_stays_enabled() -> None:
    project = Project.at(None)
    assert create(project, gp.SERVICE, service(gp.CONTAINER)) is None
    project.deleted(gp.SERVICE, service(gp.CONTAINER))
    assert project.enabled(gp.CONTAINER)
    assert create(project, gp.SERVICE, {**service(gp.COMPUTE), "disableOnDestroy": True}) is None
    project.deleted(gp.SERVICE, {**service(gp.COMPUTE), "disableOnDestroy": True})
    assert not project.enabled(gp.COMPUTE)


def test_state_survives_save_and_load(tmp_path: Path) -> None:
    path = tmp_path / "project.json"
    first = with_gke(Project.at(path))
    first.declare_reservation(
        RESERVATION, zone=ZONE, machine_type="tpu7x-standard-4t", sub_blocks={"block-0": {"sub-block-0": SubBlock(16)}}
    )
    assert create(first, gp.CLUSTER, cluster(), "cluster") is None
    assert first.refuse_create(gp.CLUSTER, cluster()) is not None

    again = Project.at(path)  # a new plugin process
    assert again.enabled(gp.CONTAINER)
    assert again.enabled_order == [gp.CONTAINER, gp.COMPUTE, gp.IAM, gp.RESOURCE_MANAGER]
    assert [r["rule"] for r in again.refusals] == ["already-exists"]
    assert (again.refuse_create(gp.CLUSTER, cluster()) or GcpError(0, "", "", "", "")).code == 409
    assert again.refuse_create(gp.NODE_POOL, node_pool()) is None  # the cluster id and reservation were kept
    assert again.refuse_create(gp.ACCOUNT_IAM_MEMBER, wi_member()) is None
    # A bare project elsewhere is untouched.
    assert not Project.at(tmp_path / "other.json").enabled(gp.CONTAINER)


def test_concurrent_creates_from_threads_lose_no_update(tmp_path: Path) -> None:
    path = tmp_path / "project.json"
    with_gke(Project.at(path))
    count = 24
    errors: list[GcpError | None] = []
    barrier = threading.Barrier(count)

    def one(index: int) -> None:
        project = Project.at(path)  # as each engine call might, its own handle on the file
        barrier.wait()
        inputs = {"accountId": f"sa-{index}", "project": P}
        _, state = cloud_state(gp.ACCOUNT, f"a{index}", inputs)
        project.created(gp.ACCOUNT, inputs, state)
        errors.append(project.try_create(gp.NETWORK, {"name": "shared", "project": P}, {}))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    accounts = [r for r in Project.at(path).resources.values() if r["token"] == gp.ACCOUNT]
    assert len(accounts) == count
    # try_create checks and records under one lock: exactly one thread gets the shared name.
    assert sum(e is None for e in errors) == 1
    assert all(e.code == 409 for e in errors if e is not None)


def test_threads_sharing_one_in_memory_project() -> None:
    project = with_gke(Project.at(None))
    threads = [
        threading.Thread(
            target=project.created, args=(gp.ACCOUNT, {"accountId": f"m-{i}", "project": P}, {"accountId": f"m-{i}"})
        )
        for i in range(16)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(r["token"] == gp.ACCOUNT for r in project.resources.values()) == 16


# --- the TPU pool rules: each refuses what GCP refuses, whatever the program's own numbers say


def policy_project(policy: dict[str, Any] | None = None, *, ai_zones: bool = True) -> Project:
    project = with_gke(Project.at(None), ai_zones=ai_zones)
    reservations.declare(project)
    assert create(project, gp.CLUSTER, cluster(), "cluster") is None
    assert create(project, gp.RESOURCE_POLICY, policy or workload_policy(), "policy") is None
    return project


FIXTURE_SUB_BLOCK = f"{reservations.TPU7X.path(P)}/reservationBlocks/block-0/reservationSubBlocks/sub-block-0"


def cube(nodes: int = 16, **extra: Any) -> dict[str, Any]:
    return node_pool(path=FIXTURE_SUB_BLOCK, nodes=nodes, **{**UNDER_POLICY, **extra})


def test_the_owners_reservations_are_a_fixture_not_the_program() -> None:
    imported: set[str] = set()
    for node in ast.walk(ast.parse(Path(reservations.__file__).read_text())):
        if isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
        elif isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
    # Neither the capacity model (domain/, settings/capacity.py) nor a stack file.
    assert not imported & {"domain", "settings", "plan", "backends", "infra"}, imported
    assert reservations.TPU7X.zone == "us-central1-ai1a" and reservations.V5E.zone == "us-west4-a"
    assert [s.count for s in reservations.TPU7X.blocks["block-0"].values()] == [16, 16, 16, 16]
    assert all(s.health == gp.HEALTHY for s in reservations.TPU7X.blocks["block-0"].values())


def test_a_pool_in_an_ai_zone_waits_for_the_visibility_feature() -> None:
    project = policy_project(ai_zones=False)
    error = project.refuse_create(gp.NODE_POOL, cube())
    assert error is not None and (error.code, error.rule) == (400, "ai-zone-hidden")
    assert error.message == (
        'error creating NodePool: googleapi: Error 400: Location "us-central1-ai1a" does not exist., badRequest'
    )
    assert create(project, gp.PREVIEW_FEATURE, {**AI_ZONES, "activationStatus": "DISABLED"}, "ai") is None
    assert (project.refuse_create(gp.NODE_POOL, cube()) or GcpError(0, "", "", "", "")).rule == "ai-zone-hidden"
    assert create(project, gp.PREVIEW_FEATURE, AI_ZONES, "ai") is None  # an update of the same switch
    assert project.refuse_create(gp.NODE_POOL, cube()) is None
    # Deleting it from a stack leaves it on; an ordinary zone never needed it.
    project.deleted(gp.PREVIEW_FEATURE, AI_ZONES)
    assert project.refuse_create(gp.NODE_POOL, cube()) is None
    assert not gp.is_ai_zone("us-central1-a") and gp.is_ai_zone("us-central1-ai1a")


def test_a_pools_machine_type_is_its_reservations() -> None:
    project = policy_project()
    wrong = cube()
    wrong["nodeConfig"]["machineType"] = "tpu7x-standard-8t"
    error = project.refuse_create(gp.NODE_POOL, wrong)
    assert error is not None and (error.code, error.rule) == (429, "reservation-machine-type")
    assert "required 16 and short of 16 VM count of machine type tpu7x-standard-8t." in error.message
    assert project.refuse_create(gp.NODE_POOL, cube()) is None


@pytest.mark.parametrize(
    ("nodes", "topology", "refused"), [(16, "4x4x4", False), (8, "4x4x4", True), (32, "4x4x4", True)]
)
def test_a_pools_vms_times_chips_per_vm_make_its_policy_topology(nodes: int, topology: str, refused: bool) -> None:
    project = policy_project(workload_policy(mode="", topology=topology))
    error = project.refuse_create(gp.NODE_POOL, cube(nodes))
    assert (error.rule if error else None) == ("tpu-topology-size" if refused else None)
    if error:
        assert error.message == (
            f"error creating NodePool: googleapi: Error 400: Node count {nodes} is not a valid size of TPU pod "
            f"slice with topology {topology}., badRequest"
        )


@pytest.mark.parametrize(
    ("machine", "nodes", "topology", "refused"),
    [
        ("ct5lp-hightpu-4t", 8, "4x8", False),
        ("ct5lp-hightpu-4t", 4, "4x8", True),
        ("ct5lp-hightpu-8t", 4, "4x8", True),  # VMs x chips match, but multi-host v5e is 4t only
        ("ct5lp-hightpu-8t", 1, "2x4", False),  # one host
    ],
)
def test_a_v5e_pools_vms_and_machine_type_make_its_tpu_topology(
    machine: str, nodes: int, topology: str, refused: bool
) -> None:
    project = with_gke(Project.at(None))
    assert create(project, gp.CLUSTER, cluster(), "cluster") is None
    pool = node_pool(path=None, nodes=nodes, placementPolicy={"type": "COMPACT", "tpuTopology": topology})
    pool["nodeLocations"] = ["us-west4-a"]
    pool["nodeConfig"]["machineType"] = machine
    error = project.refuse_create(gp.NODE_POOL, pool)
    assert (error.rule if error else None) == ("tpu-topology-size" if refused else None)


def test_a_v5e_pool_binds_the_v5e_reservation_by_its_machine_type() -> None:
    project = with_gke(Project.at(None))
    reservations.declare(project)
    assert create(project, gp.CLUSTER, cluster(), "cluster") is None
    pool = node_pool(path=reservations.V5E.path(P), nodes=8, placementPolicy={"type": "COMPACT", "tpuTopology": "4x8"})
    pool["nodeLocations"] = ["us-west4-a"]
    pool["nodeConfig"]["machineType"] = "ct5lp-hightpu-4t"
    assert create(project, gp.NODE_POOL, pool, "slice-0") is None
    assert create(project, gp.NODE_POOL, {**pool, "name": "slice-1"}, "slice-1") is None
    third = project.refuse_create(gp.NODE_POOL, {**pool, "name": "slice-2"})
    assert third is not None and third.rule == "reservation-insufficient"  # 16 VMs: two 4x8 slices


def test_provision_only_needs_a_specific_reservation() -> None:
    project = policy_project()
    for affinity in ({"consumeReservationType": "ANY_RESERVATION"}, None):
        pool = cube()
        if affinity is None:
            del pool["nodeConfig"]["reservationAffinity"]
        else:
            pool["nodeConfig"]["reservationAffinity"] = affinity
        error = project.refuse_create(gp.NODE_POOL, pool)
        assert error is not None and error.rule == "provision-only-needs-specific-reservation"
    assert "requires a specific reservation: reservation affinity is ANY_RESERVATION." in project.refusals[0]["message"]
    assert project.refuse_create(gp.NODE_POOL, cube()) is None


@pytest.mark.parametrize(
    ("kind", "topology", "mode"),
    [
        ("HIGH_AVAILABILITY", "4x4x4", "PROVISION_ONLY"),
        ("HIGH_THROUGHPUT", "4x4x8", "PROVISION_ONLY"),
        ("HIGH_THROUGHPUT", "cube", ""),
        ("", "4x4x4", ""),
    ],
)
def test_a_workload_policy_gke_does_not_take_for_tpus_is_refused(kind: str, topology: str, mode: str) -> None:
    project = policy_project(workload_policy(mode=mode, kind=kind, topology=topology))
    error = project.refuse_create(gp.NODE_POOL, cube())
    assert error is not None and (error.code, error.rule) == (400, "workload-policy-not-for-tpu"), error


def test_tpu7x_takes_a_workload_policy_not_a_compact_placement() -> None:
    project = policy_project()
    compact = cube(placementPolicy={"type": "COMPACT", "tpuTopology": "4x4x4"})
    error = project.refuse_create(gp.NODE_POOL, compact)
    assert error is not None and error.rule == "tpu7x-needs-workload-policy"
    assert (
        "Creation of a managed instance group with tpu7x-standard-4t machine type with placement policy is not "
        "supported. Use workload policy instead." in error.message
    )


READ = {"project": P, "zone": ZONE, "reservation": "tpu7x", "reservationBlock": "block-0", "name": "sub-block-0"}


def test_reading_a_sub_block_waits_for_the_compute_api_and_answers_as_the_provider() -> None:
    project = Project.at(None)
    project.declare_reservation(
        RESERVATION, zone=ZONE, machine_type="tpu7x-standard-4t", sub_blocks={"block-0": {"sub-block-0": SubBlock(16)}}
    )
    error = project.refuse_invoke(gp.GET_RESERVATION_SUB_BLOCK, READ)
    assert error is not None and error.rule == "api-disabled" and gp.COMPUTE in error.message
    project.enable(gp.COMPUTE)
    assert project.refuse_invoke(gp.GET_RESERVATION_SUB_BLOCK, READ) is None
    answer = project.answer_invoke(gp.GET_RESERVATION_SUB_BLOCK, READ)
    # pulumi-gcp 10.2.0's GetReservationSubBlockResult field names.
    assert answer["subBlockCount"] == 16 and answer["inUseCount"] == 0
    assert answer["healthInfos"] == [{"healthStatus": "HEALTHY"}]
    block = {"project": P, "zone": ZONE, "reservation": "tpu7x", "name": "block-0"}
    assert project.answer_invoke(gp.GET_RESERVATION_BLOCK, block)["subBlockNames"] == ["sub-block-0"]


@pytest.mark.parametrize(
    "args",
    [
        {**READ, "name": "sub-block-9"},
        {**READ, "reservationBlock": "block-9"},
        {**READ, "reservation": "other"},
        {**READ, "zone": "us-central1-c"},
    ],
)
def test_reading_a_sub_block_that_is_not_there_is_a_404(args: dict[str, Any]) -> None:
    project = reserved_project()
    error = project.refuse_invoke(gp.GET_RESERVATION_SUB_BLOCK, args)
    assert error is not None and (error.code, error.rule) == (404, "reservation-read-not-found")
    assert "was not found, notFound" in error.message


def test_in_use_counts_follow_the_pools_and_what_google_changes() -> None:
    project = reserved_project()
    assert project.answer_invoke(gp.GET_RESERVATION_SUB_BLOCK, READ)["inUseCount"] == 0
    assert create(project, gp.NODE_POOL, node_pool(), "cube-0") is None
    assert project.answer_invoke(gp.GET_RESERVATION_SUB_BLOCK, READ)["inUseCount"] == 16
    _, state = cloud_state(gp.NODE_POOL, "cube-0", node_pool())
    project.deleted(gp.NODE_POOL, state)
    assert project.answer_invoke(gp.GET_RESERVATION_SUB_BLOCK, READ)["inUseCount"] == 0

    project.set_sub_block(
        RESERVATION,
        "block-0",
        "sub-block-0",
        health="DEGRADED",
        maintenance_window=("2026-09-18T00:00:00Z", "2026-09-30T00:00:00Z"),
    )
    answer = project.answer_invoke(gp.GET_RESERVATION_SUB_BLOCK, READ)
    assert answer["healthInfos"] == [{"healthStatus": "DEGRADED"}]
    # The provider's maintenance result has counts and no window (pulumi-gcp 10.2.0).
    (maintenance,) = answer["reservationSubBlockMaintenances"]
    assert maintenance["maintenancePendingCount"] == 16 and "upcomingGroupMaintenance" not in maintenance
