"""What the stack's TPU chips cost: `tpu-slicing:pricing`, set by the user, never defaulted.

Cloud TPU's public list prices are on the Cloud TPU pricing page (cloud.google.com/tpu/pricing),
per chip-hour, by generation and by how the capacity is bought (on demand, reserved, committed);
a negotiated price is the user's own. The plan multiplies the chips of the stack's node pools by
the price of its generation for the way it buys them (a stack bound to a reservation pays the
reserved price), domain/cost.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import AfterValidator, Field

from domain import topology
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


def _currency(value: str) -> str:
    if len(value) != 3 or not value.isascii() or not value.isalpha() or not value.isupper():
        raise ValueError(f"{value!r} is not a currency code; allowed: an ISO 4217 code in capitals, e.g. USD or EUR")
    return value


class PricingConfig(StrictModel):
    currency: Annotated[str, AfterValidator(_currency)]
    chip_hour: Annotated[dict[str, GenerationPrice], AfterValidator(_generations)] = Field(min_length=1)
    source: str = Field(min_length=1, max_length=200)  # where the price comes from: a price list's date, a contract


def buying(config: StackConfig) -> str:
    """How the stack buys its chips: `reserved` when its pools bind a reservation, else `onDemand`."""
    return "reserved" if config.reservation is not None else "onDemand"


def chip_hour(config: StackConfig) -> float | None:
    """The price per chip-hour of the stack's generation as it buys it, or None without pricing."""
    if config.pricing is None:
        return None
    generation = config.tpu.generation if config.serving.dynamic_slicing else config.serving.slice.generation
    price = config.pricing.chip_hour[generation.name]
    return price.reserved if buying(config) == "reserved" else price.on_demand


def check_pricing(config: StackConfig) -> None:
    """pricing: a price for the generation the stack runs, bought the way it buys it."""
    if config.pricing is None:
        return
    generation = config.tpu.generation if config.serving.dynamic_slicing else config.serving.slice.generation
    way = buying(config)
    price = config.pricing.chip_hour.get(generation.name)
    if price is None or (price.reserved if way == "reserved" else price.on_demand) is None:
        given = ", ".join(sorted(config.pricing.chip_hour)) or "none"
        raise ValueError(
            f"pricing.chipHour.{generation.name}.{way} is not set: the stack runs {generation.name} chips "
            f"{'from its reservation' if way == 'reserved' else 'on demand'} (prices given for: {given}); "
            f"allowed: a price per chip-hour, e.g. pricing.chipHour.{generation.name}.{way}: <price>"
        )


REFUSED = [
    RefusedClass(
        "A price for another TPU generation than the stack's",
        check_pricing,
        {"pricing": {"currency": "USD", "chipHour": {"v5e": {"reserved": 1.2}}, "source": "list price 2026-12"}},
        "pricing.chipHour.tpu7x.reserved",
        "a price per chip-hour",
    ),
]
