"""The slice-controller stand-in's node labels, on a recorded plane: a host carries the slice of
the live unit placed on it, never of a finished Job that ran there before (tests/standins/slice_admission.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests import control_plane as cp
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

    def __init__(self, pods: list[dict[str, Any]], hosts: list[str], *, slices: bool = False) -> None:
        self.pods = pods
        self.nodes: dict[str, dict[str, Any]] = {h: {"metadata": {"name": h, "labels": {}}} for h in hosts}
        self.slices: dict[str, dict[str, Any]] | None = {} if slices else None  # None: no Slice kind
        self.controller = True  # the slice controller's Deployment exists

    def request(self, method: str, path: str, body: Any = None, **options: Any) -> dict[str, Any]:
        if path == sa.CONTROLLER_DEPLOYMENT:
            if not self.controller:
                raise cp.ApiError(method, path, 404, "not found")
            return {"metadata": {"name": "slice-controller-controller-manager"}}
        if path.startswith(sa.SLICES):
            return self._slice(method, path, body)
        if method == "GET" and path == "/api/v1/pods":
            selector = options["query"]["labelSelector"]
            return {"items": [p for p in self.pods if selector in p["metadata"]["labels"]]}
        if method == "GET" and path == "/api/v1/nodes":
            return {"items": copy.deepcopy(list(self.nodes.values()))}  # a copy, as the API returns
        assert method == "PATCH" and path.startswith("/api/v1/nodes/"), (method, path)
        self.nodes[path.rsplit("/", 1)[1]]["metadata"]["labels"].update(body["metadata"]["labels"])
        return {}

    def _slice(self, method: str, path: str, body: Any) -> dict[str, Any]:
        """A cluster-scoped kind with finalizers: DELETE marks, the last finalizer's removal deletes."""
        if self.slices is None:
            raise cp.ApiError(method, path, 404, "the server could not find the requested resource")
        name = path.removeprefix(sa.SLICES).strip("/")
        if method == "GET":
            return {"items": copy.deepcopy(list(self.slices.values()))}
        if method == "POST":
            self.slices[body["metadata"]["name"]] = copy.deepcopy(body)
        elif method == "PATCH":
            meta = self.slices[name]["metadata"]
            meta["finalizers"] = body["metadata"]["finalizers"] or []
            if meta.get("deletionTimestamp") and not meta["finalizers"]:
                del self.slices[name]
        elif method == "DELETE":
            meta = self.slices[name]["metadata"]
            if meta.get("finalizers"):
                meta["deletionTimestamp"] = "2026-12-02T00:00:00Z"
            else:
                del self.slices[name]
        return {}


def labels_after_passes(
    plane: Plane, passes: int = 3, stand_in: sa.SliceAdmission | None = None
) -> dict[str, str | None]:
    stand_in = stand_in or sa.SliceAdmission(plane)  # type: ignore[arg-type]
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


def test_a_live_slice_has_a_slice_object_that_only_a_running_controller_finalizes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What a destroy in the wrong order meets: the Slice of a gone group stays while the slice
    controller's Deployment is gone, and is finalized once it runs."""
    monkeypatch.setattr(sa, "TEARDOWN_SECONDS", 0.0)
    plane = Plane([pod("decode-0", GROUP, "decode", "h0", "Running")], ["h0"], slices=True)
    stand_in = sa.SliceAdmission(plane)  # type: ignore[arg-type]
    name = labels_after_passes(plane, stand_in=stand_in)["h0"]
    assert plane.slices is not None and name is not None
    assert list(plane.slices) == [name]
    assert plane.slices[name]["metadata"]["finalizers"] == [sa.SLICE_FINALIZER]
    plane.pods.clear()
    plane.controller = False
    labels_after_passes(plane, stand_in=stand_in)
    assert list(plane.slices) == [name]  # nobody finalizes it
    plane.controller = True
    labels_after_passes(plane, stand_in=stand_in)
    assert plane.slices == {} and stand_in.finalized == 1


def test_no_slice_kind_no_slice_objects() -> None:
    plane = Plane([pod("decode-0", GROUP, "decode", "h0", "Running")], ["h0"])
    labels_after_passes(plane)
    assert plane.slices is None
