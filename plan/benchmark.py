"""Benchmark results beside the plan: `python -m plan benchmark compare A.json B.json`, and the cost
of a million output tokens at each measured rate (`python -m plan --benchmark FILE`).

The files are the `result.json` the benchmark Job writes to `gs://<weightsBucket>/benchmarks/<namePrefix>/<run>/`
(workloads/benchmark_job.py); domain/benchmark.py reads them, as the Job's own program does.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from domain import benchmark, bounded_input
from plan import cost
from settings.model import StackConfig


def read(path: Path) -> benchmark.Result:
    """A result file, or SystemExit with its one-line refusal."""
    try:
        text = bounded_input.read_text(path)
        # Bounded here: domain/benchmark.py ships into the Job beside its program, standard library only.
        bounded_input.load_json(text)
    except bounded_input.InputError as err:
        raise SystemExit(f"error: {path} {err}") from None
    try:
        return benchmark.parse(text, str(path))
    except benchmark.ResultError as err:
        raise SystemExit(f"error: {err}") from None


def _value(figure: str, value: float) -> str:
    return f"{value * 1000:.1f} ms" if "." in figure else f"{value:.1f}/s"


def compare_lines(before: benchmark.Result, after: benchmark.Result) -> list[str]:
    rows = benchmark.compare(before, after)
    if not rows:
        return [f"no rate measured by both {before.run!r} and {after.run!r}: nothing to compare"]
    reps = (len(before.stages) // len(before.rates()), len(after.stages) // len(after.rates()))
    shown = [f"{before.run} -> {after.run} (medians of {reps[0]} and {reps[1]} repetitions per rate)"]
    for row in rows:
        ratio = f"x{row.ratio:.2f}" if row.ratio is not None else "x-"
        spread = "beyond the runs' spread" if row.beyond_spread else "within the runs' spread"
        shown.append(
            f"  {row.rate:g} req/s {row.figure:<22} {_value(row.figure, row.before):>12} -> "
            f"{_value(row.figure, row.after):>12}  {ratio:>7}  {spread}"
        )
    return shown


def cost_lines(config: StackConfig, result: benchmark.Result) -> list[str]:
    """What a million output tokens cost at each measured rate, charged with the chips the serving
    roles hold (plan/cost.py serving_chips): the benchmark measured them. The stack's other chips
    (slicing checks, idle) are shown apart, per hour, and not charged to tokens."""
    found = cost.costs(config)
    header = f"Cost per million output tokens (benchmark {result.run!r}):"
    if found is None or config.pricing is None:
        return [header, cost.NOT_SET]
    price, currency = found["planned"].chip_hour, config.pricing.currency
    serving = cost.serving_chips(config)
    hourly = serving * price
    shown = [header, f"  charged with the {serving} chips the serving roles hold: {currency} {hourly:,.2f} an hour"]
    for rate in result.rates():
        throughput = result.median(rate, "outputTokensPerSecond")
        each = benchmark.cost_per_million_tokens(hourly, throughput)
        priced = f"{currency} {each:,.2f}" if each is not None else "no tokens produced"
        shown.append(f"  at {rate:g} req/s: {throughput:.1f} output tokens/s, {priced} per million")
    apart = found["planned"].reserved - serving
    if apart:
        shown.append(
            f"  apart: the stack's other {apart} chips (slicing checks and idle) cost {currency} "
            f"{apart * price:,.2f} an hour, not charged to tokens"
        )
    return shown


def command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m plan benchmark", description=__doc__)
    sub = parser.add_subparsers(dest="action", required=True)
    compare = sub.add_parser("compare", help="two benchmark results side by side")
    compare.add_argument("before", type=Path)
    compare.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    print("\n".join(compare_lines(read(args.before), read(args.after))))
    return 0
