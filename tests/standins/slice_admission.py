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

What it cannot show: the real controller forms the ICI links of each admitted slice (it creates
Slice objects for the pods' topology assignment), checks the partitions' health and may answer
Retry or Rejected, takes time to provision, reacts to node failures and removes a slice's labels
when it is torn down; here every check passes at once, and a host's labels stay until a live
slice that is not already on it claims it (the pods of finished or deleted units are ignored).
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


def _slice_name(unit: str) -> str:
    return "slice-" + hashlib.sha256(unit.encode()).hexdigest()[:16]


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _conditions(obj: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in obj.get("status", {}).get("conditions") or []}


class SliceAdmission(Poller):
    """Poll AdmissionChecks and Workloads every `interval` seconds until `stop()`."""

    name = "slice-admission-stand-in"

    def __init__(self, plane: cp.ControlPlane, *, interval: float = 0.1) -> None:
        super().__init__(plane, interval=interval)
        self.readied = 0  # how many times a check state was set to Ready
        self._next_labelling = 0.0

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
        if not units:
            return
        labels = {
            n["metadata"]["name"]: n["metadata"].get("labels") or {}
            for n in self.plane.request("GET", "/api/v1/nodes")["items"]
        }
        live = {_slice_name(unit) for unit in units}
        for unit, (shape, hosts) in units.items():
            name = _slice_name(unit)
            for host in sorted(hosts):
                if host not in labels:
                    continue
                held = labels[host].get(SLICE_LABEL)
                if held != name and held in live:
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
            todo = [name for name in checks if name in states and states[name] != "Ready"]
            if not todo:
                continue
            meta = workload["metadata"]
            body = {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "Workload",
                "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                "status": {
                    "admissionChecks": [
                        {
                            "name": name,
                            "state": "Ready",
                            "message": "stand-in: slice ready",
                            "lastTransitionTime": _now(),
                        }
                        for name in todo
                    ]
                },
            }
            self._status(f"{KUEUE}/namespaces/{meta['namespace']}/workloads/{meta['name']}", body)
            self.readied += len(todo)
