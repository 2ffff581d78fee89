"""The pinned releases read every environment variable and declare every flag given to vLLM.

The releases come from PyPI at the versions `workloads/upstream_readers.py` and the settings'
`versions` name, downloaded once into a cache outside the repository (TPU_SLICING_WHEELS,
default ~/.cache/tpu-slicing/wheels) and read as text: nothing is imported, so no TPU is needed.
Bumping `versions.vllmImage` re-runs these checks against the new release.
"""

from __future__ import annotations

import ast
import fcntl
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import config_with
from workloads.upstream_readers import ENV_READERS, FLAG_SOURCES, SERVING_RELEASE, Reader
from workloads.vllm_command import VLLM_DEFAULT_KEEP_ALIVE_SECONDS, VllmServe, environment

WHEELS = Path(os.environ.get("TPU_SLICING_WHEELS", Path.home() / ".cache" / "tpu-slicing" / "wheels"))


def serving_version() -> str:
    tag = config_with().versions.vllm_image.rsplit(":", 1)[1]
    return tag.removeprefix("v")


def wheel(distribution: str, version: str) -> Path:
    """The release's wheel, downloaded once (a lock keeps parallel test workers from racing)."""
    WHEELS.mkdir(parents=True, exist_ok=True)
    stem = re.sub(r"[-_.]+", "_", distribution).lower()
    with open(WHEELS / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = sorted(WHEELS.glob(f"{stem}-{version}-*.whl"))
        if not found:
            subprocess.run(
                [
                    *(sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q"),
                    *("--disable-pip-version-check", "-d", str(WHEELS), f"{distribution}=={version}"),
                ],
                check=True,
            )
            found = sorted(WHEELS.glob(f"{stem}-{version}-*.whl"))
    assert found, f"no wheel of {distribution}=={version} in {WHEELS}"
    return found[0]


def contents(reader: Reader) -> bytes:
    version = serving_version() if reader.version == SERVING_RELEASE else reader.version
    with zipfile.ZipFile(wheel(reader.distribution, version)) as archive:
        return archive.read(reader.path)


def source(reader: Reader) -> str:
    return contents(reader).decode()


def given_env() -> list[tuple[str, str]]:
    return environment("example-model-weights", "INFO")


def test_every_variable_given_to_vllm_pods_has_a_reader() -> None:
    names = [name for name, _ in given_env()]
    assert sorted(names) == sorted(ENV_READERS)


@pytest.mark.parametrize("name", sorted(ENV_READERS))
def test_the_pinned_release_reads_the_variable(name: str) -> None:
    reader = ENV_READERS[name]
    if reader.path.endswith(".so"):
        # A compiled reader: the name is a string literal in the binary.
        assert name.encode() + b"\0" in contents(reader), f"{name} is not in {reader}"
        return
    text = source(reader)
    assert re.search(rf"[\"']{re.escape(name)}[\"']", text), f"{name} is not read in {reader}"


def test_a_variable_the_release_does_not_read_is_caught() -> None:
    # The reference's engine timeout: read by neither vLLM nor tpu-inference 0.26.0.
    for reader in (ENV_READERS["VLLM_LOGGING_LEVEL"], ENV_READERS["MODEL_IMPL_TYPE"]):
        assert "VLLM_ENGINE_CLIENT_STARTUP_TIMEOUT" not in source(reader)
    # The reference's Ray heartbeat: gone from Ray long before 2.56.
    assert b"RAY_heartbeat_timeout_milliseconds" not in contents(
        ENV_READERS["RAY_max_pending_lease_requests_per_scheduling_category"]
    )


def declared_fields(text: str, class_name: str) -> dict[str, str]:
    """Field names of a dataclass and their annotations, read from its source."""
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            return {
                item.target.id: ast.unparse(item.annotation)
                for item in node.body
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
            }
    raise LookupError(class_name)


def vllm_flags() -> dict[str, str]:
    fields: dict[str, str] = {}
    for path, class_name in FLAG_SOURCES.items():
        fields.update(declared_fields(source(Reader("vllm", SERVING_RELEASE, path)), class_name))
    return fields


def serve(role: str) -> VllmServe:
    return VllmServe(
        role=role,  # type: ignore[arg-type]
        model_uri="gs://example-model-weights/model",
        served_model_name="model",
        tensor_parallel_size=8,
        max_model_len=8192,
        max_num_batched_tokens=4096,
        max_num_seqs=64,
        kv_cache_dtype="fp8",
        enable_expert_parallel=True,
        load_format="runai_streamer",
    )


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_every_flag_is_declared_by_the_pinned_vllm(role: str) -> None:
    fields = vllm_flags()
    for arg in serve(role).args()[3:]:
        assert arg.startswith("--"), arg
        name = arg[2:].split("=", 1)[0].replace("-", "_")
        if name not in fields and name.startswith("no_"):
            name = name.removeprefix("no_")
            assert "bool" in fields.get(name, ""), f"--{arg[2:]}: {name} is not a boolean field"
        assert name in fields, f"{arg}: vLLM {serving_version()} declares no {name}"


def test_a_flag_the_pinned_vllm_does_not_declare_is_caught() -> None:
    assert "engine_client_startup_timeout" not in vllm_flags()


def test_the_recorded_keep_alive_default_is_the_pinned_vllms() -> None:
    # workloads/vllm_command.py sets the keep-alive above the sidecar's idle reuse, against this default.
    text = source(ENV_READERS["VLLM_HTTP_TIMEOUT_KEEP_ALIVE"])
    default = re.search(r"[\"']VLLM_HTTP_TIMEOUT_KEEP_ALIVE[\"']\s*,\s*[\"'](\d+)[\"']", text)
    assert default is not None, "vllm/envs.py no longer reads VLLM_HTTP_TIMEOUT_KEEP_ALIVE with a default"
    assert int(default.group(1)) == VLLM_DEFAULT_KEEP_ALIVE_SECONDS
