"""Stand-in for GKE's slice controller (`accelerator.gke.io/slice`) as a Kueue admission check.

The program's ClusterQueue requires the AdmissionCheck whose controllerName is
`accelerator.gke.io/slice` (k8s/kueue_queues.py SLICE_CONTROLLER_NAME); without its controller
Kueue reserves quota but never admits. This stand-in, a thread polling the local control plane,
does only the two things Kueue waits for:

1. marks every AdmissionCheck of that controller Active=True (status subresource), and
2. for every Workload with QuotaReserved=True (and not being evicted) whose state for such a
   check is not Ready, sets that state to Ready by server-side apply of the status with
   fieldManager `accelerator.gke.io/slice` and force, as an admission check controller does.

Kueue then admits the Workload and unsuspends its job. Like the real controller once a slice is
formed, it then labels the slice's nodes (GKE docs "Use dynamic slicing with a custom scheduler",
whose clean-up removes the labels the slice controller adds with `kubectl label nodes --all
cloud.google.com/gke-tpu-slice- cloud.google.com/gke-tpu-slice-topology-`): the slice's name and
its shape, one slice per LWS group or per Job of a
JobSet, on the nodes Kueue's topology assignment gave its pods. The program's exclusive-topology
annotations (one LWS group per slice) need that label on the nodes.

It also keeps one Slice object (`slices.accelerator.gke.io`, the kind GKE installs; a field-keeping
CRD here, tests/standins/gke_addons.py) per live slice, with a finalizer it removes a few seconds
after the slice's pods are gone, and only while the slice controller's Deployment exists, as only
a running controller finalizes Slices.

A slice that never comes up is played for the Workloads of the owners named in `stalled`: their
check is not Ready, and once `activation_timeout` seconds have passed since Kueue reserved their
quota, the check's state is set to Retry with a message naming the slice, as the real controller
does with its `--activation-timeout` flag and UseRetryMechanismForSliceCreation gate (both in
GKE's published manifest, k8s/slice_controller.py ARGS; the timeout is shortened here). Kueue then
evicts the Workload and queues it again (kueue v0.19.2 pkg/controller/core/workload_controller.go
`reconcileCheckBasedEviction`); each new reservation starts a new activation. The real controller's
message, whether it ever answers Rejected instead, and whether it sets `requeueAfterSeconds` are
not published: here the message is the stand-in's own, the answer is always Retry, with no delay.

What it cannot show: the real controller forms the ICI links of each admitted slice (the Slice
objects' real spec and status, their names, their scope), checks the partitions' health and may answer
Retry or Rejected, takes time to provision, reacts to node failures and removes a slice's labels
when it is torn down; here every check passes at once, a slice's hosts are labelled only once its
pods are placed there (the real controller forms and labels a slice before its check is Ready, so
before Kueue admits: here a pod may meet the name of a slice gone just before, which can hold LWS
groups that ask for exclusive slices back), and a host's labels
stay until a live slice claims it that the host's current slice's pods are not on (the pods of
finished or deleted units are ignored).
"""

from __future__ import annotations

import hashlib
import time
from datetime import UTC, datetime
from typing import Any

from tests import control_plane as cp
from tests.standins.poller import Poller

CONTROLLER_NAME = "accelerator.gke.io/slice"
SLICE_LABEL = "cloud.google.com/gke-tpu-slice"
TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-slice-topology"
SLICE_TOPOLOGY_ANNOTATION = "cloud.google.com/gke-tpu-slice-topology"
HOST = "kubernetes.io/hostname"
# The label of a pod that names its exclusive unit: an LWS group, or one Job of a JobSet.
UNITS = ("leaderworkerset.sigs.k8s.io/group-key", "jobset.sigs.k8s.io/job-key")
LABEL_INTERVAL = 0.5  # seconds between two labelling passes (each lists the pods of both kinds)
KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
FINISHED = ("Succeeded", "Failed")  # pod phases whose slice the controller has torn down
# GKE's Slice objects, one per placed slice, which only a running slice controller finalizes.
SLICE_KIND = ("accelerator.gke.io", "Slice", "slices", "v1alpha1")
SLICES = f"/apis/{SLICE_KIND[0]}/{SLICE_KIND[3]}/slices"
SLICE_FINALIZER = "accelerator.gke.io/slice"
# The slice controller's Deployment (k8s/slice_controller.py): while it exists, the controller runs.
CONTROLLER_DEPLOYMENT = (
    "/apis/apps/v1/namespaces/slice-controller-system/deployments/slice-controller-controller-manager"
)
# Tearing a slice down takes the real controller a while after its pods are gone (ICI links,
# the nodes' release); a destroy that deletes the controller sooner leaves the Slice behind.
TEARDOWN_SECONDS = 5.0


def _slice_name(unit: str) -> str:
    return "slice-" + hashlib.sha256(unit.encode()).hexdigest()[:16]


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _conditions(obj: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in obj.get("status", {}).get("conditions") or []}


class SliceAdmission(Poller):
    """Reconcile AdmissionChecks, Workloads and Slices on each change (at most every `interval` s) until `stop()`."""

    name = "slice-admission-stand-in"
    # Woken by what it reads; with nothing changing, a pass per labelling interval (Slices are
    # finalized TEARDOWN_SECONDS after their pods went: time passing, which no watch shows).
    watched = (f"{KUEUE}/admissionchecks", f"{KUEUE}/workloads", "/api/v1/pods")
    idle = LABEL_INTERVAL

    def __init__(self, plane: cp.ControlPlane, *, interval: float = 0.1) -> None:
        super().__init__(plane, interval=interval)
        self.readied = 0  # how many times a check state was set to Ready
        self.finalized = 0  # how many Slices it finalized
        self._next_labelling = 0.0
        self._gone_since: dict[str, float] = {}
        # The owners (LeaderWorkerSet or JobSet names) whose slices never become ACTIVE, the
        # controller's --activation-timeout, and when each stalled reservation began.
        self.stalled: set[str] = set()
        self.activation_timeout = 3600.0
        self.retries: list[tuple[str, float]] = []  # (Workload, monotonic time) of each Retry answered
        self.activations: list[tuple[str, float]] = []  # (Workload, when this stand-in saw its reservation)
        self._activating: dict[tuple[str, str], float] = {}

    def _status(self, path: str, body: dict[str, Any]) -> None:
        self.plane.request(
            "PATCH",
            f"{path}/status",
            body,
            content_type="application/apply-patch+yaml",
            query={"fieldManager": CONTROLLER_NAME, "force": "true"},
        )

    def reconcile(self) -> None:
        self._check_workloads()
        self._label_slices()

    def _keep_slices(self, live: set[str]) -> None:
        """One Slice object per live slice, with the finalizer; a Slice whose pods have been gone for
        TEARDOWN_SECONDS is finalized and deleted while the controller's Deployment exists, and never
        once it is gone: that is what a destroy in the wrong order leaves stuck."""
        try:
            existing = {s["metadata"]["name"]: s for s in self.plane.request("GET", SLICES)["items"]}
        except cp.ApiError as err:
            if err.status == 404:
                return  # no Slice kind on this cluster
            raise
        now = time.monotonic()
        for name in sorted(live - set(existing)):
            body = {
                "apiVersion": f"{SLICE_KIND[0]}/{SLICE_KIND[3]}",
                "kind": "Slice",
                "metadata": {"name": name, "finalizers": [SLICE_FINALIZER]},
                "spec": {"stand-in": "tests/standins/slice_admission.py"},
            }
            self.plane.request("POST", SLICES, body)
        for name in live:
            self._gone_since.pop(name, None)
        for name, obj in existing.items():
            if name in live:
                continue
            since = self._gone_since.setdefault(name, now)
            if now - since < TEARDOWN_SECONDS or not self._controller_runs():
                continue
            if obj["metadata"].get("finalizers"):
                self.plane.request(
                    "PATCH",
                    f"{SLICES}/{name}",
                    {"metadata": {"finalizers": None}},
                    content_type="application/merge-patch+json",
                )
            if not obj["metadata"].get("deletionTimestamp"):
                self.plane.request("DELETE", f"{SLICES}/{name}")
            self.finalized += 1

    def _controller_runs(self) -> bool:
        try:
            deployment = self.plane.request("GET", CONTROLLER_DEPLOYMENT)
        except cp.ApiError as err:
            if err.status == 404:
                return False
            raise
        return not deployment["metadata"].get("deletionTimestamp")

    def _label_slices(self) -> None:
        """Label the nodes of each placed slice with its name and shape (merge patches, idempotent)."""
        now = time.monotonic()
        if now < self._next_labelling:
            return
        self._next_labelling = now + LABEL_INTERVAL
        units: dict[str, tuple[str, set[str]]] = {}
        pods = [
            pod
            for key in UNITS
            for pod in self.plane.request("GET", "/api/v1/pods", query={"labelSelector": key})["items"]
        ]
        for pod in pods:
            meta, spec = pod["metadata"], pod["spec"]
            if (pod.get("status") or {}).get("phase") in FINISHED or meta.get("deletionTimestamp"):
                continue  # its slice is torn down: a finished check Job's pods must not relabel the hosts
            shape = (meta.get("annotations") or {}).get(SLICE_TOPOLOGY_ANNOTATION)
            host = (spec.get("nodeSelector") or {}).get(HOST) or spec.get("nodeName")
            unit = next((meta["labels"][key] for key in UNITS if key in (meta.get("labels") or {})), None)
            if shape and host and unit:
                units.setdefault(unit, (shape, set()))[1].add(host)
        self._keep_slices({_slice_name(unit) for unit in units})
        if not units:
            return
        labels = {
            n["metadata"]["name"]: n["metadata"].get("labels") or {}
            for n in self.plane.request("GET", "/api/v1/nodes")["items"]
        }
        # Where each live slice is now: a slice whose group Kueue evicted and placed again elsewhere
        # is torn down and formed anew, and the real controller takes its labels off the hosts it
        # left (the GKE docs' clean-up above); here its old hosts are free to be labelled again.
        placed = {_slice_name(unit): hosts for unit, (_, hosts) in units.items()}
        for unit, (shape, hosts) in units.items():
            name = _slice_name(unit)
            for host in sorted(hosts):
                if host not in labels:
                    continue
                held = labels[host].get(SLICE_LABEL)
                if held != name and host in placed.get(held or "", ()):
                    continue  # a host belongs to one live slice; the first to label it keeps it
                if (held, labels[host].get(TOPOLOGY_LABEL)) != (name, shape):
                    labels[host] = {**labels[host], SLICE_LABEL: name, TOPOLOGY_LABEL: shape}
                    self.plane.request(
                        "PATCH",
                        f"/api/v1/nodes/{host}",
                        {"metadata": {"labels": {SLICE_LABEL: name, TOPOLOGY_LABEL: shape}}},
                        content_type="application/merge-patch+json",
                    )

    def _check_workloads(self) -> None:
        checks = set()
        for check in self.plane.request("GET", f"{KUEUE}/admissionchecks")["items"]:
            if check.get("spec", {}).get("controllerName") != CONTROLLER_NAME:
                continue
            name = check["metadata"]["name"]
            checks.add(name)
            if _conditions(check).get("Active") != "True":
                condition = {
                    "type": "Active",
                    "status": "True",
                    "reason": "Active",
                    "message": "stand-in slice controller (tests/standins/slice_admission.py)",
                    "lastTransitionTime": _now(),
                }
                body = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": name}}
                self._status(f"{KUEUE}/admissionchecks/{name}", body | {"status": {"conditions": [condition]}})
        if not checks:
            return
        for workload in self.plane.request("GET", f"{KUEUE}/workloads")["items"]:
            conditions = _conditions(workload)
            if conditions.get("QuotaReserved") != "True" or conditions.get("Evicted") == "True":
                continue
            states = {s["name"]: s.get("state") for s in workload.get("status", {}).get("admissionChecks") or []}
            todo = [name for name in checks if name in states and states[name] not in ("Ready", "Retry")]
            if not todo:
                continue
            meta = workload["metadata"]
            state, message = "Ready", "stand-in: slice ready"
            if self._stalled(workload):
                if not self._timed_out(workload):
                    continue
                state = "Retry"
                message = (
                    f"Slice {_slice_name(meta['uid'])} did not become ACTIVE within the activation timeout "
                    f"({self.activation_timeout:g}s; stand-in: tests/standins/slice_admission.py)"
                )
                self.retries.append((meta["name"], time.monotonic()))
            body = {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "Workload",
                "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                "status": {
                    "admissionChecks": [
                        {"name": name, "state": state, "message": message, "lastTransitionTime": _now()}
                        for name in todo
                    ]
                },
            }
            self._status(f"{KUEUE}/namespaces/{meta['namespace']}/workloads/{meta['name']}", body)
            if state == "Ready":
                self.readied += len(todo)

    def _stalled(self, workload: dict[str, Any]) -> bool:
        owners = workload["metadata"].get("ownerReferences") or []
        return any(o.get("kind") in ("LeaderWorkerSet", "JobSet") and o.get("name") in self.stalled for o in owners)

    def _timed_out(self, workload: dict[str, Any]) -> bool:
        """Whether this reservation's activation has outlasted the timeout (one per reservation:
        the QuotaReserved condition's transition time)."""
        reserved = next(
            c.get("lastTransitionTime", "") for c in workload["status"]["conditions"] if c["type"] == "QuotaReserved"
        )
        key = (workload["metadata"]["uid"], reserved)
        if key not in self._activating:
            self._activating[key] = time.monotonic()
            self.activations.append((workload["metadata"]["name"], self._activating[key]))
        began = self._activating[key]
        return time.monotonic() - began >= self.activation_timeout
