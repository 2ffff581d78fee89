"""The first `pulumi up` on a bare Google Cloud project: ordering judged by the bare-project stand-in.

Every Google resource of a stack's plan is created on a bare project in the worst order the
engine may choose (tests/bare_project.py), on this tree and on `BEFORE`, the commit before the
ordering fixes, so each rule is shown to catch what it was written for. The real engine's preview
on a bare project, the other judge, is tests/test_bare_project_engine.py.

The stand-in's verdicts come from its rules (tests/standins/gcp_project.py, each cited) and the
owner's reservations (tests/standins/reservations.py), never from the program's own numbers; the
one-line mistakes of MUTATIONS show each rule refusing what it was written for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from plan.engine import ROOT
from tests.bare_project import (
    BEFORE,
    STACKS,
    Mutation,
    api_switches,
    first_up,
    first_up_in_every_order,
    mutated,
    plan_resources,
    tree_at,
    worst_order,
)
from tests.control_plane import load_stack
from tests.standins import gcp_project, gcp_provider

pytestmark = pytest.mark.gcp_standin


@pytest.fixture(scope="module")
def before(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tree_at(BEFORE, tmp_path_factory.mktemp("before") / "tree")


@pytest.mark.parametrize("stack", STACKS)
def test_the_first_up_creates_every_google_resource_in_any_dependency_order(stack: str, tmp_path: Path) -> None:
    config = load_stack(stack)
    resources = plan_resources(ROOT, stack, tmp_path / "plan.json")
    assert first_up_in_every_order(resources, config) == []
    project = gcp_provider.prepare(None, config)
    assert first_up(resources, project) == []
    assert gcp_project.CONTAINER in project.enabled_order
    assert project.unprovisioned == {}


def test_the_worst_order_holds_back_an_api_and_honours_a_components_depends_on() -> None:
    def resource(type_: str, depends_on: tuple[str, ...] = ()) -> dict[str, Any]:
        return {"type": type_, "name": "", "inputs": {}, "dependsOn": list(depends_on)}

    service = "apis/gcp:projects/service:Service::compute"
    feature = "apis/gcp:compute/previewFeature:PreviewFeature::ai-zones-visibility"
    resources = {
        "tpu-slicing:infra:ProjectApis::apis": resource("tpu-slicing:infra:ProjectApis"),
        service: resource(gcp_project.SERVICE),
        feature: resource(gcp_project.PREVIEW_FEATURE, (service,)),
        # A component that waits for the APIs, and its child that does not say so itself.
        "tpu-slicing:infra:Dashboard::dashboard": resource("tpu-slicing:infra:Dashboard", (service,)),
        "dashboard/gcp:monitoring/dashboard:Dashboard::dashboard": resource("gcp:monitoring/dashboard:Dashboard"),
        "tpu-slicing:infra:WorkloadPolicy::workload-policy": resource("tpu-slicing:infra:WorkloadPolicy"),
        "workload-policy/gcp:compute/resourcePolicy:ResourcePolicy::policy": resource(gcp_project.RESOURCE_POLICY),
    }
    assert api_switches(resources) == [feature, service]
    order = list(worst_order(resources, frozenset({service})))
    # The policy that lost its wait runs before the held API; the dashboard waits through its parent.
    assert order.index("workload-policy/gcp:compute/resourcePolicy:ResourcePolicy::policy") < order.index(service)
    assert order.index(service) < order.index("dashboard/gcp:monitoring/dashboard:Dashboard::dashboard")


MUTATIONS = (
    pytest.param(
        Mutation(
            "backends/platform.py",
            "                depends_on=cloud.apis.ready,\n",
            "",
            "dev",
            "api-disabled",
            gcp_project.RESOURCE_POLICY,
        ),
        id="workload-policy-without-its-wait-on-the-apis",
    ),
    pytest.param(
        Mutation(
            "infra/apis.py",
            "return [*self.services.values(), *([self.ai_zones] if self.ai_zones is not None else [])]",
            "return [*self.services.values()]",
            "dev",
            "ai-zone-hidden",
            gcp_project.NODE_POOL,
        ),
        id="nothing-waits-for-the-ai-zones-feature",
    ),
    pytest.param(
        Mutation(
            "infra/tpu_pools.py",
            "machine_type=args.machine_type,",
            'machine_type=args.machine_type.replace("-4t", "-8t"),',
            "dev",
            "reservation-machine-type",
            gcp_project.NODE_POOL,
        ),
        id="a-machine-type-the-reservation-does-not-hold",
    ),
    pytest.param(
        Mutation(
            "infra/tpu_pools.py",
            "node_count=args.nodes_per_pool,",
            "node_count=args.nodes_per_pool * 2,",
            "dev",
            "tpu-topology-size",
            gcp_project.NODE_POOL,
        ),
        id="tpu7x-pool-vms-against-the-policy-topology",
    ),
    pytest.param(
        Mutation(
            "infra/tpu_pools.py",
            "node_count=args.nodes_per_pool,",
            "node_count=args.nodes_per_pool // 2,",
            "saxml-v5e",
            "tpu-topology-size",
            gcp_project.NODE_POOL,
        ),
        id="v5e-pool-vms-against-its-tpu-topology",
    ),
    pytest.param(
        Mutation(
            "infra/workload_policy.py",
            'type="HIGH_THROUGHPUT",',
            'type="HIGH_AVAILABILITY",',
            "dev",
            "workload-policy-not-for-tpu",
            gcp_project.NODE_POOL,
        ),
        id="a-policy-type-gke-does-not-take-for-tpus",
    ),
    pytest.param(
        Mutation(
            "infra/workload_policy.py",
            "accelerator_topology=args.cube_topology,",
            'accelerator_topology="4x4x8",',
            "dev",
            "workload-policy-not-for-tpu",
            gcp_project.NODE_POOL,
        ),
        id="a-provision-only-topology-other-than-a-sub-block",
    ),
    pytest.param(
        Mutation(
            "infra/tpu_pools.py",
            'consume_reservation_type="SPECIFIC_RESERVATION", key=RESERVATION_KEY, values=[path]',
            'consume_reservation_type="ANY_RESERVATION"',
            "dev",
            "provision-only-needs-specific-reservation",
            gcp_project.NODE_POOL,
        ),
        id="provision-only-without-a-specific-reservation",
    ),
    pytest.param(
        Mutation(
            "infra/tpu_pools.py",
            'return gcp.container.NodePoolPlacementPolicyArgs(type="", policy_name=args.policy.name)',
            'return gcp.container.NodePoolPlacementPolicyArgs(type="COMPACT", tpu_topology="4x4x4")',
            "dev",
            "tpu7x-needs-workload-policy",
            gcp_project.NODE_POOL,
        ),
        id="tpu7x-placed-compact",
    ),
    pytest.param(
        Mutation('infra/apis.py', '"container.googleapis.com",', "", "dev", "api-disabled", gcp_project.CLUSTER),
        id="an-api-the-program-never-enables",
    ),
    pytest.param(
        Mutation("settings/naming.py", 'name = f"{self.prefix}-tpu-{key}"', 'name = f"{self.prefix}-tpu"',
                 "dev", "already-exists", gcp_project.NODE_POOL),
        id="two-pools-of-one-name",
    ),
    pytest.param(
        Mutation("infra/tpu_pools.py", "cluster=cluster_id,",
                 'cluster=args.cluster.name.apply(lambda n: f"projects/{args.project}/locations/{args.zone}/clusters/{n}"),',  # noqa: E501
                 "dev", "cluster-not-found", gcp_project.NODE_POOL),
        id="a-zonal-path-for-a-regional-cluster",
    ),
    pytest.param(
        Mutation("backends/platform.py", "region=config.location,\n                name=names.workload_policy,",
                 "region=config.zone,\n                name=names.workload_policy,",
                 "dev", "placement-policy-not-found", gcp_project.NODE_POOL),
        id="a-workload-policy-in-no-region",
    ),
    pytest.param(
        Mutation("settings/model.py", "/reservationBlocks/{self.block}", "/reservationBlock/{self.block}",
                 "dev", "reservation-not-found", gcp_project.NODE_POOL),
        id="a-reservation-path-gcp-does-not-know",
    ),
    pytest.param(
        Mutation("settings/model.py", "for sub in self.sub_blocks]", "for sub in self.sub_blocks[:1] * len(self.sub_blocks)]",  # noqa: E501
                 "dev", "reservation-insufficient", gcp_project.NODE_POOL),
        id="two-pools-on-one-sub-block",
    ),
    pytest.param(
        Mutation("backends/vllm_pd.py", "bucket=model.weights_bucket,\n            namespace=serving.namespace,",
                 'bucket=f"{config.project}-{model.weights_bucket}",\n            namespace=serving.namespace,',
                 "dev", "bucket-not-found", gcp_project.BUCKET_IAM_MEMBER),
        id="a-grant-on-a-bucket-that-does-not-exist",
    ),
    pytest.param(
        Mutation("workloads/model_access.py", "after_pool = [args.identity_pool]", "after_pool: list[pulumi.Resource] = []",  # noqa: E501
                 "dev", "identity-pool-missing", gcp_project.BUCKET_IAM_MEMBER),
        id="a-workload-principal-before-its-pool",
    ),
)  # fmt: skip


@pytest.mark.parametrize("mutation", MUTATIONS)
def test_a_one_line_mistake_is_refused_by_its_rule(mutation: Mutation, tmp_path: Path) -> None:
    tree = mutated(tmp_path / "tree", mutation)
    refusals = first_up_in_every_order(
        plan_resources(tree, mutation.stack, tmp_path / "plan.json"), load_stack(mutation.stack)
    )
    assert refusals, f"the stand-in agreed with the mistake in {mutation.path}"
    # The first refusal is the mistake's; later ones may follow from it (a pool whose policy was refused).
    assert (refusals[0]["rule"], refusals[0]["token"]) == (mutation.rule, mutation.token), refusals


@pytest.mark.parametrize("stack", ["dev", "saxml-v5e"])
def test_before_the_fix_workload_identity_members_raced_the_cluster(stack: str, before: Path, tmp_path: Path) -> None:
    project = gcp_provider.prepare(None, load_stack(stack))
    refusals = first_up(plan_resources(before, stack, tmp_path / "plan.json"), project)
    assert refusals, "the stand-in no longer shows the race this test was written for"
    assert {r["rule"] for r in refusals} == {"identity-pool-missing"}, refusals
    assert all("Identity Pool does not exist" in r["message"] for r in refusals)


def test_holding_back_each_api_finds_what_the_old_order_agreed_with(before: Path, tmp_path: Path) -> None:
    """At BEFORE, Saxml's Google service account waited for nothing: the old order created every API
    Service first (their keys sort first) and agreed; holding the IAM API back refuses it."""
    config = load_stack("saxml-v5e")
    resources = plan_resources(before, "saxml-v5e", tmp_path / "plan.json")
    assert {r["rule"] for r in first_up(resources, gcp_provider.prepare(None, config))} == {"identity-pool-missing"}
    iam = "apis/gcp:projects/service:Service::iam"
    refused = {
        (r["token"], r["held"]) for r in first_up_in_every_order(resources, config) if r["rule"] == "api-disabled"
    }
    assert refused == {(gcp_project.ACCOUNT, iam), (gcp_project.ACCOUNT_IAM_MEMBER, iam)}
