"""The serving benchmark: `serving.benchmark`, off by default, run after the smoke test passes.

A sweep of request rates, each held `stageSeconds` and repeated `repetitions` times (the spread of
the repetitions is what `python -m plan benchmark compare` measures a difference against), with
prompts and answers of fixed token lengths, sent to the internal gateway by inference-perf
(workloads/benchmark_job.py says why that load generator). A `gate` turns figures into an SLO: a
missed figure fails the Job and so the `pulumi up` that waits for it.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Annotated

from pydantic import AfterValidator, Field, model_validator

from domain.benchmark import stage_rates
from settings import rules_serving
from settings.base import ProblemsError, StrictModel
from settings.refused import RefusedClass
from settings.rules_backends import Backend

if TYPE_CHECKING:
    from settings.model import StackConfig

Rate = Annotated[float, Field(gt=0, le=1000, allow_inf_nan=False)]
Seconds = Annotated[float, Field(gt=0, le=3600, allow_inf_nan=False)]
# All stages together: a benchmark that holds the serving stack longer than this is a load test,
# not a check of a change (and `pulumi up` waits for it).
MAX_LOAD_SECONDS = 4 * 3600
# inference-perf's default tokenizer load deadline (config/utils CustomTokenizerConfig.load_timeout)
# and a minute per stage for its in-flight requests to drain: what the Job's deadline adds to the load.
TOKENIZER_LOAD_SECONDS = 300
DRAIN_SECONDS_PER_STAGE = 60


class BenchmarkGate(StrictModel):
    """Each figure, at every rate (the median of its repetitions): a miss fails the Job."""

    ttft_p90_seconds: Seconds | None = None
    tpot_p90_seconds: Seconds | None = None
    min_output_tokens_per_second: Annotated[float, Field(gt=0, le=10_000_000, allow_inf_nan=False)] | None = None

    @model_validator(mode="after")
    def _something(self) -> BenchmarkGate:
        if (
            self.ttft_p90_seconds is None
            and self.tpot_p90_seconds is None
            and self.min_output_tokens_per_second is None
        ):
            raise ValueError(
                "a gate with no threshold gates nothing; allowed: at least one of ttftP90Seconds, tpotP90Seconds, "
                "minOutputTokensPerSecond"
            )
        return self


def _increasing(rates: list[float]) -> list[float]:
    if any(later <= earlier for earlier, later in itertools.pairwise(rates)):
        raise ValueError(f"{rates} is not a sweep; allowed: rates in increasing order, each once")
    return rates


class BenchmarkConfig(StrictModel):
    enabled: bool = False
    # Tells one benchmark run from another (the results' folder); unset: the serving spec's fingerprint.
    run_id: Annotated[str | None, AfterValidator(rules_serving.run_id)] = None
    rates: Annotated[list[Rate], AfterValidator(_increasing)] = Field(
        default_factory=lambda: [1.0, 4.0], min_length=1, max_length=8
    )
    stage_seconds: int = Field(120, ge=10, le=3600)
    repetitions: int = Field(3, ge=1, le=5)
    input_tokens: int = Field(1024, ge=1, le=1_048_576)
    output_tokens: int = Field(256, ge=1, le=1_048_576)
    gate: BenchmarkGate | None = None

    @property
    def load_seconds(self) -> int:
        return len(stage_rates(self.rates, self.repetitions)) * self.stage_seconds

    @property
    def deadline_seconds(self) -> int:
        stages = len(self.rates) * self.repetitions
        return self.load_seconds + TOKENIZER_LOAD_SECONDS + DRAIN_SECONDS_PER_STAGE * stages


def check_benchmark(config: StackConfig) -> None:
    """serving.benchmark: what the benchmark needs of the rest of the stack."""
    bench = config.serving.benchmark
    if not bench.enabled:
        return
    problems = []
    if config.serving.backend is not Backend.VLLM_PD:
        problems.append(
            f"serving.benchmark.enabled: the benchmark drives vLLM's OpenAI completions API behind the gateway, "
            f"and serving.backend is {config.serving.backend.value!r}; allowed: serving.backend vllm-pd, or "
            "serving.benchmark.enabled false"
        )
    if not config.serving.smoke_test.enabled:
        problems.append(
            "serving.benchmark.enabled: the benchmark runs after the smoke test passes, and "
            "serving.smokeTest.enabled is false; allowed: serving.smokeTest.enabled true"
        )
    if config.serving.model.weights_bucket is None:
        problems.append(
            "serving.benchmark.enabled: the benchmark reads the model's tokenizer from serving.model.weightsBucket "
            "and writes its results there, and none is set; allowed: a bucket in serving.model.weightsBucket"
        )
    tokens = bench.input_tokens + bench.output_tokens
    if tokens > config.serving.vllm.max_model_len:
        problems.append(
            f"serving.benchmark.inputTokens: {bench.input_tokens} prompt and {bench.output_tokens} answer tokens "
            f"are {tokens}, more than serving.vllm.maxModelLen {config.serving.vllm.max_model_len}: vLLM refuses "
            f"every such request; allowed: inputTokens + outputTokens at most {config.serving.vllm.max_model_len}"
        )
    if bench.load_seconds > MAX_LOAD_SECONDS:
        problems.append(
            f"serving.benchmark.stageSeconds: {len(bench.rates)} rates x {bench.repetitions} repetitions x "
            f"{bench.stage_seconds} s hold the serving stack {bench.load_seconds} s, and pulumi up waits for it; "
            f"allowed: at most {MAX_LOAD_SECONDS} s of load in all"
        )
    if problems:
        raise ProblemsError(problems)


def _benchmark(**fields: object) -> dict[str, object]:
    return {"serving": {"benchmark": {"enabled": True, **fields}}}


REFUSED = [
    RefusedClass(
        "A benchmark whose prompt and answer are longer than the server's context",
        check_benchmark,
        _benchmark(inputTokens=9000, outputTokens=512),
        "serving.benchmark.inputTokens",
        "inputTokens + outputTokens at most",
    ),
    RefusedClass(
        "A benchmark that holds the serving stack for hours",
        check_benchmark,
        _benchmark(rates=[1, 2, 4, 8], repetitions=5, stageSeconds=1800),
        "serving.benchmark.stageSeconds",
        f"at most {MAX_LOAD_SECONDS} s",
    ),
    RefusedClass(
        "A benchmark without the smoke test it runs after",
        check_benchmark,
        {**_benchmark(), "serving": {"benchmark": {"enabled": True}, "smokeTest": {"enabled": False}}},
        "serving.benchmark.enabled",
        "serving.smokeTest.enabled true",
    ),
    RefusedClass(
        "A benchmark sweep out of order",
        _increasing,
        _benchmark(rates=[4, 1]),
        "serving.benchmark.rates",
        "rates in increasing order",
    ),
    RefusedClass(
        "A benchmark gate with no threshold",
        BenchmarkGate._something,
        _benchmark(gate={}),
        "serving.benchmark.gate",
        "at least one of",
    ),
]
