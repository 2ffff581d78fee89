"""The benchmark Job's program, run as the kubelet would run the Job's container, with the real
inference-perf (the PyPI release of the image the Job pins, `make loadgen`) against the vLLM stand-in
on loopback (tests/standins/vllm_openai.py) and Cloud Storage's upload stand-in
(tests/standins/gcs_uploads.py).

The Job and its ConfigMap are the program's own (the dev stack with the benchmark on): the
ConfigMap's files are laid out as its volume, each volume mount becomes a folder, and the
container's environment is passed as the kubelet passes it, with the mount paths in it pointing at
those folders and the gateway's URL at the stand-in. The tokenizer folder holds a word tokenizer made
by the load generator's own tokenizers library, as the model's snapshot holds the model's.

Cost: about 110 s on one worker (four runs of one or two 10-second stages, plus inference-perf's start),
and about 90 s more for the memory measurement (a 10 s and a 30 s stage).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from domain import benchmark
from plan import engine
from plan.engine import PlanResult
from settings import benchmark as settings_benchmark
from tests.conftest import DevRunner, dev_raw, merged
from tests.standins import benchmark_pod, gcs_uploads, vllm_openai

# One worker for the module: under `--dist loadgroup` its tests would otherwise be spread over both
# workers, each running the module fixture's two benchmark Jobs (about 110 s each, a cold CI run).
pytestmark = pytest.mark.xdist_group("benchmark-run")

BENCHMARK = {"enabled": True, "rates": [4], "repetitions": 2, "stageSeconds": 10, "inputTokens": 64}
FAST, SLOW = vllm_openai.Speed(0.02, 0.002), vllm_openai.Speed(0.2, 0.02)
OUTPUT_TOKENS = 32


@dataclass(frozen=True)
class Run:
    exit_code: int
    output: str
    objects: Mapping[str, bytes]

    def result(self) -> benchmark.Result:
        (name,) = [n for n in self.objects if n.endswith("/result.json")]
        return benchmark.parse(self.objects[name].decode(), name)


def _python() -> Path:
    python = benchmark_pod.loadgen_python()
    if python is None:
        pytest.skip("inference-perf missing: run `make loadgen`")
    return python


def run_job(plan: PlanResult, workdir: Path, speed: vllm_openai.Speed, writable: str = "benchmarks/dev/") -> Run:
    """The program's benchmark Job's container, run as the kubelet would (tests/standins/benchmark_pod.py)."""
    python = _python()
    (job,) = [r for r in plan.of_type("kubernetes:batch/v1:Job") if r.get("metadata.name") == "serving-benchmark"]
    config_maps = {r.get("metadata.name"): r.get("data") for r in plan.of_type("kubernetes:core/v1:ConfigMap")}
    model = json.loads(config_maps["serving-benchmark"]["inference-perf.json"])["server"]["model_name"]
    with vllm_openai.serving(model, speed) as server, gcs_uploads.storage("example-model-weights", writable) as gcs:
        started = benchmark_pod.start(job.get("spec.template.spec"), config_maps, workdir, python)
        code, log = benchmark_pod.run(started, python, f"http://127.0.0.1:{server.server_address[1]}", gcs.host)
        return Run(code, log, dict(gcs.objects))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Run]]:
    raw, secrets = dev_raw()
    found = {}
    for name, speed in (("fast", FAST), ("slow", SLOW)):
        overrides = {"serving": {"benchmark": {**BENCHMARK, "outputTokens": OUTPUT_TOKENS, "runId": name}}}
        plan = engine.run(merged(overrides, raw), stack="dev", secret_keys=secrets)
        found[name] = run_job(plan, tmp_path_factory.mktemp(name), speed)
    yield found


def test_the_job_program_runs_inference_perf_and_uploads_its_result(runs: dict[str, Run]) -> None:
    run = runs["fast"]
    assert run.exit_code == 0, run.output[-3000:]
    names = set(run.objects)
    assert {"benchmarks/dev/fast/result.json", "benchmarks/dev/fast/stage_0_lifecycle_metrics.json"} <= names
    result = run.result()
    assert result.load_generator == "inference-perf" and result.run == "fast"
    assert [s.rate for s in result.stages] == [4.0, 4.0]
    for stage in result.stages:
        assert stage.successes > 0 and stage.failures == 0
        # The stand-in's first token comes after 20 ms, the rest every 2 ms: what inference-perf measured.
        assert 0.02 <= stage.figures["ttft.p50"] < 0.2
        assert 0.002 <= stage.figures["tpot.p50"] < 0.02
    assert "benchmark: " in run.output and '"rate": 4.0' in run.output


def test_comparing_two_runs_tells_the_slower_server(runs: dict[str, Run]) -> None:
    fast, slow = runs["fast"].result(), runs["slow"].result()
    by_figure = {c.figure: c for c in benchmark.compare(fast, slow)}
    for figure in ("ttft.p50", "ttft.p90", "tpot.p50"):
        ratio = by_figure[figure].ratio
        assert ratio is not None and ratio > 3, by_figure[figure]
        assert by_figure[figure].beyond_spread


def test_the_plan_compares_the_files_the_job_wrote(runs: dict[str, Run], tmp_path: Path) -> None:
    files = []
    for name in ("fast", "slow"):
        path = tmp_path / f"{name}.json"
        path.write_bytes(runs[name].objects[f"benchmarks/dev/{name}/result.json"])
        files.append(str(path))
    done = subprocess.run(
        [sys.executable, "-m", "plan", "benchmark", "compare", *files], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if "ttft.p90" in line)
    assert "beyond the runs' spread" in line


def test_a_gate_missed_fails_the_job_after_uploading(tmp_path: Path, run_dev: DevRunner) -> None:
    gate = {"ttftP90Seconds": 0.05}
    plan = run_dev({"serving": {"benchmark": {**BENCHMARK, "outputTokens": 8, "repetitions": 1, "gate": gate}}})
    run = run_job(plan, tmp_path, SLOW)
    assert run.exit_code == 1, run.output[-3000:]
    assert "benchmark gate missed: ttft.p90 at 4 req/s" in run.output
    assert any(n.endswith("/result.json") for n in run.objects)


def test_a_server_that_never_answers_is_cut_at_the_request_timeout_and_the_result_still_uploads(
    tmp_path: Path,
) -> None:
    """The Job's deadline counts, per stage, requestTimeoutSeconds for the requests in flight when the
    stage ends. Against a server that never answers, inference-perf cuts each request at that timeout
    (counted failed), so the run ends, uploads what it measured and fails, well inside the deadline;
    without the timeout (inference-perf's default: none) it waited on the open requests until the
    Job's deadline killed it, with nothing uploaded."""
    raw, secrets = dev_raw()
    settings = {
        **BENCHMARK,
        "repetitions": 1,
        "outputTokens": OUTPUT_TOKENS,
        "runId": "hung",
        "requestTimeoutSeconds": 3,
    }
    plan = engine.run(merged({"serving": {"benchmark": settings}}, raw), stack="dev", secret_keys=secrets)
    (job,) = [r for r in plan.of_type("kubernetes:batch/v1:Job") if r.get("metadata.name") == "serving-benchmark"]
    deadline = job.get("spec.activeDeadlineSeconds")
    started = time.monotonic()
    run = run_job(plan, tmp_path, vllm_openai.Speed(first_token_seconds=3600, token_seconds=1))
    elapsed = time.monotonic() - started
    assert run.exit_code == 1, run.output[-3000:]
    assert "a stage had no successful request" in run.output
    (stage,) = run.result().stages
    assert stage.successes == 0 and stage.failures > 0
    assert elapsed < deadline, f"the run took {elapsed:.0f} s of its {deadline} s deadline"


def _peak(tmp_path: Path, name: str, seconds: int) -> tuple[int, int]:
    """One run of the Job at 20 requests a second for `seconds`, 64 + 256 tokens, on the fast stand-in:
    (requests served, peak resident bytes of inference-perf's main process)."""
    raw, secrets = dev_raw()
    overrides = {
        "serving": {
            "benchmark": {"enabled": True, "rates": [20], "repetitions": 1, "stageSeconds": seconds}
            | {"inputTokens": 64, "outputTokens": 256, "runId": name}
        }
    }
    plan = engine.run(merged(overrides, raw), stack="dev", secret_keys=secrets)
    python = _python()
    (job,) = [r for r in plan.of_type("kubernetes:batch/v1:Job") if r.get("metadata.name") == "serving-benchmark"]
    config_maps = {r.get("metadata.name"): r.get("data") for r in plan.of_type("kubernetes:core/v1:ConfigMap")}
    model = json.loads(config_maps["serving-benchmark"]["inference-perf.json"])["server"]["model_name"]
    with (
        vllm_openai.serving(model, vllm_openai.Speed(0.01, 0.0005)) as server,
        gcs_uploads.storage("example-model-weights", "benchmarks/dev/") as gcs,
    ):
        started = benchmark_pod.start(job.get("spec.template.spec"), config_maps, tmp_path / name, python)
        code, log, peak = benchmark_pod.run_measured(
            started, python, f"http://127.0.0.1:{server.server_address[1]}", gcs.host
        )
        assert code == 0, log[-3000:]
        return server.requests, peak


def test_the_memory_rule_holds_what_inference_perf_keeps_of_each_request(tmp_path: Path) -> None:
    """settings/benchmark.py LOADGEN_*: the rule's figures against the real program's growth from a
    short run to a longer one (it keeps every request's body and raw answer until the run ends): at
    least what it keeps, and not so far above that a benchmark that fits is refused (under twice).
    Cost: about 70 s (two runs of 10 and 30 s stages, each with inference-perf's start)."""
    few, small = _peak(tmp_path, "few", 10)
    many, large = _peak(tmp_path, "many", 30)
    assert many - few >= 350, (few, many)
    measured = (large - small) / (many - few)
    estimated = settings_benchmark.loadgen_request_bytes(64, 256)
    assert measured <= estimated < 2 * measured, f"{measured:.0f} bytes a request measured, {estimated} estimated"
    start = small - few * measured
    print(f"\ninference-perf: {measured:.0f} bytes a request, {start / 2**20:.0f} MiB at start")  # with -s
    assert start <= settings_benchmark.LOADGEN_BASE_BYTES, f"{start / 2**20:.0f} MiB at start"
