"""Every stack of the repository at a glance: `python -m plan fleet` (`make fleet`).

One row per stack file, from its validated settings and the same admission model the plan's
preview uses (domain/admission.py), without running the Pulumi program: block and sub-blocks,
chips reserved and held at the planned load, the high-priority workloads Kueue would leave
pending, and, with `pricing`, the monthly and idle cost (plan/cost.py); then, per reservation block
whose size is given, its whole bill split into chips serving, held by checks, idle in the stacks'
pools and in no stack's pool (domain/cost.py BlockCost). Then the contradictions
between stacks, by the same check as `make stacks` (plan/stacks.py `check`, the rules of
settings/rules_fleet.py), each naming both stacks and the key; any of them, or an invalid stack file,
fails the command. An invalid stack file is one line, and the others are still shown.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from domain import admission
from domain.cost import BlockCost, money
from plan import cost, engine, stacks
from settings import capacity
from settings.model import StackConfig

HIGH = "high"  # the highest of the stack's WorkloadPriorityClasses (settings/model.py Priorities)


@dataclass(frozen=True)
class Row:
    stack: str
    block: str
    sub_blocks: str
    reserved: int
    held: int
    pending_high: tuple[str, ...]
    monthly: str
    idle: str


def pending_high(config: StackConfig) -> tuple[str, ...]:
    """High-priority workloads Kueue would not admit in full at the planned load."""
    work = capacity.workloads(config)
    if not config.serving.dynamic_slicing or not work:
        return ()
    priorities = dict(config.kueue.priorities.items())
    prediction = admission.predict(
        admission.requests_from_workloads(work, priorities), config.tpu.cubes, config.tpu.generation
    )
    found = []
    for workload in work:
        running, total = prediction.groups(workload.name)
        if workload.priority == HIGH and running < total:
            found.append(workload.name if not running else f"{workload.name} ({running}/{total})")
    return tuple(found)


def row(stack: str, config: StackConfig) -> Row:
    reservation = config.reservation
    block = "-" if reservation is None else f"{reservation.name}/{reservation.block or '-'}"
    subs = ", ".join(reservation.sub_blocks or ()) if reservation is not None else ""
    priced = cost.costs(config)
    currency = config.pricing.currency if config.pricing is not None else ""
    planned = priced["planned"] if priced is not None else None
    return Row(
        stack=stack,
        block=block,
        sub_blocks=subs or "-",
        reserved=capacity.capacity(config).chips,
        held=cost.held_chips(config),
        pending_high=pending_high(config),
        monthly=money(planned.monthly, currency) if planned is not None else "not priced",
        idle=money(planned.idle_monthly, currency) if planned is not None else "not priced",
    )


HEADER = ("stack", "block", "sub-blocks", "chips reserved", "chips held", "high pending", "monthly", "idle")


def table(rows: Sequence[Row]) -> list[str]:
    cells = [HEADER] + [
        (
            r.stack,
            r.block,
            r.sub_blocks,
            str(r.reserved),
            str(r.held),
            ", ".join(r.pending_high) or "none",
            r.monthly,
            r.idle,
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in cells) for i in range(len(HEADER))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip() for line in cells]


def block_totals(configs: Mapping[str, StackConfig]) -> list[str]:
    """Each priced reservation block's bill over the stacks on it: the block once, their pools summed.
    A block whose stacks give no size or price, or disagree on them, is said so (the size
    contradiction is refused by the fleet check)."""
    shares: dict[tuple[str, str], list[tuple[str, BlockCost | None, str]]] = {}
    for name, config in sorted(configs.items()):
        reservation = config.reservation
        if reservation is None or reservation.block is None:
            continue
        currency = config.pricing.currency if config.pricing is not None else ""
        shares.setdefault((reservation.name, reservation.block), []).append((name, cost.block_cost(config), currency))
    lines = []
    for (reservation_name, block), found in sorted(shares.items()):
        names = ", ".join(name for name, _, _ in found)
        priced = [share for _, share, _ in found if share is not None]
        currencies = {currency for _, _, currency in found}
        if len(priced) != len(found) or len(currencies) != 1:
            lines.append(f"block {reservation_name}/{block} ({names}): not priced as one (a size and one price each)")
            continue
        try:
            total = priced[0]
            for share in priced[1:]:
                total = total + share
        except ValueError:
            lines.append(f"block {reservation_name}/{block} ({names}): their sizes or prices differ")
            continue
        lines.append(f"block {reservation_name}/{block} ({names}):")
        lines += cost.block_lines(total, currencies.pop(), fleet=True)
    return lines


def report(root: Path = engine.ROOT, only: Sequence[str] = ()) -> tuple[list[str], bool]:
    """The fleet table and the cross-stack checks; True when something is wrong."""
    configs, problems = stacks.load_stacks(root)
    unknown = sorted(set(only) - set(configs) - {p.stacks[0] for p in problems})
    if unknown:
        raise SystemExit(f"error: no stack file for {', '.join(unknown)}; allowed: {', '.join(sorted(configs))}")
    chosen = {name: config for name, config in configs.items() if not only or name in only}
    lines = table([row(name, config) for name, config in sorted(chosen.items())])
    lines += block_totals(chosen)
    conflicts = stacks.check(configs)
    lines += [f"INVALID {p.message}" for p in problems if not only or p.stacks[0] in only]
    lines += [f"CONFLICT {c}" for c in conflicts] or ["no conflicts between the stacks"]
    return lines, bool(problems or conflicts)


def diff_markdown(between: str, reports: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    """One comment for the fleet: each stack's headline (the first line of its diff), then each
    stack's whole diff folded (plan/document.py diff_report)."""
    sections, details = [f"## Fleet plan diff: {between}", ""], []
    for stack, diff in reports:
        body = str(diff["markdown"]).split("\n")[1:]  # below the stack's own title
        first = next((line for line in body if line.strip()), "No changes.")
        sections.append(f"- **{stack}**: {first.lstrip('- ')}")
        details += ["", f"<details><summary>{stack}</summary>", "", str(diff["markdown"]).rstrip(), "", "</details>"]
    return "\n".join(sections + details) + "\n"
