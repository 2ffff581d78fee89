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

- Recovery (vllm-pd): "vLLM groups down" counts a role's answering leaders against its groups
  (the fixed count, or the autoscaler's min), so a group that waits on recovery is seen long before
  Kueue's recoveryTimeout gives up on it (hours: the first-load budget); a role of one group is
  "no ready leaders"' case. "Kueue force-deleted a serving pod" matches Kueue's own event when its
  FailureRecoveryPolicy controller releases a pod a dead host left Terminating.
- On TPU7x cubes (vllm-pd and none), seven policies about the hardware under the slices
  (issues 45 and 63): observability/tpu_alerts.py says what each reads.

Every label a PromQL condition names (matchers and `by (...)`) must be one the catalog lists
for that metric (`domain.metric_catalog.unpublished_labels`): `alert_specs` refuses any other.

The pure `alert_specs` returns the policies as keyword arguments of
`gcp.monitoring.AlertPolicy` (dicts are accepted for its input types), so the
tests check them without Pulumi.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_gcp as gcp

from domain.metric_catalog import BY_NAME, JETSTREAM_JOB, VLLM_JOBS, unpublished_labels
from observability.alert_policy import AUTO_CLOSE, LOG_RATE_LIMIT, Policy, k8s_selector, log_policy, promql_condition
from observability.tpu_alerts import TpuHealth, tpu_health_policies

BACKENDS = ("vllm-pd", "saxml", "jetstream", "none")
DYNAMIC_SLICING = ("vllm-pd", "none")  # TPU7x cubes: Kueue, the slice controller, partition health
SMOKE_JOB = "serving-smoke-test"  # workloads/smoke_job.py
SMOKE_FAILURE_REASONS = ("BackoffLimitExceeded", "DeadlineExceeded")
CHANNEL = re.compile(r"^projects/[^/]+/notificationChannels/[^/]+$")

NO_LEADERS_FOR = "900s"
GROUPS_DOWN_FOR = "900s"
FORCEFULLY_DELETED = "KueueForcefullyDeleted"
QUEUE_FOR = "600s"
IDLE_FOR = "600s"

_DUTY = BY_NAME["kubernetes.io/node/accelerator/duty_cycle"].promql_name
_TENSORCORE = BY_NAME["kubernetes.io/node/accelerator/tensorcore_utilization"].promql_name


def _selector(job: str, namespace: str, cluster_name: str | None) -> str:
    parts = [f'job=~"{job}"' if "|" in job else f'job="{job}"', f'namespace="{namespace}"']
    if cluster_name:
        parts.append(f'cluster="{cluster_name}"')
    return "{" + ",".join(parts) + "}"


def _node_selector(cluster_name: str | None) -> str:
    return k8s_selector("k8s_node", cluster_name)


def no_ready_leaders_query(jobs: Sequence[str], namespace: str, cluster_name: str | None = None) -> str:
    """Per job, the number of targets whose last scrape succeeded; a job with no target counts 0."""
    selector = _selector("|".join(jobs), namespace, cluster_name)
    zeros = "".join(f' or label_replace(vector(0), "job", "{job}", "", "")' for job in jobs)
    return f"(sum by (job) (up{selector}){zeros}) < 1"


def groups_down_query(floors: Mapping[str, int], namespace: str, cluster_name: str | None = None) -> str:
    """Per job whose floor is above one, a series while fewer of its leaders answer than its floor (a
    job at floor one is `no_ready_leaders_query`'s): a group that waits on recovery, or never came up."""
    parts = []
    for job, floor in sorted(floors.items()):
        if floor > 1:
            answering = f"(sum(up{_selector(job, namespace, cluster_name)}) or vector(0))"
            parts.append(f'label_replace({answering} < {floor}, "job", "{job}", "", "")')
    return " or ".join(parts)


def forced_deletion_filter(project: str, namespace: str, cluster_name: str | None = None) -> str:
    """Kueue's event on a pod it force-deleted from an unreachable host (kueue v0.19.2
    pkg/controller/failurerecovery/pod_termination_controller.go, Warning `KueueForcefullyDeleted`)."""
    terms = [
        f'logName="projects/{project}/logs/events"',
        'jsonPayload.involvedObject.kind="Pod"',
        f'jsonPayload.involvedObject.namespace="{namespace}"',
        f'jsonPayload.reason="{FORCEFULLY_DELETED}"',
    ]
    if cluster_name:
        terms.append(f'resource.labels.cluster_name="{cluster_name}"')
    return "\n".join(terms)


def idle_while_queued_query(queue: str, cluster_name: str | None = None) -> str:
    node = _node_selector(cluster_name)
    return f"(max({_DUTY}{node}) or max({_TENSORCORE}{node})) < 1 and on () sum({queue}) > 0"


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


def _recovery_policies(
    project: str, namespace: str, cluster_name: str | None, floors: Mapping[str, int], forced_deletion: bool
) -> list[Policy]:
    """A role below its groups for a while (a group that waits on recovery), and each pod Kueue
    force-deleted from a dead host (docs/operations.md, When a TPU host fails)."""
    jobs = {VLLM_JOBS[role]: floor for role, floor in floors.items()}
    policies = []
    if any(floor > 1 for floor in jobs.values()):
        policies.append(
            Policy(
                "groups-down",
                "vLLM groups down",
                promql_condition(
                    "a vLLM role has fewer leaders answering /metrics than its groups",
                    groups_down_query(jobs, namespace, cluster_name),
                    GROUPS_DOWN_FOR,
                    "WARNING",
                ),
                "WARNING",
                f"A vLLM role in `{namespace}` has had fewer leaders answering than its groups (its fixed count, or "
                f"its autoscaler's min) for {GROUPS_DOWN_FOR}: a group waits on recovery (a failed TPU host, its pods "
                f"left Terminating) or never came up. `kubectl -n {namespace} get workloads` (PodsReady False with "
                "reason WaitForRecovery is a group Kueue waits for, until its recoveryTimeout), `kubectl get pods "
                f"-n {namespace} -o wide` (Terminating on a NotReady node: docs/operations.md, When a TPU host fails). "
                "Expected while weights load after a deploy.",
            )
        )
    if forced_deletion:
        policies.append(
            log_policy(
                "pod-force-deleted",
                "Kueue force-deleted a serving pod from an unreachable host",
                condition="Kueue force-deleted a pod left Terminating on an unreachable node",
                log_filter=forced_deletion_filter(project, namespace, cluster_name),
                severity="WARNING",
                runbook=f"A TPU host of the stack stopped answering and Kueue released the serving pod it left in "
                f"`{namespace}` (kueue.recovery.forceDeleteOnUnreachableHost): the group is made again elsewhere if a "
                "healthy partition is free. The event names the node: check it (`kubectl describe node`), and report "
                "the host as faulty if it is (docs/operations.md, When a TPU host fails).",
            )
        )
    return policies


def _vllm_policies(
    project: str, namespace: str, queue_threshold: int, cluster_name: str | None, smoke_test: bool
) -> list[Policy]:
    jobs = [VLLM_JOBS["prefill"], VLLM_JOBS["decode"]]
    waiting = f"vllm:num_requests_waiting{_selector('|'.join(jobs), namespace, cluster_name)}"
    policies = [
        Policy(
            "no-ready-leaders",
            "no ready vLLM leaders",
            promql_condition(
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
        Policy(
            "queue-backlog",
            f"vLLM queue above {queue_threshold}",
            promql_condition(
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
        Policy(
            "tpu-idle-while-queued",
            "TPUs idle while requests queue",
            promql_condition(
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
            Policy(
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


def _jetstream_policies(namespace: str, queue_threshold: int, cluster_name: str | None) -> list[Policy]:
    backlog = f"jetstream_prefill_backlog_size{_selector(JETSTREAM_JOB, namespace, cluster_name)}"
    return [
        Policy(
            "no-ready-servers",
            "no ready JetStream servers",
            promql_condition(
                "no JetStream server answers /metrics",
                no_ready_leaders_query([JETSTREAM_JOB], namespace, cluster_name),
                NO_LEADERS_FOR,
                "CRITICAL",
            ),
            "CRITICAL",
            f"No JetStream serving pod in `{namespace}` has answered a scrape for {NO_LEADERS_FOR}: "
            f"`kubectl -n {namespace} get pods -l app.kubernetes.io/name=jetstream`.",
        ),
        Policy(
            "queue-backlog",
            f"JetStream prefill backlog above {queue_threshold}",
            promql_condition(
                f"prefill backlog on a server above {queue_threshold}",
                f"max by (instance) ({backlog}) > {queue_threshold}",
                QUEUE_FOR,
                "WARNING",
            ),
            "WARNING",
            f"A JetStream server has held more than {queue_threshold} requests waiting for prefill for "
            f"{QUEUE_FOR}: add slices or shed load.",
        ),
        Policy(
            "tpu-idle-while-queued",
            "TPUs idle while requests queue",
            promql_condition(
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
    group_floors: Mapping[str, int] | None = None,
    forced_deletion: bool = False,
) -> list[dict[str, Any]]:
    """The policies for a backend, each `{"name": <resource name>, "policy": <AlertPolicy kwargs>}`.

    saxml and none have no scraped serving metrics (see NOT_SCRAPED): no policies. On vllm-pd,
    `group_floors` (role -> its fixed groups or autoscaler min) and `forced_deletion` (whether Kueue
    releases pods left on dead hosts) add the recovery policies.
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
        policies += _recovery_policies(project, namespace, cluster_name, group_floors or {}, forced_deletion)
    elif backend == "jetstream":
        policies = _jetstream_policies(namespace, queue_threshold, cluster_name)
    else:
        policies = []
    if tpu_health is not None and backend in DYNAMIC_SLICING:
        policies += tpu_health_policies(project, namespace, tpu_health, cluster_name)
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
    group_floors: Mapping[str, int] | None = None  # vllm-pd: role -> fixed groups or autoscaler min
    forced_deletion: bool = False  # vllm-pd: kueue.recovery.forceDeleteOnUnreachableHost


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
            group_floors=args.group_floors,
            forced_deletion=args.forced_deletion,
        )
        self.policies = {
            spec["name"]: gcp.monitoring.AlertPolicy(
                spec["name"], project=args.project, **spec["policy"], opts=pulumi.ResourceOptions(parent=self)
            )
            for spec in specs
        }
        self.register_outputs({"policies": sorted(self.policies)})
