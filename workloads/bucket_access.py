"""Bucket-scoped roles for model servers: read the whole bucket, write one prefix only.

Model servers read weights and write a compilation cache (vLLM's `xla_cache/`, Pathways'
`pathways-scratch/`). `roles/storage.objectUser` on the whole bucket would let them delete
the weights; an IAM condition on the object name keeps their writes and deletes to the
prefix. Listing is a bucket-level permission that a `resource.name` condition would deny,
so reading stays unconditional (objectViewer). Conditions on bucket IAM need uniform
bucket-level access on the bucket (GCS "IAM Conditions" docs): `uniform_bucket` reads the bucket
before a conditional grant is registered and refuses one without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

READ_ROLES = ("roles/storage.bucketViewer", "roles/storage.objectViewer")
WRITE_ROLE = "roles/storage.objectUser"


@dataclass(frozen=True)
class Grant:
    role: str
    condition: gcp.storage.BucketIAMMemberConditionArgs | None

    @property
    def name(self) -> str:
        return self.role.split(".")[-1]


def prefix_condition(bucket: str, prefix: str) -> gcp.storage.BucketIAMMemberConditionArgs:
    prefix = prefix.strip("/") + "/"
    return gcp.storage.BucketIAMMemberConditionArgs(
        title=f"only {prefix}",
        description=f"object writes and deletes under gs://{bucket}/{prefix} only",
        expression=f'resource.name.startsWith("projects/_/buckets/{bucket}/objects/{prefix}")',
    )


def grants(bucket: str, write_prefix: str | None) -> list[Grant]:
    """Read everything in the bucket; write, and delete, under `write_prefix` only."""
    found = [Grant(role, None) for role in READ_ROLES]
    if write_prefix is not None:
        found.append(Grant(WRITE_ROLE, prefix_condition(bucket, write_prefix)))
    return found


class BucketRefusedError(pulumi.RunError):
    """A bucket the grants cannot be made on. A RunError: the language host prints the message
    alone, no traceback (pulumi sdk/python errors.py)."""


def uniform_access_problem(bucket: str, uniform: bool | None) -> str | None:
    """Why the conditional write grant cannot be made on `bucket`, or None."""
    if uniform:
        return None
    return (
        f"serving.model.weightsBucket {bucket!r}: uniform bucket-level access is off; the model servers' "
        "write grant is conditional on one prefix, and GCS evaluates IAM conditions only on buckets with "
        f"uniform bucket-level access. Allowed: a bucket with it on (gcloud storage buckets update gs://{bucket} "
        "--uniform-bucket-level-access), then run pulumi up again"
    )


def uniform_bucket(bucket: str, after: Sequence[pulumi.Resource]) -> pulumi.Output[str]:
    """`bucket`'s name, once GCS says it has uniform bucket-level access; otherwise the grants that take
    it never register and `pulumi up` stops with uniform_access_problem. Read after `after` (the
    project's APIs: the Storage API must be on to read it), so on a bare project the first preview
    leaves it unknown and `up` reads it before any grant."""
    found = gcp.storage.get_bucket_output(name=bucket, opts=pulumi.InvokeOutputOptions(depends_on=list(after)))

    def checked(uniform: bool | None) -> str:
        problem = uniform_access_problem(bucket, uniform)
        if problem is not None:
            raise BucketRefusedError(problem)
        return bucket

    return found.uniform_bucket_level_access.apply(checked)
