"""The ``prometheus`` entries of the metric catalog: application metrics the PodMonitorings scrape (no Pulumi).

Managed Service for Prometheus's target health ``up``, vLLM's prefill and decode leaders, the endpoint picker
(Gateway API Inference Extension) and JetStream, each with its source.
"""

from __future__ import annotations

from domain.metric_entry import Metric

# ---------------------------------------------------------------------------
# Sources, cited once.
# ---------------------------------------------------------------------------
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
GMP_UP = (
    'Prometheus "Jobs and instances" (the scraper records `up` per target: 1 = last scrape succeeded), '
    "https://prometheus.io/docs/concepts/jobs_instances/; Managed Service for Prometheus's collector is "
    "Prometheus, and GoogleCloudPlatform/prometheus-engine pkg/operator/apis/monitoring/v1/pod_config.go sets "
    "job = the PodMonitoring's name, namespace, cluster and instance = <pod>:<port name>"
)


# The labels Managed Service for Prometheus puts on every scraped series (GMP_UP).
GMP_TARGET_LABELS = ("cluster", "namespace", "job", "instance")


PROMETHEUS_METRICS: tuple[Metric, ...] = (
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
