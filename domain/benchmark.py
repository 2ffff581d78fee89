"""A serving benchmark's result: read from inference-perf's reports, compared, and held to a gate.

The benchmark Job (workloads/benchmark_job.py) runs inference-perf with one load stage per rate and
repetition, in rate order (rate 1 x repetitions, rate 2 x repetitions, ...). inference-perf v0.7.0
writes one `stage_<n>_lifecycle_metrics.json` per stage (inference_perf/reportgen: `load_summary`
with `requested_rate` and `achieved_rate`; `successes` with `count`, `latency.<metric>` percentile
maps keyed `median`, `p90`, `p99`, and `throughput.requests_per_sec` / `output_tokens_per_sec`;
`failures.count`). `from_reports` turns those files into one `Result`; `Result.to_json` is the file
the Job writes and `python -m plan benchmark compare` and `--benchmark` read (`parse`).

Standard library only: the Job ships this module beside pods/benchmark_run.py in its ConfigMap, so the
pod and the plan read the reports with the same code.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMAT = "tpu-slicing/benchmark-result/v1"
LOAD_GENERATOR = "inference-perf"
STAGE_FILE = re.compile(r"stage_(\d+)_lifecycle_metrics\.json")
# The latency figures, by inference-perf's names (reportgen: successes.latency.<name>), in seconds.
LATENCIES = {
    "ttft": "time_to_first_token",
    "tpot": "time_per_output_token",
    "itl": "inter_token_latency",
    "latency": "request_latency",
}
PERCENTILES = {"p50": "median", "p90": "p90", "p99": "p99"}
THROUGHPUTS = {"requestsPerSecond": "requests_per_sec", "outputTokensPerSecond": "output_tokens_per_sec"}


class ResultError(ValueError):
    """A report or result file that is not what inference-perf or the Job writes: one line, naming it."""


@dataclass(frozen=True)
class Stage:
    """One load stage: a rate held for the stage's duration."""

    rate: float  # requested, requests per second
    achieved_rate: float
    successes: int
    failures: int
    figures: Mapping[str, float]  # "ttft.p90" -> seconds, "outputTokensPerSecond" -> tokens/s, ...


@dataclass(frozen=True)
class Result:
    run: str
    load_generator: str
    stages: tuple[Stage, ...]

    def rates(self) -> list[float]:
        return sorted({s.rate for s in self.stages})

    def at(self, rate: float) -> list[Stage]:
        return [s for s in self.stages if s.rate == rate]

    def median(self, rate: float, figure: str) -> float:
        return _median([s.figures[figure] for s in self.at(rate)])

    def spread(self, rate: float, figure: str) -> tuple[float, float]:
        """The least and greatest value of `figure` over the rate's repetitions."""
        values = [s.figures[figure] for s in self.at(rate)]
        return min(values), max(values)

    def figures(self) -> list[str]:
        return sorted(set.intersection(*(set(s.figures) for s in self.stages))) if self.stages else []

    def to_json(self) -> str:
        stages = [
            {
                "rate": s.rate,
                "achievedRate": s.achieved_rate,
                "successes": s.successes,
                "failures": s.failures,
                "figures": dict(sorted(s.figures.items())),
            }
            for s in self.stages
        ]
        body = {"format": FORMAT, "run": self.run, "loadGenerator": self.load_generator, "stages": stages}
        return json.dumps(body, indent=2) + "\n"


def _median(found: Iterable[float]) -> float:
    values = sorted(found)
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ResultError(f"{where}: {value!r} is not a non-negative number")
    return float(value)


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ResultError(f"{where}: {value!r} is not a count")
    return value


def _get(body: Any, path: str, where: str) -> Any:
    for key in path.split("."):
        if not isinstance(body, Mapping) or key not in body:
            raise ResultError(f"{where}: no {path}")
        body = body[key]
    return body


def stage_from_report(report: Mapping[str, Any], where: str) -> Stage:
    """One inference-perf stage report (stage_<n>_lifecycle_metrics.json)."""
    successes = _count(_get(report, "successes.count", where), f"{where} successes.count")
    figures: dict[str, float] = {}
    if successes:
        for short, name in LATENCIES.items():
            latency = _get(report, f"successes.latency.{name}", where)
            if latency is None:  # not measured: time to first token without streaming, for one
                continue
            for label, key in PERCENTILES.items():
                figures[f"{short}.{label}"] = _number(_get(latency, key, where), f"{where} {name}.{key}")
    for short, name in THROUGHPUTS.items():
        figures[short] = _number(_get(report, f"successes.throughput.{name}", where), f"{where} {name}")
    return Stage(
        rate=_number(_get(report, "load_summary.requested_rate", where), f"{where} requested_rate"),
        achieved_rate=_number(_get(report, "load_summary.achieved_rate", where), f"{where} achieved_rate"),
        successes=successes,
        failures=_count(_get(report, "failures.count", where), f"{where} failures.count"),
        figures=figures,
    )


def from_reports(folder: Path, run: str) -> Result:
    """The Result of inference-perf's stage reports in `folder`, in stage order."""
    found = sorted(
        ((int(m.group(1)), path) for path in folder.iterdir() if (m := STAGE_FILE.fullmatch(path.name))),
        key=lambda pair: pair[0],
    )
    if not found:
        raise ResultError(f"{folder}: no stage_<n>_lifecycle_metrics.json: inference-perf wrote no stage report")
    if [n for n, _ in found] != list(range(len(found))):
        raise ResultError(f"{folder}: stage reports {[n for n, _ in found]} are not stages 0 to {len(found) - 1}")
    stages = []
    for _, path in found:
        try:
            report = json.loads(path.read_text())
        except ValueError as err:
            raise ResultError(f"{path.name}: not JSON ({err})") from None
        stages.append(stage_from_report(report, path.name))
    return Result(run, LOAD_GENERATOR, tuple(stages))


def parse(text: str, where: str) -> Result:
    """A result file the Job wrote; a truncated or foreign file is refused in one line."""
    try:
        body = json.loads(text)
    except ValueError as err:
        raise ResultError(f"{where}: not a benchmark result: not JSON ({err.args[0].split(':')[0]})") from None
    if not isinstance(body, Mapping) or body.get("format") != FORMAT:
        raise ResultError(f"{where}: not a benchmark result: its format is not {FORMAT!r}")
    stages = body.get("stages")
    if not isinstance(stages, list) or not stages:
        raise ResultError(f"{where}: not a benchmark result: no stages")
    found = []
    for index, stage in enumerate(stages):
        at = f"{where} stage {index}"
        figures = _get(stage, "figures", at)
        if not isinstance(figures, Mapping):
            raise ResultError(f"{at}: figures is not a mapping")
        found.append(
            Stage(
                rate=_number(_get(stage, "rate", at), f"{at} rate"),
                achieved_rate=_number(_get(stage, "achievedRate", at), f"{at} achievedRate"),
                successes=_count(_get(stage, "successes", at), f"{at} successes"),
                failures=_count(_get(stage, "failures", at), f"{at} failures"),
                figures={str(k): _number(v, f"{at} {k}") for k, v in figures.items()},
            )
        )
    run, generator = body.get("run"), body.get("loadGenerator")
    if not isinstance(run, str) or not isinstance(generator, str):
        raise ResultError(f"{where}: not a benchmark result: run and loadGenerator must be strings")
    return Result(run, generator, tuple(found))


@dataclass(frozen=True)
class Gate:
    """Thresholds every rate must meet (serving.benchmark.gate); None: not gated on that figure."""

    ttft_p90_seconds: float | None = None
    tpot_p90_seconds: float | None = None
    min_output_tokens_per_second: float | None = None
    max_failure_ratio: float | None = None
    min_achieved_rate_ratio: float | None = None

    def misses(self, result: Result) -> list[str]:
        """Each missed figure, as `<figure> at <rate> req/s: <value> (gate: ...)`; the median of the rate's
        repetitions is what is held to the gate, so one slow repetition does not fail a run alone."""
        found = []
        for rate in result.rates():
            stages = result.at(rate)
            if any(s.successes == 0 for s in stages):
                found.append(f"at {rate:g} req/s a stage had no successful request")
                continue
            sent = sum(s.successes + s.failures for s in stages)
            failed = sum(s.failures for s in stages)
            if self.max_failure_ratio is not None and failed / sent > self.max_failure_ratio:
                found.append(
                    f"failures at {rate:g} req/s: {failed} of {sent} requests ({failed / sent:.2%}) is above the "
                    f"gate's {self.max_failure_ratio:.2%}"
                )
            achieved = _median([s.achieved_rate for s in stages]) / rate
            if self.min_achieved_rate_ratio is not None and achieved < self.min_achieved_rate_ratio:
                found.append(
                    f"achieved rate at {rate:g} req/s: {achieved:.2%} of the rate asked is below the gate's "
                    f"{self.min_achieved_rate_ratio:.2%}"
                )
            for figure, limit, worse in (
                ("ttft.p90", self.ttft_p90_seconds, "above"),
                ("tpot.p90", self.tpot_p90_seconds, "above"),
                ("outputTokensPerSecond", self.min_output_tokens_per_second, "below"),
            ):
                if limit is None:
                    continue
                if figure not in result.figures():
                    found.append(f"{figure} at {rate:g} req/s: not measured (gate: {worse} {limit:g} fails)")
                    continue
                value = result.median(rate, figure)
                if (value > limit) if worse == "above" else (value < limit):
                    found.append(f"{figure} at {rate:g} req/s: {value:.4g} is {worse} the gate's {limit:g}")
        return found


@dataclass(frozen=True)
class Comparison:
    figure: str
    rate: float
    before: float
    after: float
    beyond_spread: bool  # the two runs' repetitions do not overlap

    @property
    def ratio(self) -> float | None:
        return self.after / self.before if self.before else None


def compare(before: Result, after: Result) -> list[Comparison]:
    """Each figure at each rate both runs measured: medians, their ratio, and whether the difference
    is larger than the runs' own spread (the ranges of their repetitions do not overlap)."""
    found = []
    figures = sorted(set(before.figures()) & set(after.figures()))
    for rate in sorted(set(before.rates()) & set(after.rates())):
        for figure in figures:
            low_b, high_b = before.spread(rate, figure)
            low_a, high_a = after.spread(rate, figure)
            beyond = high_a < low_b or high_b < low_a
            found.append(Comparison(figure, rate, before.median(rate, figure), after.median(rate, figure), beyond))
    return found


def cost_per_million_tokens(hourly_cost: float, output_tokens_per_second: float) -> float | None:
    """What a million output tokens cost at a measured throughput when the chips cost `hourly_cost` an
    hour whatever they do (reserved chips): None when nothing was produced."""
    if output_tokens_per_second <= 0:
        return None
    return hourly_cost / (output_tokens_per_second * 3600) * 1_000_000


def stage_rates(rates: Sequence[float], repetitions: int) -> list[float]:
    """The load stages the Job asks for: each rate `repetitions` times, in rate order."""
    return [rate for rate in rates for _ in range(repetitions)]


def headline(result: Result) -> dict[str, float]:
    """The figures a stack output shows: at the highest rate, medians of its repetitions."""
    rate = max(result.rates())
    wanted: Iterable[str] = ("ttft.p90", "tpot.p90", "outputTokensPerSecond", "requestsPerSecond")
    return {"rate": rate, **{f: result.median(rate, f) for f in wanted if f in result.figures()}}
