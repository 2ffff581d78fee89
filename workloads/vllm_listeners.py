"""Every TCP port a pod of disaggregated vLLM listens on, with the upstream code that opens it.

The NetworkPolicies of `workloads/vllm_pd.py` follow from this list, and the reachability test
(tests/test_network_policies.py) adds these listeners to the pods it models, so a port a pinned
program opens that no policy admits fails the test, whether or not a container declares it.

Read at the pinned releases: vLLM v0.26.0 (the image `vllm-tpu:v0.26.0`; its wheel), tpu-inference
v0.26.0 (c90cece), jaxlib 0.10.2, llm-d-router v0.9.0 (5f4e762, the sidecar), Ray 2.56.1 (the Ray of
the image is not pinned by a file we can read: a range 2.54-2.59 reads the same defaults).
"""

from __future__ import annotations

from dataclasses import dataclass

from contracts.ports import DECODE_VLLM_PORT, POOL_PORT

# Who opens a port: the pods of the two LeaderWorkerSets.
PREFILL_LEADER, PREFILL_WORKER = "prefill leader", "prefill worker"
DECODE_LEADER, DECODE_WORKER = "decode leader", "decode worker"
PREFILL = frozenset({PREFILL_LEADER, PREFILL_WORKER})
DECODE = frozenset({DECODE_LEADER, DECODE_WORKER})
EVERY_POD = PREFILL | DECODE
LEADERS = frozenset({PREFILL_LEADER, DECODE_LEADER})

# What connects to it (beyond the pod's own LWS group, which reaches every port of the group).
GROUP = "same group"  # the other hosts of the slice: Ray, the TPU runtime
# Every decode pod of the deployment, dialing the prefill pods' listener (host k pulls from
# prefill host k; the decode leader's sidecar sends the prefill to a prefill leader).
DECODE_PEERS = "decode pods"
POOL_CLIENTS = "pool clients"  # the gateway's proxies and probers, the endpoint picker, the sidecar
PROMETHEUS = "prometheus"
SMOKE_TEST = "smoke test"  # reads both roles' vLLM metrics (pods/smoke_request.py)
LOCAL = "the pod itself"  # bound to localhost or reached only from inside the pod

# The kernel's default ephemeral range (Linux net.ipv4.ip_local_port_range 32768-60999): where a
# bind to port 0 lands. NetworkPolicy cannot name "whatever the kernel picked", so the peers that
# must reach such a port are admitted on every TCP port.
EPHEMERAL = (32768, 60999)

KV_TRANSFER_PORT = 9100  # tpu-inference v0.26.0 tpu_inference/distributed/utils.py:61-63, the default
SIDE_CHANNEL_PORT = 9600  # tpu-inference v0.26.0 tpu_inference/distributed/utils.py:66-68, the default
TPU_RUNTIME_METRICS_PORT = 8431


@dataclass(frozen=True)
class Listener:
    name: str
    ports: tuple[int, int]  # first and last port; EPHEMERAL when the program binds to port 0
    opened_by: frozenset[str]
    reached_by: frozenset[str]
    source: str  # repository@tag:path:line of the code that opens it

    @property
    def ephemeral(self) -> bool:
        return self.ports == EPHEMERAL

    @property
    def port(self) -> int:
        return self.ports[0]


def _one(port: int) -> tuple[int, int]:
    return (port, port)


LISTENERS: tuple[Listener, ...] = (
    Listener(
        "vllm-api-prefill",
        _one(POOL_PORT),
        frozenset({PREFILL_LEADER}),
        frozenset({POOL_CLIENTS, PROMETHEUS, DECODE_PEERS, SMOKE_TEST}),
        "vllm v0.26.0 vllm/entrypoints/openai/api_server.py:636 (binds --port on every interface)",
    ),
    Listener(
        "vllm-api-decode",
        _one(DECODE_VLLM_PORT),
        frozenset({DECODE_LEADER}),
        frozenset({LOCAL, PROMETHEUS, SMOKE_TEST}),
        "vllm v0.26.0 vllm/entrypoints/openai/api_server.py:636; the sidecar reaches it on localhost",
    ),
    Listener(
        "routing-sidecar",
        _one(POOL_PORT),
        frozenset({DECODE_LEADER}),
        frozenset({POOL_CLIENTS}),
        "llm-d-router v0.9.0 pkg/sidecar/proxy/proxy_helpers.go:32 (net.Listen on --port, its only listener)",
    ),
    Listener(
        "tpu-kv-transfer",
        _one(KV_TRANSFER_PORT),
        EVERY_POD,
        frozenset({DECODE_PEERS}),
        "tpu-inference v0.26.0 tpu_inference/distributed/tpu_connector.py:570-585 (start_transfer_server on "
        "every host, both roles; decode dials prefill's, tpu_connector.py:795-808)",
    ),
    Listener(
        "tpu-kv-bulk",
        EPHEMERAL,
        EVERY_POD,
        frozenset({DECODE_PEERS}),
        "tpu-inference v0.26.0 tpu_inference/distributed/tpu_connector.py:574,578 ([host_ip:0] x "
        "TPU_KV_TRANSFER_CHANNEL_NUMBER, 8 by default, utils.py:71-73); jaxlib 0.10.2 "
        "jaxlib/py_socket_transfer.cc:224 (socket bulk transport: decode connects to each)",
    ),
    Listener(
        "tpu-pd-coord",
        _one(SIDE_CHANNEL_PORT),
        PREFILL,
        frozenset({DECODE_PEERS}),
        "tpu-inference v0.26.0 tpu_inference/distributed/tpu_connector.py:505-513,587-592 (zmq ROUTER on "
        "tcp://*:port, producers only; decode's DEALER connects, tpu_connector.py:882-897)",
    ),
    Listener(
        "ray-gcs",
        _one(6379),
        LEADERS,
        frozenset({GROUP}),
        "vllm v0.26.0 examples/online_serving/multi-node-serving.sh (ray start --head --port=6379); "
        "ray 2.56.1 python/ray/scripts/scripts.py:974-980",
    ),
    Listener(
        "ray-client",
        _one(10001),
        LEADERS,
        frozenset({GROUP}),
        "ray 2.56.1 python/ray/scripts/scripts.py:919-920, python/ray/_private/node.py:1379-1380 (head only)",
    ),
    Listener(
        "ray-dashboard-agent",
        _one(52365),
        EVERY_POD,
        frozenset({GROUP}),
        "ray 2.56.1 python/ray/scripts/scripts.py:619-623, python/ray/_private/ray_constants.py:168",
    ),
    Listener(
        "ray-worker-grpc",
        (10002, 19999),
        EVERY_POD,
        frozenset({GROUP}),
        "ray 2.56.1 python/ray/scripts/scripts.py:515-529 (core workers' --min/max-worker-port defaults)",
    ),
    Listener(
        "ray-node-ports",
        EPHEMERAL,
        EVERY_POD,
        frozenset({GROUP}),
        "ray 2.56.1 python/ray/scripts/scripts.py:508-513, python/ray/_private/services.py:1849-1850 (node "
        "and object manager, agents and metrics export bound to port 0)",
    ),
    Listener(
        "tpu-metrics",
        _one(TPU_RUNTIME_METRICS_PORT),
        EVERY_POD,
        frozenset({LOCAL}),
        "libtpu (closed source): tpu-info reads the runtime at grpc://localhost:8431; GKE reads TPU metrics "
        "only from containers that declare it (GKE docs, TPU observability)",
    ),
)


def opened_by(pod: str) -> tuple[Listener, ...]:
    return tuple(listener for listener in LISTENERS if pod in listener.opened_by)
