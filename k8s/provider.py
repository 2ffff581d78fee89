"""The Kubernetes provider for the stack's cluster."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as kubernetes

from infra.cluster import Cluster

# Labels every object this program creates carries, so `kubectl get -l` finds them.
COMMON_LABELS = {"app.kubernetes.io/managed-by": "pulumi", "app.kubernetes.io/part-of": "tpu-slicing"}


def cluster_provider(cluster: Cluster) -> kubernetes.Provider:
    """A provider that depends on the cluster and its system pool only.

    Not on the TPU pools: controllers install while the TPU pools are still
    provisioning; only objects that consume TPUs wait for the pools.
    """
    return kubernetes.Provider(
        "gke",
        kubernetes.ProviderArgs(
            kubeconfig=cluster.kubeconfig,
            enable_server_side_apply=True,
            # Identifies the cluster across kubeconfig changes: an in-place cluster update makes
            # the kubeconfig unknown during preview, which would otherwise plan a replacement of
            # every object (pulumi-kubernetes, Provider `clusterIdentifier`).
            cluster_identifier=cluster.cluster.id,
            # Not delete_unreachable: a transient auth or network failure during a
            # refresh would drop every object from state. After deleting a cluster out
            # of band, run `PULUMI_K8S_DELETE_UNREACHABLE=true pulumi destroy` (README).
        ),
        opts=pulumi.ResourceOptions(parent=cluster, depends_on=[cluster.cluster, cluster.system_pool]),
    )
