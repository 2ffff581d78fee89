"""JobSets that prove sub-slicing and super-slicing with a real JAX program.

Each pod runs `pods/slice_check.py` (shipped in a ConfigMap) on a pinned
JAX TPU image: it checks device counts against the slice shape, runs a
cross-device collective and exits, so the Job completes or fails instead of
sleeping forever as the reference's pods do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes
from pulumi_kubernetes.core import v1 as core
from pulumi_kubernetes.meta import v1 as meta

from contracts import network_policies, pod_security
from contracts.kubernetes_object import KubernetesObject
from contracts.labels import COMMON_LABELS
from domain.serving_budget import BUDGET
from domain.topology import Generation, Topology
from settings.rules_recovery import healthy_selector

PROGRAM = Path(__file__).resolve().parent.parent / "pods" / "slice_check.py"
MOUNT = "/opt/slice-check"
CONFIG_MAP = "slice-check-program"
SERVICE_ACCOUNT = "slice-check"
SLICE_TOPOLOGY_ANNOTATION = "cloud.google.com/gke-tpu-slice-topology"
JOBSET_API = "jobset.x-k8s.io/v1alpha2"


@dataclass(frozen=True)
class SliceCheck:
    name: str
    topology: str
    replicas: int
    priority_class: str


@dataclass(frozen=True)
class SlicingChecksArgs:
    provider: kubernetes.Provider
    namespace: str
    local_queue: str
    generation: Generation
    image: str
    checks: Sequence[SliceCheck]
    depends_on: Sequence[pulumi.Resource] = ()


def jobset_body(check: SliceCheck, args: SlicingChecksArgs) -> dict[str, Any]:
    generation = args.generation
    shape = Topology.parse(check.topology)
    pods = generation.vms(shape)
    chips_per_pod = generation.host_machine(shape).chips_per_vm
    container = {
        "name": "slice-check",
        "image": args.image,
        "command": ["python3", f"{MOUNT}/slice_check.py"],
        "env": [
            {"name": "SLICE_TOPOLOGY", "value": check.topology},
            {"name": "DEVICES_PER_CHIP", "value": str(generation.devices_per_chip)},
            {"name": "CHIPS_PER_HOST", "value": str(chips_per_pod)},
            {"name": "PYTHONUNBUFFERED", "value": "1"},
            # Peers start up to one image pull apart; the JobSet is not restarted (maxRestarts 0),
            # so a rendezvous that times out is a real fault, reported once (domain/serving_budget.py).
            {"name": "SLICE_INIT_TIMEOUT_SECONDS", "value": str(BUDGET.slice_check_init_seconds)},
            {"name": "SLICE_DEADLINE_SECONDS", "value": str(BUDGET.slice_check_deadline_seconds)},
        ],
        "resources": {
            "requests": {"google.com/tpu": str(chips_per_pod)},
            "limits": {"google.com/tpu": str(chips_per_pod)},
        },
        "volumeMounts": [{"name": "program", "mountPath": MOUNT, "readOnly": True}],
    }
    return {
        "apiVersion": JOBSET_API,
        "kind": "JobSet",
        "metadata": {
            "name": check.name,
            "namespace": args.namespace,
            "labels": {
                **COMMON_LABELS,
                "kueue.x-k8s.io/queue-name": args.local_queue,
                "kueue.x-k8s.io/priority-class": check.priority_class,
            },
            # Kueue may hold or preempt it by design (the checks compete with
            # serving), so `pulumi up` must not wait for it to finish.
            "annotations": {"pulumi.com/skipAwait": "true"},
        },
        "spec": {
            "failurePolicy": {"maxRestarts": 0},
            "network": {"enableDNSHostnames": True},
            "replicatedJobs": [
                {
                    "name": "slice",
                    "replicas": check.replicas,
                    "template": {
                        "spec": {
                            "parallelism": pods,
                            "completions": pods,
                            "completionMode": "Indexed",
                            "backoffLimit": 0,
                            "template": {
                                "metadata": {"annotations": {SLICE_TOPOLOGY_ANNOTATION: check.topology}},
                                "spec": pod_security.harden(
                                    {
                                        "restartPolicy": "Never",
                                        "serviceAccountName": SERVICE_ACCOUNT,
                                        # HEALTHY partitions only (a super-slice: every cube
                                        # HEALTHY), settings/rules_recovery.py. No skip-tpu-webhook
                                        # annotation: the slice controller's Job and JobSet
                                        # webhooks add none (xpk slice/internal/webhooks), unlike
                                        # its LWS webhook (workloads/vllm_pd.py).
                                        "nodeSelector": {
                                            "cloud.google.com/gke-tpu-accelerator": generation.accelerator_label,
                                            **healthy_selector(generation, shape),
                                        },
                                        "tolerations": [
                                            {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}
                                        ],
                                        "containers": [container],
                                        "volumes": [{"name": "program", "configMap": {"name": CONFIG_MAP}}],
                                    }
                                ),
                            },
                        }
                    },
                }
            ],
        },
    }


def network_allowances(checks: Sequence[SliceCheck]) -> list[network_policies.Allowance]:
    """The hosts of one checked slice (one JobSet child Job) reach each other on every port (JAX's
    coordinator and its peers); nothing else reaches them."""
    return [
        allowance
        for check in checks
        for allowance in network_policies.within_groups(
            check.name,
            {network_policies.JOBSET_NAME_LABEL: check.name},
            network_policies.JOBSET_JOB_INDEX_LABEL,
            check.replicas,
        )
    ]


class SlicingChecks(pulumi.ComponentResource):
    jobsets: dict[str, KubernetesObject]

    def __init__(self, name: str, args: SlicingChecksArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tpu-slicing:k8s:SlicingChecks", name, None, opts)
        program = core.ConfigMap(
            "program",
            metadata=meta.ObjectMetaArgs(name=CONFIG_MAP, namespace=args.namespace, labels=dict(COMMON_LABELS)),
            data={"slice_check.py": PROGRAM.read_text()},
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=list(args.depends_on)),
        )
        # The checks' own identity, with no token: JAX needs no Kubernetes API.
        account = core.ServiceAccount(
            "service-account",
            metadata=meta.ObjectMetaArgs(name=SERVICE_ACCOUNT, namespace=args.namespace, labels=dict(COMMON_LABELS)),
            automount_service_account_token=False,
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=list(args.depends_on)),
        )
        self.jobsets = {
            check.name: KubernetesObject(
                check.name,
                jobset_body(check, args),
                pulumi.ResourceOptions(
                    parent=self,
                    provider=args.provider,
                    depends_on=[*args.depends_on, program, account],
                    # A changed check is a new run, not an in-place edit of a finished JobSet.
                    replace_on_changes=["spec"],
                    delete_before_replace=True,
                ),
            )
            for check in args.checks
        }
        self.register_outputs({"jobsets": list(self.jobsets)})
