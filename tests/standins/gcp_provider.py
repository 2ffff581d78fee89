"""Stand-in `pulumi-resource-gcp` 10.2.0 for the real-engine tests.

The real provider bridges a patched Terraform provider whose module the proxy does not serve.
This one answers with the same placeholders as the offline plan (`plan.engine.cloud_state`):
a cluster endpoint and CA, service-account emails, dashboard ids, the project number and
the GKE versions a channel offers; on TPU node pools it also reports back what GKE fills in
(`gke_state`), and its Diff treats the fields GKE reports but the provider does not compute as
changes, some of them forcing a new pool, as the wrapped Terraform resource does.

What it cannot show: whether Google Cloud accepts a field or a combination of fields (the
bridged schema's validation and the API's), which fields force a replacement, what GKE returns
for fields it normalises, and every timing. Those are listed in the README under
"What only the real cloud can check".
"""

from __future__ import annotations

import base64
import functools
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from plan.engine import cloud_invoke, cloud_state
from tests.standins.provider import StandInProvider, run

NODE_POOL = "gcp:container/nodePool:NodePool"

# What GKE reports back on a TPU node pool that the program does not set, as the peers that
# create these pools have seen it (vllm-project/ci-infra terraform/gcp_old/tpu-inference/k8s/
# workers.tf, `worker_tpu`; magic-modules PR #17643 and cluster-toolkit PR #5691 for the
# placement type). The values are illustrative; that GKE fills these fields in is the point.
GKE_REPORTED_ON_TPU_POOLS: dict[str, Any] = {
    "advancedMachineFeatures": {"threadsPerCore": 1},  # GKE turns SMT off on TPU hosts
    "guestAccelerators": [],
    "kubeletConfig": {"cpuCfsQuota": True, "podPidsLimit": 0},
    "shieldedInstanceConfig": {"enableIntegrityMonitoring": True, "enableSecureBoot": False},
}

# In the wrapped resource (resource_container_node_pool.go) these fields are not Computed, so
# a reported value the program leaves out reads as a change; and they force a new pool.
TRACKED = {
    NODE_POOL: frozenset({"nodeConfig.advancedMachineFeatures", "nodeConfig.guestAccelerators", "upgradeSettings"})
}
FORCE_NEW = {
    NODE_POOL: frozenset(
        {"placementPolicy", "nodeConfig.advancedMachineFeatures", "nodeConfig.machineType", "nodeConfig.imageType"}
    )
}


CLUSTER = "gcp:container/cluster:Cluster"
# The offline plan's endpoint is a documentation address (RFC 5737); a real engine would have
# the Kubernetes provider dial it. This one is on loopback, where nothing listens on port 1, so
# a test that reaches the Kubernetes half by mistake fails at once and sends nothing off the
# machine.
LOOPBACK_ENDPOINT = "127.0.0.1:1"
# A test that brings up a local control plane (tests/test_cluster_up.py) names it here: the cluster
# then reports that API server's address and CA, as GKE reports its control plane's.
ENDPOINT_ENV = "TPU_SLICING_STANDIN_GKE_ENDPOINT"
CA_FILE_ENV = "TPU_SLICING_STANDIN_GKE_CA_FILE"


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
    resource_id, state = cloud_state(token, name, inputs)
    if token == CLUSTER:
        ca_file = os.environ.get(CA_FILE_ENV)
        state["endpoint"] = os.environ.get(ENDPOINT_ENV) or LOOPBACK_ENDPOINT
        ca = base64.b64encode(Path(ca_file).read_bytes()).decode() if ca_file else cluster_ca()
        state["masterAuth"] = {"clusterCaCertificate": ca}
    if token == NODE_POOL:
        placement = dict(state.get("placementPolicy") or {})
        if placement.get("policyName"):
            placement["type"] = ""  # a workload policy: GKE stores no placement type
        if placement:
            state["placementPolicy"] = placement
        machine = str((state.get("nodeConfig") or {}).get("machineType", ""))
        if machine.startswith(("tpu7x-", "ct")):
            state["nodeConfig"] = {**GKE_REPORTED_ON_TPU_POOLS, **(state.get("nodeConfig") or {})}
            state.setdefault("upgradeSettings", {"maxSurge": 1, "maxUnavailable": 0, "strategy": "SURGE"})
    return resource_id, state


def provider() -> StandInProvider:
    return StandInProvider("10.2.0", gke_state, cloud_invoke, tracked=TRACKED, force_new=FORCE_NEW)


if __name__ == "__main__":
    run(provider())
