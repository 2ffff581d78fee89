"""Money beside chips: the plan's cost section and the facts `make diff` compares (domain/cost.py).

The stack's chips are its TPU node pools' (settings/capacity.py); the chips workloads hold are
what Kueue's admission preview admits at the planned load (every pool's, for a backend that runs
one group per pool), and, with autoscaled roles, what it admits at their max (plan/scaling.py).
Without `tpu-slicing:pricing` the section says so and shows no money.
"""

from __future__ import annotations

from typing import Any

from domain import admission
from domain.cost import BlockCost, ChipCost, money
from plan import scaling
from settings import capacity, pricing
from settings.model import StackConfig

NOT_SET = (
    "  not shown: tpu-slicing:pricing is not set (a price per chip-hour for the stack's generation; "
    "public list prices: cloud.google.com/tpu/pricing, or your negotiated price)"
)


def held_chips(config: StackConfig) -> int:
    """Chips that admitted workloads hold at the planned load."""
    cap = capacity.capacity(config)
    if not config.serving.dynamic_slicing:
        return cap.chips  # one group per pool: every pool serves
    work = capacity.workloads(config)
    if not work:
        return 0
    priorities = dict(config.kueue.priorities.items())
    requests = admission.requests_from_workloads(work, priorities)
    return min(admission.predict(requests, config.tpu.cubes, config.tpu.generation).chips_in_use, cap.chips)


def serving_chips(config: StackConfig) -> int:
    """Chips that the serving roles' admitted groups hold at the planned load: what a token costs."""
    cap = capacity.capacity(config)
    if not config.serving.dynamic_slicing:
        return cap.chips
    work = capacity.workloads(config)
    serving = [w.name for w in work if w.serves]
    if not serving:
        return 0
    priorities = dict(config.kueue.priorities.items())
    prediction = admission.predict(
        admission.requests_from_workloads(work, priorities), config.tpu.cubes, config.tpu.generation
    )
    mine = {r.name for name in serving for r in prediction.members(name)}
    return min(sum(p.chips for p in prediction.placements if p.workload in mine), held_chips(config))


def block_cost(config: StackConfig) -> BlockCost | None:
    """The stack's share of its reservation block, priced; None without pricing, on demand, or where
    the block's size (reservation.blockCubes) is not given."""
    price = pricing.chip_hour(config)
    reservation = config.reservation
    if price is None or reservation is None or reservation.block_cubes is None or not config.serving.dynamic_slicing:
        return None
    cap = capacity.capacity(config)
    per_cube = cap.chips // cap.pools if cap.pools else 0
    return BlockCost(
        block=reservation.block_cubes * per_cube,
        pools=cap.chips,
        held=held_chips(config),
        serving=serving_chips(config),
        chip_hour=price,
    )


def block_lines(share: BlockCost, currency: str, *, fleet: bool = False) -> list[str]:
    """The block's monthly bill in its four parts (they sum to the block)."""
    described = {
        "serving": "held by serving roles",
        "checks": "held by slicing checks",
        "idle": "in the stacks' pools, held by nothing" if fleet else "in this stack's pools, held by nothing",
        "unclaimed": "in no stack's pool" if fleet else "in none of this stack's pools (another stack's, or none)",
    }
    shown = [
        f"  the block: {share.block} chips, {money(share.monthly(share.block), currency)} a month whatever uses them"
    ]
    for part, chips in share.parts().items():
        shown.append(f"    {chips:>5} chips {described[part]}: {money(share.monthly(chips), currency)}")
    return shown


def costs(config: StackConfig) -> dict[str, ChipCost] | None:
    """The stack's cost at the planned load, and at autoscaling max when a role autoscales."""
    price = pricing.chip_hour(config)
    if price is None:
        return None
    reserved = capacity.capacity(config).chips
    found = {"planned": ChipCost(reserved, held_chips(config), price)}
    top = scaling.ceiling(config)
    if top is not None:
        found["at max"] = ChipCost(reserved, min(top.chips_at_max, reserved), price)
    return found


def lines(config: StackConfig) -> list[str]:
    found = costs(config)
    if found is None or config.pricing is None:
        return [NOT_SET]
    currency = config.pricing.currency
    planned = found["planned"]
    shown = [
        f"  {planned.reserved} chips at {currency} {planned.chip_hour:g} a chip-hour "
        f"({pricing.buying(config)}, {config.pricing.source}): {money(planned.monthly, currency)} a month",
    ]
    for label, cost in found.items():
        shown.append(
            f"  {label}: workloads hold {cost.held} chips; {cost.idle} idle ({cost.idle_share:.0%}) cost "
            f"{money(cost.idle_monthly, currency)} a month"
        )
    share = block_cost(config)
    if share is not None:
        shown += block_lines(share, currency)
    return shown


def facts(config: StackConfig) -> dict[str, Any] | None:
    """The plan document's `impact.cost` (JSON-safe), or None without pricing."""
    found = costs(config)
    if found is None or config.pricing is None:
        return None
    planned = found["planned"]
    return {
        "currency": config.pricing.currency,
        "chipHour": planned.chip_hour,
        "monthly": round(planned.monthly, 2),
        "idleMonthly": round(planned.idle_monthly, 2),
        **({"idleMonthlyAtMax": round(found["at max"].idle_monthly, 2)} if "at max" in found else {}),
        **({"block": _block_facts(share)} if (share := block_cost(config)) is not None else {}),
    }


def _block_facts(share: BlockCost) -> dict[str, Any]:
    return {
        "chips": share.block,
        "monthly": round(share.monthly(share.block), 2),
        **{f"{part}Chips": chips for part, chips in share.parts().items()},
    }


def headline(before: dict[str, Any] | None, after: dict[str, Any] | None) -> str | None:
    """`make diff`'s cost line: monthly and idle cost before -> after, when either side is priced."""
    if not before and not after:
        return None

    def shown(side: dict[str, Any] | None, key: str) -> str:
        return money(side[key], side["currency"]) if side else "not priced"

    return (
        f"**Monthly TPU cost**: {shown(before, 'monthly')} -> {shown(after, 'monthly')}; "
        f"idle chips {shown(before, 'idleMonthly')} -> {shown(after, 'idleMonthly')}"
    )
