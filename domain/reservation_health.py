"""What a reservation's sub-blocks are when a stack binds its TPU pools to them, and whether a new
pool may be created there: health, free hosts and pending maintenance.

A TPU7x reservation in All Capacity mode is not static. The Compute API reports per sub-block
(compute/v1 discovery document, `ReservationSubBlock`): `count` (hosts allocated to it), `inUseCount`
(instances running on it), `healthInfo.healthStatus` (HEALTHY, DEGRADED or
HEALTH_STATUS_UNSPECIFIED) and `reservationSubBlockMaintenance` (`GroupMaintenanceInfo`: how many
hosts have maintenance pending or ongoing, and `upcomingGroupMaintenance` with `windowStartTime` and
`windowEndTime`). xpk creates pools only on HEALTHY sub-blocks with `count - inUseCount` hosts free
for the slice (AI-Hypercomputer/xpk src/xpk/core/reservation.py, `list_healthy_sub_blocks` and
`_assess_healthy_and_fitting_sub_blocks_in_block`, PRs #1057 and #1034); this module is that rule,
plus a maintenance window against the stack's no-go windows.

pulumi-gcp 10.2.0's `gcp.compute.get_reservation_sub_block` returns the maintenance counts and the
scheduling type but not `upcomingGroupMaintenance` (its `reservation_sub_block_maintenances` output
has no window), so a live read knows *that* maintenance is pending, not *when*: a pending
maintenance without a window is judged to overlap every no-go window (`Window` None), and a snapshot
taken with gcloud, which has the window, is judged exactly.

Plain Python: no Pulumi, nothing of the project.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from domain import bounded_input

HEALTHY = "HEALTHY"
NOT_READ = "not read"


class SnapshotError(ValueError):
    """A snapshot file that cannot be judged: one line saying why and what to do."""


@dataclass(frozen=True, order=True)
class Window:
    """A time span, both ends RFC 3339 instants with a zone."""

    start: datetime
    end: datetime

    def overlaps(self, other: Window) -> bool:
        return self.start < other.end and other.start < self.end

    def __str__(self) -> str:
        return f"{_stamp(self.start)}..{_stamp(self.end)}"


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%MZ")


def parse_instant(text: str) -> datetime:
    """An RFC 3339 instant as the Compute API writes it (`2026-09-18T00:00:00.000-07:00`, or `Z`)."""
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.utcoffset() is None:
        raise ValueError(f"{text!r} has no time zone")
    return moment


@dataclass(frozen=True)
class Maintenance:
    """A sub-block's `reservationSubBlockMaintenance`: hosts with maintenance pending or ongoing, and its
    window when the read returned one (`upcomingGroupMaintenance`)."""

    pending_hosts: int = 0
    ongoing_hosts: int = 0
    window: Window | None = None

    @property
    def due(self) -> bool:
        return self.pending_hosts > 0 or self.ongoing_hosts > 0 or self.window is not None

    def __str__(self) -> str:
        if not self.due:
            return "none"
        hosts = f"{self.pending_hosts} pending, {self.ongoing_hosts} ongoing"
        return f"due {self.window} ({hosts})" if self.window else f"due, window not read ({hosts})"


@dataclass(frozen=True)
class Reading:
    """One sub-block as read; `health` None when it was not read (offline, no snapshot)."""

    sub_block: str
    health: str | None
    count: int = 0
    in_use: int = 0
    maintenance: Maintenance = field(default_factory=Maintenance)

    @property
    def free(self) -> int:
        return max(self.count - self.in_use, 0)

    @property
    def read(self) -> bool:
        return self.health is not None


def not_read(sub_block: str) -> Reading:
    return Reading(sub_block, None)


@dataclass(frozen=True)
class Binding:
    """What a stack asks of one place: new pools of `hosts` each, bound to `sub_block`."""

    sub_block: str
    hosts: int


@dataclass(frozen=True)
class Verdict:
    """Refusals stop a new pool; warnings are shown and stop nothing (a running pool is kept)."""

    refusals: Mapping[str, str]  # sub-block -> the one line a new pool there is refused with
    warnings: tuple[str, ...] = ()

    def refusal(self, sub_block: str) -> str | None:
        return self.refusals.get(sub_block)


def judge(
    key: str,
    readings: Sequence[Reading],
    hosts_per_pool: int,
    *,
    no_go: Sequence[Window] = (),
    accepted: Mapping[str, str] | None = None,
) -> Verdict:
    """Whether a new pool of `hosts_per_pool` hosts may be created on each sub-block read.

    `key` is the stack key the lines name. A sub-block is refused for a new pool when it is not
    HEALTHY, has fewer free hosts than the pool needs, or has maintenance due that overlaps a no-go
    window (or whose window is unknown while no-go windows are set); `accepted` (sub-block -> reason)
    lets health and maintenance through, never missing hosts, which GCP refuses itself. A pool the
    stack already runs is never judged here: its hosts are in `inUseCount`, and the caller asks only
    for the pools it is about to create. Health and maintenance are also warnings, for a pool that
    runs there; missing free hosts are not (its own hosts are among those in use).
    """
    accepted = accepted or {}
    refusals: dict[str, str] = {}
    warnings: list[str] = []
    for reading in readings:
        name = reading.sub_block
        if not reading.read:
            warnings.append(f"{key}: sub-block {name} was not read; its health, free hosts and maintenance are unknown")
            continue
        problems: list[str] = []
        if reading.health != HEALTHY:
            problems.append(f"is {reading.health}")
        clash = _maintenance_clash(reading.maintenance, no_go)
        if clash:
            problems.append(clash)
        reason = accepted.get(name)
        if problems and reason:
            warnings.append(f"{key}: sub-block {name} {'; '.join(problems)}; accepted: {reason}")
            problems = []
        if problems:
            # What a pool already running there suffers too: said on every read, never a refusal of it.
            warnings.append(
                f"{key}: sub-block {name} {'; '.join(problems)}: a pool already running there is kept, "
                "a new one is refused"
            )
        if reading.free < hosts_per_pool:
            # Not a warning: a running pool's own hosts are in inUseCount (the read cannot tell whose).
            problems.append(
                f"has {reading.free} free hosts of {reading.count} ({reading.in_use} in use), "
                f"a pool needs {hosts_per_pool}"
            )
        if not problems:
            continue
        what = "; ".join(problems)
        refusals[name] = (
            f"{key}: sub-block {name} {what}. Allowed: another sub-block in {key}, waiting until it is HEALTHY "
            f"with {hosts_per_pool} hosts free and its maintenance done, or for health and maintenance "
            f"tpu-slicing:reservation.accept: {{{name}: <reason>}}"
        )
    return Verdict(refusals, tuple(warnings))


def _maintenance_clash(maintenance: Maintenance, no_go: Sequence[Window]) -> str | None:
    if not maintenance.due or not no_go:
        return None
    if maintenance.window is None:
        return (
            f"has maintenance due on {maintenance.pending_hosts + maintenance.ongoing_hosts} hosts and the read "
            f"gives no window to compare with reservation.maintenanceNoGo"
        )
    for window in no_go:
        if maintenance.window.overlaps(window):
            return f"has maintenance due {maintenance.window}, inside reservation.maintenanceNoGo {window}"
    return None


def block_free(readings: Iterable[Reading]) -> int:
    """Free hosts of a block GKE picks the sub-blocks in: the HEALTHY sub-blocks' only (xpk's rule)."""
    return sum(r.free for r in readings if r.health == HEALTHY)


# --- the Compute API's and gcloud's JSON


def from_api(entry: Mapping[str, Any]) -> Reading:
    """A `ReservationSubBlock` as the Compute API (and `gcloud ... sub-blocks list --format=json`) gives it."""
    health = (entry.get("healthInfo") or {}).get("healthStatus") or "HEALTH_STATUS_UNSPECIFIED"
    maintenance = entry.get("reservationSubBlockMaintenance") or {}
    upcoming = maintenance.get("upcomingGroupMaintenance") or {}
    window = None
    if upcoming.get("windowStartTime") and upcoming.get("windowEndTime"):
        window = Window(parse_instant(str(upcoming["windowStartTime"])), parse_instant(str(upcoming["windowEndTime"])))
    return Reading(
        sub_block=str(entry["name"]),
        health=str(health),
        count=int(entry.get("count") or 0),
        in_use=int(entry.get("inUseCount") or 0),
        maintenance=Maintenance(
            pending_hosts=int(maintenance.get("maintenancePendingCount") or 0),
            ongoing_hosts=int(maintenance.get("maintenanceOngoingCount") or 0),
            window=window,
        ),
    )


def from_provider(result: Mapping[str, Any]) -> Reading:
    """pulumi-gcp 10.2.0's `getReservationSubBlock` result (camelCase, as the engine returns it):
    `subBlockCount` is the API's `count`, `healthInfos` and `reservationSubBlockMaintenances` are
    one-element lists, and the maintenance has no window. No health info at all is a sub-block not
    read (the offline plan's answer without a snapshot): judged by nobody, shown as such."""
    infos: list[Mapping[str, Any]] = list(result.get("healthInfos") or [])
    if not infos:
        return not_read(str(result.get("name") or ""))
    health = infos[0].get("healthStatus") or "HEALTH_STATUS_UNSPECIFIED"
    maintenance: Mapping[str, Any] = next(iter(result.get("reservationSubBlockMaintenances") or []), {})
    return Reading(
        sub_block=str(result.get("name") or ""),
        health=str(health),
        count=int(result.get("subBlockCount") or 0),
        in_use=int(result.get("inUseCount") or 0),
        maintenance=Maintenance(
            pending_hosts=int(maintenance.get("maintenancePendingCount") or 0),
            ongoing_hosts=int(maintenance.get("maintenanceOngoingCount") or 0),
        ),
    )


@dataclass(frozen=True)
class Snapshot:
    """What `gcloud compute reservations sub-blocks list RESERVATION --block-name=BLOCK --zone=ZONE
    --format=json` printed: the sub-blocks of one block of one reservation."""

    reservation: str
    block: str
    readings: tuple[Reading, ...]

    def reading(self, sub_block: str) -> Reading:
        for reading in self.readings:
            if reading.sub_block == sub_block:
                return reading
        return not_read(sub_block)

    def as_provider(self, sub_block: str) -> dict[str, Any]:
        """The answer `getReservationSubBlock` would give for one sub-block, from the snapshot."""
        r = self.reading(sub_block)
        return {
            "name": r.sub_block,
            "healthInfos": [{"healthStatus": r.health}] if r.health else [],
            "subBlockCount": r.count,
            "inUseCount": r.in_use,
            "reservationSubBlockMaintenances": [
                {
                    "maintenancePendingCount": r.maintenance.pending_hosts,
                    "maintenanceOngoingCount": r.maintenance.ongoing_hosts,
                }
            ],
        }


def _where(self_link: str) -> tuple[str, str] | None:
    """(reservation, block) of a sub-block's selfLink, `.../reservations/R/reservationBlocks/B/...`."""
    parts = self_link.split("/")
    try:
        return parts[parts.index("reservations") + 1], parts[parts.index("reservationBlocks") + 1]
    except (ValueError, IndexError):
        return None


def read_snapshot(text: str, source: str, reservation: str, block: str) -> Snapshot:
    """The snapshot in `text` (from `source`), refused in one line when it is not a JSON list of
    sub-blocks, or when they belong to another reservation or block than the stack binds."""
    fix = (
        f"capture it with gcloud compute reservations sub-blocks list {reservation} --block-name={block} "
        "--zone=<zone> --format=json"
    )
    try:
        entries = bounded_input.load_json(text)
    except bounded_input.InputError as err:
        raise SnapshotError(f"reservation snapshot {source} {err}; {fix}") from None
    if not isinstance(entries, list) or not all(isinstance(e, dict) and e.get("name") for e in entries):
        raise SnapshotError(f"reservation snapshot {source}: not a list of sub-blocks with a name each; {fix}")
    readings = []
    for entry in entries:
        where = _where(str(entry.get("selfLink") or ""))
        if where is None:
            raise SnapshotError(
                f"reservation snapshot {source}: sub-block {entry['name']} has no selfLink naming its reservation "
                f"and block; {fix}"
            )
        if where != (reservation, block):
            raise SnapshotError(
                f"reservation snapshot {source}: sub-block {entry['name']} is in reservation {where[0]} "
                f"block {where[1]}, "
                f"the stack binds reservation {reservation} block {block}; {fix}"
            )
        try:
            readings.append(from_api(entry))
        except (TypeError, ValueError) as err:
            raise SnapshotError(f"reservation snapshot {source}: sub-block {entry['name']}: {err}; {fix}") from None
    return Snapshot(reservation, block, tuple(readings))


# --- the table a platform engineer reads first


def table(readings: Sequence[Reading], holders: Mapping[str, Sequence[str]]) -> list[str]:
    """One row per sub-block: health, hosts free/used of count, the stacks that bind it, maintenance."""
    header = ("SUB-BLOCK", "HEALTH", "FREE/USED/HOSTS", "STACKS", "MAINTENANCE")
    rows = [header]
    for r in readings:
        hosts = f"{r.free}/{r.in_use}/{r.count}" if r.read else "-"
        rows.append(
            (
                r.sub_block,
                r.health or NOT_READ,
                hosts,
                ",".join(holders.get(r.sub_block, ())) or "-",
                str(r.maintenance) if r.read else "-",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]


def row(reading: Reading) -> dict[str, Any]:
    """A reading as a plan document holds it (JSON)."""
    window = reading.maintenance.window
    return {
        "subBlock": reading.sub_block,
        "health": reading.health,
        "count": reading.count,
        "inUse": reading.in_use,
        "maintenancePending": reading.maintenance.pending_hosts,
        "maintenanceOngoing": reading.maintenance.ongoing_hosts,
        "window": [window.start.isoformat(), window.end.isoformat()] if window else None,
    }


def from_row(found: Mapping[str, Any]) -> Reading:
    window = found.get("window")
    return Reading(
        sub_block=str(found["subBlock"]),
        health=found.get("health"),
        count=int(found.get("count") or 0),
        in_use=int(found.get("inUse") or 0),
        maintenance=Maintenance(
            pending_hosts=int(found.get("maintenancePending") or 0),
            ongoing_hosts=int(found.get("maintenanceOngoing") or 0),
            window=Window(parse_instant(window[0]), parse_instant(window[1])) if window else None,
        ),
    )


def changes(before: Sequence[Reading], after: Sequence[Reading]) -> list[str]:
    """What moved between two readings of the same sub-blocks: health, free hosts, maintenance."""
    old = {r.sub_block: r for r in before}
    found: list[str] = []
    for r in after:
        was = old.get(r.sub_block)
        if was is None or not was.read or not r.read:
            continue
        if was.health != r.health:
            found.append(f"{r.sub_block}: {was.health} → {r.health}")
        if was.free != r.free:
            found.append(f"{r.sub_block}: free hosts {was.free} → {r.free}")
        if str(was.maintenance) != str(r.maintenance) and r.maintenance.due:
            found.append(f"{r.sub_block}: maintenance {r.maintenance}")
    return found


def block_refusal(key: str, block: str, readings: Sequence[Reading], needed: int) -> str | None:
    """A pool bound to the whole block (GKE picks its sub-blocks): refused when the block's HEALTHY
    sub-blocks hold fewer than `needed` free hosts, `needed` being what the stack's new pools take."""
    if not readings or not all(r.read for r in readings):
        return None
    free = block_free(readings)
    if free >= needed:
        return None
    unhealthy = [r.sub_block for r in readings if r.health != HEALTHY]
    note = f" ({', '.join(unhealthy)} not HEALTHY, not counted)" if unhealthy else ""
    return (
        f"{key}: block {block} has {free} free hosts in HEALTHY sub-blocks{note}, the stack's new pools need "
        f"{needed}. Allowed: fewer cubes (tpu-slicing:tpu.cubes), another block, or waiting until hosts are free"
    )
