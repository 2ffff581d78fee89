"""A real local Kubernetes control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, and
kwok's simulated nodes.

`make controlplane` (tools/controlplane/build.sh) builds the pinned binaries into
$TPU_SLICING_CONTROLPLANE (default ~/.cache/tpu-slicing/controlplane). `control_plane()` starts them
on loopback ports in a private temporary folder, creates the nodes a stack's GKE cluster would have
(the system pool and, per TPU pool, one node per VM with the labels, taint and capacity GKE gives
them) and stops every process group and removes the folder on exit:

    with control_plane(nodes=stack_nodes(load_stack("dev"))) as plane:
        plane.request("GET", "/api/v1/nodes")

For a person: `python -m tests.control_plane up --stack dev` prints the kubeconfig and waits for
Ctrl-C. There are no kubelets: kwok (its own "fast" Stages, copied by build.sh from its release)
marks nodes Ready, keeps their leases and runs the pods the real scheduler binds to them; the real
controller-manager does the rest (the node lifecycle controller lifts the `not-ready` taint that
admission puts on every new node, ServiceAccounts and their tokens, Deployments, Jobs, garbage
collection). No cloud controller: LoadBalancer Services get no address (tests/standins/gke_addons.py
plays that part where a test needs it).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import http.client
import json
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

import yaml

from domain import topology
from settings.loader import load
from settings.model import StackConfig
from tests import suite_order

CACHE_ENV = "TPU_SLICING_CONTROLPLANE"
# Every test module that starts a plane carries one of these xdist groups, so one test worker runs
# each group, one plane at a time (`--dist loadgroup` in the Makefile's test command): two planes
# with their controllers beside the rest of the suite on 2 CPUs starve each other, and a
# controller's informers then time out. The tests without a Go build run earlier, beside the Go
# builds (tools/ci/unit.sh); the late group starts once the engine tests without a plane are done,
# beside the first group (tests/suite_order.py).
# The Go programs the tests start (the plane, its controllers, the pulumi CLI and its plugins) collect
# garbage once the heap has grown by 400 % rather than Go's default 100 % (the GOGC variable,
# runtime/mgc.go): on the admission oracle's plane (five minutes of churn, fixed seed) every process
# together used 354 s of CPU against 418 s, wall 323 s against 334 s. GC pacing changes what a
# program uses, not what it does; a GOGC set outside wins.
GO_GC_PERCENT = "400"


def go_environ() -> dict[str, str]:
    """This process's environment with GOGC for a Go program a test starts."""
    return {**os.environ, "GOGC": os.environ.get("GOGC", GO_GC_PERCENT)}


XDIST_GROUP = suite_order.PLANE_GROUP
LATE_XDIST_GROUP = suite_order.LATE_PLANE_GROUP
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
# Only nodes with this label are kwok's (`--manage-nodes-with-label-selector`); the key and value are
# the ones kwok's own docs and kwokctl use. A label, not an annotation: kwok v0.8.0 watches nodes with
# a label selector on the server, so a node that loses the label arrives as Deleted and kwok releases
# its Lease, as a kubelet that stopped (pkg/kwok/controllers/node_controller.go `watchResources`); an
# annotation selector is applied in kwok, which went on renewing the Lease of a node that lost it.
KWOK_LABEL = "kwok.x-k8s.io/node"
KWOK_LABEL_VALUE = "fake"
ADMIN_USER = "tpu-slicing-admin"
# Users the apiserver's bootstrap RBAC binds to their roles (clusterrolebindings of the same names).
SCHEDULER_USER = "system:kube-scheduler"
CONTROLLER_MANAGER_USER = "system:kube-controller-manager"
# The TaintNodesByCondition admission plugin puts this on every new node; the node lifecycle
# controller lifts it once the node is Ready (pkg/controller/nodelifecycle).
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
# The simulated kubelets report this version (nodeInfo.kubeletVersion), as GKE nodes on 1.36 do.
NODE_VERSION = "v1.36.3-gke.0"

# GKE's TPU taint: every TPU node pool gets it (cloud.google.com/kubernetes-engine/docs/concepts/tpus,
# "GKE adds the TPU taint google.com/tpu"; ../shared/reference/dynamic-slicing.md §6).
TPU_TAINT = {"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"}
TPU_RESOURCE = "google.com/tpu"  # the device plugin's resource (k8s/kueue_queues.py TPU_RESOURCE)

# kwok's fast stage that completes the running pods of Jobs (share/kwok-stages, from build.sh).
COMPLETE_STAGE = "pod-complete.yaml"
READY_STAGE = "pod-ready.yaml"
# A gated pod (Network.gated) is made Ready only once the test has annotated it as served.
SERVED_ANNOTATION = "tpu-slicing.test/served"
# Ours, not kwok's: a Running pod whose Ready condition someone else set to False is made Ready
# again. When a node's lease is older than the node lifecycle controller's grace period (50 s,
# pkg/controller/nodelifecycle/config/v1alpha1/defaults.go:46 at k8s v1.36.3), the controller sets
# Ready=False on the node's pods (pkg/controller/util/node/controller_utils.go:121 MarkPodsNotReady).
# A real kubelet puts its own view back within a sync period (10 s,
# pkg/kubelet/status/status_manager.go:209; needsReconcile, :1269); kwok's fast Stages only make
# Pending pods Ready, so without this a simulated pod stayed unready for good after an API server
# outage of that length.
READY_AGAIN_STAGE = "pod-ready-again.yaml"


@dataclass(frozen=True)
class Network:
    """What a plane's pods may reach and when they are Ready, for planes whose pods a test plays.

    `egress`: kube-apiserver's EgressSelectorConfiguration (tests/standins/pod_network.py), so
    Service-referenced webhooks reach a test process through a proxy. `pod_cidr`: kwok's pod
    addresses, which must not be loopback ones when Services resolve to them (EndpointSlice
    validation refuses 127.0.0.0/8). `gated`: a pod label and values whose pods kwok leaves
    unready until they carry SERVED_ANNOTATION, as a readiness probe holds a pod back until its
    process answers."""

    egress: Mapping[str, Any]
    pod_cidr: str
    gated: tuple[str, tuple[str, ...]]


@dataclass(frozen=True)
class NodeLifecycle:
    """When a node that stops reporting is failed, and its pods evicted, by the real controllers.

    Kubernetes' own path, on the plane as on GKE: the kubelet (here kwok) renews its node's Lease
    every quarter of the lease duration (kwok v0.8.0 pkg/kwok/controllers/controller.go, as the
    kubelet does); the node lifecycle controller, checking every `monitor_period_seconds`, marks a
    node whose Lease is older than `grace_seconds` Ready=Unknown and taints it
    `node.kubernetes.io/unreachable:NoExecute`, `eviction_rate` nodes a second
    (pkg/controller/nodelifecycle/node_lifecycle_controller.go, at k8s v1.36.3); the taint-eviction
    controller deletes each pod once its toleration of that taint runs out, `unreachable_toleration_seconds`
    as the DefaultTolerationSeconds admission plugin gives every pod
    (plugin/pkg/admission/defaulttolerationseconds/admission.go). With no kubelet to confirm, the
    pods stay Terminating. The defaults are Kubernetes' (lease 40 s, grace 50 s, 300 s, 0.1 nodes/s);
    FAILURES keeps their ratio (five renewals missed before a node is failed) at a few seconds."""

    lease_seconds: int = 40
    monitor_period_seconds: int = 5
    grace_seconds: int = 50
    unreachable_toleration_seconds: int = 300
    eviction_rate: float = 0.1

    def apiserver_flags(self) -> list[str]:
        return [f"--default-unreachable-toleration-seconds={self.unreachable_toleration_seconds}"]

    def controller_manager_flags(self) -> list[str]:
        return [
            f"--node-monitor-period={self.monitor_period_seconds}s",
            f"--node-monitor-grace-period={self.grace_seconds}s",
            f"--node-eviction-rate={self.eviction_rate}",
        ]


DEFAULT_LIFECYCLE = NodeLifecycle()
# For the stories that fail hosts: a node is failed some 20-25 s after its kubelet stops and its pods
# evicted 2 s later; a cube's sixteen nodes are tainted within 2 s (at Kubernetes' 0.1 nodes a second,
# the last of them 150 s after the first).
FAILURES = NodeLifecycle(
    lease_seconds=16, monitor_period_seconds=1, grace_seconds=20, unreachable_toleration_seconds=2, eviction_rate=10.0
)


T = TypeVar("T")


def cache_dir() -> Path:
    configured = os.environ.get(CACHE_ENV, "").strip()
    return Path(configured) if configured else Path.home() / ".cache" / "tpu-slicing" / "controlplane"


def missing_binaries() -> list[str]:
    bin_dir = cache_dir() / "bin"
    missing = [name for name in BINARIES if not os.access(bin_dir / name, os.X_OK)]
    if not any((cache_dir() / "share" / "kwok-stages").glob("*.yaml")):
        missing.append("share/kwok-stages")
    return missing


class ControlPlaneError(RuntimeError):
    pass


class ApiError(ControlPlaneError):
    def __init__(self, method: str, path: str, status: int, body: str):
        super().__init__(f"{method} {path}: HTTP {status}: {body[:2000]}")
        self.status = status
        self.body = body


# Ports for the plane's processes and servers that must be named before they bind (etcd, the API
# server, the controllers' health and webhook ports). A port the kernel chose (bind to port 0) lies
# in its ephemeral range, where it also chooses the source port of every outgoing connection of
# every process: between choosing and binding, another test's client took one (CI10: LWS's
# "bind: address already in use"). So these come from below that range, where the kernel never
# chooses, each pytest-xdist worker from its own block, in turn within the block.
PORT_BASE, PORT_BLOCK = 15_000, 1_000
_next_port: list[int] = []


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default range starts here (Documentation/networking/ip-sysctl.rst)


def free_port() -> int:
    """A loopback port no other process holds, outside the kernel's ephemeral range, that no other
    xdist worker of this run hands out."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    blocks = max(1, (_ephemeral_low() - PORT_BASE) // PORT_BLOCK)
    start = PORT_BASE + (int(worker) if worker.isdigit() else 0) % blocks * PORT_BLOCK
    if not _next_port:
        _next_port.append(0)
    for _ in range(PORT_BLOCK):
        port = start + _next_port[0] % PORT_BLOCK
        _next_port[0] += 1
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue  # held by a process of ours still running, or by another program
            return port
    raise ControlPlaneError(f"no free port in {start}-{start + PORT_BLOCK - 1}")


@dataclass
class _Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    log_file: IO[bytes]
    args: tuple[str, ...] = ()

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace: float = 10.0) -> None:
        if self.popen.poll() is None:
            # Each process leads its own session (start_new_session), so its pid is its group id.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(grace)
        else:
            # Reap any child the leader left behind in its group.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.popen.pid, signal.SIGKILL)
        self.log_file.close()


def _send(
    connection: http.client.HTTPSConnection,
    *,
    method: str,
    target: str,
    data: bytes | None,
    headers: dict[str, str],
    timeout: float,
) -> tuple[int, bytes]:
    connection.timeout = timeout
    if connection.sock is not None:
        connection.sock.settimeout(timeout)
    connection.request(method, target, body=data, headers=headers)
    response = connection.getresponse()
    raw = response.read()  # read whole, so the connection is free for the next call
    if response.will_close:
        connection.close()
    return response.status, raw


@dataclass
class ControlPlane:
    """A running plane: its API endpoint, the admin token and where its files are."""

    workdir: Path
    server: str
    token: str
    ca_file: Path
    kubeconfig: Path
    timings: dict[str, float] = field(default_factory=dict)
    _processes: list[_Process] = field(default_factory=list, repr=False)
    _ssl: ssl.SSLContext | None = field(default=None, repr=False)
    _connections: threading.local = field(default_factory=threading.local, repr=False)

    @property
    def startup_seconds(self) -> float:
        return self.timings.get("total", 0.0)

    def _context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context(cafile=str(self.ca_file))
        return self._ssl

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        query: Mapping[str, str] | None = None,
        timeout: float = 30.0,
    ) -> Any:
        """One API call with the admin token; the decoded JSON answer (ApiError on 4xx/5xx).

        Each thread keeps one connection open (HTTP/1.1 keep-alive), as a client-go client does:
        a new TLS handshake per call cost the stand-ins' poll loops a fifth of the test process's
        CPU and the API server as much again."""
        target = path + ("?" + urllib.parse.urlencode(query) if query else "")
        data: bytes | None = None
        if body is not None:
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        try:
            status, raw = self._exchange(method, target, data, headers, timeout)
        except http.client.HTTPException as err:  # a cut answer: to callers, a connection error
            raise ConnectionError(f"{method} {path}: {err!r}") from err
        if status >= 400:
            raise ApiError(method, path, status, raw.decode(errors="replace"))
        return json.loads(raw) if raw else None

    def _connect(self, timeout: float) -> http.client.HTTPSConnection:
        url = urllib.parse.urlsplit(self.server)
        return http.client.HTTPSConnection(url.hostname or "", url.port, timeout=timeout, context=self._context())

    def watch(self, path: str, seconds: int, stop: threading.Event) -> Iterator[bytes]:
        """The events of one watch on the collection `path` (a JSON line each), until the server ends
        it after `seconds` or `stop` is set (checked at each event); ApiError if refused."""
        connection = self._connect(seconds + 10)
        try:
            query = urllib.parse.urlencode({"watch": "true", "timeoutSeconds": str(seconds)})
            headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
            connection.request("GET", f"{path}?{query}", headers=headers)
            response = connection.getresponse()
            if response.status >= 400:
                raise ApiError("GET", path, response.status, response.read().decode(errors="replace"))
            while not stop.is_set() and (line := response.readline()):
                yield line
        except http.client.HTTPException as err:
            raise ConnectionError(f"watch {path}: {err!r}") from err
        finally:
            connection.close()

    def _exchange(
        self, method: str, target: str, data: bytes | None, headers: dict[str, str], timeout: float
    ) -> tuple[int, bytes]:
        held: http.client.HTTPSConnection | None = getattr(self._connections, "held", None)
        if held is not None:
            try:
                return _send(held, method=method, target=target, data=data, headers=headers, timeout=timeout)
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                # The server closed the idle connection (a restart, its idle timeout) before this
                # request reached it; it is sent again once, on a new connection.
                held.close()
            except BaseException:
                held.close()
                self._connections.held = None
                raise
        fresh = self._connect(timeout)
        self._connections.held = None
        try:
            answer = _send(fresh, method=method, target=target, data=data, headers=headers, timeout=timeout)
        except BaseException:
            fresh.close()
            raise
        self._connections.held = fresh
        return answer

    def apply(self, path: str, manifest: str | Mapping[str, Any], *, manager: str = "tpu-slicing-tests") -> Any:
        """Server-side apply (PATCH application/apply-patch+yaml) of one object at its own URL."""
        body = manifest if isinstance(manifest, str) else json.dumps(manifest)
        return self.request(
            "PATCH",
            path,
            body,
            content_type="application/apply-patch+yaml",
            query={"fieldManager": manager, "force": "true"},
        )

    def ensure_namespace(self, name: str) -> None:
        """A namespace, once the controller-manager has given it the `default` ServiceAccount pods need."""
        self.apply(f"/api/v1/namespaces/{name}", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        self.wait_for(
            f"ServiceAccount {name}/default",
            lambda: self.request("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default"),
        )

    def create_nodes(self, nodes: Sequence[Mapping[str, Any]]) -> None:
        for node in nodes:
            self.request("POST", "/api/v1/nodes", node)

    def ready_nodes(self) -> set[str]:
        """Nodes whose Ready condition is True and that no longer carry the not-ready taint."""
        ready = set()
        for node in self.request("GET", "/api/v1/nodes")["items"]:
            conditions = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions") or []}
            taints = {t["key"] for t in node.get("spec", {}).get("taints") or []}
            if conditions.get("Ready") == "True" and NOT_READY_TAINT not in taints:
                ready.add(node["metadata"]["name"])
        return ready

    def wait_for(self, what: str, check: Callable[[], T | None], timeout: float = 180.0, interval: float = 0.2) -> T:
        """Poll `check` until it returns something truthy; fail naming `what` and the processes' logs."""
        deadline = time.monotonic() + timeout
        last: BaseException | None = None
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                value = check()
            except ApiError as err:
                last, value = err, None
            if value:
                return value
            time.sleep(interval)
        raise ControlPlaneError(f"timed out after {timeout:.0f} s waiting for {what} (last error: {last})")

    def check_alive(self) -> None:
        for process in self._processes:
            code = process.popen.poll()
            if code is not None:
                raise ControlPlaneError(f"{process.name} exited with {code}:\n{process.tail()}")

    def log_tail(self, name: str, lines: int = 40) -> str:
        return next((p.tail(lines) for p in self._processes if p.name == name), "")

    def stop(self) -> None:
        # Reverse start order: kwok and the scheduler before the apiserver, etcd last.
        while self._processes:
            self._processes.pop().stop()

    def restart_control_plane(self, down_seconds: float, timeout: float = 120.0) -> float:
        """A control-plane upgrade as GKE does one on a zonal cluster: the control plane's VM is
        replaced, so kube-apiserver, kube-controller-manager and kube-scheduler stop together
        (SIGTERM, in reverse start order) and start again `down_seconds` later with the same flags,
        on the same port and etcd; kwok, the nodes' kubelets, keeps running. Returns the monotonic
        time at which /readyz answered again.

        The controller manager restarts too because one that outlives the outage is not what GKE
        runs: its informers come back on client-go's reflector backoff (0.8 s doubling, jitter 1.0,
        cap 30 s: client-go v0.36.3 tools/cache/reflector.go), so its node lifecycle controller can
        judge Leases it has not re-read for up to a minute after the API server answers and mark
        every node Unknown and its pods unready while the kubelets renew on time. A fresh one
        takes its first look at a node as the probe time (pkg/controller/nodelifecycle/
        node_lifecycle_controller.go tryUpdateNodeHealth, "Assuming now as a timestamp")."""
        names = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
        indexes = [i for i, p in enumerate(self._processes) if p.name in names]
        if [self._processes[i].name for i in indexes] != list(names):
            raise ControlPlaneError(f"no control plane to restart: {[p.name for p in self._processes]}")
        for index in reversed(indexes):
            self._processes[index].stop()
        time.sleep(down_seconds)  # the outage is the fault being injected, not a wait for a condition
        apiserver, *controllers = indexes
        self._processes[apiserver] = self._again(self._processes[apiserver])
        # Out of the list while the API server comes up (wait_for checks every process in it): the
        # controller manager gives up after 10 s without a healthy API server (k8s.io/controller-manager
        # v0.36.3 app/helper.go WaitForAPIServer), so the two start once it answers.
        stopped = [(index, self._processes[index]) for index in controllers]
        for index in reversed(controllers):
            del self._processes[index]
        self.wait_for(
            "kube-apiserver /readyz after its restart",
            lambda: _http_ok(f"{self.server}/readyz", self._context(), self.token),
            timeout,
        )
        back = time.monotonic()
        for index, old in stopped:
            self._processes.insert(index, self._again(old))
        return back

    def _again(self, old: _Process) -> _Process:
        """`old`'s program started again with its flags, its log appended to."""
        log_file = old.log.open("ab")
        popen = subprocess.Popen(
            [str(cache_dir() / "bin" / old.name), *old.args],
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
            start_new_session=True,
            env=go_environ(),
        )
        return _Process(old.name, popen, old.log, log_file, old.args)


# --- simulated nodes -------------------------------------------------------------------------

_MACHINE = re.compile(r"^(?P<family>[a-z0-9]+)-(?P<kind>standard|highmem|highcpu)-(?P<vcpus>[0-9]+)$")
_GIB_PER_VCPU = {"standard": 4, "highmem": 8, "highcpu": 1}


def general_purpose_capacity(machine_type: str) -> dict[str, str]:
    """vCPU and memory of an N2/E2/N2D-style machine type (4, 8 or 1 GiB per vCPU by its kind)."""
    match = _MACHINE.match(machine_type)
    if not match:
        raise ValueError(f"cannot size machine type {machine_type!r}: expected <family>-standard|highmem|highcpu-<n>")
    vcpus = int(match["vcpus"])
    return {"cpu": str(vcpus), "memory": f"{vcpus * _GIB_PER_VCPU[match['kind']]}Gi"}


def _node(
    name: str,
    labels: Mapping[str, str],
    capacity: Mapping[str, str],
    taints: Sequence[Mapping[str, str]],
    provider_id: str,
) -> dict[str, Any]:
    resources = {**capacity, "pods": "110", "ephemeral-storage": "100Gi"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            # kubernetes.io/hostname, os and arch: set by every kubelet
            # (kubernetes.io/docs/reference/node/node-labels).
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
            | dict(labels)
            | {KWOK_LABEL: KWOK_LABEL_VALUE},
        },
        "spec": {"providerID": provider_id, "taints": [dict(t) for t in taints]},
        # Allocatable is the whole machine: GKE's system reservation is not modelled.
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "nodeInfo": {"kubeletVersion": NODE_VERSION, "operatingSystem": "linux", "architecture": "amd64"},
        },
    }


def _location_labels(config: StackConfig, zone: str, machine_type: str, pool: str) -> dict[str, str]:
    return {
        # Well-known labels the cloud provider sets (kubernetes.io/docs/reference/labels-annotations-taints).
        "node.kubernetes.io/instance-type": machine_type,
        "topology.kubernetes.io/region": config.location,
        "topology.kubernetes.io/zone": zone,
        # The node pool's name: observability/dashboard.py groups by it; workloads/jetstream.py and saxml.py
        # use it as the exclusive topology (GKE docs "node pools": cloud.google.com/gke-nodepool).
        "cloud.google.com/gke-nodepool": pool,
    }


def system_nodes(config: StackConfig) -> list[dict[str, Any]]:
    """The system pool: `cluster.systemNodesPerZone` nodes in each of the region's three zones."""
    names = config.names
    machine = config.cluster.system_machine_type
    capacity = general_purpose_capacity(machine)
    nodes = []
    for zone_letter in "abc":  # a regional cluster spreads its pools over three zones (settings REGION_ZONES)
        zone = f"{config.location}-{zone_letter}"
        for index in range(config.cluster.system_nodes_per_zone):
            name = f"gke-{names.cluster}-{names.system_pool}-{zone_letter}{index}"
            labels = _location_labels(config, zone, machine, names.system_pool)
            labels["tpu-slicing/role"] = "system"  # infra/cluster.py: the system pool's own label
            nodes.append(_node(name, labels, capacity, [], f"gce://{config.project}/{zone}/{name}"))
    return nodes


def _partition_ids(generation: topology.Generation, cube: topology.Topology, host: int, prefix: str) -> dict[str, str]:
    """The `cloud.google.com/gke-tpu-partition-<shape>-id` labels of one host of a cube.

    GKE labels each TPU7x node with the id of the sub-slice partition of every shape it belongs to
    (the Kueue Topology levels of ../shared/reference/dynamic-slicing.md §8; domain/topology.py
    partition_label). Hosts hold 2x2x1 chips; they are numbered x fastest, then y, then z, so a
    partition of shape AxBxC is the hosts whose chips share (x // A, y // B, z // C).
    """
    host_x, host_y = cube.dims[0] // 2, cube.dims[1] // 2
    x, y, z = (host % host_x) * 2, (host // host_x % host_y) * 2, host // (host_x * host_y)
    labels = {}
    for shape_text in generation.subslice_shapes:
        a, b, c = topology.Topology.parse(shape_text).dims
        index = (x // a) + (y // b) * (cube.dims[0] // a) + (z // c) * (cube.dims[0] // a) * (cube.dims[1] // b)
        labels[f"cloud.google.com/gke-tpu-partition-{shape_text}-id"] = f"{prefix}-{shape_text}-{index}"
        # Partition health, which llm-d's recipes select on (../shared/reference/prior-art.md §1, the
        # dynamic-slicing row: `cloud.google.com/gke-tpu-partition-<shape>-state: "HEALTHY"`).
        labels[f"cloud.google.com/gke-tpu-partition-{shape_text}-state"] = "HEALTHY"
    return labels


def tpu_nodes(config: StackConfig) -> list[dict[str, Any]]:
    """One node per TPU VM of every TPU pool the stack creates, labelled as GKE labels them."""
    names = config.names
    if config.serving.dynamic_slicing:
        generation, machine = config.tpu.generation, config.tpu.machine_type
        shape = topology.Topology.parse(config.tpu.cube_topology)
    else:
        generation, shape = config.serving.slice.generation, config.serving.slice.shape
        machine = config.serving.slice.machine_type
    vm = generation.host_machine(shape, machine)
    capacity = {"cpu": str(vm.vcpus), "memory": f"{vm.memory_gib}Gi", TPU_RESOURCE: str(vm.chips_per_vm)}
    reservation = config.reservation
    nodes = []
    for pool, path in zip(config.pool_names(), config.pool_paths(), strict=True):
        block = (reservation.block if reservation else None) or "block-0"
        sub_block = path.rsplit("/", 1)[-1] if path and "reservationSubBlocks/" in path else f"{pool}-sub-block"
        for host in range(generation.vms(shape, machine)):
            name = f"gke-{names.cluster}-{pool}-{host:02d}"
            labels = _location_labels(config, config.zone, machine, pool)
            labels |= {
                # The TPU labels GKE puts on every TPU node (GKE docs "Plan TPUs in GKE"; the
                # ResourceFlavor of k8s/kueue_queues.py selects on the accelerator).
                "cloud.google.com/gke-tpu-accelerator": generation.accelerator_label,
                "cloud.google.com/gke-tpu-topology": str(shape),
                # Reservation topology of the VM (the first Kueue level, dynamic-slicing.md §8; the
                # sub-block and host levels: cloud.google.com/ai-hypercomputer/docs/workloads/
                # schedule-gke-workloads-tas). Real values are opaque ids; these name the block.
                "cloud.google.com/gce-topology-block": block,
                "cloud.google.com/gce-topology-subblock": sub_block,
                "cloud.google.com/gce-topology-host": f"{sub_block}-host-{host:02d}",
            }
            if generation.cube is not None:
                labels |= _partition_ids(generation, shape, host, f"{block}-{sub_block}")
            nodes.append(_node(name, labels, capacity, [TPU_TAINT], f"gce://{config.project}/{config.zone}/{name}"))
    if config.serving.dynamic_slicing:  # fixed-slice stacks queue nothing through Kueue
        _check_topology_levels(config, nodes)
    return nodes


def _check_topology_levels(config: StackConfig, nodes: Sequence[Mapping[str, Any]]) -> None:
    """Every level of the stack's Kueue Topology must be a label of every TPU node."""
    for node in nodes:
        labels = node["metadata"]["labels"]
        missing = [level for level in config.kueue.topology_levels if level not in labels]
        if missing:
            raise ControlPlaneError(f"kueue.topologyLevels {missing} are not labels the simulated TPU nodes carry")


def stack_nodes(config: StackConfig) -> list[dict[str, Any]]:
    return system_nodes(config) + tpu_nodes(config)


def load_stack(stack: str) -> StackConfig:
    """A stack file's settings, read as the program and tests/conftest.py read them."""
    from plan import engine

    raw, secret_keys = engine.read_stack_config(engine.stack_file(stack))
    return load(raw, stack=stack, project=raw.get("gcp:project"), secret_keys=secret_keys)


# --- starting and stopping -------------------------------------------------------------------


def _egress_flags(workdir: Path, network: Network | None) -> list[str]:
    if network is None:
        return []
    path = workdir / "egress-selector.yaml"
    path.write_text(yaml.safe_dump(dict(network.egress), sort_keys=False))
    return [f"--egress-selector-config-file={path}"]


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _write_kubeconfig(path: Path, server: str, ca_file: Path, user: str, token: str) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
        "current-context": "local",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)


class _AddressInUseError(ControlPlaneError):
    pass


def _start(plane: ControlPlane, name: str, args: Sequence[str]) -> _Process:
    log = plane.workdir / "logs" / f"{name}.log"
    log_file = log.open("wb")
    popen = subprocess.Popen(
        [str(cache_dir() / "bin" / name), *args],
        stdin=subprocess.DEVNULL,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        cwd=plane.workdir,
        start_new_session=True,
        env=go_environ(),
    )
    process = _Process(name, popen, log, log_file, tuple(args))
    plane._processes.append(process)
    return process


def _wait_started(plane: ControlPlane, process: _Process, what: str, check: Callable[[], bool], timeout: float) -> None:
    try:
        plane.wait_for(what, check, timeout)
    except ControlPlaneError as err:
        if "address already in use" in process.tail(200):
            raise _AddressInUseError(str(err)) from None
        raise ControlPlaneError(f"{err}\n--- {process.name} log ---\n{process.tail()}") from None


def _http_ok(url: str, context: ssl.SSLContext | None = None, token: str | None = None) -> bool:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=2, context=context) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return False


def _ready_again_stage() -> dict[str, Any]:
    """READY_AGAIN_STAGE: a Running, undeleted pod whose Ready condition is not True gets Ready and
    ContainersReady back, by strategic merge on the status (conditions merge by type, so nothing
    else the pod's status holds changes, startTime and container states included)."""
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": "pod-ready-again"},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {
                "matchExpressions": [
                    {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                    {"key": ".status.phase", "operator": "In", "values": ["Running"]},
                    {
                        "key": '.status.conditions.[] | select( .type == "Ready" ) | .status',
                        "operator": "NotIn",
                        "values": ["True"],
                    },
                ]
            },
            "next": {
                "patches": [
                    {
                        "subresource": "status",
                        "root": "status",
                        "type": "strategic",
                        "template": "{{ $now := Now }}\n"
                        "conditions:\n"
                        '- type: Ready\n  status: "True"\n  lastTransitionTime: {{ $now | Quote }}\n'
                        '- type: ContainersReady\n  status: "True"\n  lastTransitionTime: {{ $now | Quote }}\n',
                    }
                ]
            },
        },
    }


def _stages(workdir: Path, complete_jobs: bool, network: Network | None) -> list[Path]:
    """kwok's fast Stages (without pod-complete unless `complete_jobs`), READY_AGAIN_STAGE, and, on a
    plane with gated pods, each pod-ready Stage split in two: as it is for every pod but the gated
    ones, and for those only once they carry SERVED_ANNOTATION (one selector added to each)."""
    folder = workdir / "kwok-stages"
    folder.mkdir(exist_ok=True)
    documents: list[tuple[str, dict[str, Any]]] = []
    for stage in sorted((cache_dir() / "share" / "kwok-stages").glob("*.yaml")):
        if stage.name == COMPLETE_STAGE and not complete_jobs:
            continue
        documents.append((stage.name, yaml.safe_load(stage.read_text())))
    documents.append((READY_AGAIN_STAGE, _ready_again_stage()))
    out = []
    for name, document in documents:
        if network is not None and name in (READY_STAGE, READY_AGAIN_STAGE):
            label, values = network.gated
            key = f'.metadata.labels["{label}"]'
            served = copy.deepcopy(document)
            document["spec"]["selector"]["matchExpressions"].append(
                {"key": key, "operator": "NotIn", "values": list(values)}
            )
            served["metadata"]["name"] += "-when-served"
            served["spec"]["selector"]["matchExpressions"] += [
                {"key": key, "operator": "In", "values": list(values)},
                {"key": f'.metadata.annotations["{SERVED_ANNOTATION}"]', "operator": "Exists"},
            ]
            served_name = name.removesuffix(".yaml") + "-when-served.yaml"
            (folder / served_name).write_text(yaml.safe_dump(served, sort_keys=False))
            out.append(folder / served_name)
        (folder / name).write_text(yaml.safe_dump(document, sort_keys=False))
        out.append(folder / name)
    return out


def _start_once(
    workdir: Path,
    service_cidr: str,
    timeout: float,
    complete_jobs: bool = True,
    *,
    network: Network | None = None,
    lifecycle: NodeLifecycle = DEFAULT_LIFECYCLE,
) -> ControlPlane:
    started = time.monotonic()
    for sub in ("logs", "certs", "etcd"):
        (workdir / sub).mkdir(exist_ok=True)
    admin_token, scheduler_token, controller_manager_token = (secrets.token_hex(24) for _ in range(3))
    api_port, etcd_client, etcd_peer = free_port(), free_port(), free_port()
    server = f"https://127.0.0.1:{api_port}"
    # The serving certificate the apiserver writes into --cert-dir when given none: a self-signed
    # CA and a certificate for the advertise address, both in apiserver.crt
    # (k8s.io/apiserver/pkg/server/options/serving.go MaybeDefaultWithSelfSignedCerts).
    ca_file = workdir / "certs" / "apiserver.crt"
    plane = ControlPlane(workdir, server, admin_token, ca_file, workdir / "kubeconfig")
    try:
        # etcd on loopback only (etcd's --listen-*-urls default to localhost too; set explicitly).
        etcd_url, peer_url = f"http://127.0.0.1:{etcd_client}", f"http://127.0.0.1:{etcd_peer}"
        etcd = _start(
            plane,
            "etcd",
            [
                "--name=local",
                f"--data-dir={workdir / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=local={peer_url}",
                # Test data only: skip fsync (server/embed/config.go UnsafeNoFsync), keep logs short.
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        _wait_started(plane, etcd, "etcd /health", lambda: _http_ok(f"{etcd_url}/health"), timeout)
        plane.timings["etcd"] = time.monotonic() - started

        # Static tokens: token,user,uid,"groups" (k8s.io/apiserver/pkg/authentication/token/tokenfile).
        tokens = workdir / "tokens.csv"
        tokens.write_text(
            f'{admin_token},{ADMIN_USER},{ADMIN_USER},"system:masters"\n'
            f"{scheduler_token},{SCHEDULER_USER},{SCHEDULER_USER}\n"
            f"{controller_manager_token},{CONTROLLER_MANAGER_USER},{CONTROLLER_MANAGER_USER}\n"
        )
        tokens.chmod(0o600)
        sa_key, sa_pub = workdir / "certs" / "sa.key", workdir / "certs" / "sa.pub"
        _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(sa_key))
        _openssl("pkey", "-in", str(sa_key), "-pubout", "-out", str(sa_pub))
        apiserver = _start(
            plane,
            "kube-apiserver",
            [
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={api_port}",
                f"--cert-dir={workdir / 'certs'}",
                f"--token-auth-file={tokens}",
                "--authorization-mode=Node,RBAC",
                f"--service-cluster-ip-range={service_cidr}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={sa_pub}",
                f"--service-account-signing-key-file={sa_key}",
                "--allow-privileged=true",
                # Webhook Services are called at an endpoint's address, not the ClusterIP: there is
                # no kube-proxy (cmd/kube-apiserver/app/server.go buildServiceResolver).
                "--enable-aggregator-routing=true",
                *_egress_flags(workdir, network),
                *lifecycle.apiserver_flags(),
                "--profiling=false",
                "--v=1",
            ],
        )
        _wait_started(
            plane,
            apiserver,
            "kube-apiserver /readyz",
            lambda: ca_file.exists() and _http_ok(f"{server}/readyz", plane._context(), admin_token),
            timeout,
        )
        plane.timings["kube-apiserver"] = time.monotonic() - started

        _write_kubeconfig(plane.kubeconfig, server, ca_file, ADMIN_USER, admin_token)
        scheduler_config = workdir / "scheduler.kubeconfig"
        _write_kubeconfig(scheduler_config, server, ca_file, SCHEDULER_USER, scheduler_token)
        controller_manager_config = workdir / "controller-manager.kubeconfig"
        _write_kubeconfig(controller_manager_config, server, ca_file, CONTROLLER_MANAGER_USER, controller_manager_token)
        # --secure-port=0 (here and for the scheduler): no healthz server, so nothing to collide with
        # another plane's port and no --authentication/--authorization-kubeconfig. Each controller
        # runs as its own ServiceAccount (tokens from the TokenRequest API), as kubeadm sets it up.
        _start(
            plane,
            "kube-controller-manager",
            [
                f"--kubeconfig={controller_manager_config}",
                "--leader-elect=false",
                "--secure-port=0",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={sa_key}",
                f"--root-ca-file={ca_file}",
                *lifecycle.controller_manager_flags(),
                "--v=1",
            ],
        )
        _start(
            plane,
            "kube-scheduler",
            [f"--kubeconfig={scheduler_config}", "--leader-elect=false", "--secure-port=0", "--v=1"],
        )
        stages = _stages(workdir, complete_jobs, network)
        _start(
            plane,
            "kwok",
            [
                f"--kubeconfig={plane.kubeconfig}",
                *(f"--config={stage}" for stage in stages),
                "--manage-all-nodes=false",
                f"--manage-nodes-with-label-selector={KWOK_LABEL}={KWOK_LABEL_VALUE}",
                # Loopback addresses for the simulated nodes and pods: nothing ever sends to them.
                "--node-ip=127.0.0.1",
                f"--cidr={network.pod_cidr if network else '127.128.0.0/16'}",
                f"--node-lease-duration-seconds={lifecycle.lease_seconds}",
                # No --node-port/--server-address: kwok then serves no kubelet API (startServer).
                # Its INFO log has a line per lease renewal (pkg/log/flags.go takes DEBUG..ERROR).
                "--v=WARN",
            ],
        )
        return plane
    except BaseException:
        plane.stop()
        raise


@contextlib.contextmanager
def control_plane(
    nodes: Sequence[Mapping[str, Any]] = (),
    *,
    service_cidr: str = "10.20.0.0/20",
    timeout: float = 180.0,
    keep: bool = False,
    complete_jobs: bool = True,
    network: Network | None = None,
    lifecycle: NodeLifecycle = DEFAULT_LIFECYCLE,
) -> Iterator[ControlPlane]:
    """Start etcd, kube-apiserver, kube-scheduler and kwok; create `nodes` and wait until kwok has
    made them Ready. Everything is stopped and the temporary folder removed on exit (unless `keep`).

    kwok's fast stages complete every running pod a Job owns at once; `complete_jobs=False` leaves
    that stage out, so Job pods run until deleted (as the slicing checks, which sleep forever).
    `lifecycle`: when the node lifecycle and taint-eviction controllers fail a node that stops
    reporting, and evict its pods (NodeLifecycle).
    """
    missing = missing_binaries()
    if missing:
        raise ControlPlaneError(f"{', '.join(missing)} missing in {cache_dir()}: run `make controlplane`")
    workdir = Path(tempfile.mkdtemp(prefix="tpu-slicing-controlplane-"))
    workdir.chmod(0o700)
    plane: ControlPlane | None = None
    try:
        started = time.monotonic()
        for attempt in range(3):
            try:
                plane = _start_once(workdir, service_cidr, timeout, complete_jobs, network=network, lifecycle=lifecycle)
                break
            except _AddressInUseError:
                # A free port was taken between choosing and binding it: choose again.
                if attempt == 2:
                    raise
                shutil.rmtree(workdir, ignore_errors=True)
                workdir.mkdir(mode=0o700)
        assert plane is not None
        if nodes:
            plane.create_nodes(nodes)
            wanted = {node["metadata"]["name"] for node in nodes}
            plane.wait_for(f"{len(wanted)} nodes Ready", lambda: wanted <= plane.ready_nodes(), timeout)
        plane.timings["total"] = time.monotonic() - started
        yield plane
    finally:
        if plane is not None:
            plane.stop()
        if keep:
            print(f"control plane files kept in {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.control_plane", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="start a plane with a stack's simulated nodes; Ctrl-C stops it")
    up.add_argument("--stack", default="dev")
    up.add_argument("--keep", action="store_true", help="keep the temporary folder (logs, etcd data)")
    args = parser.parse_args(argv)
    config = load_stack(args.stack)
    nodes = stack_nodes(config)
    with control_plane(nodes, service_cidr=str(config.network.service_cidr), keep=args.keep) as plane:
        timings = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in plane.timings.items())
        print(f"control plane up ({timings}); {len(nodes)} nodes of stack {args.stack} Ready", file=sys.stderr)
        print(f"export KUBECONFIG={plane.kubeconfig}")
        sys.stdout.flush()
        signal.signal(signal.SIGTERM, _interrupt)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)
    print("control plane stopped", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
