"""Recovery from unhealthy TPU hosts: the health a TPU pod selects, and Kueue's recovery settings.

Two halves, one concern (issue 45):

- **Healthy placement.** On TPU7x cubes GKE labels every node with one state label per partition
  shape, `cloud.google.com/gke-tpu-partition-<shape>-state` (HEALTHY, DEGRADED, ...). The slice
  controller's webhooks add a required node affinity on that label to every dynamic-slice pod
  template that selects none, allowing the values of its `--default-slice-health-node-affinity`
  flag (AI-Hypercomputer/xpk slice/internal/webhooks/defaults.go `annotatePodTemplateSpecWithSliceHealth`;
  the label per shape in slice/internal/topology/topology.go `HealthLabel`, a super-slice's is the
  4x4x4 one, slice/internal/core/constants.go). The program runs that flag at HEALTHY_AND_DEGRADED
  (k8s/slice_controller.py, as GKE's manifest does), so a pod that says nothing may land on a
  degraded partition. Every TPU7x pod template the program writes selects HEALTHY itself, as llm-d's
  TPU7x dynamic-slice recipes do (llm-d/llm-d docs/infrastructure/providers/gke/dynamic-slicing/
  README.md, "Pod nodeSelector (health)"); the webhook then leaves it alone.
- **Kueue configured to recover** (v0.19.2). `waitForPodsReady` is on by default there with a 30-minute
  timeout, and `recoveryTimeout` defaults to the timeout (apis/config/v1beta2/defaults.go,
  `DefaultWaitForPodsReadyTimeout`): a 397B model that loads for hours would be evicted and
  re-queued forever. The timeout is measured from the Workload's Admitted condition
  (pkg/controller/core/workload_controller.go `admittedNotReadyWorkload`), which the slice
  admission check sets only once the slice is ACTIVE, so what it must outlast is the image pull
  and a leader's startup (domain/serving_budget.py): `PODS_READY_MIN_SECONDS`. The settings refuse
  less, for either timeout.

- **Pods left on a dead host.** A pod on a host whose kubelet stopped answering is marked for
  deletion by the taint-eviction controller and stays Terminating until a kubelet confirms, so an
  LWS group's StatefulSet makes no replacement (docs/operations.md, "When a TPU host fails").
  Kueue's FailureRecoveryPolicy gate (alpha since v0.15, off by default at v0.19.2,
  pkg/features/kube_features.go) runs a controller that force-deletes a pod carrying
  `kueue.x-k8s.io/safe-to-forcefully-delete: "true"` once its deletion timestamp is a minute past
  and its node carries the unreachable taint (pkg/controller/failurerecovery/
  pod_termination_controller.go; the annotation in pkg/controller/constants/constants.go). The
  program turns it on and annotates its vLLM serving pods (`kueue.recovery.forceDeleteOnUnreachableHost`,
  on by default): they keep no state a second copy could corrupt (weights are read-only, the XLA
  cache is written by content key), and a pod on a partitioned host that still runs is cut off from
  its group's leader anyway. Off, a person releases them (the runbook's force delete) or GKE's node
  auto-repair does.

Plain Python over pydantic models; `settings/model.py` calls these rules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from domain.serving_budget import BUDGET
from domain.topology import Generation, Topology
from settings.refused import RefusedClass

if TYPE_CHECKING:
    from settings.model import KueueRecoveryConfig

# --- healthy placement ------------------------------------------------------------------------

HEALTHY = "HEALTHY"  # slice/internal/core/constants.go TPUSliceHealthNodeSelectorHealthy


def partition_state_label(generation: Generation, shape: Topology) -> str | None:
    """The node label that carries the health of the partition a slice of `shape` runs on, or None
    on a generation without cubes (fixed multi-host slices: their node pool is the slice, and GKE
    puts no partition labels on it). A sub-slice reads its own shape's label; a super-slice spans
    whole cubes and reads the cube's (slice/internal/topology/topology.go `HealthLabel`)."""
    cube = generation.cube_topology
    if cube is None:
        return None
    partition = shape if str(shape) in generation.subslice_shapes else cube
    return f"cloud.google.com/gke-tpu-partition-{partition}-state"


def healthy_selector(generation: Generation, shape: Topology) -> dict[str, str]:
    """The nodeSelector entries that keep a pod of a `shape` slice on HEALTHY partitions only."""
    label = partition_state_label(generation, shape)
    return {label: HEALTHY} if label else {}


# --- Kueue's recovery settings ------------------------------------------------------------------

# Kueue's forced deletion of pods left on an unreachable host (FailureRecoveryPolicy, above).
FORCE_DELETE_GATE = "FailureRecoveryPolicy"
FORCE_DELETE_ANNOTATION = "kueue.x-k8s.io/safe-to-forcefully-delete"  # its value must be "true"


def force_delete_annotations(enabled: bool) -> dict[str, str]:
    """What a serving pod template carries so that Kueue may force-delete it on an unreachable host."""
    return {FORCE_DELETE_ANNOTATION: "true"} if enabled else {}


# From Kueue's Admitted condition to every pod Ready: the image pull on a new node (with Kueue's
# own pass) and a leader's startup probe, Ray's wait plus the engine's (domain/serving_budget.py).
PODS_READY_MIN_SECONDS = BUDGET.admission_and_pull_seconds + BUDGET.startup_seconds
# Kueue's requeuing backoff is base * 2^(n-1) capped at the max (apis/config/v1beta2/
# configuration_types.go RequeuingStrategy); its defaults are 60 s and 3600 s.
BACKOFF_BASE_DEFAULT = 60
BACKOFF_MAX_DEFAULT = 1800
BACKOFF_MAX_LIMIT = 86_400
PODS_READY_MAX_SECONDS = 7 * 86_400  # a week: past it, a stuck group is never let go


def _duration(seconds: int) -> str:
    """A Go duration Kueue's Configuration parses (metav1.Duration), in whole minutes when exact."""
    return f"{seconds // 60}m" if seconds % 60 == 0 else f"{seconds}s"


def pods_ready_timeout(value: int) -> int:
    """kueue.recovery.podsReadyTimeoutSeconds and recoveryTimeoutSeconds: at least the startup budget."""
    if value < PODS_READY_MIN_SECONDS:
        raise ValueError(
            f"{value} s would evict serving groups that are still loading: Kueue counts it from admission, "
            f"and a group needs the image pull and its leader's startup ({PODS_READY_MIN_SECONDS} s, "
            f"domain/serving_budget.py); allowed: at least {PODS_READY_MIN_SECONDS}"
        )
    return value


def backoff_bounds(recovery: KueueRecoveryConfig) -> None:
    """KueueRecoveryConfig: the requeuing backoff's cap is not below its base."""
    if recovery.backoff_max_seconds < recovery.backoff_base_seconds:
        raise ValueError(
            f"kueue.recovery.backoffMaxSeconds {recovery.backoff_max_seconds} is below backoffBaseSeconds "
            f"{recovery.backoff_base_seconds}; allowed: at least the base"
        )


def kueue_manager_config(recovery: KueueRecoveryConfig) -> dict[str, object]:
    """What the program adds to Kueue's manager Configuration (config.kueue.x-k8s.io/v1beta2).

    - `waitForPodsReady`: timeouts from the budget; `blockAdmission` stays false, because true would
      hold every other admission in the cluster until one group is Ready (hours on this model):
      prefill and decode groups would start one after another.
    - `requeuingStrategy`: an evicted group waits base * 2^(n-1) seconds, at most the max, before it
      is tried again; `backoffLimitCount` unset (Kueue's default, endless), because reaching a limit
      deactivates the Workload and serving would stay down until a person reactivates it; the alert
      on a pending group tells that person instead (observability/tpu_alerts.py).
    - `featureGates`: TAS failed-node replacement, its fail-fast mode, replacement on pod
      termination and on untolerated taints: all beta and on by default at v0.19.2
      (pkg/features/kube_features.go); written out so an upgrade that changes a default shows up in
      the plan's diff rather than in an outage. Fail-fast evicts a group at once when no healthy node
      can replace a failed one (site/content/en/docs/concepts/topology_aware_scheduling.md, "Fast Hot
      swap"), instead of holding its other hosts until `recoveryTimeout`. FailureRecoveryPolicy
      (alpha) as `kueue.recovery.forceDeleteOnUnreachableHost` says, written out either way.
    In the Configuration, not the chart's `controllerManager.featureGates` (which become a
    `--feature-gates` argument): Kueue refuses gates given both ways (pkg/config/validation.go).
    """
    strategy: dict[str, object] = {
        "timestamp": "Eviction",
        "backoffBaseSeconds": recovery.backoff_base_seconds,
        "backoffMaxSeconds": recovery.backoff_max_seconds,
    }
    return {
        "waitForPodsReady": {
            "timeout": _duration(recovery.pods_ready_timeout_seconds),
            "recoveryTimeout": _duration(recovery.recovery_timeout_seconds),
            "blockAdmission": False,
            "requeuingStrategy": strategy,
        },
        "featureGates": {
            **dict.fromkeys(FEATURE_GATES, True),
            FORCE_DELETE_GATE: recovery.force_delete_on_unreachable_host,
        },
    }


FEATURE_GATES = (
    "TASFailedNodeReplacement",
    "TASFailedNodeReplacementFailFast",
    "TASReplaceNodeOnPodTermination",
    "TASReplaceNodeOnNodeTaints",
)


REFUSED = [
    RefusedClass(
        "Kueue's PodsReady timeout below the startup budget",
        pods_ready_timeout,
        {"kueue": {"recovery": {"podsReadyTimeoutSeconds": 1800}}},
        "kueue.recovery.podsReadyTimeoutSeconds",
        f"at least {PODS_READY_MIN_SECONDS}",
    ),
    RefusedClass(
        "Kueue's recovery timeout below the startup budget",
        pods_ready_timeout,
        {"kueue": {"recovery": {"recoveryTimeoutSeconds": 600}}},
        "kueue.recovery.recoveryTimeoutSeconds",
        f"at least {PODS_READY_MIN_SECONDS}",
    ),
    RefusedClass(
        "Kueue's requeuing backoff capped below its base",
        backoff_bounds,
        {"kueue": {"recovery": {"backoffBaseSeconds": 600, "backoffMaxSeconds": 300}}},
        "kueue.recovery",
        "at least the base",
    ),
]
