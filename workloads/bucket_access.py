"""Bucket-scoped roles for model servers: read the whole bucket, write one prefix only.

Model servers read weights and write a compilation cache (vLLM's `xla_cache/`, Pathways'
`pathways-scratch/`). `roles/storage.objectUser` on the whole bucket would let them delete
the weights; an IAM condition on the object name keeps their writes and deletes to the
prefix. Listing is a bucket-level permission that a `resource.name` condition would deny,
so reading stays unconditional (objectViewer). Conditions on bucket IAM need uniform
bucket-level access on the bucket (GCS "IAM Conditions" docs), which the README asks of the
weights bucket.
"""

from __future__ import annotations

from dataclasses import dataclass

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
