"""The HIGH_THROUGHPUT workload policy that places each TPU7x pool as one cube."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp


@dataclass(frozen=True)
class WorkloadPolicyArgs:
    project: str
    region: str
    name: str
    cube_topology: str
    depends_on: Sequence[pulumi.Resource] = ()


class WorkloadPolicy(pulumi.ComponentResource):
    policy: gcp.compute.ResourcePolicy

    def __init__(self, name: str, args: WorkloadPolicyArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tpu-slicing:infra:WorkloadPolicy", name, None, opts)
        self.policy = gcp.compute.ResourcePolicy(
            "policy",
            gcp.compute.ResourcePolicyArgs(
                name=args.name,
                project=args.project,
                region=args.region,
                workload_policy=gcp.compute.ResourcePolicyWorkloadPolicyArgs(
                    type="HIGH_THROUGHPUT",
                    accelerator_topology=args.cube_topology,
                    # VMs come up without ICI links; the slice controller forms
                    # them per Slice, which is what makes sub- and super-slices possible.
                    accelerator_topology_mode="PROVISION_ONLY",
                ),
            ),
            # Every workload_policy field is ForceNew and the name is fixed
            # (resource_compute_resource_policy.go): a replacement made first would meet the old
            # policy's name (409), so the old one goes first.
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on), delete_before_replace=True),
        )
        self.register_outputs({"name": self.policy.name})
