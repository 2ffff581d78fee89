"""A TPU VM that fails and is repaired, as GKE and Kubernetes show it, on a plane's simulated node.

What the plane's parts would do on a real cluster, each step named after who does it:

- GKE: every TPU7x node carries one `cloud.google.com/gke-tpu-partition-<shape>-state` label per
  partition shape it belongs to (llm-d's TPU7x dynamic-slicing guide selects them at "HEALTHY";
  tests/control_plane.py `_partition_ids` writes them on the plane). A failed host makes each
  partition it is part of unhealthy, so every host sharing one of its `-id` labels reads
  "UNHEALTHY" for that shape; repaired, they read "HEALTHY" again.
- The kubelet stops: kwok stops playing it (the node loses kwok's annotation, kwok's
  `--manage-nodes-with-annotation-selector`), and the node's Ready condition reads Unknown, as the
  node lifecycle controller writes it when the kubelet's lease is not renewed
  (kubernetes pkg/controller/nodelifecycle/node_lifecycle_controller.go `tryUpdateNodeHealth`), with
  its `node.kubernetes.io/unreachable:NoExecute` taint (`UnreachableTaintTemplate`).
- The taint-eviction controller deletes the host's pods once their toleration of that taint runs
  out (300 s, the DefaultTolerationSeconds admission plugin), and with no kubelet to confirm they go
  at once (grace period 0, as PodGC deletes the pods of a node that is gone).

What it cannot show: the plane does these at once rather than after the grace periods (40 s and
300 s on a real cluster, the time to recover there is that much longer); GKE's own reaction beyond
the labels (node auto-repair, the slice controller marking a Slice FAILED) is not played; nothing
checks that GKE flips the state of every partition shape, which is the reading this file takes of
a partition's state label.
"""

from __future__ import annotations

import datetime
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


def _unknown(plane: cp.ControlPlane, host: str) -> bool:
    """Ready Unknown on `host`, written again if anything wrote it back; True once it reads Unknown."""
    node = plane.request("GET", f"/api/v1/nodes/{host}")
    if _ready(node) == "Unknown":
        return True
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    condition = {
        "type": "Ready",
        "status": "Unknown",
        "reason": "NodeStatusUnknown",
        "message": "Kubelet stopped posting node status.",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
    plane.request("PATCH", f"/api/v1/nodes/{host}/status", {"status": {"conditions": [condition]}},
                  content_type=STRATEGIC)  # fmt: skip
    return False


def fail(plane: cp.ControlPlane, host: str) -> list[str]:
    """The TPU VM `host` fails. Returns the pods that were running on it (namespace/name)."""
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


def fail_hosts(plane: cp.ControlPlane, hosts: list[str]) -> list[str]:
    """The TPU VMs `hosts` fail together (a whole cube, say). Returns the pods that ran on them."""
    _set_states_of(plane, hosts, UNHEALTHY)
    for host in hosts:
        _unreachable(plane, host)
    evicted = []
    for host in hosts:
        evicted += _end_pods(plane, host)
    return evicted


def _unreachable(plane: cp.ControlPlane, host: str) -> None:
    """The kubelet stops: kwok lets go of the node, which reads Ready Unknown with the taint."""
    node = plane.request("GET", f"/api/v1/nodes/{host}")
    taints = [t for t in node["spec"].get("taints") or [] if t["key"] != UNREACHABLE["key"]]
    body = {
        "metadata": {"annotations": {cp.KWOK_ANNOTATION: None}},
        "spec": {"taints": [*taints, UNREACHABLE]},
    }
    plane.request("PATCH", f"/api/v1/nodes/{host}", body, content_type=MERGE)
    # kwok may write Ready back until it has seen its annotation go: wait until two reads in a row
    # find Unknown (each read writes it again if not). No object shows that kwok's informer has
    # seen the annotation go, so this is a count of reads, not a condition (CONTRIBUTING.md, The
    # flake rule); a late write-back can only keep Kueue from evicting, which the stories' waits
    # report as a verdict that never came, never as a pass.
    plane.wait_for(f"{host} Ready Unknown", lambda: all(_unknown(plane, host) for _ in range(2)), 60)


def _end_pods(plane: cp.ControlPlane, host: str) -> list[str]:
    """The taint manager, then PodGC, delete the pods of unreachable `host`."""
    pods = plane.request("GET", "/api/v1/pods", query={"fieldSelector": f"spec.nodeName={host}"})["items"]
    evicted = [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pods]
    # First as the taint-eviction controller deletes them (their grace period: they turn
    # Terminating, which is what Kueue's node controller watches for), then as PodGC removes the
    # pods of a node that will not come back (grace period 0: no kubelet is there to confirm).
    for grace in (None, 0):
        for pod in evicted:
            namespace, name = pod.split("/")
            try:
                plane.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}",
                              None if grace is None else {"gracePeriodSeconds": grace})  # fmt: skip
            except cp.ApiError as err:
                if err.status != 404:
                    raise
    return evicted


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
    node = plane.request("GET", f"/api/v1/nodes/{host}")
    taints = [t for t in node["spec"].get("taints") or [] if t["key"] != UNREACHABLE["key"]]
    body = {
        "metadata": {"annotations": {cp.KWOK_ANNOTATION: cp.KWOK_ANNOTATION_VALUE}},
        "spec": {"taints": taints},
    }
    plane.request("PATCH", f"/api/v1/nodes/{host}", body, content_type=MERGE)
    # kwok's node-initialize Stage sets Ready True on a node of its whose Ready is not True.
    plane.wait_for(f"{host} Ready again", lambda: _ready(plane.request("GET", f"/api/v1/nodes/{host}")) == "True", 60)
