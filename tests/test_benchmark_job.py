"""The serving benchmark as the program registers it (workloads/benchmark_job.py) and the settings
that refuse what it cannot run (settings/benchmark.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from plan.engine import PlanResult
from tests.conftest import DevRunner, config_with, refusal

JOB = "kubernetes:batch/v1:Job"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
ACCOUNT = "kubernetes:core/v1:ServiceAccount"
BUCKET_MEMBER = "gcp:storage/bucketIAMMember:BucketIAMMember"
BENCHMARK = {"enabled": True, "rates": [1, 2], "repetitions": 2, "stageSeconds": 60, "inputTokens": 512}


def _benched(run_dev: DevRunner, **extra: Any) -> PlanResult:
    return run_dev({"serving": {"benchmark": {**BENCHMARK, **extra}}})


def _job(plan: PlanResult) -> Any:
    (job,) = [r for r in plan.of_type(JOB) if r.get("metadata.name") == "serving-benchmark"]
    return job


def test_off_by_default(dev_plan: PlanResult) -> None:
    assert [r for r in dev_plan.of_type(JOB) if r.get("metadata.name") == "serving-benchmark"] == []
    assert "benchmarkResult" not in dev_plan.outputs


def test_the_job_runs_after_the_smoke_test_and_is_bounded(run_dev: DevRunner) -> None:
    plan = _benched(run_dev)
    job = _job(plan)
    (smoke,) = [r for r in plan.of_type(JOB) if r.get("metadata.name") == "serving-smoke-test"]
    assert plan.depends_on(job, smoke)
    # 2 rates x 2 repetitions x 60 s, the tokenizer's load deadline, and per stage inference-perf's
    # 1 s pause and the 60 s an in-flight request may still run (requestTimeoutSeconds).
    assert job.get("spec.activeDeadlineSeconds") == 4 * 60 + 300 + 4 * (1 + 60)
    assert job.get("spec.backoffLimit") == 0
    pod = job.get("spec.template.spec")
    assert pod["serviceAccountName"] == "dev-serving-benchmark"  # the stack's own identity
    (container,) = pod["containers"]
    assert container["image"] == "quay.io/inference-perf/inference-perf:v0.7.0"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    tokenizer = next(v for v in pod["volumes"] if v["name"] == "tokenizer")
    assert tokenizer["csi"]["readOnly"] is True and tokenizer["csi"]["driver"] == "gcsfuse.csi.storage.gke.io"
    assert job.get("spec.template.metadata.annotations") == {"gke-gcsfuse/volumes": "true"}


def test_the_load_generator_is_configured_from_the_settings(run_dev: DevRunner) -> None:
    plan = _benched(run_dev, outputTokens=128)
    config_map = next(r for r in plan.of_type(CONFIG_MAP) if r.get("metadata.name") == "serving-benchmark")
    config = json.loads(config_map.get("data")["inference-perf.json"])
    assert [(s["rate"], s["duration"]) for s in config["load"]["stages"]] == [(1, 60), (1, 60), (2, 60), (2, 60)]
    assert config["data"]["input_distribution"]["mean"] == 512
    assert config["data"]["output_distribution"]["mean"] == 128
    assert config["api"] == {"type": "completion", "streaming": True}
    # Stated, not inference-perf's defaults (no request limit; the node's CPU count of workers), and the
    # pod asks a CPU for each worker.
    assert (config["load"]["request_timeout"], config["load"]["num_workers"]) == (60, 2)
    assert _job(plan).get("spec.template.spec")["containers"][0]["resources"]["requests"]["cpu"] == "2"
    assert config["server"]["model_name"] == config_with().serving.model.name
    assert set(config_map.get("data")) == {"inference-perf.json", "benchmark_run.py", "benchmark.py"}


def test_its_identity_writes_only_under_its_stacks_benchmarks(run_dev: DevRunner) -> None:
    plan = _benched(run_dev)
    members = [r for r in plan.of_type(BUCKET_MEMBER) if "BenchmarkAccess" in r.parent]
    writes = [m for m in members if m.get("role") == "roles/storage.objectUser"]
    assert len(members) == 3 and len(writes) == 1
    assert '/objects/benchmarks/dev/")' in writes[0].get("condition.expression")
    assert all(m.get("condition") is None for m in members if m not in writes)


def test_a_settings_change_reruns_the_benchmark_and_not_the_smoke_test(run_dev: DevRunner) -> None:
    one, two = _benched(run_dev), _benched(run_dev, stageSeconds=90)
    smoke = [
        next(r for r in plan.of_type(JOB) if r.get("metadata.name") == "serving-smoke-test") for plan in (one, two)
    ]
    assert smoke[0].get("metadata.annotations") == smoke[1].get("metadata.annotations")
    assert _job(one).get("metadata.annotations") != _job(two).get("metadata.annotations")


def test_the_result_is_a_stack_output(run_dev: DevRunner) -> None:
    plan = _benched(run_dev, runId="before-tp8")
    assert plan.outputs["benchmarkResult"].value == "gs://example-model-weights/benchmarks/dev/before-tp8/result.json"


@pytest.mark.parametrize(
    ("benchmark", "extra", "said"),
    [
        ({"inputTokens": 9000, "outputTokens": 512}, {}, "serving.benchmark.inputTokens: 9000 prompt and 512"),
        ({}, {"smokeTest": {"enabled": False}}, "serving.smokeTest.enabled is false"),
        ({"rates": [2, 2]}, {}, "is not a sweep"),
        ({"gate": {}}, {}, "a gate with no threshold"),
    ],
)
def test_what_it_cannot_run_is_refused(benchmark: dict[str, Any], extra: dict[str, Any], said: str) -> None:
    assert said in refusal({"serving": {"benchmark": {"enabled": True, **benchmark}, **extra}})
