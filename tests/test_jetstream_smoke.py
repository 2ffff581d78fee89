"""JetStream's serving proof: the smoke Job `pulumi up` waits for, sending one completion through
jetstream-http (pods/smoke_request.py `--api jetstream`), bounded by domain/serving_budget.py."""

from __future__ import annotations

from typing import Any

import pytest

from backends.jetstream import TESTED_IMAGES
from contracts import network_policies as np
from domain.serving_budget import BUDGET, ENGINE_READY_TIMEOUT_SECONDS, ServingBudget
from plan import engine
from plan.engine import PlanResult
from settings.model import Versions
from tests.test_backends import LWS, _serving, run
from tests.test_jetstream_bodies import multi
from tests.test_serving import FINGERPRINT
from workloads import jetstream as js
from workloads.smoke_job import JOB_NAME, SCRIPT

JOB = "kubernetes:batch/v1:Job"
POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
SKIP_AWAIT = js.SKIP_AWAIT


@pytest.fixture(scope="module")
def jetstream() -> PlanResult:
    return engine.run_stack("jetstream-v5e")


def _env(job: engine.Resource) -> dict[str, str]:
    return {e["name"]: e["value"] for e in job.get("spec.template.spec.containers.0.env")}


def _leader_http(plan: PlanResult) -> dict[str, Any]:
    spec = plan.one(LWS).get("spec.leaderWorkerTemplate.leaderTemplate.spec")
    return next(c for c in spec["containers"] if c["name"] == "jetstream-http")


def test_the_job_sends_one_completion_through_jetstream_http(jetstream: PlanResult) -> None:
    job = jetstream.one(JOB)
    assert job.get("metadata.name") == JOB_NAME and job.get("metadata.namespace") == "jetstream"
    assert _env(job) == {
        # The Service's DNS name: its cluster IP reaches the leaders' jetstream-http (port 8000).
        "SMOKE_BASE_URL": "http://jetstream-svc.jetstream.svc:8000",
        "SMOKE_API": "jetstream",  # POST /generate {"prompt", "max_tokens"} -> {"response": text}
        "SMOKE_MODEL": "llama2-70b",
        "SMOKE_DEADLINE_SECONDS": str(BUDGET.jetstream_smoke_deadline_seconds),
    }
    container = job.get("spec.template.spec.containers.0")
    assert container["command"] == ["python3", "/opt/smoke-test/smoke_request.py"]
    script = jetstream.one("kubernetes:core/v1:ConfigMap", "script")
    assert script.get("data") == {"smoke_request.py": SCRIPT.read_text()}
    # The pinned image the vLLM smoke Job uses: plain Python, by digest.
    assert container["image"] == Versions().smoke_test_image
    assert "@sha256:" in container["image"]


def test_up_waits_for_the_job_and_fails_with_its_last_lines(jetstream: PlanResult) -> None:
    job = jetstream.one(JOB)
    # No skipAwait: pulumi-kubernetes waits for the Job to complete and fails `up` when it fails.
    assert SKIP_AWAIT not in (job.get("metadata.annotations") or {})
    assert job.get("spec.backoffLimit") == 0
    assert job.get("spec.template.spec.restartPolicy") == "Never"
    container = job.get("spec.template.spec.containers.0")
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    # The Job outlives its program's own deadline, and waits for what it proves.
    assert job.get("spec.activeDeadlineSeconds") > BUDGET.jetstream_smoke_deadline_seconds
    assert jetstream.depends_on(job, jetstream.one(LWS))
    assert job.replace_on_changes == ["*"] and job.delete_before_replace
    # The servers skip their own await: the Job is the proof.
    assert jetstream.one(LWS).get("metadata.annotations")[SKIP_AWAIT] == "true"


def test_the_deadline_outlasts_the_pull_and_the_servers_startup(jetstream: PlanResult) -> None:
    probe = _leader_http(jetstream)["startupProbe"]
    startup = probe["periodSeconds"] * probe["failureThreshold"]
    deadline = int(_env(jetstream.one(JOB))["SMOKE_DEADLINE_SECONDS"])
    assert startup >= BUDGET.jetstream_load_seconds + BUDGET.startup_margin_seconds
    assert deadline >= BUDGET.admission_and_pull_seconds + startup
    # The MaxText load is the engine figure, which covers GKE's JetStream + Pathways tutorial's
    # 405B startup window (600 s delay + 10000 x 1 s).
    assert BUDGET.jetstream_load_seconds == ENGINE_READY_TIMEOUT_SECONDS >= 600 + 10000


def test_the_jetstream_budget_sums_its_parts() -> None:
    budget = ServingBudget(jetstream_load_seconds=100, startup_margin_seconds=10, admission_and_pull_seconds=1000)
    assert budget.jetstream_startup_seconds == 110
    assert budget.jetstream_startup_failures == 4  # 110 s at 30 s, rounded up
    assert budget.jetstream_smoke_deadline_seconds == 1110


def test_the_job_runs_least_privileged(jetstream: PlanResult) -> None:
    job = jetstream.one(JOB)
    spec = job.get("spec.template.spec")
    assert spec["serviceAccountName"] == JOB_NAME and spec["automountServiceAccountToken"] is False
    account = jetstream.one("kubernetes:core/v1:ServiceAccount", "service-account")
    assert account.get("metadata.name") == JOB_NAME and account.get("automountServiceAccountToken") is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    security = spec["containers"][0]["securityContext"]
    assert security == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    # No Google identity: no Workload Identity grant names the Job's account.
    members = [m.get("member") for m in jetstream.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")]
    assert not [m for m in members if isinstance(m, str) and f"/sa/{JOB_NAME}" in m]


def test_the_job_may_reach_jetstream_http_and_nothing_else(jetstream: PlanResult) -> None:
    policy = next(p for p in jetstream.of_type(POLICY) if p.get("metadata.name") == "jetstream-http-from-smoke-test")
    assert policy.get("spec") == {
        "podSelector": {"matchLabels": js.server_labels()},
        "policyTypes": ["Ingress"],
        "ingress": [
            {
                "from": [{"podSelector": {"matchLabels": {np.JOB_NAME_LABEL: JOB_NAME}}}],
                "ports": [{"protocol": "TCP", "port": js.HTTP_PORT}],
            }
        ],
    }
    # Registered before the Job's pod can run.
    assert jetstream.depends_on(jetstream.one(JOB), policy)


def test_no_smoke_job_means_no_allowance() -> None:
    names = [a.name for a in js.network_allowances(multi("v5e", "4x8"))]
    assert "jetstream-http-from-smoke-test" not in names


@pytest.mark.parametrize(
    ("change", "reruns"),
    [
        (
            {"versions": {"jetstreamHttpImage": "us-docker.pkg.dev/cloud-tpu-images/inference/jetstream-http:v0.2.4"}},
            True,
        ),
        ({"serving": {"jetstream": {"maxTargetLength": 4096}}}, True),
        ({"serving": {"smokeTest": {"runId": "again-1"}}}, True),  # the README's way to re-run it
        ({"serving": {"slices": 1}}, False),  # capacity only
        ({"versions": {"vllmImage": "docker.io/vllm/vllm-tpu:v0.26.1"}}, False),  # another backend's image
    ],
)
def test_the_job_reruns_when_what_it_tests_changes(jetstream: PlanResult, change: dict[str, Any], reruns: bool) -> None:
    overrides: dict[str, Any] = {}
    if "versions" in change:
        overrides["versions"] = change["versions"]
    if "serving" in change:
        serving = _serving("jetstream-v5e")
        for key, value in change["serving"].items():
            serving[key] = {**serving.get(key, {}), **value} if isinstance(value, dict) else value
        overrides["serving"] = serving
    after = run("jetstream-v5e", overrides).one(JOB)
    before = jetstream.one(JOB)
    changed = before.get("metadata.annotations")[FINGERPRINT] != after.get("metadata.annotations")[FINGERPRINT]
    assert changed is reruns


def test_serving_smoke_test_turns_the_job_off_or_sets_its_deadline() -> None:
    serving = _serving("jetstream-v5e")
    off = run("jetstream-v5e", {"serving": {**serving, "smokeTest": {"enabled": False}}})
    assert off.of_type(JOB) == []
    names = [p.get("metadata.name") for p in off.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")]
    assert not any("smoke" in n for n in names), names
    longer = BUDGET.smoke_deadline_min_seconds + 600
    job = run("jetstream-v5e", {"serving": {**serving, "smokeTest": {"deadlineSeconds": longer}}}).one(JOB)
    assert _env(job)["SMOKE_DEADLINE_SECONDS"] == str(longer)


def test_every_image_the_fingerprint_reads_is_a_pin() -> None:
    assert set(Versions.model_fields) >= TESTED_IMAGES


def test_pathways_pools_keep_workload_identity_as_the_readme_says(jetstream: PlanResult) -> None:
    """The decision in README ("Pathways and Workload Identity"): the TPU pools stay in GKE_METADATA
    mode and the pods' Kubernetes account holds the bucket grants, not the node service account.
    GKE's JetStream + Pathways tutorial runs GCE_METADATA; if a real slice shows that is needed,
    this test changes with the pools and the grants."""
    pools = [p for p in jetstream.of_type("gcp:container/nodePool:NodePool") if p.name.startswith("cube-")]
    assert pools and {p.get("nodeConfig.workloadMetadataConfig.mode") for p in pools} == {"GKE_METADATA"}
    members = {str(m.get("member")) for m in jetstream.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")}
    assert members and all(m.endswith("/ns/jetstream/sa/jetstream-v5e-jetstream") for m in members), members
