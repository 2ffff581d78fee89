"""The stand-in GCP provider's model of GKE: what it reports back, and what then diffs."""

from __future__ import annotations

from google.protobuf import struct_pb2
from pulumi.runtime.proto import provider_pb2

from tests.standins import gcp_provider
from tests.standins.provider import changed_paths, to_struct

POOL_URN = "urn:pulumi:dev::tpu-slicing::tpu-slicing:infra:TpuPools$gcp:container/nodePool:NodePool::cube-1"


def pool_inputs(placement_type: str) -> dict:
    return {
        "name": "dev-tpu-1",
        "placementPolicy": {"type": placement_type, "policyName": "dev-cube-policy"},
        "nodeConfig": {"machineType": "tpu7x-standard-4t", "imageType": "COS_CONTAINERD"},
    }


def diff(olds: dict, news: dict, ignore: list[str]) -> provider_pb2.DiffResponse:
    request = provider_pb2.DiffRequest(
        urn=POOL_URN, type=gcp_provider.NODE_POOL, olds=to_struct(olds), news=to_struct(news), ignoreChanges=ignore
    )
    request.old_inputs.CopyFrom(struct_pb2.Struct())
    return gcp_provider.provider().Diff(request, None)


def test_gke_stores_no_placement_type_with_a_workload_policy() -> None:
    _, state = gcp_provider.gke_state(gcp_provider.NODE_POOL, "cube-1", pool_inputs("COMPACT"))
    assert state["placementPolicy"] == {"type": "", "policyName": "dev-cube-policy"}
    assert state["nodeConfig"]["advancedMachineFeatures"] == {"threadsPerCore": 1}


def test_a_compact_type_with_a_workload_policy_replaces_the_pool_on_the_next_preview() -> None:
    _, state = gcp_provider.gke_state(gcp_provider.NODE_POOL, "cube-1", pool_inputs("COMPACT"))
    ignored = ["nodeConfig.advancedMachineFeatures", "nodeConfig.guestAccelerators", "upgradeSettings"]
    response = diff(state, pool_inputs("COMPACT"), ignored)
    assert response.changes == provider_pb2.DiffResponse.DIFF_SOME
    assert list(response.replaces) == ["placementPolicy"]


def test_fields_gke_reports_back_diff_unless_ignored() -> None:
    _, state = gcp_provider.gke_state(gcp_provider.NODE_POOL, "cube-1", pool_inputs(""))
    assert diff(state, pool_inputs(""), []).changes == provider_pb2.DiffResponse.DIFF_SOME
    assert list(diff(state, pool_inputs(""), []).replaces) == ["nodeConfig"]
    ignored = ["nodeConfig.advancedMachineFeatures", "nodeConfig.guestAccelerators", "upgradeSettings"]
    assert diff(state, pool_inputs(""), ignored).changes == provider_pb2.DiffResponse.DIFF_NONE


def test_changed_paths_compares_what_the_program_sets() -> None:
    olds = {"a": {"b": 1, "c": 2}, "d": 3}
    assert changed_paths(olds, {"a": {"b": 1}}) == []
    assert changed_paths(olds, {"a": {"b": 2}}) == ["a.b"]
    assert changed_paths(olds, {"a": {"b": 1}}, frozenset({"a.c"})) == ["a.c"]
