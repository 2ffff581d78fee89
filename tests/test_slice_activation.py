"""A TPU slice that never becomes ACTIVE (issue 45, item 4): real Kueue v0.19.2 re-queues the group
at each activation timeout, after the slice controller's retry delay, and the program's smoke test
stops at once, naming the Workload and quoting Kueue, instead of retrying the gateway until its
deadline (hours: domain/serving_budget.py).

The plane has one cube and the program's Kueue objects (tests/test_admission_oracle.py `oracle_env`).
The serving LWS `vllm-decode` (the program's serving LWS, one 2x2x4 group) is submitted while the
slice controller stand-in (tests/standins/slice_admission.py) never activates its slice: at each
reservation it waits ACTIVATION_SECONDS, the controller's `--activation-timeout` shortened from the
program's 60 minutes, and answers the admission check Retry as the controller's source does: its
message ("Slices are in states: 1 STALE. Errors: <slice>: ... (stale)"), `requeueAfterSeconds` 10
(the default of `--retry-delay-on-slice-failure`, which the program does not set) and the
Workload's TPUSliceFailure condition. The program's own smoke-test Job, ServiceAccount, Role,
RoleBinding and ConfigMap (workloads/smoke_job.py) are applied as rendered; the stand-in kubelet
(tests/standins/smoke_pod.py) runs its script against a gateway that answers 503 (no model server
ready, which the script retries), with a real projected token of the Job's ServiceAccount: the
slice watch reads the Workloads through the API server's RBAC, with the Role's one rule. Kueue v0.19.2
holds the Workload, quota reserved, until the Retry's time plus the delay (status.requeueState.
requeueAt), then evicts it and queues it again at once. Once the smoke test has stopped, while
Kueue holds the group, the slice is let through: the next reservation, no sooner than the delay
after the Retry, is admitted, and TPUSliceFailure reads False ("Previously: ...").

What is not played: the real controller's timing and the Slice's own Ready message (GKE's); a Slice
object for the failed activation (the stand-in keeps Slices only for placed pods). Cost: about 50 s
with the plane's start, in the first plane group: the retry delay's 10 s are waited out once.
"""

from __future__ import annotations

import calendar
import copy
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from plan import manifests
from tests import control_plane as cp
from tests.standins import slice_admission as sa
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
    retries: list[sa.Answer] = field(default_factory=list)  # the stand-in's Retry answers
    # Per Retry, whole seconds from its lastTransitionTime to the next QuotaReserved one (both the
    # API's stamps on one clock), and seconds until the stand-in saw that reservation (monotonic).
    requeued: list[int] = field(default_factory=list)
    requeued_seen: list[float] = field(default_factory=list)
    requeue_at: str = ""  # status.requeueState.requeueAt while Kueue held the Workload for the delay
    job_failed_after: float = 0.0  # seconds from the first Retry to the smoke Job's failure
    message: str = ""  # the smoke pod's termination message (what `pulumi up` prints)
    evicted: str = ""  # Kueue's Evicted condition's message once the group was admitted again
    failure: dict[str, Any] = field(default_factory=dict)  # TPUSliceFailure while Kueue held the Workload
    failure_after: dict[str, Any] = field(default_factory=dict)  # and once it was admitted
    evictions: int = 0  # the Workload's evictions for admission checks, as Kueue counts them
    retry_count: int = 0  # the check's retryCount once admitted
    active: bool = True  # the Workload is not deactivated
    admitted_after: float = 0.0  # seconds from letting the slice through to Kueue's admission
    workloads: int = 0  # Workloads of the group at the end
    backoff_base: int = 0  # the program's kueue.recovery.backoffBaseSeconds
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


def _condition_of(workload: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (workload.get("status") or {}).get("conditions") or [] if c["type"] == kind), {})


def _seconds(stamp: str) -> int:
    """An API timestamp (RFC 3339, whole seconds, UTC) in seconds since the epoch."""
    return calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ"))


def _held_for_the_delay(env: Env) -> dict[str, Any] | None:
    """The Workload as Kueue holds it after a Retry: quota still reserved, the check Retry,
    TPUSliceFailure True and requeueAt set; None otherwise. Kueue v0.19.2 sets requeueAt first
    (pkg/controller/core/workload_controller.go `Reconcile`, `NeedsRequeueAtUpdate`), returns early
    while it is ahead ("Waiting for backoff to finish") and only then reaches
    `reconcileCheckBasedEviction`: the eviction comes once the delay is over, and the Workload is
    queued again at once. A read that misses the window meets the next Retry's (the slice is still
    stalled), ten seconds long each."""
    workload = _decode(env)
    if workload is None:
        return None
    held = _condition(workload, "QuotaReserved") == "True" and _condition(workload, "Evicted") != "True"
    retry = any(c.get("state") == "Retry" for c in (workload.get("status") or {}).get("admissionChecks") or [])
    failing = _condition_of(workload, sa.SLICE_FAILURE).get("status") == "True"
    requeue_at = ((workload.get("status") or {}).get("requeueState") or {}).get("requeueAt")
    return workload if held and retry and failing and requeue_at else None


def _job_failed(env: Env) -> bool:
    job = env.plane.request("GET", f"/apis/batch/v1/namespaces/{env.namespace}/jobs/{JOB_NAME}")
    return _condition(job, "Failed") == "True"


def _run(env: Env, story: Story) -> None:
    stand_in = env.running.stand_in
    assert stand_in is not None, "the slice controller stand-in is not running"
    stand_in.activation_timeout = ACTIVATION_SECONDS
    stand_in.stalled = {DECODE}
    story.backoff_base = env.config.kueue.recovery.backoff_base_seconds
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
        story.job_failed_after = time.monotonic() - stand_in.retries[0].at
        assert len(pods.ended) == 1, pods.ended
        # What `pulumi up` prints of a failed Job: its pod's termination message (workloads/smoke_job.py).
        (pod,) = env.plane.request(
            "GET", f"/api/v1/namespaces/{env.namespace}/pods", query={"labelSelector": f"job-name={JOB_NAME}"}
        )["items"]
        story.message = pod["status"]["containerStatuses"][0]["state"]["terminated"].get("message", "")
        # The Workload held for the controller's delay: what a person reads there meanwhile.
        held = env.plane.wait_for("the group held for the retry delay", lambda: _held_for_the_delay(env), TIMEOUT, 0.1)
        story.failure = _condition_of(held, sa.SLICE_FAILURE)
        story.requeue_at = held["status"]["requeueState"]["requeueAt"]

        # The slice comes up now: Kueue evicts the group once the delay is over, and its next
        # reservation is Ready and admitted.
        stand_in.stalled = set()
        released = time.monotonic()
        env.plane.wait_for(
            "the group admitted once its slice comes up",
            lambda: (w := _decode(env)) is not None and _condition(w, "Admitted") == "True",
            TIMEOUT + ACTIVATION_SECONDS,
            0.2,
        )
        story.admitted_after = time.monotonic() - released
        # Final: the stand-in writes nothing more to an admitted Workload, and every Retry came
        # before the reservation that was admitted (a Retried Workload is not admitted).
        workload = _decode(env)
        assert workload is not None
        name = workload["metadata"]["name"]
        story.retries = [r for r in stand_in.retries if r.workload == name]
        reservations = [r for r in stand_in.reservations if r.workload == name]
        for retry in story.retries:
            following = next((r for r in reservations if r.at > retry.at), None)
            if following is None:
                raise cp.ControlPlaneError(f"no reservation seen after the Retry of {retry}: {reservations}")
            story.requeued.append(_seconds(following.stamp) - _seconds(retry.stamp))
            story.requeued_seen.append(round(following.at - retry.at, 1))
        story.failure_after = _condition_of(workload, sa.SLICE_FAILURE)
        story.evicted = _condition_of(workload, "Evicted").get("message", "")  # "Previously: Evicted due to ..."
        story.evictions = _evictions(workload, "AdmissionCheck")
        story.retry_count = max(int(c.get("retryCount") or 0) for c in workload["status"]["admissionChecks"])
        story.active = workload["spec"].get("active", True) is not False
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
            f"{told.job_failed_after:.1f} s after the first Retry, re-reserved {told.requeued} s after each "
            f"Retry (seen after {told.requeued_seen} s), admitted {told.admitted_after:.1f} s after the slice "
            f"came up",
            file=sys.stderr,
        )
        yield told


def test_the_smoke_test_stops_at_the_failed_activation_naming_the_workload(story: Story) -> None:
    assert not story.error, story.error
    assert story.retries, "the stand-in never answered Retry"
    assert f"did not come up (admission check {STACK}-slice: " in story.message, story.message
    assert f"(LeaderWorkerSet {DECODE})" in story.message, story.message
    # What Kueue recorded, quoted: the slice controller's own words reach `pulumi up`.
    assert "Slices are in states: 1 STALE. Errors: " in story.message, story.message
    assert f"{sa.STALE_READY_MESSAGE} (stale)" in story.message, story.message
    assert "smoke test stopped:" in story.message, story.message
    print(f"\ntermination message:\n{story.message}", file=sys.stderr)
    # Long before the deadline the Job's script was given (the program's, hours).
    assert story.job_failed_after < TIMEOUT, story.job_failed_after


def test_the_workload_says_why_while_kueue_holds_it_for_the_retry_delay(story: Story) -> None:
    """TPUSliceFailure True, reason FormationTimeout, with the check's message (xpk slice/
    workload_controller.go `updateWorkloadStatus`); requeueAt is the Retry's transition time plus
    requeueAfterSeconds (kueue v0.19.2 pkg/workload/admissionchecks.go `GetMaxRetryTime`); Kueue's
    Evicted condition, once the delay is over, quotes the same words."""
    assert not story.error, story.error
    answered = {r.message for r in story.retries}
    assert story.failure.get("reason") == sa.FORMATION_TIMEOUT, story.failure
    assert story.failure.get("message") in answered, (story.failure, answered)
    assert story.failure["message"].startswith("Slices are in states: 1 STALE. Errors: "), story.failure
    stamps = {_seconds(r.stamp) for r in story.retries}
    assert _seconds(story.requeue_at) - sa.RETRY_DELAY_SECONDS in stamps, (story.requeue_at, story.retries)
    assert f'Evicted due to AdmissionCheck in Retry state: "{STACK}-slice" ({story.failure["message"]})' in (
        story.evicted
    ), story.evicted


def test_kueue_queues_the_group_again_after_the_retry_delay_at_each_failed_activation(
    story: Story,
) -> None:
    """No sooner than requeueAfterSeconds after each Retry (the stamps are whole seconds of one
    clock, and Kueue adds the delay to the Retry's), and well before Kueue's own requeuing backoff
    (the program's `kueue.recovery.backoffBaseSeconds`, for PodsReady evictions): the delay is the
    check's."""
    assert not story.error, story.error
    assert story.evictions == story.retry_count == len(story.retries) >= 1 and story.active, story
    assert story.requeued and all(sa.RETRY_DELAY_SECONDS <= s < story.backoff_base for s in story.requeued), (
        story.requeued
    )


def test_the_group_is_admitted_once_its_slice_comes_up_with_no_duplicate(story: Story) -> None:
    assert not story.error, story.error
    assert story.admitted_after > 0 and story.workloads == 1, story
    # The condition flipped at the Ready answer, kept as "Previously: <the Retry's message>".
    after = story.failure_after
    assert after.get("status") == "False" and after.get("reason") == sa.FORMATION_TIMEOUT, after
    assert after.get("message") == "Previously: " + story.failure["message"], after
