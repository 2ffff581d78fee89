"""The fleet rollout (operate/rollout.py) on the real engine: dev and dev-b, one block, two clusters.

Real: `pulumi.automation` driving the pinned `pulumi` CLI and engine, its file backend, the
Kubernetes provider and the policy pack, as `python -m operate rollout` does; per stack an API
server with the stack's simulated nodes and the real Kueue, JobSet and LWS (each stack makes its own
GKE cluster, so each gets its own plane, as in tests/test_cluster_up.py). Stand-ins as there: the
GCP provider (each stack its own stand-in project; the cluster it reports is the stack's plane), the
slice controller's webhook, GKE's add-ons and load balancers, and on dev the kubelet that ends the
smoke Job's pod (tests/standins/smoke_pod.py: passing, or running the cluster's script against a
front that answers 404 for the model).

The story, each round a whole `rollout` (every stack previewed, then the canary dev alone, then the
rest), the stacks made with the README's commands:
1. the smoke test fails: every preview passes, the canary's `up` fails naming the smoke Job, and
   dev-b is not applied (nothing of the program on its cluster);
2. the cause mended and the smoke test's run id changed, as the README's recovery says: both applied;
3. again, unchanged: every step a no-op.

What it cannot show: a real backend's concurrency (Pulumi Cloud's locks, Deployments), stacks that
share one GCP project's quota and one reservation (each stand-in project holds its own), and what
a real smoke request proves (tests/test_cluster_up.py and the serving tests do).
"""

from __future__ import annotations

import contextlib
import time
import traceback
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from operate import rollout
from settings.model import Backend
from tests import control_plane as cp
from tests import controllers as ctl
from tests.engine import Engine, readme_stack
from tests.standins import gke_addons, slice_webhook, smoke_pod
from tests.test_cluster_up import PART_OF, PROJECT_ID, TOKEN, plane_env
from workloads.smoke_job import JOB_NAME

# The late plane group, beside the fault scenarios whose smoke-test fault it took over (CI budget).
pytestmark = pytest.mark.xdist_group(cp.LATE_XDIST_GROUP)
CANARY, OTHER = "dev", "dev-b"
ROUNDS = ("smoke test fails", "mended", "unchanged")


@dataclass
class Cluster:
    """One stack's cluster: its plane, controllers and stand-ins, and the CLI's variables to reach it."""

    plane: cp.ControlPlane
    running: ctl.Controllers
    env: dict[str, str]
    smoke: smoke_pod.SmokePods | None
    pollers: list[Any]

    def check(self) -> None:
        self.running.check_alive()
        for poller in self.pollers:
            poller.check()

    def labelled(self) -> list[str]:
        """The program's Namespaces, ClusterQueues and ConfigMaps on this cluster (its label)."""
        found = []
        for path in ("/api/v1/namespaces", "/apis/kueue.x-k8s.io/v1beta2/clusterqueues", "/api/v1/configmaps"):
            for item in self.plane.request("GET", path, query={"labelSelector": PART_OF})["items"]:
                meta = item["metadata"]
                found.append(f"{path.rsplit('/', 1)[-1]} {meta.get('namespace', '')}/{meta['name']}")
        return sorted(found)

    def serving(self) -> list[str]:
        """The serving LeaderWorkerSets on this cluster."""
        listed = self.plane.request("GET", "/apis/leaderworkerset.x-k8s.io/v1/leaderworkersets")["items"]
        return sorted(f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in listed)


@contextlib.contextmanager
def _cluster(engine: Engine, base: Path, stack: str) -> Iterator[Cluster]:
    config = cp.load_stack(stack)
    serving = config.serving.backend != Backend.NONE
    generation = config.tpu.generation if config.serving.dynamic_slicing else config.serving.slice.generation
    with (
        cp.control_plane(
            cp.stack_nodes(config), service_cidr=str(config.network.service_cidr), complete_jobs=not serving
        ) as plane,
        ctl.controllers(plane) as running,
    ):
        gke_addons.install(plane, config.versions.gateway_api_inference_extension)
        pollers: list[Any] = [gke_addons.LoadBalancers(plane), slice_webhook.SliceWebhook(plane, generation)]
        smoke = smoke_pod.SmokePods(plane, config.serving.namespace, JOB_NAME) if serving else None
        if smoke is not None:
            pollers.append(smoke)
        for poller in pollers:
            poller.start()
        try:
            yield Cluster(plane, running, plane_env(engine, base, plane), smoke, pollers)
        finally:
            for poller in reversed(pollers):
                poller.stop()


@dataclass
class Fleet:
    rounds: dict[str, list[rollout.Outcome]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    other_after_failed_canary: list[str] = field(default_factory=list)
    other_after_mended: list[str] = field(default_factory=list)
    canary_serving_kept: list[str] = field(default_factory=list)
    error: str = ""


class PerStack:
    """The rollout's runner over one workspace per stack (each its own copy of the project, as a
    person's two clones would be), its `<stack>-new` stack, reaching its own cluster."""

    def __init__(self, runners: Mapping[str, rollout.AutomationRunner], clusters: Mapping[str, Cluster]) -> None:
        self.runners, self.clusters = runners, clusters

    def _runner(self, stack: str) -> rollout.AutomationRunner:
        return self.runners[stack.removesuffix("-new")]

    def preview(self, stack: str) -> Mapping[str, int]:
        return self._runner(stack).preview(stack)

    def up(self, stack: str) -> Mapping[str, int]:
        try:
            return self._runner(stack).up(stack)
        finally:
            self.clusters[stack.removesuffix("-new")].check()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    engine = Engine.create(tmp_path_factory.mktemp("engine"))
    found = Fleet()
    with contextlib.ExitStack() as stack:
        clusters: dict[str, Cluster] = {}
        runners: dict[str, rollout.AutomationRunner] = {}
        for name in (CANARY, OTHER):
            base = tmp_path_factory.mktemp(f"rollout-{name}")
            clusters[name] = stack.enter_context(_cluster(engine, base, name))
            ws = readme_stack(engine, name, "rollout-plane", project=PROJECT_ID, token=TOKEN)
            ws.pulumi("config", "set", "--path", "tpu-slicing:controllers.install", "false", "--stack", f"{name}-new")
            runners[name] = rollout.AutomationRunner(
                ws.root, {**engine.env, **ws.env, **clusters[name].env}, cli_root=engine.base
            )
            if name == CANARY:
                canary_ws = ws
        runner = PerStack(runners, clusters)
        smoke = clusters[CANARY].smoke
        assert smoke is not None
        stacks = [f"{CANARY}-new", f"{OTHER}-new"]
        try:
            for label in ROUNDS:
                if label == "smoke test fails":
                    smoke.failing = True
                elif label == "mended":
                    smoke.failing = False
                    # The README's recovery: a new run id makes `up` run the smoke test again.
                    canary_ws.pulumi(
                        "config", "set", "--path", "tpu-slicing:serving.smokeTest.runId", "mended",
                        "--stack", f"{CANARY}-new",
                    )  # fmt: skip
                started = time.monotonic()
                found.rounds[label] = rollout.rollout(runner, stacks, canary=f"{CANARY}-new", parallel=2)
                found.seconds[label] = time.monotonic() - started
                if label == "smoke test fails":
                    found.other_after_failed_canary = clusters[OTHER].labelled()
                    found.canary_serving_kept = clusters[CANARY].serving()
                elif label == "mended":
                    found.other_after_mended = clusters[OTHER].labelled()
                for cluster in clusters.values():
                    cluster.check()
        except Exception:  # kept for the tests: the rounds so far still say what happened
            found.error = traceback.format_exc()
    for label, outcomes in found.rounds.items():
        print(f"\n{label} ({found.seconds[label]:.0f} s):\n" + "\n".join(rollout.table(outcomes)))  # with -s
    return found


def _round(fleet: Fleet, label: str) -> dict[tuple[str, str], rollout.Outcome]:
    assert label in fleet.rounds, f"round {label!r} never ran: {fleet.error}"
    return {(o.operation, o.stack.removesuffix("-new")): o for o in fleet.rounds[label]}


def test_a_failing_canary_stops_the_second_wave(fleet: Fleet) -> None:
    steps = _round(fleet, "smoke test fails")
    assert {k: o.result for k, o in steps.items()} == {
        ("preview", CANARY): "succeeded",
        ("preview", OTHER): "succeeded",
        ("up", CANARY): "failed",
        ("up", OTHER): "skipped",
    }, fleet.rounds["smoke test fails"]
    # The step's message is the engine's error for the smoke Job: its name and the script's own last
    # lines (pods/smoke_request.py logs each attempt and its verdict), not the CLI's summary.
    failed = steps[("up", CANARY)]
    assert failed.message.startswith("pulumi up failed: Job ") and f"Resource '{JOB_NAME}'" in failed.message
    assert "does not exist" in failed.message, failed.message  # the table's line ends with the verdict
    assert "smoke test failed" in failed.detail and "does not exist" in failed.detail, failed.detail
    assert fleet.canary_serving_kept, "the failed smoke test took the serving LeaderWorkerSets with it"
    assert steps[("up", OTHER)].message == f"not applied: the canary {CANARY}-new failed"
    assert fleet.other_after_failed_canary == [], "the second wave touched dev-b's cluster"


def test_once_mended_both_stacks_are_applied(fleet: Fleet) -> None:
    steps = _round(fleet, "mended")
    assert {k: o.result for k, o in steps.items()} == dict.fromkeys(steps, "succeeded"), fleet.rounds["mended"]
    assert steps[("up", CANARY)].changes.get("replace") or steps[("up", CANARY)].changes.get("update")
    assert steps[("up", OTHER)].changes.get("create", 0) > 20, steps[("up", OTHER)]
    # What the first round's check reads is there now (so its emptiness there was the wave's doing).
    assert any(item.startswith("clusterqueues ") for item in fleet.other_after_mended), fleet.other_after_mended


def test_a_second_rollout_changes_nothing(fleet: Fleet) -> None:
    steps = _round(fleet, "unchanged")
    assert {k: o.result for k, o in steps.items()} == dict.fromkeys(steps, "succeeded"), fleet.rounds["unchanged"]
    for key, outcome in steps.items():
        assert set(outcome.changes) == {"same"}, (key, outcome.changes)
    assert not fleet.error, fleet.error
