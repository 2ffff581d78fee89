"""What the stack's TPU chips cost: `tpu-slicing:pricing`, set by the user, never defaulted.

Cloud TPU's public list prices are on the Cloud TPU pricing page (cloud.google.com/tpu/pricing),
per chip-hour, by generation and by how the capacity is bought (on demand, reserved, committed);
a negotiated price is the user's own. The plan multiplies the chips of the stack's node pools by
the price of its generation for the way it buys them, domain/cost.py: `pricing.buying`, or by
default the reserved price for a stack bound to a reservation and the on-demand price otherwise.
A committed-use discount (one or three years) applies to either; a calendar-mode reservation
(Dynamic Workload Scheduler's calendar mode, bought for fixed dates) and a reserved price need a
reservation to bind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import AfterValidator, Field

from domain import currencies, topology
from settings.base import StrictModel
from settings.refused import RefusedClass

if TYPE_CHECKING:
    from settings.model import StackConfig

Price = Annotated[float, Field(gt=0, le=10_000, allow_inf_nan=False)]


def _generations(prices: dict[str, GenerationPrice]) -> dict[str, GenerationPrice]:
    unknown = sorted(set(prices) - set(topology.CATALOG))
    if unknown:
        raise ValueError(f"{', '.join(unknown)} is not a TPU generation; allowed: {', '.join(topology.CATALOG)}")
    return prices


class GenerationPrice(StrictModel):
    """Per chip-hour, in the pricing's currency: at least the one the stack buys by."""

    reserved: Price | None = None
    on_demand: Price | None = None
    committed_one_year: Price | None = None
    committed_three_years: Price | None = None
    calendar: Price | None = None


# The ways to buy chips (pricing.buying) and the GenerationPrice field each reads.
WAYS = {
    "reserved": "reserved",
    "onDemand": "on_demand",
    "committedOneYear": "committed_one_year",
    "committedThreeYears": "committed_three_years",
    "calendar": "calendar",
}
Way = Literal["reserved", "onDemand", "committedOneYear", "committedThreeYears", "calendar"]
NEEDS_RESERVATION = ("reserved", "calendar")


def _currency(value: str) -> str:
    # Three capitals are not enough: `XYZ` or `ABC` would label every figure of the cost report
    # with a currency nobody pays in (domain/currencies.py reads ISO 4217's list).
    if value not in currencies.iso_4217():
        raise ValueError(
            f"{value!r} is not an ISO 4217 currency code; allowed: a current code in capitals, e.g. USD, EUR or JPY"
        )
    return value


class PricingConfig(StrictModel):
    currency: Annotated[str, AfterValidator(_currency)]
    chip_hour: Annotated[dict[str, GenerationPrice], AfterValidator(_generations)] = Field(min_length=1)
    source: str = Field(min_length=1, max_length=200)  # where the price comes from: a price list's date, a contract
    # How the stack's chips are bought; by default reserved with a reservation, else onDemand.
    buying: Way | None = None


def buying(config: StackConfig) -> str:
    """How the stack buys its chips: `pricing.buying`, else `reserved` when its pools bind a
    reservation and `onDemand` when they do not."""
    if config.pricing is not None and config.pricing.buying is not None:
        return config.pricing.buying
    return "reserved" if config.reservation is not None else "onDemand"


def _generation(config: StackConfig) -> topology.Generation:
    return config.tpu.generation if config.serving.dynamic_slicing else config.serving.slice.generation


def chip_hour(config: StackConfig) -> float | None:
    """The price per chip-hour of the stack's generation as it buys it, or None without pricing."""
    if config.pricing is None:
        return None
    price = config.pricing.chip_hour.get(_generation(config).name)
    return None if price is None else getattr(price, WAYS[buying(config)])


def check_pricing(config: StackConfig) -> None:
    """pricing: a price for the generation the stack runs, bought the way it buys it; reserved and
    calendar prices only where a reservation is bound."""
    if config.pricing is None:
        return
    generation, way = _generation(config), buying(config)
    if way in NEEDS_RESERVATION and config.reservation is None:
        raise ValueError(
            f"pricing.buying {way!r} needs a reservation, and the stack's pools bind none (reservation is not "
            f"set); allowed: onDemand, committedOneYear or committedThreeYears, or a reservation to bind"
        )
    if chip_hour(config) is None:
        given = ", ".join(sorted(config.pricing.chip_hour)) or "none"
        bought = "from its reservation" if config.reservation is not None else "without a reservation"
        raise ValueError(
            f"pricing.chipHour.{generation.name}.{way} is not set: the stack runs {generation.name} chips "
            f"{bought}, bought as {way} (prices given for: {given}); "
            f"allowed: a price per chip-hour, e.g. pricing.chipHour.{generation.name}.{way}: <price>"
        )


REFUSED = [
    RefusedClass(
        "A currency that is not ISO 4217's (three capitals nobody pays in, or XXX for none)",
        _currency,
        {"pricing": {"currency": "XYZ", "chipHour": {"tpu7x": {"reserved": 1.2}}, "source": "list price 2026-12"}},
        "pricing.currency",
        "a current code in capitals",
    ),
    RefusedClass(
        "A price for another TPU generation than the stack's",
        check_pricing,
        {"pricing": {"currency": "USD", "chipHour": {"v5e": {"reserved": 1.2}}, "source": "list price 2026-12"}},
        "pricing.chipHour.tpu7x.reserved",
        "a price per chip-hour",
    ),
    RefusedClass(
        "A calendar-mode or reserved price on a stack that binds no reservation",
        check_pricing,
        {
            "reservation": None,
            "pricing": {
                "currency": "USD",
                "chipHour": {"tpu7x": {"calendar": 2.4}},
                "source": "calendar mode quote 2026-12",
                "buying": "calendar",
            },
        },
        "pricing.buying",
        "onDemand, committedOneYear or committedThreeYears",
    ),
]
