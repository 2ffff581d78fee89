"""What GKE's slice controller asks of Kueue for a pod template that names a slice shape.

A TPU7x workload names its slice with the pod annotation `cloud.google.com/gke-tpu-slice-topology`
(dynamic-slicing.md §11). On GKE the slice controller derives Kueue's topology request from it;
the image is closed, so this derivation is ours, inferred from the GKE docs ("Schedule dynamic
slices with Kueue and TAS") and Kueue's TAS annotations (kueue@v0.19.2
pkg/controller/constants/constants.go): one slice of a sub-slice shape S in one
`gke-tpu-partition-S-id` domain, a super-slice in whole 4x4x4 partitions, everything in the
reservation block. The stand-ins use it (slice_webhook.py mutates templates with it) and so does
the admission oracle (tests/test_admission_oracle.py writes it into its JobSets).
"""

from __future__ import annotations

from domain import topology

SLICE_TOPOLOGY_ANNOTATION = "cloud.google.com/gke-tpu-slice-topology"
BLOCK_LEVEL = "cloud.google.com/gce-topology-block"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
SLICE_REQUIRED = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
# Kueue puts two PodSets (an LWS's leader and workers) in one domain only when both carry this name with
# the same required level (kueue@v0.19.2 pkg/controller/jobframework/tas.go Build,
# tas_validation.go ValidatePodSetGroupingTopology; docs tasks/run/leaderworkerset.md).
GROUP_NAME = "kueue.x-k8s.io/podset-group-name"
GROUP = "slice"
HOST_CHIPS = 4  # one tpu7x-standard-4t VM's chips


def slice_level(generation: topology.Generation, shape: str) -> tuple[str, int]:
    """(the node label of the domain one slice of `shape` must fit in, the pods of that domain)."""
    if shape in generation.subslice_shapes:
        return f"cloud.google.com/gke-tpu-partition-{shape}-id", topology.Topology.parse(shape).chips // HOST_CHIPS
    cube = generation.cube_topology
    assert cube is not None, f"{generation} has no cube"
    return f"cloud.google.com/gke-tpu-partition-{cube}-id", cube.chips // HOST_CHIPS


def kueue_annotations(
    generation: topology.Generation, shape: str, *, one_group: bool = False, grouped: bool = False
) -> dict[str, str]:
    """Kueue's topology request for a pod template of slices of `shape`.

    `one_group`: the template is one part of a group that is one slice (an LWS leader or worker
    template, a StatefulSet), so the whole request is that domain. `grouped`: it shares that domain
    with another template (an LWS with a leaderTemplate): both carry Kueue's PodSet group name.
    """
    level, pods = slice_level(generation, shape)
    if one_group and shape in generation.subslice_shapes:
        return {REQUIRED: level, GROUP_NAME: GROUP} if grouped else {REQUIRED: level}
    return {REQUIRED: BLOCK_LEVEL, SLICE_REQUIRED: level, SLICE_SIZE: str(pods)}
