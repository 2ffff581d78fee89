"""The vLLM command line and environment of prefill and decode leaders (no Pulumi).

Generated from typed configuration instead of hand-edited YAML, so the model
path, parallelism and KV-transfer role can never disagree with the slice shape.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Literal

from contracts.ports import DECODE_VLLM_PORT, POOL_PORT
from domain.serving_budget import ENGINE_READY_TIMEOUT_SECONDS, RAY_INIT_TIMEOUT_SECONDS
from workloads.vllm_listeners import KV_TRANSFER_PORT, SIDE_CHANNEL_PORT

Role = Literal["prefill", "decode"]

MULTI_NODE_SCRIPT = "/workspace/vllm/examples/online_serving/multi-node-serving.sh"

# vLLM's API server closes a connection idle this long (vllm v0.26.0 vllm/envs.py,
# VLLM_HTTP_TIMEOUT_KEEP_ALIVE default "5"; vllm/entrypoints/openai/api_server.py passes it to uvicorn
# as `timeout_keep_alive`).
VLLM_DEFAULT_KEEP_ALIVE_SECONDS = 5
# The P/D sidecar keeps an idle connection to prefill and to its own vLLM this long and reuses it
# (llm-d-router v0.9.0 pkg/sidecar/proxy/proxy.go newProxyTransport, `IdleConnTimeout = 90 *
# time.Second`, as Go's DefaultTransport in net/http/transport.go). A POST that meets a connection
# the server has just closed is not retried (net/http request.go isReplayable): the client gets a 502.
SIDECAR_IDLE_CONN_SECONDS = 90
# So the server must keep an idle connection longer than the sidecar may reuse it; llm-d's P/D guides
# set 120 (VLLM_HTTP_TIMEOUT_KEEP_ALIVE in their vLLM environments).
VLLM_KEEP_ALIVE_SECONDS = 120


@dataclass(frozen=True)
class VllmServe:
    role: Role
    model_uri: str  # gs://bucket/path of the Hugging Face snapshot
    served_model_name: str
    tensor_parallel_size: int
    max_model_len: int
    max_num_batched_tokens: int
    max_num_seqs: int
    kv_cache_dtype: str
    enable_expert_parallel: bool
    load_format: str

    @property
    def port(self) -> int:
        return POOL_PORT if self.role == "prefill" else DECODE_VLLM_PORT

    def kv_transfer_config(self) -> str:
        return json.dumps(
            {
                "kv_connector": "TPUConnectorHMA",
                "kv_connector_module_path": "tpu_inference.distributed.tpu_connector_hma",
                "kv_role": "kv_producer" if self.role == "prefill" else "kv_consumer",
            },
            separators=(",", ":"),
        )

    def args(self) -> list[str]:
        """`vllm serve` arguments, in the reference's order."""
        args = [
            "vllm",
            "serve",
            self.model_uri,
            f"--load-format={self.load_format}",
            f"--served-model-name={self.served_model_name}",
            f"--max-model-len={self.max_model_len}",
            f"--max-num-batched-tokens={self.max_num_batched_tokens}",
            f"--max-num-seqs={self.max_num_seqs}",
            f"--tensor-parallel-size={self.tensor_parallel_size}",
            "--language-model-only",
            '--limit-mm-per-prompt={"image": 0, "video": 0}',
            f"--kv-cache-dtype={self.kv_cache_dtype}",
        ]
        if self.enable_expert_parallel:
            args.append("--enable-expert-parallel")
        args += [
            "--no-disable-hybrid-kv-cache-manager",
            f"--kv-transfer-config={self.kv_transfer_config()}",
            f"--port={self.port}",
            "--disable-access-log-for-endpoints=/health,/metrics,/v1/models",
        ]
        return args


def leader_script(serve: VllmServe) -> str:
    """Start the Ray head for the slice's hosts, then vLLM on the leader."""
    ray = shlex.join(
        [
            "bash",
            MULTI_NODE_SCRIPT,
            "leader",
            "--ray_cluster_size=$(LWS_GROUP_SIZE)",
            f"--ray_init_timeout={RAY_INIT_TIMEOUT_SECONDS}",
        ]
    ).replace("'--ray_cluster_size=$(LWS_GROUP_SIZE)'", "--ray_cluster_size=$(LWS_GROUP_SIZE)")
    return f"set -e\n{ray}\nexec {shlex.join(serve.args())}\n"


def worker_script() -> str:
    """Join the leader's Ray cluster; vLLM drives the worker's chips from the leader."""
    return (
        f"set -e\nexec bash {MULTI_NODE_SCRIPT} worker --ray_address=$(LWS_LEADER_ADDRESS) "
        f"--ray_init_timeout={RAY_INIT_TIMEOUT_SECONDS}\n"
    )


def environment(bucket: str, log_level: str) -> list[tuple[str, str]]:
    """Environment shared by leaders and workers of both roles (reference §11.1).

    Every name is read by the pinned release; `workloads/upstream_readers.py` says where, and a
    test checks it in the released packages. The reference's TPU_NODE_ID, PJRT_DEVICE and
    VLLM_ENGINE_CLIENT_STARTUP_TIMEOUT are read by nothing in vLLM or tpu-inference 0.26.0.
    """
    return [
        ("HF_HOME", "/usr/vllm"),
        ("TPU_MULTIHOST_BACKEND", "ray"),
        ("SKIP_JAX_PRECOMPILE", "1"),
        ("JAX_PLATFORMS", ""),
        ("MODEL_IMPL_TYPE", "vllm"),
        ("TPU_BACKEND_TYPE", "jax"),
        ("USE_MOE_EP_KERNEL", "0"),
        ("VLLM_DISABLE_SHARED_EXPERTS_STREAM", "1"),
        ("VLLM_LOGGING_LEVEL", log_level),
        ("VLLM_MLA_DISABLE", "1"),
        ("VLLM_ENGINE_READY_TIMEOUT_S", str(ENGINE_READY_TIMEOUT_SECONDS)),
        # Longer than the P/D sidecar's idle reuse, which cannot replay a POST on a closed connection.
        ("VLLM_HTTP_TIMEOUT_KEEP_ALIVE", str(VLLM_KEEP_ALIVE_SECONDS)),
        ("USE_BATCHED_RPA_KERNEL", "0"),
        # Of the reference's eight Ray settings only these two exist in the Ray of the image (the
        # other six are names from old Ray or none, read by no Ray 2.54-2.59; see upstream_readers).
        ("RAY_max_pending_lease_requests_per_scheduling_category", "1000"),
        ("RAY_gcs_server_request_timeout_seconds", "3600"),
        ("TPU_SIDE_CHANNEL_PORT", str(SIDE_CHANNEL_PORT)),
        ("TPU_KV_TRANSFER_PORT", str(KV_TRANSFER_PORT)),
        # vLLM writes compiled XLA programs back to the bucket, the only prefix it may write to.
        ("VLLM_XLA_CACHE_PATH", f"gs://{bucket}/xla_cache"),
    ]
