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

The catalog by concern:
- domain/metric_entry.py: what an entry says (``Metric``), its PromQL name and the labels a query may name;
- domain/metric_gcp.py: the ``gcp`` entries, GKE's and Compute Engine's, with their sources;
- domain/metric_prometheus.py: the ``prometheus`` entries, scraped, with their sources;
- domain/metric_queries.py: which metrics and labels a query names (the text only).
This module collects the entries, says what is not scraped, checks queries against the entries, and
re-exports what the rest of the project uses.
"""

from __future__ import annotations

from domain.metric_entry import BUCKET_LABEL, Metric
from domain.metric_gcp import GCP_METRICS, K8S_ENTITY_LABELS, K8S_NODE_POOL_LABELS
from domain.metric_prometheus import PROMETHEUS_METRICS
from domain.metric_queries import filter_metric_names, label_uses, metric_names, promql_metric_names

__all__ = [
    "BY_NAME",
    "CATALOG",
    "DEFAULT_GUIDE",
    "JETSTREAM_JOB",
    "K8S_ENTITY_LABELS",
    "K8S_NODE_POOL_LABELS",
    "NOT_SCRAPED",
    "VLLM_JOBS",
    "Metric",
    "epp_job",
    "filter_metric_names",
    "label_uses",
    "lookup",
    "metric_names",
    "promql_metric_names",
    "unknown_metrics",
    "unpublished_labels",
]

# ---------------------------------------------------------------------------
# Scrape jobs: the PodMonitoring names, so the `job` label of each series.
# ---------------------------------------------------------------------------
VLLM_JOBS = {"prefill": "vllm-prefill", "decode": "vllm-decode"}
JETSTREAM_JOB = "jetstream"
DEFAULT_GUIDE = "pd-disaggregation"  # the llm-d guide label and the InferencePool's name (__main__.py)


def epp_job(pool_name: str = DEFAULT_GUIDE) -> str:
    """The endpoint picker's scrape job: its Deployment is `<pool>-epp` (k8s/router.py)."""
    return f"{pool_name}-epp"


CATALOG: tuple[Metric, ...] = (*GCP_METRICS, *PROMETHEUS_METRICS)

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
# Which entry a name reads, and what of a query the catalog does not list.
# ---------------------------------------------------------------------------
_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


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
