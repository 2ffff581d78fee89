"""Every metric the dashboard and the alert policies read, with where its name comes from (no Pulumi).

Two kinds of metric reach Cloud Monitoring here:

- ``gcp``: GKE system metrics (``kubernetes.io/...``), written by GKE itself. The
  dashboard reads them with Monitoring filters; PromQL reads them under their
  mapped names (``kubernetes.io/node/accelerator/duty_cycle`` becomes
  ``kubernetes_io:node_accelerator_duty_cycle``: the first ``/`` becomes ``:``,
  every other special character ``_``).
- ``prometheus``: application metrics that exist only because a PodMonitoring
  (observability/pod_monitoring.py) has Managed Service for Prometheus scrape them. The
  scrape job of each is the PodMonitoring's name, which is what ``job`` means in
  every query below.

Metrics that are *not* scraped are listed in ``NOT_SCRAPED`` with the reason, so
no chart or alert silently reads an empty series.

``metric_names`` extracts every metric a PromQL expression or a Monitoring
filter references; the tests use it to prove the dashboard and the alerts only
read what this catalog lists. ``unpublished_labels`` does the same for labels:
an entry lists the labels its source publishes (``labels``: the metric's own;
``resource_labels``: its monitored resource's, or the scrape target's), and a
PromQL matcher or ``by (...)`` naming any other label is refused
(observability/alerts.py checks every policy with it). An entry whose labels
were not looked up has ``labels=None``: no query may name a label of it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Kind = Literal["prometheus", "gcp"]
Instrument = Literal["gauge", "counter", "histogram"]
Confidence = Literal["high", "medium"]

# ---------------------------------------------------------------------------
# Scrape jobs: the PodMonitoring names, so the `job` label of each series.
# ---------------------------------------------------------------------------
VLLM_JOBS = {"prefill": "vllm-prefill", "decode": "vllm-decode"}
JETSTREAM_JOB = "jetstream"
DEFAULT_GUIDE = "pd-disaggregation"  # the llm-d guide label and the InferencePool's name (__main__.py)


def epp_job(pool_name: str = DEFAULT_GUIDE) -> str:
    """The endpoint picker's scrape job: its Deployment is `<pool>-epp` (k8s/router.py)."""
    return f"{pool_name}-epp"


# ---------------------------------------------------------------------------
# Sources, cited once.
# ---------------------------------------------------------------------------
GKE_METRICS_LIST = (
    'Cloud Monitoring "Google Cloud metrics: Kubernetes" (kubernetes.io/ metric list), '
    "https://cloud.google.com/monitoring/api/metrics_kubernetes"
)
GKE_TPU_RUNTIME = (
    'GKE "Deploy TPU workloads in GKE Standard", section "Observability and metrics" / runtime metrics '
    "(GKE >= 1.27.4-gke.900, JAX >= 0.4.14, the TPU container must declare containerPort 8431), "
    "https://cloud.google.com/kubernetes-engine/docs/how-to/tpus"
)
GKE_TPU_HOST = (
    'GKE "Deploy TPU workloads in GKE Standard", section "Observability and metrics" / host metrics '
    "(GKE >= 1.28.1-gke.1066000, no port needed), "
    "https://cloud.google.com/kubernetes-engine/docs/how-to/tpus"
)
GKE_TPU_NODE_POOL = (
    'Cloud Monitoring integration dashboard "GKE TPU Node Pool Status" '
    "(GoogleCloudPlatform/monitoring-dashboard-samples, dashboards/google-kubernetes-engine/"
    "gke-tpu-node-pool-status.json: resource k8s_node_pool, label node_pool_name, multi-host TPU pools only); "
    + GKE_METRICS_LIST
)
VLLM_METRICS = (
    'vLLM "Production Metrics" (https://docs.vllm.ai/en/latest/usage/metrics.html) and '
    "vllm/v1/metrics/loggers.py (V1 engine; names checked for the v0.2x line the stack pins, vllm-tpu v0.26.0)"
)
GAIE_METRICS = (
    'Gateway API Inference Extension "Metrics & Observability", EPP table (v1.x names, inference_objective_* '
    "replaced inference_model_* in v1.0), "
    "https://gateway-api-inference-extension.sigs.k8s.io/guides/metrics-and-observability/"
)
JETSTREAM_METRICS = (
    "AI-Hypercomputer/JetStream jetstream/core/metrics/prometheus.py and "
    "docs/observability-prometheus-metrics-in-jetstream-server.md (served on MaxText's prometheus_port)"
)
TPU_HEALTH = (
    'Cloud TPU "Monitor Cloud TPU health" (metric compute.googleapis.com/instance/tpu/infra_health, HEALTHY or '
    "UNHEALTHY per TPU VM; metric labels health_status, unhealthy_category, machine_type, reservation_id, and for "
    "All Capacity reservations machine_id, block_id, cluster_id, subblock_id; resource labels location, "
    "resource_id), https://docs.cloud.google.com/tpu/docs/troubleshooting/tpu-health"
)
GKE_SLICE_LIFECYCLE = (
    'GKE "Use dynamic slicing with a custom scheduler": the Slice status reasons (SliceNotCreated, '
    "SliceCreationFailed, ACTIVATING, ACTIVE, ACTIVE_DEGRADED, FAILED, DEACTIVATING, INCOMPLETE) and the values of "
    "the partition-state node label (HEALTHY, DEGRADED, UNHEALTHY, UNSET, INCOMPLETE), "
    "https://cloud.google.com/kubernetes-engine/docs/how-to/create-dynamic-slices"
)
K8S_RESOURCES = (
    "GoogleCloudPlatform/gke-mcp pkg/tools/monitoring/schemas/k8s_node.md, k8s_node_pool.md, k8s_entity.md (the "
    'labels of the Monitoring resource types, as listed in "Monitored resource types", '
    "https://cloud.google.com/monitoring/api/resources)"
)
PROMQL_MAPPING = (
    'Cloud Monitoring "Mapping Cloud Monitoring metrics to PromQL" (metric names; distribution-valued metrics '
    "read as Prometheus histograms with _count, _sum and _bucket; the special label monitored_resource selects "
    "the resource type), https://cloud.google.com/monitoring/promql/promql-mapping"
)
GMP_UP = (
    'Prometheus "Jobs and instances" (the scraper records `up` per target: 1 = last scrape succeeded), '
    "https://prometheus.io/docs/concepts/jobs_instances/; Managed Service for Prometheus's collector is "
    "Prometheus, and GoogleCloudPlatform/prometheus-engine pkg/operator/apis/monitoring/v1/pod_config.go sets "
    "job = the PodMonitoring's name, namespace, cluster and instance = <pod>:<port name>"
)


# The labels of the monitored resources a `gcp` metric is written against (K8S_RESOURCES; TPU_HEALTH for the
# TPU VM), and the labels Managed Service for Prometheus puts on every scraped series (GMP_UP).
K8S_NODE_LABELS = ("project_id", "location", "cluster_name", "node_name")
K8S_NODE_POOL_LABELS = ("project_id", "location", "cluster_name", "node_pool_name")
K8S_ENTITY_LABELS = (
    "project_id", "location", "cluster_name", "entity_type", "entity_namespace", "entity_name", "entity_uid",
)  # fmt: skip
TPU_VM_LABELS = ("location", "resource_id")
GMP_TARGET_LABELS = ("cluster", "namespace", "job", "instance")
# PromQL's special label for the resource type of a `gcp` metric (PROMQL_MAPPING), and a histogram's bucket bound.
MONITORED_RESOURCE = "monitored_resource"
BUCKET_LABEL = "le"


@dataclass(frozen=True)
class Metric:
    name: str  # the Prometheus metric name, or the Cloud Monitoring metric type
    kind: Kind
    unit: str
    description: str
    source: str
    instrument: Instrument = "gauge"
    confidence: Confidence = "high"
    caveat: str = ""  # what has to hold for the series to exist
    labels: tuple[str, ...] | None = None  # the metric's labels as its source publishes them; None: not looked up
    resource_labels: tuple[str, ...] = ()  # the monitored resource's (gcp) or scrape target's (prometheus) labels

    @property
    def query_labels(self) -> frozenset[str] | None:
        """Every label a PromQL matcher or grouping may name on this metric; None when its labels are not listed."""
        if self.labels is None:
            return None
        special = (MONITORED_RESOURCE,) if self.kind == "gcp" else ()
        return frozenset((*self.labels, *self.resource_labels, *special))

    @property
    def promql_name(self) -> str:
        """The name PromQL knows this metric by (Cloud Monitoring's mapping rule for `gcp` metrics)."""
        if self.kind == "prometheus":
            return self.name
        domain, _, path = self.name.partition("/")
        return re.sub(r"[^a-zA-Z0-9_]", "_", domain) + ":" + re.sub(r"[^a-zA-Z0-9_]", "_", path)


_RUNTIME_CAVEAT = (
    "TPU runtime metric: only for containers that declare containerPort 8431 (libtpu's metrics port); "
    "the vLLM and JetStream containers of this stack do not declare it today"
)

CATALOG: tuple[Metric, ...] = (
    # --- GKE TPU system metrics (Cloud Monitoring) -------------------------------------------
    Metric(
        "kubernetes.io/node/accelerator/duty_cycle",
        "gcp",
        "percent (0-100)",
        "Share of the last sample period (60 s) each TPU chip of a node was actively processing; resource "
        "k8s_node (labels cluster_name, node_name), metric labels make, model, accelerator_id.",
        f"{GKE_METRICS_LIST}; {GKE_TPU_RUNTIME}; {K8S_RESOURCES}",
        caveat=_RUNTIME_CAVEAT,
        labels=("make", "accelerator_id", "model"),
        resource_labels=K8S_NODE_LABELS,
    ),
    Metric(
        "kubernetes.io/node/accelerator/memory_used",
        "gcp",
        "bytes",
        "HBM allocated on each TPU chip of a node; resource k8s_node.",
        f"{GKE_METRICS_LIST}; {GKE_TPU_RUNTIME}; {K8S_RESOURCES}",
        caveat=_RUNTIME_CAVEAT,
        labels=("make", "accelerator_id", "model"),
        resource_labels=K8S_NODE_LABELS,
    ),
    Metric(
        "kubernetes.io/node/accelerator/memory_total",
        "gcp",
        "bytes",
        "HBM capacity of each TPU chip of a node; resource k8s_node.",
        f"{GKE_METRICS_LIST}; {GKE_TPU_RUNTIME}; {K8S_RESOURCES}",
        caveat=_RUNTIME_CAVEAT,
        labels=("make", "accelerator_id", "model"),
        resource_labels=K8S_NODE_LABELS,
    ),
    Metric(
        "kubernetes.io/node/accelerator/tensorcore_utilization",
        "gcp",
        "percent (0-100)",
        "TensorCore (MXU and vector unit) utilization per chip, against peak; resource k8s_node. A host "
        "metric: present without any port, so it is the fallback when duty_cycle is absent.",
        f"{GKE_METRICS_LIST}; {GKE_TPU_HOST}; {K8S_RESOURCES}",
        labels=("make", "accelerator_id", "model", "tpu_topology"),
        resource_labels=K8S_NODE_LABELS,
    ),
    Metric(
        "kubernetes.io/node_pool/multi_host/available",
        "gcp",
        "bool",
        "Whether a multi-host TPU node pool (one slice) is available: every node up; resource k8s_node_pool, "
        "label node_pool_name. Single-host pools report nothing.",
        f"{GKE_TPU_NODE_POOL}; {K8S_RESOURCES}",
        labels=("unavailability_reason",),
        resource_labels=K8S_NODE_POOL_LABELS,
    ),
    Metric(
        "compute.googleapis.com/instance/tpu/infra_health",
        "gcp",
        "HEALTHY/UNHEALTHY",
        "Health of each TPU VM as Google's infrastructure sees it: the health_status label is HEALTHY or "
        "UNHEALTHY (unhealthy_category BAD_TPU_CHIP, NETWORKING_ISSUE, BAD_SC_CHIP); block_id and subblock_id "
        "(hashed ids) place the host in an All Capacity reservation.",
        TPU_HEALTH,
        confidence="medium",
        caveat=(
            "the page gives the labels, not the value type or the monitored resource of the series: the queries "
            "count series by their labels and read no value; not seen on a live project"
        ),
        labels=(
            "health_status",
            "unhealthy_category",
            "machine_type",
            "reservation_id",
            "machine_id",
            "block_id",
            "cluster_id",
            "subblock_id",
        ),
        resource_labels=TPU_VM_LABELS,
    ),
    # --- GKE slice and partition state (BETA system metrics of TPU7x dynamic slicing) ---------------------
    # The list's rows (GKE_METRICS_LIST, generated 2026-04-10 in the copy read): each metric's kind, value type,
    # unit, monitored resource and labels, copied as published; the state values the rows give are examples
    # ("Such as ACTIVE, FAILED, etc."), the full sets are the Slice and partition states of GKE_SLICE_LIFECYCLE.
    # No row publishes a label naming the Slice, its Workload or its namespace: only the k8s_entity resource
    # has entity_name, and which object it names for a slice is not published.
    Metric(
        "kubernetes.io/accelerator/slice/state",
        "gcp",
        "1/0 per state",
        "GAUGE, INT64, unit 1, resource k8s_entity: per slice, one series per state, 1 for the state the slice is "
        "in and 0 otherwise. Metric labels state (the row's examples ACTIVE, FAILED; the Slice lifecycle adds "
        "ACTIVATING, ACTIVE_DEGRADED, DEACTIVATING, INCOMPLETE), accelerator_type (tpu7x), slice_topology "
        "(e.g. 2x4x4) and block_id.",
        f"{GKE_METRICS_LIST}; {GKE_SLICE_LIFECYCLE}; {K8S_RESOURCES}; {PROMQL_MAPPING}",
        confidence="medium",
        caveat="BETA; the k8s_entity labels of a slice (entity_type, entity_name) are not published; not seen on a "
        "live project",
        labels=("state", "accelerator_type", "slice_topology", "block_id"),
        resource_labels=K8S_ENTITY_LABELS,
    ),
    Metric(
        "kubernetes.io/accelerator/partition/state",
        "gcp",
        "1/0 per state",
        "GAUGE, INT64, unit 1, resource k8s_node_pool (a TPU7x sub-block is one node pool): per partition, one "
        "series per state, 1 for the state the partition is in. Metric labels state (the row's examples "
        "HEALTHY, UNHEALTHY; the partition-state node label also takes DEGRADED, UNSET, INCOMPLETE), "
        "accelerator_type, partition_topology, partition_id, slice_id (the slice using it) and block_id.",
        f"{GKE_METRICS_LIST}; {GKE_SLICE_LIFECYCLE}; {K8S_RESOURCES}; {PROMQL_MAPPING}",
        confidence="medium",
        caveat="BETA; not seen on a live project",
        labels=("state", "accelerator_type", "partition_topology", "partition_id", "slice_id", "block_id"),
        resource_labels=K8S_NODE_POOL_LABELS,
    ),
    Metric(
        "kubernetes.io/accelerator/slice/formation_durations",
        "gcp",
        "seconds",
        "CUMULATIVE, DISTRIBUTION, unit s, resource k8s_entity: the time each slice took to form, by the state it "
        "ended in. Metric labels end_state (ACTIVE, FAILED, ACTIVE_DEGRADED), accelerator_type, slice_topology "
        "and block_id. PromQL reads it as a histogram (_count, _sum, _bucket): _count counts formations.",
        f"{GKE_METRICS_LIST}; {K8S_RESOURCES}; {PROMQL_MAPPING}",
        instrument="histogram",
        confidence="medium",
        caveat="BETA; not seen on a live project",
        labels=("end_state", "accelerator_type", "slice_topology", "block_id"),
        resource_labels=K8S_ENTITY_LABELS,
    ),
    # --- GMP target health ----------------------------------------------------------------------
    Metric(
        "up",
        "prometheus",
        "1/0",
        "1 when the last scrape of a target succeeded. vLLM's HTTP app (and /metrics) only answers once "
        "the engine has loaded, so up == 1 for a vLLM leader means it serves.",
        GMP_UP,
        confidence="medium",
        labels=(),
        resource_labels=GMP_TARGET_LABELS,
    ),
    # --- vLLM (prefill and decode leaders) -----------------------------------------------------------
    Metric(
        "vllm:num_requests_running",
        "prometheus",
        "requests",
        "Requests in the RUNNING state (in the batch) per engine; labels model_name, engine.",
        VLLM_METRICS,
        labels=("model_name", "engine"),
        resource_labels=GMP_TARGET_LABELS,
    ),
    Metric(
        "vllm:num_requests_waiting",
        "prometheus",
        "requests",
        "Requests waiting to be scheduled (the engine's queue length); labels model_name, engine (the same "
        "labelnames as vllm:num_requests_running).",
        VLLM_METRICS,
        labels=("model_name", "engine"),
        resource_labels=GMP_TARGET_LABELS,
    ),
    Metric(
        "vllm:kv_cache_usage_perc",
        "prometheus",
        "ratio (0-1)",
        "KV-cache blocks in use, 1 = full. Replaced vllm:gpu_cache_usage_perc, which was deprecated in the "
        "0.9/0.10 line and is hidden in later releases.",
        VLLM_METRICS,
    ),
    Metric(
        "vllm:time_to_first_token_seconds",
        "prometheus",
        "seconds",
        "Histogram of time to first token per request (for a P/D prefill pod: its own prefill).",
        VLLM_METRICS,
        instrument="histogram",
    ),
    Metric(
        "vllm:inter_token_latency_seconds",
        "prometheus",
        "seconds",
        "Histogram of the time between consecutive output tokens. Replaces vllm:time_per_output_token_seconds "
        "(deprecated around v0.11, still emitted beside it); a v0.25 binary was observed emitting both.",
        VLLM_METRICS,
        instrument="histogram",
    ),
    Metric(
        "vllm:request_success_total",
        "prometheus",
        "requests",
        "Finished requests, label finished_reason (stop, length, abort...).",
        VLLM_METRICS,
        instrument="counter",
    ),
    Metric(
        "vllm:prompt_tokens_total",
        "prometheus",
        "tokens",
        "Prefill (prompt) tokens processed.",
        VLLM_METRICS,
        instrument="counter",
    ),
    Metric(
        "vllm:generation_tokens_total",
        "prometheus",
        "tokens",
        "Generated (decode) tokens.",
        VLLM_METRICS,
        instrument="counter",
    ),
    # --- Endpoint picker (Gateway API Inference Extension) -------------------------------------
    Metric(
        "inference_objective_request_total",
        "prometheus",
        "requests",
        "Requests the EPP scheduled, labels model_name, target_model_name.",
        GAIE_METRICS,
        instrument="counter",
        caveat="the EPP's /metrics needs a bearer token unless the EPP runs with --metrics-endpoint-auth=false",
    ),
    Metric(
        "inference_objective_request_error_total",
        "prometheus",
        "requests",
        "Requests the EPP failed, labels model_name, target_model_name.",
        GAIE_METRICS,
        instrument="counter",
        caveat="as inference_objective_request_total",
    ),
    Metric(
        "inference_pool_ready_pods",
        "prometheus",
        "pods",
        "Ready pods of the InferencePool, label name (the pool).",
        GAIE_METRICS,
        caveat="as inference_objective_request_total",
    ),
    Metric(
        "inference_pool_average_kv_cache_utilization",
        "prometheus",
        "ratio (0-1)",
        "Average KV-cache utilization over the pool's pods, as the EPP scraped them.",
        GAIE_METRICS,
        caveat="as inference_objective_request_total",
    ),
    Metric(
        "inference_pool_average_queue_size",
        "prometheus",
        "requests",
        "Average number of requests waiting in the pool's model-server queues.",
        GAIE_METRICS,
        caveat="as inference_objective_request_total",
    ),
    # --- JetStream (MaxText engine, prometheus_port) --------------------------------------------
    Metric(
        "jetstream_prefill_backlog_size",
        "prometheus",
        "requests",
        "Requests waiting for prefill (the server's queue), label id (the pod's hostname). Since JetStream v0.2.2.",
        JETSTREAM_METRICS,
        labels=("id",),
        resource_labels=GMP_TARGET_LABELS,
    ),
    Metric(
        "jetstream_slots_used_percentage",
        "prometheus",
        "ratio (0-1)",
        "Share of decode slots in use, labels id, idx. Named jetstream_slots_available_percentage "
        "(the complement) before JetStream v0.3.",
        JETSTREAM_METRICS,
        confidence="medium",
        caveat="JetStream >= v0.3; the pinned maxengine-server image tag is v0.2.2",
    ),
    Metric(
        "jetstream_slots_available_percentage",
        "prometheus",
        "ratio (0-1)",
        "Share of decode slots free: the pre-v0.3 name, read as a fallback (1 - value).",
        JETSTREAM_METRICS + "; CHANGELOG v0.3 (renamed to jetstream_slots_used_percentage)",
        confidence="medium",
        caveat="JetStream v0.2.x only",
    ),
    Metric(
        "jetstream_time_to_first_token",
        "prometheus",
        "seconds",
        "Histogram of time to first token per request.",
        JETSTREAM_METRICS,
        instrument="histogram",
        confidence="medium",
        caveat="JetStream >= v0.3",
    ),
    Metric(
        "jetstream_time_per_output_token",
        "prometheus",
        "seconds",
        "Histogram of average time per output token per request.",
        JETSTREAM_METRICS,
        instrument="histogram",
        confidence="medium",
        caveat="JetStream >= v0.3",
    ),
    Metric(
        "jetstream_request_success_count_total",
        "prometheus",
        "requests",
        "Completed requests: prometheus_client exposes the Counter jetstream_request_success_count with the "
        "_total suffix.",
        JETSTREAM_METRICS,
        instrument="counter",
        confidence="medium",
        caveat="JetStream >= v0.3",
    ),
)

BY_NAME: dict[str, Metric] = {m.name: m for m in CATALOG}
_BY_PROMQL_NAME: dict[str, Metric] = {m.promql_name: m for m in CATALOG}

# What is deliberately not scraped, and why: no chart or alert reads these.
NOT_SCRAPED: dict[str, str] = {
    "kueue": (
        "Kueue's controller-manager serves metrics on container port 8443 (name `metrics`) over HTTPS with a "
        "self-signed certificate and Kubernetes authn/authz (a bearer token allowed `get` on the non-resource "
        "URL /metrics, the chart's kueue-metrics-reader ClusterRole). Scraping it needs scheme https, "
        "tls.insecureSkipVerify and an `authorization` secret the GMP collector may read: not set up, so "
        "kueue_pending_workloads / kueue_admitted_active_workloads are not collected and the dashboard has no "
        "Kueue chart."
    ),
    "saxml": (
        "Saxml's admin, model and HTTP servers document no Prometheus endpoint: nothing is scraped for it. "
        "The TPU system metrics still cover its slices."
    ),
}


# ---------------------------------------------------------------------------
# Which metrics a query reads.
# ---------------------------------------------------------------------------
_FILTER_METRIC = re.compile(r'metric\.type\s*=\s*"([^"]+)"')
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_LABEL_LIST = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_OFFSET = re.compile(r"\boffset\s+-?[0-9a-z]+")
_TOKEN = re.compile(r"(?P<number>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)|(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)")
_KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
                       "offset", "bool", "inf", "nan", "atan2"})  # fmt: skip
_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def promql_metric_names(query: str) -> set[str]:
    """Metric names a PromQL expression selects (functions, keywords, labels and strings excluded)."""
    text = _STRING.sub('""', query)
    text = _LABEL_LIST.sub(" ", text)
    text = _OFFSET.sub(" ", text)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers (their values are already blanked)
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range and subquery selectors
    names: set[str] = set()
    for match in _TOKEN.finditer(text):
        name = match.group("name")
        if name is None or name.lower() in _KEYWORDS:
            continue
        if text[match.end() :].lstrip().startswith("("):
            continue  # a function or aggregation
        names.add(name)
    return names


def filter_metric_names(monitoring_filter: str) -> set[str]:
    """Metric types a Cloud Monitoring filter selects (`metric.type="..."`)."""
    return set(_FILTER_METRIC.findall(monitoring_filter))


def metric_names(query: str) -> set[str]:
    """Every metric a PromQL expression or a Monitoring filter references."""
    if _FILTER_METRIC.search(query):
        return filter_metric_names(query)
    return promql_metric_names(query)


def lookup(name: str) -> Metric | None:
    """The catalog entry a referenced name reads: by metric type, PromQL name, or histogram series suffix."""
    if name in BY_NAME:
        return BY_NAME[name]
    if name in _BY_PROMQL_NAME:
        return _BY_PROMQL_NAME[name]
    for suffix in _HISTOGRAM_SUFFIXES:
        if name.endswith(suffix):
            base = name.removesuffix(suffix)
            metric = BY_NAME.get(base) or _BY_PROMQL_NAME.get(base)
            if metric is not None and metric.instrument == "histogram":
                return metric
    return None


def unknown_metrics(query: str) -> set[str]:
    """Names a query references that the catalog does not list: empty for a valid query."""
    return {name for name in metric_names(query) if lookup(name) is None}


# ---------------------------------------------------------------------------
# Which labels a query names, and which of them its metrics do not publish.
# ---------------------------------------------------------------------------
_SELECTOR = re.compile(r"(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)?\s*\{(?P<body>[^}]*)\}")
_MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")
_GROUPING = re.compile(r"\b(?P<kind>by|without|on|ignoring|group_left|group_right)\s*\((?P<labels>[^)]*)\)")
_LABEL_MAKERS = re.compile(r"\blabel_(?:replace|join)\s*\(")


def _blank_strings(query: str) -> str:
    """The query with every string literal's content replaced by spaces (offsets kept)."""
    return _STRING.sub(lambda m: m.group(0)[0] + " " * (len(m.group(0)) - 2) + m.group(0)[-1], query)


def _group_end(text: str, start: int) -> int:
    """The index just past the parenthesis closing the one at `start`."""
    depth = 0
    for index in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[index], 0)
        if depth == 0:
            return index + 1
    raise ValueError(f"unbalanced parentheses in {text!r}")


def _group_start(text: str, end: int) -> int:
    """The index of the parenthesis opening the one that closes at `end - 1`."""
    depth = 0
    for index in range(end - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(text[index], 0)
        if depth == 0:
            return index
    raise ValueError(f"unbalanced parentheses in {text!r}")


def _made_labels(query: str, blank: str, start: int, end: int) -> set[str]:
    """Labels that label_replace / label_join create inside query[start:end] (their second argument)."""
    made: set[str] = set()
    for match in _LABEL_MAKERS.finditer(blank, start, end):
        depth, index = 0, match.end()
        while index < end and not (depth == 0 and blank[index] == ","):
            depth += {"(": 1, ")": -1}.get(blank[index], 0)
            index += 1
        string = _STRING.match(query[index + 1 :].lstrip())
        if string:
            made.add(string.group(0)[1:-1])
    return made


def _label_names(text: str) -> list[str]:
    return [label.strip() for label in text.split(",") if label.strip()]


def label_uses(query: str) -> set[tuple[str, str]]:
    """Every (metric, label) pair a PromQL expression relies on.

    A matcher `m{l="v"}` names l on m. A `by (...)` / `without (...)` clause names its labels on every metric
    of the aggregation's argument (either form: `sum by (l) (expr)` or `sum (expr) by (l)`), except labels a
    label_replace / label_join inside that argument creates. `on (...)`, `ignoring (...)`, `group_left (...)`
    and `group_right (...)` are checked against every metric of the whole query (stricter than PromQL needs).
    """
    blank = _blank_strings(query)
    uses: set[tuple[str, str]] = set()
    for selector in _SELECTOR.finditer(blank):
        name = selector.group("name")
        if name:
            uses |= {(name, label) for label in _MATCHER.findall(selector.group("body"))}
    every = promql_metric_names(query)
    for grouping in _GROUPING.finditer(blank):
        labels = _label_names(grouping.group("labels"))
        if grouping.group("kind") not in ("by", "without"):
            uses |= {(name, label) for name in every for label in labels}
            continue
        after = grouping.end() + len(blank[grouping.end() :]) - len(blank[grouping.end() :].lstrip())
        if after < len(blank) and blank[after] == "(":
            start, end = after, _group_end(blank, after)
        else:
            end = len(blank[: grouping.start()].rstrip())
            start = _group_start(blank, end)
        made = _made_labels(query, blank, start, end)
        names = promql_metric_names(query[start:end])
        uses |= {(name, label) for name in names for label in labels if label not in made}
    return uses


def unpublished_labels(query: str) -> set[tuple[str, str]]:
    """(metric, label) pairs of a PromQL expression where the catalog does not list the label for the metric.

    Names the catalog does not know are left to `unknown_metrics`. A histogram's `_bucket` series also has `le`;
    `__name__` is every series' own.
    """
    bad: set[tuple[str, str]] = set()
    for name, label in label_uses(query):
        metric = lookup(name)
        if metric is None or label == "__name__":
            continue
        allowed = metric.query_labels or frozenset()
        if metric.instrument == "histogram" and name.endswith("_bucket"):
            allowed |= {BUCKET_LABEL}
        if label not in allowed:
            bad.add((name, label))
    return bad
