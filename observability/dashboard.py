"""One Cloud Monitoring dashboard per stack: TPU utilization and the serving backend's health.

The dashboard is generated from typed widgets (`Chart`, `Text`, laid out as
`Tile`s on a 12-column mosaic) so its JSON cannot drift from the metric catalog:
every query reads only metrics domain/metric_catalog.py lists, which the
tests prove by extracting them from each query.

Two query languages, by where the data lives:

- GKE system metrics (`kubernetes.io/...`) use Monitoring filters
  (`timeSeriesFilter`), which can group by monitored-resource and metadata labels.
- Scraped application metrics use PromQL (`prometheusQuery`), selected by the
  PodMonitoring job names (observability/pod_monitoring.py).

Grouping TPU node metrics by node pool: the `k8s_node` monitored resource only
has the labels project_id, location, cluster_name and node_name; the node pool
is not one of them. Cloud Monitoring carries a node's Kubernetes labels as
metadata user labels of its `k8s_node` series, so the charts group by
`metadata.user_labels."cloud.google.com/gke-nodepool"` (the label GKE puts on
every node); that metadata is not verified against a live project. Should it be
missing, grouping yields one line for all TPU nodes rather than nothing (no
chart filters on it). The per-pool slice availability uses
the `k8s_node_pool` resource's own `node_pool_name` label and the stack's pools.

Kueue is not scraped (see NOT_SCRAPED in the catalog), so there is no Kueue chart.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_gcp as gcp

from domain.metric_catalog import BY_NAME, DEFAULT_GUIDE, JETSTREAM_JOB, NOT_SCRAPED, VLLM_JOBS, epp_job

COLUMNS = 12
BACKENDS = ("vllm-pd", "saxml", "jetstream", "none")
ALIGNMENT = "60s"
RATE_WINDOW = "5m"
NODE_POOL_GROUP = 'metadata.user_labels."cloud.google.com/gke-nodepool"'
CONSOLE = "https://console.cloud.google.com/monitoring/dashboards/builder"


# ---------------------------------------------------------------------------
# Typed widgets
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class PromQL:
    """A PromQL data set (`timeSeriesQuery.prometheusQuery`)."""

    query: str
    unit: str = ""  # unitOverride, a UCUM unit such as "s" or "1"

    def to_json(self) -> dict[str, Any]:
        query: dict[str, Any] = {"prometheusQuery": self.query}
        if self.unit:
            query["unitOverride"] = self.unit
        return {"timeSeriesQuery": query, "plotType": "LINE", "minAlignmentPeriod": ALIGNMENT, "targetAxis": "Y1"}

    @property
    def text(self) -> str:
        return self.query


@dataclass(frozen=True)
class MonitoringFilter:
    """A Cloud Monitoring filter data set (`timeSeriesQuery.timeSeriesFilter`) with its aggregation."""

    filter: str
    aligner: str = "ALIGN_MEAN"
    reducer: str = "REDUCE_MEAN"
    group_by: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        aggregation: dict[str, Any] = {
            "alignmentPeriod": ALIGNMENT,
            "perSeriesAligner": self.aligner,
            "crossSeriesReducer": self.reducer,
        }
        if self.group_by:
            aggregation["groupByFields"] = list(self.group_by)
        return {
            "timeSeriesQuery": {"timeSeriesFilter": {"filter": self.filter, "aggregation": aggregation}},
            "plotType": "LINE",
            "minAlignmentPeriod": ALIGNMENT,
            "targetAxis": "Y1",
        }

    @property
    def text(self) -> str:
        return self.filter


DataSet = PromQL | MonitoringFilter


@dataclass(frozen=True)
class Chart:
    title: str
    datasets: tuple[DataSet, ...]
    y_label: str = ""
    width: int = 6
    height: int = 4

    def to_json(self) -> dict[str, Any]:
        y_axis: dict[str, Any] = {"scale": "LINEAR"}
        if self.y_label:
            y_axis["label"] = self.y_label
        return {
            "title": self.title,
            "xyChart": {
                "dataSets": [dataset.to_json() for dataset in self.datasets],
                "chartOptions": {"mode": "COLOR"},
                "yAxis": y_axis,
            },
        }


@dataclass(frozen=True)
class Text:
    title: str
    content: str  # Markdown
    width: int = COLUMNS
    height: int = 2

    def to_json(self) -> dict[str, Any]:
        return {"title": self.title, "text": {"content": self.content, "format": "MARKDOWN"}}


@dataclass(frozen=True)
class Logs:
    """A logs panel (`logsPanel`): entries of one Logging filter, newest first."""

    title: str
    filter: str
    width: int = 6
    height: int = 4

    def to_json(self) -> dict[str, Any]:
        return {"title": self.title, "logsPanel": {"filter": self.filter}}


Widget = Chart | Text | Logs


@dataclass(frozen=True)
class Tile:
    x: int
    y: int
    width: int
    height: int
    widget: Widget

    def to_json(self) -> dict[str, Any]:
        tile: dict[str, Any] = {"width": self.width, "height": self.height, "widget": self.widget.to_json()}
        # The API omits zero positions from what it returns; leaving them out avoids a perpetual diff.
        if self.x:
            tile["xPos"] = self.x
        if self.y:
            tile["yPos"] = self.y
        return tile


def layout(widgets: Sequence[Widget], columns: int = COLUMNS) -> list[Tile]:
    """Pack widgets left to right into rows of `columns`; a widget that does not fit starts a new row."""
    tiles: list[Tile] = []
    x = y = row_height = 0
    for widget in widgets:
        if not 1 <= widget.width <= columns:
            raise ValueError(f"{widget.title!r}: width {widget.width} does not fit {columns} columns")
        if x + widget.width > columns:
            x, y, row_height = 0, y + row_height, 0
        tiles.append(Tile(x, y, widget.width, widget.height, widget))
        x += widget.width
        row_height = max(row_height, widget.height)
    return tiles


# ---------------------------------------------------------------------------
# Queries
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Scope:
    """Which series the dashboard reads: the stack's cluster and serving namespace, when known."""

    cluster_name: str | None = None
    namespace: str | None = None
    guide: str = DEFAULT_GUIDE

    def prom(self, **matchers: str) -> str:
        """A PromQL label selector: `job` (regex when it has `|`), plus cluster and namespace."""
        parts = []
        job = matchers.pop("job", None)
        if job is not None:
            parts.append(f'job=~"{job}"' if "|" in job else f'job="{job}"')
        parts += [f'{key}="{value}"' for key, value in matchers.items()]
        if self.cluster_name:
            parts.append(f'cluster="{self.cluster_name}"')
        if self.namespace:
            parts.append(f'namespace="{self.namespace}"')
        return "{" + ",".join(parts) + "}"

    def gcp(self, metric_type: str, resource_type: str, *extra: str) -> str:
        terms = [f'metric.type="{metric_type}"', f'resource.type="{resource_type}"', *extra]
        if self.cluster_name:
            terms.append(f'resource.label."cluster_name"="{self.cluster_name}"')
        return " ".join(terms)


def _quantile(q: float, metric: str, selector: str, by: str) -> str:
    group = f"{by}, le" if by else "le"
    return f"histogram_quantile({q}, sum by ({group}) (rate({metric}_bucket{selector}[{RATE_WINDOW}])))"


def tpu_widgets(scope: Scope, node_pools: Sequence[str]) -> list[Widget]:
    """TPU charts from GKE system metrics: every backend runs on TPU node pools."""

    def node_metric(metric: str, reducer: str = "REDUCE_MEAN") -> MonitoringFilter:
        return MonitoringFilter(
            scope.gcp(f"kubernetes.io/node/accelerator/{metric}", "k8s_node"),
            aligner="ALIGN_MEAN",
            reducer=reducer,
            group_by=(NODE_POOL_GROUP,),
        )

    widgets: list[Widget] = [
        Chart("TPU duty cycle by node pool (mean over chips, %)", (node_metric("duty_cycle"),), "percent"),
        Chart(
            "TensorCore utilization by node pool (mean over chips, %)",
            (node_metric("tensorcore_utilization"),),
            "percent",
        ),
        Chart(
            "TPU HBM used and total by node pool (bytes)",
            (node_metric("memory_used", "REDUCE_SUM"), node_metric("memory_total", "REDUCE_SUM")),
            "bytes",
        ),
    ]
    if node_pools:
        pools = ", ".join(f'"{pool}"' for pool in node_pools)
        widgets.append(
            Chart(
                "Multi-host TPU slice availability by node pool (1 = every VM up)",
                (
                    MonitoringFilter(
                        scope.gcp(
                            "kubernetes.io/node_pool/multi_host/available",
                            "k8s_node_pool",
                            f'resource.label."node_pool_name"=one_of({pools})',
                        ),
                        aligner="ALIGN_FRACTION_TRUE",
                        reducer="REDUCE_MEAN",
                        group_by=('resource.label."node_pool_name"',),
                    ),
                ),
                "fraction",
            )
        )
    return widgets


@dataclass(frozen=True)
class TpuHosts:
    """Where a dynamic-slicing stack's TPU hosts are: the zone and the machine type."""

    zone: str
    machine_type: str


# The slice controller's events on a Workload: Slices created, the admission check moving between
# Pending, Ready and Retry, a Slice it failed to create (AI-Hypercomputer/xpk slice/internal/controller/
# workload_controller.go). Slice states are not a metric here (no kube-state-metrics).
SLICE_EVENTS = ("SlicesCreated", "AdmissionCheckUpdated", "FailedCreateSlice")


def health_widgets(scope: Scope, hosts: TpuHosts) -> list[Widget]:
    """Host health per reservation sub-block, and the Slices' lifecycle (issue 45)."""
    health = BY_NAME["compute.googleapis.com/instance/tpu/infra_health"].promql_name
    selector = f'{{machine_type="{hosts.machine_type}",location="{hosts.zone}"}}'
    reasons = " OR ".join(f'"{reason}"' for reason in SLICE_EVENTS)
    terms = ['logName:"/logs/events"', 'jsonPayload.involvedObject.kind="Workload"', f"jsonPayload.reason=({reasons})"]
    if scope.cluster_name:
        terms.append(f'resource.labels.cluster_name="{scope.cluster_name}"')
    return [
        Chart(
            "TPU VMs by health per sub-block (infra_health; subblock_id is a hashed id)",
            (PromQL(f"count by (subblock_id, health_status) ({health}{selector})", "1"),),
            "VMs",
        ),
        Logs("Slice lifecycle: the slice controller's events on Workloads", "\n".join(terms)),
    ]


def vllm_widgets(scope: Scope) -> list[Widget]:
    roles = "|".join(VLLM_JOBS[role] for role in ("prefill", "decode"))
    sel = scope.prom(job=roles)
    epp = scope.prom(job=epp_job(scope.guide))
    pool = scope.prom(job=epp_job(scope.guide), name=scope.guide)
    return [
        Text(
            "vLLM prefill/decode",
            f"Leaders only: `job` is `{VLLM_JOBS['prefill']}` or `{VLLM_JOBS['decode']}` (one PodMonitoring per "
            f"role). Router charts read the endpoint picker (`{epp_job(scope.guide)}`), which runs with "
            "`--metrics-endpoint-auth=false` so Managed Prometheus can scrape it.",
            height=1,
        ),
        Chart("Serving leaders up by role", (PromQL(f"sum by (job) (up{sel})"),), "leaders"),
        Chart(
            "Requests finished per second by role",
            (PromQL(f"sum by (job) (rate(vllm:request_success_total{sel}[{RATE_WINDOW}]))"),),
            "req/s",
        ),
        _latency_chart("Time to first token p50 / p90 by role", "vllm:time_to_first_token_seconds", sel, "job"),
        _latency_chart("Inter-token latency p50 / p90 by role", "vllm:inter_token_latency_seconds", sel, "job"),
        Chart(
            "Queue: waiting and running requests by role",
            (
                PromQL(f"sum by (job) (vllm:num_requests_waiting{sel})"),
                PromQL(f"sum by (job) (vllm:num_requests_running{sel})"),
            ),
            "requests",
        ),
        Chart(
            "KV-cache usage by role (mean and max over leaders)",
            (
                PromQL(f"avg by (job) (vllm:kv_cache_usage_perc{sel})", "1"),
                PromQL(f"max by (job) (vllm:kv_cache_usage_perc{sel})", "1"),
            ),
            "ratio",
        ),
        Chart(
            "Tokens per second by role (prompt, generated)",
            (
                PromQL(f"sum by (job) (rate(vllm:prompt_tokens_total{sel}[{RATE_WINDOW}]))"),
                PromQL(f"sum by (job) (rate(vllm:generation_tokens_total{sel}[{RATE_WINDOW}]))"),
            ),
            "tokens/s",
        ),
        Chart(
            "Router requests and errors per second",
            (
                PromQL(f"sum(rate(inference_objective_request_total{epp}[{RATE_WINDOW}]))"),
                PromQL(f"sum(rate(inference_objective_request_error_total{epp}[{RATE_WINDOW}]))"),
            ),
            "req/s",
        ),
        Chart(
            "InferencePool: ready pods and average queue (router's view)",
            (
                PromQL(f"max by (name) (inference_pool_ready_pods{pool})"),
                PromQL(f"max by (name) (inference_pool_average_queue_size{pool})"),
            ),
            "count",
        ),
        Chart(
            "InferencePool KV-cache utilization (router's view)",
            (PromQL(f"max by (name) (inference_pool_average_kv_cache_utilization{pool})", "1"),),
            "ratio",
        ),
    ]


def _latency_chart(title: str, metric: str, selector: str, by: str) -> Chart:
    """p50 and p90 of a latency histogram, in seconds."""
    return Chart(title, tuple(PromQL(_quantile(q, metric, selector, by), "s") for q in (0.5, 0.9)), "seconds")


def jetstream_widgets(scope: Scope) -> list[Widget]:
    sel = scope.prom(job=JETSTREAM_JOB)
    return [
        Text(
            "JetStream",
            f"Serving pods (`job` `{JETSTREAM_JOB}`), MaxText engine `prometheus_port`. Latency and request "
            "counters exist from JetStream v0.3; v0.2.x reports free slots as `jetstream_slots_available_percentage`.",
            height=1,
        ),
        Chart("Serving pods up", (PromQL(f"sum(up{sel})"),), "pods"),
        Chart(
            "Requests finished per second",
            (PromQL(f"sum(rate(jetstream_request_success_count_total{sel}[{RATE_WINDOW}]))"),),
            "req/s",
        ),
        _latency_chart("Time to first token p50 / p90", "jetstream_time_to_first_token", sel, ""),
        _latency_chart("Time per output token p50 / p90", "jetstream_time_per_output_token", sel, ""),
        Chart(
            "Prefill backlog (queue) by pod",
            (PromQL(f"sum by (instance) (jetstream_prefill_backlog_size{sel})"),),
            "requests",
        ),
        Chart(
            "Decode slots used by pod",
            (
                PromQL(
                    f"avg by (instance) (jetstream_slots_used_percentage{sel}) "
                    f"or avg by (instance) (1 - jetstream_slots_available_percentage{sel})",
                    "1",
                ),
            ),
            "ratio",
        ),
    ]


def _overview(prefix: str, backend: str) -> Text:
    notes = [
        f"Stack `{prefix}`, serving backend `{backend}`.",
        "TPU duty cycle and HBM are TPU *runtime* metrics: GKE reports them only for containers that declare "
        "`containerPort: 8431`; TensorCore utilization is a host metric and needs no port.",
        "Kueue is not scraped (its metrics port is HTTPS with authn/authz), so there is no Kueue chart.",
    ]
    if backend == "saxml":
        notes.append(NOT_SCRAPED["saxml"])
    return Text(f"{prefix}: TPU serving", "\n\n".join(notes), height=3)


@dataclass(frozen=True)
class DashboardPlan:
    display_name: str
    tiles: list[Tile] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "displayName": self.display_name,
            "mosaicLayout": {"columns": COLUMNS, "tiles": [tile.to_json() for tile in self.tiles]},
        }


def display_name(prefix: str) -> str:
    return f"{prefix}: TPU serving"


def dashboard_widgets(
    prefix: str,
    backend: str,
    node_pools: Sequence[str],
    *,
    cluster_name: str | None = None,
    namespace: str | None = None,
    guide: str = DEFAULT_GUIDE,
    hosts: TpuHosts | None = None,
) -> list[Widget]:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, not {backend!r}")
    if not prefix:
        raise ValueError("the dashboard needs a name prefix")
    scope = Scope(cluster_name=cluster_name, namespace=namespace, guide=guide)
    widgets: list[Widget] = [_overview(prefix, backend), *tpu_widgets(scope, node_pools)]
    if hosts is not None and backend in ("vllm-pd", "none"):
        widgets += health_widgets(scope, hosts)
    if backend == "vllm-pd":
        widgets += vllm_widgets(scope)
    elif backend == "jetstream":
        widgets += jetstream_widgets(scope)
    return widgets


def dashboard_spec(
    prefix: str,
    backend: str,
    node_pools: Sequence[str],
    *,
    cluster_name: str | None = None,
    namespace: str | None = None,
    guide: str = DEFAULT_GUIDE,
    hosts: TpuHosts | None = None,
) -> dict[str, Any]:
    """The dashboard's JSON body (Cloud Monitoring API `Dashboard`), mosaic layout of 12 columns."""
    widgets = dashboard_widgets(
        prefix, backend, node_pools, cluster_name=cluster_name, namespace=namespace, guide=guide, hosts=hosts
    )
    return DashboardPlan(display_name(prefix), layout(widgets)).to_json()


def spec_queries(spec: dict[str, Any]) -> list[str]:
    """Every PromQL query and Monitoring filter of a dashboard body, in tile order."""
    queries: list[str] = []
    for tile in spec["mosaicLayout"]["tiles"]:
        for dataset in tile["widget"].get("xyChart", {}).get("dataSets", []):
            query = dataset["timeSeriesQuery"]
            if "prometheusQuery" in query:
                queries.append(query["prometheusQuery"])
            else:
                queries.append(query["timeSeriesFilter"]["filter"])
    return queries


def dashboard_url(resource_id: str, project: str) -> str:
    """The console address of a dashboard whose resource id is `projects/<number>/dashboards/<id>`."""
    dashboard_id = resource_id.rstrip("/").rsplit("/", 1)[-1]
    if not dashboard_id:
        raise ValueError(f"{resource_id!r} is not a dashboard resource id")
    return f"{CONSOLE}/{dashboard_id}?project={project}"


@dataclass(frozen=True)
class DashboardArgs:
    project: str
    prefix: str
    backend: str  # "vllm-pd" | "saxml" | "jetstream" | "none"
    node_pools: Sequence[str]  # the stack's TPU node pool names
    cluster_name: str | None = None  # scope every query to the stack's cluster
    namespace: str | None = None  # scope scraped metrics to the serving namespace
    guide: str = DEFAULT_GUIDE
    hosts: TpuHosts | None = None  # dynamic slicing: host health and Slice charts


class Dashboard(pulumi.ComponentResource):
    dashboard: gcp.monitoring.Dashboard
    url: pulumi.Output[str]

    def __init__(self, name: str, args: DashboardArgs, opts: pulumi.ResourceOptions | None = None):
        # The type token names the package the component was first in: it is part of every URN below it.
        super().__init__("tpu-slicing:infra:Dashboard", name, None, opts)
        spec = dashboard_spec(
            args.prefix,
            args.backend,
            list(args.node_pools),
            cluster_name=args.cluster_name,
            namespace=args.namespace,
            guide=args.guide,
            hosts=args.hosts,
        )
        self.dashboard = gcp.monitoring.Dashboard(
            "dashboard",
            project=args.project,
            dashboard_json=json.dumps(spec, sort_keys=True),
            opts=pulumi.ResourceOptions(parent=self),
        )
        project = args.project
        self.url = self.dashboard.id.apply(lambda resource_id: dashboard_url(resource_id, project))
        self.register_outputs({"url": self.url})
