"""network.serviceCidr against the Services the cluster holds (settings/rules_network.py).

The controllers' charts are counted in tests/test_charts.py (they need the built Helm); GKE's own
Services cannot be read here (no cluster): the four named in rules_network.GKE_SERVICES are counted
as they are, and an add-on's beyond them is not.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from plan import engine
from settings import rules_network
from settings.loader import ConfigError
from tests.conftest import config_with, merged, stack_raw

SERVICE = "kubernetes:core/v1:Service"
# dev with every Service the program can make on vllm-pd: the metrics adapter comes with autoscaling.
AUTOSCALED = {
    "serving": {"decode": {"autoscaling": {"min": 2, "max": 4, "metric": "vllm:num_requests_waiting", "target": 8}}}
}


def _addressed(plan: engine.PlanResult) -> list[str]:
    """The plan's Services that take an address of the range (a headless one, clusterIP None, takes none)."""
    return sorted(r.name for r in plan.of_type(SERVICE) if (r.inputs.get("spec") or {}).get("clusterIP") != "None")


@pytest.mark.parametrize(
    ("stack", "overrides"),
    [("dev", AUTOSCALED), ("dev-b", {}), ("saxml-v5e", {}), ("jetstream-v5e", {})],
    ids=["dev-autoscaled", "dev-b", "saxml-v5e", "jetstream-v5e"],
)
def test_the_program_makes_exactly_the_services_the_rule_counts_for_its_backend(
    stack: str, overrides: dict[str, Any]
) -> None:
    raw, secrets = stack_raw(stack)
    plan = engine.run(merged(overrides, raw), stack=stack, secret_keys=secrets)
    backend = config_with(overrides, stack=stack).serving.backend.value
    assert len(_addressed(plan)) == rules_network.BACKEND_SERVICES[backend][1], _addressed(plan)


@hypothesis_settings(max_examples=20, deadline=None)
@given(st.sampled_from(["dev", "dev-b", "saxml-v5e", "jetstream-v5e"]), st.integers(24, 30))
def test_a_range_is_refused_exactly_when_it_addresses_fewer_than_the_cluster_holds(stack: str, prefix: int) -> None:
    needed = sum(rules_network.services_needed(config_with(stack=stack)).values())
    try:
        config_with({"network": {"serviceCidr": f"10.20.0.0/{prefix}"}}, stack=stack)
    except ConfigError as refused:
        message = str(refused)
        assert rules_network.service_addresses(prefix) < needed, message
        assert f"network.serviceCidr 10.20.0.0/{prefix} gives {2 ** (32 - prefix) - 2} Service addresses" in message
        assert f"holds {needed} Services" in message
    else:
        assert rules_network.service_addresses(prefix) >= needed


def test_kubernetes_never_hands_out_the_network_or_broadcast_address() -> None:
    # ipallocator.go hostsPerNetwork at v1.36.3: 2^x - 2 for IPv4, never below zero.
    assert [rules_network.service_addresses(p) for p in (20, 27, 28, 30, 31, 32)] == [4094, 30, 14, 2, 0, 0]
