"""How long a serving group evicted from a failed TPU host takes to serve again on a real cluster.

Each term is what a real system waits, from its source, not what the local plane measures (the
plane shortens the Kubernetes timers to seconds, tests/control_plane.py FAILURES):

1. **detection**: the node lifecycle controller marks a node whose kubelet stopped renewing its
   Lease Ready=Unknown, and taints it unreachable, after `--node-monitor-grace-period`: 50 s
   (kubernetes v1.36.3 pkg/controller/nodelifecycle/config/v1alpha1/defaults.go), at
   `--node-eviction-rate` 0.1 nodes a second (cmd/kube-controller-manager/app/options/
   nodelifecyclecontroller.go): when a whole cube fails, its last node is tainted (hosts - 1) x 10 s
   after the first. Kueue v0.19.2
   reacts to the untolerated taint at once (TASReplaceNodeOnNodeTaints, on), finds no healthy node
   in the group's partition and evicts the group (NodeFailures, fail-fast).
2. **eviction**: the taint-eviction controller marks the pods for deletion when their toleration of
   the taint runs out: 300 s, what the DefaultTolerationSeconds admission plugin gives every pod
   (plugin/pkg/admission/defaulttolerationseconds/admission.go). Kueue's eviction of the group
   (step 1) may mark them sooner; 300 s is the bound.
3. **release**: with no kubelet to confirm, the pods stay Terminating and the group's StatefulSet
   makes no replacement, until one of three releases them:
   - Kueue's FailureRecoveryPolicy controller, which the program turns on
     (`kueue.recovery.forceDeleteOnUnreachableHost`, settings/rules_recovery.py): it force-deletes
     an annotated pod a minute after its deletion timestamp (kueue v0.19.2
     pkg/controller/failurerecovery/pod_termination_controller.go, `forcefulTerminationGracePeriod`),
     and the taint-eviction controller's delete sets that timestamp the pod's termination grace
     period ahead: Kubernetes' default 30 s, which the program's serving pods keep
     (k8s.io/api core/v1 `DefaultTerminationGracePeriodSeconds`);
   - a person force-deleting them (docs/operations.md, "When a TPU host fails"), counted as no time;
   - GKE node auto-repair re-creating the node (it starts once a node reported NotReady, or
     nothing, for about 10 minutes: GKE docs, "Auto-repair nodes"; how long the re-creation itself
     takes is not published, so it is not counted).
4. **re-admission**: Kueue admits the group again on a healthy partition; the requeuing backoff
   applies to PodsReady timeouts, not to NodeFailures evictions, so this takes seconds on the
   plane (tests/test_slice_recovery.py) and is counted as none here.
5. **reload**: the new pods pull the image on their hosts and load the weights: at most the image
   pull and a leader's startup budget (domain/serving_budget.py), an upper bound, not an estimate.

Plain Python over frozen dataclasses; `plan --unhealthy-cube N` prints it per evicted group.
"""

from __future__ import annotations

from dataclasses import dataclass

from domain.serving_budget import BUDGET

NODE_MONITOR_GRACE_SECONDS = 50
NODE_EVICTION_RATE = 0.1  # nodes a second
UNREACHABLE_TOLERATION_SECONDS = 300
AUTO_REPAIR_NOT_READY_SECONDS = 600
KUEUE_FORCEFUL_TERMINATION_SECONDS = 60
POD_TERMINATION_GRACE_SECONDS = 30

# Who releases the pods a failed host leaves Terminating.
KUEUE, PERSON, AUTO_REPAIR = "kueue", "person", "auto-repair"
RELEASES = (KUEUE, PERSON, AUTO_REPAIR)


@dataclass(frozen=True)
class Term:
    name: str
    seconds: int
    source: str


@dataclass(frozen=True)
class Recovery:
    """The terms before an evicted group is made again, and the reload after it."""

    before_restart: tuple[Term, ...]
    reload: Term

    @property
    def restart_seconds(self) -> int:
        """From the host's failure until the group's pods are made again."""
        return sum(term.seconds for term in self.before_restart)

    @property
    def serving_seconds(self) -> int:
        """An upper bound: until the group serves again."""
        return self.restart_seconds + self.reload.seconds


DETECTION = Term("detection", NODE_MONITOR_GRACE_SECONDS, "node lifecycle controller grace period")
EVICTION = Term("eviction", UNREACHABLE_TOLERATION_SECONDS, "default toleration of the unreachable taint")
RELOAD = Term(
    "reload",
    BUDGET.admission_and_pull_seconds + BUDGET.startup_seconds,
    "the image pull and a leader's startup (domain/serving_budget.py), at most",
)


def recovery(release: str, hosts: int = 1) -> Recovery:
    """Recovery for the last of `hosts` hosts that fail together, their pods released by `release`:
    Kueue's forced deletion, a person who force-deletes them once they are Terminating, or GKE node
    auto-repair alone (whose ten minutes of NotReady count from the detection)."""
    detection = DETECTION
    if hosts > 1:
        spread = round((hosts - 1) / NODE_EVICTION_RATE)
        detection = Term("detection", NODE_MONITOR_GRACE_SECONDS + spread, f"{DETECTION.source}, {hosts} nodes")
    if release == KUEUE:
        released = Term(
            "release",
            POD_TERMINATION_GRACE_SECONDS + KUEUE_FORCEFUL_TERMINATION_SECONDS,
            "Kueue force-deletes the pods a minute past their deletion timestamp",
        )
    elif release == PERSON:
        released = Term("release", 0, "a person force-deletes the pods left Terminating")
    elif release == AUTO_REPAIR:
        waited = AUTO_REPAIR_NOT_READY_SECONDS - detection.seconds - UNREACHABLE_TOLERATION_SECONDS
        released = Term("release", max(waited, 0), "GKE node auto-repair, after about 10 minutes NotReady")
    else:
        raise ValueError(f"release {release!r}; allowed: {', '.join(RELEASES)}")
    return Recovery((detection, EVICTION, released), RELOAD)


def duration(seconds: int) -> str:
    """A duration as a person reads it: 5 min 50 s, 4 h 10 min."""
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    if minutes:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    return f"{secs} s"


def lines(hosts: int = 1, kueue_releases: bool = True) -> list[str]:
    """What `plan --unhealthy-cube N` says about time, for every group evicted when `hosts` hosts
    (a cube's) fail together; `kueue_releases` as kueue.recovery.forceDeleteOnUnreachableHost."""
    detection = recovery(PERSON, hosts=hosts).before_restart[0]
    spread = f", the last of {hosts} nodes at 0.1 a second" if hosts > 1 else ""
    shown = [
        "  how long an evicted group takes on a real cluster (docs/operations.md, When a TPU host fails):",
        f"    detection up to {duration(detection.seconds)} (node lifecycle grace period{spread}), eviction "
        f"{duration(EVICTION.seconds)} ({EVICTION.source}); its pods then stay Terminating until released",
    ]
    if kueue_releases:
        kueue = recovery(KUEUE, hosts=hosts)
        shown.append(
            f"    - by Kueue (FailureRecoveryPolicy, a minute past the pods' 30 s grace): made again within "
            f"{duration(kueue.restart_seconds)}"
        )
    shown += [
        "    - by a person (kubectl delete pod --force --grace-period=0): made again after "
        f"{duration(recovery(PERSON, hosts=hosts).restart_seconds)}",
        f"    - by GKE node auto-repair alone: made again after about "
        f"{duration(recovery(AUTO_REPAIR, hosts=hosts).restart_seconds)}",
        f"    then it reloads: up to {duration(RELOAD.seconds)} more (the image pull and a leader's startup)",
    ]
    if not kueue_releases:
        shown.insert(2, "    (kueue.recovery.forceDeleteOnUnreachableHost is off: Kueue leaves them)")
    return shown
