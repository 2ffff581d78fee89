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
   (plugin/pkg/admission/defaulttolerationseconds/admission.go).
3. **release**: with no kubelet to confirm, the pods stay Terminating and the group's StatefulSet
   makes no replacement, until GKE node auto-repair re-creates the node (it starts once a node
   reported NotReady, or nothing, for about 10 minutes: GKE docs, "Auto-repair nodes"; how long the
   re-creation itself takes is not published, so it is not counted) or a person force-deletes them
   (docs/operations.md, "When a TPU host fails"), which this model counts as no time.
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


def recovery(person: bool, hosts: int = 1) -> Recovery:
    """With a person at hand who force-deletes the pods once they are Terminating, or with GKE
    node auto-repair alone (whose ten minutes of NotReady count from the detection), for the last
    of `hosts` hosts that fail together."""
    detection = DETECTION
    if hosts > 1:
        spread = round((hosts - 1) / NODE_EVICTION_RATE)
        detection = Term("detection", NODE_MONITOR_GRACE_SECONDS + spread, f"{DETECTION.source}, {hosts} nodes")
    if person:
        release = Term("release", 0, "a person force-deletes the pods left Terminating")
    else:
        waited = AUTO_REPAIR_NOT_READY_SECONDS - detection.seconds - UNREACHABLE_TOLERATION_SECONDS
        release = Term("release", max(waited, 0), "GKE node auto-repair, after about 10 minutes NotReady")
    return Recovery((detection, EVICTION, release), RELOAD)


def duration(seconds: int) -> str:
    """A duration as a person reads it: 5 min 50 s, 4 h 10 min."""
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    if minutes:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    return f"{secs} s"


def lines(hosts: int = 1) -> list[str]:
    """What `plan --unhealthy-cube N` says about time, for every group evicted when `hosts` hosts
    (a cube's) fail together."""
    person, repair = recovery(person=True, hosts=hosts), recovery(person=False, hosts=hosts)
    detection = person.before_restart[0]
    spread = f", the last of {hosts} nodes at 0.1 a second" if hosts > 1 else ""
    return [
        "  how long an evicted group takes on a real cluster (docs/operations.md, When a TPU host fails):",
        f"    detection up to {duration(detection.seconds)} (node lifecycle grace period{spread}), eviction "
        f"{duration(EVICTION.seconds)} ({EVICTION.source}); its pods then stay Terminating until released",
        "    - by a person (kubectl delete pod --force --grace-period=0): made again after "
        f"{duration(person.restart_seconds)}",
        f"    - by GKE node auto-repair alone: made again after about {duration(repair.restart_seconds)}",
        f"    then it reloads: up to {duration(RELOAD.seconds)} more (the image pull and a leader's startup)",
    ]
