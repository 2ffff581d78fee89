"""A TPU VM that fails and is repaired, as GKE and Kubernetes show it, on a plane's simulated node.

Who does what, as on a real cluster:

- GKE (played here): every TPU7x node carries one `cloud.google.com/gke-tpu-partition-<shape>-state`
  label per partition shape it belongs to (llm-d's TPU7x dynamic-slicing guide selects them at
  "HEALTHY"; tests/control_plane.py `_partition_ids` writes them on the plane). A failed host makes
  each partition it is part of unhealthy, so every host sharing one of its `-id` labels reads
  "UNHEALTHY" for that shape; repaired, they read "HEALTHY" again.
- The kubelet stops (played here): kwok stops playing it (the node loses kwok's label, kwok's
  `--manage-nodes-with-label-selector`), so the node's Lease is no longer renewed.
- The rest is the plane's real kube-controller-manager, never this file: its node lifecycle
  controller marks the node Ready=Unknown once its Lease is older than the grace period and taints
  it `node.kubernetes.io/unreachable:NoExecute`; its taint-eviction controller then deletes the
  node's pods when their toleration runs out (tests/control_plane.py NodeLifecycle, the timers the
  stories shorten). With no kubelet to confirm, each pod stays Terminating: a StatefulSet (an LWS
  group's pods) makes no replacement while it exists. `fail_hosts` waits for that state.
- Then either a person force-deletes the pods (`force_delete`, docs/operations.md "When a TPU host
  fails"), or the host comes back (`repair_hosts`): kwok plays its kubelet again, confirms the
  deletions (its pod-delete Stage) and reports Ready, and the node lifecycle controller lifts the
  taint.

What it cannot show: GKE node auto-repair (it re-creates a VM whose node stayed NotReady for about
ten minutes; its delay and whether the node keeps its name are not played, `repair_hosts` is the
host coming back); the slice controller marking a Slice FAILED; that GKE flips the state of every
partition shape, which is the reading this file takes of a partition's state label.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from tests import control_plane as cp

PARTITION_ID = re.compile(r"^cloud\.google\.com/gke-tpu-partition-(?P<shape>\d+x\d+x\d+)-id$")
HEALTHY, UNHEALTHY = "HEALTHY", "UNHEALTHY"
UNREACHABLE = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


def state_label(shape: str) -> str:
    return f"cloud.google.com/gke-tpu-partition-{shape}-state"


def partition_hosts(plane: cp.ControlPlane, host: str) -> dict[str, list[str]]:
    """Per partition shape of `host`, the nodes of its partition (those sharing its `-id` label)."""
    labels = plane.request("GET", f"/api/v1/nodes/{host}")["metadata"]["labels"]
    found = {}
    for key, value in labels.items():
        match = PARTITION_ID.match(key)
        if match:
            listed = plane.request("GET", "/api/v1/nodes", query={"labelSelector": f"{key}={value}"})["items"]
            found[match["shape"]] = sorted(n["metadata"]["name"] for n in listed)
    return found


def _ready(node: Mapping[str, Any]) -> str | None:
    for condition in node.get("status", {}).get("conditions") or []:
        if condition["type"] == "Ready":
            return str(condition["status"])
    return None


def _tainted(node: Mapping[str, Any]) -> bool:
    return any(
        t["key"] == UNREACHABLE["key"] and t["effect"] == UNREACHABLE["effect"]
        for t in node["spec"].get("taints") or []
    )


def _tolerates_for_good(pod: Mapping[str, Any]) -> bool:
    """Whether `pod` tolerates the unreachable taint with no time limit (a DaemonSet's pods do), so
    the taint-eviction controller never evicts it (k8s.io/api core/v1 toleration.go ToleratesTaint)."""
    for toleration in pod["spec"].get("tolerations") or []:
        key = toleration.get("key") or ""
        matches_key = (toleration.get("operator") == "Exists" and not key) or key == UNREACHABLE["key"]
        matches_effect = toleration.get("effect") in (None, "", UNREACHABLE["effect"])
        if matches_key and matches_effect and toleration.get("tolerationSeconds") is None:
            return True
    return False


def _pods_on(plane: cp.ControlPlane, host: str) -> list[dict[str, Any]]:
    return plane.request("GET", "/api/v1/pods", query={"fieldSelector": f"spec.nodeName={host}"})["items"]


def _name(pod: Mapping[str, Any]) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


def fail(plane: cp.ControlPlane, host: str) -> list[str]:
    """The TPU VM `host` fails, as `fail_hosts` says. Returns the pods left Terminating on it."""
    return fail_hosts(plane, [host])


def _set_states_of(plane: cp.ControlPlane, hosts: list[str], state: str) -> None:
    """Every partition any of `hosts` is part of reads `state`: one merge patch per node touched."""
    labels: dict[str, dict[str, str]] = {}
    for host in hosts:
        for shape, nodes in partition_hosts(plane, host).items():
            for node in nodes:
                labels.setdefault(node, {})[state_label(shape)] = state
    for node, states in sorted(labels.items()):
        plane.request("PATCH", f"/api/v1/nodes/{node}", {"metadata": {"labels": states}}, content_type=MERGE)


def fail_hosts(plane: cp.ControlPlane, hosts: list[str], timeout: float = 180.0) -> list[str]:
    """The TPU VMs `hosts` fail together (a whole cube, say). Returns once the node lifecycle
    controller has failed each node and the taint-eviction controller has marked each pod that ran
    there for deletion: the pods (namespace/name), which stay Terminating."""
    _set_states_of(plane, hosts, UNHEALTHY)
    evicted = [
        _name(pod)
        for host in hosts
        for pod in _pods_on(plane, host)
        if not pod["metadata"].get("deletionTimestamp") and not _tolerates_for_good(pod)
    ]
    for host in hosts:
        _stop_kubelet(plane, host)

    def failed() -> bool:
        nodes = [plane.request("GET", f"/api/v1/nodes/{host}") for host in hosts]
        return all(_ready(node) == "Unknown" and _tainted(node) for node in nodes)

    # kube-controller-manager's node lifecycle controller (tests/control_plane.py NodeLifecycle).
    plane.wait_for(f"{len(hosts)} failed hosts Ready Unknown and tainted unreachable", failed, timeout, 0.5)

    def marked() -> bool:
        left = {_name(p) for host in hosts for p in _pods_on(plane, host) if not p["metadata"].get("deletionTimestamp")}
        return not left & set(evicted)

    # Its taint-eviction controller, once each pod's toleration of the taint runs out.
    plane.wait_for(f"the {len(evicted)} pods of the failed hosts Terminating", marked, timeout, 0.5)
    return evicted


def _stop_kubelet(plane: cp.ControlPlane, host: str) -> None:
    """The kubelet stops: kwok lets go of the node, and renews its Lease no more."""
    body = {"metadata": {"labels": {cp.KWOK_LABEL: None}}}
    plane.request("PATCH", f"/api/v1/nodes/{host}", body, content_type=MERGE)


def force_delete(plane: cp.ControlPlane, pods: list[str]) -> None:
    """A person's step for pods stuck Terminating on a failed host: `kubectl delete pod --force
    --grace-period=0` (the pod is removed without the kubelet's confirmation; Kueue's
    kueue.x-k8s.io/managed finalizer still holds it until Kueue lets go)."""
    for pod in pods:
        namespace, name = pod.split("/")
        try:
            plane.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", {"gracePeriodSeconds": 0})
        except cp.ApiError as err:
            if err.status != 404:
                raise


def repair(plane: cp.ControlPlane, host: str) -> None:
    """The VM is repaired: its kubelet is back (kwok plays it again and reports Ready), the node
    lifecycle controller lifts the unreachable taint, GKE reads its partitions HEALTHY again."""
    repair_hosts(plane, [host])


def repair_hosts(plane: cp.ControlPlane, hosts: list[str]) -> None:
    """The VMs `hosts` are repaired together, each as `repair` says."""
    for host in hosts:
        _reachable(plane, host)
    _set_states_of(plane, hosts, HEALTHY)


def _reachable(plane: cp.ControlPlane, host: str) -> None:
    """The kubelet is back: kwok plays it again (its node-initialize Stage reports Ready, its
    pod-delete Stage confirms the deletions left), and the node lifecycle controller lifts the
    unreachable taint once the node is Ready."""
    body = {"metadata": {"labels": {cp.KWOK_LABEL: cp.KWOK_LABEL_VALUE}}}
    plane.request("PATCH", f"/api/v1/nodes/{host}", body, content_type=MERGE)

    def back() -> bool:
        node = plane.request("GET", f"/api/v1/nodes/{host}")
        return _ready(node) == "True" and not _tainted(node)

    plane.wait_for(f"{host} Ready again and its unreachable taint lifted", back, 120, 0.5)
