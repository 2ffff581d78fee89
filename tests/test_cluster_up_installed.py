"""The default install path: `pulumi up` and `pulumi destroy` of the dev stack with
`controllers.install: true`, JobSet, Kueue and LWS installed by the program's Helm Releases from a
chart mirror on loopback; between them, the README's controller recipe: Kueue moved to another
patch release and back, each an in-place Helm upgrade applied while serving runs.

Real: the `pulumi` CLI and engine, the Kubernetes provider and the Helm inside it; the charts as
their releases ship them, served by an OCI registry (tests/chart_mirror.py); etcd, kube-apiserver,
kube-controller-manager (EndpointSlices), kube-scheduler and kwok; Kueue, JobSet and LWS, started as
the bodies of the pods their Releases create and configured from what the Releases put in the
cluster (tests/installed_controllers.py).

Stand-ins, as in tests/test_cluster_up.py, and the pod network (tests/standins/pod_network.py): the
API server calls the charts' webhooks at their Services' endpoints through it. The Releases' await
(Helm's wait for the Deployments) is satisfied when each controller's process answers /readyz: kwok
makes the chart's pods Ready only then (tests/control_plane.py Network.gated), as their readiness
probes would.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from k8s import controllers as program
from k8s.slice_controller import NAMESPACE as SLICE_NAMESPACE
from settings import rules_recovery
from settings.model import KueueRecoveryConfig
from tests import charts, operations
from tests import control_plane as cp
from tests import installed_controllers as installed
from tests.chart_mirror import ChartMirror
from tests.engine import Engine, readme_stack
from tests.standins import gke_addons, pod_network, slice_admission, slice_webhook
from tests.test_cluster_up import PART_OF, PROJECT_ID, TOKEN, Api, plane_env

pytestmark = pytest.mark.xdist_group(cp.LATE_XDIST_GROUP)  # one plane at a time (tests/control_plane.py)
RELEASE_TYPE = "kubernetes:helm.sh/v3:Release"
# A patch release of Kueue other than the pin, served by the Go module proxy (its chart goes to the
# mirror too): what the preview shows for a chart version change.
KUEUE_OTHER_PATCH = "0.19.1"


@dataclass
class Run:
    runs: dict[str, Any] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    releases: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> the Release's outputs
    manifests: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # what each Release applied
    missing: dict[str, list[str]] = field(default_factory=dict)  # manifest objects not live after up
    config_maps: dict[str, dict[str, Any]] = field(default_factory=dict)  # live manager ConfigMaps
    # The Configuration the running Kueue says it loaded (cmd/kueue/main.go logs "Configuration loaded").
    kueue_loaded: str = ""
    bump_steps: list[dict[str, Any]] = field(default_factory=list)
    # The patch applied (to KUEUE_OTHER_PATCH) and rolled back (to the pin): per step, the Kueue
    # manager's image once the Release's rollout ended, the serving pods and Kueue's admission
    # before and after, and the processes restarted for the new ReplicaSets.
    patches: dict[str, dict[str, Any]] = field(default_factory=dict)
    restarted: list[str] = field(default_factory=list)
    refresh: Any = None
    pulled: list[str] = field(default_factory=list)  # chart manifests the mirror served
    webhook_connections: list[tuple[str, int, bool]] = field(default_factory=list)
    routed: list[str] = field(default_factory=list)  # the controller each routed call reached
    started: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    left: dict[str, list[str]] = field(default_factory=dict)  # manifest objects still live after destroy
    labelled_left: list[str] = field(default_factory=list)


def _helm(plane: cp.ControlPlane, scratch: Path, *args: str) -> str:
    env = {**os.environ, "HELM_CACHE_HOME": str(scratch / "c"), "HELM_CONFIG_HOME": str(scratch / "g"),
           "HELM_DATA_HOME": str(scratch / "d"), "KUBECONFIG": str(plane.kubeconfig)}  # fmt: skip
    done = subprocess.run(
        [str(charts.helm()), *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode != 0:
        raise cp.ControlPlaneError(f"helm {' '.join(args)}: {done.stderr}")
    return done.stdout


def _manifest(plane: cp.ControlPlane, scratch: Path, name: str) -> list[dict[str, Any]]:
    text = _helm(plane, scratch, "get", "manifest", name, "--namespace", program.CHARTS[name].namespace)
    return [doc for doc in yaml.safe_load_all(text) if isinstance(doc, dict)]


def _live(api: Api, document: dict[str, Any], namespace: str) -> bool:
    scoped = document["metadata"].get("namespace") or namespace
    return api.get(document["apiVersion"], document["kind"], scoped, document["metadata"]["name"]) is not None


def _run(engine: Engine, base: Path) -> Run:
    run = Run()
    config = cp.load_stack("dev")
    short = Path(tempfile.mkdtemp(prefix="tpu-net-"))  # a Unix socket path must stay short
    try:
        with (
            pod_network.pod_network(short / "proxy.sock") as network,
            ChartMirror() as mirror,
        ):
            mirror.publish("kueue", KUEUE_OTHER_PATCH)
            plane_network = cp.Network(
                network.egress_selector_configuration(), str(config.network.pod_cidr), installed.GATED
            )
            with (
                cp.control_plane(
                    cp.stack_nodes(config), service_cidr=str(config.network.service_cidr), network=plane_network
                ) as plane,
                installed.bodies(plane) as bodies,
            ):
                # The slice webhook stand-in's own EndpointSlice names this machine's address.
                network.direct.add(slice_webhook.host_address())
                _lifecycle(Setting(engine, base, plane, bodies, mirror, config, network), run)
                run.webhook_connections = list(network.connections)
                run.started, run.stopped, run.routed = list(bodies.started), list(bodies.stopped), list(bodies.routed)
                run.restarted = list(bodies.restarted)
            run.pulled = [path for method, path, status in mirror.requests() if "/manifests/" in path and status == 200]
    finally:
        shutil.rmtree(short, ignore_errors=True)
    return run


@dataclass(frozen=True)
class Setting:
    engine: Engine
    base: Path
    plane: cp.ControlPlane
    bodies: installed.Bodies
    mirror: ChartMirror
    config: Any
    network: pod_network.PodNetwork


def _lifecycle(setting: Setting, run: Run) -> None:
    engine, base, plane, bodies, mirror, config = (
        setting.engine, setting.base, setting.plane, setting.bodies, setting.mirror, setting.config
    )  # fmt: skip
    gke_addons.install(plane, config.versions.gateway_api_inference_extension)
    balancers = gke_addons.LoadBalancers(plane)
    webhook = slice_webhook.SliceWebhook(plane, config.tpu.generation)
    controllers_resolve = bodies.resolve

    def resolve(pod_ip: str, port: int) -> tuple[str, int] | None:
        """The charts' controllers, and the slice controller's pods: its Service's EndpointSlices
        hold their (non-loopback) pod IPs now, beside the stand-in's own, and the API server may
        pick any; each reaches the stand-in's server (slice_webhook.py plays every replica)."""
        found = controllers_resolve(pod_ip, port)
        if found is not None:
            return found
        query = {"fieldSelector": f"status.podIP={pod_ip}"}
        pods = plane.request("GET", f"/api/v1/namespaces/{SLICE_NAMESPACE}/pods", query=query)["items"]
        ports = {p["containerPort"] for pod in pods for c in pod["spec"]["containers"] for p in c.get("ports") or []}
        return (webhook.address, webhook.port) if port in ports else None

    setting.network.resolve = resolve
    admission = slice_admission.SliceAdmission(plane)
    for poller in (balancers, webhook, admission):
        poller.start()
    try:
        api = Api(plane)
        ws = readme_stack(engine, "dev", "installed", project=PROJECT_ID, token=TOKEN)
        name = "dev-new"
        ws.pulumi("config", "set", "--path", "tpu-slicing:controllers.chartRegistry", mirror.registry, "--stack", name)
        env = {**plane_env(engine, base, plane), **mirror.env}

        def step(label: str, *args: str) -> Any:
            started = time.monotonic()
            done = ws.pulumi(*args, "--stack", name, check=False, extra_env=env)
            run.seconds[label] = time.monotonic() - started
            run.runs[label] = done
            bodies.check()
            for poller in (balancers, webhook, admission):
                poller.check()
            return done

        up = step("up", "up", "--yes", "--skip-preview", "--policy-pack", "policy")
        if up.returncode != 0:
            return
        exported = json.loads(ws.pulumi("stack", "export", "--stack", name).stdout)["deployment"]["resources"]
        run.releases = {
            (r.get("outputs") or {}).get("name", r["urn"]): r.get("outputs") or {}
            for r in exported
            if r["type"] == RELEASE_TYPE
        }
        scratch = base / "helm"
        for release in program.CHARTS:
            run.manifests[release] = _manifest(plane, scratch, release)
            namespace = program.CHARTS[release].namespace
            run.missing[release] = [
                f"{d['kind']} {d['metadata']['name']}" for d in run.manifests[release] if not _live(api, d, namespace)
            ]
            deployment = api.get("apps/v1", "Deployment", namespace, program.CHARTS[release].deployment) or {}
            volumes = deployment.get("spec", {}).get("template", {}).get("spec", {}).get("volumes") or []
            for volume in volumes:
                if "configMap" in volume:
                    live = api.get("v1", "ConfigMap", namespace, volume["configMap"]["name"]) or {}
                    run.config_maps[release] = live.get("data") or {}
        kueue_body = bodies.bodies.get("kueue")
        if kueue_body is not None:
            log = kueue_body.process.log.read_text(errors="replace")
            run.kueue_loaded = next((line for line in log.splitlines() if "Configuration loaded" in line), "")
        run.refresh = step("refresh", "refresh", "--yes", "--expect-no-changes", "--skip-preview")
        ws.pulumi("config", "set", "--path", "tpu-slicing:versions.kueue", KUEUE_OTHER_PATCH, "--stack", name)
        preview = step("bump preview", "preview", "--json", "--diff")
        if preview.returncode == 0:
            run.bump_steps = [s for s in json.loads(preview.stdout)["steps"] if s["op"] != "same"]
            # The README's recipe, applied: the other patch, then back to the pin (an upgrade from
            # that patch), each a Helm upgrade of the one Release while serving keeps running.
            for label, edit in (
                ("patch", ()),
                ("patch back", ("config", "rm", "--path", "tpu-slicing:versions.kueue")),
            ):
                if edit:
                    ws.pulumi(*edit, "--stack", name)
                if not _apply_patch(setting, run, label, step):
                    break
        ws.pulumi("config", "rm", "--path", "tpu-slicing:versions.kueue", "--stack", name, check=False)

        for key in ("cluster.deletionProtection", "cluster.protect"):
            ws.pulumi("config", "set", "--path", f"tpu-slicing:{key}", "false", "--stack", name)
        step("teardown up", "up", "--yes", "--skip-preview", "--policy-pack", "policy",
             "--policy-pack-config", "policy/teardown-config.json")  # fmt: skip
        if step("destroy", "destroy", "--yes", "--skip-preview").returncode == 0:
            # Helm uninstalls with background propagation (helm v3.18.6 pkg/action/uninstall.go
            # parseCascadingFlag): the Deployments go at once, their pods later, by the garbage
            # collector; each body is stopped once its chart's pods are all gone.
            def stopped() -> bool:
                bodies.check()
                return set(bodies.stopped) == set(program.CHARTS)

            plane.wait_for("every chart's controller stopped", stopped, 180)
        for release, documents in run.manifests.items():
            namespace = program.CHARTS[release].namespace
            run.left[release] = [f"{d['kind']} {d['metadata']['name']}" for d in documents if _live(api, d, namespace)]
        for plural in ("deployments", "leaderworkersets", "jobsets"):
            group = {"deployments": "apps/v1", "leaderworkersets": "leaderworkerset.x-k8s.io/v1",
                     "jobsets": "jobset.x-k8s.io/v1alpha2"}[plural]  # fmt: skip
            with contextlib.suppress(cp.ApiError):  # the kind may be gone with its CRD
                listed = plane.request("GET", f"/apis/{group}/{plural}", query={"labelSelector": PART_OF})
                run.labelled_left += [f"{plural} {o['metadata']['name']}" for o in listed["items"]]
    finally:
        for poller in (admission, webhook, balancers):
            poller.stop()


def _apply_patch(setting: Setting, run: Run, label: str, step: Any) -> bool:
    """`up` a Kueue chart version change and record what it did; False when it failed."""
    plane, namespace = setting.plane, setting.config.serving.namespace
    kueue = program.CHARTS["kueue"]
    deployment = f"/apis/apps/v1/namespaces/{kueue.namespace}/deployments/{kueue.deployment}"
    # The serving LWSs are skipAwait (workloads/vllm_pd.py): `up` returns before their groups run.
    # As tests/operations.py `apply` does, the snapshot waits until every LWS settled.
    plane.wait_for("every LeaderWorkerSet settled before the patch", lambda: operations.settled(plane, namespace) == "",
                   operations.SETTLE_TIMEOUT, 1.0)  # fmt: skip
    record: dict[str, Any] = {
        "pods before": operations.serving_pods(plane, namespace),
        "admission before": operations.admission(plane, namespace),
    }
    run.patches[label] = record
    if step(f"{label} up", "up", "--yes", "--skip-preview", "--policy-pack", "policy").returncode != 0:
        return False

    def rolled_out() -> bool:
        live = plane.request("GET", deployment)
        status, replicas = live.get("status") or {}, live["spec"].get("replicas", 1)
        return bool(
            status.get("observedGeneration") == live["metadata"]["generation"]
            and status.get("updatedReplicas") == replicas == status.get("readyReplicas") == status.get("replicas")
        )

    plane.wait_for(f"the {label} rollout of Kueue's Deployment", rolled_out, 180, 1.0)
    plane.wait_for(
        "serving as it was before",
        lambda: (
            operations.admission(plane, namespace) == record["admission before"]
            and operations.settled(plane, namespace) == ""
        ),
        180,
        1.0,
    )
    live = plane.request("GET", deployment)
    record["images"] = sorted(c["image"] for c in live["spec"]["template"]["spec"]["containers"])
    record["pods after"] = operations.serving_pods(plane, namespace)
    record["admission after"] = operations.admission(plane, namespace)
    again = step(
        f"{label} second up", "up", "--yes", "--skip-preview", "--expect-no-changes", "--policy-pack", "policy"
    )
    return bool(again.returncode == 0)


@pytest.fixture(scope="module")
def installed_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    engine = Engine.create(tmp_path_factory.mktemp("engine"))
    run = _run(engine, tmp_path_factory.mktemp("installed"))
    print("\ninstalled: " + ", ".join(f"{step} {seconds:.0f} s" for step, seconds in run.seconds.items()))
    yield run


def _ok(run: Run, step: str) -> Any:
    done = run.runs.get(step)
    assert done is not None, f"`{step}` never ran (an earlier step failed: {list(run.runs)})"
    assert done.returncode == 0, f"`{step}`:\n{done.stdout[-6000:]}\n{done.stderr[-3000:]}"
    return done


def test_up_installs_the_three_releases_from_the_mirror(installed_run: Run) -> None:
    _ok(installed_run, "up")
    assert sorted(installed_run.releases) == sorted(program.CHARTS)
    for name, outputs in installed_run.releases.items():
        assert outputs["status"]["status"] == "deployed", (name, outputs["status"])
        assert outputs["chart"].endswith(f"/{name}/charts/{name}") and outputs["chart"].startswith("oci://127.0.0.1:")
    # Every chart came from the mirror (Check in the preview of `up`, then Create).
    assert {path.split("/")[2] for path in installed_run.pulled} >= set(program.CHARTS)


def test_every_object_each_release_applied_is_live(installed_run: Run) -> None:
    _ok(installed_run, "up")
    assert all(installed_run.manifests.values())
    assert installed_run.missing == {name: [] for name in program.CHARTS}


def test_the_installed_configuration_is_the_one_the_tests_render(installed_run: Run) -> None:
    """The Kueue, JobSet and LWS the oracle and cluster-up tests run (tests/controllers.py) are
    configured from tests/charts.py's rendering; here is the proof it equals what the provider's
    Helm installed with the program's values."""
    _ok(installed_run, "up")
    for name in program.CHARTS:
        chart = charts.render(name, program_version(name))
        live = installed_run.config_maps[name]
        (rendered,) = [c["data"] for c in chart.of_kind("ConfigMap") if set(c.get("data") or {}) & set(live)]
        assert installed_run.config_maps[name] == rendered


def test_the_running_kueue_has_the_recovery_settings(installed_run: Run) -> None:
    """Issue 45: waitForPodsReady with the startup budget's timeouts, bounded requeuing backoff and the
    TAS failed-node replacement gates, read back from the live manager ConfigMap and from the
    Configuration the running Kueue logs as loaded (after its own defaulting)."""
    _ok(installed_run, "up")
    live = yaml.safe_load(installed_run.config_maps["kueue"]["controller_manager_config.yaml"])
    wanted = rules_recovery.kueue_manager_config(KueueRecoveryConfig.model_validate({}))
    assert live["waitForPodsReady"] == wanted["waitForPodsReady"]
    assert live["featureGates"] == wanted["featureGates"]
    assert installed_run.kueue_loaded, "Kueue logged no loaded Configuration"
    record = json.loads(installed_run.kueue_loaded[installed_run.kueue_loaded.index("{") :])
    loaded = yaml.safe_load(record["config"])
    hours, rest = divmod(rules_recovery.PODS_READY_MIN_SECONDS, 3600)
    budget = f"{hours}h{rest // 60}m{rest % 60}s"  # metav1.Duration as Go prints it: 4h10m0s
    ready = loaded["waitForPodsReady"]
    assert (ready["timeout"], ready["recoveryTimeout"], ready["blockAdmission"]) == (budget, budget, False)
    strategy = {"timestamp": "Eviction", "backoffBaseSeconds": 60, "backoffMaxSeconds": 1800}
    assert ready["requeuingStrategy"].items() >= strategy.items()
    assert ready["requeuingStrategy"].get("backoffLimitCount") is None  # never deactivates serving
    assert all(loaded["featureGates"][gate] for gate in rules_recovery.FEATURE_GATES)


def program_version(name: str) -> str:
    from tests.controllers import pinned_versions

    return pinned_versions()[name]


def test_the_apiserver_reached_the_charts_webhooks_through_the_pod_network(installed_run: Run) -> None:
    _ok(installed_run, "up")
    # Kueue's webhooks see the program's queues, Deployments and pods; LWS's its LeaderWorkerSets;
    # JobSet's are called by nothing in dev (no JobSet without the slicing checks).
    assert {"kueue", "lws"} <= set(installed_run.routed), installed_run.webhook_connections
    assert {started.split()[0] for started in installed_run.started} == set(program.CHARTS)


def test_refresh_after_up_finds_no_drift(installed_run: Run) -> None:
    _ok(installed_run, "refresh")


def test_a_kueue_patch_version_is_an_in_place_helm_upgrade(installed_run: Run) -> None:
    _ok(installed_run, "bump preview")
    changed = {(s["op"], s["urn"].rsplit("::", 1)[1]) for s in installed_run.bump_steps}
    assert changed == {("update", "kueue")}, installed_run.bump_steps


def test_a_kueue_patch_applied_and_rolled_back_restarts_only_kueue(installed_run: Run) -> None:
    """The README's controller recipe in installed mode: each `up` upgrades the one Release in place,
    Kueue's Deployment rolls out the chart's image, its manager restarts on the new ReplicaSet, no
    serving pod restarts, Kueue's admission is as it was, and a second `up` is a no-op."""
    for label, version in (("patch", KUEUE_OTHER_PATCH), ("patch back", program_version("kueue"))):
        _ok(installed_run, f"{label} up")
        _ok(installed_run, f"{label} second up")
        record = installed_run.patches[label]
        assert f"registry.k8s.io/kueue/kueue:v{version}" in record["images"], record["images"]
        assert record["pods before"], "no serving pod ran before the patch"
        assert record["pods after"] == record["pods before"], label
        assert record["admission after"] == record["admission before"], label
    assert [r.split()[0] for r in installed_run.restarted] == ["kueue", "kueue"], installed_run.restarted


def test_destroy_uninstalls_every_release(installed_run: Run) -> None:
    _ok(installed_run, "destroy")
    assert installed_run.left == {name: [] for name in program.CHARTS}
    assert installed_run.labelled_left == []
    assert sorted(installed_run.stopped) == sorted(program.CHARTS)
