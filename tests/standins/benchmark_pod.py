"""Stand-in for the kubelet that runs the serving benchmark Job's container (workloads/benchmark_job.py).

No image can run here, so the container's program runs on this machine as the kubelet would start
it: each volume the container mounts becomes a folder (a ConfigMap's keys as its files, an
emptyDir empty, the Cloud Storage FUSE volume a folder holding the model's tokenizer), every
environment value naming a mount path names that folder instead, and the command runs with the
interpreter of the load generator's virtualenv (`make loadgen`: the PyPI release of the image's
inference-perf, with the google-cloud-storage the image ships) and that virtualenv's `inference-perf`
on PATH. The gateway's URL is the vLLM stand-in's (tests/standins/vllm_openai.py) and
`STORAGE_EMULATOR_HOST` points the storage client at the upload stand-in (gcs_uploads.py).

`BenchmarkPods` does that for each running pod of the Job on the plane, reading the ConfigMap the
cluster holds, and ends the pod with the program's exit code (smoke_pod.py `end_pod`).

What it cannot show: the image's own Python and layout, the FUSE sidecar, the read-only root file
system, Workload Identity, the pod's resources and deadline.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests import control_plane as cp
from tests.standins import vllm_openai
from tests.standins.smoke_pod import JobPods

LOADGEN = Path(os.environ.get("TPU_SLICING_LOADGEN", Path.home() / ".cache/tpu-slicing/loadgen")) / "venv"
TOKENIZER_DRIVER = "gcsfuse.csi.storage.gke.io"


def loadgen_python() -> Path | None:
    """The load generator's interpreter, or None before `make loadgen`."""
    return LOADGEN / "bin" / "python" if (LOADGEN / "bin" / "inference-perf").exists() else None


@dataclass(frozen=True)
class Started:
    command: list[str]
    env: dict[str, str]
    mounts: dict[str, Path]  # mount path -> local folder


def start(
    pod_spec: Mapping[str, Any], config_maps: Mapping[str, Mapping[str, str]], workdir: Path, python: Path
) -> Started:
    """The pod's one container, its volumes laid out under `workdir` (see the module docstring)."""
    (container,) = pod_spec["containers"]
    volumes = {v["name"]: v for v in pod_spec["volumes"]}
    mounts = {}
    for mount in container["volumeMounts"]:
        folder = workdir / mount["name"]
        folder.mkdir(parents=True, exist_ok=True)
        source = volumes[mount["name"]]
        if "configMap" in source:
            for key, text in config_maps[source["configMap"]["name"]].items():
                (folder / key).write_text(text)
        elif (source.get("csi") or {}).get("driver") == TOKENIZER_DRIVER:
            vllm_openai.word_tokenizer(python, folder)  # the model's snapshot: its tokenizer files
        mounts[mount["mountPath"]] = folder

    def local(value: str) -> str:
        for path, folder in mounts.items():
            if value == path or value.startswith(path + "/"):
                return str(folder) + value[len(path) :]
        return value

    env = {item["name"]: local(str(item.get("value", ""))) for item in container.get("env") or []}
    command = [str(python) if part == "python3" else local(part) for part in container["command"]]
    return Started(command, env, mounts)


# A parent that runs the container's command and prints the largest resident set of the processes it
# waited for, directly or not: Linux folds each waited-for descendant's ru_maxrss into its parent's
# RUSAGE_CHILDREN, as the maximum (getrusage(2)), so this is inference-perf's main process at its peak.
_PEAK = (
    "import resource, subprocess, sys\n"
    "code = subprocess.call(sys.argv[1:])\n"
    "print('peak-rss-kib', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    "sys.exit(code)\n"
)


def run_measured(started: Started, python: Path, base_url: str, storage_host: str) -> tuple[int, str, int]:
    """`run`, with the peak resident memory of the container's largest process in bytes."""
    wrapped = Started([str(python), "-c", _PEAK, *started.command], started.env, started.mounts)
    code, log = run(wrapped, python, base_url, storage_host)
    lines = [line for line in log.splitlines() if line.startswith("peak-rss-kib ")]
    if not lines:
        raise RuntimeError(f"the measuring parent printed no peak:\n{log[-2000:]}")
    return code, log, int(lines[-1].split()[1]) * 1024


def run(started: Started, python: Path, base_url: str, storage_host: str) -> tuple[int, str]:
    """Run the started container against the stand-ins; its exit code and log."""
    done = subprocess.run(
        started.command,
        env={
            **started.env,
            "BENCHMARK_BASE_URL": base_url,
            "STORAGE_EMULATOR_HOST": storage_host,
            "PATH": f"{python.parent}{os.pathsep}/usr/bin:/bin",
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=900,
        check=False,
    )
    return done.returncode, done.stdout


class BenchmarkPods(JobPods):
    """Runs each running pod of the benchmark Job against the vLLM stand-in it serves, then ends it."""

    name = "benchmark-pod-stand-in"

    def __init__(
        self,
        plane: cp.ControlPlane,
        namespace: str,
        job: str,
        *,
        python: Path,
        model: str,
        speed: vllm_openai.Speed,
        storage_host: str,
    ) -> None:
        super().__init__(plane, namespace, job)
        self.python, self.storage_host = python, storage_host
        self.server = vllm_openai.server(model, speed)

    def outcome(self, pod: dict[str, Any], container: dict[str, Any]) -> tuple[int, str]:
        config_maps = {
            v["configMap"]["name"]: self.plane.request(
                "GET", f"/api/v1/namespaces/{self.namespace}/configmaps/{v['configMap']['name']}"
            )["data"]
            for v in pod["spec"]["volumes"]
            if v.get("configMap")
        }
        workdir = Path(self._dir) / pod["metadata"]["name"]
        started = start(pod["spec"], config_maps, workdir, self.python)
        base_url = f"http://127.0.0.1:{self.server.server_address[1]}"
        return run(started, self.python, base_url, self.storage_host)
