"""What a stack says about the reservation's state: the no-go windows for maintenance, the sub-blocks
it binds despite what was read, and the snapshot the offline plan reads.

Guards `reservation.maintenanceNoGo` (each window has a zone and ends after it starts),
`reservation.accept` (each names a sub-block of `reservation.subBlocks`, with a reason) and
`reservation.snapshot` (a JSON file). What was read is judged by domain/reservation_health.py, at
plan time and in `pulumi up` (infra/reservation.py), not here: a stack file cannot know it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from settings.refused import RefusedClass

if TYPE_CHECKING:
    from settings.model import NoGoWindow, ReservationConfig


def no_go_window(window: NoGoWindow) -> None:
    if window.start.tzinfo is None or window.end.tzinfo is None:
        raise ValueError("start and end need a time zone, e.g. 2026-09-18T00:00:00Z")
    if window.end <= window.start:
        raise ValueError(f"end {window.end.isoformat()} is not after start {window.start.isoformat()}")


def check_accept(reservation: ReservationConfig) -> None:
    """An acceptance names a sub-block the stack binds and says why: it is read in the refusal it
    silences, and a sub-block bound to the block (GKE picks) is not the stack's to accept."""
    for sub_block, reason in (reservation.accept or {}).items():
        if sub_block not in (reservation.sub_blocks or []):
            bound = ", ".join(reservation.sub_blocks or []) or "none: the pools bind the whole block"
            raise ValueError(
                f"reservation.accept names {sub_block!r}, which the stack does not bind; allowed: a sub-block of "
                f"reservation.subBlocks ({bound})"
            )
        if not reason.strip():
            raise ValueError(f"reservation.accept.{sub_block} has no reason; allowed: why it is bound anyway")


def snapshot_file(value: str | None) -> str | None:
    if value is not None and not value.endswith(".json"):
        raise ValueError(
            f"snapshot {value!r} is not a .json file; allowed: the output of gcloud compute reservations "
            "sub-blocks list ... --format=json, saved as a .json file"
        )
    return value


REFUSED: tuple[RefusedClass, ...] = (
    RefusedClass(
        "maintenance no-go window that ends before it starts",
        no_go_window,
        {"reservation": {"maintenanceNoGo": [{"start": "2026-09-30T00:00:00Z", "end": "2026-09-18T00:00:00Z"}]}},
        "reservation.maintenanceNoGo",
        "is not after start",
    ),
    RefusedClass(
        "accepted sub-block the stack does not bind",
        check_accept,
        {"reservation": {"accept": {"sub-block-3": "drain test"}}},
        "reservation.accept",
        "a sub-block of reservation.subBlocks",
    ),
    RefusedClass(
        "reservation snapshot that is not a JSON file",
        snapshot_file,
        {"reservation": {"snapshot": "sub-blocks.txt"}},
        "reservation.snapshot",
        "--format=json",
    ),
)
