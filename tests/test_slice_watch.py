"""The smoke test's slice watch (pods/slice_watch.py) and its place in the retry loop
(pods/smoke_request.py `pause`): a TPU slice that failed to come up stops the test at once.

The Workloads here are shaped as Kueue v0.19.2 writes them (apis/kueue/v1beta2/workload_types.go:
`status.admissionChecks[]` with `name`, `state`, `message`, `retryCount`; the Evicted condition of
pkg/controller/core/workload_controller.go `reconcileCheckBasedEviction`; the owner reference of
pkg/controller/jobs/leaderworkerset/leaderworkerset_reconciler.go). Real Kueue writing them, and the
watch reading them with the pod's own token, is tests/test_slice_activation.py.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from pods import slice_watch as sw
from pods import smoke_request as smoke

CHECK = "tpu-slice"
SETTINGS = sw.Settings(
    check=CHECK,
    owners=frozenset({"vllm-prefill", "vllm-decode"}),
    namespace="serving",
    api_url="https://10.0.0.1:443",
    credentials=Path("/nowhere"),
)
RETRY_MESSAGE = "Evicted due to AdmissionCheck in Retry state: tpu-slice: slice did not become ACTIVE"


def workload(
    name: str = "leaderworkerset-vllm-decode-0-1a2b3",
    *,
    owner: str = "vllm-decode",
    kind: str = "LeaderWorkerSet",
    state: str = "Ready",
    retries: int | None = None,
    evicted: tuple[str, str] | None = None,
    uid: str | None = None,
) -> dict[str, Any]:
    check: dict[str, Any] = {"name": CHECK, "state": state, "message": f"check {state}", "lastTransitionTime": "t"}
    if retries is not None:
        check["retryCount"] = retries
    conditions = []
    if evicted is not None:
        status, message = evicted
        conditions.append({"type": "Evicted", "status": status, "reason": "AdmissionCheck", "message": message})
    return {
        "metadata": {
            "name": name,
            "namespace": "serving",
            "uid": uid or f"uid-{name}",
            "ownerReferences": [{"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": kind, "name": owner}],
        },
        "status": {"admissionChecks": [check], "conditions": conditions},
    }


def test_a_check_in_retry_now_is_a_failure_quoting_kueue() -> None:
    evicting = workload(state="Retry", evicted=("True", RETRY_MESSAGE))
    (line,) = sw.failures([evicting], SETTINGS, baseline={})
    assert "Workload serving/leaderworkerset-vllm-decode-0-1a2b3 (LeaderWorkerSet vllm-decode)" in line
    assert "1 failed activation, the group queued again" in line
    assert line.endswith(f"Kueue said: {RETRY_MESSAGE}")


def test_a_retry_since_the_start_is_seen_after_kueue_admitted_the_group_again() -> None:
    """Kueue resets the check to Pending and counts the retry; once quota is reserved again the
    Evicted condition is False, its message kept as "Previously: ..."."""
    before = workload(retries=None)
    again = workload(state="Ready", retries=1, evicted=("False", f"Previously: {RETRY_MESSAGE}"))
    baseline = sw.retry_counts([before], SETTINGS)
    assert baseline == {"uid-leaderworkerset-vllm-decode-0-1a2b3": 0}
    (line,) = sw.failures([again], SETTINGS, baseline)
    assert line.endswith(f"Kueue said: Previously: {RETRY_MESSAGE}")


def test_retries_before_the_start_are_not_this_tests_failures() -> None:
    old = workload(retries=2, evicted=("False", f"Previously: {RETRY_MESSAGE}"))
    baseline = sw.retry_counts([old], SETTINGS)
    assert sw.failures([old], SETTINGS, baseline) == []
    twice_more = workload(retries=4, state="Pending")
    (line,) = sw.failures([twice_more], SETTINGS, baseline)
    assert "2 failed activations" in line and "Kueue said: check Pending" in line


def test_a_workload_created_since_the_start_counts_from_zero() -> None:
    new = workload("leaderworkerset-vllm-prefill-1-9z", owner="vllm-prefill", retries=1)
    (line,) = sw.failures([new], SETTINGS, baseline={"uid-other": 0})
    assert "(LeaderWorkerSet vllm-prefill)" in line


def test_a_rejected_check_says_the_workload_is_deactivated() -> None:
    (line,) = sw.failures([workload(state="Rejected")], SETTINGS, baseline={})
    assert "rejected: Kueue deactivates the Workload" in line


@pytest.mark.parametrize(
    "other",
    [
        workload(owner="batch-jobset", state="Retry"),  # another owner
        workload(kind="JobSet", owner="vllm-decode", state="Retry"),  # another kind of the same name
        {"metadata": {"name": "x", "uid": "x", "ownerReferences": []}, "status": {}},  # no owner, no checks
        workload(state="Pending"),  # not failed
    ],
)
def test_other_workloads_and_healthy_checks_are_not_failures(other: dict[str, Any]) -> None:
    assert sw.failures([other], SETTINGS, baseline={}) == []


def test_a_long_message_is_cut_for_the_termination_message() -> None:
    long = workload(state="Retry", evicted=("True", "x " * 2000))
    (line,) = sw.failures([long], SETTINGS, baseline={})
    assert len(line) < 700 and line.endswith("...")


def test_settings_come_from_the_environment_and_name_what_is_missing() -> None:
    env = {
        "SMOKE_SLICE_CHECK": CHECK,
        "SMOKE_SLICE_OWNERS": "vllm-prefill, vllm-decode",
        "SMOKE_KUBE_API_DIR": "/var/run/kube",
        "SMOKE_NAMESPACE": "serving",
        "KUBERNETES_SERVICE_HOST": "fd00::1",
        "KUBERNETES_SERVICE_PORT": "443",
    }
    settings = sw.settings_from_env(env)
    assert settings == sw.Settings(
        CHECK, frozenset({"vllm-prefill", "vllm-decode"}), "serving", "https://[fd00::1]:443", Path("/var/run/kube")
    )
    assert sw.settings_from_env({}) is None
    with pytest.raises(sw.WatchError, match="SMOKE_SLICE_OWNERS, SMOKE_NAMESPACE, KUBERNETES_SERVICE_HOST"):
        sw.settings_from_env({"SMOKE_SLICE_CHECK": CHECK, "SMOKE_KUBE_API_DIR": "/d", "KUBERNETES_SERVICE_PORT": "1"})


class Reads:
    """What the API answers, one list per call; an exception is raised instead."""

    def __init__(self, *answers: list[dict[str, Any]] | Exception) -> None:
        self.answers = list(answers)

    def __call__(self, settings: sw.Settings) -> list[dict[str, Any]]:
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_the_watch_reads_a_baseline_then_stops_on_a_new_failure_and_logs_read_errors_once() -> None:
    logs: list[str] = []
    old = workload(retries=1)
    failed = workload(retries=2, evicted=("False", f"Previously: {RETRY_MESSAGE}"))
    reads = Reads([old], PermissionError("403 Forbidden"), PermissionError("403 Forbidden"), [old], [failed])
    watch = sw.SliceWatch(SETTINGS, logs.append, read=reads)
    watch.start()
    assert watch() is None and watch() is None  # the read errors never stop the test
    assert watch() is None  # the same retry count as at the start
    stopped = watch()
    assert stopped is not None and "1 failed activation" in stopped
    assert [line for line in logs if "cannot read" in line] == [
        "slice watch: cannot read the Workloads (PermissionError: 403 Forbidden); the requests go on"
    ]


def test_without_a_first_read_the_baseline_is_the_first_good_one() -> None:
    watch = sw.SliceWatch(SETTINGS, lambda _line: None, read=Reads(OSError("refused"), [workload(retries=3)]))
    watch.start()
    assert watch() is None  # counts from here
    assert watch.baseline == {"uid-leaderworkerset-vllm-decode-0-1a2b3": 3}


# --- in the smoke test's retry loop ---------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.t = 0.0
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += seconds


def test_the_waits_ask_the_watch_every_few_seconds_and_stop_when_it_answers() -> None:
    clock = Clock()
    answers = iter([None, None, None, "TPU slice for Workload serving/w did not come up"])
    posts: list[str] = []

    def post(url: str, body: bytes, timeout: float) -> smoke.Response:
        posts.append(url)
        return smoke.Response(status=503, body=b"no healthy upstream", error=None)

    runtime = smoke.Runtime(
        post=post, now=clock.now, sleep=clock.sleep, rand=lambda: 0.0, log=lambda _l: None, watch=lambda: next(answers)
    )
    out = io.StringIO()
    argv = ["--base-url", "http://gw", "--model", "m", "--deadline-seconds", "36000", "--initial-backoff-seconds", "8"]
    code = smoke.main(argv, env={}, runtime=runtime, out=out)
    assert code == smoke.EXIT_FAILED
    summary = json.loads(out.getvalue())
    assert summary["error"] == "stopped: TPU slice for Workload serving/w did not come up"
    # One request, then the 8 s wait asked at 0, 5 and 8 s; the second request, then the watch stops it.
    assert len(posts) == 2 and clock.sleeps == [5.0, 3.0]


def test_without_a_watch_the_wait_is_one_sleep() -> None:
    clock = Clock()
    smoke.pause(12.5, smoke.Runtime(now=clock.now, sleep=clock.sleep))
    assert clock.sleeps == [12.5]


def test_a_watch_asked_for_without_its_settings_is_a_usage_error() -> None:
    out = io.StringIO()
    env = {"SMOKE_SLICE_CHECK": CHECK, "SMOKE_BASE_URL": "http://gw", "SMOKE_MODEL": "m"}
    code = smoke.main([], env=env, runtime=smoke.Runtime(log=lambda _l: None), out=out)
    assert code == smoke.EXIT_USAGE
    assert "SMOKE_SLICE_CHECK is set, so SMOKE_SLICE_OWNERS" in json.loads(out.getvalue())["error"]
