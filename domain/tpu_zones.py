"""Where each TPU generation can be created: Cloud TPU's zone table, by generation.

Source: cloud.google.com/tpu/docs/regions-zones (read 2026-12; the US section in full, and the TPU7x
list, which is short). A zone outside a generation's list is refused: GKE would accept the cluster and
fail the TPU node pool after everything else is built. Where the page's other continents could not be
read (v5e, v5p, v6e outside the US), `complete` is False and zones there are not judged; the README
lists that as a check only the real cloud makes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ZoneList:
    zones: frozenset[str]
    complete: bool  # every zone of the generation, worldwide; else only those of `regions_read`
    regions_read: tuple[str, ...] = ()  # region prefixes whose zones the list holds in full


ZONES: dict[str, ZoneList] = {
    "tpu7x": ZoneList(frozenset({"us-central1-ai1a", "us-central1-c"}), complete=True),
    "v6e": ZoneList(
        frozenset({"us-central1-b", "us-east1-d", "us-east4-a", "us-east4-b", "us-east5-a", "us-east5-b"})
        | {"us-east5-c", "us-west1-c"},
        complete=False,
        regions_read=("us-",),
    ),
    "v5e": ZoneList(
        frozenset({"us-central1-a", "us-south1-a", "us-west1-c", "us-west4-a", "us-east5-a", "us-east5-b"})
        | {"us-east5-c"},
        complete=False,
        regions_read=("us-",),
    ),
    "v5p": ZoneList(
        frozenset({"us-central1-a", "us-east5-a", "us-east5-b", "us-east5-c", "us-south1-a"}),
        complete=False,
        regions_read=("us-",),
    ),
}


def zone_problem(generation: str, zone: str) -> str | None:
    """Why `generation` cannot be created in `zone` (a phrase), or None (also when the list cannot tell)."""
    known = ZONES.get(generation)
    if known is None or zone in known.zones:
        return None
    if not known.complete and not zone.startswith(known.regions_read):
        return None
    scope = "" if known.complete else f" (of the zones in {', '.join(r + '*' for r in known.regions_read)})"
    return f"{generation} is offered only in {', '.join(sorted(known.zones))}{scope}"
