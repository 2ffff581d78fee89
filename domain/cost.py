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


@dataclass(frozen=True)
class BlockCost:
    """A reservation block's chips, priced: the reservation bills every one of them, whether a node
    pool takes it or not (Compute Engine, "Reservations of Compute Engine zonal resources": a
    reservation is charged for its whole capacity while it exists). For one stack `pools` are its
    own; for a fleet, every stack's on the block (their sums).

    Of the chips in pools, `held` are held by admitted workloads, `serving` of them by serving roles
    (the rest by slicing checks); the pools' other chips are idle; the block's chips in no pool are
    unclaimed."""

    block: int
    pools: int
    held: int
    serving: int
    chip_hour: float

    def __post_init__(self) -> None:
        if self.chip_hour < 0:
            raise ValueError(f"a price is not negative: {self.chip_hour}")
        if not 0 <= self.serving <= self.held <= self.pools <= self.block:
            raise ValueError(
                f"chips must nest, serving <= held <= in pools <= in the block: "
                f"{self.serving}, {self.held}, {self.pools}, {self.block}"
            )

    @property
    def checks(self) -> int:
        return self.held - self.serving

    @property
    def idle(self) -> int:
        return self.pools - self.held

    @property
    def unclaimed(self) -> int:
        return self.block - self.pools

    def monthly(self, chips: int) -> float:
        return chips * self.chip_hour * HOURS_PER_MONTH

    def parts(self) -> dict[str, int]:
        """The block's chips in four parts that sum to it."""
        return {"serving": self.serving, "checks": self.checks, "idle": self.idle, "unclaimed": self.unclaimed}

    def __add__(self, other: BlockCost) -> BlockCost:
        """Two stacks' shares of one block, at one price: the block once, their pools summed."""
        if other.block != self.block or other.chip_hour != self.chip_hour:
            raise ValueError("shares of one block at one price add; these differ in size or price")
        return BlockCost(
            self.block, self.pools + other.pools, self.held + other.held, self.serving + other.serving, self.chip_hour
        )


def money(amount: float, currency: str) -> str:
    """`1234567.891` -> `USD 1,234,568` (whole units: a monthly figure, not an invoice)."""
    return f"{currency} {amount:,.0f}"
