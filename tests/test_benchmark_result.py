"""Reading, comparing and gating benchmark results (domain/benchmark.py), and what a million output
tokens cost at a measured throughput (plan/benchmark.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain import benchmark
from plan import benchmark as plan_benchmark
from settings import capacity
from tests.conftest import config_with

PRICING = {"currency": "USD", "chipHour": {"tpu7x": {"reserved": 2.0}}, "source": "example price"}


def _stage(rate: float, ttft: float, tokens_per_second: float, successes: int = 10) -> benchmark.Stage:
    figures = {"ttft.p50": ttft, "ttft.p90": ttft * 1.5, "tpot.p90": 0.01, "outputTokensPerSecond": tokens_per_second}
    return benchmark.Stage(rate, rate, successes, 0, figures)


def _result(run: str, *stages: benchmark.Stage) -> benchmark.Result:
    return benchmark.Result(run, "inference-perf", stages)


def test_a_result_survives_its_own_file() -> None:
    result = _result("a", _stage(1, 0.1, 50), _stage(1, 0.12, 52), _stage(4, 0.3, 180))
    again = benchmark.parse(result.to_json(), "result.json")
    assert again == result
    assert again.median(1, "ttft.p50") == pytest.approx(0.11)
    assert again.spread(1, "ttft.p50") == (0.1, 0.12)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"format": "tpu-slicing/benchmark-result/v1", "run": "a", "stages": [{"rate": 1', "not JSON"),
        ("{}", "its format is not"),
        ('{"format": "tpu-slicing/benchmark-result/v1", "run": "a", "loadGenerator": "x", "stages": []}', "no stages"),
        (
            '{"format": "tpu-slicing/benchmark-result/v1", "run": "a", "loadGenerator": "x", "stages": [{"rate": 1,'
            ' "achievedRate": 1, "successes": 1, "failures": 0, "figures": {"ttft.p50": -1}}]}',
            "is not a non-negative number",
        ),
    ],
)
def test_a_truncated_or_foreign_file_is_refused_in_one_line(text: str, said: str, tmp_path: Path) -> None:
    with pytest.raises(benchmark.ResultError) as err:
        benchmark.parse(text, "r.json")
    assert said in str(err.value) and "\n" not in str(err.value)
    path = tmp_path / "r.json"
    path.write_text(text)
    done = subprocess.run(
        [sys.executable, "-m", "plan", "benchmark", "compare", str(path), str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and said in done.stderr


def test_reports_in_a_gap_are_refused(tmp_path: Path) -> None:
    (tmp_path / "stage_1_lifecycle_metrics.json").write_text("{}")
    with pytest.raises(benchmark.ResultError, match="are not stages 0 to 0"):
        benchmark.from_reports(tmp_path, "a")


def test_a_stage_report_without_its_figures_is_refused(tmp_path: Path) -> None:
    report = {"load_summary": {"requested_rate": 1, "achieved_rate": 1}, "successes": {"count": 3}, "failures": {}}
    (tmp_path / "stage_0_lifecycle_metrics.json").write_text(json.dumps(report))
    with pytest.raises(benchmark.ResultError, match=r"no successes\.latency\.time_to_first_token"):
        benchmark.from_reports(tmp_path, "a")


def test_the_gate_holds_each_rates_median_and_names_the_figure() -> None:
    result = _result("a", _stage(1, 0.1, 50), _stage(1, 0.5, 50), _stage(1, 0.1, 50), _stage(4, 0.4, 40))
    gate = benchmark.Gate(ttft_p90_seconds=0.5, min_output_tokens_per_second=45)
    assert gate.misses(result) == [
        "ttft.p90 at 4 req/s: 0.6 is above the gate's 0.5",
        "outputTokensPerSecond at 4 req/s: 40 is below the gate's 45",
    ]
    failed = _result("b", _stage(1, 0.1, 50, successes=0))
    assert gate.misses(failed) == ["at 1 req/s a stage had no successful request"]


def test_the_gate_judges_failed_requests_and_the_rate_achieved() -> None:
    """Latency alone passed a run whose server failed a request in five and fell behind the sweep:
    inference-perf reports both (failures.count, load_summary.achieved_rate) and the gate now holds
    them, at each rate (failures over every repetition's requests, the achieved rate's median)."""
    healthy = benchmark.Stage(4, 4.0, 100, 0, {"ttft.p90": 0.2})
    failing = benchmark.Stage(4, 4.0, 80, 20, {"ttft.p90": 0.2})
    behind = benchmark.Stage(4, 2.6, 100, 0, {"ttft.p90": 0.2})
    latency_only = benchmark.Gate(ttft_p90_seconds=0.5)
    assert latency_only.misses(_result("a", failing, behind, behind)) == []
    gate = benchmark.Gate(ttft_p90_seconds=0.5, max_failure_ratio=0.05, min_achieved_rate_ratio=0.9)
    assert gate.misses(_result("a", healthy, healthy, healthy)) == []
    assert gate.misses(_result("a", failing, healthy, healthy)) == [
        "failures at 4 req/s: 20 of 300 requests (6.67%) is above the gate's 5.00%"
    ]
    assert gate.misses(_result("a", behind, behind, healthy)) == [
        "achieved rate at 4 req/s: 65.00% of the rate asked is below the gate's 90.00%"
    ]


def test_overlapping_repetitions_are_within_the_spread() -> None:
    before = _result("a", _stage(1, 0.10, 50), _stage(1, 0.20, 50))
    after = _result("b", _stage(1, 0.15, 50), _stage(1, 0.25, 50))
    (row,) = [r for r in benchmark.compare(before, after) if r.figure == "ttft.p50"]
    assert not row.beyond_spread and row.ratio == pytest.approx(0.2 / 0.15)


@given(
    hourly=st.floats(min_value=0.01, max_value=1e6, allow_nan=False),
    rate=st.floats(min_value=0.001, max_value=1e7, allow_nan=False),
)
def test_a_million_tokens_cost_what_the_hours_they_take_cost(hourly: float, rate: float) -> None:
    each = benchmark.cost_per_million_tokens(hourly, rate)
    assert each is not None and each > 0
    hours = 1_000_000 / rate / 3600
    assert each == pytest.approx(hourly * hours)
    faster = benchmark.cost_per_million_tokens(hourly, rate * 2)
    assert faster is not None and faster == pytest.approx(each / 2)


def test_nothing_produced_has_no_price() -> None:
    assert benchmark.cost_per_million_tokens(10.0, 0.0) is None


def test_the_plan_prices_a_million_tokens_with_the_serving_chips_and_shows_the_rest_apart() -> None:
    """dev: 2 cubes (128 chips); its serving roles hold 4 + 4 groups of 2x2x2 (64 chips) at the planned
    load, so a token is charged with 64 chips; the subslicing check's 6 x 8 chips and the idle 16 are
    the other 64, shown apart. Before, a token was charged with all 128: twice its cost."""
    config = config_with({"pricing": PRICING, "checks": {"subslicing": {"enabled": True}}})
    assert capacity.capacity(config).chips == 128
    lines = plan_benchmark.cost_lines(config, _result("a", _stage(1, 0.1, 400), _stage(4, 0.2, 1000)))
    hourly = 64 * 2.0
    assert lines[1] == "  charged with the 64 chips the serving roles hold: USD 128.00 an hour"
    assert lines[2] == f"  at 1 req/s: 400.0 output tokens/s, USD {hourly / (400 * 3600) * 1e6:,.2f} per million"
    assert lines[3].startswith("  at 4 req/s: 1000.0 output tokens/s")
    apart = "  apart: the stack's other 64 chips (slicing checks and idle) cost USD 128.00 an hour"
    assert lines[4] == f"{apart}, not charged to tokens"
    unpriced = plan_benchmark.cost_lines(config_with(), _result("a", _stage(1, 0.1, 400)))
    assert "pricing is not set" in unpriced[1]
