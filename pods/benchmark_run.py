"""The serving benchmark Job's program: run inference-perf, keep its result, hold it to the gate.

Runs in the pinned inference-perf image (`versions.benchmarkImage`), which ships inference-perf, its
`inference-perf` command and google-cloud-storage (a dependency of inference-perf v0.7.0's
pyproject.toml). `benchmark.py` beside it in the ConfigMap is the project's domain/benchmark.py.

1. Reads inference-perf's configuration (JSON, which inference-perf's YAML reader takes) and adds
   what only the pod knows: the gateway's URL, the tokenizer's folder (the model's snapshot, mounted
   read-only from the weights bucket) and the report folder.
2. Runs `inference-perf --config_file ...`; a failed run fails the Job with its exit code.
3. Turns the stage reports into one result (`result.json`) and uploads every report and the result
   to `gs://<bucket>/<prefix><run>/`, the only prefix the Job's identity may write.
4. Prints the headline figures and, with a gate, each missed figure; a miss fails the Job (and
   `pulumi up`, which waits for it), after the result is uploaded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import benchmark

ENV = (
    "BENCHMARK_CONFIG",
    "BENCHMARK_BASE_URL",
    "BENCHMARK_TOKENIZER",
    "BENCHMARK_REPORTS",
    "BENCHMARK_BUCKET",
    "BENCHMARK_PREFIX",
    "BENCHMARK_RUN",
    "BENCHMARK_PROJECT",
)


def configured(config: dict, base_url: str, tokenizer: str, reports: Path) -> dict:
    config = json.loads(json.dumps(config))
    config.setdefault("server", {})["base_url"] = base_url
    config.setdefault("tokenizer", {})["pretrained_model_name_or_path"] = tokenizer
    config["storage"] = {"local_storage": {"path": str(reports)}}
    return config


def upload(folder: Path, bucket: str, prefix: str, project: str) -> list[str]:
    """Every file of `folder` to gs://bucket/prefix<name>; the object names written."""
    from google.cloud import storage  # the image's, as inference-perf's own GCS report storage uses

    client = storage.Client(project=project)
    target = client.bucket(bucket)
    written = []
    for path in sorted(p for p in folder.iterdir() if p.is_file()):
        blob = target.blob(prefix + path.name)
        blob.upload_from_filename(str(path))
        written.append(blob.name)
    return written


def main() -> int:
    missing = [name for name in ENV if not os.environ.get(name)]
    if missing:
        print(f"benchmark: {', '.join(missing)} not set", file=sys.stderr)
        return 2
    env = {name: os.environ[name] for name in ENV}
    reports = Path(env["BENCHMARK_REPORTS"]) / env["BENCHMARK_RUN"]
    reports.mkdir(parents=True, exist_ok=True)
    config = configured(
        json.loads(Path(env["BENCHMARK_CONFIG"]).read_text()),
        env["BENCHMARK_BASE_URL"],
        env["BENCHMARK_TOKENIZER"],
        reports,
    )
    config_file = reports.parent / "inference-perf-config.json"
    config_file.write_text(json.dumps(config, indent=2))
    run = subprocess.run(["inference-perf", "--config_file", str(config_file)], check=False)
    if run.returncode != 0:
        print(f"benchmark: inference-perf exited {run.returncode}", file=sys.stderr)
        return run.returncode
    try:
        result = benchmark.from_reports(reports, env["BENCHMARK_RUN"])
    except benchmark.ResultError as err:
        print(f"benchmark: {err}", file=sys.stderr)
        return 1
    (reports / "result.json").write_text(result.to_json())
    prefix = f"{env['BENCHMARK_PREFIX'].strip('/')}/{env['BENCHMARK_RUN']}/"
    written = upload(reports, env["BENCHMARK_BUCKET"], prefix, env["BENCHMARK_PROJECT"])
    print(f"benchmark: wrote {len(written)} files to gs://{env['BENCHMARK_BUCKET']}/{prefix}")
    print("benchmark: " + json.dumps(benchmark.headline(result), sort_keys=True))
    gate = json.loads(os.environ.get("BENCHMARK_GATE") or "{}")
    misses = benchmark.Gate(**gate).misses(result)
    for miss in misses:
        print(f"benchmark gate missed: {miss}", file=sys.stderr)
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
