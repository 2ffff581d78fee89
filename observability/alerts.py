"""Optional Cloud Monitoring alert policies for the serving stack (the caller decides whether to create them).

Every metric condition is PromQL (`condition_prometheus_query_language`), run by
Cloud Monitoring over both the scraped metrics and the GKE system metrics (the
latter under their PromQL names, e.g. `kubernetes_io:node_accelerator_duty_cycle`).

Design choices, because the cluster has no kube-state-metrics:

- "No ready serving leaders" reads the scrape health `up` of the vLLM (or
  JetStream) PodMonitoring targets instead of `kube_pod_status_ready`: vLLM's
  HTTP app (and so /metrics) only answers once the engine has loaded, and GMP
  drops pods that are not Running, so `up == 1` is "this leader serves".
  A role with no target at all has no `up` series: `label_replace(vector(0), ...)`
  supplies a zero for it, so a role whose leaders are all gone fires too. A fresh
  stack loads a 397B model for tens of minutes: expect this alert during the
  first load and after every rollout that reloads weights.
- "Smoke test failed" is a log-match condition on the Kubernetes event the Job
  controller records when the Job fails (`BackoffLimitExceeded`, or
  `DeadlineExceeded` past activeDeadlineSeconds), which GKE writes to the
  `events` log; it needs no metric at all.
- "TPUs idle while requests queue" takes the cluster's highest TPU duty cycle,
  falling back to TensorCore utilization (a host metric that exists without
  libtpu's port 8431) when no duty-cycle series exists, and fires only while
  requests wait: every TPU near zero with a queue means serving is wedged.

- On TPU7x cubes (vllm-pd and none), seven policies about the hardware under the slices
  (issues 45 and 63; what each says and what the stack does first is docs/operations.md, "When
  a TPU host fails"). Four are PromQL on metrics Google writes: a TPU VM `infra_health`
  UNHEALTHY, counted per reservation sub-block; a partition GKE reports not HEALTHY
  (`kubernetes.io/accelerator/partition/state`); a Slice seen in a state other than ACTIVE or
  ACTIVATING (`kubernetes.io/accelerator/slice/state`); a slice formation that ended FAILED
  (`kubernetes.io/accelerator/slice/formation_durations`). The slice and partition metrics are
  GKE system metrics (BETA), so they need no kube-state-metrics, and they see what the slice
  controller does without a Kubernetes event: it evicts a Workload whose Slice was deleted, or
  whose partitions another Slice holds, by setting the admission check to Retry and recording
  nothing (AI-Hypercomputer/xpk slice/internal/controller/workload_controller.go `evictWorkload`).
  What the metrics cannot see: a Slice gone between two 60-s samples, and a Slice never created
  (the partition-conflict eviction happens before creation; the slice controller this stack
  installs runs UseRetryMechanismForSliceCreation, which retries conflicts instead).
  Three are log-match conditions, each firing once per entry, rate-limited: the slice
  controller's Workload events (FailedCreateSlice, or the admission check moved to Retry), kept
  because they alone see a Slice the controller could not create (no Slice, so no series) and a
  Slice deleted when it stayed ACTIVATING past the activation timeout (ACTIVATING is left out of
  the state alert: activation may take that long), and because they name the Workload, which
  no metric label does; a host or infrastructure maintenance Compute Engine announces for a VM
  of the zone (`compute.instances.upcomingMaintenance`, `...upcomingInfraMaintenance`: system-event
  audit logs, not metrics); a Kueue Workload pending because its topology does not fit (a
  Kueue event; Kueue's own metrics are not scraped, NOT_SCRAPED).

Every label a PromQL condition names (matchers and `by (...)`) must be one the catalog lists
for that metric (`domain.metric_catalog.unpublished_labels`): `alert_specs` refuses any other.

The pure `alert_specs` returns the policies as keyword arguments of
`gcp.monitoring.AlertPolicy` (dicts are accepted for its input types), so the
tests check them without Pulumi.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_gcp as gcp

from domain.metric_catalog import BY_NAME, JETSTREAM_JOB, VLLM_JOBS, unpublished_labels

BACKENDS = ("vllm-pd", "saxml", "jetstream", "none")
DYNAMIC_SLICING = ("vllm-pd", "none")  # TPU7x cubes: Kueue, the slice controller, partition health
SMOKE_JOB = "serving-smoke-test"  # workloads/smoke_job.py
SMOKE_FAILURE_REASONS = ("BackoffLimitExceeded", "DeadlineExceeded")
CHANNEL = re.compile(r"^projects/[^/]+/notificationChannels/[^/]+$")

EVALUATION_INTERVAL = "60s"
NO_LEADERS_FOR = "900s"
QUEUE_FOR = "600s"
IDLE_FOR = "600s"
AUTO_CLOSE = "1800s"
LOG_RATE_LIMIT = "300s"

UNHEALTHY_FOR = "300s"
PARTITION_FOR = "900s"
# The slice alerts look back over SLICE_LOOKBACK so that a state or a failed formation seen in one 60-s sample
# keeps the condition true for longer than its duration: they fire once per occurrence, not only when it lasts.
SLICE_LOOKBACK = "10m"
SLICE_FOR = "300s"
# States of a Slice that are not a fault: ACTIVATING lasts up to the slice controller's --activation-timeout
# (k8s/slice_controller.py), after which the controller deletes it with an event (the slice-failed policy).
SLICE_OK_STATES = ("ACTIVE", "ACTIVATING")
PARTITION_OK_STATE = "HEALTHY"
FORMATION_FAILED = "FAILED"

_DUTY = BY_NAME["kubernetes.io/node/accelerator/duty_cycle"].promql_name
_INFRA_HEALTH = BY_NAME["compute.googleapis.com/instance/tpu/infra_health"].promql_name
_SLICE_STATE = BY_NAME["kubernetes.io/accelerator/slice/state"].promql_name
_PARTITION_STATE = BY_NAME["kubernetes.io/accelerator/partition/state"].promql_name
_FORMATIONS = BY_NAME["kubernetes.io/accelerator/slice/formation_durations"].promql_name + "_count"
# What the slice controller records on a Workload when a Slice failed or went stale past its
# activation timeout: the admission check moved to Retry (AI-Hypercomputer/xpk slice/internal/
# controller/workload_controller.go `AdmissionCheckUpdated`, `FailedCreateSlice`; core/slice.go isStale).
SLICE_EVENT_REASONS = ("AdmissionCheckUpdated", "FailedCreateSlice")
# Kueue's event on a Workload it cannot place: reason Pending, and TAS says the topology does not fit
# (kueue v0.19.2 pkg/scheduler/scheduler.go, pkg/cache/scheduler/tas_flavor_snapshot.go).
PENDING_REASON = "Pending"
PENDING_FIT = "to fit"
_TENSORCORE = BY_NAME["kubernetes.io/node/accelerator/tensorcore_utilization"].promql_name


def _selector(job: str, namespace: str, cluster_name: str | None) -> str:
    parts = [f'job=~"{job}"' if "|" in job else f'job="{job}"', f'namespace="{namespace}"']
    if cluster_name:
        parts.append(f'cluster="{cluster_name}"')
    return "{" + ",".join(parts) + "}"


def _k8s_selector(resource: str, cluster_name: str | None, *matchers: str) -> str:
    """A GKE system metric's selector: its monitored resource, the stack's cluster, then `matchers`."""
    parts = [f'monitored_resource="{resource}"']
    if cluster_name:
        parts.append(f'cluster_name="{cluster_name}"')
    return "{" + ",".join([*parts, *matchers]) + "}"


def _node_selector(cluster_name: str | None) -> str:
    return _k8s_selector("k8s_node", cluster_name)


def no_ready_leaders_query(jobs: Sequence[str], namespace: str, cluster_name: str | None = None) -> str:
    """Per job, the number of targets whose last scrape succeeded; a job with no target counts 0."""
    selector = _selector("|".join(jobs), namespace, cluster_name)
    zeros = "".join(f' or label_replace(vector(0), "job", "{job}", "", "")' for job in jobs)
    return f"(sum by (job) (up{selector}){zeros}) < 1"


def idle_while_queued_query(queue: str, cluster_name: str | None = None) -> str:
    node = _node_selector(cluster_name)
    return f"(max({_DUTY}{node}) or max({_TENSORCORE}{node})) < 1 and on () sum({queue}) > 0"


def _promql(title: str, query: str, duration: str, severity: str) -> dict[str, Any]:
    return {
        "display_name": title,
        "condition_prometheus_query_language": {
            "query": query,
            "duration": duration,
            "evaluation_interval": EVALUATION_INTERVAL,
            "labels": {"severity": severity.lower()},
            # Policies are created with the stack, before the first scrape has written the metrics.
            "disable_metric_validation": True,
        },
    }


@dataclass(frozen=True)
class _Policy:
    """One alert policy before it becomes `gcp.monitoring.AlertPolicy` keyword arguments."""

    name: str  # the Pulumi resource name
    title: str
    condition: dict[str, Any]
    severity: str  # CRITICAL | ERROR | WARNING
    runbook: str  # Markdown shown in the incident
    alert_strategy: dict[str, Any] | None = None

    def spec(self, prefix: str, channels: Sequence[str]) -> dict[str, Any]:
        return {
            "name": self.name,
            "policy": {
                "display_name": f"{prefix}: {self.title}",
                "combiner": "OR",
                "conditions": [self.condition],
                "notification_channels": list(channels),
                "severity": self.severity,
                "documentation": {"content": self.runbook, "mime_type": "text/markdown"},
                "alert_strategy": self.alert_strategy or {"auto_close": AUTO_CLOSE},
                "user_labels": {"stack": prefix, "component": "tpu-serving"},
            },
        }


def smoke_test_filter(project: str, namespace: str, cluster_name: str | None = None) -> str:
    reasons = " OR ".join(f'"{reason}"' for reason in SMOKE_FAILURE_REASONS)
    terms = [
        f'logName="projects/{project}/logs/events"',
        'jsonPayload.involvedObject.kind="Job"',
        f'jsonPayload.involvedObject.name="{SMOKE_JOB}"',
        f'jsonPayload.involvedObject.namespace="{namespace}"',
        f"jsonPayload.reason=({reasons})",
    ]
    if cluster_name:
        terms.append(f'resource.labels.cluster_name="{cluster_name}"')
    return "\n".join(terms)


def _vllm_policies(
    project: str, namespace: str, queue_threshold: int, cluster_name: str | None, smoke_test: bool
) -> list[_Policy]:
    jobs = [VLLM_JOBS["prefill"], VLLM_JOBS["decode"]]
    waiting = f"vllm:num_requests_waiting{_selector('|'.join(jobs), namespace, cluster_name)}"
    policies = [
        _Policy(
            "no-ready-leaders",
            "no ready vLLM leaders",
            _promql(
                "a vLLM role has no leader answering /metrics",
                no_ready_leaders_query(jobs, namespace, cluster_name),
                NO_LEADERS_FOR,
                "CRITICAL",
            ),
            "CRITICAL",
            f"No `{jobs[0]}` or `{jobs[1]}` leader in `{namespace}` has answered a scrape for {NO_LEADERS_FOR}: "
            f"check `kubectl -n {namespace} get lws,pods`, Kueue admission (`kubectl get workloads -A`) and the "
            "leaders' logs. Expected while weights load after a deploy (tens of minutes).",
        ),
        _Policy(
            "queue-backlog",
            f"vLLM queue above {queue_threshold}",
            _promql(
                f"waiting requests on a leader above {queue_threshold}",
                f"max by (job) ({waiting}) > {queue_threshold}",
                QUEUE_FOR,
                "WARNING",
            ),
            "WARNING",
            f"A vLLM leader has held more than {queue_threshold} waiting requests for {QUEUE_FOR}: the role is "
            "saturated. Add replicas (serving.prefill/decode.replicas, or raise autoscaling.max where the role "
            "autoscales and the reservation has room) or shed load; check KV-cache usage on the dashboard.",
        ),
        _Policy(
            "tpu-idle-while-queued",
            "TPUs idle while requests queue",
            _promql(
                "every TPU near zero duty cycle while vLLM requests wait",
                idle_while_queued_query(waiting, cluster_name),
                IDLE_FOR,
                "ERROR",
            ),
            "ERROR",
            "Requests are waiting but no TPU chip in the cluster is busy: serving is wedged (a hung engine, a "
            "broken KV transfer between prefill and decode, or Ray lost a worker). Check the leaders' logs; "
            "restarting the LeaderWorkerSet group reloads the model.",
        ),
    ]
    if smoke_test:
        policies.append(
            _Policy(
                "smoke-test-failed",
                "serving smoke test failed",
                {
                    "display_name": f"Job {SMOKE_JOB} failed",
                    "condition_matched_log": {"filter": smoke_test_filter(project, namespace, cluster_name)},
                },
                "ERROR",
                f"The Job `{SMOKE_JOB}` in `{namespace}` failed (backoff limit or deadline): the gateway did not "
                f"answer the reference requests. `kubectl -n {namespace} logs job/{SMOKE_JOB}`.",
                # Log-match conditions require a notification rate limit.
                {"notification_rate_limit": {"period": LOG_RATE_LIMIT}, "auto_close": AUTO_CLOSE},
            )
        )
    return policies


@dataclass(frozen=True)
class TpuHealth:
    """Where a dynamic-slicing stack's TPU hosts are, for the hardware policies."""

    zone: str
    machine_type: str  # e.g. tpu7x-standard-4t, the infra_health machine_type label


def host_unhealthy_query(health: TpuHealth) -> str:
    """The stack's TPU VMs (zone and machine type) that Google reports UNHEALTHY, per sub-block."""
    selector = f'{{health_status="UNHEALTHY",machine_type="{health.machine_type}",location="{health.zone}"}}'
    return f"count by (block_id, subblock_id) ({_INFRA_HEALTH}{selector}) > 0"


def slice_not_active_query(cluster_name: str | None = None) -> str:
    """Slices of the cluster seen in the last SLICE_LOOKBACK in a state other than ACTIVE or ACTIVATING."""
    selector = _k8s_selector("k8s_entity", cluster_name, f'state!~"{"|".join(SLICE_OK_STATES)}"')
    return (
        "count by (entity_name, slice_topology, state) "
        f"(max_over_time({_SLICE_STATE}{selector}[{SLICE_LOOKBACK}]) == 1) > 0"
    )


def slice_formation_failed_query(cluster_name: str | None = None) -> str:
    """Slice formations of the cluster that ended FAILED in the last SLICE_LOOKBACK, per slice topology."""
    selector = _k8s_selector("k8s_entity", cluster_name, f'end_state="{FORMATION_FAILED}"')
    return f"sum by (slice_topology) (increase({_FORMATIONS}{selector}[{SLICE_LOOKBACK}])) > 0"


def partition_not_healthy_query(cluster_name: str | None = None) -> str:
    """Partitions of the cluster GKE reports in a state other than HEALTHY, per node pool (sub-block)."""
    selector = _k8s_selector("k8s_node_pool", cluster_name, f'state!="{PARTITION_OK_STATE}"')
    return f"count by (node_pool_name, partition_id, state) ({_PARTITION_STATE}{selector} == 1) > 0"


def _events(project: str, kind: str, reasons: Sequence[str], cluster_name: str | None) -> list[str]:
    quoted = " OR ".join(f'"{reason}"' for reason in reasons)
    terms = [
        f'logName="projects/{project}/logs/events"',
        f'jsonPayload.involvedObject.kind="{kind}"',
        f"jsonPayload.reason=({quoted})",
    ]
    if cluster_name:
        terms.append(f'resource.labels.cluster_name="{cluster_name}"')
    return terms


def slice_failed_filter(project: str, cluster_name: str | None = None) -> str:
    terms = _events(project, "Workload", SLICE_EVENT_REASONS, cluster_name)
    # AdmissionCheckUpdated also reports Pending -> Ready; only a move to Retry is a failure.
    terms.append('(jsonPayload.reason="FailedCreateSlice" OR jsonPayload.message:"to \\"Retry\\"")')
    return "\n".join(terms)


def pending_no_fit_filter(project: str, namespace: str, cluster_name: str | None = None) -> str:
    terms = _events(project, "Workload", (PENDING_REASON,), cluster_name)
    terms += [f'jsonPayload.involvedObject.namespace="{namespace}"', f'jsonPayload.message:"{PENDING_FIT}"']
    return "\n".join(terms)


# Compute Engine's notices of maintenance on a VM, in the system_event audit log of the gce_instance: a host
# maintenance (Cloud TPU "View maintenance notifications": metadata maintenanceStatus PENDING or ONGOING, with
# windowStartTime), and a maintenance of the infrastructure under the VM. NVIDIA/NVSentinel
# health-monitors/csp-health-monitor/pkg/event/gcp_normalizer.go reads both methods from that log with the same
# metadata fields, takes a notice without maintenanceStatus as pending, and takes the status message "Maintenance
# window has completed" as the end; no Google page found describes the infrastructure notice's payload, so its
# condition excludes only what is known not to be a new notice.
MAINTENANCE_METHOD = "compute.instances.upcomingMaintenance"
INFRA_MAINTENANCE_METHOD = "compute.instances.upcomingInfraMaintenance"
MAINTENANCE_DONE = "Maintenance window has completed"


def maintenance_filter(project: str, zone: str) -> str:
    """Compute Engine's notice of an upcoming host or infrastructure maintenance on a VM of the zone."""
    host = f'protoPayload.methodName="{MAINTENANCE_METHOD}" AND protoPayload.metadata.maintenanceStatus="PENDING"'
    infra = (
        f'protoPayload.methodName="{INFRA_MAINTENANCE_METHOD}"'
        ' AND NOT protoPayload.metadata.maintenanceStatus="ONGOING"'
        f' AND NOT protoPayload.status.message:"{MAINTENANCE_DONE}"'
    )
    return "\n".join(
        [
            f'logName="projects/{project}/logs/cloudaudit.googleapis.com%2Fsystem_event"',
            f'resource.labels.zone="{zone}"',
            # The Logging query language binds AND weaker than OR: every group is parenthesised.
            f"(({host}) OR ({infra}))",
        ]
    )


def _log_policy(name: str, title: str, *, condition: str, log_filter: str, severity: str, runbook: str) -> _Policy:
    return _Policy(
        name,
        title,
        {"display_name": condition, "condition_matched_log": {"filter": log_filter}},
        severity,
        runbook,
        # Log-match conditions require a notification rate limit.
        {"notification_rate_limit": {"period": LOG_RATE_LIMIT}, "auto_close": AUTO_CLOSE},
    )


def _tpu_health_policies(project: str, namespace: str, health: TpuHealth, cluster_name: str | None) -> list[_Policy]:
    """The hardware under the slices (docs/operations.md, "When a TPU host fails")."""
    return [
        _Policy(
            "tpu-host-unhealthy",
            "TPU host UNHEALTHY",
            _promql(
                f"a {health.machine_type} VM in {health.zone} is UNHEALTHY (per sub-block)",
                host_unhealthy_query(health),
                UNHEALTHY_FOR,
                "ERROR",
            ),
            "ERROR",
            "Google reports a TPU VM of this stack's zone UNHEALTHY (`unhealthy_category` says why) in the "
            "sub-block the incident names (`subblock_id`, a hashed id: `gcloud compute reservations sub-blocks "
            "list` maps it). By itself: GKE marks the host's partitions unhealthy, the serving and check pods "
            "select HEALTHY partitions only, and Kueue replaces the failed node or evicts and re-queues the "
            "group, which LWS re-creates on a healthy partition. Check `kubectl get nodes -L "
            "cloud.google.com/gke-tpu-partition-4x4x4-state` and `kubectl get workloads -A`; if the host stays "
            "UNHEALTHY, report it and plan the sub-block's maintenance.",
        ),
        _Policy(
            "tpu-partition-not-healthy",
            "TPU partition not HEALTHY",
            _promql(
                f"GKE reports a partition not {PARTITION_OK_STATE} (per node pool)",
                partition_not_healthy_query(cluster_name),
                PARTITION_FOR,
                "WARNING",
            ),
            "WARNING",
            "GKE reports a TPU partition of the node pool the incident names (`node_pool_name`: one sub-block) in "
            "`state` for 15 minutes: DEGRADED (still used: the slice controller runs with "
            "HEALTHY_AND_DEGRADED), UNHEALTHY (no slice forms on it), UNSET or INCOMPLETE (nodes of the pool "
            "missing). By itself: Kueue places new groups on HEALTHY partitions and GKE provisions the missing "
            "nodes. `kubectl get nodes -l cloud.google.com/gke-nodepool=<node_pool_name> -L "
            "cloud.google.com/gke-tpu-partition-4x4x4-state`; if it stays, see the TPU host UNHEALTHY alert and "
            "plan the sub-block's maintenance.",
        ),
        _Policy(
            "slice-not-active",
            "TPU Slice not ACTIVE",
            _promql(
                f"GKE reported a Slice in a state other than {' or '.join(SLICE_OK_STATES)} "
                f"in the last {SLICE_LOOKBACK}",
                slice_not_active_query(cluster_name),
                SLICE_FOR,
                "ERROR",
            ),
            "ERROR",
            "GKE reported a Slice of this cluster in `state` (neither ACTIVE nor ACTIVATING): FAILED, "
            "ACTIVE_DEGRADED (serving on a degraded sub-block, which no event reports), DEACTIVATING or "
            "INCOMPLETE (being dismantled: deleted, or a critical failure). The slice controller evicts a "
            "Workload whose Slice was deleted without recording any event, so this may be the only trace. "
            "By itself: the controller deletes a FAILED Slice and Kueue admits the Workload again where a "
            "healthy partition fits. `kubectl get slices -A` (`entity_name` should be the Slice's name: not "
            "verified), `kubectl get workloads -A`; a Slice held ACTIVE_DEGRADED: move its group off the "
            "sub-block at a quiet hour.",
        ),
        _Policy(
            "slice-formation-failed",
            "TPU Slice formation failed",
            _promql(
                f"a Slice formation ended {FORMATION_FAILED} in the last {SLICE_LOOKBACK} (per topology)",
                slice_formation_failed_query(cluster_name),
                SLICE_FOR,
                "ERROR",
            ),
            "ERROR",
            "GKE counted a slice formation of this cluster that ended FAILED (`slice_topology` says which "
            "shape), also one that failed and was deleted between two samples of the Slice state. By itself: "
            "the slice controller retries the formation or sends the Workload back to Kueue. Repeated "
            "failures of one shape: `kubectl get slices -A`, the partitions' state (`kubectl get nodes -L "
            "cloud.google.com/gke-tpu-partition-4x4x4-state`), and the slice controller's logs.",
        ),
        _log_policy(
            "slice-failed",
            "TPU Slice failed or never became ACTIVE (slice controller event)",
            condition="the slice controller set a Workload's slice admission check to Retry",
            log_filter=slice_failed_filter(project, cluster_name),
            severity="ERROR",
            runbook="The slice controller could not create a Slice (FailedCreateSlice), or sent a Workload back to "
            "Kueue (admission check Retry): its Slice FAILED, or stayed ACTIVATING past the controller's "
            "activation timeout (the Slice state alert leaves ACTIVATING out). The event names the Workload, "
            "which no metric does. By itself: Kueue re-queues the Workload with its backoff and admits it "
            "again where a healthy partition fits. `kubectl get slices -A`, `kubectl describe workload -n <ns> "
            "<name>` (the admission check's message names the Slice and its error).",
        ),
        _log_policy(
            "tpu-maintenance-scheduled",
            "maintenance scheduled on a TPU VM",
            condition="Compute Engine announced an upcoming host or infrastructure maintenance on a VM of the zone",
            log_filter=maintenance_filter(project, health.zone),
            severity="WARNING",
            runbook="A maintenance is scheduled on a TPU VM of the zone: `compute.instances.upcomingMaintenance` (the "
            "host) or `compute.instances.upcomingInfraMaintenance` (the infrastructure under it), with the window "
            "in the entry's `windowStartTime`. GKE also labels the node "
            "`cloud.google.com/scheduled-maintenance-time` (epoch seconds): `kubectl get nodes -L "
            "cloud.google.com/scheduled-maintenance-time`. A TPU VM does not live-migrate: the slice on it "
            "restarts. In All Capacity mode you may start it yourself at a quiet hour (docs/operations.md, "
            '"When a TPU host fails").',
        ),
        _log_policy(
            "group-pending-no-fit",
            "a TPU Workload cannot be placed",
            condition="Kueue keeps a Workload pending: its topology does not fit",
            log_filter=pending_no_fit_filter(project, namespace, cluster_name),
            severity="WARNING",
            runbook=f"Kueue cannot place a Workload in `{namespace}`: no free partition of its shape is HEALTHY and "
            "unused (or lower-priority work cannot be preempted). `kubectl get workloads -n "
            f"{namespace}`, `kubectl get nodes -L cloud.google.com/gke-tpu-partition-2x2x2-state`; the "
            "admission preview (`make plan`) says what should fit when every cube is healthy.",
        ),
    ]


def _jetstream_policies(namespace: str, queue_threshold: int, cluster_name: str | None) -> list[_Policy]:
    backlog = f"jetstream_prefill_backlog_size{_selector(JETSTREAM_JOB, namespace, cluster_name)}"
    return [
        _Policy(
            "no-ready-servers",
            "no ready JetStream servers",
            _promql(
                "no JetStream server answers /metrics",
                no_ready_leaders_query([JETSTREAM_JOB], namespace, cluster_name),
                NO_LEADERS_FOR,
                "CRITICAL",
            ),
            "CRITICAL",
            f"No JetStream serving pod in `{namespace}` has answered a scrape for {NO_LEADERS_FOR}: "
            f"`kubectl -n {namespace} get pods -l app.kubernetes.io/name=jetstream`.",
        ),
        _Policy(
            "queue-backlog",
            f"JetStream prefill backlog above {queue_threshold}",
            _promql(
                f"prefill backlog on a server above {queue_threshold}",
                f"max by (instance) ({backlog}) > {queue_threshold}",
                QUEUE_FOR,
                "WARNING",
            ),
            "WARNING",
            f"A JetStream server has held more than {queue_threshold} requests waiting for prefill for "
            f"{QUEUE_FOR}: add slices or shed load.",
        ),
        _Policy(
            "tpu-idle-while-queued",
            "TPUs idle while requests queue",
            _promql(
                "every TPU near zero duty cycle while JetStream requests wait",
                idle_while_queued_query(backlog, cluster_name),
                IDLE_FOR,
                "ERROR",
            ),
            "ERROR",
            "Requests wait for prefill but no TPU chip in the cluster is busy: the engine is wedged.",
        ),
    ]


def alert_specs(
    project: str,
    prefix: str,
    namespace: str,
    notification_channels: Sequence[str],
    queue_threshold: int,
    *,
    backend: str = "vllm-pd",
    cluster_name: str | None = None,
    smoke_test: bool = True,
    tpu_health: TpuHealth | None = None,
) -> list[dict[str, Any]]:
    """The policies for a backend, each `{"name": <resource name>, "policy": <AlertPolicy kwargs>}`.

    saxml and none have no scraped serving metrics (see NOT_SCRAPED): no policies.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, not {backend!r}")
    if queue_threshold < 1:
        raise ValueError(f"queue_threshold must be at least 1, not {queue_threshold}")
    bad = [channel for channel in notification_channels if not CHANNEL.match(channel)]
    if bad:
        raise ValueError(f"notification channels must be projects/<project>/notificationChannels/<id>: {bad}")
    if backend == "vllm-pd":
        policies = _vllm_policies(project, namespace, queue_threshold, cluster_name, smoke_test)
    elif backend == "jetstream":
        policies = _jetstream_policies(namespace, queue_threshold, cluster_name)
    else:
        policies = []
    if tpu_health is not None and backend in DYNAMIC_SLICING:
        policies += _tpu_health_policies(project, namespace, tpu_health, cluster_name)
    specs = [policy.spec(prefix, notification_channels) for policy in policies]
    errors = label_errors(specs)
    if errors:
        raise ValueError("alert conditions name labels their metrics do not publish: " + "; ".join(errors))
    return specs


def label_errors(specs: Sequence[dict[str, Any]]) -> list[str]:
    """Each label a policy's PromQL names (a matcher, `by (...)`) that the catalog does not list for its metric."""
    errors = []
    for spec in specs:
        for condition in spec["policy"]["conditions"]:
            promql = condition.get("condition_prometheus_query_language")
            if promql is None:
                continue
            for metric, label in sorted(unpublished_labels(promql["query"])):
                errors.append(f"{spec['name']}: {metric} publishes no label {label!r}")
    return errors


@dataclass(frozen=True)
class AlertsArgs:
    project: str
    prefix: str
    namespace: str
    notification_channels: Sequence[str] = ()  # projects/<project>/notificationChannels/<id>
    queue_threshold: int = 32  # waiting requests on one leader, sustained for 10 minutes
    backend: str = "vllm-pd"
    cluster_name: str | None = None  # scope every condition to the stack's cluster (recommended)
    smoke_test: bool = True  # whether the smoke-test Job exists (vllm-pd only)
    tpu_health: TpuHealth | None = None  # the TPU hosts' zone and machine type (dynamic slicing)


class Alerts(pulumi.ComponentResource):
    policies: dict[str, gcp.monitoring.AlertPolicy]

    def __init__(self, name: str, args: AlertsArgs, opts: pulumi.ResourceOptions | None = None):
        # The type token names the package the component was first in: it is part of every URN below it.
        super().__init__("tpu-slicing:infra:Alerts", name, None, opts)
        specs = alert_specs(
            args.project,
            args.prefix,
            args.namespace,
            args.notification_channels,
            args.queue_threshold,
            backend=args.backend,
            cluster_name=args.cluster_name,
            smoke_test=args.smoke_test,
            tpu_health=args.tpu_health,
        )
        self.policies = {
            spec["name"]: gcp.monitoring.AlertPolicy(
                spec["name"], project=args.project, **spec["policy"], opts=pulumi.ResourceOptions(parent=self)
            )
            for spec in specs
        }
        self.register_outputs({"policies": sorted(self.policies)})
