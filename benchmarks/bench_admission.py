"""Benchmark: the admission model (infra/admission.py) on a full 144-cube tpu7x block.

Builds 1,000 seeded random workloads of mixed shapes and priorities (heavily
oversubscribed, so there is plenty of preemption and re-trying), times
`predict` over a few runs and compares it with a baseline measured in the same
run: sorting the requests and working out each one's chip count, which is the
least any admission model has to do. Prints the figures; no thresholds, no asserts.

Run from the repository root:  python benchmarks/bench_admission.py
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from infra.admission import Request, predict
from infra.topology import CATALOG, Topology

GENERATION = CATALOG["tpu7x"]
CUBES = 144
WORKLOADS = 1000
SEED = 20261101
RUNS = 5
PRIORITIES = (0, 1000, 2000, 3000, 4000)
# (shape, weight, max slices): mostly sub-slices, some super-slices of 2, 4 and 8 cubes.
SHAPES = (
    ("2x2x1", 4, 8),
    ("2x2x2", 5, 8),
    ("2x2x4", 4, 6),
    ("2x4x4", 3, 4),
    ("4x4x4", 2, 3),
    ("4x4x8", 2, 2),
    ("4x8x8", 1, 2),
    ("8x8x8", 1, 1),
)


def workloads(seed: int = SEED, count: int = WORKLOADS) -> list[Request]:
    rng = random.Random(seed)
    names, weights = [s[0] for s in SHAPES], [s[1] for s in SHAPES]
    limits = {s[0]: s[2] for s in SHAPES}
    found = []
    for index in range(count):
        shape = rng.choices(names, weights)[0]
        found.append(
            Request(
                name=f"w{index:04d}",
                priority=rng.choice(PRIORITIES),
                shape=shape,
                slices=rng.randint(1, limits[shape]),
                order=index,
            )
        )
    rng.shuffle(found)  # predict sorts by order itself
    return found


def baseline(requests: list[Request]) -> int:
    """Sort into queue order and total the chips: the floor for any admission model."""
    return sum(Topology.parse(r.shape).chips * r.slices for r in sorted(requests, key=lambda r: (r.order, r.name)))


def timed(function: object, *args: object, runs: int = RUNS) -> tuple[float, list[float]]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        function(*args)  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return statistics.median(times), times


def main() -> None:
    requests = workloads()
    demand = baseline(requests)
    capacity = CUBES * (GENERATION.cube_topology.chips if GENERATION.cube_topology else 0)
    base, _ = timed(baseline, requests)
    model, runs = timed(predict, requests, CUBES, GENERATION)
    result = predict(requests, CUBES, GENERATION)
    actions = Counter(event.action for event in result.events)
    print(f"block: {CUBES} cubes = {capacity} chips; {len(requests)} workloads asking for {demand} chips")
    print(
        f"outcome: {len(result.admitted)} admitted, {len(result.pending)} pending, "
        f"{result.chips_in_use} chips in use; events: "
        + ", ".join(f"{count} {action}" for action, count in sorted(actions.items()))
    )
    print(
        f"predict: median {model * 1e3:.1f} ms over {RUNS} runs (min {min(runs) * 1e3:.1f}, max {max(runs) * 1e3:.1f})"
    )
    print(f"         first run (cold free-space cache) {runs[0] * 1e3:.1f} ms")
    print(f"         {model / len(requests) * 1e6:.1f} us per workload")
    print(f"baseline (sort + chip totals): median {base * 1e3:.2f} ms")
    print(f"ratio predict / baseline: {model / base:.0f}x")


if __name__ == "__main__":
    main()
