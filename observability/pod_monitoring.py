"""Managed Service for Prometheus scrape configuration: one PodMonitoring per serving process.

GKE's managed collection (enabled on the cluster, infra/cluster.py) scrapes what
a PodMonitoring selects in its own namespace and labels every series with
`job` = the PodMonitoring's name, `namespace`, `cluster` and `instance` =
`<pod>:<port name>`. The dashboard and the alerts select by those job names,
which live in domain/metric_catalog.py next to the metrics.

What is scraped, per backend:

- ``vllm-pd``: the prefill and decode LeaderWorkerSet *leaders* only (workers
  join the leader's Ray cluster and serve no HTTP): prefill vLLM on its port
  `modelserver` (8000), decode vLLM on its port `vllm` (8200; the routing
  sidecar owns 8000 there); and the endpoint picker on `metrics` (9090).
  The EPP protects /metrics with Kubernetes authn/authz unless it runs with
  `--metrics-endpoint-auth=false` (k8s/router.py does not pass it today): until
  then its target answers 401 and its `up` is 0.
- ``jetstream``: the serving pods (Deployment pods, or LWS leaders on a
  Pathways slice; never Pathways workers) on the engine's `metrics` port
  (MaxText's `prometheus_port`, 9100).
- ``saxml``: nothing. Saxml documents no Prometheus endpoint.
- ``none``: nothing.

Kueue is not scraped either: see `NOT_SCRAPED` in the catalog.

The `*_body` functions build whole objects as plain dicts, without Pulumi, so
the tests check exactly what is applied.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes

from contracts.kubernetes_object import KubernetesObject
from contracts.labels import COMMON_LABELS, GUIDE_LABEL, JETSTREAM_SERVER_LABELS, ROLE_LABEL, SERVING_LABEL
from contracts.ports import DECODE_VLLM_PORT, EPP_METRICS_PORT, JETSTREAM_PROMETHEUS_PORT, POOL_PORT
from domain.metric_catalog import DEFAULT_GUIDE, JETSTREAM_JOB, VLLM_JOBS, epp_job

GMP_API = "monitoring.googleapis.com/v1"
BACKENDS = ("vllm-pd", "saxml", "jetstream", "none")
DEFAULT_INTERVAL = "30s"
METRICS_PATH = "/metrics"

# The container ports each scrape names (and the numbers behind them, for the reader and the tests).
VLLM_PORTS = {"prefill": ("modelserver", POOL_PORT), "decode": ("vllm", DECODE_VLLM_PORT)}
EPP_PORT = ("metrics", EPP_METRICS_PORT)
JETSTREAM_PORT = ("metrics", JETSTREAM_PROMETHEUS_PORT)


def _endpoint(port: str | int, interval: str, path: str = METRICS_PATH) -> dict[str, Any]:
    return {"port": port, "path": path, "interval": interval}


def pod_monitoring_body(
    name: str, namespace: str, selector: dict[str, str], endpoints: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "apiVersion": GMP_API,
        "kind": "PodMonitoring",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(COMMON_LABELS)},
        "spec": {"selector": {"matchLabels": dict(selector)}, "endpoints": endpoints},
    }


def vllm_leader_selector(role: str, guide: str = DEFAULT_GUIDE) -> dict[str, str]:
    """The leaders of one role: `llm-d.ai/inference-serving` is on leader pods only (workloads/vllm_pd.py)."""
    return {GUIDE_LABEL: guide, ROLE_LABEL: role, SERVING_LABEL: "true"}


def vllm_leader_body(
    namespace: str, role: str, guide: str = DEFAULT_GUIDE, interval: str = DEFAULT_INTERVAL
) -> dict[str, Any]:
    if role not in VLLM_PORTS:
        raise ValueError(f"vLLM role must be one of {sorted(VLLM_PORTS)}, not {role!r}")
    port_name, _ = VLLM_PORTS[role]
    return pod_monitoring_body(
        VLLM_JOBS[role], namespace, vllm_leader_selector(role, guide), [_endpoint(port_name, interval)]
    )


def epp_selector(guide: str = DEFAULT_GUIDE) -> dict[str, str]:
    """The endpoint picker's pods: the Deployment `<pool>-epp` selects `app.kubernetes.io/name` (k8s/router.py)."""
    return {"app.kubernetes.io/name": epp_job(guide)}


def epp_body(namespace: str, guide: str = DEFAULT_GUIDE, interval: str = DEFAULT_INTERVAL) -> dict[str, Any]:
    return pod_monitoring_body(epp_job(guide), namespace, epp_selector(guide), [_endpoint(EPP_PORT[0], interval)])


def jetstream_body(namespace: str, interval: str = DEFAULT_INTERVAL) -> dict[str, Any]:
    """JetStream's serving pods; prometheus_client answers on any path, /metrics included."""
    return pod_monitoring_body(
        JETSTREAM_JOB, namespace, dict(JETSTREAM_SERVER_LABELS), [_endpoint(JETSTREAM_PORT[0], interval)]
    )


def pod_monitoring_bodies(
    namespace: str, backend: str, guide: str = DEFAULT_GUIDE, interval: str = DEFAULT_INTERVAL
) -> list[dict[str, Any]]:
    """Every PodMonitoring a backend needs; saxml and none need none."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, not {backend!r}")
    if backend == "vllm-pd":
        return [
            vllm_leader_body(namespace, "prefill", guide, interval),
            vllm_leader_body(namespace, "decode", guide, interval),
            epp_body(namespace, guide, interval),
        ]
    if backend == "jetstream":
        return [jetstream_body(namespace, interval)]
    return []


@dataclass(frozen=True)
class PodMonitoringsArgs:
    provider: kubernetes.Provider
    namespace: str
    backend: str  # "vllm-pd" | "saxml" | "jetstream" | "none"
    depends_on: Sequence[pulumi.Resource] = ()  # at least the namespace
    guide: str = DEFAULT_GUIDE  # the llm-d guide label and InferencePool name (vllm-pd)
    interval: str = DEFAULT_INTERVAL


class PodMonitorings(pulumi.ComponentResource):
    """The PodMonitorings of the serving backend (none for saxml and none).

    The PodMonitoring CRD comes with GKE's managed collection, so nothing but the
    namespace has to exist first; a PodMonitoring whose pods do not exist yet
    simply has no targets.
    """

    monitorings: dict[str, KubernetesObject]

    def __init__(self, name: str, args: PodMonitoringsArgs, opts: pulumi.ResourceOptions | None = None):
        # The type token names the package the component was first in: it is part of every URN below it.
        super().__init__("tpu-slicing:k8s:PodMonitorings", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=list(args.depends_on))
        self.monitorings = {
            body["metadata"]["name"]: KubernetesObject(f"{body['metadata']['name']}-pod-monitoring", body, child)
            for body in pod_monitoring_bodies(args.namespace, args.backend, args.guide, args.interval)
        }
        self.register_outputs({"podMonitorings": sorted(self.monitorings)})
