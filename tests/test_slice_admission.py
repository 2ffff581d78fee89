"""The slice-controller stand-in's node labels, on a recorded plane: a host carries the slice of
the live unit placed on it, never of a finished Job that ran there before (tests/standins/slice_admission.py)."""

from __future__ import annotations

import copy
from typing import Any

from tests.standins import slice_admission as sa

GROUP = "leaderworkerset.sigs.k8s.io/group-key"
JOB = "jobset.sigs.k8s.io/job-key"


def pod(name: str, unit_label: str, unit: str, host: str, phase: str, **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {unit_label: unit},
            "annotations": {sa.SLICE_TOPOLOGY_ANNOTATION: "2x2x1"},
            **meta,
        },
        "spec": {"nodeSelector": {sa.HOST: host}, "nodeName": host},
        "status": {"phase": phase},
    }


class Plane:
    """Answers the stand-in's pod and node lists and applies its merge patches to the nodes."""

    def __init__(self, pods: list[dict[str, Any]], hosts: list[str]) -> None:
        self.pods = pods
        self.nodes: dict[str, dict[str, Any]] = {h: {"metadata": {"name": h, "labels": {}}} for h in hosts}

    def request(self, method: str, path: str, body: Any = None, **options: Any) -> dict[str, Any]:
        if method == "GET" and path == "/api/v1/pods":
            selector = options["query"]["labelSelector"]
            return {"items": [p for p in self.pods if selector in p["metadata"]["labels"]]}
        if method == "GET" and path == "/api/v1/nodes":
            return {"items": copy.deepcopy(list(self.nodes.values()))}  # a copy, as the API returns
        assert method == "PATCH" and path.startswith("/api/v1/nodes/"), (method, path)
        self.nodes[path.rsplit("/", 1)[1]]["metadata"]["labels"].update(body["metadata"]["labels"])
        return {}


def labels_after_passes(plane: Plane, passes: int = 3) -> dict[str, str | None]:
    stand_in = sa.SliceAdmission(plane)  # type: ignore[arg-type]
    for _ in range(passes):
        stand_in._next_labelling = 0.0
        stand_in._label_slices()
    return {h: n["metadata"]["labels"].get(sa.SLICE_LABEL) for h, n in plane.nodes.items()}


def test_a_finished_check_job_does_not_take_its_hosts_back_from_a_serving_group() -> None:
    """The flake CI met: the check JobSet's completed pods stayed on the hosts a decode group now
    holds, and every pass relabelled the hosts to the Job's slice, then back."""
    serving = [pod("decode-0", GROUP, "decode", "h0", "Running"), pod("decode-0-1", GROUP, "decode", "h1", "Pending")]
    finished = [pod("check-0", JOB, "check", "h0", "Succeeded"), pod("check-1", JOB, "check", "h1", "Succeeded")]
    alone = labels_after_passes(Plane(serving, ["h0", "h1"]))
    assert alone["h0"] == alone["h1"] is not None
    assert labels_after_passes(Plane(finished + serving, ["h0", "h1"])) == alone


def test_a_host_labelled_for_a_live_slice_keeps_it_and_deleted_pods_count_for_nothing() -> None:
    plane = Plane([pod("a-0", GROUP, "a", "h0", "Running")], ["h0", "h1"])
    first = labels_after_passes(plane)
    plane.pods += [
        pod("b-0", JOB, "b", "h0", "Pending"),
        pod("c-0", JOB, "c", "h1", "Running", deletionTimestamp="2026-12-02T00:00:00Z"),
    ]
    assert labels_after_passes(plane) == first == {"h0": first["h0"], "h1": None}
