"""Stand-in for GKE's slice controller (`accelerator.gke.io/slice`) as a Kueue admission check.

The program's ClusterQueue requires the AdmissionCheck whose controllerName is
`accelerator.gke.io/slice` (k8s/kueue_queues.py SLICE_CONTROLLER_NAME); without its controller
Kueue reserves quota but never admits. This stand-in, a thread polling the local control plane,
does only the two things Kueue waits for:

1. marks every AdmissionCheck of that controller Active=True (status subresource), and
2. for every Workload with QuotaReserved=True (and not being evicted) whose state for such a
   check is not Ready, sets that state to Ready ("Slices are in states: 1 ACTIVE", the real
   controller's words) by server-side apply of the status with fieldManager
   `accelerator.gke.io/slice` and force, as the real controller does.

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

A slice that never comes up is played for the Workloads of the owners named in `stalled`, as the
real controller (AI-Hypercomputer/xpk slice/, 250d4b3c = v0.8.0-196; the program runs v0.8.0-200)
answers it with the UseRetryMechanismForSliceCreation gate on and its `--activation-timeout`
(both in GKE's published manifest, k8s/slice_controller.py ARGS; the timeout is shortened here).
Kueue v0.19.2 is the real one; only the controller's side is played, from its source:

- while the slice activates, the check stays Pending with the controller's message for the
  Workload's Slices, "Slices are in states: 1 ACTIVATING" (internal/controller/workload_controller.go
  `buildAdmissionCheckMessage`, one Slice per slice the Workload asks for, named as
  internal/core/slice.go `SliceName` names them; an LWS's leader PodSet has none);
- once `activation_timeout` seconds have passed since Kueue reserved the quota (the Slice is
  STALE: Ready not True for the activation timeout, internal/core/slice.go `isStale`), the check
  goes Retry with the source's message, "Slices are in states: 1 STALE. Errors: <slice>: <the
  Slice's Ready message> (stale)", and `requeueAfterSeconds` = RETRY_DELAY_SECONDS, the default of
  `--retry-delay-on-slice-failure` (cmd/main.go), which the program does not set
  (`prepareAdmissionCheckStatus`, `evictWorkload`). The Ready message is GKE's and unpublished:
  here it is the stand-in's own (STALE_READY_MESSAGE);
- with a Retry it sets the Workload's condition TPUSliceFailure True, reason FormationTimeout,
  with the check's message; at its next write of a state that is not Retry (the next
  reservation's Pending or Ready) the condition goes False with "Previously: <message>", and a
  write after that leaves it out, so server-side apply drops it (`updateWorkloadStatus`, the
  same field manager; internal/core/constants.go).

Kueue then sets `status.requeueState.requeueAt` to the check's lastTransitionTime plus the delay
and holds the Workload, quota reserved, until then (its `Reconcile` returns early while requeueAt
is ahead, before `reconcileCheckBasedEviction`); then it evicts the Workload (reason
AdmissionCheck), resets the check to Pending with `retryCount` one higher and queues it again at
once (kueue v0.19.2 pkg/controller/core/workload_controller.go, pkg/workload/admissionchecks.go
`NeedsRequeueAtUpdate`, pkg/workload/evict/evict.go `resetChecksOnEviction`); each new
reservation starts a new activation. Whether the real controller ever answers Rejected is not in its source's
paths for a slice that does not come up: here the answer is always Retry.

A slice that degrades (its Slice's Ready reason ACTIVE_DEGRADED) is counted as active by the real
controller with its FailOnUntoleratedDegradedSlice gate off, as the program runs it
(`calculateEffectiveSliceCounts`): the check stays Ready. This stand-in, which reads no Slice
status, does the same by doing nothing (tests/test_slice_degraded.py).

What it cannot show: the real controller forms the ICI links of each admitted slice (the Slice
objects' real spec and status, their names, their scope), checks the partitions' health and may answer
Retry for a FAILED or deleted Slice, takes time to provision, reacts to node failures and removes a slice's labels
when it is torn down; here every check passes at once unless stalled, a slice's hosts are labelled only once its
pods are placed there (the real controller forms and labels a slice before its check is Ready, so
before Kueue admits: here a pod may meet the name of a slice gone just before, which can hold LWS
groups that ask for exclusive slices back), and a host's labels
stay until a live slice claims it that the host's current slice's pods are not on (the pods of
finished or deleted units are ignored). It keeps no Slice object for a stalled activation (Slices
only for placed pods, named its own way), records no events (`AdmissionCheckUpdated`), and adds
none of the podSetUpdates the real controller writes with Ready (a `cloud.google.com/gke-tpu-topology`
nodeSelector of the slice's shape).
"""

from __future__ import annotations

import hashlib
import re
import time
from datetime import UTC, datetime
from typing import Any, NamedTuple

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

# What the real controller answers a slice that does not come up (xpk slice/, 250d4b3c):
# `--retry-delay-on-slice-failure` defaults to 10s (cmd/main.go) and the program does not pass it
# (k8s/slice_controller.py ARGS), so every Retry asks Kueue for 10 s (requeueAfterSeconds).
RETRY_DELAY_SECONDS = 10
SLICE_FAILURE = "TPUSliceFailure"  # internal/core/constants.go WorkloadSliceFailureConditionType
FORMATION_TIMEOUT = "FormationTimeout"  # its reason for a STALE Slice with the retry gate on
# A stalled Slice's Ready message is GKE's, not published: these words are the stand-in's.
STALE_READY_MESSAGE = "stand-in: ICI links not formed"
SLICE_NAME_LENGTH, SLICE_NAME_HASH = 49, 5  # internal/core/slice.go maxSliceNameLength, hashLength
LWS_LEADER_PODSET = "leader"  # internal/core/constants.go LWSLeaderPodSetName: its PodSet gets no Slice
TOPOLOGY = re.compile(r"[0-9]+x[0-9]+x[0-9]+")  # internal/core/core.go IsValidTPUTopology


class Answer(NamedTuple):
    """A Retry the stand-in answered: the Workload, when (monotonic), the check's lastTransitionTime
    as written (whole seconds, what Kueue adds the delay to) and its message."""

    workload: str
    at: float
    stamp: str
    message: str


class Reservation(NamedTuple):
    """A quota reservation the stand-in saw begin: the Workload, the QuotaReserved condition's
    lastTransitionTime (Kueue's, whole seconds) and when the stand-in saw it (monotonic)."""

    workload: str
    stamp: str
    at: float


def source_slice_name(namespace: str, workload: str, podset: str, index: int) -> str:
    """The real controller's Slice name (internal/core/slice.go `SliceName`)."""
    name = f"{namespace}-{workload}-{podset}-{index}"
    if len(name) <= SLICE_NAME_LENGTH:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:SLICE_NAME_HASH]
    return f"{name[: SLICE_NAME_LENGTH - (SLICE_NAME_HASH + 1)]}-{digest}"


def workload_slices(workload: dict[str, Any]) -> list[str]:
    """The Slices the real controller makes for a Workload: per PodSet with a slice topology and a
    topology request (an LWS's leader PodSet none), `subGroupCount` of them (workload_controller.go
    `shouldCreateSlicesForPodSetAssignment`, `syncSlices`)."""
    meta = workload["metadata"]
    lws = any(o.get("kind") == "LeaderWorkerSet" for o in meta.get("ownerReferences") or [])
    names = []
    for podset in workload.get("spec", {}).get("podSets") or []:
        annotations = ((podset.get("template") or {}).get("metadata") or {}).get("annotations") or {}
        shape = annotations.get(SLICE_TOPOLOGY_ANNOTATION, "")
        request = podset.get("topologyRequest")
        if (lws and podset["name"] == LWS_LEADER_PODSET) or not TOPOLOGY.search(shape) or request is None:
            continue
        count = int(request.get("subGroupCount") or 1)
        names += [source_slice_name(meta["namespace"], meta["name"], podset["name"], i) for i in range(count)]
    return names


def slices_message(slices: list[str], state: str) -> str:
    """The controller's check message for Slices all in `state` (`buildAdmissionCheckMessage`)."""
    if not slices:
        return "Waiting for Slices to be created"
    message = f"Slices are in states: {len(slices)} {state}"
    if state == "STALE":
        message += ". Errors: " + "; ".join(f"{name}: {STALE_READY_MESSAGE} (stale)" for name in slices)
    return message


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
        self.retries: list[Answer] = []  # each Retry answered
        self.reservations: list[Reservation] = []  # each reservation seen with its check not yet answered
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
            states = {s["name"]: s for s in workload.get("status", {}).get("admissionChecks") or []}
            todo = [name for name in checks if name in states and states[name].get("state") not in ("Ready", "Retry")]
            if not todo:
                continue
            began = self._reservation(workload)
            slices = workload_slices(workload)
            state, message = "Ready", slices_message(slices, "ACTIVE") if slices else "stand-in: slice ready"
            if self._stalled(workload):
                state, message = "Pending", slices_message(slices, "ACTIVATING")
                if time.monotonic() - began >= self.activation_timeout:
                    state, message = "Retry", slices_message(slices, "STALE")
                elif all(states[name].get("message") == message for name in todo):
                    continue  # activating, and already said so
            self._answer(workload, [states[name] for name in todo], state, message)
            if state == "Ready":
                self.readied += len(todo)

    def _answer(self, workload: dict[str, Any], checks: list[dict[str, Any]], state: str, message: str) -> None:
        """One status apply, as the controller's `updateWorkloadStatus`: each check's state as Kueue
        wrote it with the new state and message (the transition time new only if the state is), and
        TPUSliceFailure True with a Retry, or False ("Previously: ...") at the next other state."""
        meta = workload["metadata"]
        stamp = _now()
        answered = []
        for check in checks:
            new = {**check, "state": state, "message": message}
            if check.get("state") != state or not check.get("lastTransitionTime"):
                new["lastTransitionTime"] = stamp
            if state == "Retry":
                new["requeueAfterSeconds"] = RETRY_DELAY_SECONDS
            answered.append(new)
        status: dict[str, Any] = {"admissionChecks": answered}
        failure = next(
            (c for c in workload.get("status", {}).get("conditions") or [] if c["type"] == SLICE_FAILURE), None
        )
        if state == "Retry":
            status["conditions"] = [
                {"type": SLICE_FAILURE, "status": "True", "reason": FORMATION_TIMEOUT, "message": message}
            ]
            self.retries.append(Answer(meta["name"], time.monotonic(), stamp, message))
        elif failure is not None and failure["status"] == "True":
            previously = "Previously: " + failure.get("message", "")
            status["conditions"] = [
                {"type": SLICE_FAILURE, "status": "False", "reason": failure["reason"], "message": previously}
            ]
        for condition in status.get("conditions", []):
            condition["lastTransitionTime"] = stamp  # meta.SetStatusCondition on the patch's empty list
        body = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "status": status,
        }
        self._status(f"{KUEUE}/namespaces/{meta['namespace']}/workloads/{meta['name']}", body)

    def _reservation(self, workload: dict[str, Any]) -> float:
        """When this stand-in first saw the Workload's current reservation (one per reservation: the
        QuotaReserved condition's transition time), recorded in `reservations`."""
        reserved = next(
            c.get("lastTransitionTime", "") for c in workload["status"]["conditions"] if c["type"] == "QuotaReserved"
        )
        key = (workload["metadata"]["uid"], reserved)
        if key not in self._activating:
            self._activating[key] = time.monotonic()
            self.reservations.append(Reservation(workload["metadata"]["name"], reserved, self._activating[key]))
        return self._activating[key]

    def _stalled(self, workload: dict[str, Any]) -> bool:
        owners = workload["metadata"].get("ownerReferences") or []
        return any(o.get("kind") in ("LeaderWorkerSet", "JobSet") and o.get("name") in self.stalled for o in owners)
