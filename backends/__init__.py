"""The serving backends: one module each, registered here by `serving.backend`.

A backend is two functions: `allowances(config)`, what its pods need admitted in the serving
namespace of the dynamic-slicing platform, and `deploy(foundation)`, which adds its components and
returns its outputs. Adding a backend is a module and a line below (and its settings).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from backends import jetstream, none, saxml, vllm_pd
from backends.foundation import Foundation, Served
from contracts.network_policies import Allowance
from settings.model import Backend, StackConfig


@dataclass(frozen=True)
class ServingBackend:
    allowances: Callable[[StackConfig], list[Allowance]]
    deploy: Callable[[Foundation], Served]
    controllers: tuple[str, ...]  # the batch controllers its workloads need (k8s/controllers.py)


REGISTRY: dict[Backend, ServingBackend] = {
    Backend.VLLM_PD: ServingBackend(vllm_pd.allowances, vllm_pd.deploy, ("jobset", "kueue", "lws")),
    Backend.NONE: ServingBackend(none.allowances, none.deploy, ("jobset", "kueue", "lws")),
    Backend.SAXML: ServingBackend(saxml.allowances, saxml.deploy, ("jobset",)),
    Backend.JETSTREAM: ServingBackend(jetstream.allowances, jetstream.deploy, ("lws",)),
}
