"""A slicing check whose pod dies mid-run, and a super-slice check over an UNHEALTHY cube: what real
JobSet v0.12.0 and Kueue v0.19.2 do with the program's own check JobSets (issue 45, item 4).

The plane has two cubes and the program's Kueue objects (tests/test_admission_oracle.py
`oracle_env`). The check JobSets are rendered from the dev stack with both checks on, plus what
Kueue's and the slice controller's webhooks add on a real cluster (`suspend`, the topology request).

1. `checks`: the super-slice check (4x4x8, medium) spans both cubes and the sub-slice check (2x2x4
   twice, low) waits behind it. One of the super-slice's pods exits 1 mid-run, as its kubelet
   reports a failed container of a `restartPolicy: Never` pod. The program runs no restart
   (`failurePolicy.maxRestarts: 0`, each Job `backoffLimit: 0`, k8s/slicing_checks.py): JobSet
   fails the check naming the first failed Job (jobset@v0.12.0 pkg/controllers/failure_policy.go),
   the Job controller ends its other pods, Kueue finishes its Workload, and the waiting check runs
   on the freed hosts.
2. `unhealthy_cube`: the second cube reads UNHEALTHY (every partition label, as a cube under repair
   reads; tests/standins/tpu_host.py) and the super-slice check, whose pods select HEALTHY cubes
   (settings/rules_recovery.py `healthy_selector`), is judged and left waiting, Kueue saying why.

What is not played: GKE's slice controller noticing the failed pod's slice (its stand-in only admits
and labels, tests/standins/slice_admission.py); a check's JobSet restarted (the program runs none: a
check that fails is reported once, for a person to read).
"""

from __future__ import annotations

import copy
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from k8s.slicing_checks import SERVICE_ACCOUNT
from plan import engine, manifests
from tests import control_plane as cp
from tests.standins import slice_topology, tpu_host
from tests.test_admission_oracle import (
    JOBSETS,
    SLICE_TOPOLOGY_ANNOTATION,
    Env,
    _clean,
    _condition,
    _stack_raw,
    _workloads,
    oracle_env,
)

# The late plane: its group keeps the two workers' sums closest (tests/suite_order.py, CONTRIBUTING.md).
pytestmark = pytest.mark.xdist_group(cp.LATE_XDIST_GROUP)

STACK, CUBES = "dev", 2
SHAPE = "2x2x4"
RECOVERY_TIMEOUT = 180.0


PARTITION_PREFIX = "cloud.google.com/gke-tpu-partition-"
SUPER, SUB = "superslicing-check", "subslicing-check"  # backends/dynamic_slicing.py: medium and low
CHECKS = {"subslicing": {"enabled": True, "topology": SHAPE, "replicas": 2},
          "superslicing": {"enabled": True, "topology": f"4x4x{4 * CUBES}"}}  # fmt: skip


@dataclass
class CheckStory:
    reason: str = ""  # the failed JobSet's Failed condition
    message: str = ""
    seconds: float = 0.0  # from the pod's failure to the waiting check running
    others: int = 0  # the super-slice's other pods Running when one of them died, which JobSet then ends
    finished: str | None = None  # the super-slice Workload's Finished condition
    error: str = ""


def check_jobsets(env: Env) -> dict[str, dict[str, Any]]:
    """The program's slicing-check JobSets for this plane's stack with both checks on, as rendered,
    plus what Kueue's and the slice controller's webhooks add on a real cluster: `suspend` and the
    topology request (tests/standins/slice_topology.py). Their ServiceAccount is applied."""
    raw, secret_keys = _stack_raw(STACK, CUBES)
    raw["tpu-slicing:checks"] = json.dumps(CHECKS)
    bodies = [b for _, b in manifests.objects(engine.run(raw, stack=STACK, secret_keys=secret_keys), masked=False)]
    account = next(b for b in bodies if b["kind"] == "ServiceAccount" and b["metadata"]["name"] == SERVICE_ACCOUNT)
    env.plane.apply(f"/api/v1/namespaces/{env.namespace}/serviceaccounts/{SERVICE_ACCOUNT}", account)
    found = {}
    for body in (copy.deepcopy(b) for b in bodies if b["kind"] == "JobSet"):
        assert body["metadata"]["namespace"] == env.namespace, body["metadata"]
        body["spec"]["suspend"] = True
        job = body["spec"]["replicatedJobs"][0]["template"]["spec"]
        annotations = job["template"]["metadata"]["annotations"]
        annotations.update(
            slice_topology.kueue_annotations(env.config.tpu.generation, annotations[SLICE_TOPOLOGY_ANNOTATION])
        )
        found[body["metadata"]["name"]] = body
    return found


def _check_pods(env: Env, name: str) -> list[dict[str, Any]]:
    query = {"labelSelector": f"jobset.sigs.k8s.io/jobset-name={name}"}
    return env.plane.request("GET", f"/api/v1/namespaces/{env.namespace}/pods", query=query)["items"]


def _running_pods(env: Env, name: str) -> list[dict[str, Any]]:
    return [p for p in _check_pods(env, name) if p.get("status", {}).get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")]  # fmt: skip


def _all_running(env: Env, body: dict[str, Any]) -> bool:
    job = body["spec"]["replicatedJobs"][0]
    return len(_running_pods(env, body["metadata"]["name"])) == job["replicas"] * job["template"]["spec"]["parallelism"]


def _die(env: Env, pod: dict[str, Any]) -> None:
    """The pod's process exits 1 mid-run: what its kubelet then reports for a `restartPolicy: Never`
    pod (kubernetes pkg/kubelet/kubelet_pods.go `getPhase`: every container terminated, one failed)."""
    container = pod["spec"]["containers"][0]
    status = {
        "phase": "Failed",
        "conditions": [{"type": "Ready", "status": "False", "reason": "PodFailed"}],
        "containerStatuses": [{
            "name": container["name"], "image": container["image"], "imageID": "", "ready": False,
            "restartCount": 0, "started": False,
            "state": {"terminated": {"exitCode": 1, "reason": "Error"}},
        }],
    }  # fmt: skip
    path = f"/api/v1/namespaces/{env.namespace}/pods/{pod['metadata']['name']}/status"
    env.plane.request("PATCH", path, {"status": status}, content_type=tpu_host.STRATEGIC)


def _mark_cube(env: Env, cube: int, state: str) -> None:
    """Every partition of `cube` reads `state` (GKE's partition state labels, tests/standins/tpu_host.py)."""
    for node, at in env.node_cube.items():
        if at == cube:
            states = [k for k in env.node_labels[node] if k.startswith(PARTITION_PREFIX) and k.endswith("-state")]
            body = {"metadata": {"labels": dict.fromkeys(states, state)}}
            env.plane.request("PATCH", f"/api/v1/nodes/{node}", body, content_type=tpu_host.MERGE)


def _refused_over_an_unhealthy_cube(env: Env) -> str:
    """The second cube reads UNHEALTHY, and the super-slice check, which needs both cubes HEALTHY, is
    judged and left waiting. Kueue's message, or what went wrong."""

    def refused() -> str | None:
        workload = _workloads(env).get(SUPER)
        reserved = next((c for c in (workload or {}).get("status", {}).get("conditions") or []
                         if c["type"] == "QuotaReserved"), None)  # fmt: skip
        return str(reserved.get("message") or "?") if reserved and reserved["status"] == "False" else None

    try:
        _mark_cube(env, 1, tpu_host.UNHEALTHY)
        env.plane.request("POST", f"{JOBSETS}/namespaces/{env.namespace}/jobsets", check_jobsets(env)[SUPER])
        said: str = env.plane.wait_for(f"{SUPER} judged over an UNHEALTHY cube", refused, RECOVERY_TIMEOUT, 0.2)
        _clean(env)
    except cp.ControlPlaneError as err:
        said = f"error: {err}"
    return said


def _run_checks(env: Env, told: CheckStory) -> None:
    bodies = check_jobsets(env)
    super_check, sub_check = bodies[SUPER], bodies[SUB]
    env.plane.request("POST", f"{JOBSETS}/namespaces/{env.namespace}/jobsets", super_check)
    env.plane.wait_for(f"{SUPER} running on both cubes", lambda: _all_running(env, super_check), RECOVERY_TIMEOUT)
    env.plane.request("POST", f"{JOBSETS}/namespaces/{env.namespace}/jobsets", sub_check)

    def judged_waiting() -> bool:
        workload = _workloads(env).get(SUB)
        return workload is not None and _condition(workload, "QuotaReserved") == "False"

    env.plane.wait_for(f"{SUB} judged and waiting", judged_waiting, RECOVERY_TIMEOUT, 0.2)
    running = _running_pods(env, SUPER)
    told.others = len(running) - 1
    started = time.monotonic()
    _die(env, running[0])

    def failed_and_replaced() -> bool:
        jobset = env.plane.request("GET", f"{JOBSETS}/namespaces/{env.namespace}/jobsets/{SUPER}")
        failed = next((c for c in jobset.get("status", {}).get("conditions") or [] if c["type"] == "Failed"), None)
        if not failed or failed["status"] != "True" or not _all_running(env, sub_check) or _running_pods(env, SUPER):
            return False
        told.reason, told.message = failed.get("reason", ""), failed.get("message", "")
        return True

    env.plane.wait_for(f"{SUPER} failed and {SUB} running", failed_and_replaced, RECOVERY_TIMEOUT, 0.2)
    told.seconds = time.monotonic() - started
    told.finished = _condition(_workloads(env).get(SUPER) or {}, "Finished")
    _clean(env)


@pytest.fixture(scope="module")
def env() -> Iterator[Env]:
    with oracle_env(STACK, CUBES) as running:
        yield running


@pytest.fixture(scope="module")
def checks(env: Env) -> CheckStory:
    told = CheckStory()
    started = time.monotonic()
    try:
        _run_checks(env, told)
    except cp.ControlPlaneError as err:
        told.error = str(err)
    print(f"\nchecks' story in {time.monotonic() - started:.0f} s: {told}", file=sys.stderr)
    return told


@pytest.fixture(scope="module")
def unhealthy_cube(env: Env, checks: CheckStory) -> str:
    """After the checks' story, which leaves both cubes free."""
    said = _refused_over_an_unhealthy_cube(env)
    print(f"\nthe super-slice check over an UNHEALTHY cube: {said}", file=sys.stderr)
    return said


def test_a_super_slice_check_whose_pod_dies_fails_once_naming_its_job_and_frees_both_cubes(checks: CheckStory) -> None:
    """The program's check JobSet is not restarted (maxRestarts 0, k8s/slicing_checks.py): JobSet
    v0.12.0 fails it at once naming the first failed Job (pkg/controllers/failure_policy.go), deletes
    its other pods, Kueue finishes its Workload, and the check that waited behind it runs."""
    assert not checks.error, checks.error
    assert checks.others == 4 * 4 * 4 * CUBES // 4 - 1, checks  # every other host of the slice had a pod
    assert checks.reason == "ReachedMaxRestarts", checks.reason
    assert f"(first failed job: {SUPER}-slice-0)" in checks.message, checks.message
    assert checks.finished == "True", checks


def test_a_super_slice_check_is_not_placed_across_an_unhealthy_cube(unhealthy_cube: str) -> None:
    """Its pods select HEALTHY cubes (settings/rules_recovery.py `healthy_selector`): with one of the
    two cubes UNHEALTHY, Kueue finds no place for it and says why."""
    assert "excluded: nodeSelector: 16" in unhealthy_cube, unhealthy_cube
