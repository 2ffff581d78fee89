"""`pulumi up`, a second `up`, an image bump and `pulumi destroy` of whole stacks against a real API server.

Real: the `pulumi` CLI and engine, the Python SDK and the Kubernetes provider (`make engine`);
etcd, kube-apiserver, kube-controller-manager and kube-scheduler, kwok's simulated nodes and
pods, and Kueue, JobSet and LeaderWorkerSet running out of cluster (`make controlplane`); kubectl,
which the inference-CRD Command runs. The stack uses those controllers as a platform team's
shared cluster would (`controllers.install: false`, the README's documented mode).

Stand-ins, each saying in its module what it cannot show: the Python language host, the GCP
provider (its cluster reports this plane's endpoint and CA) and the Command provider
(tests/standins/); `gke-gcloud-auth-plugin` (the plane's token); what GKE installs and its
load-balancer controllers (gke_addons.py); the slice controller's webhook server (slice_webhook.py)
and its admission check (slice_admission.py).

Jobs: kwok completes every running pod a Job owns (its fast `pod-complete` Stage), so JetStream's
smoke Job "succeeds" without running its program. On dev the smoke-pod stand-in (smoke_pod.py)
passes the smoke test's pod instead, and the sub-slicing check's pods keep running, so the day-2
recipes meet a running low-priority workload for Kueue to preempt. On saxml-v5e the Saxml cell
stand-in (sax_http.SaxCell) runs the publish Job's program against sax-http, whose every answer
depends on what the cell's pods may do in the GCS root by the IAM members `up` created on the
GCP stand-in; the model servers' JobSet pods keep running. The tests below say where they rely
on this. Each stack's lifecycle runs once (`lifecycle`), its tests read the record.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests import control_plane as cp
from tests import controllers as ctl
from tests import operations
from tests.engine import Engine, Workspace, readme_stack
from tests.standins import gcp_provider as gcp_standin
from tests.standins import gke_addons, gke_auth_plugin, sax_http, slice_admission, slice_webhook, smoke_pod
from tests.standins.gcp_project import Project
from workloads import smoke_job

pytestmark = pytest.mark.xdist_group(cp.XDIST_GROUP)  # one plane at a time (tests/control_plane.py)
PROJECT_ID = "my-tpu-project"
TOKEN = "hf_clusterUpTestToken0123456789"
PART_OF = "app.kubernetes.io/part-of=tpu-slicing"
UP = ("up", "--yes", "--skip-preview", "--policy-pack", "policy")


@dataclass(frozen=True)
class Case:
    stack: str
    config: dict[str, str]  # --path key -> value, on top of the stack file
    bump: tuple[str, str]  # an image to change: --path key, new value
    bumped_kind: str  # the kind whose pod template carries that image
    recipes: tuple[operations.Recipe, ...] = ()  # day-2 changes applied after the bump (tests/operations.py)
    # The stack's Jobs end by the smoke-pod stand-in (the smoke test passes), not by kwok's
    # pod-complete Stage: the slicing checks' pods keep running, as a check does for its minutes
    # on TPUs, so Kueue has a running low-priority workload to preempt.
    checks_keep_running: bool = False
    # The publish Job's pod runs its program against the Saxml cell stand-in (sax_http.SaxCell).
    sax_cell: bool = False


CASES = {
    # Serving beside the sub-slicing check, as the admission preview plans them: 112 of 128 chips.
    "dev": Case(
        "dev",
        {"checks.subslicing.enabled": "true"},
        ("versions.vllmImage", "docker.io/vllm/vllm-tpu:v0.26.1"),
        "LeaderWorkerSet",
        recipes=operations.DEV_RECIPES,
        checks_keep_running=True,
    ),
    "saxml-v5e": Case(
        "saxml-v5e",
        {},
        ("versions.saxHttpImage", "us-docker.pkg.dev/cloud-tpu-images/inference/sax-http:v1.0.1"),
        "Deployment",
        sax_cell=True,
    ),
    "jetstream-v5e": Case(
        "jetstream-v5e",
        {},
        ("versions.jetstreamHttpImage", "us-docker.pkg.dev/cloud-tpu-images/inference/jetstream-http:v0.2.4"),
        "LeaderWorkerSet",
    ),
}


@dataclass
class Record:
    """What one stack's lifecycle did and what the API server held at each point."""

    case: Case
    name: str = ""
    seconds: dict[str, float] = field(default_factory=dict)
    runs: dict[str, Any] = field(default_factory=dict)  # step -> CompletedProcess
    outputs: dict[str, Any] = field(default_factory=dict)
    state: list[dict[str, Any]] = field(default_factory=list)  # the Kubernetes resources in the stack's state
    live: dict[str, dict[str, Any] | None] = field(default_factory=dict)  # "Kind ns/name" -> object after up
    pods: list[dict[str, Any]] = field(default_factory=list)
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    webhook_calls: list[tuple[str, str, str]] = field(default_factory=list)
    assigned: dict[str, str] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    unchanged_steps: list[dict[str, Any]] = field(default_factory=list)  # a preview right after up
    bump_steps: list[dict[str, Any]] = field(default_factory=list)
    bumped_images: set[str] = field(default_factory=set)
    left: list[str] = field(default_factory=list)  # what the API server still held after destroy
    slices: list[str] = field(default_factory=list)  # GKE's Slice objects after up (the slice stand-in's)
    slices_left: list[str] = field(default_factory=list)  # and after destroy
    labelled_left: list[str] = field(default_factory=list)
    recipes: list[operations.RecipeRun] = field(default_factory=list)
    sax_requests: list[sax_http.Recorded] = field(default_factory=list)  # what the publish Job asked sax-http
    sax_ended: list[tuple[str, int, str]] = field(default_factory=list)  # its pods: (name, exit code, log)


class Api:
    """Paths of objects by apiVersion and kind, from the plane's discovery."""

    def __init__(self, plane: cp.ControlPlane) -> None:
        self.plane = plane
        self._resources: dict[tuple[str, str], tuple[str, bool]] = {}

    def resource(self, api_version: str, kind: str) -> tuple[str, bool]:
        key = (api_version, kind)
        if key not in self._resources:
            base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
            for resource in self.plane.request("GET", base)["resources"]:
                if "/" not in resource["name"]:
                    self._resources[(api_version, resource["kind"])] = (resource["name"], resource["namespaced"])
        return self._resources[key]

    def path(self, api_version: str, kind: str, namespace: str | None, name: str | None = None) -> str:
        plural, namespaced = self.resource(api_version, kind)
        base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        scope = f"/namespaces/{namespace}" if namespaced and namespace else ""
        return f"{base}{scope}/{plural}" + (f"/{name}" if name else "")

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        try:
            return dict(self.plane.request("GET", self.path(api_version, kind, namespace, name)))
        except cp.ApiError as err:
            if err.status == 404:
                return None
            raise


def _kubernetes_resources(ws: Workspace, name: str) -> list[dict[str, Any]]:
    exported = json.loads(ws.pulumi("stack", "export", "--stack", name).stdout)
    found = []
    for resource in exported["deployment"].get("resources") or []:
        token = resource["type"]
        if not token.startswith("kubernetes:") or token.startswith("kubernetes:helm.sh"):
            continue
        outputs = resource.get("outputs") or {}
        meta = outputs.get("metadata") or {}
        found.append(
            {
                "urn": resource["urn"],
                "apiVersion": outputs.get("apiVersion"),
                "kind": outputs.get("kind"),
                "namespace": meta.get("namespace"),
                "name": meta.get("name"),
            }
        )
    return found


def _key(item: dict[str, Any]) -> str:
    return f"{item['kind']} {item.get('namespace') or ''}/{item['name']}"


def _tools(base: Path, plane: cp.ControlPlane) -> Path:
    """A folder for the test PATH: the stand-in auth plugin and curl, and the pinned kubectl."""
    tools = base / "tools"
    tools.mkdir(parents=True, exist_ok=True)
    python = Path(__file__).resolve().parents[1] / ".venv" / "bin" / "python"
    root = Path(__file__).resolve().parents[1]
    for command, module in {"gke-gcloud-auth-plugin": "gke_auth_plugin", "curl": "curl"}.items():
        wrapper = tools / command
        wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="{root}" exec "{python}" -m tests.standins.{module} "$@"\n')
        wrapper.chmod(0o755)
    kubectl = tools / "kubectl"
    if not kubectl.exists():
        kubectl.symlink_to(cp.cache_dir() / "bin" / "kubectl")
    return tools


def plane_env(engine: Engine, base: Path, plane: cp.ControlPlane) -> dict[str, str]:
    """What the CLI needs to reach the plane: the GCP stand-in's cluster endpoint and CA, the auth
    plugin's token, and the tools folder on PATH."""
    return {
        gcp_standin.ENDPOINT_ENV: plane.server.removeprefix("https://"),
        gcp_standin.CA_FILE_ENV: str(plane.ca_file),
        gke_auth_plugin.TOKEN_ENV: plane.token,
        "PATH": os.pathsep.join([str(_tools(base, plane)), engine.env["PATH"]]),
    }


def _run_lifecycle(engine: Engine, label: str, case: Case, base: Path) -> Record:
    record = Record(case)
    config = cp.load_stack(case.stack)  # the nodes depend on the pools only, not on case.config
    with (
        cp.control_plane(
            cp.stack_nodes(config),
            service_cidr=str(config.network.service_cidr),
            complete_jobs=not (case.checks_keep_running or case.sax_cell),
        ) as plane,
        ctl.controllers(plane) as running,
    ):
        gke_addons.install(plane, config.versions.gateway_api_inference_extension)
        balancers = gke_addons.LoadBalancers(plane)
        generation = config.tpu.generation if config.serving.dynamic_slicing else config.serving.slice.generation
        webhook = slice_webhook.SliceWebhook(plane, generation)
        pollers: list[Any] = [balancers, webhook]
        if case.checks_keep_running:
            pollers.append(smoke_pod.SmokePods(plane, config.serving.namespace, smoke_job.JOB_NAME))
        for poller in pollers:
            poller.start()
        cell: sax_http.SaxCell | None = None
        try:
            api = Api(plane)
            ws = readme_stack(engine, case.stack, label, project=PROJECT_ID, token=TOKEN)
            if case.sax_cell:  # it reads the IAM members of the project the stack's `up` fills
                project = Project.at(Path(ws.env[gcp_standin.PROJECT_ENV]))
                cell = sax_http.SaxCell(plane, config.serving.namespace, project)
                pollers.append(cell)
                cell.start()
            name = record.name = f"{case.stack}-new"
            for key, value in {"controllers.install": "false", **case.config}.items():
                ws.pulumi("config", "set", "--path", f"tpu-slicing:{key}", value, "--stack", name)
            env = plane_env(engine, base, plane)

            def step(label: str, *args: str) -> Any:
                started = time.monotonic()
                done = ws.pulumi(*args, "--stack", name, check=False, extra_env=env)
                record.seconds[label] = time.monotonic() - started
                record.runs[label] = done
                running.check_alive()
                for poller in pollers:
                    poller.check()
                return done

            up = step("up", "up", "--yes", "--skip-preview", "--policy-pack", "policy")
            if up.returncode != 0:
                return record
            _settle(plane, record.name, ws, running)
            record.outputs = json.loads(
                ws.pulumi("stack", "output", "--json", "--show-secrets", "--stack", name).stdout
            )
            record.state = _kubernetes_resources(ws, name)
            record.live = {
                _key(r): api.get(r["apiVersion"], r["kind"], r["namespace"], r["name"]) for r in record.state
            }
            record.pods = plane.request("GET", "/api/v1/pods")["items"]
            record.nodes = {n["metadata"]["name"]: n for n in plane.request("GET", "/api/v1/nodes")["items"]}
            record.slices = _slice_names(plane)

            # What controllers and webhooks add to the live objects must not read as drift.
            step("refresh", "refresh", "--yes", "--skip-preview", "--expect-no-changes")
            unchanged = step("no-change preview", "preview", "--json", "--diff")
            if unchanged.returncode == 0:
                record.unchanged_steps = [s for s in json.loads(unchanged.stdout)["steps"] if s["op"] != "same"]
            again = step("second up", "up", "--yes", "--skip-preview", "--expect-no-changes", "--policy-pack", "policy")
            if again.returncode == 0:
                record.history = json.loads(ws.pulumi("stack", "history", "--json", "--stack", name).stdout)

            ws.pulumi("config", "set", "--path", f"tpu-slicing:{case.bump[0]}", case.bump[1], "--stack", name)
            preview = step("bump preview", "preview", "--json", "--diff")
            if preview.returncode == 0:
                record.bump_steps = [s for s in json.loads(preview.stdout)["steps"] if s["op"] != "same"]
            bumped = step("bump up", "up", "--yes", "--skip-preview", "--policy-pack", "policy")
            if bumped.returncode == 0:
                for resource in _kubernetes_resources(ws, name):
                    if resource["kind"] == case.bumped_kind:
                        live = api.get(
                            resource["apiVersion"], resource["kind"], resource["namespace"], resource["name"]
                        )
                        record.bumped_images |= set(_images(live or {}))

            if bumped.returncode == 0 and case.recipes:
                target = operations.Stack(
                    pulumi=lambda *args: ws.pulumi(*args, "--stack", name, check=False, extra_env=env),
                    stack_file=ws.root / f"Pulumi.{name}.yaml",
                    name=name,
                    plane=plane,
                    namespace=config.serving.namespace,
                    secrets=[TOKEN],
                    plane_stack=case.stack,
                )
                for recipe in case.recipes:
                    started = time.monotonic()
                    try:
                        record.recipes.append(operations.apply(target, recipe, UP))
                    except Exception:  # kept for the recipe test; the lifecycle's teardown still runs
                        record.recipes.append(operations.RecipeRun(recipe, error=traceback.format_exc()))
                        break
                    finally:
                        record.seconds[f"recipe: {recipe.name}"] = time.monotonic() - started
                    running.check_alive()
                    for poller in pollers:
                        poller.check()

            # The README's teardown, then destroy.
            for key in ("cluster.deletionProtection", "cluster.protect"):
                ws.pulumi("config", "set", "--path", f"tpu-slicing:{key}", "false", "--stack", name)
            step("teardown up", "up", "--yes", "--skip-preview", "--policy-pack", "policy",
                 "--policy-pack-config", "policy/teardown-config.json")  # fmt: skip
            step("destroy", "destroy", "--yes", "--skip-preview")
            record.slices_left = _slice_names(plane)
            record.left = [
                _key(r) for r in record.state if api.get(r["apiVersion"], r["kind"], r["namespace"], r["name"])
            ]
            for api_version, kind in {(r["apiVersion"], r["kind"]) for r in record.state}:
                listed = plane.request("GET", api.path(api_version, kind, None), query={"labelSelector": PART_OF})
                record.labelled_left += [f"{kind} {o['metadata'].get('namespace', '')}/{o['metadata']['name']}"
                                         for o in listed["items"]]  # fmt: skip
        finally:
            if cell is not None:
                record.sax_requests, record.sax_ended = list(cell.sax.requests), list(cell.ended)
            record.webhook_calls = list(webhook.calls)
            record.assigned = dict(balancers.assigned)
            for poller in reversed(pollers):
                poller.stop()
    return record


def _slice_names(plane: cp.ControlPlane) -> list[str]:
    return sorted(s["metadata"]["name"] for s in plane.request("GET", slice_admission.SLICES)["items"])


def _settle(plane: cp.ControlPlane, name: str, ws: Workspace, running: ctl.Controllers, timeout: float = 180) -> None:
    """Wait until each LeaderWorkerSet has all its pods Ready, each JobSet all its pods bound, and
    every placed slice its Slice: `pulumi up` waits for none of them (the LWSs and JobSets are
    skipAwait; Kueue admits, the LWS and JobSet controllers create the pods, the scheduler binds,
    kwok runs them; the slice stand-in makes the Slices in its labelling pass). On a timeout the
    pod tests report what is missing."""
    api = Api(plane)
    resources = _kubernetes_resources(ws, name)
    sets = [r for r in resources if r["kind"] == "LeaderWorkerSet"]
    jobsets = [r for r in resources if r["kind"] == "JobSet"]

    def ready() -> bool:
        running.check_alive()
        for resource in sets:
            live = api.get(resource["apiVersion"], resource["kind"], resource["namespace"], resource["name"]) or {}
            spec = live.get("spec") or {}
            wanted = spec.get("replicas", 1) * (spec.get("leaderWorkerTemplate") or {}).get("size", 1)
            pods = plane.request(
                "GET",
                f"/api/v1/namespaces/{resource['namespace']}/pods",
                query={"labelSelector": f"leaderworkerset.sigs.k8s.io/name={resource['name']}"},
            )["items"]
            up = [
                p
                for p in pods
                if any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])
            ]
            if len(up) < wanted:
                return False
        for resource in jobsets:
            live = api.get(resource["apiVersion"], resource["kind"], resource["namespace"], resource["name"]) or {}
            jobs = (live.get("spec") or {}).get("replicatedJobs") or []
            wanted = sum(job.get("replicas", 1) * job["template"]["spec"].get("parallelism", 1) for job in jobs)
            pods = plane.request(
                "GET",
                f"/api/v1/namespaces/{resource['namespace']}/pods",
                query={"labelSelector": f"jobset.sigs.k8s.io/jobset-name={resource['name']}"},
            )["items"]
            if len(pods) < wanted or not all(p["spec"].get("nodeName") for p in pods):
                return False
        return not _slices_missing(plane)

    with contextlib.suppress(cp.ControlPlaneError):
        plane.wait_for("every LWS pod Ready, every JobSet pod bound, every Slice made", ready, timeout, interval=1.0)


def _slices_missing(plane: cp.ControlPlane) -> list[str]:
    """The Slices the stand-in has yet to make for the slices placed so far: one per unit (an LWS
    group, a JobSet's Job) whose live pods carry a shape and a host, as its labelling pass reads
    them every LABEL_INTERVAL (tests/standins/slice_admission.py `_label_slices`)."""
    units: set[str] = set()
    for key in slice_admission.UNITS:
        for pod in plane.request("GET", "/api/v1/pods", query={"labelSelector": key})["items"]:
            meta, spec = pod["metadata"], pod["spec"]
            if pod.get("status", {}).get("phase") in slice_admission.FINISHED or meta.get("deletionTimestamp"):
                continue
            shaped = (meta.get("annotations") or {}).get(slice_admission.SLICE_TOPOLOGY_ANNOTATION)
            if shaped and ((spec.get("nodeSelector") or {}).get(slice_admission.HOST) or spec.get("nodeName")):
                units.add(slice_admission._slice_name(meta["labels"][key]))
    return sorted(units - set(_slice_names(plane)))


def _images(obj: dict[str, Any]) -> list[str]:
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if "image" in value and "name" in value and isinstance(value["image"], str):
                found.append(value["image"])
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(obj.get("spec") or {})
    return found


@pytest.fixture(scope="session")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Engine:
    return Engine.create(tmp_path_factory.mktemp("engine"))


@pytest.fixture(
    scope="module",
    params=list(CASES),
)
def lifecycle(
    request: pytest.FixtureRequest, engine: Engine, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Record]:
    label = request.param
    record = _run_lifecycle(engine, label, CASES[label], tmp_path_factory.mktemp(f"up-{label}"))
    steps = ", ".join(f"{step} {seconds:.0f} s" for step, seconds in record.seconds.items())
    print(f"\n{label}: {len(record.state)} Kubernetes objects; {steps}")  # shown with -s
    yield record


def _ok(record: Record, step: str) -> Any:
    done = record.runs.get(step)
    assert done is not None, f"{record.case.stack}: `{step}` never ran (an earlier step failed: {list(record.runs)})"
    assert done.returncode == 0, f"{record.case.stack} `{step}`:\n{done.stdout[-6000:]}\n{done.stderr[-3000:]}"
    return done


def test_up_completes_with_every_await_satisfied(lifecycle: Record) -> None:
    _ok(lifecycle, "up")
    assert lifecycle.state, "no Kubernetes object in the stack's state"


def test_every_object_of_the_stack_is_live_in_the_api_server(lifecycle: Record) -> None:
    _ok(lifecycle, "up")
    missing = [key for key, obj in lifecycle.live.items() if obj is None]
    assert missing == []


def test_every_job_ran_to_completion_in_the_simulation(lifecycle: Record) -> None:
    """kwok completes every running pod a Job owns (on saxml-v5e the Saxml cell stand-in runs the
    publish program instead), so `Complete` here says the Job was admitted, its pods were scheduled
    and started, and its success counted; that a program passed is the publish test's and dev's."""
    _ok(lifecycle, "up")
    jobs = {key: obj for key, obj in lifecycle.live.items() if key.startswith("Job ") and obj}
    for key, job in jobs.items():
        conditions = {c["type"]: c["status"] for c in job.get("status", {}).get("conditions") or []}
        assert conditions.get("Complete") == "True", f"{key}: {conditions}"
    expected = {"dev": 1, "saxml-v5e": 1, "jetstream-v5e": 1}[lifecycle.case.stack]
    assert len(jobs) == expected


def _template_pods(record: Record) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(owner, pod template, pod) for every pod of the stack's LeaderWorkerSets and JobSets."""
    found = []
    for key, obj in record.live.items():
        if obj is None:
            continue
        name = obj["metadata"]["name"]
        namespace = obj["metadata"].get("namespace", "")
        mine = [p for p in record.pods if p["metadata"]["namespace"] == namespace]
        if obj["kind"] == "LeaderWorkerSet":
            lws = obj["spec"]["leaderWorkerTemplate"]
            for pod in mine:
                labels = pod["metadata"].get("labels") or {}
                if labels.get("leaderworkerset.sigs.k8s.io/name") != name:
                    continue
                leader = labels.get("leaderworkerset.sigs.k8s.io/worker-index") == "0"
                template = lws.get("leaderTemplate") if leader and lws.get("leaderTemplate") else lws["workerTemplate"]
                found.append((key, template, pod))
        elif obj["kind"] == "JobSet":
            templates = {job["name"]: job["template"]["spec"]["template"] for job in obj["spec"]["replicatedJobs"]}
            for pod in mine:
                labels = pod["metadata"].get("labels") or {}
                if labels.get("jobset.sigs.k8s.io/jobset-name") == name:
                    found.append((key, templates[labels["jobset.sigs.k8s.io/replicatedjob-name"]], pod))
    return found


def _tolerated(taint: dict[str, Any], tolerations: list[dict[str, Any]]) -> bool:
    for toleration in tolerations:
        if toleration.get("effect") not in (None, "", taint["effect"]):
            continue
        if toleration.get("operator") == "Exists" and toleration.get("key") in (None, "", taint["key"]):
            return True
        if toleration.get("key") == taint["key"] and toleration.get("value", "") == taint.get("value", ""):
            return True
    return False


def test_controller_made_pods_carry_the_designed_labels_tolerations_and_placement(lifecycle: Record) -> None:
    _ok(lifecycle, "up")
    pods = _template_pods(lifecycle)
    lws = {k: o for k, o in lifecycle.live.items() if o and o["kind"] == "LeaderWorkerSet"}
    if lifecycle.case.stack in ("dev", "jetstream-v5e"):
        assert lws, "the stack serves from LeaderWorkerSets"
    for key, obj in lws.items():
        expected = obj["spec"]["replicas"] * obj["spec"]["leaderWorkerTemplate"]["size"]
        assert sum(1 for owner, _t, _p in pods if owner == key) == expected, key
    groups: dict[tuple[str, str], set[str]] = {}
    for owner, template, pod in pods:
        where = f"{owner}: pod {pod['metadata']['name']}"
        meta, spec = template.get("metadata") or {}, template["spec"]
        assert (meta.get("labels") or {}).items() <= (pod["metadata"].get("labels") or {}).items(), where
        assert (meta.get("annotations") or {}).items() <= (pod["metadata"].get("annotations") or {}).items(), where
        for toleration in spec.get("tolerations") or []:
            assert toleration in (pod["spec"].get("tolerations") or []), f"{where}: {toleration}"
        selector = pod["spec"].get("nodeSelector") or {}
        assert (spec.get("nodeSelector") or {}).items() <= selector.items(), where
        node = lifecycle.nodes[pod["spec"]["nodeName"]]
        assert selector.items() <= node["metadata"]["labels"].items(), f"{where} on {node['metadata']['name']}"
        for taint in node["spec"].get("taints") or []:
            assert _tolerated(taint, pod["spec"].get("tolerations") or []), f"{where}: {taint}"
        chips = sum(
            int((c.get("resources") or {}).get("limits", {}).get("google.com/tpu", 0)) for c in spec["containers"]
        )
        if chips:
            assert int(node["status"]["allocatable"].get("google.com/tpu", 0)) >= chips, where
        group = (pod["metadata"].get("labels") or {}).get("leaderworkerset.sigs.k8s.io/group-key")
        if group:
            groups.setdefault((owner, group), set()).add(node["metadata"]["labels"]["cloud.google.com/gke-nodepool"])
    # A serving group is one slice: all its hosts in one TPU pool (one cube, or one fixed slice).
    assert all(len(pools) == 1 for pools in groups.values()), groups


def test_refresh_right_after_up_finds_no_drift(lifecycle: Record) -> None:
    _ok(lifecycle, "refresh")


def test_a_second_up_with_no_change_is_a_no_op(lifecycle: Record) -> None:
    _ok(lifecycle, "no-change preview")
    changed = [(s["op"], s["urn"], s.get("diffReasons"), s.get("detailedDiff")) for s in lifecycle.unchanged_steps]
    assert changed == []
    _ok(lifecycle, "second up")
    latest = lifecycle.history[0]
    assert latest["result"] == "succeeded"
    assert set(latest["resourceChanges"]) == {"same"}, latest["resourceChanges"]


# Jobs are immutable; the smoke test re-runs, by replacement, whenever the serving it tests changes
# (a new image among them: workloads/smoke_job.py fingerprint), so a bump replaces it by design.
RERUN_ON_CHANGE = "tpu-slicing:workloads:SmokeJob$kubernetes:batch/v1:Job::"


def test_an_image_bump_is_an_in_place_update(lifecycle: Record) -> None:
    _ok(lifecycle, "bump preview")
    steps = [(step["op"], step["urn"]) for step in lifecycle.bump_steps]
    bumped = [(op, urn) for op, urn in steps if f":{lifecycle.case.bumped_kind}::" in urn]
    assert bumped, f"the bump changed no {lifecycle.case.bumped_kind}: {steps}"
    assert {op for op, _urn in bumped} == {"update"}, bumped
    others = {(op, urn) for op, urn in steps if op != "update"}
    assert all(op in operations.REPLACING and RERUN_ON_CHANGE in urn for op, urn in others), others
    _ok(lifecycle, "bump up")
    assert lifecycle.case.bump[1] in lifecycle.bumped_images


def test_day_two_recipes_do_what_the_readme_says(lifecycle: Record) -> None:
    """Each recipe of the README's "Operations", applied to the stack after its image bump."""
    print("\n" + operations.table(lifecycle.recipes))  # the closing note's figures, with -s
    found = {run.recipe.name: operations.problems(run) for run in lifecycle.recipes}
    assert {name: p for name, p in found.items() if p} == {}
    assert [run.recipe for run in lifecycle.recipes] == list(lifecycle.case.recipes)


def test_destroy_removes_everything_the_stack_created(lifecycle: Record) -> None:
    _ok(lifecycle, "teardown up")
    _ok(lifecycle, "destroy")
    assert lifecycle.left == []
    assert lifecycle.labelled_left == []


def test_destroy_keeps_the_slice_controller_until_every_slice_is_finalized(lifecycle: Record) -> None:
    """Only a running slice controller finalizes GKE's Slices (the stand-in does, a few seconds
    after a slice's pods are gone, while the controller's Deployment exists): the drain between the
    workloads and the controller (k8s/slice_drain.py) holds the controller until none is left."""
    _ok(lifecycle, "destroy")
    if lifecycle.case.stack == "dev":
        assert lifecycle.slices, "the serving groups formed no Slice"
    assert lifecycle.slices_left == []


def test_the_stack_outputs_are_what_the_cluster_reported(lifecycle: Record) -> None:
    _ok(lifecycle, "up")
    outputs, assigned = lifecycle.outputs, lifecycle.assigned
    assert outputs["endpoint"].startswith("127.0.0.1:")
    if lifecycle.case.stack == "dev":
        gateway = next(value for key, value in assigned.items() if key.startswith("Gateway "))
        assert outputs["gatewayIp"] == gateway


def test_the_api_server_called_the_slice_webhooks_on_serving_workloads(lifecycle: Record) -> None:
    _ok(lifecycle, "up")
    if lifecycle.case.stack != "dev":
        assert lifecycle.webhook_calls == []  # fixed slices: no slice controller
        return
    kinds = {kind for _path, kind, namespace in lifecycle.webhook_calls}
    assert {"LeaderWorkerSet", "Job", "JobSet"} <= kinds, lifecycle.webhook_calls  # serving, smoke test, check
    assert all(namespace not in slice_webhook.EXEMPT for _p, _k, namespace in lifecycle.webhook_calls)


def test_the_saxml_publish_job_is_answered_through_sax_http(lifecycle: Record) -> None:
    """The publish program the cluster holds ran against sax-http, each answer gated by what the
    cell's pods may do in the GCS root (their IAM members on the GCP stand-in): it published the
    stack's model and saw every replica active, so `up` waited on a real success."""
    if not lifecycle.case.sax_cell:
        pytest.skip("only saxml-v5e runs a Saxml cell")
    _ok(lifecycle, "up")
    assert lifecycle.sax_ended, "the publish Job's pod never ran"
    assert [code for _pod, code, _log in lifecycle.sax_ended] == [0], lifecycle.sax_ended[-1][2][-3000:]
    published = [r.body for r in lifecycle.sax_requests if (r.method, r.path) == ("POST", "/publish")]
    config = cp.load_stack(lifecycle.case.stack)
    assert [body.get("model") for body in published] == [config.serving.saxml.model_key], published
    polled = [r for r in lifecycle.sax_requests if (r.method, r.path) == ("GET", "/listcell")]
    assert polled, "the publish program never confirmed its replicas"
