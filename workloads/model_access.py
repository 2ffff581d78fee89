"""Read access to the model-weights bucket for the model servers, and nothing wider.

The model servers' Kubernetes service account is the IAM principal itself
(Workload Identity Federation, no Google service account), and the roles are
bound on the one bucket: the servers stream weights from it and write their
XLA compilation cache back under `xla_cache/`, the only prefix they may write
or delete in (workloads/bucket_access.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as kubernetes
from pulumi_kubernetes.core import v1 as core
from pulumi_kubernetes.meta import v1 as meta

from contracts.labels import COMMON_LABELS
from settings import storage_names
from workloads.bucket_access import grants, uniform_bucket

# Where vLLM writes compiled XLA programs (VLLM_XLA_CACHE_PATH in workloads/vllm_command.py).
CACHE_PREFIX = storage_names.XLA_CACHE_PREFIX


def workload_principal(project_number: str, project: str, namespace: str, service_account: str) -> str:
    return (
        f"principal://iam.googleapis.com/projects/{project_number}/locations/global/workloadIdentityPools/"
        f"{project}.svc.id.goog/subject/ns/{namespace}/sa/{service_account}"
    )


def workload_principal_output(
    project: str, namespace: pulumi.Input[str], service_account: str, identity_pool: Sequence[pulumi.Resource]
) -> pulumi.Output[str]:
    """The principal of a Kubernetes service account, read once the cluster's workload pool exists.

    The number, not the id, appears in Workload Identity principals; the project is looked up."""
    number = gcp.organizations.get_project_output(
        project_id=project, opts=pulumi.InvokeOutputOptions(depends_on=list(identity_pool))
    ).number
    return pulumi.Output.all(number, namespace).apply(
        lambda parts: workload_principal(str(parts[0]), project, str(parts[1]), service_account)
    )


@dataclass(frozen=True)
class ModelAccessArgs:
    provider: kubernetes.Provider
    project: str
    bucket: str
    namespace: pulumi.Input[str]
    service_account: str
    depends_on: pulumi.Resource
    # The cluster whose workload pool (`<project>.svc.id.goog`) the principals name. IAM refuses a
    # member of a pool that does not exist yet ("Identity Pool does not exist";
    # terraform-google-modules/terraform-google-kubernetes-engine#916), and the cluster also
    # waits for the project's APIs, Cloud Resource Manager's among them.
    identity_pool: pulumi.Resource
    # The one prefix its identity may write and delete in (workloads/bucket_access.py).
    write_prefix: str = CACHE_PREFIX


class ModelAccess(pulumi.ComponentResource):
    TYPE = "tpu-slicing:workloads:ModelAccess"
    service_account: core.ServiceAccount
    members: list[gcp.storage.BucketIAMMember]

    def __init__(self, name: str, args: ModelAccessArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(self.TYPE, name, None, opts)
        self.service_account = core.ServiceAccount(
            "model-server-account",
            metadata=meta.ObjectMetaArgs(
                name=args.service_account, namespace=args.namespace, labels=dict(COMMON_LABELS)
            ),
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[args.depends_on]),
        )
        after_pool = [args.identity_pool]
        principal = workload_principal_output(args.project, args.namespace, args.service_account, after_pool)
        # The write grant is conditional: read the bucket's access mode before any grant registers.
        bucket = uniform_bucket(args.bucket, after_pool)
        self.members = [
            gcp.storage.BucketIAMMember(
                grant.name,
                gcp.storage.BucketIAMMemberArgs(
                    bucket=bucket, role=grant.role, member=principal, condition=grant.condition
                ),
                opts=pulumi.ResourceOptions(parent=self, depends_on=after_pool),
            )
            for grant in grants(args.bucket, args.write_prefix)
        ]
        self.register_outputs({"principal": principal})


class BenchmarkAccess(ModelAccess):
    """The serving benchmark's identity (workloads/benchmark_job.py): the same read grants, its writes
    under benchmarks/ only. Its own type keeps its children's URNs apart from the model servers'."""

    TYPE = "tpu-slicing:workloads:BenchmarkAccess"
