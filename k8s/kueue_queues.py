"""Kueue's topology-aware queueing for the TPU cubes: Topology, flavor, admission check, queues, priorities.

Sub-slices must stay inside one partition of the cube and super-slices inside
one reservation block; the Topology's levels tell Kueue's topology-aware
scheduler exactly that, and the slice controller's admission check forms the
ICI links of each admitted slice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes
from pulumi_kubernetes.core import v1 as core
from pulumi_kubernetes.meta import v1 as meta

from contracts import pod_security, quantities
from contracts.kubernetes_object import KubernetesObject
from contracts.labels import COMMON_LABELS
from settings.naming import Names

KUEUE_API = "kueue.x-k8s.io/v1beta2"
SLICE_CONTROLLER_NAME = "accelerator.gke.io/slice"
TPU_RESOURCE = "google.com/tpu"
LOCAL_QUEUE = "tpu"


@dataclass(frozen=True)
class KueueQueuesArgs:
    provider: kubernetes.Provider
    names: Names
    namespace: str
    topology_levels: Sequence[str]
    accelerator_label: str
    priorities: Sequence[tuple[str, int]]
    tpu_chips: int
    vcpus: int
    memory_gib: int
    kueue: Sequence[pulumi.Resource]  # Kueue's release, or nothing when it is already installed
    slice_controller: pulumi.Resource
    # What Kueue's manager Configuration adds for recovery (settings/rules_recovery.py), shown on the queue.
    recovery: Mapping[str, Any] = field(default_factory=dict)


def _metadata(name: str, namespace: str | None = None, **annotations: str) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "labels": dict(COMMON_LABELS)}
    if namespace:
        metadata["namespace"] = namespace
    if annotations:
        metadata["annotations"] = annotations
    return metadata


def recovery_annotations(recovery: Mapping[str, Any]) -> dict[str, str]:
    """Kueue's recovery settings as the ClusterQueue's annotations, one line each: a plan diff shows
    the one that changed (inside the chart's values they are one long string), and a shared
    cluster's queue says what its platform team's Kueue must run with (docs/deploy.md)."""
    if not recovery:
        return {}
    ready = dict(recovery["waitForPodsReady"])
    strategy = ready.pop("requeuingStrategy")

    def line(values: Mapping[str, Any]) -> str:
        return " ".join(
            f"{key}={str(value).lower() if isinstance(value, bool) else value}" for key, value in values.items()
        )

    return {
        "tpu-slicing/kueue-wait-for-pods-ready": line(ready),
        "tpu-slicing/kueue-requeuing": line({**strategy, "backoffLimitCount": "unlimited"}),
        "tpu-slicing/kueue-feature-gates": line(recovery["featureGates"]),
    }


def cluster_queue_spec(args: KueueQueuesArgs) -> dict[str, Any]:
    """Quota equals what the pools really hold, so Kueue never admits more than fits."""
    return {
        "namespaceSelector": {},
        "admissionChecksStrategy": {"admissionChecks": [{"name": args.names.admission_check}]},
        "preemption": {"withinClusterQueue": "LowerPriority"},
        "resourceGroups": [
            {
                "coveredResources": [TPU_RESOURCE, "cpu", "memory"],
                "flavors": [
                    {
                        "name": args.names.resource_flavor,
                        "resources": [
                            {"name": TPU_RESOURCE, "nominalQuota": str(args.tpu_chips)},
                            {"name": "cpu", "nominalQuota": str(args.vcpus)},
                            {"name": "memory", "nominalQuota": quantities.binary(args.memory_gib)},
                        ],
                    }
                ],
            }
        ],
    }


class KueueQueues(pulumi.ComponentResource):
    namespace: core.Namespace
    local_queue: KubernetesObject
    priority_classes: dict[str, KubernetesObject]

    def __init__(self, name: str, args: KueueQueuesArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tpu-slicing:k8s:KueueQueues", name, None, opts)
        names = args.names
        after_kueue = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=list(args.kueue))

        def resource(
            logical: str,
            kind: str,
            metadata: dict[str, Any],
            spec: dict[str, Any],
            opts: pulumi.ResourceOptions = after_kueue,
        ) -> KubernetesObject:
            body = {"apiVersion": KUEUE_API, "kind": kind, "metadata": metadata, "spec": spec}
            return KubernetesObject(logical, body, opts)

        topology = resource(
            "topology",
            "Topology",
            _metadata(names.kueue_topology),
            {"levels": [{"nodeLabel": level} for level in args.topology_levels]},
        )
        flavor = resource(
            "resource-flavor",
            "ResourceFlavor",
            _metadata(names.resource_flavor),
            {
                "nodeLabels": {"cloud.google.com/gke-tpu-accelerator": args.accelerator_label},
                "topologyName": names.kueue_topology,
            },
            pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[*args.kueue, topology]),
        )
        check = resource(
            "admission-check",
            "AdmissionCheck",
            _metadata(names.admission_check),
            {"controllerName": SLICE_CONTROLLER_NAME},
        )
        cluster_queue = resource(
            "cluster-queue",
            "ClusterQueue",
            # Active only once its flavor exists and the slice controller has marked
            # the admission check active: a real readiness signal.
            _metadata(
                names.cluster_queue,
                **{"pulumi.com/waitFor": "condition=Active", "pulumi.com/timeoutSeconds": "600"},
                **recovery_annotations(args.recovery),
            ),
            cluster_queue_spec(args),
            pulumi.ResourceOptions(
                parent=self, provider=args.provider, depends_on=[*args.kueue, args.slice_controller, flavor, check]
            ),
        )
        self.namespace = core.Namespace(
            "workload-namespace",
            metadata=meta.ObjectMetaArgs(
                name=args.namespace, labels={**COMMON_LABELS, **pod_security.namespace_labels(pod_security.SERVING)}
            ),
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider),
        )
        self.local_queue = resource(
            "local-queue",
            "LocalQueue",
            _metadata(LOCAL_QUEUE, args.namespace),
            {"clusterQueue": names.cluster_queue},
            pulumi.ResourceOptions(
                parent=self, provider=args.provider, depends_on=[*args.kueue, cluster_queue, self.namespace]
            ),
        )
        self.priority_classes = {
            level: KubernetesObject(
                f"priority-{level}",
                {
                    "apiVersion": KUEUE_API,
                    "kind": "WorkloadPriorityClass",
                    "metadata": _metadata(names.priority_class(level)),
                    # WorkloadPriorityClass keeps value and description at the top level.
                    "value": value,
                    "description": f"{level.capitalize()} priority TPU workloads",
                },
                after_kueue,
            )
            for level, value in args.priorities
        }
        self.register_outputs({"clusterQueue": names.cluster_queue, "localQueue": LOCAL_QUEUE})
