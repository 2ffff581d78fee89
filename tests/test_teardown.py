"""Teardown order on the dependency graph: workloads, then the slice controller, the TPU pools, the cluster.

Pulumi deletes a resource only after everything that depends on it. Active Slice objects block
node-pool deletion, and only a running slice controller finalizes them, so the slice controller
must outlive the workloads and go before the pools it carves.
"""

from __future__ import annotations

from plan.engine import PlanResult
from tests.conftest import DevRunner

CLUSTER = "gcp:container/cluster:Cluster"
POOL = "gcp:container/nodePool:NodePool"
LWS = "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet"
JOBSET = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"
WEBHOOKS = "kubernetes:admissionregistration.k8s.io/v1:MutatingWebhookConfiguration"
CONTROLLER = "kubernetes:apps/v1:Deployment"
COMMAND = "command:local:Command"


def _tpu_pools(plan: PlanResult) -> list:
    return [p for p in plan.of_type(POOL) if p.name.startswith("cube-")]


def test_serving_is_deleted_before_the_slice_controller(dev_plan: PlanResult) -> None:
    controller = dev_plan.one(WEBHOOKS)
    for workload in dev_plan.of_type(LWS):
        assert dev_plan.depends_on(workload, controller), workload.name


def test_slicing_checks_are_deleted_before_the_slice_controller(run_dev: DevRunner) -> None:
    plan = run_dev({"checks": {"subslicing": {"enabled": True, "replicas": 4}}})
    for jobset in plan.of_type(JOBSET):
        assert plan.depends_on(jobset, plan.one(WEBHOOKS)), jobset.name


def test_destroy_waits_for_the_slices_between_the_workloads_and_the_slice_controller(run_dev: DevRunner) -> None:
    """The workloads go first, then the drain (its delete waits for every Slice to be finalized),
    then the webhooks and the manager, which the drain depends on."""
    plan = run_dev({"checks": {"subslicing": {"enabled": True, "replicas": 2}}})
    drain = plan.one(COMMAND, "slice-drain")
    assert "slices.accelerator.gke.io" in drain.inputs["delete"] and not drain.inputs.get("create")
    deployment = next(d for d in plan.of_type(CONTROLLER) if d.get("metadata.namespace") == "slice-controller-system")
    assert plan.depends_on(drain, deployment) and plan.depends_on(drain, plan.one(WEBHOOKS))
    for workload in [*plan.of_type(LWS), *plan.of_type(JOBSET)]:
        assert plan.depends_on(workload, drain), workload.name
        assert not plan.depends_on(drain, workload), workload.name


def test_the_slice_controller_is_deleted_before_the_tpu_pools(dev_plan: PlanResult) -> None:
    deployment = next(
        d for d in dev_plan.of_type(CONTROLLER) if d.get("metadata.namespace") == "slice-controller-system"
    )
    for pool in _tpu_pools(dev_plan):
        assert dev_plan.depends_on(deployment, pool), pool.name
        assert dev_plan.depends_on(dev_plan.one(WEBHOOKS), pool), pool.name


def test_the_tpu_pools_are_deleted_before_the_cluster(dev_plan: PlanResult) -> None:
    cluster = dev_plan.one(CLUSTER)
    for pool in _tpu_pools(dev_plan):
        assert dev_plan.depends_on(pool, cluster)
        assert not dev_plan.depends_on(cluster, pool)
