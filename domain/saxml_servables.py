"""Saxml servables whose sharding this program knows: the devices their mesh needs, and test mode.

A Saxml servable fixes its device mesh (`ICI_MESH_SHAPE`) in its class; a model server on a slice
with another number of devices fails when it loads the model, after the slice has been provisioned.
A test-mode servable initialises random weights and ignores any checkpoint. From
saxml/server/pax/lm/params/lm_cloud.py (../shared/reference/saxml-jetstream.md §2 at the pinned
v1.1.0 images). Servables outside this table are not judged.
"""

from __future__ import annotations

from dataclasses import dataclass

PREFIX = "saxml.server.pax.lm.params.lm_cloud."


@dataclass(frozen=True)
class Servable:
    devices: int  # the product of ICI_MESH_SHAPE
    test_mode: bool  # random weights; the checkpoint is ignored


SERVABLES: dict[str, Servable] = {
    **{f"{PREFIX}LmCloudSpmd175B{n}Test": Servable(n, True) for n in (32, 64, 128, 256)},
    f"{PREFIX}LmCloudSpmd2BTest": Servable(1, True),
    **{f"{PREFIX}LmCloudSpmd2B{n}Test": Servable(n, True) for n in (4, 8, 16, 32)},
}
