"""The stand-in GCP provider as the engine meets it: the bridged provider's plan, GKE's read-back
and a bare project's refusals, each row that the earlier stand-in got wrong asserted the way the
wrapped provider behaves (tests/standins/gcp_schema.py cites the lines)."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2
from pulumi.runtime.proto import provider_pb2

from tests.standins import gcp_project, gcp_provider
from tests.standins.gcp_project import Project, SubBlock
from tests.standins.provider import changed_paths, to_dict, to_struct

pytestmark = pytest.mark.gcp_standin

POOL_URN = "urn:pulumi:dev::tpu-slicing::tpu-slicing:infra:TpuPools$gcp:container/nodePool:NodePool::cube-sub-block-0"
POLICY_URN = (
    "urn:pulumi:dev::tpu-slicing::tpu-slicing:infra:WorkloadPolicy$gcp:compute/resourcePolicy:ResourcePolicy::policy"
)
RESERVATION = "projects/example-tpu-project/reservations/r"
SUB_BLOCK = f"{RESERVATION}/reservationBlocks/block-0/reservationSubBlocks/sub-block-0"


class AbortedError(Exception):
    pass


class Context:
    def abort(self, code: grpc.StatusCode, message: str) -> None:
        raise AbortedError(message)


@pytest.fixture(scope="module")
def provider() -> gcp_provider.GcpProvider:
    return gcp_provider.GcpProvider(Project.at(None))


def pool_inputs(placement_type: str = "", **node_config: Any) -> dict[str, Any]:
    return {
        "name": "dev-tpu-sub-block-0",
        "cluster": "cluster-id",
        "location": "us-central1",
        "nodeCount": 16,
        "nodeLocations": ["us-central1-ai1a"],
        "placementPolicy": {"type": placement_type, "policyName": "dev-cube-policy"},
        "nodeConfig": {
            "machineType": "tpu7x-standard-4t",
            "imageType": "COS_CONTAINERD",
            "reservationAffinity": {
                "consumeReservationType": "SPECIFIC_RESERVATION",
                "key": "compute.googleapis.com/reservation-name",
                "values": [SUB_BLOCK],
            },
            **node_config,
        },
    }


def diff(
    provider: gcp_provider.GcpProvider, olds: dict, news: dict, ignore: list[str] | None = None
) -> provider_pb2.DiffResponse:
    request = provider_pb2.DiffRequest(
        urn=POOL_URN,
        type=gcp_provider.NODE_POOL,
        olds=to_struct(olds),
        news=to_struct(news),
        ignoreChanges=ignore or [],
    )
    request.old_inputs.CopyFrom(struct_pb2.Struct())
    return provider.Diff(request, Context())


def test_a_placement_type_change_updates_and_never_converges_unless_ignored(provider: gcp_provider.GcpProvider) -> None:
    # placementPolicy.type is neither Computed nor ForceNew: the old stand-in replaced the block.
    response = diff(provider, pool_inputs(""), pool_inputs("COMPACT"))
    assert response.changes == provider_pb2.DiffResponse.DIFF_SOME
    assert list(response.diffs) == ["placementPolicy"] and list(response.replaces) == []
    ignored = diff(provider, pool_inputs(""), pool_inputs("COMPACT"), ["placementPolicy.type"])
    assert ignored.changes == provider_pb2.DiffResponse.DIFF_NONE


def test_machine_and_image_type_update_in_place(provider: gcp_provider.GcpProvider) -> None:
    for field, value in (("machineType", "tpu7x-standard-4t-x"), ("imageType", "UBUNTU_CONTAINERD")):
        response = diff(provider, pool_inputs(), pool_inputs(**{field: value}))
        assert response.changes == provider_pb2.DiffResponse.DIFF_SOME, field
        assert list(response.replaces) == [], field


@pytest.mark.parametrize(
    ("what", "edit"),
    [
        ("the name", lambda i: i.update(name="dev-tpu-sub-block-9")),
        ("the location", lambda i: i.update(location="us-east5")),
        ("the sub-block", lambda i: i["nodeConfig"]["reservationAffinity"].update(values=[SUB_BLOCK + "x"])),
        ("the service account", lambda i: i["nodeConfig"].update(serviceAccount="other@p.iam.gserviceaccount.com")),
        ("the scopes", lambda i: i["nodeConfig"].update(oauthScopes=["https://www.googleapis.com/auth/devstorage"])),
        ("the metadata", lambda i: i["nodeConfig"].update(metadata={"k": "v"})),
        ("spot", lambda i: i["nodeConfig"].update(spot=True)),
    ],
)
def test_force_new_fields_replace_the_pool(provider: gcp_provider.GcpProvider, what: str, edit: Any) -> None:
    news = pool_inputs()
    edit(news)
    response = diff(provider, pool_inputs(), news)
    assert list(response.replaces), what


def test_fields_gke_reports_back_diff_only_where_the_schema_tracks_them(provider: gcp_provider.GcpProvider) -> None:
    _, state = gcp_provider.gke_state(gcp_provider.NODE_POOL, "cube-sub-block-0", pool_inputs())
    # advancedMachineFeatures is Optional, not Computed, ForceNew: reported and left out, it replaces.
    assert list(diff(provider, state, pool_inputs()).replaces) == ["nodeConfig"]
    ignored = ["nodeConfig.advancedMachineFeatures"]
    assert diff(provider, state, pool_inputs(), ignored).changes == provider_pb2.DiffResponse.DIFF_NONE


def test_check_refuses_an_unknown_placement_type_from_the_api_enum(provider: gcp_provider.GcpProvider) -> None:
    assert provider.enums is not None, "tools/gcpdata/fetch.sh: the discovery documents are test data"
    request = provider_pb2.CheckRequest(urn=POOL_URN, type=gcp_provider.NODE_POOL, news=to_struct(pool_inputs("BOGUS")))
    failures = [f.reason for f in provider.Check(request, Context()).failures]
    assert any("BOGUS" in f and "COMPACT" in f for f in failures), failures
    fine = provider_pb2.CheckRequest(urn=POOL_URN, type=gcp_provider.NODE_POOL, news=to_struct(pool_inputs("")))
    assert list(provider.Check(fine, Context()).failures) == []


def _create(provider: gcp_provider.GcpProvider, urn: str, token: str, inputs: dict) -> dict[str, Any]:
    request = provider_pb2.CreateRequest(urn=urn, type=token, properties=to_struct(inputs))
    return to_dict(provider.Create(request, Context()).properties)


def test_a_bare_project_refuses_gke_until_its_api_is_on_and_reads_back_the_policy_topology() -> None:
    project = Project.at(None)
    project.declare_reservation(
        RESERVATION,
        zone="us-central1-ai1a",
        machine_type="tpu7x-standard-4t",
        sub_blocks={"block-0": {"sub-block-0": SubBlock(16)}},
    )
    provider = gcp_provider.GcpProvider(project)
    cluster = {
        "name": "dev-gke",
        "location": "us-central1",
        "workloadIdentityConfig": {"workloadPool": "example-tpu-project.svc.id.goog"},
    }
    cluster_urn = "urn:pulumi:dev::tpu-slicing::tpu-slicing:infra:Cluster$gcp:container/cluster:Cluster::cluster"
    with pytest.raises(
        AbortedError, match=r"Error 403: Kubernetes Engine API has not been used .*SERVICE_DISABLED|accessNotConfigured"
    ):
        _create(provider, cluster_urn, gcp_provider.CLUSTER, cluster)
    for service in ("container.googleapis.com", "compute.googleapis.com"):
        _create(
            provider,
            f"urn:pulumi:dev::tpu-slicing::gcp:projects/service:Service::{service}",
            gcp_project.SERVICE,
            {"service": service, "disableOnDestroy": False},
        )
    _create(provider, cluster_urn, gcp_provider.CLUSTER, cluster)
    feature = {"name": "ai-zones-visibility", "activationStatus": "ENABLED"}
    _create(
        provider,
        "urn:pulumi:dev::tpu-slicing::gcp:compute/previewFeature:PreviewFeature::ai",
        gcp_project.PREVIEW_FEATURE,
        feature,
    )
    policy = {
        "name": "dev-cube-policy",
        "region": "us-central1",
        "workloadPolicy": {
            "type": "HIGH_THROUGHPUT",
            "acceleratorTopology": "4x4x4",
            "acceleratorTopologyMode": "PROVISION_ONLY",
        },
    }
    _create(provider, POLICY_URN, gcp_provider.RESOURCE_POLICY, policy)
    state = _create(provider, POOL_URN, gcp_provider.NODE_POOL, pool_inputs(""))
    # GKE stores no type under a workload policy and reads the policy's topology back.
    assert state["placementPolicy"] == {"type": "", "policyName": "dev-cube-policy", "tpuTopology": "4x4x4"}
    with pytest.raises(AbortedError, match="409"):
        _create(provider, POOL_URN, gcp_provider.NODE_POOL, pool_inputs(""))


def test_changed_paths_compares_what_the_program_sets() -> None:
    olds = {"a": {"b": 1, "c": 2}, "d": 3}
    assert changed_paths(olds, {"a": {"b": 1}}) == []
    assert changed_paths(olds, {"a": {"b": 2}}) == ["a.b"]
    assert changed_paths(olds, {"a": {"b": 1}}, frozenset({"a.c"})) == ["a.c"]
