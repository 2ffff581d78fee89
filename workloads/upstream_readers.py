"""Where each environment variable given to the vLLM pods is read, in the pinned releases (no Pulumi).

A variable that nothing reads is worse than none: it looks like a setting and is not one (the
reference's VLLM_ENGINE_CLIENT_STARTUP_TIMEOUT is read by neither vLLM nor tpu-inference 0.26.0,
so the engine timed out at vLLM's default 600 s). `tests/test_upstream_releases.py` downloads
each named release from PyPI (cached) and checks that the named file reads the name.
`SERVING_RELEASE` means the vLLM and tpu-inference releases inside the pinned vllm-tpu image
(`versions.vllmImage`; tpu-inference is versioned with vLLM).
"""

from __future__ import annotations

from dataclasses import dataclass

SERVING_RELEASE = "serving"  # the version of the pinned vllm-tpu image's tag


@dataclass(frozen=True)
class Reader:
    distribution: str  # on PyPI
    version: str  # an exact version, or SERVING_RELEASE
    path: str  # the file in the distribution that reads the variable


VLLM = ("vllm", SERVING_RELEASE)
TPU_INFERENCE = ("tpu-inference", SERVING_RELEASE)
# vLLM's requirements/tpu.txt leaves `ray[default]` unpinned, so the image has the Ray that was
# newest when it was built (v0.26.0: 2026-07-31, so Ray 2.56.1, built 2026-07-16). Ray reads
# `RAY_<name>` for each RAY_CONFIG entry of src/ray/common/ray_config_def.h (ray_config.h,
# `getenv("RAY_" #name)`), so the name is a string in its binaries. Ray 2.54.0 to 2.59.0 agree on
# every name below; confirm on the image with `pip show ray`.
RAY = ("ray", "2.56.1")
# huggingface_hub is what transformers (a vLLM requirement) finds its cache folder through.
HUGGINGFACE_HUB = ("huggingface-hub", "1.33.0")

ENV_READERS: dict[str, Reader] = {
    "HF_HOME": Reader(*HUGGINGFACE_HUB, "huggingface_hub/constants.py"),
    "TPU_MULTIHOST_BACKEND": Reader(*TPU_INFERENCE, "tpu_inference/envs.py"),
    "SKIP_JAX_PRECOMPILE": Reader(*TPU_INFERENCE, "tpu_inference/envs.py"),
    "JAX_PLATFORMS": Reader(*TPU_INFERENCE, "tpu_inference/envs.py"),
    "MODEL_IMPL_TYPE": Reader(*TPU_INFERENCE, "tpu_inference/envs.py"),
    "TPU_BACKEND_TYPE": Reader(*TPU_INFERENCE, "tpu_inference/platforms/tpu_platform.py"),
    "USE_MOE_EP_KERNEL": Reader(*TPU_INFERENCE, "tpu_inference/envs.py"),
    "VLLM_DISABLE_SHARED_EXPERTS_STREAM": Reader(*VLLM, "vllm/envs.py"),
    "VLLM_LOGGING_LEVEL": Reader(*VLLM, "vllm/envs.py"),
    "VLLM_MLA_DISABLE": Reader(*VLLM, "vllm/envs.py"),
    "VLLM_ENGINE_READY_TIMEOUT_S": Reader(*VLLM, "vllm/envs.py"),
    "VLLM_HTTP_TIMEOUT_KEEP_ALIVE": Reader(*VLLM, "vllm/envs.py"),
    "USE_BATCHED_RPA_KERNEL": Reader(*TPU_INFERENCE, "tpu_inference/envs.py"),
    "TPU_SIDE_CHANNEL_PORT": Reader(*TPU_INFERENCE, "tpu_inference/distributed/utils.py"),
    "TPU_KV_TRANSFER_PORT": Reader(*TPU_INFERENCE, "tpu_inference/distributed/utils.py"),
    "VLLM_XLA_CACHE_PATH": Reader(*VLLM, "vllm/envs.py"),
    "RAY_max_pending_lease_requests_per_scheduling_category": Reader(*RAY, "ray/_raylet.so"),
    "RAY_gcs_server_request_timeout_seconds": Reader(*RAY, "ray/_private/ray_constants.py"),
}

# `vllm serve` flags are declared as dataclass fields (`--kebab-case` of the field name, `--no-`
# for booleans) of these classes in these files (vllm/engine/arg_utils.py `add_cli_args`).
FLAG_SOURCES = {
    "vllm/engine/arg_utils.py": "EngineArgs",
    "vllm/entrypoints/openai/cli_args.py": "FrontendArgs",
}
