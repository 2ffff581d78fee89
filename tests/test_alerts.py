"""The TPU7x alert policies on GKE's slice and partition metrics (issue 63), the maintenance notices, and the
rule that an alert names only the labels its metric publishes."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from domain.metric_catalog import (
    BY_NAME,
    K8S_ENTITY_LABELS,
    K8S_NODE_POOL_LABELS,
    label_uses,
    lookup,
    metric_names,
    unpublished_labels,
)
from observability import alert_policy, alerts, tpu_alerts

ZONE, MACHINE, CLUSTER, NAMESPACE = "us-central1-ai1a", "tpu7x-standard-4t", "dev-gke", "llm-d-pd-disaggregation"
CHANNELS = ["projects/my-project/notificationChannels/123"]
BACKENDS = ("vllm-pd", "saxml", "jetstream", "none")

SLICE_STATE = "kubernetes.io/accelerator/slice/state"
PARTITION_STATE = "kubernetes.io/accelerator/partition/state"
FORMATIONS = "kubernetes.io/accelerator/slice/formation_durations"


def specs_for(backend: str = "vllm-pd", cluster_name: str | None = CLUSTER) -> list[dict[str, Any]]:
    return alerts.alert_specs(
        "my-project",
        "dev",
        NAMESPACE,
        CHANNELS,
        16,
        backend=backend,
        cluster_name=cluster_name,
        tpu_health=tpu_alerts.TpuHealth(ZONE, MACHINE) if backend in alerts.DYNAMIC_SLICING else None,
    )


def policy(name: str, cluster_name: str | None = CLUSTER) -> dict[str, Any]:
    (spec,) = [spec for spec in specs_for(cluster_name=cluster_name) if spec["name"] == name]
    return dict(spec["policy"])


def promql(name: str, cluster_name: str | None = CLUSTER) -> dict[str, Any]:
    (condition,) = policy(name, cluster_name)["conditions"]
    return dict(condition["condition_prometheus_query_language"])


# ---------------------------------------------------------------------------
# The catalog: the three metrics as the GKE system-metrics list publishes them
# ---------------------------------------------------------------------------
def test_slice_and_partition_metrics_are_catalogued_as_published() -> None:
    """Kind, unit, resource and labels of the rows of the GKE system-metrics list (BETA), and their PromQL names."""
    state, partition, formations = BY_NAME[SLICE_STATE], BY_NAME[PARTITION_STATE], BY_NAME[FORMATIONS]
    assert state.labels == ("state", "accelerator_type", "slice_topology", "block_id")
    assert state.resource_labels == K8S_ENTITY_LABELS
    assert partition.labels == (
        "state", "accelerator_type", "partition_topology", "partition_id", "slice_id", "block_id",
    )  # fmt: skip
    assert partition.resource_labels == K8S_NODE_POOL_LABELS
    assert formations.labels == ("end_state", "accelerator_type", "slice_topology", "block_id")
    assert formations.resource_labels == K8S_ENTITY_LABELS
    assert K8S_ENTITY_LABELS == (
        "project_id", "location", "cluster_name", "entity_type", "entity_namespace", "entity_name", "entity_uid",
    )  # fmt: skip
    assert K8S_NODE_POOL_LABELS == ("project_id", "location", "cluster_name", "node_pool_name")
    assert state.promql_name == "kubernetes_io:accelerator_slice_state"
    assert partition.promql_name == "kubernetes_io:accelerator_partition_state"
    assert formations.promql_name == "kubernetes_io:accelerator_slice_formation_durations"
    # A DISTRIBUTION reads as a histogram in PromQL: its _count counts formations.
    assert formations.instrument == "histogram"
    assert lookup("kubernetes_io:accelerator_slice_formation_durations_count") is formations
    assert lookup("kubernetes_io:accelerator_slice_state_count") is None  # a gauge has no _count
    for metric in (state, partition, formations):
        assert metric.kind == "gcp" and metric.confidence == "medium" and "BETA" in metric.caveat
        assert "https://cloud.google.com/monitoring/api/metrics_kubernetes" in metric.source
        # No published label names the Slice, its Workload or its namespace.
        assert not {"slice_name", "name", "workload", "namespace"} & set(metric.query_labels or ())


def test_every_metric_an_alert_reads_lists_its_labels() -> None:
    for backend in BACKENDS:
        for spec in specs_for(backend):
            for condition in spec["policy"]["conditions"]:
                query = condition.get("condition_prometheus_query_language", {}).get("query")
                for name in metric_names(query) if query else ():
                    metric = lookup(name)
                    assert metric is not None and metric.query_labels is not None, (spec["name"], name)


# ---------------------------------------------------------------------------
# The new policies
# ---------------------------------------------------------------------------
def test_slice_not_active_is_promql_on_the_state_metric() -> None:
    condition = promql("slice-not-active")
    assert condition["query"] == (
        "count by (entity_name, slice_topology, state) (max_over_time(kubernetes_io:accelerator_slice_state"
        '{monitored_resource="k8s_entity",cluster_name="dev-gke",state!~"ACTIVE|ACTIVATING"}[10m]) == 1) > 0'
    )
    assert condition["duration"] == "300s" and condition["evaluation_interval"] == "60s"
    assert condition["labels"] == {"severity": "error"}
    assert condition["disable_metric_validation"] is True
    whole = policy("slice-not-active")
    assert whole["severity"] == "ERROR"
    assert whole["display_name"] == "dev: TPU Slice not ACTIVE"
    assert whole["alert_strategy"] == {"auto_close": alert_policy.AUTO_CLOSE}  # PromQL: no notification rate limit
    for text in ("ACTIVE_DEGRADED", "DEACTIVATING", "without recording any event", "kubectl get slices -A"):
        assert text in whole["documentation"]["content"]
    # The lookback outlasts the duration: a state seen in one 60-s sample still fires.
    assert int(tpu_alerts.SLICE_LOOKBACK.removesuffix("m")) * 60 > int(tpu_alerts.SLICE_FOR.removesuffix("s"))


def test_slice_formation_failed_counts_failed_formations() -> None:
    condition = promql("slice-formation-failed")
    assert condition["query"] == (
        "sum by (slice_topology) (increase(kubernetes_io:accelerator_slice_formation_durations_count"
        '{monitored_resource="k8s_entity",cluster_name="dev-gke",end_state="FAILED"}[10m])) > 0'
    )
    assert condition["duration"] == "300s" and condition["labels"] == {"severity": "error"}
    assert policy("slice-formation-failed")["severity"] == "ERROR"


def test_partition_not_healthy_is_promql_on_the_partition_metric() -> None:
    condition = promql("tpu-partition-not-healthy")
    assert condition["query"] == (
        "count by (node_pool_name, partition_id, state) (kubernetes_io:accelerator_partition_state"
        '{monitored_resource="k8s_node_pool",cluster_name="dev-gke",state!="HEALTHY"} == 1) > 0'
    )
    assert condition["duration"] == "900s" and condition["labels"] == {"severity": "warning"}
    assert policy("tpu-partition-not-healthy")["severity"] == "WARNING"


def test_without_a_cluster_name_the_queries_select_by_resource_only() -> None:
    assert promql("slice-not-active", None)["query"] == (
        "count by (entity_name, slice_topology, state) (max_over_time(kubernetes_io:accelerator_slice_state"
        '{monitored_resource="k8s_entity",state!~"ACTIVE|ACTIVATING"}[10m]) == 1) > 0'
    )
    for name in ("slice-formation-failed", "tpu-partition-not-healthy"):
        assert "cluster_name" not in promql(name, None)["query"]


def test_the_event_alert_stays_for_what_no_metric_shows() -> None:
    whole = policy("slice-failed")
    (condition,) = whole["conditions"]
    log = condition["condition_matched_log"]["filter"]
    assert 'jsonPayload.reason=("AdmissionCheckUpdated" OR "FailedCreateSlice")' in log
    assert whole["alert_strategy"]["notification_rate_limit"]["period"] == alert_policy.LOG_RATE_LIMIT
    for text in ("FailedCreateSlice", "activation timeout", "names the Workload"):
        assert text in whole["documentation"]["content"]


def test_maintenance_alert_matches_host_and_infrastructure_notices() -> None:
    (condition,) = policy("tpu-maintenance-scheduled")["conditions"]
    assert condition["condition_matched_log"]["filter"].split("\n") == [
        'logName="projects/my-project/logs/cloudaudit.googleapis.com%2Fsystem_event"',
        f'resource.labels.zone="{ZONE}"',
        '((protoPayload.methodName="compute.instances.upcomingMaintenance"'
        ' AND protoPayload.metadata.maintenanceStatus="PENDING")'
        ' OR (protoPayload.methodName="compute.instances.upcomingInfraMaintenance"'
        ' AND NOT protoPayload.metadata.maintenanceStatus="ONGOING"'
        ' AND NOT protoPayload.status.message:"Maintenance window has completed"))',
    ]
    assert "upcomingInfraMaintenance" in policy("tpu-maintenance-scheduled")["documentation"]["content"]


def test_fixed_slice_backends_get_no_slice_policies() -> None:
    new = {"tpu-partition-not-healthy", "slice-not-active", "slice-formation-failed"}
    for backend in ("saxml", "jetstream"):
        assert not {spec["name"] for spec in specs_for(backend)} & new
    assert new <= {spec["name"] for spec in specs_for("none")}


def test_module_docstring_says_what_the_policies_read() -> None:
    doc = tpu_alerts.__doc__ or ""
    assert "are not metrics" not in doc  # slice and partition states are metrics now
    for text in (SLICE_STATE, PARTITION_STATE, FORMATIONS, "upcomingInfraMaintenance", "without a Kubernetes event"):
        assert text in " ".join(doc.split()), text


# ---------------------------------------------------------------------------
# Only published labels
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_alerts_name_only_published_labels(backend: str) -> None:
    assert alerts.label_errors(specs_for(backend)) == []


def test_a_label_the_metric_does_not_publish_is_refused() -> None:
    """A spec whose query names `slice_name` (no slice metric publishes it) or a matcher on `workload` fails."""
    (spec,) = [copy.deepcopy(s) for s in specs_for() if s["name"] == "slice-not-active"]
    condition = spec["policy"]["conditions"][0]["condition_prometheus_query_language"]
    condition["query"] = (
        "count by (slice_name, state) (kubernetes_io:accelerator_slice_state"
        '{monitored_resource="k8s_entity",workload="x",state="FAILED"} == 1) > 0'
    )
    assert alerts.label_errors([spec]) == [
        "slice-not-active: kubernetes_io:accelerator_slice_state publishes no label 'slice_name'",
        "slice-not-active: kubernetes_io:accelerator_slice_state publishes no label 'workload'",
    ]
    # A label of another metric's resource is no better: node_pool_name is the partition metric's.
    condition["query"] = "count by (node_pool_name) (kubernetes_io:accelerator_slice_state == 1)"
    assert alerts.label_errors([spec]) == [
        "slice-not-active: kubernetes_io:accelerator_slice_state publishes no label 'node_pool_name'"
    ]


def test_alert_specs_refuses_a_policy_with_an_unpublished_label(monkeypatch: pytest.MonkeyPatch) -> None:
    bad = 'count by (slice_name) (kubernetes_io:accelerator_slice_state{state!="ACTIVE"} == 1) > 0'
    monkeypatch.setattr(tpu_alerts, "slice_not_active_query", lambda cluster_name=None: bad)
    with pytest.raises(ValueError, match=r"slice-not-active: kubernetes_io:accelerator_slice_state .*'slice_name'"):
        specs_for()
    assert specs_for("jetstream")  # fixed-slice stacks do not build the slice policies


def test_label_uses_reads_matchers_groupings_and_created_labels() -> None:
    query = (
        'sum(rate(up{job="a"}[5m])) by (instance) '
        "and on (cluster) "
        'max by (job) (label_replace(vllm:num_requests_waiting{namespace="n"}, "role", "$1", "job", "(.*)"))'
    )
    assert label_uses(query) == {
        ("up", "job"),
        ("up", "instance"),  # the suffix form: `sum (...) by (...)`
        ("up", "cluster"),  # `on (...)` names its labels on every metric of the query
        ("vllm:num_requests_waiting", "cluster"),
        ("vllm:num_requests_waiting", "namespace"),
        ("vllm:num_requests_waiting", "job"),
    }
    assert unpublished_labels(query) == set()
    # A label label_replace creates may be grouped by; one it does not create may not.
    made = 'max by (role) (label_replace(up{job="a"}, "role", "$1", "job", "(.*)"))'
    assert unpublished_labels(made) == set()
    assert unpublished_labels(made.replace("by (role)", "by (roles)")) == {("up", "roles")}
    # Strings may hold braces and commas without being read as selectors.
    assert label_uses('up{job="a{b},c"}') == {("up", "job")}
    # A metric whose labels the catalog does not list accepts none (but a histogram bucket's `le`).
    assert unpublished_labels('sum by (le) (rate(vllm:time_to_first_token_seconds_bucket{job="a"}[5m]))') == {
        ("vllm:time_to_first_token_seconds_bucket", "job")
    }


# ---------------------------------------------------------------------------
# Recovery: a role below its groups, and Kueue's forced deletions (issue 63 item 4)
# ---------------------------------------------------------------------------
def recovery_specs(floors: dict[str, int], forced: bool) -> dict[str, dict[str, Any]]:
    found = alerts.alert_specs(
        "my-project", "dev", NAMESPACE, CHANNELS, 16, cluster_name=CLUSTER, group_floors=floors, forced_deletion=forced
    )
    return {spec["name"]: dict(spec["policy"]) for spec in found}


def test_a_role_below_its_groups_alerts_long_before_kueue_gives_up_on_it() -> None:
    """The floor of each role is its fixed groups or its autoscaler's min; the alert waits 15 minutes,
    while Kueue's recoveryTimeout (the first-load budget) would hold a broken group for hours."""
    found = recovery_specs({"prefill": 4, "decode": 2}, forced=False)
    (condition,) = found["groups-down"]["conditions"]
    query = condition["condition_prometheus_query_language"]
    assert query["duration"] == alerts.GROUPS_DOWN_FOR == "900s"
    selector = f'namespace="{NAMESPACE}",cluster="{CLUSTER}"'
    assert query["query"] == (
        f'label_replace((sum(up{{job="vllm-decode",{selector}}}) or vector(0)) < 2, "job", "vllm-decode", "", "")'
        f' or label_replace((sum(up{{job="vllm-prefill",{selector}}}) or vector(0)) < 4, "job", "vllm-prefill", "", "")'
    )
    assert "WaitForRecovery" in found["groups-down"]["documentation"]["content"]
    assert "pod-force-deleted" not in found


def test_roles_of_one_group_are_left_to_the_no_leaders_alert() -> None:
    assert "groups-down" not in recovery_specs({"prefill": 1, "decode": 1}, forced=False)
    (condition,) = recovery_specs({"prefill": 1, "decode": 3}, forced=False)["groups-down"]["conditions"]
    assert "vllm-prefill" not in condition["condition_prometheus_query_language"]["query"]


def test_each_pod_kueue_force_deletes_is_told() -> None:
    found = recovery_specs({"prefill": 1, "decode": 1}, forced=True)
    (condition,) = found["pod-force-deleted"]["conditions"]
    log_filter = condition["condition_matched_log"]["filter"].splitlines()
    assert log_filter == [
        'logName="projects/my-project/logs/events"',
        'jsonPayload.involvedObject.kind="Pod"',
        f'jsonPayload.involvedObject.namespace="{NAMESPACE}"',
        # kueue v0.19.2 pkg/controller/failurerecovery/pod_termination_controller.go KueueForcefulTerminationReason
        'jsonPayload.reason="KueueForcefullyDeleted"',
        f'resource.labels.cluster_name="{CLUSTER}"',
    ]
    assert found["pod-force-deleted"]["alert_strategy"]["notification_rate_limit"]
