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


def instant(value: object) -> object:
    """A no-go window's start or end is written as an ISO 8601 date-time: pydantic reads a number, or
    a string of digits, as Unix seconds (pydantic v2 "datetime" parsing), so `20261207` (a compact
    date) would become a window in 1970 that no maintenance ever falls in."""
    if isinstance(value, int | float) or (isinstance(value, str) and value.strip().lstrip("-").isdigit()):
        raise ValueError(
            f"{value!r} is a number, which would be read as Unix seconds (a moment in 1970 for a compact date); "
            "allowed: an ISO 8601 date-time with a zone, e.g. 2026-12-07T00:00:00Z"
        )
    return value


def no_go_window(window: NoGoWindow) -> None:
    if window.start.tzinfo is None or window.end.tzinfo is None:
        raise ValueError("start and end need a time zone, e.g. 2026-09-18T00:00:00Z")
    if window.end <= window.start:
        raise ValueError(f"end {window.end.isoformat()} is not after start {window.start.isoformat()}")


def no_go_needs_sub_blocks(reservation: ReservationConfig) -> None:
    """No-go windows judge the maintenance of the sub-blocks a stack binds; a stack bound to the whole
    block binds none (GKE picks them), and its windows would judge nothing, silently
    (infra/reservation.py judges a block-bound pool by free hosts alone)."""
    if reservation.maintenance_no_go and not reservation.sub_blocks:
        raise ValueError(
            "reservation.maintenanceNoGo is set but the stack binds the whole block (no reservation.subBlocks): "
            "GKE picks the sub-blocks, so the windows would judge nothing; allowed: reservation.subBlocks, or no "
            "maintenanceNoGo"
        )


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
        "maintenance no-go window written as a number (read as Unix seconds)",
        instant,
        {"reservation": {"maintenanceNoGo": [{"start": 20261207, "end": "2026-12-20T00:00:00Z"}]}},
        "reservation.maintenanceNoGo",
        "an ISO 8601 date-time with a zone",
    ),
    RefusedClass(
        "maintenance no-go windows on a stack bound to the whole block",
        no_go_needs_sub_blocks,
        {
            "reservation": {
                "subBlocks": None,
                "maintenanceNoGo": [{"start": "2026-12-07T00:00:00Z", "end": "2026-12-20T00:00:00Z"}],
            }
        },
        "reservation.maintenanceNoGo",
        "reservation.subBlocks, or no maintenanceNoGo",
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
