"""The bare-project model of the stand-in GCP provider (tests/standins/gcp_project.py) on its own."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from plan.engine import cloud_state
from tests.standins import gcp_project as gp
from tests.standins.gcp_project import GcpError, Project, SubBlock

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


def with_gke(project: Project) -> Project:
    for api in (gp.CONTAINER, gp.COMPUTE, gp.IAM, gp.RESOURCE_MANAGER):
        assert create(project, gp.SERVICE, service(api), api.split(".")[0]) is None
    return project


def test_rules_are_unique_and_sourced() -> None:
    assert len(set(gp.RULE_NAMES)) == len(gp.RULES)
    assert all(rule.source for rule in gp.RULES)
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
    assert error is not None and error.rule == "placement-policy-not-found"
    policy = {"name": "dev-cube-policy", "project": P, "region": "us-central1"}
    assert create(project, gp.RESOURCE_POLICY, policy, "policy") is None
    assert project.refuse_create(gp.NODE_POOL, pool) is None


def reserved_project(*, healthy: bool = True, free: int = 16) -> Project:
    project = with_gke(Project.at(None))
    project.declare_reservation(
        RESERVATION,
        zone=ZONE,
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


def test_an_unhealthy_sub_block_is_refused() -> None:
    project = reserved_project(healthy=False)
    error = project.refuse_create(gp.NODE_POOL, node_pool())
    assert error is not None and (error.status, error.rule) == ("FAILED_PRECONDITION", "sub-block-unhealthy")
    # The other, healthy sub-block of the block still takes a pool.
    assert (
        project.refuse_create(gp.NODE_POOL, node_pool(path=SUB_BLOCK_0.replace("sub-block-0", "sub-block-1"))) is None
    )


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
    first.declare_reservation(RESERVATION, zone=ZONE, sub_blocks={"block-0": {"sub-block-0": SubBlock(16)}})
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
