"""The /metrics text of a vLLM v0.26.0 server running tpu-inference's TPUConnectorHMA, for the smoke-test tests.

What it writes, and from where:

- vLLM's prompt-token counters: vLLM v0.26.0, `vllm/v1/metrics/loggers.py` (`PrometheusStatLogger`,
  ~670-705): `vllm:prompt_tokens` (labels `model_name`, `engine`), `vllm:prompt_tokens_by_source` (labels
  `model_name`, `engine`, `source`; one child per source of `PromptTokenStats.ALL_SOURCES` and engine,
  made source by source at start-up) and `vllm:prompt_tokens_cached`. Per prompt (`vllm/v1/metrics/
  stats.py`, `PromptTokenStats`, ~300-345): `local_compute` + `local_cache_hit` + `external_kv_transfer`
  = the prompt's tokens, which is what `vllm:prompt_tokens` gains; `vllm:prompt_tokens_cached` gains
  `local_cache_hit` + `external_kv_transfer`. On decode, `external_kv_transfer` is what the connector's
  `get_num_new_matched_tokens` said it would load (`vllm/v1/core/sched/scheduler.py`, ~760-815); with
  TPUConnectorHMA, every prompt token not cached locally (`tpu_connector_hma.py`,
  `TPUConnectorHMAScheduler.get_num_new_matched_tokens`). `Engine.load_remote_prefill` counts that;
  `Engine.compute_prompt` counts a prompt decode computed itself (decode-only fallback, no KV moved).
- the connector's series: tpu-inference v0.26.0, `tpu_inference/distributed/tpu_connector_stats.py`
  (`TpuKVConnectorPromMetrics`): histograms `vllm:tpu_d2h_slice_time_ms`, `vllm:tpu_d2h_transfer_time_ms`,
  `vllm:tpu_kv_prepare_time_ms`, `vllm:tpu_kv_transfer_time_ms` (ms buckets) and
  `vllm:tpu_kv_megabytes_transferred` (MB buckets), the counter `vllm:tpu_num_failed_transfers` and two
  gauges, every child made at start-up. TPUConnectorHMA (`tpu_connector_hma.py`, `TPUConnectorHMAWorker.
  _pull_kv`, lines 434-487) records none of them: it overrides the pull and only logs
  (`TransferStats.increment_pull`, `transfer_stats.py`), so under HMA they are there and stay at 0.
  Only the non-HMA TPUConnector (`tpu_connector.py`, `_pull_kv`, ~840-870) observes prepare, transfer and
  megabytes once per successful pull (`record_successful_transfer`) and counts a pull not ready in time
  (`record_failed_transfer`); `Engine.pull` and `Engine.fail_pull` stand for that connector.
- their labels: vLLM v0.26.0, `vllm/v1/metrics/loggers.py`: labelnames `["model_name", "engine"]`, one
  child per engine made at start-up (`create_metric_per_engine`), so every series is there, at 0, before
  the first request; handed to the connector by `vllm/distributed/kv_transfer/kv_connector/v1/metrics.py`
  (`KVConnectorProm`).
- the layout: prometheus_client's `generate_latest` (0.26.0): labels sorted by name, a counter's HELP, TYPE and
  sample named with `_total`, a histogram's `_bucket` lines then `_count` then `_sum`, each family's
  `_created` samples after it as a gauge family, children in the order they were made, numbers as Go
  prints them (`0.0`, `+Inf`).

The whole text was compared once with what prometheus_client 0.26.0 itself writes (`generate_latest`)
for the same metrics, children and values, made in vLLM's order: identical but for the `_created`
timestamps.

What it cannot show:

- a timed-out TPUConnectorHMA pull: `_pull_kv` only logs it (`logger.error(... pull timeout ...)`) and
  returns the unready buffers; the scheduler has already counted the prompt as `external_kv_transfer`
  and no metric tells the timeout;
- load errors: tpu-inference does not report them to vLLM (no connector of its v0.26.0 overrides
  `get_block_ids_with_load_errors`, whose base in `vllm/distributed/kv_transfer/kv_connector/v1/base.py`
  returns an empty set), so vLLM never learns of, recomputes or counts a failed load;
- when the real engine publishes the stats (a prompt's counts arrive with its first output, apart from
  the HTTP answer, and can land after it), multiprocess mode (no `_created` samples), and the rest of
  vLLM's families.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping

CREATED = 1.7e9  # a process start time; only its layout matters

MS_BUCKETS = (1.0, 10.0, 100.0, 250.0, 500.0, 750.0, 1000.0, 2500.0, 5000.0, 7500.0, 10000.0, 25000.0, 50000.0)
MB_BUCKETS = (32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0)

_HISTOGRAMS = (
    ("vllm:tpu_d2h_slice_time_ms", "Histogram of D2H slice duration for TPU KV Cache transfers.", MS_BUCKETS, "d2h"),
    (
        "vllm:tpu_d2h_transfer_time_ms",
        "Histogram of D2H transfer duration for TPU KV Cache transfers.",
        MS_BUCKETS,
        "d2h",
    ),
    ("vllm:tpu_kv_prepare_time_ms", "Histogram of prepare duration for TPU KV Cache transfers.", MS_BUCKETS, "prepare"),
    ("vllm:tpu_kv_transfer_time_ms", "Histogram of transfer duration for TPU KV Cache transfers.", MS_BUCKETS, "pull"),
    (
        "vllm:tpu_kv_megabytes_transferred",
        "Histogram of megabytes transferred per TPU KV Cache transfers.",
        MB_BUCKETS,
        "mb",
    ),
)


def go_float(value: float) -> str:
    """A number as prometheus_client writes it (utils.floatToGoString)."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    text = repr(float(value))
    dot = text.find(".")
    if value > 0 and dot > 6:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return text


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _sample(name: str, labels: Mapping[str, str], value: float) -> str:
    inner = ",".join(f'{key}="{_escape(labels[key])}"' for key in sorted(labels))
    return f"{name}{{{inner}}} {go_float(value)}\n" if inner else f"{name} {go_float(value)}\n"


def _family(name: str, kind: str, doc: str, lines: Iterable[str]) -> str:
    return f"# HELP {name} {doc}\n# TYPE {name} {kind}\n" + "".join(lines)


def _created(name: str, doc: str, children: Iterable[Mapping[str, str]]) -> str:
    return _family(f"{name}_created", "gauge", doc, (_sample(f"{name}_created", c, CREATED) for c in children))


SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")  # PromptTokenStats.ALL_SOURCES


@dataclasses.dataclass
class Engine:
    """What one engine of one vLLM server has counted since it started."""

    local_compute: int = 0  # prompt tokens computed here
    local_cache_hit: int = 0  # prompt tokens found in the local prefix cache
    external_kv_transfer: int = 0  # prompt tokens loaded through the KV connector
    pulls_ms: list[float] = dataclasses.field(default_factory=list)  # non-HMA connector: one per successful pull
    failed_pulls: int = 0  # non-HMA connector: pulls not ready in time
    megabytes_per_pull: float = 100.0
    prepare_ms_per_pull: float = 3.0

    @property
    def prompt_tokens(self) -> int:
        return self.local_compute + self.local_cache_hit + self.external_kv_transfer

    def by_source(self, source: str) -> int:
        return {
            "local_compute": self.local_compute,
            "local_cache_hit": self.local_cache_hit,
            "external_kv_transfer": self.external_kv_transfer,
        }[source]

    def load_remote_prefill(self, tokens: int) -> None:
        """Decode took the prompt's KV from prefill through TPUConnectorHMA: counted by source, no connector metric."""
        self.external_kv_transfer += tokens

    def compute_prompt(self, tokens: int) -> None:
        """The prompt was computed here (a prefill pod, or decode when no KV moved)."""
        self.local_compute += tokens

    def pull(self, transfer_ms: float) -> None:
        """A successful pull as the non-HMA TPUConnector records it (TPUConnectorHMA records nothing)."""
        self.pulls_ms.append(transfer_ms)

    def fail_pull(self) -> None:
        """A pull not ready in time as the non-HMA TPUConnector counts it (TPUConnectorHMA only logs it)."""
        self.failed_pulls += 1


def _histogram(
    name: str, doc: str, buckets: tuple[float, ...], per_child: list[tuple[dict[str, str], list[float]]]
) -> str:
    lines: list[str] = []
    for labels, values in per_child:
        for bound in (*buckets, math.inf):
            lines.append(_sample(f"{name}_bucket", {**labels, "le": go_float(bound)}, sum(v <= bound for v in values)))
        lines.append(_sample(f"{name}_count", labels, len(values)))
        lines.append(_sample(f"{name}_sum", labels, sum(values)))
    return _family(name, "histogram", doc, lines) + _created(name, doc, (labels for labels, _ in per_child))


def _counter(name: str, doc: str, samples: list[tuple[dict[str, str], float]]) -> str:
    lines = (_sample(f"{name}_total", labels, value) for labels, value in samples)
    return _family(f"{name}_total", "counter", doc, lines) + _created(name, doc, (labels for labels, _ in samples))


def metrics_text(
    model: str, engines: Mapping[int, Engine], *, tpu_connector: bool = True, by_source: bool = True
) -> str:
    """The families a decode (or prefill) vLLM server shows.

    Without `tpu_connector`, none of the connector's own; without `by_source`, no
    `vllm:prompt_tokens_by_source` (not vLLM v0.26.0's text).
    """
    children = [({"engine": str(index), "model_name": model}, engine) for index, engine in sorted(engines.items())]
    text = _counter(
        "vllm:prompt_tokens", "Number of prefill tokens processed.", [(c, e.prompt_tokens) for c, e in children]
    )
    if by_source:
        text += _counter(
            "vllm:prompt_tokens_by_source",
            "Number of prompt tokens by source.",
            [({**c, "source": source}, e.by_source(source)) for source in SOURCES for c, e in children],
        )
    text += _counter(
        "vllm:prompt_tokens_cached",
        "Number of cached prompt tokens (local + external).",
        [(c, e.local_cache_hit + e.external_kv_transfer) for c, e in children],
    )
    if not tpu_connector:
        return text
    for name, doc, buckets, source in _HISTOGRAMS:
        per_child = []
        for labels, engine in children:
            values = {
                "d2h": [],  # only a producer with TPU_ENABLE_D2H_TRANSFER observes these
                "prepare": [engine.prepare_ms_per_pull] * len(engine.pulls_ms),
                "pull": list(engine.pulls_ms),
                "mb": [engine.megabytes_per_pull] * len(engine.pulls_ms),
            }[source]
            per_child.append((labels, values))
        text += _histogram(name, doc, buckets, per_child)
    text += _counter(
        "vllm:tpu_num_failed_transfers",
        "Number of failed TPU KV Cache transfers.",
        [(c, e.failed_pulls) for c, e in children],
    )
    for name, doc in (
        ("vllm:tpu_num_requests_being_pulled", "Number of requests being pulled."),
        ("vllm:tpu_num_requests_waiting_pull", "Number of requests waiting to be pulled."),
    ):
        text += _family(name, "gauge", doc, (_sample(name, c, 0.0) for c, _ in children))
    return text
