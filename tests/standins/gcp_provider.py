"""Stand-in `pulumi-resource-gcp` 10.2.0 for the real-engine tests: a bare Google Cloud project.

The real provider bridges a patched Terraform provider whose module the proxy does not serve, and
Google Cloud cannot be reached from here. This stand-in plays both, from upstream facts only:

- **Check** refuses what the bridged schema refuses (a missing Required argument, a value outside
  a StringInSlice) and, with the discovery documents of `google.golang.org/api` in the Go module
  cache (tools/gcpdata), a value outside the API's enum (gcp_schema.validate);
- **Diff** is the provider's plan: ForceNew, Computed and the SDK's nested-block rules of the
  wrapped resource, row by row with their source lines (gcp_schema.diff);
- **Create, Update, Delete and Invoke** go to a bare project (gcp_project.Project): only the
  services Google enables by default are on until a `gcp:projects/service:Service` enables one; a
  call to a disabled API, a Workload Identity member before its pool's cluster, a name that exists
  (409), a pool on a reservation path the project does not hold (tests/standins/reservations.py),
  of another machine type than its reservation's, on a full sub-block, in an AI zone before the
  ai-zones-visibility feature, or whose VMs and topology disagree with its workload policy or
  `tpu_topology`, is refused with GCP's error; a pool on an unhealthy sub-block is created and its
  VMs stay unprovisioned;
- **Invoke** of getReservationBlock and getReservationSubBlock answers the project's reservation as the
  provider would (its field names, no maintenance window), after the Compute API is on, 404 for a block
  or sub-block it does not hold;
- **Read** returns what GKE reports (gcp_project.reported plus the placement GKE fills in), so a
  refresh or the preview after `up` meets GKE's answers, not the program's inputs.

The project lives in the JSON file `PROJECT_ENV` names (the engine starts this plugin anew for
every command); without it, an in-memory project that starts bare for each command.

What it still cannot show: IAM permissions (beyond what a pod may do in Cloud Storage: gcp_access.py) and
org policies, quotas and stockouts, the time an
API takes to become usable after it is enabled, every server-side default and normalisation the
tables do not list, the ~10 minutes a cluster takes (the engine's ordering, not timing, is what
the dependency tests judge), and anything the TPU runtime does. The README lists these under
"What only the real cloud can check".
"""

from __future__ import annotations

import base64
import functools
import os
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import grpc
from pulumi.runtime.proto import provider_pb2

from plan.engine import cloud_state
from settings.model import StackConfig
from tests.standins import gcp_project, gcp_schema, reservations
from tests.standins.gcp_project import Project
from tests.standins.provider import StandInProvider, resource_name, resource_type, run, to_dict, to_struct

NODE_POOL = gcp_project.NODE_POOL
CLUSTER = gcp_project.CLUSTER
RESOURCE_POLICY = gcp_project.RESOURCE_POLICY

# What GKE reports back on a TPU node pool that the program does not set, as the peers that
# create these pools have seen it (vllm-project/ci-infra terraform/gcp_old/tpu-inference/k8s/
# workers.tf, `worker_tpu`). Of these only advancedMachineFeatures is neither Computed nor
# updatable in the wrapped schema (gcp_schema: node_config.go), so left unignored it replaces
# the pool; the rest are Computed and never diff.
GKE_REPORTED_ON_TPU_POOLS: dict[str, Any] = {
    "advancedMachineFeatures": {"threadsPerCore": 1},  # GKE turns SMT off on TPU hosts
    "guestAccelerators": [],
    "kubeletConfig": {"cpuCfsQuota": True, "podPidsLimit": 0},
    "shieldedInstanceConfig": {"enableIntegrityMonitoring": True, "enableSecureBoot": False},
}

# The offline plan's endpoint is a documentation address (RFC 5737); a real engine would have
# the Kubernetes provider dial it. This one is on loopback, where nothing listens on port 1, so
# a test that reaches the Kubernetes half by mistake fails at once and sends nothing off the
# machine.
LOOPBACK_ENDPOINT = "127.0.0.1:1"
# A test that brings up a local control plane (tests/test_cluster_up.py) names it here: the cluster
# then reports that API server's address and CA, as GKE reports its control plane's.
ENDPOINT_ENV = "TPU_SLICING_STANDIN_GKE_ENDPOINT"
CA_FILE_ENV = "TPU_SLICING_STANDIN_GKE_CA_FILE"
# The bare project's state file (gcp_project.Project), shared by every command of one test.
PROJECT_ENV = "TPU_SLICING_STANDIN_GCP_PROJECT"


@functools.cache
def cluster_ca() -> str:
    """A throw-away self-signed CA, base64 PEM as GKE returns it: a real certificate, so the
    Kubernetes provider's configuration parses, and one that signs nothing."""
    with tempfile.TemporaryDirectory() as tmp:
        key, cert = Path(tmp) / "ca.key", Path(tmp) / "ca.crt"
        subprocess.run(
            [
                *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
                *("-subj", "/CN=stand-in-gke-ca", "-keyout", str(key), "-out", str(cert)),
            ],
            check=True,
            capture_output=True,
        )
        return base64.b64encode(cert.read_bytes()).decode()


def gke_state(token: str, name: str, inputs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The id and state a create returns, before the project's read-back (`GcpProvider._read_back`)."""
    resource_id, state = cloud_state(token, name, inputs)
    if token == CLUSTER:
        ca_file = os.environ.get(CA_FILE_ENV)
        state["endpoint"] = os.environ.get(ENDPOINT_ENV) or LOOPBACK_ENDPOINT
        ca = base64.b64encode(Path(ca_file).read_bytes()).decode() if ca_file else cluster_ca()
        state["masterAuth"] = {"clusterCaCertificate": ca}
    if token == NODE_POOL:
        machine = str((state.get("nodeConfig") or {}).get("machineType", ""))
        if machine.startswith(("tpu7x-", "ct")):
            state["nodeConfig"] = {**GKE_REPORTED_ON_TPU_POOLS, **(state.get("nodeConfig") or {})}
            state.setdefault("upgradeSettings", {"maxSurge": 1, "maxUnavailable": 0, "strategy": "SURGE"})
    return resource_id, state


class GcpProvider(StandInProvider):
    def __init__(self, project: Project) -> None:
        super().__init__("10.2.0", gke_state)
        self.project = project
        module = gcp_schema.api_module_dir(download=True)
        # Without the discovery documents (no Go here), only the provider's own checks apply.
        self.enums = gcp_schema.load_enums(module) if module is not None else None

    # --- plan

    def Check(self, request: Any, context: Any) -> Any:  # noqa: N802 - gRPC names
        token = request.type or resource_type(request.urn)
        if token not in gcp_schema.SCHEMA:
            return provider_pb2.CheckResponse(inputs=request.news)
        failures = [
            provider_pb2.CheckFailure(property="", reason=problem)
            for problem in gcp_schema.validate(token, to_dict(request.news), self.enums)
        ]
        return provider_pb2.CheckResponse(inputs=request.news, failures=failures)

    def Diff(self, request: Any, context: Any) -> Any:  # noqa: N802
        token = request.type or resource_type(request.urn)
        if token not in gcp_schema.SCHEMA:
            return super().Diff(request, context)
        planned = gcp_schema.diff(token, to_dict(request.olds), to_dict(request.news), tuple(request.ignoreChanges))
        if not planned.changed:
            return provider_pb2.DiffResponse(changes=provider_pb2.DiffResponse.DIFF_NONE)
        return provider_pb2.DiffResponse(
            changes=provider_pb2.DiffResponse.DIFF_SOME, diffs=list(planned.changed), replaces=list(planned.replaces)
        )

    # --- the project

    def _refused(self, context: Any, error: gcp_project.GcpError) -> None:
        context.abort(grpc.StatusCode.UNKNOWN, str(error))
        raise AssertionError("abort raises")

    def _read_back(self, token: str, state: Mapping[str, Any]) -> dict[str, Any]:
        """The state as GKE reports it: the project's normalisation, and on a pool under a workload
        policy the topology GKE reads back from that policy."""
        found = self.project.reported(token, state)
        placement = dict(found.get("placementPolicy") or {})
        if token == NODE_POOL and placement.get("policyName"):
            for record in self.project.resources.values():
                policy = record.get("state") or {}
                if record.get("token") == RESOURCE_POLICY and policy.get("name") == placement["policyName"]:
                    topology = (policy.get("workloadPolicy") or {}).get("acceleratorTopology")
                    if topology:
                        placement["tpuTopology"] = topology
            found["placementPolicy"] = placement
        return found

    def Create(self, request: Any, context: Any) -> Any:  # noqa: N802
        if request.preview:
            return provider_pb2.CreateResponse(properties=request.properties)
        token = request.type or resource_type(request.urn)
        inputs = to_dict(request.properties)
        resource_id, state = gke_state(token, request.name or resource_name(request.urn), inputs)
        error = self.project.try_create(token, inputs, state, resource_id)
        if error is not None:
            self._refused(context, error)
        return provider_pb2.CreateResponse(id=resource_id, properties=to_struct(self._read_back(token, state)))

    def Update(self, request: Any, context: Any) -> Any:  # noqa: N802
        if request.preview:
            return provider_pb2.UpdateResponse(properties=request.news)
        token = request.type or resource_type(request.urn)
        inputs = to_dict(request.news)
        resource_id, state = gke_state(token, request.name or resource_name(request.urn), inputs)
        self.project.updated(token, inputs, state, request.id or resource_id)
        return provider_pb2.UpdateResponse(properties=to_struct(self._read_back(token, state)))

    def Delete(self, request: Any, context: Any) -> Any:  # noqa: N802
        token = request.type or resource_type(request.urn)
        self.project.deleted(token, to_dict(request.properties))
        return super().Delete(request, context)

    def Read(self, request: Any, context: Any) -> Any:  # noqa: N802
        token = request.type or resource_type(request.urn)
        state = to_dict(request.properties)
        if not self.project.exists(token, state):
            return provider_pb2.ReadResponse(id="")  # gone: the engine drops it from the state
        return provider_pb2.ReadResponse(
            id=request.id, properties=to_struct(self._read_back(token, state)), inputs=request.inputs
        )

    def Invoke(self, request: Any, context: Any) -> Any:  # noqa: N802
        args = to_dict(request.args)
        error = self.project.refuse_invoke(request.tok, args)
        if error is not None:
            self._refused(context, error)
        try:
            answer = self.project.answer_invoke(request.tok, args)
        except NotImplementedError as err:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, str(err))
            raise AssertionError("abort raises") from err
        return provider_pb2.InvokeResponse(**{"return": to_struct(answer)})


def prepare(path: Path | None, config: StackConfig) -> Project:
    """A bare project holding what a stack's owner has before the first `pulumi up`: the reservations
    of tests/standins/reservations.py (the owner's, declared apart from any stack: a stack that names
    another reservation, zone, machine type or sub-block is refused as GCP would refuse it) and the
    model-weights bucket with uniform bucket-level access. Nothing is enabled or created."""
    project = reservations.declare(Project.at(path, project_id=config.project))
    if config.serving.model.weights_bucket:
        project.declare_bucket(config.serving.model.weights_bucket)
    return project


def provider() -> GcpProvider:
    path = os.environ.get(PROJECT_ENV)
    return GcpProvider(Project.at(Path(path) if path else None))


if __name__ == "__main__":
    run(provider())
