"""What every serving backend is built on: the cluster, its pools and controllers, and (on the
dynamic-slicing platform) the slice controller, the Kueue queues and the serving namespace's
NetworkPolicies. `__main__.py` builds it; each backend module only adds its own components."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes

from contracts.network_policies import NetworkPolicies
from domain.topology import Generation, MachineType
from infra.cluster import Cluster
from infra.network import Network
from infra.tpu_pools import TpuPools
from k8s.controllers import Controllers
from k8s.kueue_queues import KueueQueues
from k8s.slice_controller import SliceController
from settings.model import StackConfig


@dataclass(frozen=True)
class Foundation:
    config: StackConfig
    provider: kubernetes.Provider
    network: Network
    cluster: Cluster
    tpu_pools: TpuPools
    controllers: Controllers
    generation: Generation
    machine: MachineType
    # The dynamic-slicing platform only (TPU7x cubes): None on slice backends.
    slice_controller: SliceController | None = None
    queues: KueueQueues | None = None
    serving_policies: NetworkPolicies | None = None


@dataclass(frozen=True)
class Served:
    """What a backend hands back: the stack outputs it adds, and what the serving namespace's
    PodMonitorings wait for (None: the backend has no scrape targets)."""

    outputs: Mapping[str, Any] = field(default_factory=dict)
    monitored_after: list[pulumi.Resource] | None = None
