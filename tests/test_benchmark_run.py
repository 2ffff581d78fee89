"""The benchmark Job's program, run as the kubelet would run the Job's container, with the real
inference-perf (the PyPI release of the image the Job pins, `make loadgen`) against the vLLM stand-in
on loopback (tests/standins/vllm_openai.py) and Cloud Storage's upload stand-in
(tests/standins/gcs_uploads.py).

The Job and its ConfigMap are the program's own (the dev stack with the benchmark on): the
ConfigMap's files are laid out as its volume, each volume mount becomes a folder, and the
container's environment is passed as the kubelet passes it, with the mount paths in it pointing at
those folders and the gateway's URL at the stand-in. The tokenizer folder holds a word tokenizer made
by the load generator's own tokenizers library, as the model's snapshot holds the model's.

Cost: about 80 s on one worker (three runs of one or two 10-second stages, plus inference-perf's start).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from domain import benchmark
from plan import engine
from plan.engine import PlanResult
from tests.conftest import DevRunner, dev_raw, merged
from tests.standins import gcs_uploads, vllm_openai

LOADGEN = Path(os.environ.get("TPU_SLICING_LOADGEN", Path.home() / ".cache/tpu-slicing/loadgen")) / "venv"
BENCHMARK = {"enabled": True, "rates": [4], "repetitions": 2, "stageSeconds": 10, "inputTokens": 64}
FAST, SLOW = vllm_openai.Speed(0.02, 0.002), vllm_openai.Speed(0.2, 0.02)
OUTPUT_TOKENS = 32


@dataclass(frozen=True)
class Pod:
    command: list[str]
    env: dict[str, str]
    mounts: dict[str, Path]  # mount path -> local folder


def _loadgen_python() -> Path:
    python = LOADGEN / "bin" / "python"
    if not (LOADGEN / "bin" / "inference-perf").exists():
        pytest.skip("inference-perf missing: run `make loadgen`")
    return python


def _pod(plan: PlanResult, workdir: Path, base_url: str) -> Pod:
    """The Job's container as the kubelet starts it, its volumes as local folders."""
    (job,) = [r for r in plan.of_type("kubernetes:batch/v1:Job") if r.get("metadata.name") == "serving-benchmark"]
    spec = job.get("spec.template.spec")
    (container,) = spec["containers"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {}
    for mount in container["volumeMounts"]:
        folder = workdir / mount["name"]
        folder.mkdir(parents=True, exist_ok=True)
        source = volumes[mount["name"]]
        if "configMap" in source:
            (config_map,) = [
                r
                for r in plan.of_type("kubernetes:core/v1:ConfigMap")
                if r.get("metadata.name") == source["configMap"]["name"]
            ]
            for key, text in config_map.get("data").items():
                (folder / key).write_text(text)
        mounts[mount["mountPath"]] = folder
    env = {}
    for item in container["env"]:
        value = str(item["value"])
        for path, folder in mounts.items():
            if value == path or value.startswith(path + "/"):
                value = str(folder) + value[len(path) :]
        env[item["name"]] = value
    env["BENCHMARK_BASE_URL"] = base_url  # the gateway's address, here the stand-in's
    command = [str(mounts.get(c, c)) for c in container["command"]]
    for path, folder in mounts.items():
        command = [str(folder) + c[len(path) :] if c.startswith(path + "/") else c for c in command]
    return Pod(command, env, mounts)


@dataclass(frozen=True)
class Run:
    exit_code: int
    output: str
    objects: Mapping[str, bytes]
    pod: Pod

    def result(self) -> benchmark.Result:
        (name,) = [n for n in self.objects if n.endswith("/result.json")]
        return benchmark.parse(self.objects[name].decode(), name)


def run_job(plan: PlanResult, workdir: Path, speed: vllm_openai.Speed, writable: str = "benchmarks/") -> Run:
    python = _loadgen_python()
    model = json.loads(
        next(
            r for r in plan.of_type("kubernetes:core/v1:ConfigMap") if r.get("metadata.name") == "serving-benchmark"
        ).get("data")["inference-perf.json"]
    )["server"]["model_name"]
    with vllm_openai.serving(model, speed) as server, gcs_uploads.storage("example-model-weights", writable) as gcs:
        pod = _pod(plan, workdir, f"http://127.0.0.1:{server.server_address[1]}")
        vllm_openai.word_tokenizer(python, pod.mounts["/model"])
        env = {
            **pod.env,
            # The image's PATH has inference-perf; STORAGE_EMULATOR_HOST points its storage client here.
            "PATH": f"{python.parent}{os.pathsep}{os.environ['PATH']}",
            "STORAGE_EMULATOR_HOST": gcs.host,
        }
        done = subprocess.run(
            [str(python) if c == "python3" else c for c in pod.command],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        return Run(done.returncode, done.stdout + done.stderr, dict(gcs.objects), pod)


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
    assert {"benchmarks/fast/result.json", "benchmarks/fast/stage_0_lifecycle_metrics.json"} <= names
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
        path.write_bytes(runs[name].objects[f"benchmarks/{name}/result.json"])
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
