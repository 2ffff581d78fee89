"""The alert policies about the hardware under the TPU7x slices (no Pulumi).

`alert_specs` (observability/alerts.py) adds these seven on TPU7x cubes (vllm-pd and none), given the
hosts' `TpuHealth` (issues 45 and 63; what each says and what the stack does first is docs/operations.md,
"When a TPU host fails"). Four are PromQL on metrics Google writes: a TPU VM `infra_health`
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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from domain.metric_catalog import BY_NAME
from observability.alert_policy import Policy, k8s_selector, log_policy, promql_condition

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
    selector = k8s_selector("k8s_entity", cluster_name, f'state!~"{"|".join(SLICE_OK_STATES)}"')
    return (
        "count by (entity_name, slice_topology, state) "
        f"(max_over_time({_SLICE_STATE}{selector}[{SLICE_LOOKBACK}]) == 1) > 0"
    )


def slice_formation_failed_query(cluster_name: str | None = None) -> str:
    """Slice formations of the cluster that ended FAILED in the last SLICE_LOOKBACK, per slice topology."""
    selector = k8s_selector("k8s_entity", cluster_name, f'end_state="{FORMATION_FAILED}"')
    return f"sum by (slice_topology) (increase({_FORMATIONS}{selector}[{SLICE_LOOKBACK}])) > 0"


def partition_not_healthy_query(cluster_name: str | None = None) -> str:
    """Partitions of the cluster GKE reports in a state other than HEALTHY, per node pool (sub-block)."""
    selector = k8s_selector("k8s_node_pool", cluster_name, f'state!="{PARTITION_OK_STATE}"')
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


def tpu_health_policies(project: str, namespace: str, health: TpuHealth, cluster_name: str | None) -> list[Policy]:
    """The hardware under the slices (docs/operations.md, "When a TPU host fails")."""
    return [
        Policy(
            "tpu-host-unhealthy",
            "TPU host UNHEALTHY",
            promql_condition(
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
        Policy(
            "tpu-partition-not-healthy",
            "TPU partition not HEALTHY",
            promql_condition(
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
        Policy(
            "slice-not-active",
            "TPU Slice not ACTIVE",
            promql_condition(
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
        Policy(
            "slice-formation-failed",
            "TPU Slice formation failed",
            promql_condition(
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
        log_policy(
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
        log_policy(
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
        log_policy(
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
