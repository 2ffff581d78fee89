"""The YAML the plan writes for review is what a real API server accepts, field for field.

`python -m plan --out DIR` writes every Kubernetes object of a stack as YAML (plan/manifests.py) so
a reviewer can read, diff or apply it. Each file of every committed stack is created here on the
local plane's kube-apiserver with a server-side dry run and strict field validation, after the
CRDs the objects use (Kueue, JobSet and LWS from `make controlplane`, Gateway API, the inference
extension and GKE's own kinds from the GKE stand-in): a float where the API wants an integer
(`port: 9100.0`), an unknown field or a kind no CRD serves is refused. Namespaces are created for
real (a dry-run object needs its namespace); nothing else is stored. Helm release files are the
program's own record of a chart, not an object, and are skipped.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from plan import engine, manifests, stacks
from tests import control_plane as cp
from tests import controllers
from tests.conftest import dev_raw, merged
from tests.standins import benchmark_pod, gcs_uploads, gke_addons, vllm_openai

pytestmark = pytest.mark.xdist_group(cp.XDIST_GROUP)  # one plane at a time (tests/control_plane.py)

STACKS = sorted(stacks.stack_files())


@pytest.fixture(scope="module")
def plane() -> Iterator[cp.ControlPlane]:
    dev = cp.load_stack("dev")
    # dev's nodes and no pod-complete Stage: the benchmark Job's pod runs there until its stand-in
    # kubelet ends it (the dry runs store nothing, so neither matters to them).
    with cp.control_plane(
        cp.stack_nodes(dev), service_cidr=str(dev.network.service_cidr), complete_jobs=False
    ) as running:
        controllers.install_crds(running)
        gke_addons.install(running, dev.versions.gateway_api_inference_extension)
        yield running


def _resources(plane: cp.ControlPlane, api_version: str, cache: dict[str, Any]) -> list[dict[str, Any]]:
    if api_version not in cache:
        path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        cache[api_version] = plane.request("GET", path)["resources"]
    return cache[api_version]


def _collection(plane: cp.ControlPlane, obj: dict[str, Any], cache: dict[str, Any]) -> str:
    api_version, kind = obj["apiVersion"], obj["kind"]
    found = [r for r in _resources(plane, api_version, cache) if r["kind"] == kind and "/" not in r["name"]]
    assert found, f"the API server serves no {kind} in {api_version}"
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    if found[0]["namespaced"]:
        return f"{base}/namespaces/{obj['metadata']['namespace']}/{found[0]['name']}"
    return f"{base}/{found[0]['name']}"


def _written(stack: str, folder: Path) -> list[tuple[Path, dict[str, Any]]]:
    done = subprocess.run(
        [sys.executable, "-m", "plan", "--stack", stack, "--out", str(folder)],
        cwd=engine.ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    objects = []
    for path in sorted(folder.glob("*.yaml")):
        if "--helm-release--" in path.name:
            continue
        for document in yaml.safe_load_all(path.read_text()):
            if document:
                objects.append((path, document))
    assert objects, f"{stack}: the plan wrote no objects"
    return objects


@pytest.mark.parametrize("stack", STACKS)
def test_every_review_file_passes_a_server_side_dry_run(stack: str, plane: cp.ControlPlane, tmp_path: Path) -> None:
    objects = _written(stack, tmp_path / stack)
    for name in sorted({o["metadata"]["namespace"] for _, o in objects if o["metadata"].get("namespace")}):
        plane.ensure_namespace(name)
    cache: dict[str, Any] = {}
    refused = []
    for path, obj in objects:
        if obj["kind"] == "Namespace":
            continue  # created above, for real
        try:
            plane.request(
                "POST", _collection(plane, obj, cache), obj, query={"dryRun": "All", "fieldValidation": "Strict"}
            )
        except cp.ApiError as err:
            if err.status == 409:  # AlreadyExists: a ServiceAccount `default` and the like
                continue
            refused.append(f"{path.name}: {err}")
    assert refused == [], "\n".join(refused)


def _optional_parts(benchmark: dict[str, Any]) -> list[dict[str, Any]]:
    raw, secrets = dev_raw()
    autoscaling = {"min": 2, "max": 6, "metric": "vllm:num_requests_waiting", "target": 4, "scaleUpTolerance": 0.05}
    overrides = {"serving": {"benchmark": {"enabled": True, **benchmark}, "decode": {"autoscaling": autoscaling}}}
    result = engine.run(merged(overrides, raw), stack="dev", secret_keys=secrets)
    return [manifests.integral(body) for _, body in manifests.objects(result, masked=True)]


def test_the_optional_serving_parts_pass_a_server_side_dry_run(plane: cp.ControlPlane) -> None:
    """What no committed stack turns on: the benchmark Job (its CSI volume of the FUSE driver, its
    ConfigMap of three files) and autoscaled roles, as `plan --out` writes them."""
    objects = _optional_parts({})
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert {("Job", "serving-benchmark"), ("HorizontalPodAutoscaler", "vllm-decode")} <= kinds
    for name in sorted({o["metadata"]["namespace"] for o in objects if o["metadata"].get("namespace")}):
        plane.ensure_namespace(name)
    cache: dict[str, Any] = {}
    refused, kept = [], {}
    for obj in objects:
        if obj["kind"] == "Namespace":
            continue
        try:
            kept[(obj["kind"], obj["metadata"]["name"])] = plane.request(
                "POST", _collection(plane, obj, cache), obj, query={"dryRun": "All", "fieldValidation": "Strict"}
            )
        except cp.ApiError as err:
            if err.status != 409:
                refused.append(f"{obj['kind']} {obj['metadata']['name']}: {err}")
    assert refused == [], "\n".join(refused)
    # A field behind a feature gate that is off is dropped without an error, so the HPA's own
    # tolerance is read back: HPAConfigurableTolerance is beta and on at v1.36.3.
    hpa = kept[("HorizontalPodAutoscaler", "vllm-decode")]
    assert hpa["spec"]["behavior"]["scaleUp"]["tolerance"] == "50m", hpa["spec"]["behavior"]


def test_the_benchmark_job_runs_to_completion_on_the_plane(plane: cp.ControlPlane, tmp_path: Path) -> None:
    """The benchmark's ConfigMap, ServiceAccount and Job as the plan writes them, created for real: the
    Job controller starts its pod, kwok runs it, the pod's program runs against the vLLM stand-in
    (tests/standins/benchmark_pod.py) and uploads its result, and the Job completes; the result is
    one `plan benchmark compare` reads. Cost: about 40 s (two 10-second stages)."""
    python = benchmark_pod.loadgen_python()
    if python is None:
        pytest.skip("inference-perf missing: run `make loadgen`")
    objects = _optional_parts({"rates": [4], "repetitions": 2, "stageSeconds": 10, "runId": "plane"})
    # dev's own benchmark identity and prefix (namePrefix dev, settings/naming.py).
    names = {
        ("ConfigMap", "serving-benchmark"),
        ("ServiceAccount", "dev-serving-benchmark"),
        ("Job", "serving-benchmark"),
    }
    wanted = [o for o in objects if (o["kind"], o["metadata"]["name"]) in names]
    assert len(wanted) == 3
    namespace = wanted[0]["metadata"]["namespace"]
    plane.ensure_namespace(namespace)
    model = json.loads(next(o for o in wanted if o["kind"] == "ConfigMap")["data"]["inference-perf.json"])
    cache: dict[str, Any] = {}
    with gcs_uploads.storage("example-model-weights", "benchmarks/dev/") as gcs:
        pods = benchmark_pod.BenchmarkPods(
            plane,
            namespace,
            "serving-benchmark",
            python=python,
            model=model["server"]["model_name"],
            speed=vllm_openai.Speed(0.02, 0.002),
            storage_host=gcs.host,
        )
        pods.start()
        try:
            for obj in sorted(wanted, key=lambda o: o["kind"] == "Job"):  # the Job last, after what it mounts
                plane.request("POST", _collection(plane, obj, cache), obj)
            job = f"/apis/batch/v1/namespaces/{namespace}/jobs/serving-benchmark"

            def complete() -> bool:
                conditions = plane.request("GET", job).get("status", {}).get("conditions") or []
                failed = [c for c in conditions if c["type"] == "Failed" and c["status"] == "True"]
                assert not failed, f"the Job failed: {failed}; pods: {pods.ended}"
                return any(c["type"] == "Complete" and c["status"] == "True" for c in conditions)

            plane.wait_for("the benchmark Job Complete", complete, 600, 0.5)
        finally:
            pods.stop()
        assert pods.error is None, pods.error
        assert [code for _, code, _ in pods.ended] == [0], pods.ended
        result = tmp_path / "result.json"
        result.write_bytes(gcs.objects["benchmarks/dev/plane/result.json"])
    done = subprocess.run(
        [sys.executable, "-m", "plan", "benchmark", "compare", str(result), str(result)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0 and "within the runs' spread" in done.stdout, done.stderr
