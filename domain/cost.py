"""What a stack's TPU chips cost, and how much of that pays for chips no workload holds (no Pulumi).

A node pool's TPU VMs are billed while they exist, busy or idle; a reservation bills its capacity
whether or not a pool uses it. So the figure a reviewer needs beside a capacity change is what the
stack's chips cost a month, and what the chips that no admitted workload holds cost: the idle part.
Prices are the user's (`tpu-slicing:pricing`): list prices change and negotiated ones are private,
so the program has no default price.
"""

from __future__ import annotations

from dataclasses import dataclass

# A month as cloud bills average it: 365 days x 24 hours / 12.
HOURS_PER_MONTH = 730


@dataclass(frozen=True)
class ChipCost:
    """The cost of `reserved` chips at `chip_hour` a chip-hour, of which workloads hold `held`."""

    reserved: int  # chips in the stack's TPU node pools
    held: int  # chips admitted workloads hold
    chip_hour: float  # price per chip-hour

    def __post_init__(self) -> None:
        if self.reserved < 0 or self.chip_hour < 0:
            raise ValueError(f"chips and prices are not negative: {self.reserved} chips at {self.chip_hour}")
        if not 0 <= self.held <= self.reserved:
            raise ValueError(f"workloads hold {self.held} chips of the stack's {self.reserved}")

    @property
    def idle(self) -> int:
        return self.reserved - self.held

    @property
    def monthly(self) -> float:
        return self.reserved * self.chip_hour * HOURS_PER_MONTH

    @property
    def idle_monthly(self) -> float:
        return self.idle * self.chip_hour * HOURS_PER_MONTH

    @property
    def idle_share(self) -> float:
        return self.idle / self.reserved if self.reserved else 0.0


def money(amount: float, currency: str) -> str:
    """`1234567.891` -> `USD 1,234,568` (whole units: a monthly figure, not an invoice)."""
    return f"{currency} {amount:,.0f}"
