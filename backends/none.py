"""No serving: the cluster, its TPU cubes and the slicing checks only."""

from __future__ import annotations

from backends.foundation import Foundation, Served
from contracts.network_policies import Allowance
from settings.model import StackConfig


def allowances(config: StackConfig) -> list[Allowance]:
    return []


def deploy(base: Foundation) -> Served:
    return Served()
