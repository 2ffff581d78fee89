"""Time to serving: the critical path of the stack's graph against the reference's one-step-at-a-time run.

Durations are typical wall-clock times per resource kind, each with its source.
They are estimates for review, not promises; what matters is the shape: TPU
pools, controller installs and cluster-only objects overlap wherever the real
dependencies allow, while the reference scripts run every step after the last.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from domain import autoscaling
from plan.engine import PlanResult, Resource

# Seconds. Sources:
# - GKE regional cluster ~10 min, node pools 3-5 min: GKE "Creating a regional cluster" / node pool docs.
# - TPU7x pool of 16 VMs bound to a reservation ~15 min: GKE TPU docs ("node pool creation can take
#   several minutes"), measured reports for multi-host slices; v5e 8-VM slices similar.
# - API enablement up to a minute: Service Usage docs (the reference sleeps 10 s after it).
# - Internal Application Load Balancer for a Gateway ~5 min: GKE Gateway docs ("can take a few minutes").
# - Helm charts with --wait ~1.5 min each: reference step 04 timings (JobSet/LWS helm --wait).
# - A 397B FP8 model streams and compiles for ~30 min before the first answer: the reference's
#   1800 s start-up timeout and its llm-d guide; Saxml 175B loads in ~15 min (tutorial).
DURATIONS: dict[str, int] = {
    "gcp:projects/service:Service": 60,
    "gcp:compute/previewFeature:PreviewFeature": 30,
    "gcp:compute/network:Network": 30,
    "gcp:compute/subnetwork:Subnetwork": 20,
    "gcp:compute/firewall:Firewall": 15,
    "gcp:compute/resourcePolicy:ResourcePolicy": 10,
    "gcp:serviceaccount/account:Account": 5,
    "gcp:serviceaccount/iAMMember:IAMMember": 10,
    "gcp:projects/iAMMember:IAMMember": 10,
    "gcp:storage/bucket:Bucket": 5,
    "gcp:storage/bucketIAMMember:BucketIAMMember": 10,
    "gcp:container/cluster:Cluster": 600,
    "kubernetes:helm.sh/v3:Release": 90,
    "kubernetes:apps/v1:Deployment": 60,
    "command:local:Command": 20,
    "kubernetes:gateway.networking.k8s.io/v1:Gateway": 300,
    "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue": 30,
    "kubernetes:core/v1:Service": 5,
}
SYSTEM_POOL_SECONDS = 240
TPU_POOL_SECONDS = 900
DEFAULT_SECONDS = 2  # plain Kubernetes objects: one API call
# The readiness resource of each backend: the Job `pulumi up` waits for (vLLM's and JetStream's smoke
# test, Saxml's publish); the servers it proves skip the await, so they take one API call here.
# The model's load is domain/autoscaling.py's figure, which a group an autoscaler adds also takes
# (plan/scaling.py) and the settings' scale-down rule reads.
SERVING_SECONDS = {"serving-smoke-test": autoscaling.SCALE_OUT.load_seconds, "sax-publish": 900}
SERVING_KINDS = (
    "kubernetes:batch/v1:Job",
    "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet",
    "kubernetes:apps/v1:Deployment",
)


def duration(resource: Resource) -> int:
    if resource.type == "gcp:container/nodePool:NodePool":
        return SYSTEM_POOL_SECONDS if resource.name == "system-pool" else TPU_POOL_SECONDS
    name = str((resource.inputs.get("metadata") or {}).get("name", "")) if isinstance(resource.inputs, dict) else ""
    if resource.type in SERVING_KINDS and name in SERVING_SECONDS:
        return SERVING_SECONDS[name]
    if not resource.custom or resource.type.startswith("pulumi:providers:"):
        return 0
    return DURATIONS.get(resource.type, DEFAULT_SECONDS)


@dataclass(frozen=True)
class Timeline:
    target: Resource
    critical_seconds: int
    sequential_seconds: int
    path: tuple[tuple[Resource, int, int], ...]  # (resource, start, finish) along the critical path
    start: dict[str, int]
    finish: dict[str, int]

    @property
    def ratio(self) -> float:
        return self.sequential_seconds / self.critical_seconds if self.critical_seconds else 1.0


def predecessors(result: PlanResult) -> dict[str, set[str]]:
    """Custom resources each custom resource waits for, as the engine orders them."""
    by_urn = result.by_urn()
    children: dict[str, list[str]] = {}
    for r in result.resources:
        children.setdefault(r.parent, []).append(r.urn)

    @cache
    def expand(urn: str) -> frozenset[str]:
        found = {urn}
        for child in children.get(urn, []):
            found |= expand(child)
        return frozenset(found)

    @cache
    def waits(urn: str) -> frozenset[str]:
        res = by_urn.get(urn)
        if res is None:
            return frozenset()
        found: set[str] = set()
        for dep in res.dependencies:
            found |= expand(dep)
        if res.parent in by_urn:
            found |= waits(res.parent)
        return frozenset(found)

    return {
        r.urn: {u for u in waits(r.urn) if u in by_urn and by_urn[u].custom and u != r.urn}
        for r in result.resources
        if r.custom
    }


def serving_target(result: PlanResult) -> Resource:
    """The resource whose completion means the first request was served (or the last to finish)."""
    for resource in result.resources:
        meta = resource.inputs.get("metadata") if isinstance(resource.inputs, dict) else None
        if resource.type in SERVING_KINDS and isinstance(meta, dict) and meta.get("name") in SERVING_SECONDS:
            return resource
    finish = timeline_finish(result)
    # Ties broken by URN: registration order varies from run to run (outputs resolve concurrently).
    return max((r for r in result.resources if r.custom), key=lambda r: (finish[r.urn], r.urn))


def timeline_finish(result: PlanResult) -> dict[str, int]:
    preds = predecessors(result)
    by_urn = result.by_urn()
    finish: dict[str, int] = {}

    def visit(urn: str) -> int:
        if urn not in finish:
            start = max((visit(p) for p in preds.get(urn, ())), default=0)
            finish[urn] = start + duration(by_urn[urn])
        return finish[urn]

    for urn in preds:
        visit(urn)
    return finish


def timeline(result: PlanResult) -> Timeline:
    preds = predecessors(result)
    by_urn = result.by_urn()
    finish = timeline_finish(result)
    start = {urn: finish[urn] - duration(by_urn[urn]) for urn in finish}
    target = serving_target(result)
    # Walk back along the predecessor that finished last.
    path = []
    urn: str | None = target.urn
    while urn is not None:
        path.append((by_urn[urn], start[urn], finish[urn]))
        # Ties broken by URN: predecessors are a set, whose order changes with every process.
        urn = max(preds.get(urn, ()), key=lambda p: (finish[p], p), default=None)
    ancestors: set[str] = set()
    stack = [target.urn]
    while stack:
        current = stack.pop()
        if current not in ancestors:
            ancestors.add(current)
            stack.extend(preds.get(current, ()))
    sequential = sum(duration(by_urn[u]) for u in ancestors)
    return Timeline(target, finish[target.urn], sequential, tuple(reversed(path)), start, finish)


def _minutes(seconds: int) -> str:
    return f"{seconds / 60:.0f} min"


def lines(result: PlanResult) -> list[str]:
    t = timeline(result)
    out = [
        f"  first serving request after ~{_minutes(t.critical_seconds)} on the critical path, vs "
        f"~{_minutes(t.sequential_seconds)} doing the same work one step after another (x{t.ratio:.1f})",
        "  critical path:",
    ]
    out += [
        f"    {_minutes(s):>7} -> {_minutes(f):>7}  {r.type.split(':')[-1]} {r.name}"
        for r, s, f in t.path
        if duration(r)
    ]
    return out
