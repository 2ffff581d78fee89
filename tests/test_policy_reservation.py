"""The policy pack's `tpu-pools-on-healthy-sub-blocks`: a preview that binds a sub-block read DEGRADED
is refused unless the stack accepts it with a reason; what was not read is not judged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plan import engine
from policy.guardrails import POLICIES, tpu_pools_on_healthy_sub_blocks
from tests.test_plan_reservation import snapshot, sub_block
from tests.test_policy import messages

TPU_POOLS = "tpu-slicing:infra:TpuPools"
POOL = "gcp:container/nodePool:NodePool"


def pools_component(tmp_path: Path, health: str | None, accept: dict[str, str] | None = None) -> engine.Resource:
    """The dev stack's TpuPools as a running stack previews it (its pools exist: no create hook runs)."""
    config, secret_keys = engine.read_stack_config(engine.stack_file("dev"))
    if accept:
        reservation = json.loads(config["tpu-slicing:reservation"])
        config["tpu-slicing:reservation"] = json.dumps({**reservation, "accept": accept})
    read = None if health is None else snapshot(tmp_path, sub_block("sub-block-0"), sub_block("sub-block-1", health))
    running = frozenset((POOL, f"cube-sub-block-{i}") for i in range(2))
    result = engine.run(config, stack="dev", secret_keys=secret_keys, snapshot=read, existing=running)
    return result.one(TPU_POOLS)


@pytest.mark.parametrize("form", ["recorded", "analyzer"])
def test_a_degraded_binding_is_refused_and_the_acceptance_passes(tmp_path: Path, form: str) -> None:
    assert tpu_pools_on_healthy_sub_blocks in POLICIES
    degraded = pools_component(tmp_path, "DEGRADED")
    [message] = messages(tpu_pools_on_healthy_sub_blocks, degraded, form=form)
    assert "binds sub-block sub-block-1, read DEGRADED" in message
    assert "tpu-slicing:reservation.accept: {sub-block-1: <reason>}" in message
    accepted = pools_component(tmp_path, "DEGRADED", {"sub-block-1": "drained, ticket 123"})
    assert messages(tpu_pools_on_healthy_sub_blocks, accepted, form=form) == []


@pytest.mark.parametrize("health", ["HEALTHY", None])
def test_a_healthy_or_unread_binding_passes(tmp_path: Path, health: str | None) -> None:
    component = pools_component(tmp_path, health)
    assert messages(tpu_pools_on_healthy_sub_blocks, component, form="recorded") == []
