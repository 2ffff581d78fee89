"""The first `pulumi up` on a bare Google Cloud project: ordering judged by the bare-project stand-in.

Two judges, both run on this tree and on `BEFORE`, the commit before the ordering fixes, so each
rule is shown to catch what it was written for:

- the real engine previews a new stack against the stand-in GCP provider on a bare project: a
  plan-time read of an API the program itself enables must wait for it (GetServerConfig refuses
  while container.googleapis.com is off);
- every Google resource of a stack's plan is created on a bare project in the worst order the
  engine may choose: whatever does not depend on the cluster goes first (a real cluster takes
  about ten minutes, so everything else that can start does), and, once per API Service and the
  AI-zone preview feature, whatever does not depend on that switch goes before it; a component's
  `dependsOn` holds back its children. The engine promises dependency order and nothing more, so a
  create that needs the cluster or an API must depend on it.

The stand-in's verdicts come from its rules (tests/standins/gcp_project.py, each cited) and the
owner's reservations (tests/standins/reservations.py), never from the program's own numbers; the
one-line mistakes of MUTATIONS show each rule refusing what it was written for.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest

from plan.engine import ROOT, cloud_state
from settings.model import StackConfig
from tests.control_plane import load_stack
from tests.engine import Engine, Workspace
from tests.standins import gcp_project, gcp_provider
from tests.standins.gcp_project import Project

pytestmark = pytest.mark.gcp_standin

# The last commit before the ordering fixes of issue 22 (plan-time reads with no `depends_on`,
# Workload Identity members racing the cluster).
BEFORE = "5728d82"
STACKS = ("dev", "dev-b", "saxml-v5e", "jetstream-v5e")


def _tree(revision: str, dest: Path) -> Path:
    """The repository at `revision`, unpacked (no checkout of this one is touched)."""
    archive = subprocess.run(["git", "archive", revision], cwd=ROOT, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return dest


@pytest.fixture(scope="module")
def before(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _tree(BEFORE, tmp_path_factory.mktemp("before") / "tree")


def _plan(tree: Path, stack: str, out: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "plan", "--stack", stack, "--json", str(out), "--out", str(out.parent / "shown")],
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(out.read_text())["resources"])


def _is_component(type_: str) -> bool:
    return type_.startswith("tpu-slicing:")


def _address(key: str) -> tuple[tuple[str, ...], str]:
    """(the parents' names, the name) of a plan key, `parent/.../type::name` (plan/document.py
    `address`); a type token holds a colon, a name given to a parent here does not."""
    head, name = key.rsplit("::", 1)
    segments = head.split("/")
    first_type = next(i for i, segment in enumerate(segments) if ":" in segment)
    return tuple(segments[:first_type]), name


def _parent_of(
    key: str, resources: dict[str, dict[str, Any]], by_address: dict[tuple[str, ...], list[str]]
) -> str | None:
    parents, _ = _address(key)
    if not parents:
        return None
    candidates = by_address.get(parents, [])
    components = [c for c in candidates if _is_component(resources[c]["type"])]
    found = components or candidates
    assert len(found) == 1, f"{key}: its parent is ambiguous or missing: {found}"
    return found[0]


def dependencies(resources: dict[str, dict[str, Any]]) -> dict[str, set[str]]:
    """What each resource waits for, as the engine orders them.

    Its own `dependsOn` (the SDK already expands a component there into its children), its parent:
    a child registers after its parent, and a component registers after its own `dependsOn`, so a
    component's `dependsOn` holds back every child (pulumi/pulumi#2299: a resource always depends on
    its parent). What is neither a Google resource nor a component (Kubernetes
    objects, providers, the Command provider's) reaches the cluster through its provider's
    kubeconfig, so it counts as depending on the cluster."""
    clusters = {key for key, r in resources.items() if r["type"] == gcp_project.CLUSTER}
    by_address: dict[tuple[str, ...], list[str]] = {}
    for key in resources:
        parents, name = _address(key)
        by_address.setdefault((*parents, name), []).append(key)
    deps: dict[str, set[str]] = {}
    for key, r in resources.items():
        own = {d for d in r.get("dependsOn") or [] if d in resources}
        parent = _parent_of(key, resources, by_address)
        if parent is not None:
            own.add(parent)
        if not r["type"].startswith("gcp:") and not _is_component(r["type"]):
            own |= clusters
        deps[key] = own
    return deps


def api_switches(resources: dict[str, dict[str, Any]]) -> list[str]:
    """The API Services and the AI-zone preview feature: every Google resource the program's
    ProjectApis component creates (infra/apis.py)."""
    return sorted(
        key for key, r in resources.items() if r["type"] in {gcp_project.SERVICE, gcp_project.PREVIEW_FEATURE}
    )


def worst_order(resources: dict[str, dict[str, Any]], hold: frozenset[str] = frozenset()) -> Iterator[str]:
    """A dependency order the engine may run, holding back the cluster and `hold` (an API Service or
    the preview feature) while anything else can go: whatever does not depend on them runs first."""
    deps = dependencies(resources)
    held = hold | {key for key, r in resources.items() if r["type"] == gcp_project.CLUSTER}
    done: set[str] = set()
    while len(done) < len(resources):
        ready = sorted(k for k in resources if k not in done and deps[k] <= done)
        assert ready, "a dependency cycle"
        # Stuck: the cluster goes before the held API switch, which goes last of all.
        chosen = [k for k in ready if k not in held] or [k for k in ready if k not in hold][:1] or ready[:1]
        for key in chosen:
            done.add(key)
            yield key


def first_up(
    resources: dict[str, dict[str, Any]], project: Project, hold: frozenset[str] = frozenset()
) -> list[dict[str, Any]]:
    """Every Google create of the plan on `project`, in the worst order; the refusals."""
    for key in worst_order(resources, hold):
        resource = resources[key]
        if not resource["type"].startswith("gcp:"):
            continue
        resource_id, state = cloud_state(resource["type"], resource["name"], resource["inputs"])
        project.try_create(resource["type"], resource["inputs"], state, resource_id)
    return project.refusals


def first_up_in_every_order(resources: dict[str, dict[str, Any]], config: StackConfig) -> list[dict[str, Any]]:
    """The refusals of a first `up` on a bare project, once per API switch held back to the last:
    each run enables every API but that one as early as it may; a create that needs the held API
    and does not wait for it runs before it and is refused."""
    refusals: list[dict[str, Any]] = []
    for switch in api_switches(resources):
        project = gcp_provider.prepare(None, config)
        refusals += [{**r, "held": switch} for r in first_up(resources, project, frozenset({switch}))]
    return refusals


@pytest.mark.parametrize("stack", STACKS)
def test_the_first_up_creates_every_google_resource_in_any_dependency_order(stack: str, tmp_path: Path) -> None:
    config = load_stack(stack)
    resources = _plan(ROOT, stack, tmp_path / "plan.json")
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


@dataclass(frozen=True)
class Mutation:
    """A one-line mistake a first `up` on a real project would meet, and the stand-in rule that refuses it."""

    path: str  # the file
    line: str  # the line as it is
    mistake: str  # the line mistaken
    stack: str
    rule: str
    token: str  # the resource type refused


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
)
_NOT_THE_PROGRAM = shutil.ignore_patterns(
    ".git", ".venv", "venv", "build", "__pycache__", ".mypy_cache", ".ruff_cache", ".hypothesis", ".pytest_cache"
)


def _mutated(dest: Path, mutation: Mutation) -> Path:
    """This checkout's program with one line changed."""
    shutil.copytree(ROOT, dest, ignore=_NOT_THE_PROGRAM)
    source = dest / mutation.path
    text = source.read_text()
    assert text.count(mutation.line) == 1, f"{mutation.path} no longer holds the line this mutation changes"
    source.write_text(text.replace(mutation.line, mutation.mistake))
    return dest


@pytest.mark.parametrize("mutation", MUTATIONS)
def test_a_one_line_mistake_is_refused_by_its_rule(mutation: Mutation, tmp_path: Path) -> None:
    tree = _mutated(tmp_path / "tree", mutation)
    refusals = first_up_in_every_order(_plan(tree, mutation.stack, tmp_path / "plan.json"), load_stack(mutation.stack))
    assert refusals, f"the stand-in agreed with the mistake in {mutation.path}"
    # The first refusal is the mistake's; later ones may follow from it (a pool whose policy was refused).
    assert (refusals[0]["rule"], refusals[0]["token"]) == (mutation.rule, mutation.token), refusals


@pytest.mark.parametrize("stack", ["dev", "saxml-v5e"])
def test_before_the_fix_workload_identity_members_raced_the_cluster(stack: str, before: Path, tmp_path: Path) -> None:
    project = gcp_provider.prepare(None, load_stack(stack))
    refusals = first_up(_plan(before, stack, tmp_path / "plan.json"), project)
    assert refusals, "the stand-in no longer shows the race this test was written for"
    assert {r["rule"] for r in refusals} == {"identity-pool-missing"}, refusals
    assert all("Identity Pool does not exist" in r["message"] for r in refusals)


def test_holding_back_each_api_finds_what_the_old_order_agreed_with(before: Path, tmp_path: Path) -> None:
    """At BEFORE, Saxml's Google service account waited for nothing: the old order created every API
    Service first (their keys sort first) and agreed; holding the IAM API back refuses it."""
    config = load_stack("saxml-v5e")
    resources = _plan(before, "saxml-v5e", tmp_path / "plan.json")
    assert {r["rule"] for r in first_up(resources, gcp_provider.prepare(None, config))} == {"identity-pool-missing"}
    iam = "apis/gcp:projects/service:Service::iam"
    refused = {
        (r["token"], r["held"]) for r in first_up_in_every_order(resources, config) if r["rule"] == "api-disabled"
    }
    assert refused == {(gcp_project.ACCOUNT, iam), (gcp_project.ACCOUNT_IAM_MEMBER, iam)}


# --- the real engine ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Engine:
    return Engine.create(tmp_path_factory.mktemp("engine"))


def _workspace(engine: Engine, tree: Path, label: str) -> Workspace:
    """A workspace of `tree` (this checkout's stand-ins judge it), on a bare project."""
    dest = engine.base / "projects" / label
    shutil.copytree(tree, dest, ignore=shutil.ignore_patterns(".git", ".venv", "venv", "build", "__pycache__"))
    (dest / ".venv").symlink_to(ROOT / ".venv")
    state = engine.base / "state" / label
    state.mkdir(parents=True)
    ws = Workspace(engine=engine, root=dest, env={"PULUMI_BACKEND_URL": f"file://{state}"})
    ws.pulumi("stack", "init", "dev")
    ws.bare_project("dev")
    return ws


def _preview(ws: Workspace) -> Any:
    return ws.pulumi("preview", "--stack", "dev", "--diff", check=False)


def test_before_the_fix_the_first_preview_failed_on_a_disabled_api(engine: Engine, before: Path) -> None:
    done = _preview(_workspace(engine, before, "before"))
    assert done.returncode != 0
    output = done.stdout + done.stderr
    # The old program ran two invokes before their APIs (GetServerConfig on container, getProject on
    # cloudresourcemanager), at once: which one the engine reports first is a matter of timing.
    assert "has not been used in project" in output and "SERVICE_DISABLED" in output, output[-3000:]
    assert "container.googleapis.com" in output or "cloudresourcemanager.googleapis.com" in output


def test_the_first_preview_on_a_bare_project_waits_for_the_apis(engine: Engine) -> None:
    ws = _workspace(engine, ROOT, "now")
    done = _preview(ws)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert Project.at(Path(ws.env[gcp_provider.PROJECT_ENV])).refusals == []
