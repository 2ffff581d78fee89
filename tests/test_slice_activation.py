"""A TPU slice that never becomes ACTIVE (issue 45, item 4): real Kueue v0.19.2 re-queues the group
at each activation timeout, and the program's smoke test stops at once, naming the Workload and
quoting Kueue, instead of retrying the gateway until its deadline (hours: domain/serving_budget.py).

The plane has one cube and the program's Kueue objects (tests/test_admission_oracle.py `oracle_env`).
The serving LWS `vllm-decode` (the program's serving LWS, one 2x2x4 group) is submitted while the
slice controller stand-in (tests/standins/slice_admission.py) never activates its slice: at each
reservation it waits ACTIVATION_SECONDS, the controller's `--activation-timeout` shortened from the
program's 60 minutes, and answers the admission check Retry. The program's own smoke-test Job,
ServiceAccount, Role, RoleBinding and ConfigMap (workloads/smoke_job.py) are applied as rendered; the
stand-in kubelet (tests/standins/smoke_pod.py) runs its script against a gateway that answers 503
(no model server ready, which the script retries), with a real projected token of the Job's
ServiceAccount: the slice watch reads the Workloads through the API server's RBAC, with the Role's
one rule. Then the slice is let through, and Kueue admits the group.

What is not played: the real controller's message and timing; a Slice object for the failed
activation (the stand-in keeps Slices only for placed pods). Cost: about 40 s with the plane's start,
in the first plane group.
"""

from __future__ import annotations

import copy
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from plan import manifests
from tests import control_plane as cp
from tests.standins.smoke_pod import SmokePods
from tests.test_admission_oracle import (
    KUEUE,
    LWSS,
    Env,
    _condition,
    _path,
    _workloads,
    leader_worker_set,
    oracle_env,
)
from workloads.smoke_job import JOB_NAME
from workloads.vllm_pd import lws_name

# The first plane group: with it the two workers' sums stay closest (tests/suite_order.py, CONTRIBUTING.md).
pytestmark = pytest.mark.xdist_group(cp.XDIST_GROUP)

STACK, CUBES = "dev", 1
DECODE = lws_name("decode")
ACTIVATION_SECONDS = 3.0
TIMEOUT = 120.0
SMOKE_KINDS = ("ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Job")


@dataclass
class Story:
    retries: list[float] = field(default_factory=list)  # when the stand-in answered Retry (monotonic)
    requeued: list[float] = field(default_factory=list)  # seconds from each Retry to the next reservation
    job_failed_after: float = 0.0  # seconds from the first Retry to the smoke Job's failure
    message: str = ""  # the smoke pod's termination message (what `pulumi up` prints)
    evictions: int = 0  # the Workload's evictions for admission checks, as Kueue counts them
    active: bool = True  # the Workload is not deactivated
    admitted_after: float = 0.0  # seconds from letting the slice through to Kueue's admission
    workloads: int = 0  # Workloads of the group at the end
    error: str = ""


def _smoke_objects(env: Env) -> list[dict[str, Any]]:
    found = [
        manifests.integral(copy.deepcopy(b))
        for b in env.bodies
        if b["kind"] in SMOKE_KINDS and b["metadata"]["name"] == JOB_NAME
    ]
    assert sorted(b["kind"] for b in found) == sorted(SMOKE_KINDS), [b["kind"] for b in found]
    for body in found:
        assert body["metadata"]["namespace"] == env.namespace, "the smoke test is not in the serving namespace"
    return sorted(found, key=lambda b: SMOKE_KINDS.index(b["kind"]))


def _decode(env: Env) -> dict[str, Any] | None:
    return _workloads(env).get(f"{DECODE}/0")


def _evictions(workload: dict[str, Any], reason: str) -> int:
    stats = (workload.get("status") or {}).get("schedulingStats") or {}
    return sum(e.get("count", 0) for e in stats.get("evictions") or [] if e.get("reason") == reason)


def _job_failed(env: Env) -> bool:
    job = env.plane.request("GET", f"/apis/batch/v1/namespaces/{env.namespace}/jobs/{JOB_NAME}")
    return _condition(job, "Failed") == "True"


def _run(env: Env, story: Story) -> None:
    stand_in = env.running.stand_in
    assert stand_in is not None, "the slice controller stand-in is not running"
    stand_in.activation_timeout = ACTIVATION_SECONDS
    stand_in.stalled = {DECODE}
    pods = SmokePods(env.plane, env.namespace, JOB_NAME, unavailable=True)
    pods.failing = True  # run the script, against the gateway that answers 503
    pods.start()
    try:
        for body in _smoke_objects(env):
            env.plane.apply(_path(body), body)
        env.plane.request(
            "POST",
            f"{LWSS}/namespaces/{env.namespace}/leaderworkersets",
            leader_worker_set(env, DECODE, "high", "2x2x4", 1),
        )
        env.plane.wait_for("the smoke Job failed", lambda: _job_failed(env), TIMEOUT, 0.2)
        story.retries = [at for _, at in stand_in.retries]
        story.job_failed_after = time.monotonic() - story.retries[0]
        assert len(pods.ended) == 1, pods.ended
        # What `pulumi up` prints of a failed Job: its pod's termination message (workloads/smoke_job.py).
        (pod,) = env.plane.request(
            "GET", f"/api/v1/namespaces/{env.namespace}/pods", query={"labelSelector": f"job-name={JOB_NAME}"}
        )["items"]
        story.message = pod["status"]["containerStatuses"][0]["state"]["terminated"].get("message", "")
        # Kueue queued the group again after each Retry: the next reservation, as the stand-in saw it
        # begin (it is woken by the Workload's change), follows every Retry so far.
        retried = len(stand_in.retries)
        env.plane.wait_for(
            "a reservation after the last Retry",
            lambda: any(at > stand_in.retries[retried - 1][1] for _, at in stand_in.activations),
            TIMEOUT,
            0.1,
        )
        story.requeued = [
            round(min(at for _, at in stand_in.activations if at > retry) - retry, 2)
            for _, retry in stand_in.retries[:retried]
        ]
        workload = _decode(env)
        assert workload is not None
        story.evictions = _evictions(workload, "AdmissionCheck")
        story.active = workload["spec"].get("active", True) is not False

        # The slice comes up now: the next reservation's check is Ready and Kueue admits the group.
        stand_in.stalled = set()
        released = time.monotonic()
        env.plane.wait_for(
            "the group admitted once its slice comes up",
            lambda: (w := _decode(env)) is not None and _condition(w, "Admitted") == "True",
            TIMEOUT + ACTIVATION_SECONDS,
            0.2,
        )
        story.admitted_after = time.monotonic() - released
        story.workloads = sum(
            1
            for w in env.plane.request("GET", f"{KUEUE}/namespaces/{env.namespace}/workloads")["items"]
            for o in w["metadata"].get("ownerReferences") or []
            if o["kind"] == "LeaderWorkerSet" and o["name"] == DECODE
        )
    finally:
        pods.stop()
        pods.server.shutdown()
        pods.server.server_close()


@pytest.fixture(scope="module")
def story() -> Iterator[Story]:
    told = Story()
    with oracle_env(STACK, CUBES) as env:
        started = time.monotonic()
        try:
            _run(env, told)
        except cp.ControlPlaneError as err:
            told.error = str(err)
        print(
            f"\nslice activation story in {time.monotonic() - started:.0f} s: smoke Job failed "
            f"{told.job_failed_after:.1f} s after the first Retry, re-queued in {told.requeued}, "
            f"admitted {told.admitted_after:.1f} s after the slice came up",
            file=sys.stderr,
        )
        yield told


def test_the_smoke_test_stops_at_the_failed_activation_naming_the_workload(story: Story) -> None:
    assert not story.error, story.error
    assert story.retries, "the stand-in never answered Retry"
    assert f"did not come up (admission check {STACK}-slice: " in story.message, story.message
    assert f"(LeaderWorkerSet {DECODE})" in story.message, story.message
    # What Kueue recorded, quoted: the slice controller's own words reach `pulumi up`.
    assert "did not become ACTIVE within the activation timeout" in story.message, story.message
    assert "smoke test stopped:" in story.message, story.message
    print(f"\ntermination message:\n{story.message}", file=sys.stderr)
    # Long before the deadline the Job's script was given (the program's, hours).
    assert story.job_failed_after < TIMEOUT, story.job_failed_after


def test_kueue_queues_the_group_again_at_each_failed_activation(story: Story) -> None:
    assert not story.error, story.error
    assert story.evictions >= 1 and story.active, story
    # Each Retry is followed by a new reservation (a new activation), long before another timeout.
    assert story.requeued and all(seconds < ACTIVATION_SECONDS for seconds in story.requeued), story.requeued


def test_the_group_is_admitted_once_its_slice_comes_up_with_no_duplicate(story: Story) -> None:
    assert not story.error, story.error
    assert story.admitted_after > 0 and story.workloads == 1, story
