"""The ``gcp`` entries of the metric catalog: system metrics Google writes (no Pulumi).

GKE's TPU node, node-pool, slice and partition metrics (``kubernetes.io/...``) and Compute Engine's TPU VM
health (``compute.googleapis.com/...``), each with its source and the labels of its monitored resource.
"""

from __future__ import annotations

from domain.metric_entry import Metric

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


# The labels of the monitored resources a `gcp` metric is written against (K8S_RESOURCES; TPU_HEALTH for the
# TPU VM).
K8S_NODE_LABELS = ("project_id", "location", "cluster_name", "node_name")
K8S_NODE_POOL_LABELS = ("project_id", "location", "cluster_name", "node_pool_name")
K8S_ENTITY_LABELS = (
    "project_id", "location", "cluster_name", "entity_type", "entity_namespace", "entity_name", "entity_uid",
)  # fmt: skip
TPU_VM_LABELS = ("location", "resource_id")


_RUNTIME_CAVEAT = (
    "TPU runtime metric: only for containers that declare containerPort 8431 (libtpu's metrics port); "
    "the vLLM and JetStream containers of this stack do not declare it today"
)

GCP_METRICS: tuple[Metric, ...] = (
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
)
