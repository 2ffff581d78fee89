"""The observability bodies without Pulumi: PodMonitorings, the dashboard, the alert policies and the metric catalog."""

from __future__ import annotations

import copy
import inspect
import json
import re
from pathlib import Path
from typing import Any, cast

import pulumi_gcp as gcp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.ports import DECODE_VLLM_PORT, POOL_PORT
from domain.metric_catalog import (
    BY_NAME,
    CATALOG,
    NOT_SCRAPED,
    VLLM_JOBS,
    filter_metric_names,
    lookup,
    metric_names,
    promql_metric_names,
    unknown_metrics,
)
from domain.topology import CATALOG as TPU_CATALOG
from k8s import router
from observability import alerts, dashboard, pod_monitoring, tpu_alerts
from tests.gmp_schema import validate_pod_monitoring
from tests.test_jetstream_bodies import SINGLE, multi
from workloads import jetstream, smoke_job
from workloads.vllm_command import VllmServe
from workloads.vllm_pd import RolePlan, VllmPdArgs, lws_body

ROOT = Path(__file__).resolve().parent.parent
NAMESPACE = "llm-d-pd-disaggregation"
BACKENDS = ("vllm-pd", "saxml", "jetstream", "none")
POOLS = ["dev-tpu-1", "dev-tpu-2"]
CHANNELS = ["projects/my-project/notificationChannels/123", "projects/my-project/notificationChannels/456"]


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------
def by_name(bodies: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {body["metadata"]["name"]: body for body in bodies}


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def port_numbers(pod_spec: dict[str, Any]) -> dict[str, int]:
    """Named container ports of a pod (init containers included), name -> number."""
    containers = [*pod_spec.get("initContainers", []), *pod_spec["containers"]]
    return {port["name"]: port["containerPort"] for c in containers for port in c.get("ports", []) if "name" in port}


def vllm_lws(role: str) -> dict[str, Any]:
    plans = [
        RolePlan(VllmServe(name, "gs://weights/model", "model", 8, 1024, 1024, 8, "auto", False, "runai_streamer"),
                 replicas=1, topology="2x2x2")
        for name in ("prefill", "decode")
    ]  # fmt: skip
    args = VllmPdArgs(
        provider=cast(Any, None),  # the body functions never touch the provider
        namespace=NAMESPACE,
        guide="pd-disaggregation",
        model_label="model",
        generation=TPU_CATALOG["tpu7x"],
        machine_vcpus=224,
        machine_memory_gib=960,
        image="docker.io/vllm/vllm-tpu:v0.26.0",
        sidecar_image="ghcr.io/llm-d/llm-d-router-disagg-sidecar:v0.9.0",
        service_account="vllm-model-server",
        bucket="weights",
        log_level="INFO",
        local_queue="tpu",
        priority_class="dev-high",
        roles=plans,
        hf_token=None,
        force_delete_on_unreachable_host=True,
    )
    return lws_body(args, next(plan for plan in plans if plan.serve.role == role))


# Where the dev stack's TPU hosts are: what compose.py gives the dynamic-slicing backends.
ZONE, MACHINE = "us-central1-ai1a", "tpu7x-standard-4t"
DYNAMIC = ("vllm-pd", "none")


def all_specs() -> dict[str, dict[str, Any]]:
    return {
        backend: dashboard.dashboard_spec(
            "dev",
            backend,
            POOLS,
            cluster_name="dev-gke",
            namespace=NAMESPACE,
            hosts=dashboard.TpuHosts(ZONE, MACHINE) if backend in DYNAMIC else None,
        )
        for backend in BACKENDS
    }


def all_alerts() -> dict[str, list[dict[str, Any]]]:
    return {
        backend: alerts.alert_specs(
            "my-project",
            "dev",
            NAMESPACE,
            CHANNELS,
            16,
            backend=backend,
            cluster_name="dev-gke",
            tpu_health=tpu_alerts.TpuHealth(ZONE, MACHINE) if backend in DYNAMIC else None,
        )
        for backend in BACKENDS
    }


def alert_queries(specs: list[dict[str, Any]]) -> list[str]:
    return [
        condition["condition_prometheus_query_language"]["query"]
        for spec in specs
        for condition in spec["policy"]["conditions"]
        if "condition_prometheus_query_language" in condition
    ]


def chart_titles(spec: dict[str, Any]) -> list[str]:
    return [tile["widget"]["title"] for tile in spec["mosaicLayout"]["tiles"] if "xyChart" in tile["widget"]]


def chart(spec: dict[str, Any], title_part: str) -> dict[str, Any]:
    matches = [t["widget"] for t in spec["mosaicLayout"]["tiles"] if title_part in t["widget"]["title"]]
    assert len(matches) == 1, f"{title_part!r}: {len(matches)} widgets"
    return matches[0]


def dataset_queries(widget: dict[str, Any]) -> list[str]:
    return [
        ds["timeSeriesQuery"].get("prometheusQuery") or ds["timeSeriesQuery"]["timeSeriesFilter"]["filter"]
        for ds in widget["xyChart"]["dataSets"]
    ]


# ---------------------------------------------------------------------------
# PodMonitorings
# ---------------------------------------------------------------------------
def test_vllm_pd_scrapes_both_leader_roles_and_the_epp() -> None:
    bodies = by_name(pod_monitoring.pod_monitoring_bodies(NAMESPACE, "vllm-pd"))
    assert set(bodies) == {"vllm-prefill", "vllm-decode", "pd-disaggregation-epp"}
    for body in bodies.values():
        assert validate_pod_monitoring(body) == []
        assert body["metadata"]["namespace"] == NAMESPACE
        assert body["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "pulumi"
    endpoints = {name: body["spec"]["endpoints"] for name, body in bodies.items()}
    assert endpoints["vllm-prefill"] == [{"port": "modelserver", "path": "/metrics", "interval": "30s"}]
    assert endpoints["vllm-decode"] == [{"port": "vllm", "path": "/metrics", "interval": "30s"}]
    assert endpoints["pd-disaggregation-epp"] == [{"port": "metrics", "path": "/metrics", "interval": "30s"}]


@pytest.mark.parametrize(("role", "port"), [("prefill", POOL_PORT), ("decode", DECODE_VLLM_PORT)])
def test_vllm_monitorings_select_leaders_only_on_the_vllm_port(role: str, port: int) -> None:
    body = by_name(pod_monitoring.pod_monitoring_bodies(NAMESPACE, "vllm-pd"))[VLLM_JOBS[role]]
    selector = body["spec"]["selector"]["matchLabels"]
    template = vllm_lws(role)["spec"]["leaderWorkerTemplate"]
    assert selects(selector, template["leaderTemplate"]["metadata"]["labels"])
    assert not selects(selector, template["workerTemplate"]["metadata"]["labels"])  # workers serve no HTTP
    other = "decode" if role == "prefill" else "prefill"
    assert not selects(
        selector, vllm_lws(other)["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["metadata"]["labels"]
    )
    # The named port is vLLM's own HTTP port on the leader (8000 prefill, 8200 decode: the sidecar owns 8000).
    leader_ports = port_numbers(template["leaderTemplate"]["spec"])
    (endpoint,) = body["spec"]["endpoints"]
    assert leader_ports[endpoint["port"]] == port == pod_monitoring.VLLM_PORTS[role][1]
    vllm_container = template["leaderTemplate"]["spec"]["containers"][0]
    assert {p["name"]: p["containerPort"] for p in vllm_container["ports"]}[endpoint["port"]] == port


def test_epp_monitoring_matches_the_router() -> None:
    body = pod_monitoring.epp_body(NAMESPACE, "pd-disaggregation")
    assert body["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": "pd-disaggregation-epp"}
    assert pod_monitoring.EPP_PORT == ("metrics", 9090)
    router_source = (ROOT / "k8s" / "router.py").read_text()
    # The Router's Deployment: selector on the name label, the metrics port named `metrics`.
    assert router.epp_selector("pd-disaggregation") == body["spec"]["selector"]["matchLabels"]
    assert 'ContainerPortArgs(name="metrics", container_port=EPP_METRICS_PORT)' in router_source


def test_jetstream_monitoring_selects_serving_pods_on_port_9100() -> None:
    (body,) = pod_monitoring.pod_monitoring_bodies("jetstream", "jetstream")
    assert validate_pod_monitoring(body) == []
    selector = body["spec"]["selector"]["matchLabels"]
    (endpoint,) = body["spec"]["endpoints"]
    assert endpoint["port"] == "metrics" and pod_monitoring.JETSTREAM_PORT == ("metrics", 9100)
    # Single host: the Deployment's pods; the engine container declares `metrics` 9100.
    deployment = jetstream.deployment_body(SINGLE)
    assert selects(selector, deployment["spec"]["template"]["metadata"]["labels"])
    assert port_numbers(deployment["spec"]["template"]["spec"])["metrics"] == 9100
    # Pathways slice: the LWS leader (jax-tpu container), never the workers.
    template = jetstream.lws_body(multi("v5e", "4x8"))["spec"]["leaderWorkerTemplate"]
    assert selects(selector, template["leaderTemplate"]["metadata"]["labels"])
    assert not selects(selector, template["workerTemplate"]["metadata"]["labels"])
    assert port_numbers(template["leaderTemplate"]["spec"])["metrics"] == 9100


@pytest.mark.parametrize("backend", ["saxml", "none"])
def test_saxml_and_none_scrape_nothing(backend: str) -> None:
    assert pod_monitoring.pod_monitoring_bodies(NAMESPACE, backend) == []
    assert "no Prometheus endpoint" in NOT_SCRAPED["saxml"]


def test_unknown_backend_is_refused() -> None:
    with pytest.raises(ValueError, match="backend must be one of"):
        pod_monitoring.pod_monitoring_bodies(NAMESPACE, "vllm")
    with pytest.raises(ValueError, match="vLLM role"):
        pod_monitoring.vllm_leader_body(NAMESPACE, "worker")


def test_kueue_is_documented_as_not_scraped() -> None:
    assert "8443" in NOT_SCRAPED["kueue"] and "https" in NOT_SCRAPED["kueue"].lower()
    queries = [q for spec in all_specs().values() for q in dashboard.spec_queries(spec)]
    queries += [q for specs in all_alerts().values() for q in alert_queries(specs)]
    assert not any("kueue" in query for query in queries)


def _set(path: str, value: Any) -> Any:
    def mutate(body: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = body
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        if value is _DELETE:
            del node[last]
        else:
            node[last] = value

    return mutate


_DELETE = object()
BROKEN = {
    "empty matchLabels": _set("spec.selector.matchLabels", {}),
    "no endpoints": _set("spec.endpoints", []),
    "port 0": _set("spec.endpoints.0.port", 0),
    "port 70000": _set("spec.endpoints.0.port", 70000),
    "empty port name": _set("spec.endpoints.0.port", ""),
    "fractional port": _set("spec.endpoints.0.port", 8000.5),
    "relative path": _set("spec.endpoints.0.path", "metrics"),
    "unitless interval": _set("spec.endpoints.0.interval", "30"),
    "day interval": _set("spec.endpoints.0.interval", "1d"),
    "ftp scheme": _set("spec.endpoints.0.scheme", "ftp"),
    "timeout above interval": _set("spec.endpoints.0.timeout", "1m"),
    "unknown endpoint field": _set("spec.endpoints.0.portName", "metrics"),
    "unknown spec field": _set("spec.podSelector", {"a": "b"}),
    "wrong kind": _set("kind", "PodMonitor"),
    "wrong group": _set("apiVersion", "monitoring.coreos.com/v1"),
    "no namespace": _set("metadata.namespace", _DELETE),
    "no path": _set("spec.endpoints.0.path", _DELETE),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_schema_rejects_broken_bodies(case: str) -> None:
    body = copy.deepcopy(pod_monitoring.vllm_leader_body(NAMESPACE, "prefill"))
    BROKEN[case](body)
    assert validate_pod_monitoring(body) != []


def test_schema_takes_pulumi_floats_and_numeric_ports() -> None:
    body = pod_monitoring.pod_monitoring_body(
        "x", NAMESPACE, {"a": "b"}, [{"port": 8000.0, "path": "/", "interval": "1m", "timeout": "30s"}]
    )
    assert validate_pod_monitoring(body) == []
    assert validate_pod_monitoring(json.loads(json.dumps(body))) == []


# ---------------------------------------------------------------------------
# Dashboard
# ---------------------------------------------------------------------------
REQUIRED_VLLM_CHARTS = (
    "TPU duty cycle by node pool",
    "TPU HBM used and total by node pool",
    "Requests finished per second by role",
    "Time to first token p50 / p90 by role",
    "Inter-token latency p50 / p90 by role",
    "Queue: waiting and running requests by role",
    "KV-cache usage by role",
    "Router requests and errors per second",
)


def test_vllm_dashboard_has_every_required_chart() -> None:
    spec = all_specs()["vllm-pd"]
    titles = chart_titles(spec)
    for required in REQUIRED_VLLM_CHARTS:
        assert any(title.startswith(required) for title in titles), required
    for latency in ("Time to first token", "Inter-token latency"):
        queries = dataset_queries(chart(spec, latency))
        assert all(q.startswith(f"histogram_quantile({p},") for p, q in zip(("0.5", "0.9"), queries, strict=True))
        assert all("sum by (job, le)" in q for q in queries)
    router = dataset_queries(chart(spec, "Router requests and errors"))
    assert "inference_objective_request_total" in router[0] and "inference_objective_request_error_total" in router[1]
    queue = dataset_queries(chart(spec, "Queue: waiting"))
    assert "vllm:num_requests_waiting" in queue[0]


def test_tpu_charts_group_by_node_pool_and_read_gcp_metrics_by_filter() -> None:
    spec = all_specs()["none"]
    for title in ("TPU duty cycle", "TensorCore utilization", "TPU HBM"):
        for ds in chart(spec, title)["xyChart"]["dataSets"]:
            series = ds["timeSeriesQuery"]["timeSeriesFilter"]
            assert 'resource.type="k8s_node"' in series["filter"]
            assert 'resource.label."cluster_name"="dev-gke"' in series["filter"]
            assert series["aggregation"]["groupByFields"] == [dashboard.NODE_POOL_GROUP]
    availability = chart(spec, "Multi-host TPU slice availability")["xyChart"]["dataSets"][0]
    series = availability["timeSeriesQuery"]["timeSeriesFilter"]
    assert 'resource.label."node_pool_name"=one_of("dev-tpu-1", "dev-tpu-2")' in series["filter"]
    assert series["aggregation"]["perSeriesAligner"] == "ALIGN_FRACTION_TRUE"
    without_pools = dashboard.dashboard_spec("dev", "none", [])
    assert not any("availability" in title for title in chart_titles(without_pools))


def test_jetstream_dashboard_reads_jetstream_metrics() -> None:
    queries = dashboard.spec_queries(all_specs()["jetstream"])
    names = set().union(*(metric_names(q) for q in queries))
    assert {"jetstream_prefill_backlog_size", "jetstream_time_to_first_token_bucket"} <= names
    assert not any(name.startswith("vllm:") for name in names)


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_dashboard_metric_is_in_the_catalog(backend: str) -> None:
    queries = dashboard.spec_queries(all_specs()[backend])
    assert queries
    for query in queries:
        assert metric_names(query), query
        assert unknown_metrics(query) == set(), query


@pytest.mark.parametrize("backend", BACKENDS)
def test_dashboard_layout_is_a_valid_12_column_mosaic(backend: str) -> None:
    spec = all_specs()[backend]
    assert spec["mosaicLayout"]["columns"] == 12
    assert_no_overlap(spec["mosaicLayout"]["tiles"], 12)
    json.dumps(spec)  # what the provider receives


def assert_no_overlap(tiles: list[dict[str, Any]], columns: int) -> None:
    cells: set[tuple[int, int]] = set()
    for tile in tiles:
        x, y = tile.get("xPos", 0), tile.get("yPos", 0)
        assert x >= 0 and y >= 0 and tile["width"] >= 1 and tile["height"] >= 1
        assert x + tile["width"] <= columns, tile["widget"]["title"]
        area = {(x + dx, y + dy) for dx in range(tile["width"]) for dy in range(tile["height"])}
        assert not cells & area, f"{tile['widget']['title']} overlaps another tile"
        cells |= area


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 12), st.integers(1, 6)), min_size=1, max_size=25))
def test_layout_never_overlaps(sizes: list[tuple[int, int]]) -> None:
    widgets = [dashboard.Text(f"t{i}", "x", width=w, height=h) for i, (w, h) in enumerate(sizes)]
    tiles = [tile.to_json() for tile in dashboard.layout(widgets)]
    assert len(tiles) == len(widgets)
    assert_no_overlap(tiles, 12)


def test_layout_refuses_a_widget_wider_than_the_grid() -> None:
    with pytest.raises(ValueError, match="does not fit"):
        dashboard.layout([dashboard.Text("wide", "x", width=13)])


def test_display_name_comes_from_the_prefix_and_zero_positions_are_omitted() -> None:
    spec = dashboard.dashboard_spec("blue-7", "vllm-pd", POOLS)
    assert spec["displayName"] == "blue-7: TPU serving"
    first = spec["mosaicLayout"]["tiles"][0]
    assert "xPos" not in first and "yPos" not in first
    with pytest.raises(ValueError, match="backend"):
        dashboard.dashboard_spec("dev", "tgi", POOLS)


def test_scope_reaches_every_promql_query() -> None:
    for backend in ("vllm-pd", "jetstream"):
        for query in dashboard.spec_queries(all_specs()[backend]):
            # A TPU VM's health is a Compute Engine metric: no cluster or namespace, scoped by zone and type.
            if "infra_health" in query:
                assert f'location="{ZONE}"' in query and f'machine_type="{MACHINE}"' in query
            elif "metric.type" not in query:
                assert query.count('cluster="dev-gke"') == query.count("{"), query
                assert query.count(f'namespace="{NAMESPACE}"') == query.count("{"), query
    unscoped = dashboard.spec_queries(dashboard.dashboard_spec("dev", "vllm-pd", POOLS))
    assert not any("cluster=" in q or "namespace=" in q for q in unscoped)


def test_dashboard_url_takes_the_last_segment_of_the_resource_id() -> None:
    url = dashboard.dashboard_url("projects/123456/dashboards/0f1e2d3c-aaaa", "my-project")
    assert url == "https://console.cloud.google.com/monitoring/dashboards/builder/0f1e2d3c-aaaa?project=my-project"
    with pytest.raises(ValueError):
        dashboard.dashboard_url("", "my-project")


# ---------------------------------------------------------------------------
# Alerts
# ---------------------------------------------------------------------------
def _params(function: Any) -> set[str]:
    return set(inspect.signature(function).parameters) - {"__self__", "self", "resource_name", "opts", "__props__"}


def test_policies_are_alert_policy_arguments() -> None:
    policy_args = _params(gcp.monitoring.AlertPolicy._internal_init)
    condition_args = _params(gcp.monitoring.AlertPolicyConditionArgs.__init__)
    promql_args = _params(gcp.monitoring.AlertPolicyConditionConditionPrometheusQueryLanguageArgs.__init__)
    log_args = _params(gcp.monitoring.AlertPolicyConditionConditionMatchedLogArgs.__init__)
    for specs in all_alerts().values():
        for spec in specs:
            policy = spec["policy"]
            assert set(policy) <= policy_args
            assert re.fullmatch(r"[a-z0-9-]+", spec["name"])
            for condition in policy["conditions"]:
                assert set(condition) <= condition_args
                if "condition_prometheus_query_language" in condition:
                    assert set(condition["condition_prometheus_query_language"]) <= promql_args
                else:
                    assert set(condition["condition_matched_log"]) <= log_args


def test_vllm_alerts_cover_leaders_queue_idle_tpus_and_the_smoke_test() -> None:
    specs = {spec["name"]: spec["policy"] for spec in all_alerts()["vllm-pd"]}
    assert set(specs) == {"no-ready-leaders", "queue-backlog", "tpu-idle-while-queued", "smoke-test-failed", *HEALTH}
    for policy in specs.values():
        assert policy["display_name"].startswith("dev: ")
        assert policy["notification_channels"] == CHANNELS
        assert policy["documentation"]["content"]
    leaders = specs["no-ready-leaders"]["conditions"][0]["condition_prometheus_query_language"]["query"]
    for job in ("vllm-prefill", "vllm-decode"):  # a role with no target at all still counts as zero
        assert f'label_replace(vector(0), "job", "{job}", "", "")' in leaders
    queue = specs["queue-backlog"]["conditions"][0]["condition_prometheus_query_language"]["query"]
    assert queue.endswith("> 16") and "vllm:num_requests_waiting" in queue
    idle = specs["tpu-idle-while-queued"]["conditions"][0]["condition_prometheus_query_language"]["query"]
    assert "kubernetes_io:node_accelerator_duty_cycle" in idle and "and on ()" in idle
    assert 'cluster_name="dev-gke"' in idle
    log = specs["smoke-test-failed"]["conditions"][0]["condition_matched_log"]["filter"]
    assert 'jsonPayload.involvedObject.name="serving-smoke-test"' in log
    assert f'jsonPayload.involvedObject.namespace="{NAMESPACE}"' in log
    assert 'logName="projects/my-project/logs/events"' in log
    assert specs["smoke-test-failed"]["alert_strategy"]["notification_rate_limit"]["period"] == "300s"


# The policies about the hardware under the slices: PromQL on metrics, then log-match on events and audit logs.
METRIC_HEALTH = ("tpu-host-unhealthy", "tpu-partition-not-healthy", "slice-not-active", "slice-formation-failed")
LOG_HEALTH = ("slice-failed", "tpu-maintenance-scheduled", "group-pending-no-fit")
HEALTH = METRIC_HEALTH + LOG_HEALTH


def test_cube_stacks_are_alerted_on_the_hardware_under_their_slices() -> None:
    """Issue 45: an UNHEALTHY TPU VM per sub-block, a Slice that failed or never became ACTIVE, a host
    maintenance announced, and a Workload Kueue cannot place; fixed-slice backends get none of them (the
    slice and partition metrics of issue 63 are checked in tests/test_alerts.py)."""
    specs = {spec["name"]: spec["policy"] for spec in all_alerts()["vllm-pd"]}
    host = specs["tpu-host-unhealthy"]["conditions"][0]["condition_prometheus_query_language"]["query"]
    assert host.startswith("count by (block_id, subblock_id) (compute_googleapis_com:instance_tpu_infra_health{")
    assert f'health_status="UNHEALTHY",machine_type="{MACHINE}",location="{ZONE}"' in host
    assert BY_NAME["compute.googleapis.com/instance/tpu/infra_health"].promql_name in host
    logs = {name: specs[name]["conditions"][0]["condition_matched_log"]["filter"] for name in LOG_HEALTH}
    # The slice controller's event reasons and Kueue's pending reason, as their sources spell them.
    assert 'jsonPayload.reason=("AdmissionCheckUpdated" OR "FailedCreateSlice")' in logs["slice-failed"]
    assert 'jsonPayload.message:"to \\"Retry\\""' in logs["slice-failed"]
    assert 'protoPayload.methodName="compute.instances.upcomingMaintenance"' in logs["tpu-maintenance-scheduled"]
    assert f'resource.labels.zone="{ZONE}"' in logs["tpu-maintenance-scheduled"]
    assert 'jsonPayload.reason=("Pending")' in logs["group-pending-no-fit"]
    assert f'jsonPayload.involvedObject.namespace="{NAMESPACE}"' in logs["group-pending-no-fit"]
    for name in HEALTH:
        assert specs[name]["documentation"]["content"]
    for name in LOG_HEALTH:
        assert specs[name]["alert_strategy"]["notification_rate_limit"]["period"] == "300s"
    for backend in ("saxml", "jetstream"):
        assert not {spec["name"] for spec in all_alerts()[backend]} & set(HEALTH)


def test_cube_dashboards_chart_host_health_per_sub_block_and_the_slices() -> None:
    for backend, spec in all_specs().items():
        widgets = [tile["widget"] for tile in spec["mosaicLayout"]["tiles"]]
        health = [w for w in widgets if "by health per sub-block" in w["title"]]
        slices = [w for w in widgets if "logsPanel" in w]
        if backend in DYNAMIC:
            (chart,) = health
            query = chart["xyChart"]["dataSets"][0]["timeSeriesQuery"]["prometheusQuery"]
            assert query.startswith("count by (subblock_id, health_status) (compute_googleapis_com:")
            assert unknown_metrics(query) == set()
            (panel,) = slices
            assert 'jsonPayload.involvedObject.kind="Workload"' in panel["logsPanel"]["filter"]
            assert '"FailedCreateSlice"' in panel["logsPanel"]["filter"]
        else:
            assert health == [] and slices == []


def test_smoke_job_name_matches_the_workload() -> None:
    assert alerts.SMOKE_JOB == smoke_job.JOB_NAME


@pytest.mark.parametrize("backend", BACKENDS)
def test_alerts_read_only_catalog_metrics(backend: str) -> None:
    for query in alert_queries(all_alerts()[backend]):
        assert metric_names(query), query
        assert unknown_metrics(query) == set(), query


def _seconds(duration: str) -> int:
    assert re.fullmatch(r"\d+s", duration), duration
    return int(duration[:-1])


def test_alert_durations_are_sensible() -> None:
    for specs in all_alerts().values():
        for spec in specs:
            policy = spec["policy"]
            assert 600 <= _seconds(policy["alert_strategy"]["auto_close"]) <= 7 * 86400
            for condition in policy["conditions"]:
                promql = condition.get("condition_prometheus_query_language")
                if promql is None:
                    continue
                assert 300 <= _seconds(promql["duration"]) <= 3600  # sustained, not a blip; not hours late
                assert _seconds(promql["evaluation_interval"]) <= _seconds(promql["duration"])
                assert promql["disable_metric_validation"] is True  # created before the first scrape


def test_alert_inputs_are_checked_and_quiet_backends_get_no_policies() -> None:
    assert all_alerts()["saxml"] == []
    assert [spec["name"] for spec in all_alerts()["none"]] == list(HEALTH)  # the cubes' hardware only
    with pytest.raises(ValueError, match="notificationChannels"):
        alerts.alert_specs("p", "dev", NAMESPACE, ["my-channel"], 16)
    with pytest.raises(ValueError, match="queue_threshold"):
        alerts.alert_specs("p", "dev", NAMESPACE, CHANNELS, 0)
    without_smoke = alerts.alert_specs("p", "dev", NAMESPACE, [], 16, smoke_test=False)
    assert [spec["name"] for spec in without_smoke] == ["no-ready-leaders", "queue-backlog", "tpu-idle-while-queued"]
    assert all(spec["policy"]["notification_channels"] == [] for spec in without_smoke)


# ---------------------------------------------------------------------------
# Catalog and the metric extractor
# ---------------------------------------------------------------------------
def test_catalog_entries_are_complete_and_unique() -> None:
    assert len(BY_NAME) == len(CATALOG)
    for metric in CATALOG:
        assert metric.kind in ("prometheus", "gcp")
        assert metric.unit and metric.description
        assert "http" in metric.source or ".py" in metric.source, metric.name
        if metric.kind == "gcp":
            assert metric.name.startswith(("kubernetes.io/", "compute.googleapis.com/instance/tpu/"))
    assert (
        BY_NAME["kubernetes.io/node/accelerator/duty_cycle"].promql_name == "kubernetes_io:node_accelerator_duty_cycle"
    )
    assert BY_NAME["vllm:num_requests_waiting"].promql_name == "vllm:num_requests_waiting"


def test_every_catalog_entry_is_read_somewhere() -> None:
    queries = [q for spec in all_specs().values() for q in dashboard.spec_queries(spec)]
    queries += [q for specs in all_alerts().values() for q in alert_queries(specs)]
    read = {cast(Any, lookup(name)).name for query in queries for name in metric_names(query)}
    assert read == set(BY_NAME)


def test_metric_name_extraction() -> None:
    query = (
        'histogram_quantile(0.9, sum by (job, le) (rate(vllm:time_to_first_token_seconds_bucket{job=~"a|b"}[5m]))) '
        "/ clamp_min(sum without (instance) (x_total offset 5m), 1e-9) "
        'or label_replace(vector(0), "job", "up", "", "") and on () max(kubernetes_io:node_accelerator_duty_cycle)'
    )
    assert promql_metric_names(query) == {
        "vllm:time_to_first_token_seconds_bucket",
        "x_total",
        "kubernetes_io:node_accelerator_duty_cycle",
    }
    assert filter_metric_names('metric.type="kubernetes.io/node/accelerator/duty_cycle" resource.type="k8s_node"') == {
        "kubernetes.io/node/accelerator/duty_cycle"
    }
    assert lookup("vllm:time_to_first_token_seconds_bucket") is BY_NAME["vllm:time_to_first_token_seconds"]
    assert lookup("vllm:num_requests_waiting_bucket") is None  # a gauge has no buckets
    assert unknown_metrics("sum(rate(vllm:gpu_cache_usage_perc[5m]))") == {"vllm:gpu_cache_usage_perc"}
