"""The serving benchmark: `serving.benchmark`, off by default, run after the smoke test passes.

A sweep of request rates, each held `stageSeconds` and repeated `repetitions` times (the spread of
the repetitions is what `python -m plan benchmark compare` measures a difference against), with
prompts and answers of fixed token lengths, sent to the internal gateway by inference-perf
(workloads/benchmark_job.py says why that load generator). A `gate` turns figures into an SLO: a
missed figure fails the Job and so the `pulumi up` that waits for it.
"""

from __future__ import annotations

import itertools
import math
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
# and its pause between stages (config/loadgen/config.py LoadConfig.interval, 1.0 s): with each
# stage's in-flight requests cut at requestTimeoutSeconds (LoadConfig.request_timeout), what the
# Job's deadline adds to the load.
TOKENIZER_LOAD_SECONDS = 300
STAGE_INTERVAL_SECONDS = 1

# The benchmark pod's memory limit (workloads/benchmark_job.py), and what inference-perf v0.7.0 holds
# of it by the run's end: every request's RequestLifecycleMetric, with the request's body and the raw
# server-sent events of its answer (apis/base.py; client/modelserver/openai_client.py `response_data`),
# kept by the request collector for the reports (metrics/request_collector/multiprocess.py), beside
# the program itself and its worker processes (LoadConfig.num_workers). Measured with the real program
# against the vLLM stand-in (2026-12-07, 200 and 800 requests: about 235 MiB at start, 6 KiB a
# request, 5.5 bytes an input token and 610 an output token, whose events repeat the request's id and
# model name; each worker 160 MiB resident), rounded up here; tests/test_benchmark_run.py measures the
# main process again on every run and holds these figures to it.
LOADGEN_MEMORY_LIMIT_GIB = 8
LOADGEN_BASE_BYTES = 256 * 2**20
LOADGEN_WORKER_BYTES = 192 * 2**20
LOADGEN_REQUEST_BYTES = 8 * 2**10
LOADGEN_INPUT_TOKEN_BYTES = 8
LOADGEN_OUTPUT_TOKEN_BYTES = 640


def loadgen_request_bytes(input_tokens: int, output_tokens: int) -> int:
    """What inference-perf keeps of one request until the run ends."""
    return LOADGEN_REQUEST_BYTES + input_tokens * LOADGEN_INPUT_TOKEN_BYTES + output_tokens * LOADGEN_OUTPUT_TOKEN_BYTES


class BenchmarkGate(StrictModel):
    """Each figure, at every rate (the median of its repetitions): a miss fails the Job."""

    ttft_p90_seconds: Seconds | None = None
    tpot_p90_seconds: Seconds | None = None
    min_output_tokens_per_second: Annotated[float, Field(gt=0, le=10_000_000, allow_inf_nan=False)] | None = None
    # Failed requests over all sent, at each rate (every repetition's counts together).
    max_failure_ratio: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)] | None = None
    # The rate inference-perf achieved over the rate asked, at each rate (the median of the
    # repetitions): a server that falls behind sends fewer requests than the sweep says.
    min_achieved_rate_ratio: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] | None = None

    @model_validator(mode="after")
    def _something(self) -> BenchmarkGate:
        if all(getattr(self, name) is None for name in type(self).model_fields):
            raise ValueError(
                "a gate with no threshold gates nothing; allowed: at least one of ttftP90Seconds, tpotP90Seconds, "
                "minOutputTokensPerSecond, maxFailureRatio, minAchievedRateRatio"
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
    # inference-perf's own limits, stated rather than left to its defaults: a request still running
    # after this is cut and counted failed (LoadConfig.request_timeout, unset upstream: no limit, so a
    # hung request would hold the Job to its deadline); and its worker processes (LoadConfig.num_workers,
    # upstream the machine's CPU count, the node's and not the pod's), each the pod's CPU request.
    request_timeout_seconds: int = Field(60, ge=1, le=3600)
    num_workers: int = Field(2, ge=1, le=16)
    gate: BenchmarkGate | None = None

    @property
    def load_seconds(self) -> int:
        return len(stage_rates(self.rates, self.repetitions)) * self.stage_seconds

    @property
    def requests(self) -> float:
        """The requests the whole run sends: each stage's rate for its seconds."""
        return sum(stage_rates(self.rates, self.repetitions)) * self.stage_seconds

    @property
    def loadgen_bytes(self) -> float:
        each = loadgen_request_bytes(self.input_tokens, self.output_tokens)
        return LOADGEN_BASE_BYTES + self.num_workers * LOADGEN_WORKER_BYTES + self.requests * each

    @property
    def deadline_seconds(self) -> int:
        """The load, the tokenizer's load deadline, and per stage the pause before it and the longest
        an in-flight request may run after it ends."""
        stages = len(stage_rates(self.rates, self.repetitions))
        return (
            self.load_seconds
            + TOKENIZER_LOAD_SECONDS
            + (STAGE_INTERVAL_SECONDS + self.request_timeout_seconds) * stages
        )


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
    slowest = bench.rates[0]
    if slowest * bench.stage_seconds < 1:
        problems.append(
            f"serving.benchmark.rates: {slowest:g} req/s for {bench.stage_seconds} s is "
            f"{slowest * bench.stage_seconds:g} requests a stage, so the stage may send none and measures "
            f"nothing; allowed: rates x stageSeconds at least 1 (e.g. stageSeconds {math.ceil(1 / slowest)})"
        )
    problems += _impossible_gate(bench)
    limit = LOADGEN_MEMORY_LIMIT_GIB * 2**30
    if bench.loadgen_bytes > limit:
        each = loadgen_request_bytes(bench.input_tokens, bench.output_tokens)
        most = (limit - LOADGEN_BASE_BYTES - bench.num_workers * LOADGEN_WORKER_BYTES) // each
        problems.append(
            f"serving.benchmark.rates: {len(stage_rates(bench.rates, bench.repetitions))} stages of "
            f"{bench.stage_seconds} s send {bench.requests:,.0f} requests, and inference-perf keeps each one's body "
            f"and raw answer ({bench.input_tokens} + {bench.output_tokens} tokens: about {each / 2**10:.0f} KiB) "
            f"until the run ends, about {bench.loadgen_bytes / 2**30:.1f} GiB in all: more than the benchmark pod's "
            f"{LOADGEN_MEMORY_LIMIT_GIB} GiB memory limit, so it is killed before it uploads a result; allowed: "
            f"at most {most:,} requests at these token counts (lower rates, fewer repetitions or shorter stageSeconds)"
        )
    if bench.load_seconds > MAX_LOAD_SECONDS:
        problems.append(
            f"serving.benchmark.stageSeconds: {len(bench.rates)} rates x {bench.repetitions} repetitions x "
            f"{bench.stage_seconds} s hold the serving stack {bench.load_seconds} s, and pulumi up waits for it; "
            f"allowed: at most {MAX_LOAD_SECONDS} s of load in all"
        )
    if problems:
        raise ProblemsError(problems)


def _impossible_gate(bench: BenchmarkConfig) -> list[str]:
    """Gates no run can pass for the configured lengths, rates and timeout."""
    gate, found = bench.gate, list[str]()
    if gate is None:
        return found
    slowest = bench.rates[0]
    # Every answer is outputTokens long (ignore_eos), so a stage makes at most rate x outputTokens
    # tokens a second, and the gate holds every rate to its floor.
    most = slowest * bench.output_tokens
    if gate.min_output_tokens_per_second is not None and gate.min_output_tokens_per_second > most:
        found.append(
            f"serving.benchmark.gate.minOutputTokensPerSecond: {gate.min_output_tokens_per_second:g} tokens/s at "
            f"every rate, and the slowest rate, {slowest:g} req/s of {bench.output_tokens} tokens, makes at most "
            f"{most:g}; allowed: at most {most:g}, or a higher first rate"
        )
    if gate.ttft_p90_seconds is not None and gate.tpot_p90_seconds is not None:
        # A request at the gate's p90 latencies: first token, then the rest at the time per token.
        longest = gate.ttft_p90_seconds + gate.tpot_p90_seconds * (bench.output_tokens - 1)
        if longest > bench.request_timeout_seconds:
            found.append(
                f"serving.benchmark.requestTimeoutSeconds: {bench.request_timeout_seconds} s, and a request within "
                f"the gate (first token in {gate.ttft_p90_seconds:g} s, {bench.output_tokens - 1} more at "
                f"{gate.tpot_p90_seconds:g} s) takes {longest:g} s: cut as failed while it passes the gate; allowed: "
                f"requestTimeoutSeconds at least {math.ceil(longest)}"
            )
    return found


def _benchmark(**fields: object) -> dict[str, object]:
    return {"serving": {"benchmark": {"enabled": True, **fields}}}


REFUSED = [
    RefusedClass(
        "A benchmark whose requests outgrow the load generator's memory",
        check_benchmark,
        _benchmark(rates=[100, 200], repetitions=2, stageSeconds=600),
        "serving.benchmark.rates",
        "requests at these token counts",
    ),
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
        "A benchmark stage too short for one request",
        check_benchmark,
        _benchmark(rates=[0.05, 1], stageSeconds=10),
        "serving.benchmark.rates",
        "rates x stageSeconds at least 1",
    ),
    RefusedClass(
        "A benchmark gate on more tokens than the rates can make",
        check_benchmark,
        _benchmark(rates=[1, 4], outputTokens=128, gate={"minOutputTokensPerSecond": 500}),
        "serving.benchmark.gate.minOutputTokensPerSecond",
        "or a higher first rate",
    ),
    RefusedClass(
        "A benchmark request timeout shorter than a request the gate passes",
        check_benchmark,
        _benchmark(outputTokens=1024, requestTimeoutSeconds=30, gate={"ttftP90Seconds": 2, "tpotP90Seconds": 0.05}),
        "serving.benchmark.requestTimeoutSeconds",
        "requestTimeoutSeconds at least",
    ),
    RefusedClass(
        "A benchmark gate with no threshold",
        BenchmarkGate._something,
        _benchmark(gate={}),
        "serving.benchmark.gate",
        "at least one of",
    ),
]
