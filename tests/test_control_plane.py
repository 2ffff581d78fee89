"""The local control plane (tests/control_plane.py): real etcd, kube-apiserver and kube-scheduler,
with kwok's simulated nodes shaped as the dev stack's GKE cluster would have them.

One plane serves the module; `make controlplane` builds its binaries.
"""

from __future__ import annotations

import contextlib
import re
import socket
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from settings.model import StackConfig
from tests import control_plane as cp
from tests.crd_schema import crd_root
from tests.standins import poller

pytestmark = pytest.mark.xdist_group(cp.XDIST_GROUP)  # one plane at a time (tests/control_plane.py)

ROOT = Path(__file__).resolve().parents[1]
WARM_START_LIMIT = 60.0
NAMESPACE = "tpu-smoke"


def _pinned_kubernetes() -> str:
    text = (ROOT / "tools" / "controlplane" / "kubernetes" / "go.mod").read_text()
    match = re.search(r"^(?:require)?\s+k8s\.io/kubernetes (v\S+)", text, re.MULTILINE)
    assert match, "tools/controlplane/kubernetes/go.mod pins no k8s.io/kubernetes"
    return match.group(1)


@pytest.fixture(scope="module")
def dev() -> StackConfig:
    return cp.load_stack("dev")


@pytest.fixture(scope="module")
def plane(dev: StackConfig) -> Iterator[cp.ControlPlane]:
    with cp.control_plane(cp.stack_nodes(dev), service_cidr=str(dev.network.service_cidr)) as running:
        timings = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in running.timings.items())
        print(f"\ncontrol plane up: {timings}", file=sys.stderr)
        yield running


def _nodes(plane: cp.ControlPlane) -> dict[str, dict[str, Any]]:
    return {node["metadata"]["name"]: node for node in plane.request("GET", "/api/v1/nodes")["items"]}


def test_plane_starts_warm_within_a_minute(plane: cp.ControlPlane) -> None:
    timings = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in plane.timings.items())
    assert plane.startup_seconds < WARM_START_LIMIT, f"start-up took {timings}"
    assert plane.kubeconfig.exists()


def test_apiserver_reports_the_pinned_version(plane: cp.ControlPlane) -> None:
    version = plane.request("GET", "/version")
    pinned = _pinned_kubernetes()
    assert version["gitVersion"] == pinned, version
    assert (version["major"], version["minor"]) == tuple(pinned[1:].split(".")[:2]), version
    assert version["gitVersion"].startswith("v1.36."), "GKE runs 1.36 for the program's cluster versions"


def test_admin_token_is_cluster_admin_and_anonymous_is_not(plane: cp.ControlPlane) -> None:
    review = plane.request(
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"verb": "*", "resource": "*", "group": "*"}},
        },
    )
    assert review["status"]["allowed"], review["status"]
    anonymous = cp.ControlPlane(plane.workdir, plane.server, "not-a-token", plane.ca_file, plane.kubeconfig)
    with pytest.raises(cp.ApiError) as refused:
        anonymous.request("GET", "/api/v1/nodes")
    assert refused.value.status == 401


def test_dev_stack_tpu_nodes_are_ready_with_gke_labels_taint_and_capacity(
    plane: cp.ControlPlane, dev: StackConfig
) -> None:
    nodes = _nodes(plane)
    tpu = {
        name: node
        for name, node in nodes.items()
        if "cloud.google.com/gke-tpu-accelerator" in node["metadata"]["labels"]
    }
    assert len(tpu) == dev.tpu.cubes * 16, sorted(tpu)
    assert len(nodes) - len(tpu) == dev.cluster.system_nodes_per_zone * 3
    assert set(nodes) <= plane.ready_nodes()
    pools = Counter(node["metadata"]["labels"]["cloud.google.com/gke-nodepool"] for node in tpu.values())
    assert pools == dict.fromkeys(dev.pool_names(), 16)
    for name, node in tpu.items():
        labels = node["metadata"]["labels"]
        assert labels["cloud.google.com/gke-tpu-accelerator"] == "tpu7x", name
        assert labels["cloud.google.com/gke-tpu-topology"] == "4x4x4", name
        assert labels["node.kubernetes.io/instance-type"] == "tpu7x-standard-4t", name
        for level in dev.kueue.topology_levels:
            assert labels.get(level), f"{name} lacks Kueue topology level {level}"
        assert node["spec"]["taints"] == [cp.TPU_TAINT], name
        assert node["status"]["capacity"][cp.TPU_RESOURCE] == "4", name
        assert node["status"]["allocatable"][cp.TPU_RESOURCE] == "4", name
        assert node["status"]["nodeInfo"]["kubeletVersion"].startswith("v1.36."), name
    # Each sub-block is one cube, and each partition id names exactly the hosts of its shape.
    sub_blocks = Counter(n["metadata"]["labels"]["cloud.google.com/gce-topology-subblock"] for n in tpu.values())
    assert dev.reservation and dev.reservation.sub_blocks, "the dev stack binds each pool to a sub-block"
    assert sub_blocks == dict.fromkeys(dev.reservation.sub_blocks, 16)
    for shape in dev.tpu.generation.subslice_shapes:
        hosts = dev.tpu.generation.vms(cp.topology.Topology.parse(shape))
        sizes = Counter(n["metadata"]["labels"][f"cloud.google.com/gke-tpu-partition-{shape}-id"] for n in tpu.values())
        assert set(sizes.values()) == {hosts}, (shape, sizes)
        assert len(sizes) == dev.tpu.cubes * 16 // hosts, (shape, sizes)


def _tpu_pod(name: str, *, tolerate: bool = True) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "nodeSelector": {
            "cloud.google.com/gke-tpu-accelerator": "tpu7x",
            "cloud.google.com/gke-tpu-topology": "4x4x4",
        },
        "containers": [
            {
                "name": "tpu",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {cp.TPU_RESOURCE: "4"}, "limits": {cp.TPU_RESOURCE: "4"}},
            }
        ],
        "automountServiceAccountToken": False,
    }
    if tolerate:
        spec["tolerations"] = [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec}


def _pod(plane: cp.ControlPlane, name: str) -> dict[str, Any]:
    pod: dict[str, Any] = plane.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}")
    return pod


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), {})


def test_real_scheduler_binds_a_tpu_pod_and_kwok_runs_it(plane: cp.ControlPlane, dev: StackConfig) -> None:
    plane.ensure_namespace(NAMESPACE)
    started = time.monotonic()
    plane.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", _tpu_pod("tpu-4-chips"))
    running = plane.wait_for(
        "the TPU pod Running", lambda: (p := _pod(plane, "tpu-4-chips"))["status"].get("phase") == "Running" and p
    )
    node = plane.request("GET", f"/api/v1/nodes/{running['spec']['nodeName']}")
    assert node["metadata"]["labels"]["cloud.google.com/gke-tpu-accelerator"] == "tpu7x"
    assert _condition(running, "Ready").get("status") == "True", running["status"]
    print(f"\nTPU pod scheduled and Running in {time.monotonic() - started:.1f} s", file=sys.stderr)

    # Without the toleration GKE's taint keeps it off every TPU node, and no other node has TPUs.
    plane.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", _tpu_pod("untolerated", tolerate=False))
    refused = plane.wait_for(
        "the scheduler to refuse the untolerated pod",
        lambda: (c := _condition(_pod(plane, "untolerated"), "PodScheduled")).get("reason") == "Unschedulable" and c,
    )
    tpu_nodes = dev.tpu.cubes * 16
    assert f"{tpu_nodes} node(s) had untolerated taint" in refused["message"], refused["message"]


def test_a_running_pod_marked_not_ready_by_the_node_controller_is_ready_again(plane: cp.ControlPlane) -> None:
    """After an API server outage longer than the node grace period the node lifecycle controller
    sets Ready=False on every pod of the node (MarkPodsNotReady, a status update); a kubelet puts
    Ready back once it syncs, and so must the simulated one (READY_AGAIN_STAGE), leaving the rest
    of the status as it was."""
    plane.ensure_namespace(NAMESPACE)
    plane.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", _tpu_pod("marked-not-ready"))
    running = plane.wait_for(
        "the pod Running and Ready",
        lambda: (
            (p := _pod(plane, "marked-not-ready"))["status"].get("phase") == "Running"
            and _condition(p, "Ready").get("status") == "True"
            and p
        ),
    )
    status = running["status"]
    marked = dict(running)
    # As MarkPodsNotReady writes it (controller_utils.go:139): the Ready condition False, nothing else.
    marked["status"] = {
        **status,
        "conditions": [
            {**c, "status": "False", "lastTransitionTime": None} if c["type"] == "Ready" else c
            for c in status["conditions"]
        ],
    }
    plane.request("PUT", f"/api/v1/namespaces/{NAMESPACE}/pods/marked-not-ready/status", marked)
    again = plane.wait_for(
        "the pod Ready again",
        lambda: _condition(p := _pod(plane, "marked-not-ready"), "Ready").get("status") == "True" and p,
    )
    assert again["status"]["startTime"] == status["startTime"]
    assert again["status"]["containerStatuses"] == status["containerStatuses"]
    assert again["status"]["podIP"] == status["podIP"]


def _crd_files(dev: StackConfig) -> list[Path]:
    root = crd_root()
    if root is None:
        # As the schema tests do (tests/test_k8s_schemas.py): `make test` runs `make crds` first.
        pytest.skip("upstream CRDs not found: run `make crds` (or set TPU_SLICING_CRDS)")
    versions = {"kueue": dev.versions.kueue, "jobset": dev.versions.jobset, "lws": dev.versions.lws}
    files = []
    for component, version in versions.items():
        folder = root / component / (version if version.startswith("v") else f"v{version}")
        found = sorted(folder.glob("*.yaml"))
        assert found, f"no CRDs in {folder}"
        files += found
    return files


def test_apiserver_accepts_the_upstream_kueue_jobset_and_lws_crds(plane: cp.ControlPlane, dev: StackConfig) -> None:
    import yaml

    names = []
    for path in _crd_files(dev):
        text = path.read_text()
        name = yaml.safe_load(text)["metadata"]["name"]
        applied = plane.apply(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}", text)
        assert applied["metadata"]["name"] == name
        names.append(name)

    def established() -> bool:
        for name in names:
            crd = plane.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            if _condition(crd, "Established").get("status") != "True":
                return False
        return True

    plane.wait_for(f"{len(names)} CRDs Established", established)
    assert {"topologies.kueue.x-k8s.io", "jobsets.jobset.x-k8s.io", "leaderworkersets.leaderworkerset.x-k8s.io"} <= set(
        names
    )
    # The served schema takes the stack's Topology, as the program writes it (k8s/kueue_queues.py).
    topology = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Topology",
        "metadata": {"name": dev.names.kueue_topology},
        "spec": {"levels": [{"nodeLabel": level} for level in dev.kueue.topology_levels]},
    }
    created = plane.wait_for(
        "the Topology kind served",
        lambda: plane.apply(f"/apis/kueue.x-k8s.io/v1beta2/topologies/{dev.names.kueue_topology}", topology),
    )
    assert [level["nodeLabel"] for level in created["spec"]["levels"]] == dev.kueue.topology_levels


def test_controller_manager_rolls_out_a_deployment_on_the_system_pool(plane: cp.ControlPlane, dev: StackConfig) -> None:
    plane.ensure_namespace(NAMESPACE)
    labels = {"app": "web"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": NAMESPACE},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"tpu-slicing/role": "system"},
                    "containers": [{"name": "web", "image": "registry.k8s.io/pause:3.10"}],
                },
            },
        },
    }
    plane.apply(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/web", deployment)
    plane.wait_for(
        "Deployment web available",
        lambda: (
            (plane.request("GET", f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/web").get("status") or {}).get(
                "availableReplicas"
            )
            == 2
        ),
    )
    pods = plane.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods", query={"labelSelector": "app=web"})["items"]
    pools = {
        plane.request("GET", f"/api/v1/nodes/{p['spec']['nodeName']}")["metadata"]["labels"][
            "cloud.google.com/gke-nodepool"
        ]
        for p in pods
    }
    assert pools == {dev.names.system_pool}


@pytest.mark.parametrize("name", ["kueue", "jobset", "lws"])
def test_controller_wrapper_modules_pin_the_versions_the_program_installs(name: str) -> None:
    """tools/controlplane/<name>/go.mod builds the controller at the tag of settings' Versions (build.sh checks too)."""
    from settings.model import Versions

    text = (ROOT / "tools" / "controlplane" / name / "go.mod").read_text()
    match = re.search(rf"^\s+sigs\.k8s\.io/{name} (v\S+)", text, re.MULTILINE)
    assert match, f"tools/controlplane/{name}/go.mod pins no sigs.k8s.io/{name}"
    assert match.group(1) == "v" + getattr(Versions(), name).removeprefix("v")
    assert re.search(rf"^tool sigs\.k8s\.io/{name}\b", text, re.MULTILINE), "the controller's main package is the tool"


def test_ports_named_before_binding_are_outside_the_ephemeral_range_and_per_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The kernel picks outgoing connections' source ports from its ephemeral range, so a port
    chosen there could be taken before the controller binds it (CI10's LWS health port)."""
    low = cp._ephemeral_low()
    monkeypatch.setattr(cp, "_next_port", [])
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    first = [cp.free_port() for _ in range(5)]
    assert all(cp.PORT_BASE <= port < min(low, cp.PORT_BASE + cp.PORT_BLOCK) for port in first), first
    assert len(set(first)) == 5
    monkeypatch.setattr(cp, "_next_port", [])
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    second = cp.free_port()
    assert cp.PORT_BASE + cp.PORT_BLOCK <= second < cp.PORT_BASE + 2 * cp.PORT_BLOCK < low
    with socket.socket() as held:  # a port something holds is skipped
        held.bind(("127.0.0.1", second + 1))
        assert cp.free_port() not in (second, second + 1)


def _local_port(plane: cp.ControlPlane) -> int:
    held = plane._connections.held
    assert held is not None and held.sock is not None, "no connection held after a call"
    return int(held.sock.getsockname()[1])


def test_calls_of_one_thread_share_one_connection_and_a_dropped_one_is_replaced(plane: cp.ControlPlane) -> None:
    """A TLS handshake per call was a fifth of the test process's CPU under the stand-ins' loops."""
    plane.request("GET", "/api/v1/namespaces/default")
    port = _local_port(plane)
    for _ in range(5):
        plane.request("GET", "/api/v1/namespaces/default")
    assert _local_port(plane) == port
    plane._connections.held.sock.shutdown(socket.SHUT_RDWR)  # as a restarted API server leaves it
    assert plane.request("GET", "/api/v1/namespaces/default")["metadata"]["name"] == "default"
    assert _local_port(plane) != port
    with pytest.raises(cp.ApiError) as refused:  # an error answer leaves the connection usable
        plane.request("GET", "/api/v1/namespaces/no-such-namespace")
    assert refused.value.status == 404
    plane.request("GET", "/api/v1/namespaces/default")


def test_a_watched_change_wakes_a_stand_in_long_before_its_idle_pass(plane: cp.ControlPlane) -> None:
    class Seen(poller.Poller):
        name = "watch-probe"
        watched = ("/api/v1/namespaces/default/configmaps",)
        idle = 600.0

        def __init__(self) -> None:
            super().__init__(plane, interval=0.05)
            self.passes: list[set[str]] = []

        def reconcile(self) -> None:
            listed = plane.request("GET", "/api/v1/namespaces/default/configmaps")["items"]
            self.passes.append({c["metadata"]["name"] for c in listed})

    probe = Seen()
    probe.start()
    try:
        plane.wait_for("the probe's first pass", lambda: probe.passes, 30)
        # A quiet collection costs no passes: the first, and one for the watch's opening events.
        # (Slowness can only lower this count; a poll loop of `interval` made some 30.)
        time.sleep(1.5)
        assert len(probe.passes) <= 3, f"{len(probe.passes)} passes while nothing changed"
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "watch-probe"}}
        plane.request("POST", "/api/v1/namespaces/default/configmaps", body)
        # With no watch the next pass comes after `idle` (10 minutes): this wait would time out.
        plane.wait_for("a pass that sees the new ConfigMap", lambda: "watch-probe" in probe.passes[-1], 30)
        probe.check()
    finally:
        probe.stop()
        with contextlib.suppress(cp.ApiError):
            plane.request("DELETE", "/api/v1/namespaces/default/configmaps/watch-probe")
