"""Google Cloud half of the graph: each resource's settings and its dependency edges."""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from infra.apis import REQUIRED_APIS
from infra.cluster import IMAGE_TYPE, NODE_ROLE
from infra.tpu_pools import GKE_FILLED_WITH_A_WORKLOAD_POLICY, GKE_REPORTED
from plan import engine
from plan.engine import PLACEHOLDER_CHANNEL_DEFAULTS, PLACEHOLDER_ENDPOINT, HookRefusedError, PlanResult
from settings.loader import ConfigError
from tests.conftest import DevRunner
from tests.control_plane import load_stack

CLUSTER = "gcp:container/cluster:Cluster"
POOL = "gcp:container/nodePool:NodePool"
POLICY = "gcp:compute/resourcePolicy:ResourcePolicy"


def test_project_apis_and_ai_zone_preview_feature(dev_plan: PlanResult) -> None:
    services = sorted(r.get("service") for r in dev_plan.of_type("gcp:projects/service:Service"))
    assert services == sorted(REQUIRED_APIS)
    assert all(r.get("disableOnDestroy") is False for r in dev_plan.of_type("gcp:projects/service:Service"))
    feature = dev_plan.one("gcp:compute/previewFeature:PreviewFeature")
    assert feature.get("name") == "ai-zones-visibility"
    assert feature.get("activationStatus") == "ENABLED"
    assert feature.get("rolloutOperation.rolloutInput.predefinedRolloutPlan") == "ROLLOUT_PLAN_FAST_ROLLOUT"
    compute = dev_plan.one("gcp:projects/service:Service", "compute")
    assert dev_plan.depends_on(feature, compute)


def test_network_has_jumbo_frames_and_custom_subnets(dev_plan: PlanResult) -> None:
    vpc = dev_plan.one("gcp:compute/network:Network")
    assert (vpc.get("name"), vpc.get("mtu"), vpc.get("routingMode")) == ("dev-net", 8896, "REGIONAL")
    assert vpc.get("autoCreateSubnetworks") is False
    nodes = dev_plan.one("gcp:compute/subnetwork:Subnetwork", "nodes")
    assert nodes.get("ipCidrRange") == "10.10.0.0/18"
    assert nodes.get("privateIpGoogleAccess") is True
    assert nodes.get("region") == "us-central1"
    assert {r["rangeName"]: r["ipCidrRange"] for r in nodes.get("secondaryIpRanges")} == {
        "dev-pods": "10.16.0.0/14",
        "dev-services": "10.20.0.0/20",
    }
    proxy = dev_plan.one("gcp:compute/subnetwork:Subnetwork", "proxy")
    assert (proxy.get("purpose"), proxy.get("role"), proxy.get("ipCidrRange")) == (
        "REGIONAL_MANAGED_PROXY",
        "ACTIVE",
        "172.16.0.0/26",
    )
    assert dev_plan.depends_on(nodes, vpc) and dev_plan.depends_on(proxy, vpc)


def test_firewall_allows_only_the_stacks_own_ranges(dev_plan: PlanResult) -> None:
    firewall = dev_plan.one("gcp:compute/firewall:Firewall")
    assert firewall.get("direction") == "INGRESS"
    assert sorted(firewall.get("sourceRanges")) == sorted(
        ["10.10.0.0/18", "10.16.0.0/14", "10.20.0.0/20", "172.16.0.0/26"]
    )
    assert "10.0.0.0/8" not in firewall.get("sourceRanges")
    assert {a["protocol"] for a in firewall.get("allows")} == {"tcp", "udp", "icmp"}


def test_cluster_settings(dev_plan: PlanResult) -> None:
    cluster = dev_plan.one(CLUSTER)
    assert cluster.get("name") == "dev-gke"
    assert cluster.get("location") == "us-central1"  # regional
    # Chosen at plan time from what RAPID offers here (the offline placeholder answer), and kept.
    assert cluster.get("minMasterVersion") == PLACEHOLDER_CHANNEL_DEFAULTS["RAPID"]
    assert cluster.ignore_changes == ["nodeConfig", "minMasterVersion"]
    assert cluster.get("releaseChannel.channel") == "RAPID"
    assert cluster.get("gatewayApiConfig.channel") == "CHANNEL_STANDARD"
    assert cluster.get("monitoringConfig.managedPrometheus.enabled") is True
    assert cluster.get("monitoringConfig.advancedDatapathObservabilityConfig.enableMetrics") is True
    assert cluster.get("datapathProvider") == "ADVANCED_DATAPATH"
    assert cluster.get("workloadIdentityConfig.workloadPool") == "example-tpu-project.svc.id.goog"
    assert cluster.get("ipAllocationPolicy.clusterSecondaryRangeName") == "dev-pods"
    assert cluster.get("ipAllocationPolicy.servicesSecondaryRangeName") == "dev-services"
    addons = cluster.get("addonsConfig")
    assert addons["httpLoadBalancing"] == {"disabled": False}
    assert addons["horizontalPodAutoscaling"] == {"disabled": False}
    for enabled in ("gcpFilestoreCsiDriverConfig", "gcsFuseCsiDriverConfig", "dnsCacheConfig", "sliceControllerConfig"):
        assert addons[enabled] == {"enabled": True}, enabled
    assert cluster.get("deletionProtection") is True
    assert cluster.get("removeDefaultNodePool") is True
    assert cluster.get("maintenancePolicy.dailyMaintenanceWindow.startTime") == "03:00"
    exclusion = cluster.get("maintenancePolicy.maintenanceExclusions.0")
    assert exclusion["exclusionName"] == "hold-minor-upgrades"
    assert exclusion["startTime"] == "2026-12-01T00:00:00Z"
    assert "endTime" not in exclusion
    assert exclusion["exclusionOptions"] == {
        "scope": "NO_MINOR_OR_NODE_UPGRADES",
        "endTimeBehavior": "UNTIL_END_OF_SUPPORT",
    }


def test_dated_exclusion_and_deletion_protection_follow_config(run_dev: DevRunner) -> None:
    # A window in force whenever the test runs, with weeks left: the hold the program requires must
    # hold now (settings/rules_cluster.py check_hold_in_force; tests/test_windows.py fixes the clock).
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    start, end = (f"{(today + timedelta(days=days)).date().isoformat()}T00:00:00Z" for days in (-1, 20))
    plan = run_dev(
        {
            "cluster": {
                "deletionProtection": False,
                "maintenanceExclusion": {
                    "scope": "NO_UPGRADES",
                    "start": start,
                    "end": end,
                    "untilEndOfSupport": None,
                },
            }
        }
    )
    cluster = plan.one(CLUSTER)
    assert cluster.get("deletionProtection") is False
    exclusion = cluster.get("maintenancePolicy.maintenanceExclusions.0")
    assert (exclusion["startTime"], exclusion["endTime"]) == (start, end)
    assert exclusion["exclusionOptions"] == {"scope": "NO_UPGRADES"}
    opted_out = {"cluster": {"maintenanceExclusion": None, "allowTpuNodeUpgrades": True}}
    no_exclusion = run_dev(opted_out).one(CLUSTER)
    assert no_exclusion.get("maintenancePolicy.maintenanceExclusions") is None


def test_an_exclusion_whose_end_has_passed_is_left_out_with_a_warning(
    run_dev: DevRunner, caplog: pytest.LogCaptureFixture
) -> None:
    # With the opt-out the hold is not required, and the stack keeps previewing after its window ends:
    # GKE refuses an exclusion that is over. A required one that is over is refused (tests/test_windows.py).
    past = {
        "cluster": {
            "allowTpuNodeUpgrades": True,
            "maintenanceExclusion": {
                "name": "winter-hold",
                "scope": "NO_UPGRADES",
                "start": "2020-01-01T00:00:00Z",
                "end": "2020-01-20T00:00:00Z",
                "untilEndOfSupport": None,
            },
        }
    }
    with caplog.at_level(logging.WARNING):
        cluster = run_dev(past).one(CLUSTER)
    assert cluster.get("maintenancePolicy.maintenanceExclusions") is None
    assert cluster.get("maintenancePolicy.dailyMaintenanceWindow.startTime") == "03:00"
    warned = [r.getMessage() for r in caplog.records if "cluster.maintenanceExclusion winter-hold" in r.getMessage()]
    assert warned and "2020-01-20T00:00:00Z" in warned[0] and "left out" in warned[0], warned


def test_every_stack_states_its_tpu_node_upgrade_policy(run_dev: DevRunner) -> None:
    # GKE node upgrades recreate TPU VMs: without an exclusion that holds them, or the explicit
    # opt-out, the stack is refused before anything is registered.
    for cluster in ({"maintenanceExclusion": None}, {"maintenanceExclusion": {"scope": "NO_MINOR_UPGRADES"}}):
        with pytest.raises(ConfigError, match=r"cluster\.maintenanceExclusion .*allowTpuNodeUpgrades"):
            run_dev({"cluster": cluster})
    for stack in ("dev", "dev-b", "saxml-v5e", "jetstream-v5e"):
        config = load_stack(stack)
        exclusion = config.cluster.maintenance_exclusion
        assert exclusion is not None and exclusion.scope.value == "NO_MINOR_OR_NODE_UPGRADES", stack


def test_system_pool_replaces_the_default_pool(dev_plan: PlanResult) -> None:
    pool = dev_plan.one(POOL, "system-pool")
    assert pool.get("name") == "dev-system"
    assert pool.get("nodeCount") == 1
    assert pool.get("nodeConfig.machineType") == "n2-standard-32"
    assert pool.get("nodeConfig.workloadMetadataConfig.mode") == "GKE_METADATA"
    assert pool.get("nodeConfig.serviceAccount") == "dev-gke-nodes@example-tpu-project.iam.gserviceaccount.com"
    assert dev_plan.depends_on(pool, dev_plan.one(CLUSTER))


def test_the_temporary_default_pool_runs_as_the_node_account(dev_plan: PlanResult) -> None:
    # GKE creates the cluster with a default pool before removeDefaultNodePool deletes it: without
    # nodeConfig it runs as the Compute Engine default service account.
    cluster = dev_plan.one(CLUSTER)
    assert cluster.get("nodeConfig.serviceAccount") == "dev-gke-nodes@example-tpu-project.iam.gserviceaccount.com"
    assert cluster.get("nodeConfig.oauthScopes") == ["https://www.googleapis.com/auth/cloud-platform"]
    assert dev_plan.depends_on(cluster, dev_plan.one("gcp:projects/iAMMember:IAMMember", "node-account-role"))
    # nodeConfig is ForceNew on the cluster: an existing cluster, made with the default account, is kept.
    assert "nodeConfig" in cluster.ignore_changes


def test_node_service_account_gets_only_the_minimal_node_role(dev_plan: PlanResult) -> None:
    members = dev_plan.of_type("gcp:projects/iAMMember:IAMMember")
    assert [(m.get("role"), m.get("member")) for m in members] == [
        (NODE_ROLE, "serviceAccount:dev-gke-nodes@example-tpu-project.iam.gserviceaccount.com")
    ]


def test_a_long_sub_block_name_makes_a_short_stable_pool_name(run_dev: DevRunner) -> None:
    # Google names sub-blocks; GKE's pool names are at most 40 characters, lowercase letters, digits
    # and '-' (google-beta resource_container_node_pool.go name_prefix: "name is limited to 40").
    long = "tpu7x-sub-block-" + "a1b2c3d4e5" * 4 + "f6g7"  # 60 characters
    assert len(long) == 60
    plan = run_dev({"reservation": {"subBlocks": [long, "sub-block-1"]}})
    pools = {p.name: p for p in plan.of_type(POOL) if p.name.startswith("cube-")}
    pool, kept = pools[f"cube-{long}"], pools["cube-sub-block-1"]
    name = pool.get("name")
    assert len(name) <= 40 and re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name), name
    assert name.startswith("dev-tpu-tpu7x-sub-block-")
    assert name == run_dev({"reservation": {"subBlocks": [long, "sub-block-1"]}}).one(POOL, f"cube-{long}").get("name")
    # The sub-block stays in the reservation path and a node label.
    assert pool.get("nodeConfig.reservationAffinity.values")[0].endswith(f"/reservationSubBlocks/{long}")
    assert pool.get("nodeConfig.labels")["tpu-slicing/sub-block"] == long
    # A name that fits is the one existing stacks have (no replacement of a live pool).
    assert kept.get("name") == "dev-tpu-sub-block-1"
    assert kept.get("nodeConfig.labels") == {"tpu-slicing/role": "tpu"}


def test_workload_policy(dev_plan: PlanResult) -> None:
    policy = dev_plan.one(POLICY)
    assert policy.get("name") == "dev-cube-policy"
    assert policy.get("region") == "us-central1"
    assert policy.get("workloadPolicy") == {
        "type": "HIGH_THROUGHPUT",
        "acceleratorTopology": "4x4x4",
        "acceleratorTopologyMode": "PROVISION_ONLY",
    }


def test_tpu_pools_bind_one_cube_each_to_the_reservation(dev_plan: PlanResult) -> None:
    pools = sorted((p for p in dev_plan.of_type(POOL) if p.name.startswith("cube-")), key=lambda p: p.name)
    assert [p.get("name") for p in pools] == ["dev-tpu-sub-block-0", "dev-tpu-sub-block-1"]
    cluster, policy = dev_plan.one(CLUSTER), dev_plan.one(POLICY)
    for index, pool in enumerate(pools):
        assert pool.get("nodeCount") == 16
        assert pool.get("nodeLocations") == ["us-central1-ai1a"]
        assert pool.get("location") == "us-central1"
        assert pool.get("nodeConfig.machineType") == "tpu7x-standard-4t"
        assert pool.get("placementPolicy") == {"type": "", "policyName": "dev-cube-policy"}
        assert pool.get("nodeConfig.reservationAffinity") == {
            "consumeReservationType": "SPECIFIC_RESERVATION",
            "key": "compute.googleapis.com/reservation-name",
            "values": [
                "projects/example-tpu-project/reservations/example-tpu7x-reservation/reservationBlocks/block-0"
                f"/reservationSubBlocks/sub-block-{index}"
            ],
        }
        assert pool.get("nodeConfig.workloadMetadataConfig.mode") == "GKE_METADATA"
        assert dev_plan.depends_on(pool, cluster)
        assert dev_plan.depends_on(pool, policy)


def test_pools_follow_cube_count_and_block_binding(run_dev: DevRunner) -> None:
    plan = run_dev({"tpu": {"cubes": 3}, "reservation": {"subBlocks": None, "project": "resv-project"}})
    pools = [p for p in plan.of_type(POOL) if p.name.startswith("cube-")]
    assert len(pools) == 3
    assert {tuple(p.get("nodeConfig.reservationAffinity.values")) for p in pools} == {
        ("projects/resv-project/reservations/example-tpu7x-reservation/reservationBlocks/block-0",)
    }
    assert plan.outputs["totalChips"].value == 192


def test_cluster_does_not_wait_for_tpu_pools(dev_plan: PlanResult) -> None:
    cluster = dev_plan.one(CLUSTER)
    for pool in dev_plan.of_type(POOL):
        assert not dev_plan.depends_on(cluster, pool)


def test_everything_waits_for_the_apis(dev_plan: PlanResult) -> None:
    container_api = dev_plan.one("gcp:projects/service:Service", "container")
    for type_ in (CLUSTER, POLICY, "gcp:compute/network:Network"):
        assert dev_plan.depends_on(dev_plan.one(type_), container_api), type_


def test_outputs_and_secrecy(dev_plan: PlanResult) -> None:
    outputs = dev_plan.outputs
    assert outputs["clusterName"].value == "dev-gke"
    assert outputs["location"].value == "us-central1"
    assert outputs["endpoint"].value == PLACEHOLDER_ENDPOINT
    assert outputs["nodePools"].value == ["dev-tpu-sub-block-0", "dev-tpu-sub-block-1"]
    assert outputs["totalChips"].value == 128
    assert outputs["kubeconfig"].secret
    assert not any(o.secret for name, o in outputs.items() if name != "kubeconfig")
    kubeconfig = yaml.safe_load(outputs["kubeconfig"].value)
    assert kubeconfig["clusters"][0]["cluster"]["server"] == f"https://{PLACEHOLDER_ENDPOINT}"
    user = kubeconfig["users"][0]["user"]
    assert user["exec"]["command"] == "gke-gcloud-auth-plugin"
    assert "token" not in user


def test_fresh_stack_previews_with_cluster_outputs_unknown(dev_preview: PlanResult, dev_plan: PlanResult) -> None:
    assert len(dev_preview.resources) == len(dev_plan.resources)
    assert not dev_preview.outputs["endpoint"].known
    assert not dev_preview.outputs["kubeconfig"].known
    assert dev_preview.outputs["kubeconfig"].secret
    assert dev_preview.outputs["clusterName"].value == "dev-gke"


def test_components_use_type_tokens_and_parent_their_children(dev_plan: PlanResult) -> None:
    components = {r.urn: r for r in dev_plan.resources if not r.custom}
    assert {r.type for r in components.values()} >= {
        "tpu-slicing:infra:ProjectApis",
        "tpu-slicing:infra:Network",
        "tpu-slicing:infra:Cluster",
        "tpu-slicing:infra:WorkloadPolicy",
        "tpu-slicing:infra:TpuPools",
    }
    for resource in dev_plan.resources:
        if resource.type.startswith("gcp:"):
            assert resource.parent in components, resource.name


def test_an_explicit_version_pin_is_sent_and_tracked(run_dev: DevRunner) -> None:
    plan = run_dev({"cluster": {"version": "1.36.0-gke.3712000"}})  # one the offline answer offers
    cluster = plan.one(CLUSTER)
    assert cluster.get("minMasterVersion") == "1.36.0-gke.3712000"
    assert cluster.ignore_changes == ["nodeConfig"]


def test_a_minor_upgrade_moves_the_control_plane_and_no_node_pool(run_dev: DevRunner) -> None:
    """The README's GKE minor recipe: a new pin changes the cluster's minMasterVersion and nothing
    else; no pool carries a version, so the TPU pools wait for GKE (held by the exclusion)."""
    before = run_dev({"cluster": {"version": "1.36.2-gke.9000000"}})
    after = run_dev({"cluster": {"version": "1.37.0-gke.1000000"}})
    assert after.one(CLUSTER).get("minMasterVersion") == "1.37.0-gke.1000000"
    was = {r.urn: r.inputs for r in before.resources}
    assert was.keys() == {r.urn for r in after.resources}
    assert [r.urn for r in after.resources if r.inputs != was[r.urn]] == [after.one(CLUSTER).urn]
    assert all(pool.get("version") is None for pool in after.of_type(POOL))


def test_a_pinned_version_the_location_does_not_offer_stops_a_new_cluster(run_dev: DevRunner) -> None:
    """A patch GKE no longer offers: the plan (as `pulumi up`) refuses to create the cluster, naming
    the offered builds of that minor; before, a pin was sent unread and GKE refused the create."""
    with pytest.raises(HookRefusedError, match=r"cluster.version 1.36.1-gke.1200000 is not offered in us-central1"):
        run_dev({"cluster": {"version": "1.36.1-gke.1200000"}})


def test_the_chosen_version_honours_the_prefix(run_dev: DevRunner) -> None:
    plan = run_dev({"cluster": {"versionPrefix": "1.36.0-gke."}})
    assert plan.one(CLUSTER).get("minMasterVersion") == "1.36.0-gke.3712000"


def test_tpu7x_pools_attach_the_workload_policy_by_name_and_no_placement_type(dev_plan: PlanResult) -> None:
    policy = dev_plan.one(POLICY)
    for pool in [p for p in dev_plan.of_type(POOL) if p.name.startswith("cube-")]:
        assert pool.get("placementPolicy") == {"type": "", "policyName": policy.get("name")}
        assert pool.get("placementPolicy.tpuTopology") is None


def test_tpu_pools_wait_for_the_node_account_role_and_pin_the_image(dev_plan: PlanResult) -> None:
    role = dev_plan.one("gcp:projects/iAMMember:IAMMember", "node-account-role")
    pools = [p for p in dev_plan.of_type(POOL) if p.name.startswith("cube-")]
    assert pools
    for pool in [*pools, dev_plan.one(POOL, "system-pool")]:
        assert dev_plan.depends_on(pool, role), pool.name
        assert pool.get("nodeConfig.imageType") == IMAGE_TYPE == "COS_CONTAINERD"
    for pool in pools:
        # Under a workload policy GKE also fills in the placement type and topology.
        assert pool.ignore_changes == [*GKE_REPORTED, *GKE_FILLED_WITH_A_WORKLOAD_POLICY]


def test_the_apis_the_stack_writes_to_are_enabled(dev_plan: PlanResult) -> None:
    services = {r.get("service") for r in dev_plan.of_type("gcp:projects/service:Service")}
    assert {"monitoring.googleapis.com", "logging.googleapis.com", "container.googleapis.com"} <= services
    # Buckets are created, read and granted on; a Workload Identity pod bound to a Google service
    # account gets its token through the IAM Service Account Credentials API (google/kctf#194).
    assert {"storage.googleapis.com", "iamcredentials.googleapis.com"} <= services


def test_v5e_stacks_create_no_tpu7x_only_setting() -> None:
    for stack in ("saxml-v5e", "jetstream-v5e"):
        plan = engine.run_stack(stack)
        assert not plan.of_type("gcp:compute/previewFeature:PreviewFeature"), stack
        cluster = plan.one(CLUSTER)
        assert "sliceControllerConfig" not in (cluster.get("addonsConfig") or {}), stack
        assert cluster.get("releaseChannel.channel") == "REGULAR", stack
        assert cluster.get("minMasterVersion") == PLACEHOLDER_CHANNEL_DEFAULTS["REGULAR"], stack
        for pool in [p for p in plan.of_type(POOL) if p.name != "system-pool"]:
            assert pool.get("placementPolicy.type") == "COMPACT", (stack, pool.name)
